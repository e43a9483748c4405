//! The Internet checksum (RFC 1071): 16-bit ones' complement of the ones' complement sum of
//! big-endian 16-bit words; an odd trailing byte is padded with a zero byte.
//! Used by the IPv4 header checksum (RFC 791) and the UDP checksum (RFC 768, RFC 8200 §8.1).

/// Adds `data` as big-endian 16-bit words to a running 32-bit sum (not yet folded).
/// Feed data in even-length pieces except possibly the last.
#[inline]
pub fn sum(mut acc: u32, data: &[u8]) -> u32 {
    let mut chunks = data.chunks_exact(2);
    for c in &mut chunks {
        acc = acc.wrapping_add(u32::from(u16::from_be_bytes([c[0], c[1]])));
        // Fold early so the 32-bit accumulator never overflows whatever the input length.
        acc = (acc & 0xffff) + (acc >> 16);
    }
    if let [last] = chunks.remainder() {
        acc = acc.wrapping_add(u32::from(*last) << 8);
        acc = (acc & 0xffff) + (acc >> 16);
    }
    acc
}

/// Folds a running sum to 16 bits and returns its ones' complement (the checksum value).
#[inline]
pub fn finish(mut acc: u32) -> u16 {
    while acc > 0xffff {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    !(acc as u16)
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn rfc1071_example() {
        // RFC 1071 §3: bytes 00 01 f2 03 f4 f5 f6 f7 sum to 0xddf2 (before complement).
        let d = [0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7];
        assert_eq!(finish(sum(0, &d)), !0xddf2);
        // Odd length: trailing byte padded with zero.
        assert_eq!(finish(sum(0, &[0x12])), !0x1200);
        // Split feeding equals one pass.
        assert_eq!(sum(sum(0, &d[..4]), &d[4..]), sum(0, &d));
    }
}
