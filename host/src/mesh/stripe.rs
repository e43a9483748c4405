//! Multi-rail striping: how one message is cut into chunks and spread over the rails to a
//! peer.
//!
//! A message smaller than the striping threshold goes whole on the first rail (the one with the
//! highest ceiling), cut only into frame-sized chunks. A larger message is split into one
//! contiguous share per rail, proportional to the rails' weights (their NICs' bandwidth
//! ceilings), each share a multiple of 128 bytes except the last rail's, which takes the
//! remainder; every chunk therefore starts at a multiple of 128 bytes (the alignment NCCL's
//! LL128 protocol needs, as NCCL IB's `ncclIbMultiSend` keeps). Shares are cut into chunks of
//! at most one frame. The receiver places every chunk at its offset as it arrives, on whichever
//! rail (reassembly in place).

/// Chunk starts are multiples of this many bytes.
pub const STRIPE_ALIGN: usize = 128;

/// One chunk of a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Chunk {
    /// The rail (index in the hop's rail set).
    pub rail: usize,
    /// Offset in the message, bytes.
    pub offset: usize,
    /// Length, bytes.
    pub len: usize,
}

/// The chunks of a message of `len` bytes over `rails` = `(rail index, weight)`, first rail
/// first. Messages below `stripe_min` bytes, and any message when one rail is given, use only
/// the first rail. `max_chunk` (a multiple of 128) bounds every chunk. A zero-byte message is
/// one empty chunk. No rails: no chunks.
pub fn plan(len: usize, rails: &[(usize, f64)], stripe_min: usize, max_chunk: usize) -> Vec<Chunk> {
    let max_chunk = (max_chunk / STRIPE_ALIGN).max(1) * STRIPE_ALIGN;
    let Some(&(first, _)) = rails.first() else {
        return Vec::new();
    };
    if len == 0 {
        return vec![Chunk {
            rail: first,
            offset: 0,
            len: 0,
        }];
    }
    // One allocation: every chunk of every rail's share (`rail`, its first byte, its bytes).
    let mut out = Vec::with_capacity(len.div_ceil(max_chunk) + rails.len());
    let mut push_share = |rail: usize, start: usize, share: usize| {
        let mut off = 0;
        while off < share {
            let n = (share - off).min(max_chunk);
            out.push(Chunk {
                rail,
                offset: start + off,
                len: n,
            });
            off += n;
        }
    };
    if len < stripe_min || rails.len() == 1 {
        push_share(first, 0, len);
    } else {
        let total: f64 = rails.iter().map(|r| r.1.max(0.0)).sum();
        let mut start = 0usize;
        for (k, &(rail, w)) in rails.iter().enumerate() {
            let share = if k + 1 == rails.len() {
                len - start
            } else if total > 0.0 {
                let ideal = len as f64 * w.max(0.0) / total;
                ((ideal / STRIPE_ALIGN as f64).floor() as usize * STRIPE_ALIGN).min(len - start)
            } else {
                0
            };
            if share > 0 {
                push_share(rail, start, share);
            }
            start += share;
        }
    }
    out
}

#[cfg(test)]
mod test {
    use super::*;

    fn bytes_per_rail(c: &[Chunk], rail: usize) -> usize {
        c.iter().filter(|c| c.rail == rail).map(|c| c.len).sum()
    }

    #[test]
    fn weighted_aligned_and_complete() {
        let rails = [(1, 90.0), (0, 30.0)];
        let len = 8 << 20;
        let c = plan(len, &rails, 65536, 65536);
        let r1 = bytes_per_rail(&c, 1);
        let r0 = bytes_per_rail(&c, 0);
        assert_eq!(r0 + r1, len);
        assert!((r1 as f64 / len as f64 - 0.75).abs() < 0.001, "{r1}");
        let mut next = 0;
        for ch in &c {
            assert_eq!(ch.offset, next, "contiguous, in order");
            assert_eq!(ch.offset % STRIPE_ALIGN, 0);
            assert!(ch.len <= 65536);
            next += ch.len;
        }
        assert_eq!(next, len);
    }

    #[test]
    fn odd_sizes_small_messages_and_edges() {
        let rails = [(0, 1.0), (1, 1.0), (2, 1.0)];
        let c = plan(1_000_003, &rails, 65536, 65536);
        assert_eq!(c.iter().map(|c| c.len).sum::<usize>(), 1_000_003);
        assert!(c.iter().all(|c| c.offset % 128 == 0));
        for r in 0..3 {
            let share = bytes_per_rail(&c, r);
            assert!((share as i64 - 333_334).abs() < 400, "{share}");
        }
        // Below the threshold: one rail.
        let c = plan(65535, &rails, 65536, 16384);
        assert!(c.iter().all(|c| c.rail == 0));
        assert_eq!(c.len(), 4);
        assert_eq!(
            plan(0, &rails, 1, 1),
            vec![Chunk {
                rail: 0,
                offset: 0,
                len: 0
            }]
        );
        assert!(plan(10, &[], 1, 128).is_empty());
        // Shares smaller than the alignment all land on the last rail.
        let c = plan(200, &rails, 1, 65536);
        assert_eq!(
            c,
            vec![Chunk {
                rail: 2,
                offset: 0,
                len: 200
            }]
        );
        // A zero weight gets nothing unless it is last.
        let c = plan(1 << 20, &[(0, 0.0), (1, 5.0)], 1, 1 << 20);
        assert_eq!(bytes_per_rail(&c, 0), 0);
    }
}
