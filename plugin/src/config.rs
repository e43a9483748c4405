//! The plugin's configuration: the mesh node's (`RDMESH_*`, read by
//! [`rdmesh_host::mesh::MeshConfig::from_env`]: `RDMESH_HCA` device selection in NCCL's
//! `^=name:port` syntax, `RDMESH_AUTH_KEY`, `RDMESH_RELAY`, …) plus the variables only the
//! plugin reads:
//!
//! | variable | default | meaning |
//! |---|---|---|
//! | `RDMESH_NICS` | discovered | explicit NIC list `[netdev=]addr/prefix[@Gb/s],...`, e.g. `lo=127.0.1.1/24` (tests, loopback, hosts whose discovery should be bypassed); `vfio:BDF=addr/prefix` makes a NIC of a ConnectX function bound to vfio-pci (`vfio:0000:01:00.0=10.10.1.11/24`) |
//! | `RDMESH_PROVIDER` | soft | the provider of every other NIC's device: `soft`, `model` or `vfio:BDF` (read by the mesh node) |
//! | `RDMESH_FINALIZE_WAIT_MS` | 5000 | how long the last `finalize` waits for rdmesh's threads to exit, ms |
//! | `RDMESH_MAX_REQUESTS` | 256 | requests in flight per comm before `isend`/`irecv` return a NULL request (32..=4096; NCCL needs 32, and 32 × maxRecvs on the send side) |

use std::net::IpAddr;
use std::time::Duration;

use rdmesh_host::mesh::{MeshConfig, NicSpec};
use rdmesh_host::topo::IfAddr;

use crate::error::{PluginError, Result};

/// Explicit NIC list variable.
pub const NICS_ENV: &str = "RDMESH_NICS";
/// Finalize wait variable.
pub const FINALIZE_WAIT_ENV: &str = "RDMESH_FINALIZE_WAIT_MS";
/// Requests-in-flight variable.
pub const MAX_REQUESTS_ENV: &str = "RDMESH_MAX_REQUESTS";
/// Default requests in flight per comm: NCCL's 32 × maxRecvs (8).
pub const DEFAULT_MAX_REQUESTS: usize = 256;

/// What the plugin runs with.
#[derive(Debug, Clone)]
pub struct PluginConfig {
    /// The mesh node's configuration.
    pub mesh: MeshConfig,
    /// How long the last `finalize` waits for threads to exit.
    pub finalize_wait: Duration,
}

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

impl PluginConfig {
    /// Reads every variable (see the module docs).
    ///
    /// Errors: `ncclInvalidUsage` naming the variable whose value does not parse.
    pub fn from_env() -> Result<PluginConfig> {
        let mut mesh = MeshConfig::from_env()?;
        mesh.max_requests = DEFAULT_MAX_REQUESTS;
        if let Some(v) = env(MAX_REQUESTS_ENV) {
            mesh.max_requests = v
                .trim()
                .parse::<usize>()
                .ok()
                .filter(|n| (32..=4096).contains(n))
                .ok_or_else(|| {
                    PluginError::usage(format!("{MAX_REQUESTS_ENV}={v:?} is not 32..=4096"))
                })?;
        }
        if let Some(v) = env(NICS_ENV) {
            mesh.nics = Some(parse_nics(&v)?);
        }
        let mut finalize_wait = Duration::from_secs(5);
        if let Some(v) = env(FINALIZE_WAIT_ENV) {
            let ms: u64 = v.trim().parse().map_err(|_| {
                PluginError::usage(format!("{FINALIZE_WAIT_ENV}={v:?} is not a number of ms"))
            })?;
            finalize_wait = Duration::from_millis(ms);
        }
        Ok(PluginConfig {
            mesh,
            finalize_wait,
        })
    }
}

/// Parses `RDMESH_NICS`: `[netdev=]addr/prefix[@Gb/s]` entries, comma-separated. The netdev
/// defaults to `lo` for loopback addresses and `nic<i>` otherwise; each entry becomes its own
/// device, named `soft_<netdev>` (with `_<i>` appended when a netdev repeats). The ceiling
/// defaults to 10 Gb/s.
///
/// Errors: `ncclInvalidUsage` naming the entry.
pub fn parse_nics(value: &str) -> Result<Vec<NicSpec>> {
    let bad = |item: &str, why: &str| {
        PluginError::usage(format!(
            "{NICS_ENV}: entry {item:?} {why} (the form is [netdev=]addr/prefix[@Gb/s], e.g. lo=127.0.1.1/24)"
        ))
    };
    let mut out: Vec<NicSpec> = Vec::new();
    for (i, item) in value
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .enumerate()
    {
        let (netdev, rest) = match item.split_once('=') {
            Some((n, r)) => (Some(n.trim().to_string()), r.trim()),
            None => (None, item),
        };
        let (cidr, gbps) = match rest.split_once('@') {
            Some((c, g)) => {
                let g: f64 = g
                    .trim()
                    .parse()
                    .ok()
                    .filter(|v: &f64| *v > 0.0 && v.is_finite())
                    .ok_or_else(|| bad(item, "has a ceiling that is not a positive number"))?;
                (c.trim(), g)
            }
            None => (rest, 10.0),
        };
        let (ip, prefix) = cidr
            .split_once('/')
            .ok_or_else(|| bad(item, "has no /prefix"))?;
        let ip: IpAddr = ip
            .trim()
            .parse()
            .map_err(|_| bad(item, "has no valid IP address"))?;
        let max = if ip.is_ipv4() { 32 } else { 128 };
        let prefix_len: u8 = prefix
            .trim()
            .parse()
            .ok()
            .filter(|p| *p <= max)
            .ok_or_else(|| bad(item, "has an invalid prefix length"))?;
        // `vfio:BDF=addr/prefix`: the NIC is that ConnectX function on vfio-pci.
        let mut provider = rdmesh_host::verbs::ProviderKind::Soft;
        let netdev = match netdev {
            Some(n) if n.starts_with("vfio:") => {
                provider = n
                    .parse()
                    .map_err(|e: String| bad(item, &format!("names a bad function: {e}")))?;
                match &provider {
                    rdmesh_host::verbs::ProviderKind::Vfio(bdf) => Some(bdf.clone()),
                    _ => None,
                }
            }
            n => n,
        };
        let netdev = netdev.filter(|n| !n.is_empty()).unwrap_or_else(|| {
            if ip.is_loopback() {
                "lo".into()
            } else {
                format!("nic{i}")
            }
        });
        let prefix = match provider {
            rdmesh_host::verbs::ProviderKind::Vfio(_) => "mlx5_vfio",
            _ => "soft",
        };
        let mut device = format!("{prefix}_{netdev}");
        if out.iter().any(|n| n.device == device) {
            device = format!("{prefix}_{netdev}_{i}");
        }
        out.push(NicSpec {
            device,
            port: 1,
            netdev,
            addr: IfAddr { ip, prefix_len },
            gbps,
            provider,
        });
    }
    if out.is_empty() {
        return Err(PluginError::usage(format!(
            "{NICS_ENV} is set but lists no NIC"
        )));
    }
    Ok(out)
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn nics_parse() {
        let n = parse_nics("lo=127.0.1.1/24, 127.0.2.1/24@25 ,eth1=fd00::2/64").unwrap();
        assert_eq!(n.len(), 3);
        assert_eq!(
            (n[0].device.as_str(), n[0].netdev.as_str()),
            ("soft_lo", "lo")
        );
        assert_eq!(n[1].device, "soft_lo_1");
        assert_eq!(n[1].gbps, 25.0);
        assert_eq!(n[1].addr.prefix_len, 24);
        assert_eq!(n[2].addr.ip.to_string(), "fd00::2");
        let v =
            parse_nics("vfio:0000:01:00.0=10.10.1.11/24@200,vfio:2:01:00.1=10.10.2.11/24").unwrap();
        assert_eq!(
            v[0].provider,
            rdmesh_host::verbs::ProviderKind::Vfio("0000:01:00.0".into())
        );
        assert_eq!(
            (v[0].device.as_str(), v[0].netdev.as_str(), v[0].gbps),
            ("mlx5_vfio_0000:01:00.0", "0000:01:00.0", 200.0)
        );
        assert_eq!(v[1].netdev, "0002:01:00.1");
        assert_eq!(n[0].provider, rdmesh_host::verbs::ProviderKind::Soft);
        assert!(parse_nics("vfio:zz=10.0.0.1/24")
            .unwrap_err()
            .message
            .contains("bad function"));
        for bad in ["127.0.0.1", "x/24", "127.0.0.1/33", "10.0.0.1/24@-1", " , "] {
            let e = parse_nics(bad).unwrap_err();
            assert!(e.message.contains("RDMESH_NICS"), "{e}");
            assert_eq!(e.code, crate::abi::types::NCCL_INVALID_USAGE);
        }
    }
}
