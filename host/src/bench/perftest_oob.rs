//! perftest's out-of-band exchange over TCP, spoken byte for byte (perftest
//! `src/perftest_communication.c` at v4.5-0.17, the Debian 12 package 4.5+0.17-1, whose
//! version string is "6.06"; checked against captures, qemu-guest.md §5.3).
//!
//! Messages are fixed-size with no framing, and every exchange is symmetric: **the client
//! writes, then reads; the server reads, then writes** (`ctx_xchg_data`, `ctx_hand_shake`).
//! perftest reads each message with one `read(2)` of exactly its size, so each message is
//! written with one `write`.
//!
//! In order:
//! 1. version: 16 bytes, NUL-padded ASCII (`exchange_versions`); peers older than 5.70 are
//!    refused, as perftest does (`check_version_compatibility`);
//! 2. if the peer is ≥ 5.32: cycle buffer then cache line size, 4-byte big-endian ints each;
//!    both ends use the larger (`check_sys_data`);
//! 3. if the peer is ≥ 5.1: the port MTU as the decimal `enum ibv_mtu` value plus NUL, in 2
//!    bytes (4 bytes for peers older than 5.31); both use the smaller (`check_mtu`);
//! 4. key messages ([`KeyMsg`], 108 bytes with a GID), resent as barriers as often as the test
//!    needs (`ctx_hand_shake`);
//! 5. bandwidth report ([`BwReport`], `xchg_bw_reports`): five separate exchanges;
//! 6. close (`ctx_close_connection`): a key-message barrier, then each side writes `"done\0"`.

use std::io::{Read, Write};
use std::net::{IpAddr, Ipv6Addr, TcpStream};
use std::time::Duration;

use crate::error::{Error, Result};

/// The version string this end announces (perftest 4.5-0.17's).
pub const VERSION: &str = "6.06";
/// Bytes of the version message (`MAX_VERSION`).
pub const VERSION_LEN: usize = 16;
/// Oldest peer perftest itself accepts.
pub const MIN_PEER_VERSION: f64 = 5.70;
/// Bytes of a key message with a GID (`KEY_MSG_SIZE_GID`).
pub const KEY_MSG_LEN: usize = 108;
/// perftest's closing message.
pub const DONE: &[u8; 5] = b"done\0";

/// One end's connection data (`struct pingpong_dest` as `KEY_PRINT_FMT_GID` writes it:
/// `"%04x:%04x:%06x:%06x:%08x:%016llx:"` LID, out_reads, QPN, PSN, RKey, VAddr, then 16 ×
/// `"%02x:"` GID bytes, then `"%08x:"` SRQN, then NUL — 108 bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyMsg {
    /// LID (0 on RoCE).
    pub lid: u16,
    /// RDMA READs the sender accepts outstanding (its responder resources).
    pub out_reads: u16,
    /// QP number, 24 bits.
    pub qpn: u32,
    /// Initial PSN, 24 bits.
    pub psn: u32,
    /// Remote key of the buffer.
    pub rkey: u32,
    /// Virtual address the peer writes to / reads from.
    pub vaddr: u64,
    /// GID: the IPv4-mapped or IPv6 address.
    pub gid: Ipv6Addr,
    /// SRQ number (0: none).
    pub srqn: u32,
}

impl KeyMsg {
    /// The 108-byte wire form.
    pub fn to_wire(&self) -> [u8; KEY_MSG_LEN] {
        let mut s = format!(
            "{:04x}:{:04x}:{:06x}:{:06x}:{:08x}:{:016x}:",
            self.lid,
            self.out_reads,
            self.qpn & 0xff_ffff,
            self.psn & 0xff_ffff,
            self.rkey,
            self.vaddr
        );
        for b in self.gid.octets() {
            s.push_str(&format!("{b:02x}:"));
        }
        s.push_str(&format!("{:08x}:", self.srqn));
        let mut m = [0u8; KEY_MSG_LEN];
        m[..s.len()].copy_from_slice(s.as_bytes());
        m
    }

    /// Parses the 108-byte wire form.
    ///
    /// Errors: a message with missing or non-hex fields, or a QPN/PSN over 24 bits.
    pub fn from_wire(m: &[u8]) -> std::result::Result<KeyMsg, String> {
        let text = m.split(|&b| b == 0).next().unwrap_or(&[]);
        let text = std::str::from_utf8(text).map_err(|_| "key message is not ASCII".to_string())?;
        let bad = |what: &str| format!("key message '{text}': bad {what}");
        let f: Vec<&str> = text.split(':').collect();
        if f.len() < 23 {
            return Err(bad("field count"));
        }
        let hex = |i: usize, what: &str| u64::from_str_radix(f[i], 16).map_err(|_| bad(what));
        let mut gid = [0u8; 16];
        for (i, g) in gid.iter_mut().enumerate() {
            *g = u8::from_str_radix(f[6 + i], 16).map_err(|_| bad("GID"))?;
        }
        let k = KeyMsg {
            lid: hex(0, "LID")? as u16,
            out_reads: hex(1, "out_reads")? as u16,
            qpn: hex(2, "QPN")? as u32,
            psn: hex(3, "PSN")? as u32,
            rkey: hex(4, "RKey")? as u32,
            vaddr: hex(5, "VAddr")?,
            gid: Ipv6Addr::from(gid),
            srqn: hex(22, "SRQN")? as u32,
        };
        if k.qpn > 0xff_ffff || k.psn > 0xff_ffff {
            return Err(bad("QPN or PSN (24 bits)"));
        }
        Ok(k)
    }

    /// The GID as the address RoCEv2 packets go to.
    pub fn addr(&self) -> IpAddr {
        match self.gid.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(self.gid),
        }
    }
}

/// The bandwidth report (`struct bw_report_data`'s exchanged fields): MB/s = 2^20 bytes/s,
/// message rate in Mpps.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BwReport {
    /// Message size, bytes.
    pub size: u64,
    /// Messages.
    pub iters: u64,
    /// Peak bandwidth, MB/s.
    pub bw_peak: f64,
    /// Average bandwidth, MB/s.
    pub bw_avg: f64,
    /// Average message rate, Mpps.
    pub msg_rate_avg: f64,
}

/// A TCP connection speaking perftest's exchange.
pub struct PerftestChannel {
    stream: TcpStream,
    peer: String,
    client: bool,
    peer_version: f64,
    peer_version_text: String,
}

impl PerftestChannel {
    /// Wraps a connected stream; `client` is the side that connected. Reads and writes time
    /// out after `timeout`.
    ///
    /// Errors: [`Error::Io`] when the socket cannot be configured.
    pub fn new(stream: TcpStream, client: bool, timeout: Duration) -> Result<PerftestChannel> {
        let peer = stream
            .peer_addr()
            .map(|a| a.to_string())
            .unwrap_or_else(|_| "?".into());
        let io = |e| Error::io(format!("configuring the out-of-band socket to {peer}"), e);
        stream.set_read_timeout(Some(timeout)).map_err(io)?;
        stream.set_write_timeout(Some(timeout)).map_err(io)?;
        stream.set_nodelay(true).map_err(io)?;
        Ok(PerftestChannel {
            stream,
            peer,
            client,
            peer_version: 0.0,
            peer_version_text: String::new(),
        })
    }

    /// The peer's address.
    pub fn peer(&self) -> &str {
        &self.peer
    }

    /// The peer's version string (after [`exchange_versions`](Self::exchange_versions)).
    pub fn peer_version(&self) -> &str {
        &self.peer_version_text
    }

    fn err(&self, reason: String) -> Error {
        Error::Exchange {
            peer: self.peer.clone(),
            reason,
        }
    }

    fn write(&mut self, m: &[u8], step: &str) -> Result<()> {
        let r = self.stream.write_all(m);
        r.map_err(|e| self.err(format!("sending {step}: {e}")))
    }

    fn read(&mut self, n: usize, step: &str) -> Result<Vec<u8>> {
        let mut b = vec![0u8; n];
        match self.stream.read_exact(&mut b) {
            Ok(()) => Ok(b),
            Err(e) => Err(self.err(match e.kind() {
                std::io::ErrorKind::UnexpectedEof => {
                    format!("perftest peer closed the connection before {step} (see its output; same test and flags on both ends?)")
                }
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => {
                    format!("timed out waiting for {step}; is the perftest peer still running?")
                }
                _ => format!("reading {step}: {e}"),
            })),
        }
    }

    /// One exchange: the client writes then reads, the server reads then writes
    /// (`ctx_xchg_data`). Returns the peer's bytes (`mine.len()` of them).
    pub fn xchg(&mut self, mine: &[u8], step: &str) -> Result<Vec<u8>> {
        if self.client {
            self.write(mine, step)?;
            self.read(mine.len(), step)
        } else {
            let theirs = self.read(mine.len(), step)?;
            self.write(mine, step)?;
            Ok(theirs)
        }
    }

    /// Exchanges version strings; refuses peers older than 5.70 as perftest does.
    ///
    /// Errors: an exchange failure, or a peer version below 5.70 or unparsable.
    pub fn exchange_versions(&mut self) -> Result<()> {
        let mut mine = [0u8; VERSION_LEN];
        mine[..VERSION.len()].copy_from_slice(VERSION.as_bytes());
        let theirs = self.xchg(&mine, "the version string")?;
        let text: String = theirs
            .split(|&b| b == 0)
            .next()
            .map(|t| String::from_utf8_lossy(t).into_owned())
            .unwrap_or_default();
        let v = parse_version(&text);
        if v < MIN_PEER_VERSION {
            return Err(self.err(format!(
                "peer announces version '{text}'; perftest's exchange needs 5.70 or later (is the peer a perftest tool? an rdmesh peer needs no --perftest-compat)"
            )));
        }
        self.peer_version = v;
        self.peer_version_text = text;
        Ok(())
    }

    /// Exchanges cycle buffer and cache line size (peers ≥ 5.32); returns the larger of each.
    ///
    /// Errors: an exchange failure.
    pub fn exchange_sys_data(&mut self, cycle_buffer: u32, cache_line: u32) -> Result<(u32, u32)> {
        if self.peer_version < 5.32 {
            return Ok((cycle_buffer, cache_line));
        }
        let c = self.xchg(&cycle_buffer.to_be_bytes(), "the cycle buffer size")?;
        let l = self.xchg(&cache_line.to_be_bytes(), "the cache line size")?;
        let c = u32::from_be_bytes(c[..4].try_into().expect("4 bytes"));
        let l = u32::from_be_bytes(l[..4].try_into().expect("4 bytes"));
        Ok((cycle_buffer.max(c), cache_line.max(l)))
    }

    /// Exchanges the port MTU as an `enum ibv_mtu` value (1 = 256 .. 5 = 4096); returns the
    /// smaller valid one.
    ///
    /// Errors: an exchange failure.
    pub fn exchange_mtu(&mut self, mtu_enum: u8) -> Result<u8> {
        if self.peer_version < 5.1 {
            return Ok(mtu_enum);
        }
        let len = if self.peer_version >= 5.31 { 2 } else { 4 };
        let mut mine = vec![0u8; len];
        let s = mtu_enum.to_string();
        mine[..s.len()].copy_from_slice(s.as_bytes());
        let theirs = self.xchg(&mine, "the MTU")?;
        let t: String = theirs
            .iter()
            .take_while(|b| b.is_ascii_digit())
            .map(|&b| b as char)
            .collect();
        Ok(match t.parse::<u8>() {
            Ok(r) if (1..=5).contains(&r) && r < mtu_enum => r,
            _ => mtu_enum,
        })
    }

    /// A key-message exchange (`ctx_hand_shake`): connection data the first time, a barrier
    /// every later time. Returns the peer's message.
    ///
    /// Errors: an exchange failure or an unparsable message.
    pub fn hand_shake(&mut self, mine: &KeyMsg, step: &str) -> Result<KeyMsg> {
        let theirs = self.xchg(&mine.to_wire(), step)?;
        KeyMsg::from_wire(&theirs).map_err(|e| self.err(e))
    }

    /// The report exchange (`xchg_bw_reports`): size, iters (8 bytes from peers ≥ 5.33, else
    /// 4), peak, average, message rate — five exchanges, big-endian integers and IEEE doubles.
    /// Returns the peer's report (a perftest server sends uninitialised values).
    ///
    /// Errors: an exchange failure.
    pub fn exchange_bw_report(&mut self, mine: &BwReport) -> Result<BwReport> {
        let size = self.xchg(&mine.size.to_be_bytes(), "the report's size")?;
        let iters = if self.peer_version >= 5.33 {
            let b = self.xchg(&mine.iters.to_be_bytes(), "the report's iterations")?;
            u64::from_be_bytes(b[..8].try_into().expect("8 bytes"))
        } else {
            let b = self.xchg(
                &(mine.iters as u32).to_be_bytes(),
                "the report's iterations",
            )?;
            u64::from(u32::from_be_bytes(b[..4].try_into().expect("4 bytes")))
        };
        let mut f = |v: f64, step: &str| -> Result<f64> {
            let b = self.xchg(&v.to_bits().to_be_bytes(), step)?;
            Ok(f64::from_bits(u64::from_be_bytes(
                b[..8].try_into().expect("8 bytes"),
            )))
        };
        let bw_peak = f(mine.bw_peak, "the report's peak bandwidth")?;
        let bw_avg = f(mine.bw_avg, "the report's average bandwidth")?;
        let msg_rate_avg = f(mine.msg_rate_avg, "the report's message rate")?;
        Ok(BwReport {
            size: u64::from_be_bytes(size[..8].try_into().expect("8 bytes")),
            iters,
            bw_peak,
            bw_avg,
            msg_rate_avg,
        })
    }

    /// Closes as `ctx_close_connection` does: a barrier, then `"done\0"` each way. The peer's
    /// `"done"` is awaited (briefly) so this end does not reset the connection before the peer
    /// has written it.
    ///
    /// Errors: the barrier or the write failing.
    pub fn close(&mut self, mine: &KeyMsg) -> Result<()> {
        self.hand_shake(mine, "the closing barrier")?;
        self.write(DONE, "\"done\"")?;
        let _ = self.stream.set_read_timeout(Some(Duration::from_secs(5)));
        let mut b = [0u8; DONE.len()];
        if self.stream.read_exact(&mut b).is_ok() && &b != DONE {
            tracing::warn!(peer = %self.peer, got = ?b, "perftest peer closed with something other than \"done\"");
        }
        Ok(())
    }
}

/// perftest compares versions with `atof`: the leading decimal number.
fn parse_version(s: &str) -> f64 {
    let t: String = s
        .trim()
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == '.')
        .collect();
    // "6.06" and "5.70" compare as decimals; a second dot ends the number as atof does.
    let mut parts = t.splitn(3, '.');
    let whole = parts.next().unwrap_or("");
    let frac = parts.next().unwrap_or("");
    format!("{whole}.{frac}").parse().unwrap_or(0.0)
}

/// The `enum ibv_mtu` value of a path MTU in bytes (256 → 1 … 4096 → 5).
pub fn mtu_enum(bytes: u32) -> u8 {
    match bytes {
        4096 => 5,
        2048 => 4,
        1024 => 3,
        512 => 2,
        _ => 1,
    }
}

/// The path MTU in bytes of an `enum ibv_mtu` value.
pub fn mtu_bytes(e: u8) -> u32 {
    256 << (e.clamp(1, 5) - 1)
}

#[cfg(test)]
mod test {
    use super::*;
    use std::net::TcpListener;

    #[test]
    fn key_message_matches_perftest() {
        // From an ib_write_bw capture (qemu-guest.md §5.3).
        let text = b"0000:0001:000014:66f9aa:000005d0:00007f46543d2000:00:00:00:00:00:00:00:00:00:00:ff:ff:0a:fa:00:0c:00000000:";
        let mut m = [0u8; KEY_MSG_LEN];
        m[..text.len()].copy_from_slice(text);
        assert_eq!(text.len() + 1, KEY_MSG_LEN);
        let k = KeyMsg::from_wire(&m).unwrap();
        assert_eq!(k.out_reads, 1);
        assert_eq!(k.qpn, 0x14);
        assert_eq!(k.psn, 0x66f9aa);
        assert_eq!(k.rkey, 0x5d0);
        assert_eq!(k.vaddr, 0x7f46_543d_2000);
        assert_eq!(k.addr(), "10.250.0.12".parse::<IpAddr>().unwrap());
        assert_eq!(k.to_wire(), m);
        assert!(KeyMsg::from_wire(b"0000:0001:1000000:0:0:0:").is_err());
    }

    #[test]
    fn versions_compare_as_perftest_does() {
        assert_eq!(parse_version("6.06"), 6.06);
        assert!(parse_version("5.70") >= MIN_PEER_VERSION);
        assert!(parse_version("5.6") < MIN_PEER_VERSION);
        assert_eq!(parse_version("junk"), 0.0);
        assert_eq!(mtu_bytes(mtu_enum(1024)), 1024);
        assert_eq!(mtu_enum(4096), 5);
    }

    #[test]
    fn client_writes_first_and_server_reads_first() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let t = std::thread::spawn(move || {
            let (s, _) = l.accept().unwrap();
            let mut c = PerftestChannel::new(s, false, Duration::from_secs(5)).unwrap();
            c.exchange_versions().unwrap();
            let sys = c.exchange_sys_data(4096, 64).unwrap();
            let mtu = c.exchange_mtu(3).unwrap();
            let k = KeyMsg {
                lid: 0,
                out_reads: 16,
                qpn: 0x11,
                psn: 0x123456,
                rkey: 0x99,
                vaddr: 0x1000,
                gid: "::ffff:10.0.0.1".parse().unwrap(),
                srqn: 0,
            };
            let peer = c.hand_shake(&k, "keys").unwrap();
            let r = c
                .exchange_bw_report(&BwReport {
                    size: 0,
                    iters: 0,
                    bw_peak: 0.0,
                    bw_avg: 0.0,
                    msg_rate_avg: 0.0,
                })
                .unwrap();
            c.close(&k).unwrap();
            (sys, mtu, peer, r)
        });
        let mut c = PerftestChannel::new(
            TcpStream::connect(addr).unwrap(),
            true,
            Duration::from_secs(5),
        )
        .unwrap();
        c.exchange_versions().unwrap();
        assert_eq!(c.peer_version(), "6.06");
        assert_eq!(c.exchange_sys_data(8192, 64).unwrap(), (8192, 64));
        assert_eq!(c.exchange_mtu(5).unwrap(), 3);
        let k = KeyMsg {
            lid: 0,
            out_reads: 1,
            qpn: 0x22,
            psn: 0xabcdef,
            rkey: 0x1234,
            vaddr: 0x7f00_0000_0000,
            gid: "::ffff:10.0.0.2".parse().unwrap(),
            srqn: 0,
        };
        assert_eq!(c.hand_shake(&k, "keys").unwrap().qpn, 0x11);
        let mine = BwReport {
            size: 65536,
            iters: 200,
            bw_peak: 5.5,
            bw_avg: 4.25,
            msg_rate_avg: 0.000068,
        };
        c.exchange_bw_report(&mine).unwrap();
        c.close(&k).unwrap();
        let (sys, mtu, peer, r) = t.join().unwrap();
        assert_eq!(sys, (8192, 64));
        assert_eq!(mtu, 3);
        assert_eq!(peer, k);
        assert_eq!(r, mine);
    }
}
