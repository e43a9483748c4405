//! Errors of topology discovery and GID selection.
//!
//! Every message names the file, device, port, address or variable involved and says what to
//! check. A sysfs attribute that is absent or unreadable is not an error (the kernel answers
//! `EINVAL` for, e.g., the speed of a link that is down, or the type of an empty GID entry): it is
//! reported as unknown. An attribute that is present but malformed is an error naming its path.

use std::net::IpAddr;
use std::path::PathBuf;

/// An error from [`crate::topo`].
#[derive(Debug, thiserror::Error)]
pub enum TopoError {
    /// The sysfs root does not exist or is not a directory.
    #[error("sysfs root {path}: {reason} (give the directory that holds class/infiniband and class/net, normally /sys)")]
    SysfsRoot {
        /// The directory that was given.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// A sysfs directory that must be listed could not be.
    #[error("{path}: cannot list {what}: {source} (check that sysfs is mounted and readable)")]
    ReadDir {
        /// The directory.
        path: PathBuf,
        /// What it holds (e.g. "RDMA devices").
        what: &'static str,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// A sysfs attribute is present but not in the format the kernel writes.
    #[error("{path}: cannot parse {what} from {value:?}: expected {expected}")]
    Parse {
        /// The attribute file.
        path: PathBuf,
        /// What the attribute is (e.g. "GID").
        what: &'static str,
        /// The text that was read (trimmed).
        value: String,
        /// The format the kernel writes, as an example.
        expected: &'static str,
    },
    /// An address file could not be read or is not `ip -json address show` output.
    #[error("{origin}: {reason} (produce it with `ip -json address show > FILE`)")]
    IpJson {
        /// The file (or "<input>").
        origin: String,
        /// What is wrong, with the entry involved.
        reason: String,
    },
    /// Listing the interface addresses over netlink failed.
    #[error("listing interface addresses (getifaddrs): {source} (or pass --ip-json FILE)")]
    Netlink {
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The RDMA device or port does not exist under the sysfs root.
    #[error("{device} port {port}: not found at {path} (list the devices with `rdmesh topo`)")]
    NoSuchPort {
        /// RDMA device name.
        device: String,
        /// Port number (1-based).
        port: u32,
        /// The directory that was looked for.
        path: PathBuf,
    },
    /// No RoCE v2 GID equals the address (connect-time selection).
    #[error("{device} port {port}: no RoCE v2 GID for {addr} in {path} ({table}); check that {addr} is configured on the port's netdev (`ip addr`) and that the port is up")]
    NoGidForAddress {
        /// RDMA device name.
        device: String,
        /// Port number.
        port: u32,
        /// The link address that was looked for.
        addr: IpAddr,
        /// The GID table directory.
        path: PathBuf,
        /// A summary of the populated entries (`index type gid`).
        table: String,
    },
    /// `RDMESH_GID_INDEX` pins an entry that is empty.
    #[error("{device} port {port}: RDMESH_GID_INDEX={index} pins GID {index}, which is empty ({table}); unset RDMESH_GID_INDEX to select the GID by address")]
    PinnedGidEmpty {
        /// RDMA device name.
        device: String,
        /// Port number.
        port: u32,
        /// The pinned index.
        index: u32,
        /// A summary of the populated entries.
        table: String,
    },
    /// `RDMESH_GID_INDEX` is not a GID index.
    #[error("RDMESH_GID_INDEX={value:?}: {reason} (give a GID table index such as 3, or unset it to select the GID by address)")]
    GidIndexEnv {
        /// The value of the variable.
        value: String,
        /// Why it is rejected.
        reason: &'static str,
    },
}

/// Result with [`TopoError`].
pub type Result<T> = std::result::Result<T, TopoError>;

impl From<TopoError> for crate::Error {
    fn from(e: TopoError) -> Self {
        match e {
            TopoError::ReadDir { path, what, source } => crate::Error::io(
                format!(
                    "{}: cannot list {what} (check that sysfs is mounted and readable)",
                    path.display()
                ),
                source,
            ),
            TopoError::Netlink { source } => crate::Error::io(
                "listing interface addresses (getifaddrs); or pass --ip-json FILE",
                source,
            ),
            other => crate::Error::Config(other.to_string()),
        }
    }
}
