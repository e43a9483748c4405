//! Tables keyed by a 32-bit QPN or memory key, looked up for every packet.
//!
//! std's `HashMap` hashes with SipHash-1-3, built to resist chosen keys; these keys are chosen
//! by this process (QPNs and lkeys/rkeys it allocated), and a lookup per received packet made
//! SipHash a measurable share of the soft provider's receive path. [`KeyMap`] hashes with one
//! multiplication by the 64-bit golden ratio (Fibonacci hashing, Knuth TAOCP vol. 3 §6.4) folded
//! so that both halves of the product vary with every key bit.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// A `HashMap` from QPN or memory key to `V` with [`KeyHasher`].
pub(crate) type KeyMap<V> = HashMap<u32, V, BuildHasherDefault<KeyHasher>>;

/// Fibonacci hashing of one `u32` (other inputs are folded in 8 bytes at a time).
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct KeyHasher(u64);

impl Hasher for KeyHasher {
    fn finish(&self) -> u64 {
        let p = self.0.wrapping_mul(0x9e37_79b9_7f4a_7c15);
        p ^ (p >> 32)
    }

    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut b = [0u8; 8];
            b[..chunk.len()].copy_from_slice(chunk);
            self.0 = self.0.rotate_left(29) ^ u64::from_le_bytes(b);
        }
    }

    fn write_u32(&mut self, n: u32) {
        self.0 = self.0.rotate_left(29) ^ u64::from(n);
    }
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn keys_spread_over_buckets() {
        // Memory keys are index << 8 | key byte; QPNs are sequential. Both must spread: the
        // low 7 bits of the hash pick the group in a small table, the top 7 the tag.
        let hash = |k: u32| {
            let mut h = KeyHasher::default();
            h.write_u32(k);
            h.finish()
        };
        for keys in [
            (1..=64u32).map(|i| i << 8 | 0x9e).collect::<Vec<_>>(),
            (0x11..0x11 + 64).collect(),
        ] {
            let low: std::collections::HashSet<u64> = keys.iter().map(|&k| hash(k) & 63).collect();
            let top: std::collections::HashSet<u64> = keys.iter().map(|&k| hash(k) >> 57).collect();
            assert!(low.len() > 32, "{} distinct low buckets", low.len());
            assert!(top.len() > 32, "{} distinct tags", top.len());
        }
        let mut m: KeyMap<u32> = KeyMap::default();
        for k in 0..1000 {
            m.insert(k << 8, k);
        }
        assert!((0..1000).all(|k| m.get(&(k << 8)) == Some(&k)));
    }
}
