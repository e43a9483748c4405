//! Bounded big-endian encoding of the mesh's variable-length messages (handshake bodies,
//! topology tables). Every count and string length is checked against a bound before anything
//! is allocated; a decoder error names the field that was short or out of range.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::topo::IfAddr;

/// Address family code of an IPv4 address on the wire.
pub const FAMILY_V4: u8 = 4;
/// Address family code of an IPv6 address on the wire.
pub const FAMILY_V6: u8 = 6;

/// Bytes an [`IfAddr`] takes: family, prefix length, 4 or 16 address bytes.
pub fn ifaddr_len(a: &IfAddr) -> usize {
    match a.ip {
        IpAddr::V4(_) => 6,
        IpAddr::V6(_) => 18,
    }
}

/// Appends big-endian values to a byte vector.
#[derive(Debug, Default)]
pub struct Writer(pub Vec<u8>);

impl Writer {
    /// A new, empty writer.
    pub fn new() -> Writer {
        Writer(Vec::with_capacity(256))
    }

    /// One byte.
    pub fn u8(&mut self, v: u8) -> &mut Self {
        self.0.push(v);
        self
    }

    /// Two bytes, big-endian.
    pub fn u16(&mut self, v: u16) -> &mut Self {
        self.0.extend_from_slice(&v.to_be_bytes());
        self
    }

    /// Four bytes, big-endian.
    pub fn u32(&mut self, v: u32) -> &mut Self {
        self.0.extend_from_slice(&v.to_be_bytes());
        self
    }

    /// Eight bytes, big-endian.
    pub fn u64(&mut self, v: u64) -> &mut Self {
        self.0.extend_from_slice(&v.to_be_bytes());
        self
    }

    /// Raw bytes, no length.
    pub fn raw(&mut self, b: &[u8]) -> &mut Self {
        self.0.extend_from_slice(b);
        self
    }

    /// A string as u16 length + UTF-8 bytes, cut at `max` bytes (on a character boundary).
    pub fn str(&mut self, s: &str, max: usize) -> &mut Self {
        let mut end = s.len().min(max).min(u16::MAX as usize);
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        self.u16(end as u16);
        self.raw(&s.as_bytes()[..end])
    }

    /// An IP address: family code, then 4 or 16 bytes.
    pub fn ip(&mut self, ip: IpAddr) -> &mut Self {
        match ip {
            IpAddr::V4(v4) => self.u8(FAMILY_V4).raw(&v4.octets()),
            IpAddr::V6(v6) => self.u8(FAMILY_V6).raw(&v6.octets()),
        }
    }

    /// An interface address: family code, prefix length, 4 or 16 address bytes.
    pub fn ifaddr(&mut self, a: &IfAddr) -> &mut Self {
        match a.ip {
            IpAddr::V4(v4) => self.u8(FAMILY_V4).u8(a.prefix_len).raw(&v4.octets()),
            IpAddr::V6(v6) => self.u8(FAMILY_V6).u8(a.prefix_len).raw(&v6.octets()),
        }
    }
}

/// Reads big-endian values with bounds checks; errors name the field.
#[derive(Debug)]
pub struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

/// A decoding error: which field, and why.
pub type DecodeResult<T> = std::result::Result<T, String>;

impl<'a> Reader<'a> {
    /// Reads `buf` from the start.
    pub fn new(buf: &'a [u8]) -> Reader<'a> {
        Reader { buf, pos: 0 }
    }

    /// Bytes not read yet.
    pub fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    /// The next `n` bytes.
    pub fn take(&mut self, n: usize, field: &str) -> DecodeResult<&'a [u8]> {
        if self.remaining() < n {
            return Err(format!(
                "{field}: needs {n} bytes at offset {}, only {} left",
                self.pos,
                self.remaining()
            ));
        }
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    /// One byte.
    pub fn u8(&mut self, field: &str) -> DecodeResult<u8> {
        Ok(self.take(1, field)?[0])
    }

    /// Two bytes, big-endian.
    pub fn u16(&mut self, field: &str) -> DecodeResult<u16> {
        let b = self.take(2, field)?;
        Ok(u16::from_be_bytes([b[0], b[1]]))
    }

    /// Four bytes, big-endian.
    pub fn u32(&mut self, field: &str) -> DecodeResult<u32> {
        let b = self.take(4, field)?;
        Ok(u32::from_be_bytes(b.try_into().expect("4 bytes")))
    }

    /// Eight bytes, big-endian.
    pub fn u64(&mut self, field: &str) -> DecodeResult<u64> {
        let b = self.take(8, field)?;
        Ok(u64::from_be_bytes(b.try_into().expect("8 bytes")))
    }

    /// A count of at most `max`.
    pub fn count(&mut self, field: &str, max: usize) -> DecodeResult<usize> {
        let n = self.u8(field)? as usize;
        if n > max {
            return Err(format!("{field}: {n} exceeds the maximum of {max}"));
        }
        Ok(n)
    }

    /// A u16 length + UTF-8 string of at most `max` bytes (invalid UTF-8 is replaced).
    pub fn str(&mut self, field: &str, max: usize) -> DecodeResult<String> {
        let n = self.u16(field)? as usize;
        if n > max {
            return Err(format!(
                "{field}: string of {n} bytes exceeds the maximum of {max}"
            ));
        }
        Ok(String::from_utf8_lossy(self.take(n, field)?).into_owned())
    }

    /// An IP address (family code + bytes).
    pub fn ip(&mut self, field: &str) -> DecodeResult<IpAddr> {
        match self.u8(field)? {
            FAMILY_V4 => {
                let b: [u8; 4] = self.take(4, field)?.try_into().expect("4 bytes");
                Ok(IpAddr::V4(Ipv4Addr::from(b)))
            }
            FAMILY_V6 => {
                let b: [u8; 16] = self.take(16, field)?.try_into().expect("16 bytes");
                Ok(IpAddr::V6(Ipv6Addr::from(b)))
            }
            f => Err(format!(
                "{field}: address family {f} is neither {FAMILY_V4} nor {FAMILY_V6}"
            )),
        }
    }

    /// An interface address (family, prefix length, address bytes).
    pub fn ifaddr(&mut self, field: &str) -> DecodeResult<IfAddr> {
        let family = self.u8(field)?;
        let prefix_len = self.u8(field)?;
        let (ip, max) = match family {
            FAMILY_V4 => {
                let b: [u8; 4] = self.take(4, field)?.try_into().expect("4 bytes");
                (IpAddr::V4(Ipv4Addr::from(b)), 32)
            }
            FAMILY_V6 => {
                let b: [u8; 16] = self.take(16, field)?.try_into().expect("16 bytes");
                (IpAddr::V6(Ipv6Addr::from(b)), 128)
            }
            f => {
                return Err(format!(
                    "{field}: address family {f} is neither {FAMILY_V4} nor {FAMILY_V6}"
                ))
            }
        };
        if prefix_len > max {
            return Err(format!(
                "{field}: prefix length {prefix_len} exceeds {max} for {ip}"
            ));
        }
        Ok(IfAddr { ip, prefix_len })
    }

    /// Checks that everything was read.
    pub fn finish(&self, what: &str) -> DecodeResult<()> {
        if self.remaining() != 0 {
            return Err(format!(
                "{what}: {} unexpected trailing bytes",
                self.remaining()
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn roundtrip_and_bounds() {
        let a4 = IfAddr {
            ip: "192.168.100.1".parse().unwrap(),
            prefix_len: 24,
        };
        let a6 = IfAddr {
            ip: "fd00::1".parse().unwrap(),
            prefix_len: 64,
        };
        let mut w = Writer::new();
        w.u8(1)
            .u16(2)
            .u32(3)
            .u64(4)
            .str("héllo", 2)
            .ifaddr(&a4)
            .ifaddr(&a6)
            .ip(a6.ip);
        assert_eq!(ifaddr_len(&a4) + ifaddr_len(&a6), 24);
        let mut r = Reader::new(&w.0);
        assert_eq!(r.u8("a").unwrap(), 1);
        assert_eq!(r.u16("b").unwrap(), 2);
        assert_eq!(r.u32("c").unwrap(), 3);
        assert_eq!(r.u64("d").unwrap(), 4);
        // 2 bytes would split 'é': cut back to "h".
        assert_eq!(r.str("e", 16).unwrap(), "h");
        assert_eq!(r.ifaddr("f").unwrap(), a4);
        assert_eq!(r.ifaddr("g").unwrap(), a6);
        assert_eq!(r.ip("h").unwrap(), a6.ip);
        r.finish("msg").unwrap();
        let e = r.u8("late").unwrap_err();
        assert!(e.contains("late: needs 1 bytes"), "{e}");

        let e = Reader::new(&[4, 33, 1, 2, 3, 4])
            .ifaddr("addr")
            .unwrap_err();
        assert!(e.contains("prefix length 33 exceeds 32"), "{e}");
        let e = Reader::new(&[5, 0]).ip("addr").unwrap_err();
        assert!(e.contains("family 5"), "{e}");
        let e = Reader::new(&[9]).count("rails", 8).unwrap_err();
        assert!(e.contains("9 exceeds the maximum of 8"), "{e}");
        let e = Reader::new(&[0, 200]).str("s", 100).unwrap_err();
        assert!(e.contains("200 bytes exceeds"), "{e}");
        assert!(Reader::new(&[1]).finish("m").is_err());
    }
}
