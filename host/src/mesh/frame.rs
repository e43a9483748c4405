//! Mesh frames: what one RC SEND on a rail carries. Every frame starts with a 32-byte header
//! (big-endian), followed by a payload whose meaning depends on the kind:
//!
//! | bytes | field | used by |
//! |---|---|---|
//! | 0 | kind | all |
//! | 1 | flags: [`FLAG_PLACED`] (DATA, CTS), [`FLAG_EAGER`] (DATA sent before its CTS), else 0 | DATA, CTS |
//! | 2 | count: number of CTS entries | CTS |
//! | 3 | index: buffer of a grouped receive; rail index for RAIL_DOWN | DATA, ABORT, RAIL_DOWN |
//! | 4..12 | seq: the receive's sequence number on the connection | DATA, CTS, ABORT |
//! | 12..20 | total: the send's size in bytes; a placement CTS: rails in its rkey lists | DATA, ABORT, CTS |
//! | 20..28 | offset of this chunk in the message, bytes | DATA |
//! | 28..32 | tag of the send | DATA, ABORT |
//!
//! Kinds: DATA (payload: message bytes at `offset`), CTS ("clear to send": the receiver
//! announces a posted receive; payload: `count` entries of size u64 · tag i32 · reserved u32),
//! ABORT (the sender refuses a send larger than the receive it matched), CLOSE (the endpoint
//! closed; payload: reason text), FAIL (a relay lost its next hop; payload: the error text),
//! RAIL_DOWN (hop-local: a rail of this hop failed; payload: the error text). Relays forward
//! every kind but RAIL_DOWN byte for byte.
//!
//! Direct placement (protocol extension, [`FLAG_PLACED`]): a CTS with the flag carries, after
//! its entries, one placement per entry: the virtual address (u64, 0: this buffer is not
//! registered) of the buffer's first byte in the receiver's memory, then one rkey (u32) per
//! rail of the connection (`total` of them, in rail order). A sender that knows the flag may
//! then RDMA WRITE each chunk of a send matched to such a buffer straight into it (on rail
//! `i` with rkey `i`) and follow the WRITE, on the same rail, with a DATA frame with the flag
//! whose payload is the chunk's length (u64) instead of its bytes: RC ordering on the QP makes
//! the DATA's arrival imply the WRITE's placement. A sender that does not know the flag
//! ignores the bytes after the entries (frames of this version before the extension never set
//! flags) and sends DATA with payload, which the receiver copies as before: an old peer keeps
//! the copy path in both directions without a handshake change.
//!
//! The view follows smoltcp's wire pattern: [`Frame`] over any byte buffer with a private
//! field table, [`Frame::check_len`] before any accessor, and [`FrameRepr`] with
//! `parse`/`emit`.

use std::ops::Range;

type Field = Range<usize>;

mod field {
    use super::Field;
    pub const KIND: usize = 0;
    pub const FLAGS: usize = 1;
    pub const COUNT: usize = 2;
    pub const INDEX: usize = 3;
    pub const SEQ: Field = 4..12;
    pub const TOTAL: Field = 12..20;
    pub const OFFSET: Field = 20..28;
    pub const TAG: Field = 28..32;
    pub const PAYLOAD: usize = 32;
}

/// Length of the frame header, bytes.
pub const HEADER_LEN: usize = field::PAYLOAD;
/// Bytes of one CTS entry: size u64 · tag i32 · reserved u32.
pub const CTS_ENTRY_LEN: usize = 16;
/// Flag of a DATA frame sent before the receiver's CTS (the whole message in one frame, offset
/// 0): the receiver keeps it until the receive `seq` is posted. Only to peers that accepted
/// eager sends in the handshake ([`crate::mesh::messages::Accept::eager_bytes`]).
pub const FLAG_EAGER: u8 = 0x02;
/// Most buffers in one grouped receive (NCCL IB's `NCCL_NET_IB_MAX_RECVS`).
pub const MAX_RECVS: usize = 8;
/// Flags bit: a DATA frame whose chunk was placed by RDMA WRITE (payload: its length, u64),
/// or a CTS followed by placements (see the module docs).
pub const FLAG_PLACED: u8 = 0x01;
/// Most rails a placement CTS names rkeys for.
pub const MAX_PLACE_RAILS: usize = 16;

/// A placement's key per rail, in rail order (at most [`MAX_PLACE_RAILS`]; copied, never
/// allocated).
pub type RailKeys = heapless::Vec<u32, MAX_PLACE_RAILS>;
/// Bytes of a placed DATA frame's payload: the chunk length, u64.
pub const PLACED_LEN: usize = 8;

/// Frame kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FrameKind {
    /// Message data.
    Data,
    /// Clear to send: a posted receive.
    Cts,
    /// A send refused because it is larger than the receive it matched.
    Abort,
    /// The endpoint closed.
    Close,
    /// A relay lost its next hop.
    Fail,
    /// Hop-local: one rail of this hop failed.
    RailDown,
    /// A kind this version does not know; kept so that it round-trips.
    Unknown(u8),
}

impl From<u8> for FrameKind {
    fn from(v: u8) -> FrameKind {
        match v {
            1 => FrameKind::Data,
            2 => FrameKind::Cts,
            3 => FrameKind::Abort,
            4 => FrameKind::Close,
            5 => FrameKind::Fail,
            6 => FrameKind::RailDown,
            other => FrameKind::Unknown(other),
        }
    }
}

impl From<FrameKind> for u8 {
    fn from(k: FrameKind) -> u8 {
        match k {
            FrameKind::Data => 1,
            FrameKind::Cts => 2,
            FrameKind::Abort => 3,
            FrameKind::Close => 4,
            FrameKind::Fail => 5,
            FrameKind::RailDown => 6,
            FrameKind::Unknown(v) => v,
        }
    }
}

/// Why a frame does not parse.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    /// Shorter than its header or than its CTS entries.
    #[error("frame truncated")]
    Truncated,
    /// A kind this version does not know.
    #[error("unknown frame kind {0}")]
    UnknownKind(u8),
    /// A field holds a value the kind does not allow.
    #[error("frame field out of range: {0}")]
    BadField(&'static str),
}

/// A read/write view of a frame.
#[derive(Debug, Clone)]
pub struct Frame<T: AsRef<[u8]>> {
    buffer: T,
}

fn be(b: &[u8]) -> u64 {
    b.iter().fold(0u64, |acc, &x| acc << 8 | u64::from(x))
}

impl<T: AsRef<[u8]>> Frame<T> {
    /// Wraps `buffer` without checking its length.
    pub fn new_unchecked(buffer: T) -> Frame<T> {
        Frame { buffer }
    }

    /// Wraps `buffer` and checks that it holds a header.
    ///
    /// Errors: [`FrameError::Truncated`].
    pub fn new_checked(buffer: T) -> Result<Frame<T>, FrameError> {
        let f = Frame::new_unchecked(buffer);
        f.check_len()?;
        Ok(f)
    }

    /// Checks that the buffer holds a header (and, for a CTS, its entries).
    ///
    /// Errors: [`FrameError::Truncated`].
    pub fn check_len(&self) -> Result<(), FrameError> {
        let b = self.buffer.as_ref();
        if b.len() < HEADER_LEN {
            return Err(FrameError::Truncated);
        }
        if FrameKind::from(b[field::KIND]) == FrameKind::Cts {
            let count = usize::from(b[field::COUNT]);
            if b.len() < HEADER_LEN + CTS_ENTRY_LEN * count {
                return Err(FrameError::Truncated);
            }
            if b[field::FLAGS] & FLAG_PLACED != 0 {
                let rails = be(&b[field::TOTAL]).min(MAX_PLACE_RAILS as u64 + 1) as usize;
                if b.len() < HEADER_LEN + count * (CTS_ENTRY_LEN + 8 + 4 * rails) {
                    return Err(FrameError::Truncated);
                }
            }
        }
        Ok(())
    }

    /// The kind.
    pub fn kind(&self) -> FrameKind {
        FrameKind::from(self.buffer.as_ref()[field::KIND])
    }

    /// The flags byte.
    pub fn flags(&self) -> u8 {
        self.buffer.as_ref()[field::FLAGS]
    }

    /// Number of CTS entries.
    pub fn count(&self) -> u8 {
        self.buffer.as_ref()[field::COUNT]
    }

    /// Buffer (or rail) index.
    pub fn index(&self) -> u8 {
        self.buffer.as_ref()[field::INDEX]
    }

    /// Receive sequence number.
    pub fn seq(&self) -> u64 {
        be(&self.buffer.as_ref()[field::SEQ])
    }

    /// Send size, bytes.
    pub fn total(&self) -> u64 {
        be(&self.buffer.as_ref()[field::TOTAL])
    }

    /// Chunk offset, bytes.
    pub fn offset(&self) -> u64 {
        be(&self.buffer.as_ref()[field::OFFSET])
    }

    /// The send's tag.
    pub fn tag(&self) -> i32 {
        be(&self.buffer.as_ref()[field::TAG]) as u32 as i32
    }

    /// Everything after the header.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[field::PAYLOAD..]
    }

    /// CTS entry `i`: `(size, tag)`, or `None` past `count`.
    pub fn cts_entry(&self, i: usize) -> Option<(u64, i32)> {
        if i >= usize::from(self.count()) {
            return None;
        }
        let p = self.payload();
        let e = p.get(i * CTS_ENTRY_LEN..(i + 1) * CTS_ENTRY_LEN)?;
        Some((be(&e[0..8]), be(&e[8..12]) as u32 as i32))
    }

    /// Placement of CTS entry `i` ([`FLAG_PLACED`]): the buffer's virtual address and the
    /// rkey of each rail (at most [`MAX_PLACE_RAILS`], held without allocation); `None`
    /// without the flag, past `count`, for more rails than that, or for a buffer that is not
    /// registered (address 0). Call after [`FrameRepr::parse`] succeeded.
    pub fn cts_placement(&self, i: usize) -> Option<(u64, RailKeys)> {
        let count = usize::from(self.count());
        if self.flags() & FLAG_PLACED == 0 || i >= count || self.total() > MAX_PLACE_RAILS as u64 {
            return None;
        }
        let rails = self.total() as usize;
        let p = self.payload().get(count * CTS_ENTRY_LEN..)?;
        let va = be(p.get(i * 8..i * 8 + 8)?);
        if va == 0 {
            return None;
        }
        let keys = p.get(count * 8 + i * 4 * rails..count * 8 + (i + 1) * 4 * rails)?;
        Some((va, keys.chunks(4).map(|k| be(k) as u32).collect()))
    }

    /// The chunk length of a placed DATA frame ([`FLAG_PLACED`]); `None` for any other.
    pub fn placed_len(&self) -> Option<u64> {
        if self.kind() != FrameKind::Data || self.flags() & FLAG_PLACED == 0 {
            return None;
        }
        self.payload().get(..PLACED_LEN).map(be)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Frame<T> {
    /// Sets the kind.
    pub fn set_kind(&mut self, k: FrameKind) {
        self.buffer.as_mut()[field::KIND] = k.into();
    }

    /// Sets the flags byte.
    pub fn set_flags(&mut self, v: u8) {
        self.buffer.as_mut()[field::FLAGS] = v;
    }

    /// Sets the CTS entry count.
    pub fn set_count(&mut self, v: u8) {
        self.buffer.as_mut()[field::COUNT] = v;
    }

    /// Sets the buffer (or rail) index.
    pub fn set_index(&mut self, v: u8) {
        self.buffer.as_mut()[field::INDEX] = v;
    }

    /// Sets the receive sequence number.
    pub fn set_seq(&mut self, v: u64) {
        self.buffer.as_mut()[field::SEQ].copy_from_slice(&v.to_be_bytes());
    }

    /// Sets the send size.
    pub fn set_total(&mut self, v: u64) {
        self.buffer.as_mut()[field::TOTAL].copy_from_slice(&v.to_be_bytes());
    }

    /// Sets the chunk offset.
    pub fn set_offset(&mut self, v: u64) {
        self.buffer.as_mut()[field::OFFSET].copy_from_slice(&v.to_be_bytes());
    }

    /// Sets the tag.
    pub fn set_tag(&mut self, v: i32) {
        self.buffer.as_mut()[field::TAG].copy_from_slice(&(v as u32).to_be_bytes());
    }

    /// Writes CTS entry `i` (the buffer must hold it).
    pub fn set_cts_entry(&mut self, i: usize, size: u64, tag: i32) {
        let o = field::PAYLOAD + i * CTS_ENTRY_LEN;
        let b = self.buffer.as_mut();
        b[o..o + 8].copy_from_slice(&size.to_be_bytes());
        b[o + 8..o + 12].copy_from_slice(&(tag as u32).to_be_bytes());
        b[o + 12..o + 16].fill(0);
    }
}

/// A validated frame header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameRepr {
    /// Kind (never `Unknown` after `parse`).
    pub kind: FrameKind,
    /// Flags ([`FLAG_PLACED`], [`FLAG_EAGER`]).
    pub flags: u8,
    /// CTS entry count.
    pub count: u8,
    /// Buffer or rail index.
    pub index: u8,
    /// Receive sequence number.
    pub seq: u64,
    /// Send size, bytes.
    pub total: u64,
    /// Chunk offset, bytes.
    pub offset: u64,
    /// Tag.
    pub tag: i32,
}

impl FrameRepr {
    /// A header of `kind` with every other field zero.
    pub fn new(kind: FrameKind) -> FrameRepr {
        FrameRepr {
            kind,
            flags: 0,
            count: 0,
            index: 0,
            seq: 0,
            total: 0,
            offset: 0,
            tag: 0,
        }
    }

    /// Parses and validates a header.
    ///
    /// Errors: [`FrameError::UnknownKind`]; [`FrameError::BadField`] for a CTS with 0 or more
    /// than [`MAX_RECVS`] entries, a buffer index ≥ [`MAX_RECVS`], a DATA chunk that ends past
    /// the send's size, unknown flags or flags on a frame other than DATA, or an eager DATA
    /// frame that is not the whole message.
    pub fn parse<T: AsRef<[u8]>>(f: &Frame<T>) -> Result<FrameRepr, FrameError> {
        f.check_len()?;
        let kind = f.kind();
        if let FrameKind::Unknown(k) = kind {
            return Err(FrameError::UnknownKind(k));
        }
        let r = FrameRepr {
            kind,
            flags: f.flags(),
            count: f.count(),
            index: f.index(),
            seq: f.seq(),
            total: f.total(),
            offset: f.offset(),
            tag: f.tag(),
        };
        let known = match kind {
            FrameKind::Data => FLAG_PLACED | FLAG_EAGER,
            FrameKind::Cts => FLAG_PLACED,
            _ => 0,
        };
        if r.flags & !known != 0 || r.flags == FLAG_PLACED | FLAG_EAGER {
            return Err(FrameError::BadField("flags"));
        }
        if r.flags & FLAG_EAGER != 0 && (r.offset != 0 || f.payload().len() as u64 != r.total) {
            return Err(FrameError::BadField(
                "eager DATA frame that is not the whole message",
            ));
        }
        match kind {
            FrameKind::Cts if r.count == 0 || usize::from(r.count) > MAX_RECVS => {
                return Err(FrameError::BadField("CTS entry count"))
            }
            FrameKind::Data | FrameKind::Abort if usize::from(r.index) >= MAX_RECVS => {
                return Err(FrameError::BadField("buffer index"))
            }
            FrameKind::Cts
                if r.flags & FLAG_PLACED != 0
                    && (r.total == 0 || r.total > MAX_PLACE_RAILS as u64) =>
            {
                return Err(FrameError::BadField("placement rail count"))
            }
            FrameKind::Data => {
                let len = match f.placed_len() {
                    Some(n) if f.payload().len() == PLACED_LEN => n,
                    Some(_) => return Err(FrameError::BadField("placed DATA length")),
                    None if r.flags & FLAG_PLACED != 0 => {
                        return Err(FrameError::BadField("placed DATA length"))
                    }
                    None => f.payload().len() as u64,
                };
                let end = r
                    .offset
                    .checked_add(len)
                    .ok_or(FrameError::BadField("offset"))?;
                if end > r.total {
                    return Err(FrameError::BadField("chunk past the send size"));
                }
            }
            _ => {}
        }
        Ok(r)
    }

    /// Header length, bytes.
    pub fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes the header into `f`.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, f: &mut Frame<T>) {
        f.set_kind(self.kind);
        f.set_flags(self.flags);
        f.set_count(self.count);
        f.set_index(self.index);
        f.set_seq(self.seq);
        f.set_total(self.total);
        f.set_offset(self.offset);
        f.set_tag(self.tag);
    }

    /// The header as 32 bytes.
    pub fn to_bytes(&self) -> [u8; HEADER_LEN] {
        let mut b = [0u8; HEADER_LEN];
        self.emit(&mut Frame::new_unchecked(&mut b[..]));
        b
    }
}

/// A whole CTS frame announcing receive `seq` with buffers `(size, tag)`.
pub fn cts_frame(seq: u64, entries: &[(u64, i32)]) -> Vec<u8> {
    cts_frame_with_room(seq, entries, 0)
}

/// [`cts_frame`] in a vector with room for `extra` more bytes (one allocation for a CTS with
/// placements).
fn cts_frame_with_room(seq: u64, entries: &[(u64, i32)], extra: usize) -> Vec<u8> {
    let len = HEADER_LEN + CTS_ENTRY_LEN * entries.len();
    let mut v = Vec::with_capacity(len + extra);
    v.resize(len, 0);
    let mut f = Frame::new_unchecked(&mut v[..]);
    FrameRepr {
        count: entries.len() as u8,
        seq,
        ..FrameRepr::new(FrameKind::Cts)
    }
    .emit(&mut f);
    for (i, (size, tag)) in entries.iter().enumerate() {
        f.set_cts_entry(i, *size, *tag);
    }
    v
}

/// A whole CTS frame announcing receive `seq` with buffers `(size, tag)` and, for each, its
/// placement `(virtual address, one rkey per rail)` or `None` ([`FLAG_PLACED`]; every rkey
/// list has `rails` entries). Without any placement it is [`cts_frame`]'s.
pub fn cts_frame_placed(
    seq: u64,
    entries: &[(u64, i32)],
    places: &[Option<(u64, &[u32])>],
    rails: usize,
) -> Vec<u8> {
    if places.iter().all(Option::is_none) || rails == 0 || rails > MAX_PLACE_RAILS {
        return cts_frame(seq, entries);
    }
    let mut v = cts_frame_with_room(seq, entries, entries.len() * (8 + 4 * rails));
    v[field::FLAGS] = FLAG_PLACED;
    v[field::TOTAL].copy_from_slice(&(rails as u64).to_be_bytes());
    for i in 0..entries.len() {
        let va = places.get(i).copied().flatten().map_or(0, |p| p.0);
        v.extend_from_slice(&va.to_be_bytes());
    }
    for i in 0..entries.len() {
        let keys = places.get(i).copied().flatten().map_or(&[][..], |p| p.1);
        for r in 0..rails {
            v.extend_from_slice(&keys.get(r).copied().unwrap_or(0).to_be_bytes());
        }
    }
    v
}

/// A whole frame of `kind` carrying `text` (CLOSE, FAIL, RAIL_DOWN), cut at 1 KiB less the
/// header.
pub fn text_frame(kind: FrameKind, index: u8, text: &str) -> Vec<u8> {
    let mut v = FrameRepr {
        index,
        ..FrameRepr::new(kind)
    }
    .to_bytes()
    .to_vec();
    let mut end = text.len().min(1024 - HEADER_LEN);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    v.extend_from_slice(&text.as_bytes()[..end]);
    v
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn layout_and_roundtrip() {
        let r = FrameRepr {
            kind: FrameKind::Data,
            flags: 0,
            count: 0,
            index: 2,
            seq: 0x0102030405060708,
            total: 1000,
            offset: 896,
            tag: -5,
        };
        let mut v = r.to_bytes().to_vec();
        v.extend_from_slice(&[7u8; 104]);
        assert_eq!(v[0], 1);
        assert_eq!(v[3], 2);
        assert_eq!(&v[4..12], &[1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(&v[28..32], &[0xff, 0xff, 0xff, 0xfb]);
        let f = Frame::new_checked(&v[..]).unwrap();
        assert_eq!(FrameRepr::parse(&f).unwrap(), r);
        assert_eq!(f.payload().len(), 104);
        // One byte more runs past the send size.
        v.push(0);
        let f = Frame::new_checked(&v[..]).unwrap();
        assert_eq!(
            FrameRepr::parse(&f),
            Err(FrameError::BadField("chunk past the send size"))
        );
    }

    #[test]
    fn cts_entries() {
        let v = cts_frame(9, &[(4096, 1), (8192, -2)]);
        let f = Frame::new_checked(&v[..]).unwrap();
        let r = FrameRepr::parse(&f).unwrap();
        assert_eq!((r.kind, r.count, r.seq), (FrameKind::Cts, 2, 9));
        assert_eq!(f.cts_entry(0), Some((4096, 1)));
        assert_eq!(f.cts_entry(1), Some((8192, -2)));
        assert_eq!(f.cts_entry(2), None);
        assert_eq!(
            Frame::new_checked(&v[..v.len() - 1]).unwrap_err(),
            FrameError::Truncated
        );
        let mut bad = cts_frame(1, &[(1, 1)]);
        bad[2] = 0;
        assert!(FrameRepr::parse(&Frame::new_unchecked(&bad[..])).is_err());
    }

    #[test]
    fn placement_cts_and_placed_data() {
        let k0: &[u32] = &[0x100, 0x200];
        let v = cts_frame_placed(
            3,
            &[(4096, 1), (64, 2)],
            &[Some((0xdead_0000, k0)), None],
            2,
        );
        let f = Frame::new_checked(&v[..]).unwrap();
        let r = FrameRepr::parse(&f).unwrap();
        assert_eq!((r.flags, r.total, r.count), (FLAG_PLACED, 2, 2));
        assert_eq!(f.cts_entry(1), Some((64, 2)));
        let (va, keys) = f.cts_placement(0).expect("placement 0");
        assert_eq!((va, &keys[..]), (0xdead_0000, &[0x100, 0x200][..]));
        assert_eq!(f.cts_placement(1), None);
        assert_eq!(
            Frame::new_checked(&v[..v.len() - 1]).unwrap_err(),
            FrameError::Truncated
        );
        // Without placements: the plain CTS, which an old sender reads the same way.
        assert_eq!(
            cts_frame_placed(3, &[(4096, 1)], &[None], 2),
            cts_frame(3, &[(4096, 1)])
        );
        // A placed DATA frame: the payload is the chunk's length.
        let mut d = FrameRepr {
            flags: FLAG_PLACED,
            total: 1 << 20,
            offset: 65536,
            ..FrameRepr::new(FrameKind::Data)
        }
        .to_bytes()
        .to_vec();
        d.extend_from_slice(&65536u64.to_be_bytes());
        let f = Frame::new_checked(&d[..]).unwrap();
        assert_eq!(FrameRepr::parse(&f).unwrap().flags, FLAG_PLACED);
        assert_eq!(f.placed_len(), Some(65536));
        // Past the send size, or a payload that is not one length: refused.
        d[HEADER_LEN..].copy_from_slice(&(1u64 << 20).to_be_bytes());
        assert!(FrameRepr::parse(&Frame::new_unchecked(&d[..])).is_err());
        d.push(0);
        assert_eq!(
            FrameRepr::parse(&Frame::new_unchecked(&d[..])),
            Err(FrameError::BadField("placed DATA length"))
        );
    }

    #[test]
    fn text_and_unknown_kinds() {
        let v = text_frame(FrameKind::Fail, 0, &"é".repeat(600));
        assert!(v.len() <= 1024);
        assert!(std::str::from_utf8(&v[HEADER_LEN..]).is_ok());
        let mut u = v.clone();
        u[0] = 99;
        assert_eq!(
            FrameRepr::parse(&Frame::new_unchecked(&u[..])),
            Err(FrameError::UnknownKind(99))
        );
        assert_eq!(u8::from(FrameKind::from(99)), 99);
        assert_eq!(
            Frame::new_checked(&v[..31]).unwrap_err(),
            FrameError::Truncated
        );
    }

    #[test]
    fn any_bytes_parse_or_fail_cleanly() {
        let mut x = 0x9e37_79b9u32;
        for len in 0..200 {
            let mut b = vec![0u8; len];
            for v in b.iter_mut() {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                *v = (x % 9) as u8;
            }
            if let Ok(f) = Frame::new_checked(&b[..]) {
                if let Some(r) = FrameRepr::parse(&f)
                    .ok()
                    .filter(|r| r.kind == FrameKind::Cts)
                {
                    for i in 0..usize::from(r.count) {
                        assert!(f.cts_entry(i).is_some());
                    }
                }
            }
        }
    }
}
