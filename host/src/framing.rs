//! Framed, versioned, timed messages over TCP: the out-of-band channels of `rdmesh bench`
//! ([`crate::bench::oob`]) and of the mesh handshake ([`crate::mesh`]).
//!
//! Every message is `magic` (4 bytes) · version u16 · type u16 · length u32 · payload, all
//! big-endian. The receiver checks the magic (a wrong one means the port belongs to something
//! else), the version (both ends must speak the same one), bounds the length before reading
//! the payload, and checks the type it expects. Every read and write times out; errors name the
//! peer's address and say what to check.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use crate::error::{Error, Result};

/// Length of the frame header: magic, version, type, length.
pub const HEADER_LEN: usize = 12;

/// What identifies one protocol spoken over a [`FramedStream`].
#[derive(Debug)]
pub struct Protocol {
    /// The 4 magic bytes that open every message.
    pub magic: [u8; 4],
    /// The version both ends must speak.
    pub version: u16,
    /// The largest payload accepted, bytes.
    pub max_payload: u32,
    /// What a peer speaking it is, for errors: "an rdmesh bench" gives "the peer is not an
    /// rdmesh bench (bad magic)".
    pub name: &'static str,
}

/// A connected TCP stream carrying one [`Protocol`]'s messages.
#[derive(Debug)]
pub struct FramedStream {
    stream: TcpStream,
    peer: String,
    protocol: &'static Protocol,
}

impl FramedStream {
    /// Wraps a connected stream; every read and write times out after `timeout`.
    ///
    /// Errors: [`Error::Io`] when the socket options cannot be set.
    pub fn new(
        stream: TcpStream,
        timeout: Duration,
        protocol: &'static Protocol,
    ) -> Result<FramedStream> {
        let peer = stream
            .peer_addr()
            .map(|a| a.to_string())
            .unwrap_or_else(|_| "?".into());
        let s = FramedStream {
            stream,
            peer,
            protocol,
        };
        s.set_timeout(timeout)?;
        s.stream
            .set_nodelay(true)
            .map_err(|e| Error::io(format!("configuring the TCP socket to {}", s.peer), e))?;
        Ok(s)
    }

    /// Changes the read and write timeout (a zero duration is raised to 1 ms).
    ///
    /// Errors: [`Error::Io`] when the socket options cannot be set.
    pub fn set_timeout(&self, timeout: Duration) -> Result<()> {
        let t = Some(timeout.max(Duration::from_millis(1)));
        let io = |e| Error::io(format!("configuring the TCP socket to {}", self.peer), e);
        self.stream.set_read_timeout(t).map_err(io)?;
        self.stream.set_write_timeout(t).map_err(io)
    }

    /// The peer's address (`ip:port`).
    pub fn peer(&self) -> &str {
        &self.peer
    }

    /// An [`Error::Exchange`] naming the peer.
    pub fn err(&self, reason: impl Into<String>) -> Error {
        Error::Exchange {
            peer: self.peer.clone(),
            reason: reason.into(),
        }
    }

    /// Sends one message of type `ty`.
    ///
    /// Errors: [`Error::Exchange`] when the payload exceeds the protocol's bound or the write
    /// fails or times out.
    pub fn send(&mut self, ty: u16, payload: &[u8]) -> Result<()> {
        if payload.len() > self.protocol.max_payload as usize {
            return Err(self.err(format!(
                "message type {ty} of {} bytes exceeds {} (a bug: report it)",
                payload.len(),
                self.protocol.max_payload
            )));
        }
        let mut m = Vec::with_capacity(HEADER_LEN + payload.len());
        m.extend_from_slice(&self.protocol.magic);
        m.extend_from_slice(&self.protocol.version.to_be_bytes());
        m.extend_from_slice(&ty.to_be_bytes());
        m.extend_from_slice(&(payload.len() as u32).to_be_bytes());
        m.extend_from_slice(payload);
        self.stream
            .write_all(&m)
            .map_err(|e| self.err(format!("sending message type {ty}: {e}")))
    }

    /// Receives the next message, whatever its type: `(type, payload)`. `want` only words the
    /// errors ("timed out waiting for message type 2").
    ///
    /// Errors: [`Error::Exchange`] on a bad magic, another version, a length over the bound,
    /// a timeout, or the peer closing the connection.
    pub fn recv_any(&mut self, want: u16) -> Result<(u16, Vec<u8>)> {
        let mut h = [0u8; HEADER_LEN];
        self.stream
            .read_exact(&mut h)
            .map_err(|e| self.read_err(e, want))?;
        if h[..4] != self.protocol.magic {
            return Err(self.err(format!(
                "the peer is not {} (bad magic); is the port right?",
                self.protocol.name
            )));
        }
        let version = u16::from_be_bytes([h[4], h[5]]);
        if version != self.protocol.version {
            return Err(self.err(format!(
                "peer speaks exchange version {version}, this rdmesh speaks {}; use the same rdmesh version on both ends",
                self.protocol.version
            )));
        }
        let ty = u16::from_be_bytes([h[6], h[7]]);
        let len = u32::from_be_bytes([h[8], h[9], h[10], h[11]]);
        if len > self.protocol.max_payload {
            return Err(self.err(format!(
                "message length {len} exceeds {}",
                self.protocol.max_payload
            )));
        }
        let mut p = vec![0u8; len as usize];
        self.stream
            .read_exact(&mut p)
            .map_err(|e| self.read_err(e, want))?;
        Ok((ty, p))
    }

    /// Receives the next message and checks that its type is `want`.
    ///
    /// Errors: those of [`FramedStream::recv_any`], and [`Error::Exchange`] for another type.
    pub fn recv(&mut self, want: u16) -> Result<Vec<u8>> {
        let (ty, p) = self.recv_any(want)?;
        if ty != want {
            return Err(self.err(format!(
                "expected message type {want}, got {ty} (the two ends run different tests?)"
            )));
        }
        Ok(p)
    }

    fn read_err(&self, e: std::io::Error, want: u16) -> Error {
        match e.kind() {
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => self.err(format!(
                "timed out waiting for message type {want}; is the peer still running?"
            )),
            std::io::ErrorKind::UnexpectedEof => self.err(format!(
                "peer closed the connection before message type {want} (see the peer's error)"
            )),
            _ => self.err(format!("reading message type {want}: {e}")),
        }
    }
}

#[cfg(test)]
mod test {
    use super::*;
    use std::net::TcpListener;

    static P: Protocol = Protocol {
        magic: *b"TST1",
        version: 3,
        max_payload: 64,
        name: "a test peer",
    };
    static OTHER: Protocol = Protocol {
        magic: *b"TST1",
        version: 4,
        max_payload: 64,
        name: "a test peer",
    };

    fn pair(server: &'static Protocol) -> (FramedStream, FramedStream) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (s, _) = l.accept().unwrap();
        (
            FramedStream::new(c, Duration::from_millis(300), &P).unwrap(),
            FramedStream::new(s, Duration::from_millis(300), server).unwrap(),
        )
    }

    #[test]
    fn roundtrip_and_type_check() {
        let (mut a, mut b) = pair(&P);
        a.send(7, b"hello").unwrap();
        assert_eq!(b.recv_any(7).unwrap(), (7, b"hello".to_vec()));
        a.send(8, b"").unwrap();
        let e = b.recv(7).unwrap_err().to_string();
        assert!(e.contains("expected message type 7, got 8"), "{e}");
        let e = a.send(1, &[0u8; 65]).unwrap_err().to_string();
        assert!(e.contains("65 bytes exceeds 64"), "{e}");
    }

    #[test]
    fn version_magic_length_and_timeout() {
        let (mut a, mut b) = pair(&OTHER);
        a.send(1, b"x").unwrap();
        let e = b.recv(1).unwrap_err().to_string();
        assert!(e.contains("version 3") && e.contains("speaks 4"), "{e}");
        let (a, mut b) = pair(&P);
        let mut raw = a.stream.try_clone().unwrap();
        raw.write_all(b"NOPE\0\x03\0\x01\0\0\0\0").unwrap();
        let e = b.recv(1).unwrap_err().to_string();
        assert!(e.contains("not a test peer (bad magic)"), "{e}");
        let (a, mut b) = pair(&P);
        let mut raw = a.stream.try_clone().unwrap();
        raw.write_all(b"TST1\0\x03\0\x01\0\0\x10\0").unwrap();
        let e = b.recv(1).unwrap_err().to_string();
        assert!(e.contains("length 4096 exceeds 64"), "{e}");
        let (_a, mut b) = pair(&P);
        let e = b.recv(9).unwrap_err().to_string();
        assert!(
            e.contains("timed out waiting for message type 9") && e.contains("127.0.0.1"),
            "{e}"
        );
    }
}
