//! The objects behind NCCL's opaque pointers: listen, send and receive comms, memory
//! registrations and requests.
//!
//! Zero copy: a request lends NCCL's host buffers to the mesh transport
//! ([`crate::export::memory`]); the mesh reads a send's bytes from them and places a receive's
//! bytes in them. A request ends the loan before `test` reports it done, when it fails, and
//! when it is freed in flight (its comm closed), so the mesh never touches NCCL's memory
//! outside the window NCCL's API promises.

use std::sync::Mutex;

use rdmesh_host::mesh::{
    Buffer, Listener, RecvComm, RecvRequest, RecvSizes, SendComm, SendRequest,
};

use crate::error::Result;

/// A listen comm (`listen`'s `listenComm`).
#[derive(Debug)]
pub struct ListenComm {
    /// The mesh listener.
    pub listener: Listener,
    /// The NCCL device it was opened on.
    pub dev: usize,
}

/// A send comm (`connect`'s `sendComm`).
#[derive(Debug)]
pub struct SendC {
    /// The mesh connection.
    pub comm: SendComm,
    /// Identity, for the requests it owns.
    pub id: u64,
}

/// A receive comm (`accept`'s `recvComm`).
#[derive(Debug)]
pub struct RecvC {
    /// The mesh connection.
    pub comm: RecvComm,
    /// Identity, for the requests it owns.
    pub id: u64,
}

/// A memory registration (`regMr`'s `mhandle`): the range, checked against every transfer
/// that names it, and on a receive comm the range registered with the connection's devices
/// (direct placement: senders RDMA WRITE receives posted in it; `None` where registering
/// failed or on a send comm, which copies).
#[derive(Debug)]
pub struct Mr {
    /// Start address.
    pub addr: usize,
    /// Length, bytes.
    pub size: usize,
    /// The mesh registration (deregistered when the last handle drops: `deregMr`).
    pub reg: Option<rdmesh_host::mesh::Registration>,
}

impl Mr {
    /// Whether `[addr, addr + len)` lies inside the registration.
    pub fn covers(&self, addr: usize, len: usize) -> bool {
        len == 0
            || (addr >= self.addr
                && addr
                    .checked_add(len)
                    .is_some_and(|e| e <= self.addr.saturating_add(self.size)))
    }
}

/// What a request waits for.
#[derive(Debug)]
pub enum ReqKind {
    /// An `isend`.
    Send {
        /// The mesh request.
        req: SendRequest,
        /// NCCL's bytes, lent.
        buf: Buffer,
    },
    /// An `irecv`.
    Recv {
        /// The mesh request.
        req: RecvRequest,
        /// NCCL's buffers, lent, one per buffer of the (grouped) receive (at most
        /// `MAX_RECVS`, held without allocation).
        bufs: heapless::Vec<Buffer, { crate::device::MAX_RECVS }>,
    },
}

impl ReqKind {
    /// Ends the loans of NCCL's buffers (see the module docs).
    fn release(&self) {
        match self {
            ReqKind::Send { buf, .. } => buf.release(),
            ReqKind::Recv { bufs, .. } => bufs.iter().for_each(Buffer::release),
        }
    }
}

/// A request (`isend`/`irecv`'s `*request`).
#[derive(Debug)]
pub struct Request {
    /// The comm that owns it (closing the comm frees it).
    pub comm_id: u64,
    /// What it waits for (`None` once it completed).
    pub kind: Mutex<Option<ReqKind>>,
}

impl Request {
    /// Polls the mesh request: `Ok(Some(sizes))` once complete (one size per buffer, one for a
    /// send); the request is then spent and NCCL's buffers are no longer lent.
    ///
    /// Errors: the mesh request's error (size, tag, connection failure); the loans end then too.
    pub fn poll(&self) -> Result<Option<RecvSizes>> {
        let mut k = self.kind.lock().unwrap_or_else(|p| p.into_inner());
        let done = match k.as_ref() {
            None => {
                return Err(crate::error::PluginError::internal(
                    "request tested after it completed",
                ))
            }
            Some(ReqKind::Send { req, .. }) => {
                req.test().map(|o| o.map(|s| RecvSizes::from_iter([s])))
            }
            Some(ReqKind::Recv { req, .. }) => req.test(),
        };
        match done {
            Ok(None) => Ok(None),
            Ok(Some(sizes)) => {
                if let Some(k) = k.take() {
                    k.release();
                }
                Ok(Some(sizes))
            }
            Err(e) => {
                if let Some(k) = k.take() {
                    k.release();
                }
                Err(e.into())
            }
        }
    }
}

impl Drop for Request {
    /// A request freed in flight (its comm closed) ends its loans before NCCL may free the
    /// memory.
    fn drop(&mut self) {
        let k = self.kind.get_mut().unwrap_or_else(|p| p.into_inner());
        if let Some(k) = k.take() {
            k.release();
        }
    }
}
