//! The receive-queue ring writer (rdma-core qp.c `mlx5_post_recv`, non-SRQ RQ).
//!
//! The ring is `2^n` receive WQEs of `2^wqe_shift` bytes (the QPC's `log_rq_stride` is
//! `wqe_shift - 4`). A receive WQE is an array of data segments, one per non-empty scatter
//! entry; when it holds fewer than `stride / 16` entries, a terminator (byte count 0,
//! `MLX5_INVALID_LKEY`, address 0) follows the last one. The 16-bit head counter counts WQEs;
//! the doorbell record's dword 0 receives `head & 0xffff`. Receive completions retire WQEs
//! in order.

use heapless::Vec;

use super::data::{DataRepr, DataSeg};
use super::doorbell::RecvBatch;
use super::wqe::Sge;
use super::{Error, Result, DS_LEN, MAX_RING_WQEBBS};

/// Largest receive WQE stride supported: 1 KiB (`wqe_shift` 10), i.e. 64 scatter entries.
pub const MAX_WQE_SHIFT: u32 = 10;
/// Most scatter entries a receive WQE can hold (`2^MAX_WQE_SHIFT / 16`).
pub const MAX_RECV_SGE: usize = (1 << MAX_WQE_SHIFT) / DS_LEN;

/// Writes receive WQEs into a ring held in caller memory.
#[derive(Debug)]
pub struct RqWriter<'r> {
    ring: &'r mut [u8],
    wqe_shift: u32,
    mask: u16,
    wqe_cnt: u32,
    head: u16,
    tail: u16,
    batch_first: u16,
    batch_count: u16,
}

impl<'r> RqWriter<'r> {
    /// A writer over `ring` with WQEs of `1 << wqe_shift` bytes.
    ///
    /// # Errors
    /// [`Error::BadRing`] unless `4 ≤ wqe_shift ≤ 10` and `ring.len()` is a power-of-two
    /// number (at most 2^15) of WQEs.
    pub fn new(ring: &'r mut [u8], wqe_shift: u32) -> Result<RqWriter<'r>> {
        if !(4..=MAX_WQE_SHIFT).contains(&wqe_shift) {
            return Err(Error::BadRing);
        }
        let stride = 1usize << wqe_shift;
        let n = ring.len() / stride;
        if ring.len() % stride != 0 || !n.is_power_of_two() || n > MAX_RING_WQEBBS {
            return Err(Error::BadRing);
        }
        Ok(RqWriter {
            ring,
            wqe_shift,
            mask: (n - 1) as u16,
            wqe_cnt: n as u32,
            head: 0,
            tail: 0,
            batch_first: 0,
            batch_count: 0,
        })
    }

    /// Resumes a ring whose producer counter is `head` and consumer counter `tail` (a driver
    /// that keeps the counters itself and makes a writer per `post_recv` call; compare
    /// [`SqWriter::with_counter`](super::SqWriter::with_counter)).
    pub fn with_counters(mut self, head: u16, tail: u16) -> Self {
        self.head = head;
        self.tail = tail;
        self.batch_first = head;
        self.batch_count = 0;
        self
    }

    /// Scatter entries per WQE (`stride / 16`, rdma-core `rq.max_gs`).
    pub fn max_sge(&self) -> usize {
        (1usize << self.wqe_shift) / DS_LEN
    }

    /// Posts one receive WQE with the non-empty entries of `sges`; returns its index.
    ///
    /// # Errors
    /// [`Error::RingFull`] when every WQE is outstanding; [`Error::Oversize`] when more
    /// non-empty entries than [`max_sge`](Self::max_sge); [`Error::BadLength`] for an entry of
    /// 2^31 bytes or more. Nothing is written on error.
    pub fn post(&mut self, sges: &[Sge]) -> Result<u16> {
        let outstanding = self.head.wrapping_sub(self.tail) as u32;
        if outstanding >= self.wqe_cnt {
            return Err(Error::RingFull { needed: 1, free: 0 });
        }
        let n = sges.iter().filter(|s| s.len != 0).count();
        if n > self.max_sge() {
            return Err(Error::Oversize { ds: n });
        }
        if sges.iter().any(|s| s.len >= 1 << 31) {
            return Err(Error::BadLength);
        }
        let stride = 1usize << self.wqe_shift;
        let max_sge = self.max_sge();
        let base = (self.head & self.mask) as usize * stride;
        let wqe = &mut self.ring[base..base + stride];
        let mut j = 0;
        for s in sges.iter().filter(|s| s.len != 0) {
            DataRepr {
                byte_count: s.len,
                lkey: s.lkey,
                addr: s.addr,
            }
            .emit(&mut DataSeg::new_unchecked(
                &mut wqe[j * DS_LEN..(j + 1) * DS_LEN],
            ));
            j += 1;
        }
        if j < max_sge {
            DataRepr::END.emit(&mut DataSeg::new_unchecked(
                &mut wqe[j * DS_LEN..(j + 1) * DS_LEN],
            ));
        }
        let idx = self.head;
        if self.batch_count == 0 {
            self.batch_first = idx;
        }
        self.batch_count += 1;
        self.head = idx.wrapping_add(1);
        Ok(idx)
    }

    /// Retires the `count` oldest outstanding WQEs (one per receive completion).
    ///
    /// # Errors
    /// [`Error::NotOutstanding`] (with the tail index) when fewer are outstanding.
    pub fn retire(&mut self, count: u16) -> Result<()> {
        if count > self.head.wrapping_sub(self.tail) {
            return Err(Error::NotOutstanding {
                wqe_counter: self.tail,
            });
        }
        self.tail = self.tail.wrapping_add(count);
        Ok(())
    }

    /// The WQEs posted since the last call (for [`ring_recv`](super::doorbell::ring_recv)),
    /// or `None`. Resets the batch.
    pub fn take_batch(&mut self) -> Option<RecvBatch> {
        if self.batch_count == 0 {
            return None;
        }
        let b = RecvBatch {
            first: self.batch_first,
            count: self.batch_count,
            head: self.head,
        };
        self.batch_count = 0;
        Some(b)
    }

    /// The head counter (index of the next WQE).
    pub fn head(&self) -> u16 {
        self.head
    }

    /// The oldest outstanding WQE's index.
    pub fn tail(&self) -> u16 {
        self.tail
    }

    /// The receive doorbell-record word (QP dbrec dword 0): `htobe32(head & 0xffff)`.
    pub fn dbrec(&self) -> [u8; 4] {
        (self.head as u32).to_be_bytes()
    }

    /// The bytes of the WQE with index `idx`.
    pub fn wqe(&self, idx: u16) -> &[u8] {
        let stride = 1usize << self.wqe_shift;
        let base = (idx & self.mask) as usize * stride;
        &self.ring[base..base + stride]
    }

    /// The ring bytes.
    pub fn ring(&self) -> &[u8] {
        self.ring
    }
}

/// Reads a receive WQE: its data segments up to the terminator or the end of `wqe`
/// (16-byte units; a trailing partial unit is ignored).
pub fn parse_recv_wqe(wqe: &[u8]) -> Vec<DataRepr, MAX_RECV_SGE> {
    let mut out = Vec::new();
    for c in wqe.chunks_exact(DS_LEN) {
        let d = DataRepr {
            byte_count: DataSeg::new_unchecked(c).byte_count(),
            lkey: DataSeg::new_unchecked(c).lkey(),
            addr: DataSeg::new_unchecked(c).addr(),
        };
        if d.is_end() || out.push(d).is_err() {
            break;
        }
    }
    out
}

#[cfg(test)]
mod test {
    use super::*;
    use crate::mlx5::doorbell::{ring_recv, DbRecord, Effect};

    #[test]
    fn test_post_and_terminator() {
        let mut ring = [0xffu8; 4 * 64];
        let mut rq = RqWriter::new(&mut ring, 6).unwrap();
        assert_eq!(rq.max_sge(), 4);
        let sges = [
            Sge {
                addr: 0x1000,
                lkey: 7,
                len: 256,
            },
            Sge {
                addr: 0,
                lkey: 0,
                len: 0,
            },
            Sge {
                addr: 0x2000,
                lkey: 8,
                len: 512,
            },
        ];
        assert_eq!(rq.post(&sges).unwrap(), 0);
        let w = rq.wqe(0);
        assert_eq!(w[..16], [0, 0, 1, 0, 0, 0, 0, 7, 0, 0, 0, 0, 0, 0, 0x10, 0]);
        assert_eq!(w[32..48], [0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(w[48], 0xff);
        let parsed = parse_recv_wqe(w);
        assert_eq!(parsed.len(), 2);
        assert_eq!(parsed[1].addr, 0x2000);
        let full = [Sge {
            addr: 1,
            lkey: 1,
            len: 1,
        }; 4];
        assert_eq!(rq.post(&full).unwrap(), 1);
        assert_eq!(parse_recv_wqe(rq.wqe(1)).len(), 4);
        assert_eq!(rq.post(&[full[0]; 5]), Err(Error::Oversize { ds: 5 }));
        rq.post(&[]).unwrap();
        rq.post(&[]).unwrap();
        assert_eq!(rq.post(&[]), Err(Error::RingFull { needed: 1, free: 0 }));
        let b = rq.take_batch().unwrap();
        assert_eq!((b.first, b.count, b.head), (0, 4, 4));
        assert_eq!(
            ring_recv(&b)[2],
            Effect::DbrecStore {
                record: DbRecord::QpRecv,
                value: [0, 0, 0, 4]
            }
        );
        assert!(rq.retire(5).is_err());
        rq.retire(1).unwrap();
        assert_eq!(rq.post(&[]).unwrap(), 4);
        assert_eq!(rq.dbrec(), [0, 0, 0, 5]);
    }

    #[test]
    fn test_bad_ring() {
        assert!(RqWriter::new(&mut [0u8; 48], 4).is_err());
        assert!(RqWriter::new(&mut [0u8; 64], 3).is_err());
        assert!(RqWriter::new(&mut [0u8; 64], 11).is_err());
        assert!(RqWriter::new(&mut [0u8; 64], 4).is_ok());
    }
}
