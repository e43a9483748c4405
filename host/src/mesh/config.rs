//! Configuration of a mesh node, from code or from `RDMESH_*` environment variables.
//!
//! | variable | default | meaning |
//! |---|---|---|
//! | `RDMESH_HCA` | all | device selection, NCCL's `^=name:port` syntax ([`crate::mesh::select`]) |
//! | `RDMESH_AUTH_KEY` | none | shared secret; peers that cannot prove they hold it are refused |
//! | `RDMESH_RELAY` | 1 | 0: neither relay for others nor route through relays |
//! | `RDMESH_MAX_HOPS` | 4 | most links on a relayed path |
//! | `RDMESH_MESH_PORT` | 0 | handshake TCP port (0: ephemeral; it travels in the handle) |
//! | `RDMESH_MESH_TIMEOUT_MS` | 10000 | handshake timeout, ms |
//! | `RDMESH_STRIPE_MIN` | 65536 | messages of at least this many bytes are striped over all rails |
//! | `RDMESH_RAIL_GBPS` | from the NIC | `netdev=Gb/s,...`: NIC ceilings (striping weights) |
//! | `RDMESH_IB_TIMEOUT` | 16 | QP local ACK timeout code, 4.096 µs · 2^n (16 ≈ 268 ms) |
//! | `RDMESH_IB_RETRY_CNT` | 7 | QP transport retries before a link is declared down (16 and 7: about 2.1 s) |
//! | `RDMESH_GID_INDEX` | by address | as for `rdmesh topo` ([`crate::topo::gid`]) |
//! | `RDMESH_RECOVERY` | negotiated | `selective` or `go-back-n`: the loss recovery this node insists on for its rails (selective repeat only where both ends are soft-provider QPs; see [`crate::mesh::rail::RecoveryOffer`]) |
//! | `RDMESH_INLINE_BYTES` | 0 | with several progress threads: an `isend` of at most this many bytes, and every `irecv`'s CTS, is posted on the calling thread instead of waiting for the shard's next round (0: everything handed to the shard) |
//! | `RDMESH_PROVIDER` | soft | `soft`, `model` (the mlx5 device model, its port on a UDP socket) or `vfio:BDF`: the provider of every NIC's device (a NIC listed as `vfio:BDF=addr/len` keeps its own) |

use std::time::Duration;

use crate::mesh::auth::AuthKey;
use crate::mesh::error::{MeshError, Result};
use crate::mesh::nic::{parse_gbps_overrides, NicSpec, RAIL_GBPS_ENV};
use crate::mesh::rail::QpTiming;
use crate::mesh::select::HcaFilter;
use crate::topo::DiscoverOptions;

/// The default largest RDMA WRITE of a send from registered memory, bytes: 256 KiB. On the
/// 2 × H100 host NCCL's busbw at 8–256 MiB was higher with it than with 64 KiB in 10 of 12
/// cells of three interleaved repetitions (docs/benchmarks.md, 2026-11-26).
pub const PLACED_CHUNK: usize = 256 << 10;

/// How a mesh node runs (see the module docs for the environment variables).
#[derive(Debug, Clone)]
pub struct MeshConfig {
    /// The NICs to use; `None` discovers them ([`crate::topo::Topology::discover`]).
    pub nics: Option<Vec<NicSpec>>,
    /// How to discover when `nics` is `None`.
    pub discover: DiscoverOptions,
    /// Device selection (`RDMESH_HCA`).
    pub hca: Option<HcaFilter>,
    /// Ceiling overrides by netdev, Gb/s (`RDMESH_RAIL_GBPS`).
    pub gbps_overrides: Vec<(String, f64)>,
    /// Shared secret (`RDMESH_AUTH_KEY`).
    pub auth_key: Option<AuthKey>,
    /// Relay for others and route through relays (`RDMESH_RELAY`).
    pub relay: bool,
    /// Most links on a relayed path (`RDMESH_MAX_HOPS`).
    pub max_hops: usize,
    /// Handshake timeout (`RDMESH_MESH_TIMEOUT_MS`).
    pub handshake_timeout: Duration,
    /// Handshake TCP port, 0 = ephemeral (`RDMESH_MESH_PORT`).
    pub tcp_port: u16,
    /// UDP port of the soft devices, 0 = ephemeral.
    pub udp_port: u16,
    /// Progress threads (shards) of the node (`RDMESH_PROGRESS_THREADS`, 1..=16; default: a
    /// quarter of the CPUs, 1 to 8). With more than one, each connection's work runs on its
    /// shard's thread and, with ephemeral UDP ports, over its shard's own soft devices
    /// ([`crate::mesh::progress`]).
    pub progress_threads: usize,
    /// Lanes of a direct connection (`RDMESH_LANES`, 1..=8; default: one per four progress
    /// threads, at least one): mesh connections, each on its own progress shard, that one
    /// connection's messages take in turn, so a single NCCL channel uses several cores.
    pub lanes: usize,
    /// Striping threshold, bytes (`RDMESH_STRIPE_MIN`).
    pub stripe_min: usize,
    /// Largest message, bytes, this node takes before it posted the receive, and sends before
    /// the peer's CTS when the peer takes it (`RDMESH_EAGER_BYTES`, 0..=65536, default 0: every
    /// send waits for its CTS; measured on NCCL 8 KiB–512 KiB it did not pay, see
    /// docs/benchmarks.md). A node that takes eager sends refuses grouped receives
    /// ([`crate::mesh::RecvComm::irecv`]).
    pub eager_bytes: usize,
    /// Direct placement (`RDMESH_PLACEMENT`, `1` (default) or `0`): on a direct connection a
    /// receive into registered memory ([`crate::mesh::RecvComm::register`]) is announced with
    /// its address and rkeys, and sends into such receives are RDMA WRITTEN into place
    /// ([`crate::mesh::tagged`]). `0` keeps the copy path on both sides (as an older peer).
    /// On by default: NCCL on the 2 × H100 host ran 1.37–1.74× Socket with it against
    /// 1.26–1.77× with copies (docs/benchmarks.md); it only acts on registered memory.
    pub placement: bool,
    /// Largest chunk of a send RDMA WRITTEN straight from registered memory, bytes
    /// (`RDMESH_PLACED_CHUNK`, a multiple of 64 KiB up to 16 MiB; default
    /// [`PLACED_CHUNK`]). Sends from memory that is not registered go in DATA-frame chunks
    /// (64 KiB) whatever this is.
    pub placed_chunk: usize,
    /// With several progress threads, the largest send, bytes, whose frames the application's
    /// thread posts itself in `isend` (and, when not 0, every `irecv`'s CTS), instead of
    /// handing them to the connection's shard (`RDMESH_INLINE_BYTES`, 0..=16 MiB, default 0:
    /// everything goes through the shard; 64 KiB made NCCL 64 KiB–512 KiB slower on the 32-core
    /// host, docs/benchmarks.md). Only posting: receives and
    /// completions stay the shard's, so a large message is never copied on the caller's thread.
    pub inline_bytes: usize,
    /// QP ACK timeout and retries (`RDMESH_IB_TIMEOUT`, `RDMESH_IB_RETRY_CNT`).
    pub timing: QpTiming,
    /// Requests in flight per connection end (at least 32).
    pub max_requests: usize,
    /// Idle time after which a rail someone waits on is probed.
    pub keepalive: Duration,
    /// The provider of the NICs' devices (`RDMESH_PROVIDER`); `None`: each NIC's own
    /// (soft unless listed as `vfio:BDF`).
    pub provider: Option<crate::verbs::ProviderKind>,
    /// The loss recovery this node insists on for its rails (`RDMESH_RECOVERY`); `None`: the
    /// handshake negotiates it ([`crate::mesh::rail::RecoveryOffer`]).
    pub recovery: Option<crate::verbs::Recovery>,
}

impl Default for MeshConfig {
    fn default() -> MeshConfig {
        MeshConfig {
            nics: None,
            discover: DiscoverOptions::default(),
            hca: None,
            gbps_overrides: Vec::new(),
            auth_key: None,
            relay: true,
            max_hops: 4,
            handshake_timeout: Duration::from_secs(10),
            tcp_port: 0,
            udp_port: 0,
            progress_threads: default_progress_threads(),
            lanes: default_lanes(default_progress_threads()),
            stripe_min: 64 << 10,
            eager_bytes: 0,
            placement: true,
            placed_chunk: PLACED_CHUNK,
            inline_bytes: 0,
            timing: QpTiming {
                timeout: 16,
                retry_cnt: 7,
            },
            max_requests: 64,
            keepalive: Duration::from_millis(200),
            provider: None,
            recovery: None,
        }
    }
}

/// A quarter of the CPUs this process may use, 1 to 8: on a 2-core machine one thread (the
/// application's calls drive their connections), on a 16-core GPU host four.
fn default_progress_threads() -> usize {
    std::thread::available_parallelism()
        .map_or(1, |n| n.get() / 4)
        .clamp(1, 8)
}

/// One lane per four progress threads, at least one: every connection's lanes on shards of
/// their own while NCCL's channels (usually 2 per peer, both directions) share the rest.
fn default_lanes(progress_threads: usize) -> usize {
    (progress_threads / 4).max(1)
}

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

fn parse<T: std::str::FromStr>(
    name: &str,
    ok: impl Fn(&T) -> bool,
    what: &str,
) -> Result<Option<T>> {
    match env(name) {
        None => Ok(None),
        Some(v) => match v.trim().parse::<T>() {
            Ok(x) if ok(&x) => Ok(Some(x)),
            _ => Err(MeshError::Config(format!("{name}={v:?} is not {what}"))),
        },
    }
}

impl MeshConfig {
    /// The defaults with every `RDMESH_*` variable applied.
    ///
    /// Errors: [`MeshError::Config`] / [`MeshError::HcaSyntax`] naming the variable whose value
    /// does not parse.
    pub fn from_env() -> Result<MeshConfig> {
        let mut c = MeshConfig {
            discover: DiscoverOptions::from_env().map_err(|e| MeshError::Config(e.to_string()))?,
            hca: HcaFilter::from_env()?,
            auth_key: AuthKey::from_env(),
            ..MeshConfig::default()
        };
        if let Some(v) = env(RAIL_GBPS_ENV) {
            c.gbps_overrides = parse_gbps_overrides(&v)?;
        }
        if let Some(r) = parse::<u8>("RDMESH_RELAY", |v| *v <= 1, "0 or 1")? {
            c.relay = r == 1;
        }
        if let Some(h) = parse::<usize>("RDMESH_MAX_HOPS", |v| (1..=16).contains(v), "1..=16")? {
            c.max_hops = h;
        }
        if let Some(p) = parse::<u16>("RDMESH_MESH_PORT", |_| true, "a TCP port")? {
            c.tcp_port = p;
        }
        if let Some(ms) = parse::<u64>(
            "RDMESH_MESH_TIMEOUT_MS",
            |v| (100..=3_600_000).contains(v),
            "a timeout of 100..=3600000 ms",
        )? {
            c.handshake_timeout = Duration::from_millis(ms);
        }
        if let Some(n) = parse::<usize>(
            "RDMESH_PROGRESS_THREADS",
            |v| (1..=16).contains(v),
            "a number of threads, 1..=16",
        )? {
            c.progress_threads = n;
            c.lanes = default_lanes(n);
        }
        if let Some(n) = parse::<usize>("RDMESH_LANES", |v| (1..=8).contains(v), "1..=8")? {
            c.lanes = n;
        }
        if let Some(s) = parse::<usize>("RDMESH_STRIPE_MIN", |_| true, "a size in bytes")? {
            c.stripe_min = s;
        }
        if let Some(n) = parse::<usize>(
            "RDMESH_EAGER_BYTES",
            |v| *v <= crate::mesh::rail::DATA_CHUNK,
            "a size in bytes, 0..=65536",
        )? {
            c.eager_bytes = n;
        }
        if let Some(p) = parse::<u8>("RDMESH_PLACEMENT", |v| *v <= 1, "0 or 1")? {
            c.placement = p == 1;
        }
        if let Some(n) = parse::<usize>(
            "RDMESH_PLACED_CHUNK",
            |v| *v >= 64 << 10 && *v <= 16 << 20 && v % (64 << 10) == 0,
            "a multiple of 65536 bytes up to 16 MiB",
        )? {
            c.placed_chunk = n;
        }
        if let Some(n) = parse::<usize>(
            "RDMESH_INLINE_BYTES",
            |v| *v <= 16 << 20,
            "a size in bytes, 0..=16777216",
        )? {
            c.inline_bytes = n;
        }
        if let Some(t) = parse::<u8>("RDMESH_IB_TIMEOUT", |v| (1..=31).contains(v), "1..=31")? {
            c.timing.timeout = t;
        }
        if let Some(r) = parse::<u8>("RDMESH_IB_RETRY_CNT", |v| *v <= 7, "0..=7")? {
            c.timing.retry_cnt = r;
        }
        c.provider =
            crate::verbs::ProviderKind::from_env().map_err(|e| MeshError::Config(e.to_string()))?;
        c.recovery = parse_recovery(env("RDMESH_RECOVERY").as_deref())?;
        Ok(c)
    }
}

/// `RDMESH_RECOVERY`: `selective`, `go-back-n`, or unset / `auto` (negotiated).
fn parse_recovery(v: Option<&str>) -> Result<Option<crate::verbs::Recovery>> {
    use crate::verbs::Recovery;
    match v.map(|s| s.trim().to_ascii_lowercase()).as_deref() {
        None | Some("auto") => Ok(None),
        Some("selective") => Ok(Some(Recovery::Selective)),
        Some("go-back-n") | Some("gbn") => Ok(Some(Recovery::GoBackN)),
        Some(other) => Err(MeshError::Config(format!(
            "RDMESH_RECOVERY={other:?} is not selective, go-back-n or auto"
        ))),
    }
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn recovery_variable() {
        use crate::verbs::Recovery;
        assert_eq!(parse_recovery(None).unwrap(), None);
        assert_eq!(parse_recovery(Some("auto")).unwrap(), None);
        assert_eq!(
            parse_recovery(Some(" Selective ")).unwrap(),
            Some(Recovery::Selective)
        );
        assert_eq!(
            parse_recovery(Some("go-back-n")).unwrap(),
            Some(Recovery::GoBackN)
        );
        let e = parse_recovery(Some("irn")).unwrap_err().to_string();
        assert!(e.contains("RDMESH_RECOVERY=\"irn\""), "{e}");
    }

    #[test]
    fn defaults() {
        let c = MeshConfig::default();
        assert!(c.relay);
        assert_eq!(c.max_requests, 64);
        assert_eq!((c.timing.timeout, c.timing.retry_cnt), (16, 7));
    }

    #[test]
    fn parse_names_the_variable() {
        // A variable name no other test sets.
        std::env::set_var("RDMESH_TEST_CONFIG_X", "abc");
        let e = parse::<u8>("RDMESH_TEST_CONFIG_X", |_| true, "a number")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("RDMESH_TEST_CONFIG_X=\"abc\" is not a number"),
            "{e}"
        );
        std::env::set_var("RDMESH_TEST_CONFIG_X", "9");
        assert!(parse::<u8>("RDMESH_TEST_CONFIG_X", |v| *v < 8, "0..=7").is_err());
        std::env::set_var("RDMESH_TEST_CONFIG_X", "5");
        assert_eq!(
            parse::<u8>("RDMESH_TEST_CONFIG_X", |v| *v < 8, "0..=7").unwrap(),
            Some(5)
        );
        std::env::remove_var("RDMESH_TEST_CONFIG_X");
        assert_eq!(
            parse::<u8>("RDMESH_TEST_CONFIG_X", |_| true, "x").unwrap(),
            None
        );
    }
}
