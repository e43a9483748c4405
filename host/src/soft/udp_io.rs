//! The soft provider's UDP socket calls, batched: UDP GSO on send (`UDP_SEGMENT`), UDP GRO on
//! receive (`UDP_GRO`), and the ECN field of received datagrams (`IP_RECVTOS` /
//! `IPV6_RECVTCLASS`), all through `sendmsg` / `recvmsg` control messages (Linux udp(7),
//! ip(7), ipv6(7); `UDP_SEGMENT` since 4.18, `UDP_GRO` since 5.0).
//!
//! # Why not quinn-udp
//! quinn-udp does GSO/GRO/ECN for QUIC, but RoCEv2 needs two things it changes: it sets
//! `IP_MTU_DISCOVER` to `IP_PMTUDISC_PROBE` on the socket (the soft provider relies on
//! `IP_PMTUDISC_DO`: EMSGSIZE past the path MTU, and the IPv4 ID rule below), and its
//! per-datagram ECN control message writes a TOS of the ECN bits alone, dropping the DSCP that
//! RoCE deployments use for the lossless traffic class. So the provider sets its socket options
//! once and uses nix's `sendmsg`/`recvmsg` control messages directly.
//!
//! # The IPv4 Identification of GSO segments
//! The ICRC covers the IPv4 Identification. An unconnected socket with `IP_PMTUDISC_DO` gets
//! ID 0 for a lone datagram (`ip_select_ident_segs`), and the segments of one GSO send get
//! consecutive IDs from that 0 (`inet_gso_segment`), whether the kernel segments in software
//! or the NIC does. So segment `i` of a send is sealed with ID `i` (see
//! [`crate::soft::ident`] for the receive side).
//!
//! The ECN codepoint is the low two bits of the TOS / Traffic Class (RFC 3168 §5: 0b00
//! Not-ECT, 0b10 ECT(0), 0b01 ECT(1), 0b11 CE).

use std::io;
use std::io::{IoSlice, IoSliceMut};
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;

use nix_cmsg::sys::socket::{
    recvmsg, setsockopt, sockopt, ControlMessage, ControlMessageOwned, MsgFlags, SockaddrStorage,
};

/// Most segments one GSO send may carry (`UDP_MAX_SEGMENTS`: 64 before Linux 6.2, 128 since).
pub(crate) const MAX_GSO_SEGMENTS: usize = 64;
/// Most bytes of UDP payload one GSO send may carry (the IPv4 total length is 16 bits:
/// 65535 − 20 − 8).
pub(crate) const MAX_GSO_BYTES: usize = 65507;

/// Asks the kernel to attach the TOS byte (IPv4) or Traffic Class (IPv6) to every datagram
/// received on `sock`.
///
/// Errors: the `setsockopt` error (`IP_RECVTOS` / `IPV6_RECVTCLASS`).
pub(crate) fn enable_ecn(sock: &UdpSocket, ipv6: bool) -> io::Result<()> {
    if ipv6 {
        setsockopt(sock, sockopt::Ipv6RecvTClass, &true)?;
    } else {
        setsockopt(sock, sockopt::IpRecvTos, &true)?;
    }
    Ok(())
}

/// Receive buffer a soft device asks for, bytes: the windows of every QP on its socket (a
/// selective-repeat window is 256 packets of up to 4 KiB) with room for a scheduling stall.
pub(crate) const SOCKET_RCVBUF: usize = 16 << 20;

/// Send buffer a soft device asks for, bytes.
pub(crate) const SOCKET_SNDBUF: usize = 8 << 20;

/// Sizes a soft device's socket ([`SOCKET_RCVBUF`], [`SOCKET_SNDBUF`]) and says once per
/// process, naming `device`, when the kernel granted less receive buffer than that (no
/// `CAP_NET_ADMIN` and a low `net.core.rmem_max`): a burst that overflows it is dropped by the
/// kernel and costs a retransmission.
pub(crate) fn size_for_windows(sock: &socket2::Socket, device: &str) {
    static ONCE: std::sync::Once = std::sync::Once::new();
    let (rcv, _) = size_buffers(sock, SOCKET_RCVBUF, SOCKET_SNDBUF);
    if rcv < SOCKET_RCVBUF {
        ONCE.call_once(|| {
            tracing::warn!(
                device,
                granted_bytes = rcv,
                wanted_bytes = SOCKET_RCVBUF,
                "the kernel capped this soft device's UDP receive buffer (net.core.rmem_max, no CAP_NET_ADMIN); bursts may be dropped and resent: raise it with `sysctl -w net.core.rmem_max={}`",
                SOCKET_RCVBUF
            )
        });
    }
}

/// Sizes the kernel buffers of `sock`, in bytes: `SO_RCVBUFFORCE` / `SO_SNDBUFFORCE`, which
/// may exceed `net.core.rmem_max` / `wmem_max` and need `CAP_NET_ADMIN`, else `SO_RCVBUF` /
/// `SO_SNDBUF`, which the kernel caps at those sysctls (socket(7)). Returns the receive and
/// send sizes the kernel reports afterwards (Linux doubles a request for its own bookkeeping,
/// so a granted request reads back as at least `rcv` / `snd`). `snd` 0 leaves the send buffer
/// as it is (a receive-only socket). Never fails: a socket whose
/// buffers cannot grow keeps working, and the caller compares the sizes with what it needs.
pub(crate) fn size_buffers(sock: &socket2::Socket, rcv: usize, snd: usize) -> (usize, usize) {
    if setsockopt(sock, sockopt::RcvBufForce, &rcv).is_err() {
        let _ = sock.set_recv_buffer_size(rcv);
    }
    if snd > 0 && setsockopt(sock, sockopt::SndBufForce, &snd).is_err() {
        let _ = sock.set_send_buffer_size(snd);
    }
    (
        sock.recv_buffer_size().unwrap_or(0),
        sock.send_buffer_size().unwrap_or(0),
    )
}

/// Turns on UDP GRO for `sock`: the kernel may hand back several equal-size datagrams of one
/// flow in one `recvmsg`, with their size in a `UDP_GRO` control message.
///
/// Errors: the `setsockopt(UDP_GRO)` error (kernels before 5.0).
pub(crate) fn enable_gro(sock: &UdpSocket) -> io::Result<()> {
    setsockopt(sock, sockopt::UdpGroSegment, &true)?;
    Ok(())
}

/// One `recvmsg`: bytes received, the source, the ECN codepoint (0 when the kernel attached
/// no TOS / Traffic Class) and the GRO segment size (`None`: one datagram of `bytes`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Received {
    pub bytes: usize,
    pub src: SocketAddr,
    pub ecn: u8,
    pub segment: Option<usize>,
}

impl Received {
    /// The datagrams of this receive as `(offset, length)` pairs within the buffer.
    pub(crate) fn datagrams(&self) -> impl Iterator<Item = (usize, usize)> {
        let seg = self.segment.unwrap_or(self.bytes).max(1);
        let bytes = self.bytes;
        (0..bytes)
            .step_by(seg)
            .map(move |off| (off, seg.min(bytes - off)))
    }
}

/// Receives into `buf` (64 KiB holds the largest GRO batch).
///
/// `wait`: block (up to the socket's read timeout) instead of returning `WouldBlock`.
///
/// Errors: as `recvmsg` (`WouldBlock` when nothing is queued and `wait` is false);
/// `InvalidData` when the source is not an IP address.
pub(crate) fn recv(sock: &UdpSocket, buf: &mut [u8], wait: bool) -> io::Result<Received> {
    let flags = if wait {
        MsgFlags::empty()
    } else {
        MsgFlags::MSG_DONTWAIT
    };
    recv_iov(sock, &mut [IoSliceMut::new(buf)], flags)
}

/// Looks at the datagram (or GRO batch) at the head of the queue without taking it: its first
/// `buf.len()` bytes land in `buf`, and [`Received::bytes`] is its whole length (`MSG_PEEK |
/// MSG_TRUNC`, udp(7)). `wait` as in [`recv`].
///
/// Errors: as [`recv`].
pub(crate) fn peek(sock: &UdpSocket, buf: &mut [u8], wait: bool) -> io::Result<Received> {
    let mut flags = MsgFlags::MSG_PEEK | MsgFlags::MSG_TRUNC;
    if !wait {
        flags |= MsgFlags::MSG_DONTWAIT;
    }
    recv_iov(sock, &mut [IoSliceMut::new(buf)], flags)
}

/// Takes the datagram (or GRO batch) at the head of the queue, scattered over `iov` in order,
/// without blocking.
///
/// Errors: as [`recv`].
pub(crate) fn recv_scattered(sock: &UdpSocket, iov: &mut [IoSliceMut<'_>]) -> io::Result<Received> {
    recv_iov(sock, iov, MsgFlags::MSG_DONTWAIT)
}

fn recv_iov(sock: &UdpSocket, iov: &mut [IoSliceMut<'_>], flags: MsgFlags) -> io::Result<Received> {
    thread_local! {
        // IP_TOS or IPV6_TCLASS (an `int` at most), UDP_GRO (an `int`) and a spare; one buffer
        // per thread instead of an allocation per receive.
        static SPACE: std::cell::RefCell<Vec<u8>> =
            std::cell::RefCell::new(nix_cmsg::cmsg_space!(i32, i32, i32));
    }
    SPACE.with(|space| recv_with(sock, iov, flags, &mut space.borrow_mut()))
}

// nix's `recvmsg` takes the control-message buffer as `&mut Vec<u8>` (it sets its length).
#[allow(clippy::ptr_arg)]
fn recv_with(
    sock: &UdpSocket,
    iov: &mut [IoSliceMut<'_>],
    flags: MsgFlags,
    space: &mut Vec<u8>,
) -> io::Result<Received> {
    let msg = recvmsg::<SockaddrStorage>(sock.as_raw_fd(), iov, Some(space), flags)?;
    let mut ecn = 0u8;
    let mut segment = None;
    for c in msg.cmsgs()? {
        match c {
            ControlMessageOwned::Ipv4Tos(tos) => ecn = tos & 0b11,
            ControlMessageOwned::Ipv6TClass(tc) => ecn = (tc & 0b11) as u8,
            ControlMessageOwned::UdpGroSegments(size) if size > 0 => segment = Some(size as usize),
            _ => {}
        }
    }
    let src = msg
        .address
        .as_ref()
        .and_then(to_socket_addr)
        .ok_or_else(|| {
            io::Error::new(io::ErrorKind::InvalidData, "datagram without an IP source")
        })?;
    Ok(Received {
        bytes: msg.bytes,
        src,
        ecn,
        segment,
    })
}

/// Sends `buf` to `dst` as datagrams of `segment` bytes (the last may be shorter) in one
/// `sendmsg`: with `UDP_SEGMENT` when there is more than one, as one plain datagram otherwise.
/// `buf` holds at most [`MAX_GSO_SEGMENTS`] segments and [`MAX_GSO_BYTES`] bytes.
///
/// Errors: as `sendmsg` (`EMSGSIZE` past the path MTU; `EIO`/`EINVAL` where the route or the
/// kernel cannot segment).
pub(crate) fn send(
    sock: &UdpSocket,
    buf: &[u8],
    segment: usize,
    dst: SocketAddr,
) -> io::Result<()> {
    if buf.len() <= segment {
        sock.send_to(buf, dst)?;
        return Ok(());
    }
    send_gso(sock, &[IoSlice::new(buf)], segment as u16, dst)
}

/// [`send`] with the bytes gathered from `iov` (headers from one buffer, payload from a memory
/// region): the kernel cuts the concatenation into `segment`-byte datagrams whatever the iovec
/// boundaries. At most `IOV_MAX` (1024) iovecs.
///
/// Errors: as [`send`].
pub(crate) fn send_vectored(
    sock: &UdpSocket,
    iov: &[IoSlice<'_>],
    segment: usize,
    dst: SocketAddr,
) -> io::Result<()> {
    let total: usize = iov.iter().map(|s| s.len()).sum();
    if total <= segment {
        let addr = socket2::SockAddr::from(dst);
        let msg = socket2::MsgHdr::new().with_addr(&addr).with_buffers(iov);
        socket2::SockRef::from(sock).sendmsg(&msg, 0)?;
        return Ok(());
    }
    send_gso(sock, iov, segment as u16, dst)
}

/// `CMSG_ALIGN` of the kernel's `struct cmsghdr` (`cmsg_len` is a `size_t`).
const fn cmsg_align(n: usize) -> usize {
    let a = std::mem::size_of::<usize>();
    (n + a - 1) & !(a - 1)
}

/// `CMSG_LEN(0)`: the `struct cmsghdr` before the data.
const CMSG_HDR_LEN: usize = cmsg_align(std::mem::size_of::<usize>() + 2 * 4);
/// `CMSG_SPACE(sizeof(u16))`: the `UDP_SEGMENT` control message.
const GSO_CMSG_SPACE: usize = CMSG_HDR_LEN + cmsg_align(2);
/// `SOL_UDP` and `UDP_SEGMENT` (linux/udp.h), as libc names them.
const SOL_UDP: i32 = nix::libc::SOL_UDP;
const UDP_SEGMENT: i32 = nix::libc::UDP_SEGMENT;

/// The `UDP_SEGMENT` control message for `segment`-byte datagrams, as the kernel reads it
/// (`cmsg_len`, `cmsg_level`, `cmsg_type`, then the `u16`): built on the stack, where nix's
/// `sendmsg` allocates (and zeroes and frees) a control buffer on every call.
fn gso_cmsg(segment: u16) -> [u8; GSO_CMSG_SPACE] {
    let mut c = [0u8; GSO_CMSG_SPACE];
    let w = std::mem::size_of::<usize>();
    c[..w].copy_from_slice(&(CMSG_HDR_LEN + 2).to_ne_bytes());
    c[w..w + 4].copy_from_slice(&SOL_UDP.to_ne_bytes());
    c[w + 4..w + 8].copy_from_slice(&UDP_SEGMENT.to_ne_bytes());
    c[CMSG_HDR_LEN..CMSG_HDR_LEN + 2].copy_from_slice(&segment.to_ne_bytes());
    c
}

/// One `sendmsg` of the bytes of `iov` to `dst`, cut by the kernel into `segment`-byte
/// datagrams (`UDP_SEGMENT`), without a heap allocation.
fn send_gso(
    sock: &UdpSocket,
    iov: &[IoSlice<'_>],
    segment: u16,
    dst: SocketAddr,
) -> io::Result<()> {
    let cmsg = gso_cmsg(segment);
    let addr = socket2::SockAddr::from(dst);
    let msg = socket2::MsgHdr::new()
        .with_addr(&addr)
        .with_buffers(iov)
        .with_control(&cmsg);
    socket2::SockRef::from(sock).sendmsg(&msg, 0)?;
    Ok(())
}

/// Sends the datagram `first` and then the bytes of `batch` (as [`send_vectored`] does: one
/// datagram, or `segment`-byte GSO segments) to `dst` in one `sendmmsg`, so that a peer sharing
/// this CPU is woken once for both: an ACK and the reply that follows it.
///
/// Errors: as `sendmmsg`; [`io::ErrorKind::InvalidInput`] when `batch` is cut into segments
/// shorter than `first` (the one control message applies to both: it would cut `first` too);
/// [`io::ErrorKind::WriteZero`] when the kernel took only `first`.
pub(crate) fn send_after(
    sock: &UdpSocket,
    first: &[u8],
    batch: &[IoSlice<'_>],
    segment: usize,
    dst: SocketAddr,
) -> io::Result<()> {
    use nix_cmsg::sys::socket::{sendmmsg, MultiHeaders};
    let gso = batch.iter().map(|s| s.len()).sum::<usize>() > segment;
    if gso && first.len() > segment {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "a first datagram longer than the batch's segments",
        ));
    }
    let addr = SockaddrStorage::from(dst);
    // A datagram no longer than the segment size goes out whole (udp(7)): `first` is not cut.
    let seg = segment as u16;
    let cmsg_gso = [ControlMessage::UdpGsoSegments(&seg)];
    let cmsgs: &[ControlMessage] = if gso { &cmsg_gso } else { &[] };
    let mut headers =
        MultiHeaders::<SockaddrStorage>::preallocate(2, gso.then(|| nix_cmsg::cmsg_space!(u16)));
    let head = [IoSlice::new(first)];
    let iovs: [&[IoSlice<'_>]; 2] = [&head, batch];
    let addrs = [Some(addr), Some(addr)];
    let sent = sendmmsg(
        sock.as_raw_fd(),
        &mut headers,
        &iovs,
        addrs,
        cmsgs,
        MsgFlags::empty(),
    )?
    .count();
    if sent < 2 {
        return Err(io::Error::new(
            io::ErrorKind::WriteZero,
            "sendmmsg sent only the first datagram",
        ));
    }
    Ok(())
}

fn to_socket_addr(a: &SockaddrStorage) -> Option<SocketAddr> {
    if let Some(v4) = a.as_sockaddr_in() {
        return Some(SocketAddr::V4((*v4).into()));
    }
    a.as_sockaddr_in6().map(|v6| SocketAddr::V6((*v6).into()))
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn reads_the_ecn_bits_the_sender_set() {
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        rx.set_read_timeout(Some(std::time::Duration::from_secs(2)))
            .unwrap();
        enable_ecn(&rx, false).unwrap();
        let tx = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::DGRAM, None).unwrap();
        tx.bind(&"127.0.0.1:0".parse::<SocketAddr>().unwrap().into())
            .unwrap();
        let from = tx.local_addr().unwrap().as_socket().unwrap();
        let mut buf = [0u8; 64];
        for tos in [0x00u32, 0x02, 0x01, 0x03, 0xb8 | 0x02] {
            tx.set_tos(tos).unwrap();
            tx.send_to(b"roce", &rx.local_addr().unwrap().into())
                .unwrap();
            let r = recv(&rx, &mut buf, true).unwrap();
            assert_eq!(
                (&buf[..r.bytes], r.src, r.ecn),
                (&b"roce"[..], from, (tos & 3) as u8)
            );
        }
    }

    /// The `UDP_SEGMENT` control message built on the stack is the size libc's `CMSG_SPACE`
    /// gives (nix's `cmsg_space!`), with `CMSG_LEN` in its header.
    #[test]
    fn gso_control_message_has_the_libc_layout() {
        let space = nix_cmsg::cmsg_space!(u16).capacity();
        assert_eq!(GSO_CMSG_SPACE, space);
        let c = gso_cmsg(0x1234);
        let w = std::mem::size_of::<usize>();
        let mut len = [0u8; std::mem::size_of::<usize>()];
        len.copy_from_slice(&c[..w]);
        assert_eq!(usize::from_ne_bytes(len), CMSG_HDR_LEN + 2);
        assert_eq!(&c[CMSG_HDR_LEN..CMSG_HDR_LEN + 2], &0x1234u16.to_ne_bytes());
    }

    /// A GSO send arrives as the same segments: in one GRO batch when the receiver asked for
    /// GRO (loopback keeps the GSO packet whole), one datagram per segment otherwise.
    #[test]
    fn gso_segments_arrive_whole_with_and_without_gro() {
        for gro in [true, false] {
            let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
            rx.set_read_timeout(Some(std::time::Duration::from_secs(2)))
                .unwrap();
            if gro {
                enable_gro(&rx).unwrap();
            }
            let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
            let data: Vec<u8> = (0..10_000u32).map(|i| (i % 251) as u8).collect();
            send(&tx, &data, 4000, rx.local_addr().unwrap()).unwrap();
            let mut got = Vec::new();
            let mut sizes = Vec::new();
            let mut buf = vec![0u8; 65536];
            while got.len() < data.len() {
                let r = recv(&rx, &mut buf, true).unwrap();
                for (off, len) in r.datagrams() {
                    sizes.push(len);
                    got.extend_from_slice(&buf[off..off + len]);
                }
            }
            assert_eq!(sizes, [4000, 4000, 2000], "gro={gro}");
            assert_eq!(got, data, "gro={gro}");
        }
    }

    /// An ACK and a GSO batch in one `sendmmsg` arrive as the ACK, whole, and the batch's
    /// segments. An ACK longer than the segments of a batch that is cut is refused: the one
    /// `UDP_SEGMENT` control message would cut it too (before, the segment size was raised
    /// to the ACK's length, which cut the batch wrongly).
    #[test]
    fn an_ack_goes_whole_before_a_batch() {
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        rx.set_read_timeout(Some(std::time::Duration::from_secs(2)))
            .unwrap();
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let to = rx.local_addr().unwrap();
        let ack = [0x11u8; 20];
        let data: Vec<u8> = (0..250u32).map(|i| i as u8).collect();
        let mut buf = [0u8; 512];
        let mut recv_sizes =
            |n| -> Vec<usize> { (0..n).map(|_| rx.recv(&mut buf).unwrap()).collect() };
        send_after(&tx, &ack, &[IoSlice::new(&data)], 100, to).unwrap();
        assert_eq!(recv_sizes(4), [20, 100, 100, 50]);
        let e = send_after(&tx, &ack, &[IoSlice::new(&data[..32])], 16, to);
        assert_eq!(e.unwrap_err().kind(), io::ErrorKind::InvalidInput);
        // A batch of one datagram takes no control message: both go whole.
        send_after(&tx, &ack, &[IoSlice::new(&data[..16])], 16, to).unwrap();
        assert_eq!(recv_sizes(2), [20, 16]);
    }

    #[test]
    fn buffers_grow_past_the_sysctl_cap_with_cap_net_admin() {
        let sock = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::DGRAM, None)
            .expect("a UDP socket");
        let (rcv, snd) = size_buffers(&sock, SOCKET_RCVBUF, SOCKET_SNDBUF);
        let cap = |f: &str| {
            std::fs::read_to_string(format!("/proc/sys/net/core/{f}"))
                .ok()
                .and_then(|s| s.trim().parse::<usize>().ok())
                .unwrap_or(0)
        };
        // Linux reports twice what was granted; without the privilege the grant is capped.
        assert!(rcv >= SOCKET_RCVBUF.min(2 * cap("rmem_max")), "rcv {rcv}");
        assert!(snd >= SOCKET_SNDBUF.min(2 * cap("wmem_max")), "snd {snd}");
        // CapEff bit 12 is CAP_NET_ADMIN (capabilities(7)); root in CI holds it.
        let cap_net_admin = std::fs::read_to_string("/proc/self/status")
            .ok()
            .and_then(|s| {
                let hex = s
                    .lines()
                    .find_map(|l| l.strip_prefix("CapEff:"))?
                    .trim()
                    .to_owned();
                u64::from_str_radix(&hex, 16).ok()
            })
            .is_some_and(|c| c & (1 << 12) != 0);
        if cap_net_admin {
            // The FORCE options pass the sysctl caps.
            assert!(rcv >= SOCKET_RCVBUF, "rcv {rcv}");
            assert!(snd >= SOCKET_SNDBUF, "snd {snd}");
        }
    }

    #[test]
    fn a_zero_send_size_leaves_the_send_buffer() {
        let sock = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::DGRAM, None)
            .expect("a UDP socket");
        let before = sock.send_buffer_size().expect("SO_SNDBUF");
        let (_, snd) = size_buffers(&sock, 1 << 16, 0);
        assert_eq!(snd, before);
    }
}
