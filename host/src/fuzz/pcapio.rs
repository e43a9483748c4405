//! Reading and writing the pcap files `rdmesh fuzz` exchanges with targets: link type
//! Ethernet, little-endian, microsecond timestamps (frame `i` at `i` µs, so files are byte-for-byte
//! reproducible).

use std::path::Path;
use std::time::Duration;

use pcap_file::pcap::{PcapHeader, PcapPacket, PcapReader, PcapWriter};
use pcap_file::DataLink;

use crate::error::{Error, Result};

fn err(path: &Path, reason: impl std::fmt::Display) -> Error {
    Error::Pcap {
        path: path.display().to_string(),
        reason: reason.to_string(),
    }
}

/// Writes `frames` to `path` (created or truncated).
///
/// Errors: [`Error::Pcap`] naming the path.
pub fn write(path: &Path, frames: &[Vec<u8>]) -> Result<()> {
    let file = std::fs::File::create(path).map_err(|e| err(path, e))?;
    let header = PcapHeader {
        datalink: DataLink::ETHERNET,
        // Little-endian, as tcpdump writes on x86 (pcap_file's default is big-endian).
        endianness: pcap_file::Endianness::Little,
        ..Default::default()
    };
    let mut w =
        PcapWriter::with_header(std::io::BufWriter::new(file), header).map_err(|e| err(path, e))?;
    for (i, f) in frames.iter().enumerate() {
        let pkt = PcapPacket::new(Duration::from_micros(i as u64), f.len() as u32, f);
        w.write_packet(&pkt).map_err(|e| err(path, e))?;
    }
    let mut inner = w.into_writer();
    std::io::Write::flush(&mut inner).map_err(|e| err(path, e))?;
    Ok(())
}

/// Reads every frame of the Ethernet pcap at `path`.
///
/// Errors: [`Error::Pcap`] when it cannot be read or is not Ethernet.
pub fn read(path: &Path) -> Result<Vec<Vec<u8>>> {
    let file = std::fs::File::open(path).map_err(|e| err(path, e))?;
    let mut r = PcapReader::new(file).map_err(|e| err(path, format!("not a pcap file: {e}")))?;
    if r.header().datalink != DataLink::ETHERNET {
        return Err(err(path, "link type is not Ethernet"));
    }
    let mut out = Vec::new();
    while let Some(p) = r.next_packet() {
        out.push(p.map_err(|e| err(path, e))?.data.into_owned());
    }
    Ok(out)
}
