//! The reference a loopback benchmark is compared against in the same run: plain UDP between
//! two sockets on 127.0.0.1, shaped like the RDMA test (same sizes and message counts,
//! messages cut into 4096-byte datagrams, the RC window of 128 datagrams in flight and an
//! acknowledgement every 64; ping-pong for `--lat`). It has no headers to build, no ICRC and
//! no registered memory, so it bounds what the soft provider can reach on this machine.

use std::net::{Ipv4Addr, UdpSocket};
use std::time::{Duration, Instant};

use crate::bench::run::{BenchOptions, SizeResult};
use crate::bench::stats::{self, BwResult, LatResult};
use crate::error::{Error, Result};

const DATAGRAM: usize = 4096;
const WINDOW: u64 = 128;
const ACK_EVERY: u64 = 64;

fn pair() -> Result<(UdpSocket, UdpSocket)> {
    let io = |e| Error::io("plain-UDP reference: loopback sockets", e);
    let a = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).map_err(io)?;
    let b = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).map_err(io)?;
    a.connect(b.local_addr().map_err(io)?).map_err(io)?;
    b.connect(a.local_addr().map_err(io)?).map_err(io)?;
    let _ = socket2::SockRef::from(&a).set_recv_buffer_size(16 << 20);
    let _ = socket2::SockRef::from(&b).set_recv_buffer_size(16 << 20);
    a.set_read_timeout(Some(Duration::from_secs(5)))
        .map_err(io)?;
    b.set_read_timeout(Some(Duration::from_secs(5)))
        .map_err(io)?;
    Ok((a, b))
}

/// Plain-UDP bandwidth for `size`-byte messages: returns each message's send and
/// acknowledgement times. Like the RC window: at most 128 datagrams unacknowledged, the
/// receiver acknowledges (cumulative datagram count) every 64 datagrams and at each message end.
pub fn udp_bw(size: u64, iters: u64) -> Result<(Vec<Duration>, Vec<Duration>)> {
    let (tx, rx) = pair()?;
    let per_msg = size.max(1).div_ceil(DATAGRAM as u64);
    let total = per_msg * iters;
    let receiver = std::thread::spawn(move || -> std::io::Result<()> {
        let mut buf = vec![0u8; 65536];
        for n in 1..=total {
            rx.recv(&mut buf)?;
            if n % ACK_EVERY == 0 || n % per_msg == 0 {
                rx.send(&n.to_le_bytes())?;
            }
        }
        Ok(())
    });
    let data = vec![0x5au8; size.clamp(1, DATAGRAM as u64) as usize];
    let mut sent_at = Vec::with_capacity(iters as usize);
    let mut acked_at = Vec::with_capacity(iters as usize);
    let mut ack = [0u8; 8];
    let start = Instant::now();
    let (mut sent, mut acked) = (0u64, 0u64);
    let io = |e| Error::io("plain-UDP reference", e);
    while acked < total {
        while sent < total && sent - acked < WINDOW {
            let last = (sent + 1) % per_msg == 0;
            let n = if last {
                (size.max(1) - (per_msg - 1) * DATAGRAM as u64) as usize
            } else {
                DATAGRAM
            };
            tx.send(&data[..n.min(data.len())]).map_err(io)?;
            if sent % per_msg == 0 {
                sent_at.push(start.elapsed());
            }
            sent += 1;
        }
        tx.recv(&mut ack).map_err(|e| {
            Error::io(
                "plain-UDP reference (a datagram was lost on loopback; rerun)",
                e,
            )
        })?;
        acked = acked.max(u64::from_le_bytes(ack));
        while (acked_at.len() as u64) < acked / per_msg {
            acked_at.push(start.elapsed());
        }
    }
    receiver
        .join()
        .map_err(|_| Error::Bench("UDP reference receiver panicked".into()))?
        .map_err(io)?;
    Ok((sent_at, acked_at))
}

/// Plain-UDP ping-pong latency samples (µs, half the round trip) for `size`-byte messages.
pub fn udp_lat(size: u64, iters: u64) -> Result<Vec<f64>> {
    let (a, b) = pair()?;
    let size = size.clamp(1, 65507) as usize;
    let echo = std::thread::spawn(move || -> std::io::Result<()> {
        let mut buf = vec![0u8; 65536];
        for _ in 0..iters {
            let n = b.recv(&mut buf)?;
            b.send(&buf[..n])?;
        }
        Ok(())
    });
    let data = vec![0x5au8; size];
    let mut buf = vec![0u8; 65536];
    let mut samples = Vec::with_capacity(iters as usize);
    let io = |e| Error::io("plain-UDP reference", e);
    for _ in 0..iters {
        let t = Instant::now();
        a.send(&data).map_err(io)?;
        a.recv(&mut buf).map_err(io)?;
        samples.push(t.elapsed().as_secs_f64() * 1e6 / 2.0);
    }
    echo.join()
        .map_err(|_| Error::Bench("UDP reference echo panicked".into()))?
        .map_err(io)?;
    Ok(samples)
}

/// Runs the plain-UDP reference for every size of `opts`, prints its table and the ratio of
/// each rdmesh result (`ours`, same order as `opts.sizes`) to it.
pub fn compare(opts: &BenchOptions, ours: &[SizeResult]) -> Result<()> {
    println!(" Reference: plain UDP on 127.0.0.1, same sizes and message counts");
    println!(
        "{}",
        if opts.lat {
            stats::lat_header()
        } else {
            stats::bw_header(opts.report_gbits)
        }
    );
    let iters = opts.iters.max(1);
    let mut ratios = Vec::new();
    for (&size, mine) in opts.sizes.iter().zip(ours) {
        match mine {
            SizeResult::Lat(m) => {
                let mut s = udp_lat(size, iters)?;
                let r = LatResult::from_samples(size, &mut s);
                println!("{}", stats::lat_row(&r));
                ratios.push(format!(
                    " {size:<10} rdmesh/UDP median latency {:.2}x ({:.2} vs {:.2} usec)",
                    m.typical / r.typical,
                    m.typical,
                    r.typical
                ));
            }
            SizeResult::Bw(m) => {
                let (sent, acked) = udp_bw(size, iters)?;
                let r = BwResult::from_times(size, &sent, &acked);
                println!("{}", stats::bw_row(&r, opts.report_gbits));
                ratios.push(format!(
                    " {size:<10} rdmesh/UDP average bandwidth {:.2} ({:.2} vs {:.2} MB/sec)",
                    m.avg_bps / r.avg_bps,
                    m.avg_bps / 1_048_576.0,
                    r.avg_bps / 1_048_576.0
                ));
            }
        }
    }
    println!("{}", stats::RULE);
    for r in ratios {
        println!("{r}");
    }
    Ok(())
}
