//! The listen handle: what a listening node gives a peer (through NCCL's bootstrap, a file, a
//! command line) so that the peer can connect. It carries every link address of the node with
//! its prefix length (so the peer can pick the local NIC on the same subnet), the node's
//! handshake TCP port, and the listen id that names the listening endpoint, in at most 128
//! bytes (NCCL's `NCCL_NET_HANDLE_MAXSIZE`, `nccl/net_v*.h`), and it is versioned.
//!
//! Layout (big-endian; the rest of the 128 bytes is zero):
//!
//! | bytes | field |
//! |---|---|
//! | 0..2 | magic `"RM"` |
//! | 2 | version (1) |
//! | 3 | flags: bit 0 = the node relays for others |
//! | 4..12 | node id |
//! | 12..16 | listen id |
//! | 16..18 | handshake TCP port |
//! | 18 | number of addresses |
//! | 19 | reserved, 0 |
//! | 20.. | addresses: family (4/6), prefix length, 4 or 16 address bytes |
//!
//! So a handle holds up to 18 IPv4 or 6 IPv6 link addresses.

use std::fmt;
use std::net::IpAddr;
use std::ops::Range;

use crate::mesh::codec::{ifaddr_len, DecodeResult, Reader, Writer};
use crate::mesh::error::{MeshError, Result};
use crate::topo::IfAddr;

type Field = Range<usize>;

mod field {
    use super::Field;
    pub const MAGIC: Field = 0..2;
    pub const VERSION: usize = 2;
    pub const FLAGS: usize = 3;
    pub const NODE_ID: Field = 4..12;
    pub const LISTEN_ID: Field = 12..16;
    pub const TCP_PORT: Field = 16..18;
    pub const ADDR_COUNT: usize = 18;
    pub const RESERVED: usize = 19;
    pub const ADDRS: usize = 20;
}

/// Size of an encoded handle in bytes (NCCL's `NCCL_NET_HANDLE_MAXSIZE`).
pub const HANDLE_LEN: usize = 128;
/// Version of the handle layout.
pub const HANDLE_VERSION: u8 = 1;
const MAGIC: [u8; 2] = *b"RM";
const FLAG_RELAYS: u8 = 1;
/// Most link addresses a node may announce (also the bound in handshake messages).
pub const MAX_NODE_ADDRS: usize = 18;

/// What the mesh knows about a node: its id, handshake port and link addresses. Nodes exchange
/// these (in handles and handshakes) to build the topology that relay paths are computed on.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct NodeInfo {
    /// Random 64-bit node id, chosen when the node starts.
    pub id: u64,
    /// The node's handshake TCP port (on every link address).
    pub tcp_port: u16,
    /// Whether the node forwards traffic for others (`RDMESH_RELAY`).
    pub relays: bool,
    /// The node's link addresses with prefix lengths.
    pub addrs: Vec<IfAddr>,
}

impl NodeInfo {
    /// The node id as 16 hex digits.
    pub fn id_hex(&self) -> String {
        format!("{:016x}", self.id)
    }

    /// The addresses as `a/p, b/p`.
    pub fn addrs_text(&self) -> String {
        if self.addrs.is_empty() {
            return "none".into();
        }
        self.addrs
            .iter()
            .map(|a| a.to_string())
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// Encodes as id u64 · port u16 · flags u8 · count u8 · addresses.
    pub fn encode(&self, w: &mut Writer) {
        w.u64(self.id)
            .u16(self.tcp_port)
            .u8(if self.relays { FLAG_RELAYS } else { 0 })
            .u8(self.addrs.len().min(MAX_NODE_ADDRS) as u8);
        for a in self.addrs.iter().take(MAX_NODE_ADDRS) {
            w.ifaddr(a);
        }
    }

    /// Decodes what [`NodeInfo::encode`] wrote.
    pub fn decode(r: &mut Reader<'_>) -> DecodeResult<NodeInfo> {
        let id = r.u64("node id")?;
        let tcp_port = r.u16("node tcp port")?;
        let flags = r.u8("node flags")?;
        let n = r.count("node address count", MAX_NODE_ADDRS)?;
        let addrs = (0..n)
            .map(|_| r.ifaddr("node address"))
            .collect::<DecodeResult<Vec<_>>>()?;
        Ok(NodeInfo {
            id,
            tcp_port,
            relays: flags & FLAG_RELAYS != 0,
            addrs,
        })
    }
}

/// A listen handle (see the module docs for its layout).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Handle {
    node: NodeInfo,
    listen_id: u32,
}

impl Handle {
    /// A handle for listener `listen_id` of `node`.
    ///
    /// Errors: [`MeshError::Handle`] when the addresses do not fit in 128 bytes.
    pub fn new(node: NodeInfo, listen_id: u32) -> Result<Handle> {
        let need: usize = field::ADDRS + node.addrs.iter().map(ifaddr_len).sum::<usize>();
        if need > HANDLE_LEN || node.addrs.len() > MAX_NODE_ADDRS {
            return Err(MeshError::Handle(format!(
                "{} link addresses ({}) need {need} bytes, more than the {HANDLE_LEN}-byte handle holds; select fewer NICs with RDMESH_HCA",
                node.addrs.len(),
                node.addrs_text()
            )));
        }
        Ok(Handle { node, listen_id })
    }

    /// The listening node.
    pub fn node(&self) -> &NodeInfo {
        &self.node
    }

    /// The listener's id on its node.
    pub fn listen_id(&self) -> u32 {
        self.listen_id
    }

    /// The 128 handle bytes.
    pub fn to_bytes(&self) -> [u8; HANDLE_LEN] {
        let mut b = [0u8; HANDLE_LEN];
        b[field::MAGIC].copy_from_slice(&MAGIC);
        b[field::VERSION] = HANDLE_VERSION;
        b[field::FLAGS] = if self.node.relays { FLAG_RELAYS } else { 0 };
        b[field::NODE_ID].copy_from_slice(&self.node.id.to_be_bytes());
        b[field::LISTEN_ID].copy_from_slice(&self.listen_id.to_be_bytes());
        b[field::TCP_PORT].copy_from_slice(&self.node.tcp_port.to_be_bytes());
        b[field::ADDR_COUNT] = self.node.addrs.len() as u8;
        b[field::RESERVED] = 0;
        let mut w = Writer::new();
        for a in &self.node.addrs {
            w.ifaddr(a);
        }
        // Handle::new checked that the addresses fit.
        b[field::ADDRS..field::ADDRS + w.0.len()].copy_from_slice(&w.0);
        b
    }

    /// Decodes handle bytes (at least the used part of the 128; NCCL passes all 128).
    ///
    /// Errors: [`MeshError::Handle`] for a wrong magic, another version, a bad address entry or
    /// a truncated handle; the message says which.
    pub fn from_bytes(b: &[u8]) -> Result<Handle> {
        let bad = |r: String| MeshError::Handle(r);
        if b.len() < field::ADDRS {
            return Err(bad(format!(
                "{} bytes are too short for a handle (at least {} needed)",
                b.len(),
                field::ADDRS
            )));
        }
        if b[field::MAGIC] != MAGIC {
            return Err(bad(format!(
                "magic {:02x}{:02x} is not an rdmesh mesh handle (\"RM\"); was the handle produced by rdmesh's listen?",
                b[0], b[1]
            )));
        }
        if b[field::VERSION] != HANDLE_VERSION {
            return Err(bad(format!(
                "handle version {} is not the version {HANDLE_VERSION} this rdmesh speaks; use the same rdmesh version on every node",
                b[field::VERSION]
            )));
        }
        let n = b[field::ADDR_COUNT] as usize;
        if n > MAX_NODE_ADDRS {
            return Err(bad(format!(
                "{n} addresses exceed the maximum of {MAX_NODE_ADDRS}"
            )));
        }
        let end = b.len().min(HANDLE_LEN);
        let mut r = Reader::new(&b[field::ADDRS..end]);
        let addrs = (0..n)
            .map(|i| r.ifaddr(&format!("address {i}")))
            .collect::<DecodeResult<Vec<_>>>()
            .map_err(bad)?;
        let u = |f: Field| b[f].iter().fold(0u64, |acc, &x| acc << 8 | u64::from(x));
        Ok(Handle {
            node: NodeInfo {
                id: u(field::NODE_ID),
                tcp_port: u(field::TCP_PORT) as u16,
                relays: b[field::FLAGS] & FLAG_RELAYS != 0,
                addrs,
            },
            listen_id: u(field::LISTEN_ID) as u32,
        })
    }

    /// The handle bytes as lowercase hex, trailing zero bytes left out (for command lines and
    /// files).
    pub fn to_hex(&self) -> String {
        let b = self.to_bytes();
        let used = b.iter().rposition(|&x| x != 0).map_or(0, |p| p + 1);
        b[..used.max(field::ADDRS)]
            .iter()
            .map(|x| format!("{x:02x}"))
            .collect()
    }

    /// Parses [`Handle::to_hex`] output (missing trailing bytes are zero).
    ///
    /// Errors: [`MeshError::Handle`] for non-hex text, more than 128 bytes, or a bad handle.
    pub fn from_hex(s: &str) -> Result<Handle> {
        let s = s.trim();
        if s.len() % 2 != 0 || s.len() > 2 * HANDLE_LEN {
            return Err(MeshError::Handle(format!(
                "{} hex digits: a handle is an even number of at most {} hex digits",
                s.len(),
                2 * HANDLE_LEN
            )));
        }
        let mut b = [0u8; HANDLE_LEN];
        for (i, pair) in s.as_bytes().chunks(2).enumerate() {
            let txt = std::str::from_utf8(pair).unwrap_or("??");
            b[i] = u8::from_str_radix(txt, 16).map_err(|_| {
                MeshError::Handle(format!("{txt:?} at offset {} is not hex", 2 * i))
            })?;
        }
        Handle::from_bytes(&b)
    }

    /// Whether `ip` is one of the node's link addresses.
    pub fn has_addr(&self, ip: IpAddr) -> bool {
        self.node.addrs.iter().any(|a| a.ip == ip)
    }
}

impl fmt::Display for Handle {
    /// `node 0123456789abcdef listen 3 port 40000 addrs 10.0.0.1/24, …`
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "node {} listen {} port {} addrs {}",
            self.node.id_hex(),
            self.listen_id,
            self.node.tcp_port,
            self.node.addrs_text()
        )
    }
}

#[cfg(test)]
mod test {
    use super::*;

    fn a(s: &str) -> IfAddr {
        let (ip, p) = s.split_once('/').unwrap();
        IfAddr {
            ip: ip.parse().unwrap(),
            prefix_len: p.parse().unwrap(),
        }
    }

    fn node(addrs: &[&str]) -> NodeInfo {
        NodeInfo {
            id: 0x0102_0304_0506_0708,
            tcp_port: 40123,
            relays: true,
            addrs: addrs.iter().map(|s| a(s)).collect(),
        }
    }

    #[test]
    fn layout_and_roundtrip() {
        let h = Handle::new(node(&["192.168.100.1/24", "fd00::1/64"]), 7).unwrap();
        let b = h.to_bytes();
        assert_eq!(&b[0..4], &[b'R', b'M', 1, 1]);
        assert_eq!(&b[4..12], &[1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(&b[12..16], &[0, 0, 0, 7]);
        assert_eq!(u16::from_be_bytes([b[16], b[17]]), 40123);
        assert_eq!(b[18], 2);
        assert_eq!(&b[20..26], &[4, 24, 192, 168, 100, 1]);
        assert_eq!(&b[26..28], &[6, 64]);
        assert!(b[44..].iter().all(|&x| x == 0));
        assert_eq!(Handle::from_bytes(&b).unwrap(), h);
        assert_eq!(Handle::from_hex(&h.to_hex()).unwrap(), h);
        assert!(h.to_string().contains("192.168.100.1/24, fd00::1/64"));
    }

    #[test]
    fn capacity_is_bounded_by_128_bytes() {
        let v4: Vec<String> = (0..18).map(|i| format!("10.0.{i}.1/24")).collect();
        let refs: Vec<&str> = v4.iter().map(|s| s.as_str()).collect();
        let h = Handle::new(node(&refs), 1).unwrap();
        assert_eq!(Handle::from_bytes(&h.to_bytes()).unwrap(), h);
        let v6: Vec<String> = (0..7).map(|i| format!("fd00:{i}::1/64")).collect();
        let refs: Vec<&str> = v6.iter().map(|s| s.as_str()).collect();
        let e = Handle::new(node(&refs), 1).unwrap_err().to_string();
        assert!(e.contains("more than the 128-byte handle holds"), "{e}");
    }

    #[test]
    fn rejects_bad_handles() {
        let h = Handle::new(node(&["10.0.0.1/24"]), 1).unwrap();
        let mut b = h.to_bytes();
        b[2] = 9;
        let e = Handle::from_bytes(&b).unwrap_err().to_string();
        assert!(e.contains("handle version 9"), "{e}");
        let mut b = h.to_bytes();
        b[0] = b'X';
        assert!(Handle::from_bytes(&b)
            .unwrap_err()
            .to_string()
            .contains("magic"));
        let mut b = h.to_bytes();
        b[18] = 19;
        assert!(Handle::from_bytes(&b)
            .unwrap_err()
            .to_string()
            .contains("19 addresses"));
        let mut b = h.to_bytes();
        b[21] = 40;
        assert!(Handle::from_bytes(&b)
            .unwrap_err()
            .to_string()
            .contains("prefix length 40"));
        assert!(Handle::from_bytes(&b[..10]).is_err());
        // A count larger than what fits: the reader runs out of bytes, no panic.
        let mut b = h.to_bytes();
        b[18] = 18;
        b[20..].fill(6);
        assert!(Handle::from_bytes(&b).is_err());
        assert!(Handle::from_hex("zz").is_err());
        assert!(Handle::from_hex("abc").is_err());
    }

    #[test]
    fn any_bytes_decode_or_fail_cleanly() {
        let mut x = 0x1234_5678u32;
        for _ in 0..2000 {
            let mut b = [0u8; HANDLE_LEN];
            for v in b.iter_mut() {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                *v = x as u8;
            }
            b[0..3].copy_from_slice(&[b'R', b'M', 1]);
            b[18] %= 20;
            let _ = Handle::from_bytes(&b);
        }
    }
}
