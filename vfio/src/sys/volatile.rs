//! Copies between Rust slices and memory another agent writes concurrently (DMA memory, a BAR),
//! with volatile accesses only: no Rust reference into that memory is ever created.
//!
//! Aligned 8-byte words are copied as one `u64` access each, the rest byte by byte.

/// Copies `out.len()` bytes from `src`.
///
/// # Safety
/// `src..src+out.len()` must be mapped, readable memory for the whole call.
pub unsafe fn copy_from(src: *const u8, out: &mut [u8]) {
    let mut i = 0;
    while i < out.len() {
        // SAFETY: i < out.len(), so src+i is inside the caller's range.
        let p = unsafe { src.add(i) };
        if (p as usize) % 8 == 0 && out.len() - i >= 8 {
            // SAFETY: p is 8-byte aligned and p..p+8 lies inside the caller's range.
            let w = unsafe { core::ptr::read_volatile(p as *const u64) };
            out[i..i + 8].copy_from_slice(&w.to_ne_bytes());
            i += 8;
        } else {
            // SAFETY: p lies inside the caller's range.
            out[i] = unsafe { core::ptr::read_volatile(p) };
            i += 1;
        }
    }
}

/// Copies `data` to `dst`.
///
/// # Safety
/// `dst..dst+data.len()` must be mapped, writable memory for the whole call.
pub unsafe fn copy_to(dst: *mut u8, data: &[u8]) {
    let mut i = 0;
    while i < data.len() {
        // SAFETY: i < data.len(), so dst+i is inside the caller's range.
        let p = unsafe { dst.add(i) };
        if (p as usize) % 8 == 0 && data.len() - i >= 8 {
            let w = u64::from_ne_bytes(data[i..i + 8].try_into().expect("8 bytes"));
            // SAFETY: p is 8-byte aligned and p..p+8 lies inside the caller's range.
            unsafe { core::ptr::write_volatile(p as *mut u64, w) };
            i += 8;
        } else {
            // SAFETY: p lies inside the caller's range.
            unsafe { core::ptr::write_volatile(p, data[i]) };
            i += 1;
        }
    }
}

/// Writes `len` zero bytes at `dst`.
///
/// # Safety
/// As for [`copy_to`].
pub unsafe fn zero(dst: *mut u8, len: usize) {
    let zeros = [0u8; 4096];
    let mut done = 0;
    while done < len {
        let n = (len - done).min(zeros.len());
        // SAFETY: dst+done..dst+done+n lies inside the caller's range.
        unsafe { copy_to(dst.add(done), &zeros[..n]) };
        done += n;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unaligned_heads_and_tails_round_trip() {
        let mut mem = vec![0u64; 8]; // 64 aligned bytes
        let base = mem.as_mut_ptr() as *mut u8;
        let data: Vec<u8> = (0..37u8).map(|i| i.wrapping_mul(7) ^ 0x5a).collect();
        for start in 0..9 {
            // SAFETY: start + 37 <= 64 bytes of `mem`.
            unsafe { zero(base, 64) };
            unsafe { copy_to(base.add(start), &data) };
            let mut out = vec![0u8; 37];
            unsafe { copy_from(base.add(start), &mut out) };
            assert_eq!(out, data, "start {start}");
            let mut all = vec![0u8; 64];
            unsafe { copy_from(base, &mut all) };
            assert!(all[..start].iter().all(|&b| b == 0));
            assert!(all[start + 37..].iter().all(|&b| b == 0));
        }
    }
}
