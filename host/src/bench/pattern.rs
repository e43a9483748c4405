//! The data pattern `rdmesh bench --verify` writes and checks: every 8-byte word at byte
//! offset `8·k` of message `iter` is `splitmix64(iter · 2^32 + k)` little-endian, so any byte
//! that lands in the wrong place, the wrong message, or not at all is caught.

fn splitmix64(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

fn word(iter: u64, k: u64) -> [u8; 8] {
    splitmix64((iter << 32) ^ k).to_le_bytes()
}

/// Fills `buf` with the pattern of message `iter`.
pub fn fill(buf: &mut [u8], iter: u64) {
    for (k, chunk) in buf.chunks_mut(8).enumerate() {
        let w = word(iter, k as u64);
        chunk.copy_from_slice(&w[..chunk.len()]);
    }
}

/// Returns the offset of the first byte of `buf` that differs from message `iter`'s pattern.
pub fn first_mismatch(buf: &[u8], iter: u64) -> Option<usize> {
    for (k, chunk) in buf.chunks(8).enumerate() {
        let w = word(iter, k as u64);
        if chunk != &w[..chunk.len()] {
            let i = chunk
                .iter()
                .zip(w.iter())
                .position(|(a, b)| a != b)
                .unwrap_or(0);
            return Some(k * 8 + i);
        }
    }
    None
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn detects_changes() {
        let mut b = vec![0u8; 1001];
        fill(&mut b, 7);
        assert_eq!(first_mismatch(&b, 7), None);
        assert_eq!(first_mismatch(&b, 8), Some(0));
        b[999] ^= 1;
        assert_eq!(first_mismatch(&b, 7), Some(999));
    }
}
