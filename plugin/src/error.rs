//! The plugin's error: an `ncclResult_t` code and a message for NCCL's log.
//!
//! Codes follow `plugins/net/README.md`: `ncclSystemError` for network or OS failures,
//! `ncclInternalError` when NCCL misuses the API (bad pointer, unknown comm, bad count),
//! `ncclInvalidUsage` for user or configuration errors (a bad `RDMESH_*` value, a send larger
//! than its receive, CUDA memory given to a host-only plugin).

use rdmesh_host::mesh::MeshError;

use crate::abi::types::{ncclResult_t, NCCL_INTERNAL_ERROR, NCCL_INVALID_USAGE, NCCL_SYSTEM_ERROR};

/// An error returned to NCCL: `code` is what the exported function returns, `message` is logged
/// at WARN level first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PluginError {
    /// The `ncclResult_t` returned.
    pub code: ncclResult_t,
    /// What happened and what to check.
    pub message: String,
}

impl PluginError {
    /// `ncclInternalError`: NCCL passed something the API does not allow.
    pub fn internal(message: impl Into<String>) -> PluginError {
        PluginError {
            code: NCCL_INTERNAL_ERROR,
            message: message.into(),
        }
    }

    /// `ncclInvalidUsage`: a user or configuration error.
    pub fn usage(message: impl Into<String>) -> PluginError {
        PluginError {
            code: NCCL_INVALID_USAGE,
            message: message.into(),
        }
    }

    /// `ncclSystemError`: a network or OS failure.
    pub fn system(message: impl Into<String>) -> PluginError {
        PluginError {
            code: NCCL_SYSTEM_ERROR,
            message: message.into(),
        }
    }
}

impl std::fmt::Display for PluginError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl From<MeshError> for PluginError {
    /// Configuration and size/tag errors are `ncclInvalidUsage`, malformed requests and handles
    /// `ncclInternalError`, everything on the network `ncclSystemError`.
    fn from(e: MeshError) -> PluginError {
        let message = e.to_string();
        match e {
            MeshError::Config(_)
            | MeshError::HcaSyntax { .. }
            | MeshError::NoNic(_)
            | MeshError::Truncated { .. }
            | MeshError::TagMismatch { .. }
            | MeshError::Auth { .. } => PluginError::usage(message),
            MeshError::Request(_) | MeshError::Handle(_) => PluginError::internal(message),
            MeshError::Unreachable { .. }
            | MeshError::Handshake { .. }
            | MeshError::LinkDown { .. }
            | MeshError::Closed(_)
            | MeshError::Protocol { .. }
            | MeshError::Host(_) => PluginError::system(message),
        }
    }
}

/// Result with a [`PluginError`].
pub type Result<T> = std::result::Result<T, PluginError>;
