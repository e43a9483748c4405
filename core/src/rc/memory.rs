//! Registered memory as seen by the RC state machines: the [`MemoryAccess`] trait the host
//! implements, and gather/scatter over SGE lists on top of it.
//!
//! Keys and access rights follow IBTA vol. 1 §10.6 (memory regions, L_Key/R_Key, access
//! rights) and §9.7.4.1.4 / §9.7.5.1.3 (R_Key validation by the responder, C9-88 ff.).

use super::wqe::Sge;

/// The kind of access being made, which the memory region's access flags must allow
/// (libibverbs `IBV_ACCESS_*`; local read is always allowed on a registered region).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum AccessKind {
    /// The local HCA reads the region (gathering a SEND/WRITE payload). Always permitted.
    LocalRead,
    /// The local HCA writes the region (scattering a received SEND or a READ response);
    /// needs `IBV_ACCESS_LOCAL_WRITE`.
    LocalWrite,
    /// A remote peer reads the region (RDMA READ); needs `IBV_ACCESS_REMOTE_READ`.
    RemoteRead,
    /// A remote peer writes the region (RDMA WRITE); needs `IBV_ACCESS_REMOTE_WRITE`.
    RemoteWrite,
    /// A remote atomic operation; needs `IBV_ACCESS_REMOTE_ATOMIC`.
    RemoteAtomic,
}

/// Why a memory access was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum MemError {
    /// No memory region has this L_Key/R_Key (in the QP's protection domain).
    InvalidKey,
    /// The address range is not inside the region.
    OutOfBounds,
    /// The region's access flags do not permit this [`AccessKind`].
    AccessDenied,
}

impl core::fmt::Display for MemError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            MemError::InvalidKey => "no memory region with this key in the protection domain",
            MemError::OutOfBounds => "address range outside the memory region",
            MemError::AccessDenied => "memory region access flags do not allow this access",
        })
    }
}

#[cfg(any(test, feature = "std"))]
impl std::error::Error for MemError {}

/// An 8-byte atomic operation on remote memory (IBTA vol. 1 §9.4.5, AtomicETH; libibverbs
/// `IBV_WR_ATOMIC_CMP_AND_SWP` / `IBV_WR_ATOMIC_FETCH_AND_ADD`).
///
/// The 8 bytes are a `u64` in the responder's native byte order, as Linux rxe executes them
/// (rxe_resp.c `atomic_reply` works on the CPU's `u64`); on the wire the operands and the
/// original value travel big-endian.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum AtomicOp {
    /// If the value equals `compare`, replace it with `swap` (AtomicETH Compare / Swap data).
    CompareSwap {
        /// Value the target must hold for the swap to happen.
        compare: u64,
        /// Value written when it does.
        swap: u64,
    },
    /// Add `add` to the value, wrapping modulo 2^64 (AtomicETH Swap-or-Add data).
    FetchAdd {
        /// The addend.
        add: u64,
    },
}

impl AtomicOp {
    /// The value to store after the operation on `orig`, or `None` when nothing is written
    /// (a compare-and-swap whose comparison failed).
    pub const fn apply(self, orig: u64) -> Option<u64> {
        match self {
            AtomicOp::CompareSwap { compare, swap } => {
                if orig == compare {
                    Some(swap)
                } else {
                    None
                }
            }
            AtomicOp::FetchAdd { add } => Some(orig.wrapping_add(add)),
        }
    }
}

/// Registered memory, implemented by the host: resolves an L_Key/R_Key plus a virtual-address
/// range to a memory region and checks the region's access flags.
///
/// Every method checks the key, that `[va, va + len)` lies inside the region and that the region
/// allows `kind`; on error nothing is copied.
pub trait MemoryAccess {
    /// Copies `out.len()` bytes starting at `va` into `out`.
    ///
    /// # Errors
    /// [`MemError`] when the key, range or access kind is not permitted.
    fn read(&mut self, key: u32, va: u64, out: &mut [u8], kind: AccessKind)
        -> Result<(), MemError>;

    /// Copies `data` into the region starting at `va`.
    ///
    /// # Errors
    /// [`MemError`] when the key, range or access kind is not permitted.
    fn write(&mut self, key: u32, va: u64, data: &[u8], kind: AccessKind) -> Result<(), MemError>;

    /// Checks, without copying, that `len` bytes at `va` may be accessed with `kind` through
    /// `key`. The responder calls it with the whole RETH range on the first packet of an RDMA
    /// WRITE/READ before touching memory.
    ///
    /// # Errors
    /// [`MemError`] when the key, range or access kind is not permitted.
    fn check(&mut self, key: u32, va: u64, len: u64, kind: AccessKind) -> Result<(), MemError>;

    /// Executes `op` on the 8 bytes at `va` (native byte order, see [`AtomicOp`]) through R_Key
    /// `rkey` with [`AccessKind::RemoteAtomic`] and returns the value they held before. The
    /// responder checks 8-byte alignment before calling.
    ///
    /// The default implementation is `check`, `read`, then `write` (only when the value
    /// changes): atomic with respect to other RC operations (the state machine is
    /// single-threaded) but not to concurrent CPU access to the region; implementors that
    /// share the memory with other threads should override it with a real atomic or hold their
    /// region lock across the read-modify-write.
    ///
    /// # Errors
    /// [`MemError`] when the key, range or access kind is not permitted; memory is unchanged.
    fn atomic(&mut self, rkey: u32, va: u64, op: AtomicOp) -> Result<u64, MemError> {
        self.check(rkey, va, 8, AccessKind::RemoteAtomic)?;
        let mut b = [0u8; 8];
        self.read(rkey, va, &mut b, AccessKind::RemoteAtomic)?;
        let orig = u64::from_ne_bytes(b);
        if let Some(new) = op.apply(orig) {
            self.write(rkey, va, &new.to_ne_bytes(), AccessKind::RemoteAtomic)?;
        }
        Ok(orig)
    }
}

/// Walks `sges` as one contiguous buffer and calls `f(sge, offset_in_sge, range_in_data)` for
/// each piece of the byte range `[offset, offset + len)`. Returns `false` when the SGEs hold
/// fewer than `offset + len` bytes (nothing is called in that case).
fn for_each_piece<E>(
    sges: &[Sge],
    offset: u64,
    len: usize,
    mut f: impl FnMut(&Sge, u64, core::ops::Range<usize>) -> Result<(), E>,
) -> Result<bool, E> {
    let total: u64 = super::wqe::total_length(sges);
    if offset.saturating_add(len as u64) > total {
        return Ok(false);
    }
    let mut skip = offset;
    let mut done = 0usize;
    for sge in sges {
        if done == len {
            break;
        }
        let sl = sge.length as u64;
        if skip >= sl {
            skip -= sl;
            continue;
        }
        let n = core::cmp::min(sl - skip, (len - done) as u64) as usize;
        f(sge, skip, done..done + n)?;
        done += n;
        skip = 0;
    }
    Ok(true)
}

/// Copies bytes `[offset, offset + out.len())` of the message described by `sges` into `out`,
/// reading each SGE through its L_Key with [`AccessKind::LocalRead`].
///
/// # Errors
/// The first [`MemError`] reported by `mem`; [`MemError::OutOfBounds`] when the SGEs are shorter
/// than the range.
pub(crate) fn gather<M: MemoryAccess + ?Sized>(
    mem: &mut M,
    sges: &[Sge],
    offset: u64,
    out: &mut [u8],
) -> Result<(), MemError> {
    let len = out.len();
    let ok = for_each_piece(sges, offset, len, |sge, off, r| {
        mem.read(
            sge.lkey,
            sge.addr.wrapping_add(off),
            &mut out[r],
            AccessKind::LocalRead,
        )
    })?;
    if ok {
        Ok(())
    } else {
        Err(MemError::OutOfBounds)
    }
}

/// Copies `data` into bytes `[offset, offset + data.len())` of the buffer described by `sges`,
/// writing each SGE through its L_Key with [`AccessKind::LocalWrite`].
///
/// # Errors
/// The first [`MemError`] reported by `mem` (earlier pieces may have been written);
/// [`MemError::OutOfBounds`] (nothing written) when the SGEs are shorter than the range.
pub(crate) fn scatter<M: MemoryAccess + ?Sized>(
    mem: &mut M,
    sges: &[Sge],
    offset: u64,
    data: &[u8],
) -> Result<(), MemError> {
    let ok = for_each_piece(sges, offset, data.len(), |sge, off, r| {
        mem.write(
            sge.lkey,
            sge.addr.wrapping_add(off),
            &data[r],
            AccessKind::LocalWrite,
        )
    })?;
    if ok {
        Ok(())
    } else {
        Err(MemError::OutOfBounds)
    }
}

#[cfg(test)]
mod test {
    use super::*;
    use std::vec::Vec;

    /// Records every access as (key, va, len).
    #[derive(Default)]
    struct Log(Vec<(u32, u64, usize)>);

    impl MemoryAccess for Log {
        fn read(
            &mut self,
            key: u32,
            va: u64,
            out: &mut [u8],
            _: AccessKind,
        ) -> Result<(), MemError> {
            self.0.push((key, va, out.len()));
            for (i, b) in out.iter_mut().enumerate() {
                *b = (va as usize + i) as u8;
            }
            Ok(())
        }
        fn write(&mut self, key: u32, va: u64, data: &[u8], _: AccessKind) -> Result<(), MemError> {
            self.0.push((key, va, data.len()));
            Ok(())
        }
        fn check(&mut self, _: u32, _: u64, _: u64, _: AccessKind) -> Result<(), MemError> {
            Ok(())
        }
    }

    fn sges() -> [Sge; 3] {
        [
            Sge {
                addr: 100,
                length: 10,
                lkey: 1,
            },
            Sge {
                addr: 500,
                length: 0,
                lkey: 2,
            },
            Sge {
                addr: 1000,
                length: 20,
                lkey: 3,
            },
        ]
    }

    #[test]
    fn atomic_ops() {
        assert_eq!(
            AtomicOp::CompareSwap {
                compare: 5,
                swap: 9
            }
            .apply(5),
            Some(9)
        );
        assert_eq!(
            AtomicOp::CompareSwap {
                compare: 5,
                swap: 9
            }
            .apply(6),
            None
        );
        assert_eq!(AtomicOp::FetchAdd { add: 2 }.apply(u64::MAX), Some(1));
        // The default `atomic` reads, then writes the new value (Log's read pattern: va + i).
        let mut m = Log::default();
        let orig = m.atomic(4, 0x10, AtomicOp::FetchAdd { add: 1 }).unwrap();
        assert_eq!(orig, u64::from_ne_bytes([16, 17, 18, 19, 20, 21, 22, 23]));
        assert_eq!(m.0, [(4, 0x10, 8), (4, 0x10, 8)]);
        // A failed compare writes nothing.
        let mut m = Log::default();
        m.atomic(
            4,
            0x10,
            AtomicOp::CompareSwap {
                compare: 0,
                swap: 1,
            },
        )
        .unwrap();
        assert_eq!(m.0, [(4, 0x10, 8)]);
    }

    #[test]
    fn gather_spans_sges() {
        let mut m = Log::default();
        let mut out = [0u8; 12];
        gather(&mut m, &sges(), 5, &mut out).unwrap();
        assert_eq!(m.0, [(1, 105, 5), (3, 1000, 7)]);
        assert_eq!(out[..5], [105, 106, 107, 108, 109]);
        assert_eq!(out[5..], [232, 233, 234, 235, 236, 237, 238]); // 1000.. as u8
    }

    #[test]
    fn scatter_bounds() {
        let mut m = Log::default();
        assert_eq!(
            scatter(&mut m, &sges(), 25, &[0; 6]),
            Err(MemError::OutOfBounds)
        );
        assert!(m.0.is_empty());
        scatter(&mut m, &sges(), 25, &[0; 5]).unwrap();
        assert_eq!(m.0, [(3, 1015, 5)]);
        // Zero-length access at the very end is fine.
        scatter(&mut m, &sges(), 30, &[]).unwrap();
    }
}
