//! The mesh handshake's messages, carried over TCP by [`crate::framing`] with magic `"RDMM"`,
//! version 6, payloads of at most 64 KiB. All integers are big-endian; counts and strings are
//! bounded (see the `MAX_*` constants) and checked before anything is allocated.
//!
//! | type | direction | payload |
//! |---|---|---|
//! | 1 HELLO | connecting → listening | nonce (32) · has key u8 |
//! | 2 CHALLENGE | listening → connecting | nonce (32) · has key u8 · [proof (32) when it has a key] |
//! | 3 REQUEST | connecting → listening | has proof u8 · [proof (32)] · [`Request`] |
//! | 4 ACCEPT | listening → connecting | has proof u8 · [proof (32)] · [`Accept`] |
//! | 5 REJECT | either | reason (u16 length + UTF-8, ≤ 2048 bytes) |
//! | 6 READY | connecting → listening | empty: the rails are in RTS, traffic may start |

use crate::framing::Protocol;
use crate::mesh::auth::MAC_LEN;
use crate::mesh::codec::{DecodeResult, Reader, Writer};
use crate::mesh::handle::NodeInfo;
use crate::mesh::rail::RailInfo;

/// The handshake protocol.
pub static PROTOCOL: Protocol = Protocol {
    magic: *b"RDMM",
    // 2: rails carry their port's MAC (RailInfo). 3: and their loss recovery offer
    // (RailInfo::recovery). 4: requests name their lane (Request::lane). 5: the listener says
    // whether it takes eager sends (Accept::eager_bytes). 6: rails hold the ACKs of SENDs
    // without SE (CTS frames) and every other frame's SEND has SE (Rail::connect): a version-5
    // peer's DATA frames would wait up to 50 µs for their ACK. Both ends must speak the same
    // version (crate::framing).
    version: 6,
    max_payload: 64 << 10,
    name: "an rdmesh mesh node",
};

/// HELLO.
pub const T_HELLO: u16 = 1;
/// CHALLENGE.
pub const T_CHALLENGE: u16 = 2;
/// REQUEST.
pub const T_REQUEST: u16 = 3;
/// ACCEPT.
pub const T_ACCEPT: u16 = 4;
/// REJECT.
pub const T_REJECT: u16 = 5;
/// READY.
pub const T_READY: u16 = 6;

/// Most lanes of one connection ([`Lane`]).
pub const MAX_LANES: u8 = 8;

/// Which lane of a connection a request sets up: a connection may be several mesh connections
/// ("lanes", each with its own rails and progress shard) that the connecting side opens with
/// the same random `group`; the listener hands them out as one receive comm once all `count`
/// arrived. Messages go to the lanes in turn (FIFO per lane, so NCCL's order holds).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lane {
    /// Random identifier shared by the lanes of one connection.
    pub group: u64,
    /// This lane's index, `0..count`.
    pub index: u8,
    /// Lanes of the connection, `1..=MAX_LANES`.
    pub count: u8,
}

impl Lane {
    /// A connection of one lane.
    pub const SINGLE: Lane = Lane {
        group: 0,
        index: 0,
        count: 1,
    };
}

/// Most rails one request proposes.
pub const MAX_RAILS: usize = 8;
/// Most nodes in a topology table.
pub const MAX_TOPOLOGY: usize = 64;
/// Most nodes on a relay path.
pub const MAX_PATH: usize = 16;
/// Longest REJECT reason, bytes.
pub const MAX_REASON: usize = 2048;

/// What a request asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestKind {
    /// A connection to a listener of the receiving node.
    Connect,
    /// A connection to a node further on: the receiver relays.
    Relay,
    /// Only the receiver's topology table.
    Topology,
}

impl RequestKind {
    fn code(self) -> u8 {
        match self {
            RequestKind::Connect => 1,
            RequestKind::Relay => 2,
            RequestKind::Topology => 3,
        }
    }
}

/// A proposed rail: the address of the receiver it goes to, and the sender's end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RailProposal {
    /// The receiving node's address this rail connects to.
    pub to: std::net::IpAddr,
    /// The sending end.
    pub info: RailInfo,
}

/// REQUEST body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// What is asked.
    pub kind: RequestKind,
    /// The node the connection starts at.
    pub origin: NodeInfo,
    /// The node sending this request (the origin, or the relay before the receiver).
    pub sender: NodeInfo,
    /// The node the connection ends at.
    pub target: NodeInfo,
    /// The target's listener.
    pub listen_id: u32,
    /// Time left for the whole connection, ms.
    pub budget_ms: u32,
    /// Relay: the nodes after the receiver, ending with the target.
    pub path: Vec<u64>,
    /// Topology: how many more hops the query may go.
    pub hops_left: u8,
    /// The rails proposed.
    pub rails: Vec<RailProposal>,
    /// The sender's topology table.
    pub topology: Vec<NodeInfo>,
    /// The lane this connection request sets up.
    pub lane: Lane,
}

fn put_topology(w: &mut Writer, t: &[NodeInfo]) {
    w.u8(t.len().min(MAX_TOPOLOGY) as u8);
    for n in t.iter().take(MAX_TOPOLOGY) {
        n.encode(w);
    }
}

fn get_topology(r: &mut Reader<'_>) -> DecodeResult<Vec<NodeInfo>> {
    let n = r.count("topology size", MAX_TOPOLOGY)?;
    (0..n).map(|_| NodeInfo::decode(r)).collect()
}

impl Request {
    /// The payload bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::new();
        w.u8(self.kind.code());
        self.origin.encode(&mut w);
        self.sender.encode(&mut w);
        self.target.encode(&mut w);
        w.u32(self.listen_id).u32(self.budget_ms);
        w.u8(self.path.len().min(MAX_PATH) as u8);
        for id in self.path.iter().take(MAX_PATH) {
            w.u64(*id);
        }
        w.u8(self.hops_left);
        w.u8(self.rails.len().min(MAX_RAILS) as u8);
        for p in self.rails.iter().take(MAX_RAILS) {
            w.ip(p.to);
            p.info.encode(&mut w);
        }
        put_topology(&mut w, &self.topology);
        w.u64(self.lane.group)
            .u8(self.lane.index)
            .u8(self.lane.count);
        w.0
    }

    /// Decodes a payload.
    ///
    /// Errors: the field that is short, out of range or unknown.
    pub fn decode(b: &[u8]) -> DecodeResult<Request> {
        let mut r = Reader::new(b);
        let kind = match r.u8("request kind")? {
            1 => RequestKind::Connect,
            2 => RequestKind::Relay,
            3 => RequestKind::Topology,
            k => return Err(format!("request kind {k} is not 1, 2 or 3")),
        };
        let origin = NodeInfo::decode(&mut r)?;
        let sender = NodeInfo::decode(&mut r)?;
        let target = NodeInfo::decode(&mut r)?;
        let listen_id = r.u32("listen id")?;
        let budget_ms = r.u32("budget")?;
        let n = r.count("path length", MAX_PATH)?;
        let path = (0..n)
            .map(|_| r.u64("path node"))
            .collect::<DecodeResult<Vec<_>>>()?;
        let hops_left = r.u8("hops left")?;
        let n = r.count("rail count", MAX_RAILS)?;
        let rails = (0..n)
            .map(|_| {
                Ok(RailProposal {
                    to: r.ip("rail destination")?,
                    info: RailInfo::decode(&mut r)?,
                })
            })
            .collect::<DecodeResult<Vec<_>>>()?;
        let topology = get_topology(&mut r)?;
        let lane = Lane {
            group: r.u64("lane group")?,
            index: r.u8("lane index")?,
            count: r.u8("lane count")?,
        };
        if lane.count == 0 || lane.count > MAX_LANES || lane.index >= lane.count {
            return Err(format!(
                "lane {} of {} is not a lane of a connection of 1 to {MAX_LANES}",
                lane.index, lane.count
            ));
        }
        r.finish("request")?;
        if kind == RequestKind::Relay && path.is_empty() {
            return Err("relay request with an empty path".into());
        }
        Ok(Request {
            kind,
            origin,
            sender,
            target,
            listen_id,
            budget_ms,
            path,
            hops_left,
            rails,
            topology,
            lane,
        })
    }
}

/// ACCEPT body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Accept {
    /// For each proposed rail, in order: the receiver's end, or `None` when it declined it.
    pub rails: Vec<Option<RailInfo>>,
    /// The receiver's topology table.
    pub topology: Vec<NodeInfo>,
    /// Largest send, bytes, the receiving end takes before its CTS (a DATA frame with
    /// [`crate::mesh::frame::FLAG_EAGER`], kept until the receive is posted); 0: none. Only the
    /// connection's target sets it (a relay answers 0). A receiving end that takes eager sends
    /// refuses grouped receives: the sender must know which receive its k-th send meets.
    pub eager_bytes: u32,
}

impl Accept {
    /// The payload bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::new();
        w.u8(self.rails.len().min(MAX_RAILS) as u8);
        for r in self.rails.iter().take(MAX_RAILS) {
            match r {
                Some(info) => {
                    w.u8(1);
                    info.encode(&mut w);
                }
                None => {
                    w.u8(0);
                }
            }
        }
        put_topology(&mut w, &self.topology);
        w.u32(self.eager_bytes);
        w.0
    }

    /// Decodes a payload.
    ///
    /// Errors: the field that is short or out of range.
    pub fn decode(b: &[u8]) -> DecodeResult<Accept> {
        let mut r = Reader::new(b);
        let n = r.count("rail count", MAX_RAILS)?;
        let rails = (0..n)
            .map(|_| match r.u8("rail accepted")? {
                0 => Ok(None),
                1 => RailInfo::decode(&mut r).map(Some),
                v => Err(format!("rail accepted flag {v} is not 0 or 1")),
            })
            .collect::<DecodeResult<Vec<_>>>()?;
        let topology = get_topology(&mut r)?;
        let eager_bytes = r.u32("eager bytes")?;
        r.finish("accept")?;
        Ok(Accept {
            rails,
            topology,
            eager_bytes,
        })
    }
}

/// Prefixes `body` with its proof: has-proof byte, then the 32-byte proof when present.
pub fn with_proof(proof: Option<[u8; MAC_LEN]>, body: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(1 + MAC_LEN + body.len());
    match proof {
        Some(p) => {
            v.push(1);
            v.extend_from_slice(&p);
        }
        None => v.push(0),
    }
    v.extend_from_slice(body);
    v
}

/// Splits what [`with_proof`] made into (proof, body).
///
/// Errors: a bad flag or a truncated proof.
pub fn split_proof(b: &[u8]) -> DecodeResult<(Option<&[u8]>, &[u8])> {
    match b.first() {
        Some(0) => Ok((None, &b[1..])),
        Some(1) if b.len() > MAC_LEN => Ok((Some(&b[1..1 + MAC_LEN]), &b[1 + MAC_LEN..])),
        Some(1) => Err("proof truncated".into()),
        Some(f) => Err(format!("proof flag {f} is not 0 or 1")),
        None => Err("empty message".into()),
    }
}

/// A REJECT payload.
pub fn reject(reason: &str) -> Vec<u8> {
    let mut w = Writer::new();
    w.str(reason, MAX_REASON);
    w.0
}

/// Decodes a REJECT payload.
pub fn reject_reason(b: &[u8]) -> String {
    Reader::new(b)
        .str("reason", MAX_REASON)
        .unwrap_or_else(|e| format!("(unreadable reason: {e})"))
}

#[cfg(test)]
mod test {
    use super::*;
    use crate::mesh::rail::RecoveryOffer;
    use crate::topo::IfAddr;

    fn node(id: u64) -> NodeInfo {
        NodeInfo {
            id,
            tcp_port: 4000 + id as u16,
            relays: id % 2 == 0,
            addrs: vec![IfAddr {
                ip: format!("10.0.{id}.1").parse().unwrap(),
                prefix_len: 24,
            }],
        }
    }

    fn rail(n: u8) -> RailInfo {
        RailInfo {
            addr: format!("10.0.0.{n}").parse().unwrap(),
            udp_port: 50000,
            qpn: 0x11 + u32::from(n),
            psn: 7,
            mtu: 1024,
            credit_va: 0x1000,
            credit_rkey: 0x22,
            recv_slots: 64,
            recv_slot_size: 1024,
            mbps: 10_000,
            netdev: format!("veth{n}"),
            mac: (n % 2 == 0).then_some([2, 0, 0, 0, 0, n]),
            recovery: RecoveryOffer::from_code(n % 3).unwrap(),
        }
    }

    #[test]
    fn request_and_accept_roundtrip() {
        let q = Request {
            kind: RequestKind::Relay,
            origin: node(1),
            sender: node(1),
            target: node(3),
            listen_id: 9,
            budget_ms: 5000,
            path: vec![3],
            hops_left: 0,
            rails: vec![RailProposal {
                to: "10.0.0.2".parse().unwrap(),
                info: rail(1),
            }],
            topology: vec![node(2), node(4)],
            lane: Lane {
                group: 0x0123_4567_89ab_cdef,
                index: 2,
                count: 3,
            },
        };
        assert_eq!(Request::decode(&q.encode()).unwrap(), q);
        let a = Accept {
            rails: vec![Some(rail(2)), None],
            topology: vec![node(5)],
            eager_bytes: 65536,
        };
        assert_eq!(Accept::decode(&a.encode()).unwrap(), a);
        let b = with_proof(Some([7; 32]), b"xyz");
        assert_eq!(
            split_proof(&b).unwrap(),
            (Some(&[7u8; 32][..]), &b"xyz"[..])
        );
        assert_eq!(
            split_proof(&with_proof(None, b"q")).unwrap(),
            (None, &b"q"[..])
        );
        assert!(split_proof(&[1, 2]).is_err());
        assert_eq!(reject_reason(&reject("no")), "no");
    }

    #[test]
    fn truncated_and_bad_messages_fail_cleanly() {
        let q = Request {
            kind: RequestKind::Connect,
            origin: node(1),
            sender: node(1),
            target: node(2),
            listen_id: 1,
            budget_ms: 1,
            path: vec![],
            hops_left: 0,
            rails: vec![RailProposal {
                to: "10.0.0.2".parse().unwrap(),
                info: rail(1),
            }],
            topology: vec![],
            lane: Lane::SINGLE,
        };
        let b = q.encode();
        for n in 0..b.len() {
            assert!(Request::decode(&b[..n]).is_err(), "prefix of {n} bytes");
        }
        let mut extra = b.clone();
        extra.push(0);
        assert!(Request::decode(&extra).unwrap_err().contains("trailing"));
        let mut bad = b.clone();
        bad[0] = 9;
        assert!(Request::decode(&bad)
            .unwrap_err()
            .contains("request kind 9"));
        for (index, count) in [(0, 0), (1, 1), (0, MAX_LANES + 1)] {
            let bad_lane = Request {
                lane: Lane {
                    group: 1,
                    index,
                    count,
                },
                ..q.clone()
            };
            let e = Request::decode(&bad_lane.encode()).unwrap_err();
            assert!(e.contains(&format!("lane {index} of {count}")), "{e}");
        }
        let relay_no_path = Request {
            kind: RequestKind::Relay,
            ..q
        };
        assert!(Request::decode(&relay_no_path.encode()).is_err());
    }
}
