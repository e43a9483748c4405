//! Errors returned by the verbs API and the soft provider.
//!
//! Every message names what was involved (device, address, QPN, MTU, size) and what to check.

use std::net::SocketAddr;

/// An error from the verbs API, a provider, or the tool.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A socket or file operation failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done, with the address or path involved.
        context: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The UDP address of a soft device could not be bound.
    #[error("soft device: cannot bind UDP {addr}: {source} (is another RoCE endpoint using this address and port? use port 0 for an ephemeral port)")]
    Bind {
        /// The address and port that were asked for.
        addr: SocketAddr,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// A QP state transition was asked with attributes that are missing or not allowed.
    #[error("QP {qpn:#08x}: modify {from:?} -> {to:?}: {reason}")]
    InvalidTransition {
        /// Local QP number.
        qpn: u32,
        /// Current state.
        from: crate::verbs::QpState,
        /// Requested state.
        to: crate::verbs::QpState,
        /// What is missing or not allowed.
        reason: String,
    },
    /// A work request could not be posted.
    #[error("QP {qpn:#08x}: post failed at work request {index} (wr_id {wr_id}): {reason}")]
    Post {
        /// Local QP number.
        qpn: u32,
        /// Index in the batch of the first work request that was not posted (ibverbs' `bad_wr`).
        index: usize,
        /// Its wr_id.
        wr_id: u64,
        /// Why.
        reason: String,
    },
    /// A memory registration or access was invalid.
    #[error("memory region: {0}")]
    Memory(String),
    /// The out-of-band exchange with the peer failed.
    #[error("out-of-band exchange with {peer}: {reason}")]
    Exchange {
        /// Peer TCP address.
        peer: String,
        /// What went wrong.
        reason: String,
    },
    /// A capture file could not be written or read.
    #[error("pcap {path}: {reason}")]
    Pcap {
        /// File path.
        path: String,
        /// What went wrong.
        reason: String,
    },
    /// A benchmark or verification failed.
    #[error("{0}")]
    Bench(String),
    /// An argument or configuration value is invalid.
    #[error("{0}")]
    Config(String),
}

/// Result with the host [`enum@Error`].
pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    /// Wraps an I/O error with context.
    pub fn io(context: impl Into<String>, source: std::io::Error) -> Error {
        Error::Io {
            context: context.into(),
            source,
        }
    }
}
