//! Byte strings that may wrap around the end of a ring: inline data and inline Ethernet
//! headers are copied into the send queue as they come and continue at the ring's first byte
//! when they reach its end (rdma-core qp.c `set_data_inl_seg`, `set_tso_eth_seg`).

/// A byte string stored in up to two pieces: `head`, then `tail` (empty unless the bytes
/// wrapped around the ring end). Two values are equal when their concatenations are equal,
/// however they are split.
#[derive(Debug, Clone, Copy, Default)]
pub struct SplitBytes<'a> {
    /// The first piece (up to the ring end).
    pub head: &'a [u8],
    /// The rest, from the ring start; empty when nothing wrapped.
    pub tail: &'a [u8],
}

impl<'a> SplitBytes<'a> {
    /// One contiguous piece.
    pub const fn new(bytes: &'a [u8]) -> SplitBytes<'a> {
        SplitBytes {
            head: bytes,
            tail: &[],
        }
    }

    /// `len` bytes of `ring` starting at `start`, continuing at offset 0 past the end.
    /// Returns `None` when `start > ring.len()` or `len > ring.len()`.
    pub fn from_ring(ring: &'a [u8], start: usize, len: usize) -> Option<SplitBytes<'a>> {
        if start > ring.len() || len > ring.len() {
            return None;
        }
        let first = (ring.len() - start).min(len);
        Some(SplitBytes {
            head: &ring[start..start + first],
            tail: &ring[..len - first],
        })
    }

    /// Total length in bytes.
    pub const fn len(&self) -> usize {
        self.head.len() + self.tail.len()
    }

    /// `true` when both pieces are empty.
    pub const fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The bytes in order.
    pub fn iter(&self) -> impl Iterator<Item = u8> + 'a {
        self.head.iter().chain(self.tail.iter()).copied()
    }

    /// Copies the bytes into the start of `out`; returns how many were copied
    /// (`min(self.len(), out.len())`).
    pub fn copy_to(&self, out: &mut [u8]) -> usize {
        let n = self.len().min(out.len());
        let h = self.head.len().min(n);
        out[..h].copy_from_slice(&self.head[..h]);
        out[h..n].copy_from_slice(&self.tail[..n - h]);
        n
    }
}

impl PartialEq for SplitBytes<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len() && self.iter().eq(other.iter())
    }
}

impl Eq for SplitBytes<'_> {}

#[cfg(feature = "defmt")]
impl defmt::Format for SplitBytes<'_> {
    fn format(&self, f: defmt::Formatter) {
        defmt::write!(f, "{=[u8]:x}{=[u8]:x}", self.head, self.tail)
    }
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn test_from_ring_wraps() {
        let ring = [0u8, 1, 2, 3, 4, 5, 6, 7];
        let b = SplitBytes::from_ring(&ring, 6, 4).unwrap();
        assert_eq!(b.head, &[6, 7]);
        assert_eq!(b.tail, &[0, 1]);
        assert_eq!(b, SplitBytes::new(&[6, 7, 0, 1]));
        assert_ne!(b, SplitBytes::new(&[6, 7, 0]));
        let mut out = [0u8; 3];
        assert_eq!(b.copy_to(&mut out), 3);
        assert_eq!(out, [6, 7, 0]);
        assert!(SplitBytes::from_ring(&ring, 9, 1).is_none());
        assert!(SplitBytes::from_ring(&ring, 0, 9).is_none());
        assert_eq!(
            SplitBytes::from_ring(&ring, 8, 2).unwrap(),
            SplitBytes::new(&[0, 1])
        );
    }
}
