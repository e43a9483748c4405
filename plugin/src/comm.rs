//! The objects behind NCCL's opaque pointers: listen, send and receive comms, memory
//! registrations, requests, and the staging buffers the data goes through.
//!
//! The mesh transport moves bytes between its own [`Buffer`]s, so `isend` copies NCCL's
//! (host) bytes into a staging buffer when it is called (NCCL's data is ready then), and a
//! receive copies the staging buffer into NCCL's memory in the `test` call that reports it
//! done (NCCL does not read the buffer before that). Staging buffers are recycled per comm.

use std::sync::{Arc, Mutex};

use rdmesh_host::mesh::{Buffer, Listener, RecvComm, RecvRequest, SendComm, SendRequest};

use crate::error::Result;

/// Most idle staging buffers a comm keeps.
const POOL_KEEP: usize = 64;
/// Smallest staging buffer, bytes.
const POOL_MIN: usize = 4096;
/// Largest staging buffer kept for reuse, bytes (NCCL's chunks are far smaller).
const POOL_MAX: usize = 16 << 20;

/// Recycled staging buffers of one comm, in power-of-two sizes (at most 64, each at most
/// 16 MiB).
#[derive(Debug, Default)]
pub struct Pool {
    free: Mutex<Vec<Buffer>>,
}

impl Pool {
    /// A buffer of at least `len` bytes (a power of two, at least 4 KiB).
    pub fn take(&self, len: usize) -> Buffer {
        let want = len.max(POOL_MIN).next_power_of_two();
        let mut f = self.free.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(i) = f.iter().position(|b| b.len() == want) {
            return f.swap_remove(i);
        }
        drop(f);
        Buffer::new(want)
    }

    /// Gives a buffer back.
    pub fn put(&self, b: Buffer) {
        let mut f = self.free.lock().unwrap_or_else(|p| p.into_inner());
        if f.len() < POOL_KEEP && b.len() <= POOL_MAX {
            f.push(b);
        }
    }
}

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
    /// Staging buffers.
    pub pool: Arc<Pool>,
}

/// A receive comm (`accept`'s `recvComm`).
#[derive(Debug)]
pub struct RecvC {
    /// The mesh connection.
    pub comm: RecvComm,
    /// Identity, for the requests it owns.
    pub id: u64,
    /// Staging buffers.
    pub pool: Arc<Pool>,
}

/// A memory registration (`regMr`'s `mhandle`): host memory needs no pinning here, so it is
/// the range, checked against every transfer that names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mr {
    /// Start address.
    pub addr: usize,
    /// Length, bytes.
    pub size: usize,
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

/// Where one buffer of a receive lands in NCCL's memory.
#[derive(Debug)]
pub struct Dst {
    /// NCCL's buffer address.
    pub addr: usize,
    /// Posted size, bytes.
    pub len: usize,
    /// The staging buffer the mesh fills.
    pub buf: Buffer,
}

/// What a request waits for.
#[derive(Debug)]
pub enum ReqKind {
    /// An `isend`.
    Send {
        /// The mesh request.
        req: SendRequest,
        /// Its staging buffer.
        buf: Buffer,
    },
    /// An `irecv`.
    Recv {
        /// The mesh request.
        req: RecvRequest,
        /// One per buffer of the (grouped) receive.
        dsts: Vec<Dst>,
    },
}

/// A request (`isend`/`irecv`'s `*request`).
#[derive(Debug)]
pub struct Request {
    /// The comm that owns it (closing the comm frees it).
    pub comm_id: u64,
    /// Where its staging buffers go back.
    pub pool: Arc<Pool>,
    /// What it waits for.
    pub kind: Mutex<Option<ReqKind>>,
}

/// A finished request: the actual sizes, and for a receive the copies still to make into
/// NCCL's memory.
#[derive(Debug)]
pub struct Completion {
    /// One size per buffer (one for a send).
    pub sizes: Vec<usize>,
    /// For a receive: `(NCCL address, staging buffer, bytes to copy)`.
    pub copies: Vec<(usize, Buffer, usize)>,
}

impl Request {
    /// Polls the mesh request: `Ok(Some)` once complete (the request is then spent).
    ///
    /// Errors: the mesh request's error (size, tag, connection failure).
    pub fn poll(&self) -> Result<Option<Completion>> {
        let mut k = self.kind.lock().unwrap_or_else(|p| p.into_inner());
        let done = match k.as_ref() {
            None => {
                return Err(crate::error::PluginError::internal(
                    "request tested after it completed",
                ))
            }
            Some(ReqKind::Send { req, .. }) => req.test().map(|o| o.map(|s| vec![s])),
            Some(ReqKind::Recv { req, .. }) => req.test(),
        };
        let done = match done {
            Ok(Some(s)) => s,
            Ok(None) => return Ok(None),
            Err(e) => {
                self.recycle(k.take());
                return Err(e.into());
            }
        };
        let copies = match k.take() {
            Some(ReqKind::Recv { dsts, .. }) => dsts
                .into_iter()
                .zip(&done)
                .map(|(d, &n)| (d.addr, d.buf, n.min(d.len)))
                .collect(),
            other => {
                self.recycle(other);
                Vec::new()
            }
        };
        Ok(Some(Completion {
            sizes: done,
            copies,
        }))
    }

    fn recycle(&self, k: Option<ReqKind>) {
        match k {
            Some(ReqKind::Send { buf, .. }) => self.pool.put(buf),
            Some(ReqKind::Recv { dsts, .. }) => dsts.into_iter().for_each(|d| self.pool.put(d.buf)),
            None => {}
        }
    }

    /// Gives a completion's staging buffers back once they were copied out.
    pub fn recycle_completion(&self, c: Completion) {
        for (_, b, _) in c.copies {
            self.pool.put(b);
        }
    }
}
