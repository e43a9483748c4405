//! Errors of the mesh transport. Each says what happened, which link, node, address or size
//! was involved, and what to check. Errors are `Clone`: one link failure fails every request
//! that was waiting on it.

/// An error of the mesh transport.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MeshError {
    /// A configuration value (environment variable, option) is invalid.
    #[error("{0}")]
    Config(String),
    /// `RDMESH_HCA` (or a selection list given through the API) does not parse.
    #[error("RDMESH_HCA={value:?}: {reason}")]
    HcaSyntax {
        /// The list as given.
        value: String,
        /// What is wrong with it.
        reason: String,
    },
    /// No NIC is left to use.
    #[error("no usable NIC: {0}")]
    NoNic(String),
    /// A listen handle does not decode.
    #[error("mesh handle: {0}")]
    Handle(String),
    /// No local NIC shares a subnet with the peer, and no relay path was found (or relaying
    /// is disabled).
    #[error("peer node {peer} is unreachable: {reason} (peer addresses: {peer_addrs}; local NICs: {local})")]
    Unreachable {
        /// The peer node id (hex).
        peer: String,
        /// Why no route exists.
        reason: String,
        /// The peer's link addresses, CIDR.
        peer_addrs: String,
        /// The local NICs considered, `netdev addr/prefix`.
        local: String,
    },
    /// The out-of-band TCP handshake failed.
    #[error("mesh handshake with node {peer} failed: {reason} (addresses tried: {tried})")]
    Handshake {
        /// The peer node id (hex).
        peer: String,
        /// What went wrong.
        reason: String,
        /// The TCP addresses tried, in order.
        tried: String,
    },
    /// The peer could not prove that it holds `RDMESH_AUTH_KEY`, or this node could not.
    #[error("mesh authentication with {peer} failed: {reason}")]
    Auth {
        /// The peer's TCP address.
        peer: String,
        /// What failed.
        reason: String,
    },
    /// A link (one rail: a QP between two NICs) failed and no other rail was left.
    #[error("link {link} failed: {reason}")]
    LinkDown {
        /// The link: local netdev and address, peer address, QPN.
        link: String,
        /// What the transport reported, and what to check.
        reason: String,
    },
    /// A send is larger than the receive it matched (NCCL's rule: a posted receive is at least
    /// as large as the send).
    #[error("send of {send} bytes (tag {tag}) is larger than the posted receive of {recv} bytes (receive #{seq}, buffer {index}); post receives at least as large as the matching sends")]
    Truncated {
        /// Send size, bytes.
        send: u64,
        /// Posted receive size, bytes.
        recv: u64,
        /// The send's tag.
        tag: i32,
        /// The receive's sequence number on the connection.
        seq: u64,
        /// The buffer of the (grouped) receive it matched.
        index: u8,
    },
    /// A send's tag matches no buffer of the first pending receive (FIFO matching).
    #[error("send with tag {tag} matches no free buffer of the first pending receive #{seq} (its tags: {tags:?}); sends and receives match in posting order")]
    TagMismatch {
        /// The send's tag.
        tag: i32,
        /// The receive's sequence number.
        seq: u64,
        /// The tags of the receive's buffers not matched yet.
        tags: Vec<i32>,
    },
    /// A request was malformed (buffer range, count).
    #[error("{0}")]
    Request(String),
    /// The peer closed the connection.
    #[error("the peer closed the connection ({0})")]
    Closed(String),
    /// The peer broke the frame protocol.
    #[error("protocol error from {peer}: {reason}")]
    Protocol {
        /// Who sent it.
        peer: String,
        /// What was wrong.
        reason: String,
    },
    /// A verbs or I/O operation failed.
    #[error("{0}")]
    Host(String),
}

impl From<crate::Error> for MeshError {
    fn from(e: crate::Error) -> MeshError {
        MeshError::Host(e.to_string())
    }
}

impl From<MeshError> for crate::Error {
    fn from(e: MeshError) -> crate::Error {
        crate::Error::Bench(e.to_string())
    }
}

/// Result with a [`MeshError`].
pub type Result<T> = std::result::Result<T, MeshError>;
