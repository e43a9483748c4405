//! `rdmesh stats` for the vfio provider and the device model: while a device is open, a
//! thread publishes the device's own counters every [`PUBLISH_INTERVAL`] — the port's
//! (QUERY_VPORT_COUNTER, QUERY_CONG_STATISTICS) and each QP's Q counter set
//! (QUERY_Q_COUNTER) — in the stats directory of [`crate::soft::stats`] (format in its module
//! docs). The file goes when the device closes.
//!
//! The thread holds no device object: it reads through the driver's
//! [`CounterReader`](rdmesh_vfio::mlx5::CounterReader) and [`QpStat`] records, so the
//! device is always torn down by its last user handle, which stops and joins the thread.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rdmesh_vfio::mlx5::CounterReader;
use serde_json::{json, Map, Value};

use crate::soft::stats::{Publisher, FORMAT_VERSION, PUBLISH_INTERVAL};
use crate::verbs::QpState;

/// What `rdmesh stats` shows of one QP, kept current by the QP.
#[derive(Debug)]
pub(crate) struct QpStat {
    pub(crate) qpn: u32,
    pub(crate) counter_set: Option<u8>,
    /// State and peer (UDP address, QPN).
    pub(crate) now: Mutex<(QpState, Option<(SocketAddr, u32)>)>,
}

/// The QPs of a device, as the publisher sees them.
pub(crate) type QpStats = Arc<Mutex<Vec<Weak<QpStat>>>>;

/// What the publisher needs of a device.
#[derive(Debug, Clone)]
pub(crate) struct Source {
    pub(crate) provider: &'static str,
    pub(crate) device: String,
    pub(crate) netdev: String,
    pub(crate) local: SocketAddr,
    pub(crate) port: u8,
    pub(crate) reader: CounterReader,
    pub(crate) qps: QpStats,
    pub(crate) link: Option<Arc<super::udp_port::PortCounters>>,
}

fn named(list: &[(&'static str, u64)]) -> Value {
    let mut m = Map::new();
    for (k, v) in list {
        m.insert((*k).to_string(), json!(v));
    }
    Value::Object(m)
}

/// The snapshot now (commands run on the device; a failed query leaves its part empty).
pub(crate) fn snapshot(src: &Source) -> Value {
    let port = src
        .reader
        .port_counters(src.port)
        .map(|p| named(&p.named()))
        .unwrap_or_else(|_| json!({}));
    let live: Vec<Arc<QpStat>> = src
        .qps
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .iter()
        .filter_map(Weak::upgrade)
        .collect();
    let qps: Vec<Value> = live
        .iter()
        .map(|q| {
            let counters = q
                .counter_set
                .and_then(|id| src.reader.query_q_counter(id).ok())
                .map(|c| named(&rdmesh_vfio::mlx5::q_counters_named(&c)))
                .unwrap_or_else(|| json!({}));
            let (state, remote) = *q.now.lock().unwrap_or_else(|p| p.into_inner());
            json!({
                "qpn": q.qpn,
                "state": format!("{state:?}").to_uppercase(),
                "remote": remote.map(|(a, _)| a.to_string()),
                "remote_qpn": remote.map(|(_, n)| n),
                "counter_set": q.counter_set,
                "counters": counters,
            })
        })
        .collect();
    let link = match &src.link {
        Some(c) => {
            let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
            json!({
                "tx_datagrams": l(&c.tx_datagrams),
                "rx_datagrams": l(&c.rx_datagrams),
                "icrc_errors": l(&c.icrc_errors),
                "malformed": l(&c.malformed),
                "tx_errors": l(&c.tx_errors),
            })
        }
        None => Value::Null,
    };
    let unix_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    json!({
        "version": FORMAT_VERSION,
        "provider": src.provider,
        "pid": std::process::id(),
        "process": crate::soft::stats::process_name(std::process::id()),
        "unix_ms": unix_ms,
        "device": src.device,
        "netdev": src.netdev,
        "local": src.local.to_string(),
        "counters": port,
        "link": link,
        "qps": qps,
    })
}

/// The publishing thread of one device; stopped (and the file removed) on drop.
#[derive(Debug)]
pub(crate) struct StatsThread {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl StatsThread {
    /// Starts publishing `src`; `None` when publishing is off or the directory is unusable.
    pub(crate) fn start(src: Source) -> Option<StatsThread> {
        let publisher = Publisher::new(&src.device, src.local.port())?;
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let thread = std::thread::Builder::new()
            .name("rdmesh-vfio-stats".into())
            .spawn(move || {
                while !s.load(Ordering::Relaxed) {
                    let v = snapshot(&src);
                    if s.load(Ordering::Relaxed) {
                        break;
                    }
                    publisher.write_value(&v);
                    let mut slept = Duration::ZERO;
                    while slept < PUBLISH_INTERVAL && !s.load(Ordering::Relaxed) {
                        std::thread::sleep(Duration::from_millis(20));
                        slept += Duration::from_millis(20);
                    }
                }
                publisher.remove();
            })
            .ok()?;
        Some(StatsThread {
            stop,
            thread: Some(thread),
        })
    }
}

impl Drop for StatsThread {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
