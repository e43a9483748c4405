//! Choosing the provider behind a [`Device`]: `soft` (RoCEv2 over a UDP socket), `model` (the
//! mlx5 device model driven by the vfio provider's driver, its port on a UDP socket) or
//! `vfio:BDF` (a ConnectX function bound to vfio-pci), as `--provider` and `RDMESH_PROVIDER`
//! spell it.

use std::fmt;
use std::str::FromStr;

use crate::error::{Error, Result};
use crate::verbs::{Device, SoftConfig};
use crate::vfio_provider::{ModelPortConfig, VfioConfig};

/// The environment variable the mesh node and the NCCL plugin read.
pub const PROVIDER_ENV: &str = "RDMESH_PROVIDER";

/// A provider choice.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum ProviderKind {
    /// The soft provider (default).
    #[default]
    Soft,
    /// The mlx5 device model on a UDP socket (the vfio provider's driver, no hardware).
    Model,
    /// A ConnectX function bound to vfio-pci, by PCI address (`0000:01:00.0`).
    Vfio(String),
}

impl FromStr for ProviderKind {
    type Err = String;

    /// `soft`, `model` or `vfio:BDF` (a full `dddd:bb:dd.f` address, or `bb:dd.f` for
    /// domain 0).
    fn from_str(s: &str) -> std::result::Result<ProviderKind, String> {
        let s = s.trim();
        match s {
            "soft" => Ok(ProviderKind::Soft),
            "model" => Ok(ProviderKind::Model),
            _ => match s.strip_prefix("vfio:") {
                Some(bdf) => {
                    let bdf = rdmesh_vfio::sys::PciAddress::parse(bdf.trim())
                        .map_err(|e| format!("provider {s:?}: {e}"))?;
                    Ok(ProviderKind::Vfio(bdf.to_string()))
                }
                None => Err(format!(
                    "provider {s:?} is not one of soft, model, vfio:BDF (e.g. vfio:0000:01:00.0)"
                )),
            },
        }
    }
}

impl fmt::Display for ProviderKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProviderKind::Soft => f.write_str("soft"),
            ProviderKind::Model => f.write_str("model"),
            ProviderKind::Vfio(b) => write!(f, "vfio:{b}"),
        }
    }
}

impl ProviderKind {
    /// `RDMESH_PROVIDER`, when set and not empty.
    ///
    /// Errors: [`Error::Config`] naming the variable when its value does not parse.
    pub fn from_env() -> Result<Option<ProviderKind>> {
        match std::env::var(PROVIDER_ENV) {
            Ok(v) if !v.trim().is_empty() => v
                .parse()
                .map(Some)
                .map_err(|e| Error::Config(format!("{PROVIDER_ENV}: {e}"))),
            _ => Ok(None),
        }
    }

    /// The provider name as [`Device::provider`] reports it.
    pub fn name(&self) -> &'static str {
        match self {
            ProviderKind::Soft => "soft",
            ProviderKind::Model => "model",
            ProviderKind::Vfio(_) => "vfio",
        }
    }
}

impl Device {
    /// Opens a device of provider `kind` on `config.addr`: the soft provider with `config`
    /// as is; the model with its port on `config.addr:config.udp_port` (and
    /// `config.raw_receive`); a vfio function with GID index 0 = `config.addr`. The soft
    /// provider's other settings (capture, impairment, DCQCN, TOS) apply to the soft provider
    /// only.
    ///
    /// Errors: as [`Device::open_soft`], [`Device::open_model`] and [`Device::open_vfio`].
    pub fn open_provider(kind: &ProviderKind, config: SoftConfig) -> Result<Device> {
        match kind {
            ProviderKind::Soft => Device::open_soft(config),
            ProviderKind::Model => Device::open_model(ModelPortConfig {
                udp_port: config.udp_port,
                raw_receive: config.raw_receive,
                ..ModelPortConfig::new(config.addr)
            }),
            ProviderKind::Vfio(bdf) => Device::open_vfio(bdf, VfioConfig::new(config.addr)),
        }
    }
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn parses_and_names() {
        assert_eq!("soft".parse::<ProviderKind>().unwrap(), ProviderKind::Soft);
        assert_eq!(
            " model ".parse::<ProviderKind>().unwrap(),
            ProviderKind::Model
        );
        let v = "vfio:0000:01:00.0".parse::<ProviderKind>().unwrap();
        assert_eq!(v, ProviderKind::Vfio("0000:01:00.0".into()));
        assert_eq!(v.to_string(), "vfio:0000:01:00.0");
        assert_eq!(
            "vfio:01:00.1".parse::<ProviderKind>().unwrap(),
            ProviderKind::Vfio("0000:01:00.1".into())
        );
        let e = "rxe".parse::<ProviderKind>().unwrap_err();
        assert!(e.contains("soft, model, vfio:BDF"), "{e}");
        assert!("vfio:zz".parse::<ProviderKind>().is_err());
    }
}
