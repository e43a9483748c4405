//! `rdmesh topo`: the RDMA device ports of this machine (or of a sysfs copy), with netdev,
//! addresses, GID, MTU, speed, PCIe link and ceiling, and sibling functions.

use std::path::PathBuf;

use crate::topo::{gid, AddressSource, DiscoverOptions};

/// `rdmesh topo` arguments.
#[derive(Debug, Clone, clap::Args)]
pub struct TopoArgs {
    /// sysfs root to read (the directory holding class/infiniband and class/net), e.g. a copy
    /// of another machine's /sys.
    #[arg(long, value_name = "DIR", default_value = "/sys")]
    pub sysfs_root: PathBuf,
    /// Read interface addresses from this file of `ip -json address show` output instead of
    /// netlink.
    #[arg(long, value_name = "FILE")]
    pub ip_json: Option<PathBuf>,
    /// Print a JSON array with one object per device port (keys: name, port, netdev, state,
    /// addresses, gid_index, mtu, speed_mbps, pci, pcie, siblings).
    #[arg(long)]
    pub json: bool,
}

impl TopoArgs {
    /// The discovery options these arguments ask for (`RDMESH_GID_INDEX` from the environment).
    ///
    /// Errors: an invalid `RDMESH_GID_INDEX`.
    pub fn options(&self) -> crate::Result<DiscoverOptions> {
        Ok(DiscoverOptions {
            sysfs_root: self.sysfs_root.clone(),
            addresses: match &self.ip_json {
                Some(f) => AddressSource::IpJsonFile(f.clone()),
                None => AddressSource::Netlink,
            },
            gid_index: gid::gid_index_from_env()?,
        })
    }
}

/// Runs `rdmesh topo`, writing to stdout.
///
/// Errors: discovery errors (naming the path, device, port or variable) and write errors.
pub fn run(args: &TopoArgs) -> crate::Result<()> {
    crate::topo::report::run_report(&args.options()?, args.json, &mut std::io::stdout().lock())
}
