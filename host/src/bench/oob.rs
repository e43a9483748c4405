//! The out-of-band exchange of `rdmesh bench` over TCP (the role of perftest's socket
//! exchange): both ends trade what they need to connect their RC QPs.
//!
//! Every message is framed as `"RDMS"` (4 bytes) · version u16 · type u16 · length u32 ·
//! payload, big-endian. The version must match; lengths are checked against each type's size;
//! every read times out with an error naming the peer.

use std::net::{IpAddr, Ipv6Addr, TcpStream};
use std::time::Duration;

use rdmesh_core::rc::Recovery;

use crate::error::{Error, Result};
use crate::framing::{FramedStream, Protocol};

/// Protocol version of the exchange.
pub const VERSION: u16 = 1;
const MAX_PAYLOAD: u32 = 4096;

/// The exchange's framing ([`crate::framing`]): magic `"RDMS"`, [`VERSION`], 4 KiB payloads.
static PROTOCOL: Protocol = Protocol {
    magic: *b"RDMS",
    version: VERSION,
    max_payload: MAX_PAYLOAD,
    name: "an rdmesh bench",
};

/// The test the client asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hello {
    /// 0 write, 1 send, 2 read.
    pub mode: u8,
    /// Latency (ping-pong) instead of bandwidth.
    pub lat: bool,
    /// Check data against the pattern.
    pub verify: bool,
    /// Largest message size, bytes.
    pub max_size: u64,
    /// Slots of `max_size` bytes in the server's buffer.
    pub slots: u32,
    /// Loss recovery the client asks for (byte 3 of the hello, reserved 0 before, so older
    /// clients ask for go-back-N): [`RECOVERY_GO_BACK_N`], [`RECOVERY_SELECTIVE`], or
    /// [`RECOVERY_NEGOTIATE`] (no `--recovery`: the server chooses, see [`negotiate`]).
    pub recovery: u8,
}

/// Hello / QP info code: IBTA go-back-N.
pub const RECOVERY_GO_BACK_N: u8 = 0;
/// Hello / QP info code: rdmesh selective repeat (the rdmesh<->rdmesh extension).
pub const RECOVERY_SELECTIVE: u8 = 1;
/// Hello code: the client has no preference; the server answers with the mode in its QP info.
pub const RECOVERY_NEGOTIATE: u8 = 2;

/// What two rdmesh ends use when neither was given `--recovery` (the mesh's rails follow the
/// same default): see [`rdmesh_core::rc::NEGOTIATED_RECOVERY`] and the table in
/// `docs/reliability.md`. One end's `--recovery selective` is enough: the other follows.
/// perftest and pingpong peers never negotiate: they speak go-back-N.
pub use rdmesh_core::rc::NEGOTIATED_RECOVERY;

/// The code of a recovery mode in the hello and the QP info.
pub fn recovery_code(r: Recovery) -> u8 {
    match r {
        Recovery::GoBackN => RECOVERY_GO_BACK_N,
        Recovery::Selective => RECOVERY_SELECTIVE,
    }
}

/// The recovery mode of a code (`None` for an unknown one or [`RECOVERY_NEGOTIATE`]).
pub fn recovery_from_code(c: u8) -> Option<Recovery> {
    [Recovery::GoBackN, Recovery::Selective]
        .into_iter()
        .find(|&r| recovery_code(r) == c)
}

/// The server's choice for a client that asked for `asked` (hello code) when this server was
/// given `own` (`--recovery`, or `None`): the forced mode when one or both force the same,
/// [`NEGOTIATED_RECOVERY`] when neither does.
///
/// # Errors
/// [`Error::Bench`] for an unknown code or two different forced modes.
pub fn negotiate(asked: u8, own: Option<Recovery>) -> Result<Recovery> {
    if asked == RECOVERY_NEGOTIATE {
        return Ok(own.unwrap_or(NEGOTIATED_RECOVERY));
    }
    let want = recovery_from_code(asked)
        .ok_or_else(|| Error::Bench(format!("client asked for unknown recovery mode {asked}")))?;
    match own {
        Some(r) if r != want => Err(Error::Bench(format!(
            "client uses {want:?} loss recovery but this server was started with {r:?}; give both the same --recovery (or neither)"
        ))),
        _ => Ok(want),
    }
}

/// What one end tells the other about its QP and buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpInfo {
    /// QP number.
    pub qpn: u32,
    /// Initial send PSN (the peer's rq_psn).
    pub psn: u32,
    /// rkey of the buffer.
    pub rkey: u32,
    /// Virtual address of the buffer.
    pub va: u64,
    /// Buffer length, bytes.
    pub len: u64,
    /// GID: the device's IP address.
    pub gid: IpAddr,
    /// UDP port the device listens on.
    pub udp_port: u16,
    /// Largest path MTU this end can use, bytes.
    pub mtu: u32,
    /// Loss recovery this end's QP uses (byte 50: [`RECOVERY_GO_BACK_N`] or
    /// [`RECOVERY_SELECTIVE`]; the server's answer to a negotiating client). A 50-byte QP
    /// info from an older rdmesh reads as go-back-N.
    pub recovery: u8,
    /// The MAC of this end's port, when it knows one: a peer on the vfio provider puts it in
    /// its QP's address path (there is no ARP under VFIO). Sent as 6 more bytes (51..57) after
    /// the recovery byte; a 50- or 51-byte QP info (an older rdmesh) has none.
    pub mac: Option<[u8; 6]>,
}

/// End-of-test report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    /// 0 = ok.
    pub status: u8,
    /// The client's message count, or the server's bytes checked against the pattern.
    pub value: u64,
    /// Human-readable detail (empty when ok).
    pub message: String,
}

/// A framed, timed connection to the peer.
pub struct Channel {
    inner: FramedStream,
}

const T_HELLO: u16 = 1;
const T_QPINFO: u16 = 2;
const T_SYNC: u16 = 3;
const T_REPORT: u16 = 4;
const T_START: u16 = 5;

/// The start of one test size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Start {
    /// Message size, bytes.
    pub size: u64,
    /// Messages the client will send, or 0 when it runs for a duration.
    pub iters: u64,
}

impl Channel {
    /// Wraps a connected stream; every read and write times out after `timeout`.
    pub fn new(stream: TcpStream, timeout: Duration) -> Result<Channel> {
        Ok(Channel {
            inner: FramedStream::new(stream, timeout, &PROTOCOL)?,
        })
    }

    /// The peer's address.
    pub fn peer(&self) -> &str {
        self.inner.peer()
    }

    fn err(&self, reason: impl Into<String>) -> Error {
        self.inner.err(reason)
    }

    fn send(&mut self, ty: u16, payload: &[u8]) -> Result<()> {
        self.inner.send(ty, payload)
    }

    fn recv(&mut self, want: u16) -> Result<Vec<u8>> {
        self.inner.recv(want)
    }

    /// Sends the client's request.
    pub fn send_hello(&mut self, h: &Hello) -> Result<()> {
        let mut p = vec![h.mode, u8::from(h.lat), u8::from(h.verify), h.recovery];
        p.extend_from_slice(&h.max_size.to_be_bytes());
        p.extend_from_slice(&h.slots.to_be_bytes());
        self.send(T_HELLO, &p)
    }

    /// Receives the client's request.
    pub fn recv_hello(&mut self) -> Result<Hello> {
        let p = self.recv(T_HELLO)?;
        if p.len() != 16 {
            return Err(self.err(format!("hello of {} bytes, expected 16", p.len())));
        }
        Ok(Hello {
            mode: p[0],
            lat: p[1] != 0,
            verify: p[2] != 0,
            recovery: p[3],
            max_size: u64::from_be_bytes(p[4..12].try_into().expect("8 bytes")),
            slots: u32::from_be_bytes(p[12..16].try_into().expect("4 bytes")),
        })
    }

    /// Sends this end's QP information.
    pub fn send_qp_info(&mut self, q: &QpInfo) -> Result<()> {
        let mut p = Vec::with_capacity(50);
        p.extend_from_slice(&q.qpn.to_be_bytes());
        p.extend_from_slice(&q.psn.to_be_bytes());
        p.extend_from_slice(&q.rkey.to_be_bytes());
        p.extend_from_slice(&q.va.to_be_bytes());
        p.extend_from_slice(&q.len.to_be_bytes());
        let gid = match q.gid {
            IpAddr::V4(v4) => v4.to_ipv6_mapped(),
            IpAddr::V6(v6) => v6,
        };
        p.extend_from_slice(&gid.octets());
        p.extend_from_slice(&q.udp_port.to_be_bytes());
        p.extend_from_slice(&q.mtu.to_be_bytes());
        p.push(q.recovery);
        if let Some(m) = q.mac {
            p.extend_from_slice(&m);
        }
        self.send(T_QPINFO, &p)
    }

    /// Receives the peer's QP information.
    pub fn recv_qp_info(&mut self) -> Result<QpInfo> {
        let p = self.recv(T_QPINFO)?;
        if p.len() != 50 && p.len() != 51 && p.len() != 57 {
            return Err(self.err(format!(
                "QP info of {} bytes, expected 50, 51 (without a MAC) or 57",
                p.len()
            )));
        }
        let u32_at = |o: usize| u32::from_be_bytes(p[o..o + 4].try_into().expect("4 bytes"));
        let u64_at = |o: usize| u64::from_be_bytes(p[o..o + 8].try_into().expect("8 bytes"));
        let gid6 = Ipv6Addr::from(<[u8; 16]>::try_from(&p[28..44]).expect("16 bytes"));
        let gid = gid6
            .to_ipv4_mapped()
            .map(IpAddr::V4)
            .unwrap_or(IpAddr::V6(gid6));
        let q = QpInfo {
            qpn: u32_at(0),
            psn: u32_at(4),
            rkey: u32_at(8),
            va: u64_at(12),
            len: u64_at(20),
            gid,
            udp_port: u16::from_be_bytes([p[44], p[45]]),
            mtu: u32_at(46),
            recovery: p.get(50).copied().unwrap_or(RECOVERY_GO_BACK_N),
            mac: p.get(51..57).map(|m| {
                let mut a = [0u8; 6];
                a.copy_from_slice(m);
                a
            }),
        };
        if recovery_from_code(q.recovery).is_none() {
            return Err(self.err(format!("unknown recovery mode {} in QP info", q.recovery)));
        }
        if q.qpn > 0xff_ffff || q.psn > 0xff_ffff {
            return Err(self.err(format!(
                "QPN {:#x} or PSN {:#x} exceeds 24 bits",
                q.qpn, q.psn
            )));
        }
        Ok(q)
    }

    /// A barrier step: sends a token and waits for the peer's.
    pub fn sync(&mut self, step: u32) -> Result<()> {
        self.send(T_SYNC, &step.to_be_bytes())?;
        let p = self.recv(T_SYNC)?;
        if p != step.to_be_bytes() {
            return Err(self.err(format!("barrier mismatch: expected step {step}, got {p:?}")));
        }
        Ok(())
    }

    /// Announces the next test size.
    pub fn send_start(&mut self, s: &Start) -> Result<()> {
        let mut p = s.size.to_be_bytes().to_vec();
        p.extend_from_slice(&s.iters.to_be_bytes());
        self.send(T_START, &p)
    }

    /// Receives the next test size.
    pub fn recv_start(&mut self) -> Result<Start> {
        let p = self.recv(T_START)?;
        if p.len() != 16 {
            return Err(self.err(format!("start of {} bytes, expected 16", p.len())));
        }
        Ok(Start {
            size: u64::from_be_bytes(p[..8].try_into().expect("8 bytes")),
            iters: u64::from_be_bytes(p[8..].try_into().expect("8 bytes")),
        })
    }

    /// Sends the end-of-test report.
    pub fn send_report(&mut self, r: &Report) -> Result<()> {
        let mut p = vec![r.status];
        p.extend_from_slice(&r.value.to_be_bytes());
        p.extend_from_slice(r.message.as_bytes());
        p.truncate(MAX_PAYLOAD as usize);
        self.send(T_REPORT, &p)
    }

    /// Receives the end-of-test report.
    pub fn recv_report(&mut self) -> Result<Report> {
        let p = self.recv(T_REPORT)?;
        if p.len() < 9 {
            return Err(self.err(format!("report of {} bytes, expected at least 9", p.len())));
        }
        Ok(Report {
            status: p[0],
            value: u64::from_be_bytes(p[1..9].try_into().expect("8 bytes")),
            message: String::from_utf8_lossy(&p[9..]).into_owned(),
        })
    }
}

#[cfg(test)]
mod test {
    use super::*;
    use std::net::TcpListener;

    #[test]
    fn roundtrip_and_errors() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let t = std::thread::spawn(move || {
            let (s, _) = l.accept().unwrap();
            let mut c = Channel::new(s, Duration::from_secs(5)).unwrap();
            let h = c.recv_hello().unwrap();
            let q = c.recv_qp_info().unwrap();
            c.send_qp_info(&q).unwrap();
            let q = c.recv_qp_info().unwrap();
            c.send_qp_info(&q).unwrap();
            c.sync(7).unwrap();
            // Wrong type: the peer waits for a report and gets a sync.
            c.send(T_SYNC, &[0, 0, 0, 1]).unwrap();
            h
        });
        let mut c =
            Channel::new(TcpStream::connect(addr).unwrap(), Duration::from_secs(5)).unwrap();
        let h = Hello {
            mode: 2,
            lat: true,
            verify: true,
            max_size: 1 << 23,
            slots: 4,
            recovery: 1,
        };
        c.send_hello(&h).unwrap();
        let q = QpInfo {
            qpn: 0x12,
            psn: 0xabcdef,
            rkey: 0x1234,
            va: 0x7f00_0000_1000,
            len: 4096,
            gid: "10.0.0.1".parse().unwrap(),
            udp_port: 4791,
            mtu: 4096,
            recovery: RECOVERY_SELECTIVE,
            mac: None,
        };
        c.send_qp_info(&q).unwrap();
        assert_eq!(c.recv_qp_info().unwrap(), q);
        let q = QpInfo {
            mac: Some([2, 0, 10, 0, 0, 1]),
            ..q
        };
        c.send_qp_info(&q).unwrap();
        assert_eq!(c.recv_qp_info().unwrap(), q);
        c.sync(7).unwrap();
        let e = c.recv_report().unwrap_err().to_string();
        assert!(e.contains("expected message type 4"), "{e}");
        assert_eq!(t.join().unwrap(), h);
    }

    #[test]
    fn recovery_negotiation() {
        use Recovery::{GoBackN, Selective};
        assert_eq!(
            negotiate(RECOVERY_NEGOTIATE, None).unwrap(),
            NEGOTIATED_RECOVERY
        );
        assert_eq!(
            negotiate(RECOVERY_NEGOTIATE, Some(GoBackN)).unwrap(),
            GoBackN
        );
        assert_eq!(negotiate(RECOVERY_GO_BACK_N, None).unwrap(), GoBackN);
        assert_eq!(
            negotiate(RECOVERY_SELECTIVE, Some(Selective)).unwrap(),
            Selective
        );
        let e = negotiate(RECOVERY_SELECTIVE, Some(GoBackN))
            .unwrap_err()
            .to_string();
        assert!(e.contains("same --recovery"), "{e}");
        assert!(negotiate(7, None).is_err());
        for r in [GoBackN, Selective] {
            assert_eq!(recovery_from_code(recovery_code(r)), Some(r));
        }
        assert_eq!(recovery_from_code(RECOVERY_NEGOTIATE), None);
    }

    #[test]
    fn times_out_with_peer_named() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let _keep = std::thread::spawn(move || {
            let s = l.accept().unwrap();
            std::thread::sleep(Duration::from_millis(500));
            drop(s);
        });
        let mut c = Channel::new(
            TcpStream::connect(addr).unwrap(),
            Duration::from_millis(100),
        )
        .unwrap();
        let e = c.recv_hello().unwrap_err().to_string();
        assert!(e.contains("timed out") && e.contains("127.0.0.1"), "{e}");
    }
}
