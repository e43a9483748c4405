//! The registry of the pointers NCCL holds: contexts, comms, registrations and requests.
//!
//! NCCL calls `test` on every request in flight over and over from its proxy thread, and
//! `isend`/`irecv`/`test` each start with a lookup, so the lookup is on every call's path.
//! The registry is split into [`SHARDS`] maps, each behind its own lock and keyed by the
//! pointer's value with a multiply-fold hash ([`PtrHasher`]): a lookup is one uncontended
//! lock, a few instructions of hashing and one probe, and threads working on different
//! objects rarely share a lock. (One process-wide `Mutex<HashMap>` with SipHash cost ~240
//! instructions a call — 12 % of the instructions of an 8 KiB plugin ping-pong, callgrind.)
//!
//! The keys are addresses of live `Arc`s (`Object::key`): no two live objects share one.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::{LazyLock, Mutex, MutexGuard};

use crate::state::Object;

/// Number of independently locked maps.
pub const SHARDS: usize = 16;

/// Hashes a pointer-sized key: the 128-bit product with an odd constant, folded (high ^ low
/// 64 bits), then MurmurHash3's 64-bit finalizer (`fmix64`), so that every bit of the key
/// reaches the low bits that pick the bucket and the high bits that `HashMap` compares in its
/// control bytes. About a dozen instructions, against SipHash-1-3's ~100 for one `usize`.
#[derive(Default, Clone, Copy)]
pub struct PtrHasher(u64);

impl Hasher for PtrHasher {
    fn finish(&self) -> u64 {
        let mut h = self.0;
        h ^= h >> 33;
        h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
        h ^= h >> 33;
        h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
        h ^ (h >> 33)
    }

    fn write(&mut self, bytes: &[u8]) {
        // Only `usize` keys are stored; other writes still hash every byte.
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }

    fn write_u64(&mut self, v: u64) {
        const K: u64 = 0x9e37_79b9_7f4a_7c15;
        let p = u128::from(v ^ self.0).wrapping_mul(u128::from(K));
        self.0 = (p >> 64) as u64 ^ p as u64;
    }

    fn write_usize(&mut self, v: usize) {
        self.write_u64(v as u64);
    }
}

type Map = HashMap<usize, Object, BuildHasherDefault<PtrHasher>>;

static MAPS: LazyLock<[Mutex<Map>; SHARDS]> =
    LazyLock::new(|| std::array::from_fn(|_| Mutex::new(Map::default())));

/// The shard of `key`: bits above the allocation's 16-byte alignment.
fn shard(key: usize) -> MutexGuard<'static, Map> {
    MAPS[(key >> 4) % SHARDS]
        .lock()
        .unwrap_or_else(|p| p.into_inner())
}

/// Stores `o` under its key; returns the key.
pub fn insert(o: Object) -> usize {
    let k = o.key();
    shard(k).insert(k, o);
    k
}

/// The object under `key`, if live (a clone of its `Arc`).
pub fn get(key: usize) -> Option<Object> {
    shard(key).get(&key).cloned()
}

/// Removes and returns the object under `key`.
pub fn remove(key: usize) -> Option<Object> {
    shard(key).remove(&key)
}

/// Removes every object for which `f` is true; returns them (dropped by the caller, outside
/// the locks).
pub fn remove_where(mut f: impl FnMut(&Object) -> bool) -> Vec<Object> {
    let mut out = Vec::new();
    for m in MAPS.iter() {
        let mut m = m.lock().unwrap_or_else(|p| p.into_inner());
        let keys: Vec<usize> = m.iter().filter(|(_, o)| f(o)).map(|(k, _)| *k).collect();
        out.extend(keys.iter().filter_map(|k| m.remove(k)));
    }
    out
}

/// Calls `f` on every live object (each shard locked in turn).
pub fn for_each(mut f: impl FnMut(&Object)) {
    for m in MAPS.iter() {
        m.lock()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .for_each(&mut f);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::hash::BuildHasher;

    #[test]
    fn aligned_pointers_spread_over_buckets_and_control_bytes() {
        // Keys 16 bytes apart, as consecutive small allocations are: the low 7 bits (a
        // 128-bucket table's index) and the top 7 bits (hashbrown's control byte) must both
        // take many values.
        let b = BuildHasherDefault::<PtrHasher>::default();
        let mut low = std::collections::HashSet::new();
        let mut high = std::collections::HashSet::new();
        for i in 0..128usize {
            let h = b.hash_one(0x7f00_1234_5670usize + 16 * i);
            low.insert(h & 0x7f);
            high.insert(h >> 57);
        }
        assert!(low.len() > 64, "{} bucket indices of 128", low.len());
        assert!(high.len() > 64, "{} control bytes of 128", high.len());
    }
}
