//! `rdmesh stats` for the vfio provider and the device model: while a device is open, a
//! thread publishes the device's own counters every [`PUBLISH_INTERVAL`] — the port's
//! (QUERY_VPORT_COUNTER, QUERY_CONG_STATISTICS) and each QP's Q counter set
//! (QUERY_Q_COUNTER) — in the stats directory of [`crate::soft::stats`] (format in its module
//! docs). The file goes when the device closes.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::{json, Map, Value};

use super::VfioDevice;
use crate::soft::stats::{Publisher, FORMAT_VERSION, PUBLISH_INTERVAL};

fn named(list: &[(&'static str, u64)]) -> Value {
    let mut m = Map::new();
    for (k, v) in list {
        m.insert((*k).to_string(), json!(v));
    }
    Value::Object(m)
}

/// The snapshot of `dev` now (commands run on the device; a failed query leaves its part
/// empty).
pub(crate) fn snapshot(dev: &VfioDevice) -> Value {
    let port = dev
        .hca
        .port_counters(dev.port)
        .map(|p| named(&p.named()))
        .unwrap_or_else(|_| json!({}));
    let qps: Vec<Value> = dev
        .live_qps()
        .iter()
        .map(|q| {
            let counters =
                q.qp.counters()
                    .map(|c| named(&rdmesh_vfio::mlx5::q_counters_named(&c)))
                    .unwrap_or_else(|_| json!({}));
            let remote = q.remote();
            json!({
                "qpn": q.qp.qpn(),
                "state": format!("{:?}", q.state()).to_uppercase(),
                "remote": remote.map(|(a, _)| a.to_string()),
                "remote_qpn": remote.map(|(_, n)| n),
                "counter_set": q.qp.counter_set(),
                "counters": counters,
            })
        })
        .collect();
    // The model's link (its UDP socket): datagrams each way and what it dropped.
    let link = match &dev.model {
        Some((_, Some(p))) => {
            let c = p.counters();
            let l = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
            json!({
                "tx_datagrams": l(&c.tx_datagrams),
                "rx_datagrams": l(&c.rx_datagrams),
                "icrc_errors": l(&c.icrc_errors),
                "malformed": l(&c.malformed),
                "tx_errors": l(&c.tx_errors),
            })
        }
        _ => Value::Null,
    };
    let unix_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    json!({
        "version": FORMAT_VERSION,
        "provider": dev.info.provider,
        "pid": std::process::id(),
        "process": crate::soft::stats::process_name(std::process::id()),
        "unix_ms": unix_ms,
        "device": dev.info.name,
        "netdev": dev.info.netdev,
        "local": dev.local_addr().to_string(),
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
    /// Starts publishing `dev`; `None` when publishing is off or the directory is unusable.
    pub(crate) fn start(dev: &Arc<VfioDevice>) -> Option<StatsThread> {
        let publisher = Publisher::new(&dev.info.name, dev.local_addr().port())?;
        let stop = Arc::new(AtomicBool::new(false));
        let weak: Weak<VfioDevice> = Arc::downgrade(dev);
        let s = stop.clone();
        let thread = std::thread::Builder::new()
            .name("rdmesh-vfio-stats".into())
            .spawn(move || {
                while !s.load(Ordering::Relaxed) {
                    let v = match weak.upgrade() {
                        Some(d) => snapshot(&d),
                        None => break,
                    };
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
            // The thread itself may hold the last handle of the device for a moment (it
            // upgrades a weak reference): it must not join itself.
            if t.thread().id() != std::thread::current().id() {
                let _ = t.join();
            }
        }
    }
}
