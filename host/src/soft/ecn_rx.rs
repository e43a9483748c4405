//! Reading the ECN field of received UDP datagrams: `IP_RECVTOS` / `IPV6_RECVTCLASS` make the
//! kernel attach the IPv4 TOS byte (`IP_TOS` control message, one byte) or the IPv6 Traffic
//! Class (`IPV6_TCLASS`, an `int`) to each datagram, read with `recvmsg` (Linux ip(7), ipv6(7)).
//! The ECN codepoint is the low two bits (RFC 3168 §5: 0b00 Not-ECT, 0b10 ECT(0), 0b01 ECT(1),
//! 0b11 CE).

use std::io;
use std::io::IoSliceMut;
use std::net::{SocketAddr, UdpSocket};

use nix_cmsg::sys::socket::{
    recvmsg, setsockopt, sockopt, ControlMessageOwned, MsgFlags, SockaddrStorage,
};

/// Asks the kernel to attach the TOS byte (IPv4) or Traffic Class (IPv6) to every datagram
/// received on `sock`.
///
/// Errors: the `setsockopt` error (`IP_RECVTOS` / `IPV6_RECVTCLASS`).
pub(crate) fn enable(sock: &UdpSocket, ipv6: bool) -> io::Result<()> {
    if ipv6 {
        setsockopt(sock, sockopt::Ipv6RecvTClass, &true)?;
    } else {
        setsockopt(sock, sockopt::IpRecvTos, &true)?;
    }
    Ok(())
}

/// Receives one datagram into `buf`: its length, source address and ECN codepoint (0 when
/// the kernel attached no TOS / Traffic Class).
///
/// Errors: as `recvmsg` (`WouldBlock` on the socket's read timeout); `InvalidData` when the
/// source is not an IP address.
pub(crate) fn recv(sock: &UdpSocket, buf: &mut [u8]) -> io::Result<(usize, SocketAddr, u8)> {
    // Room for one IP_TOS or IPV6_TCLASS message (an `int` at most) and a spare.
    let mut space = nix_cmsg::cmsg_space!(i32, i32);
    let mut iov = [IoSliceMut::new(buf)];
    let msg = recvmsg::<SockaddrStorage>(
        std::os::fd::AsRawFd::as_raw_fd(sock),
        &mut iov,
        Some(&mut space),
        MsgFlags::empty(),
    )?;
    let mut ecn = 0u8;
    for c in msg.cmsgs()? {
        match c {
            ControlMessageOwned::Ipv4Tos(tos) => ecn = tos & 0b11,
            ControlMessageOwned::Ipv6TClass(tc) => ecn = (tc & 0b11) as u8,
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
    Ok((msg.bytes, src, ecn))
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
        enable(&rx, false).unwrap();
        let tx = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::DGRAM, None).unwrap();
        tx.bind(&"127.0.0.1:0".parse::<SocketAddr>().unwrap().into())
            .unwrap();
        let from = tx.local_addr().unwrap().as_socket().unwrap();
        let mut buf = [0u8; 64];
        for tos in [0x00u32, 0x02, 0x01, 0x03, 0xb8 | 0x02] {
            tx.set_tos(tos).unwrap();
            tx.send_to(b"roce", &rx.local_addr().unwrap().into())
                .unwrap();
            let (n, src, ecn) = recv(&rx, &mut buf).unwrap();
            assert_eq!((&buf[..n], src, ecn), (&b"roce"[..], from, (tos & 3) as u8));
        }
    }
}
