//! Counter snapshots of open soft devices, for `rdmesh stats` (like `rdma statistic show`).
//!
//! While a soft device is open, its progress thread writes a JSON snapshot of the device's and
//! each QP's counters to `<stats dir>/<pid>-<port>-<device>.json` every [`PUBLISH_INTERVAL`]
//! (written to a temporary name, then renamed, so readers never see half a file); the file is
//! removed when the device closes. A process killed with SIGKILL leaves its file behind: readers
//! skip (and delete) files whose process no longer exists ([`read_all`]).
//!
//! The stats directory is `$RDMESH_STATS_DIR`, else `$XDG_RUNTIME_DIR/rdmesh`, else
//! `/tmp/rdmesh-stats-<uid>`. `RDMESH_STATS=0` turns publishing off.
//!
//! # Snapshot format (one JSON object per file)
//! ```text
//! { "version": 1, "pid": u32, "process": "rdmesh", "unix_ms": u64,
//!   "device": "soft-lo", "netdev": "lo", "local": "127.0.0.1:4791",
//!   "counters": { DeviceCounters fields, "impair": { ImpairCounters fields } },
//!   "qps": [ { "qpn": u32, "state": "RTS", "remote": "ip:port" | null,
//!              "remote_qpn": u32 | null, "recovery": "go-back-n" | "selective",
//!              "counters": { RcCounters fields, "naks_sent": {...}, "naks_received": {...} } } ] }
//! ```
//! Counter names are the struct field names (as in `rdmesh bench --counters`); bytes are
//! payload bytes, rates Mb/s. Soft snapshots carry `"provider": "soft"`.
//!
//! Devices of the vfio provider and the device model publish the device's own counters
//! instead (`crate::vfio_provider`), under the Linux names:
//! ```text
//! { "version": 1, "provider": "vfio" | "model", "pid", "process", "unix_ms",
//!   "device": "mlx5_vfio_0000:01:00.0", "netdev": "0000:01:00.0", "local": "ip:port",
//!   "counters": { "tx_packets", "tx_bytes", "rx_packets", "rx_bytes", "rx_errors",
//!                 "rp_cnp_handled", "rp_cnp_ignored", "np_ecn_marked_roce_packets",
//!                 "np_cnp_sent" },
//!   "qps": [ { "qpn", "state", "remote", "remote_qpn", "counter_set",
//!              "counters": { QUERY_Q_COUNTER names: "rx_write_requests", ... } } ] }
//! ```

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rdmesh_core::rc::{NakCounters, RcCounters};
use serde_json::{json, Value};

use crate::soft::DeviceCounters;

/// How often an open device rewrites its snapshot.
pub const PUBLISH_INTERVAL: Duration = Duration::from_millis(500);

/// Snapshot format version (the `version` key).
pub const FORMAT_VERSION: u64 = 1;

/// The directory snapshots are published in (see the module documentation).
pub fn stats_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("RDMESH_STATS_DIR").filter(|d| !d.is_empty()) {
        return PathBuf::from(d);
    }
    if let Some(d) = std::env::var_os("XDG_RUNTIME_DIR").filter(|d| !d.is_empty()) {
        return PathBuf::from(d).join("rdmesh");
    }
    // The real uid is the owner of /proc/self.
    use std::os::unix::fs::MetadataExt;
    let uid = std::fs::metadata("/proc/self").map_or(0, |m| m.uid());
    PathBuf::from(format!("/tmp/rdmesh-stats-{uid}"))
}

/// `false` when `RDMESH_STATS=0` turned publishing off.
pub fn publishing_enabled() -> bool {
    std::env::var("RDMESH_STATS").map_or(true, |v| v != "0")
}

/// One QP's part of a snapshot.
#[derive(Debug, Clone)]
pub(crate) struct QpSnapshot {
    pub(crate) qpn: u32,
    pub(crate) state: &'static str,
    pub(crate) remote: Option<std::net::SocketAddr>,
    pub(crate) remote_qpn: Option<u32>,
    pub(crate) recovery: &'static str,
    pub(crate) counters: RcCounters,
}

fn naks(n: &NakCounters) -> Value {
    json!({
        "psn_sequence": n.psn_sequence,
        "rnr": n.rnr,
        "invalid_request": n.invalid_request,
        "remote_access": n.remote_access,
        "remote_operational": n.remote_operational,
    })
}

/// The JSON of one QP's counters (field names of [`RcCounters`]).
pub fn qp_counters_json(c: &RcCounters) -> Value {
    json!({
        "tx_packets": c.tx_packets,
        "tx_payload_bytes": c.tx_payload_bytes,
        "rx_packets": c.rx_packets,
        "rx_payload_bytes": c.rx_payload_bytes,
        "retransmitted_packets": c.retransmitted_packets,
        "timeouts": c.timeouts,
        "retries": c.retries,
        "implied_naks": c.implied_naks,
        "acks_sent": c.acks_sent,
        "acks_received": c.acks_received,
        "naks_sent": naks(&c.naks_sent),
        "naks_received": naks(&c.naks_received),
        "duplicate_requests": c.duplicate_requests,
        "out_of_sequence_requests": c.out_of_sequence_requests,
        "ghost_responses": c.ghost_responses,
        "dropped_packets": c.dropped_packets,
        "out_of_order_placed": c.out_of_order_placed,
        "sacks_sent": c.sacks_sent,
        "sacks_received": c.sacks_received,
        "fast_retransmits": c.fast_retransmits,
        "credit_waits": c.credit_waits,
        "duplicates_dropped": c.duplicates_dropped,
        "ce_marks_received": c.ce_marks_received,
        "cnps_sent": c.cnps_sent,
        "cnps_received": c.cnps_received,
        "rate_decreases": c.rate_decreases,
        "current_rate_mbps": c.current_rate_mbps,
        "lowest_rate_mbps": c.lowest_rate_mbps,
    })
}

/// The JSON of a device's counters (field names of [`DeviceCounters`]).
pub fn device_counters_json(d: &DeviceCounters) -> Value {
    json!({
        "tx_packets": d.tx_packets,
        "rx_packets": d.rx_packets,
        "icrc_errors": d.icrc_errors,
        "malformed": d.malformed,
        "unknown_qp": d.unknown_qp,
        "wrong_source": d.wrong_source,
        "cnp_received": d.cnp_received,
        "tx_errors": d.tx_errors,
        "tx_icrc_corrupted": d.tx_icrc_corrupted,
        "acks_coalesced": d.acks_coalesced,
        "rx_placed": d.rx_placed,
        "rx_peeks": d.rx_peeks,
        "progress_rounds": d.progress_rounds,
        "impair": {
            "dropped": d.impair.dropped,
            "duplicated": d.impair.duplicated,
            "reordered": d.impair.reordered,
            "corrupted": d.impair.corrupted,
            "delayed": d.impair.delayed,
            "ce_marked": d.impair.ce_marked,
        },
    })
}

/// Where one device publishes: the file path, fixed at open.
#[derive(Debug)]
pub(crate) struct Publisher {
    path: PathBuf,
}

impl Publisher {
    /// The publisher of the device `name` bound to UDP `port` in this process; `None` when
    /// publishing is off or the directory cannot be made (a warning says why).
    pub(crate) fn new(name: &str, port: u16) -> Option<Publisher> {
        if !publishing_enabled() {
            return None;
        }
        let dir = stats_dir();
        if let Err(e) = std::fs::create_dir_all(&dir) {
            tracing::warn!(dir = %dir.display(), error = %e, "cannot create the stats directory; `rdmesh stats` will not see this device (set RDMESH_STATS_DIR)");
            return None;
        }
        let safe: String = name
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.' {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        Some(Publisher {
            path: dir.join(format!("{}-{port}-{safe}.json", std::process::id())),
        })
    }

    /// Writes a snapshot (temporary file, then rename). Errors are logged at debug level
    /// only: statistics never disturb the data path.
    pub(crate) fn publish(
        &self,
        device: &str,
        netdev: &str,
        local: std::net::SocketAddr,
        counters: &DeviceCounters,
        qps: &[QpSnapshot],
    ) {
        let unix_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        let qps: Vec<Value> = qps
            .iter()
            .map(|q| {
                json!({
                    "qpn": q.qpn,
                    "state": q.state,
                    "remote": q.remote.map(|r| r.to_string()),
                    "remote_qpn": q.remote_qpn,
                    "recovery": q.recovery,
                    "counters": qp_counters_json(&q.counters),
                })
            })
            .collect();
        let v = json!({
            "version": FORMAT_VERSION,
            "provider": "soft",
            "pid": std::process::id(),
            "process": process_name(std::process::id()),
            "unix_ms": unix_ms,
            "device": device,
            "netdev": netdev,
            "local": local.to_string(),
            "counters": device_counters_json(counters),
            "qps": qps,
        });
        self.write_value(&v);
    }

    /// Writes `v` as the snapshot (temporary file, then rename).
    pub(crate) fn write_value(&self, v: &Value) {
        let tmp = self.path.with_extension("json.tmp");
        let r =
            std::fs::write(&tmp, v.to_string()).and_then(|()| std::fs::rename(&tmp, &self.path));
        if let Err(e) = r {
            tracing::debug!(path = %self.path.display(), error = %e, "cannot publish counters");
        }
    }

    /// Removes the snapshot (device closed).
    pub(crate) fn remove(&self) {
        let _ = std::fs::remove_file(&self.path);
        let _ = std::fs::remove_file(self.path.with_extension("json.tmp"));
    }
}

/// The command name of process `pid` (`/proc/<pid>/comm`), or `""`.
pub(crate) fn process_name(pid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

/// `true` when process `pid` exists.
fn alive(pid: u64) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

/// Reads every snapshot in `dir`, ordered by pid then device name. Files of processes that no
/// longer exist (killed before they could remove them) are deleted and skipped; unreadable or
/// half-written files are skipped.
///
/// Errors: the directory cannot be listed (a missing directory yields no snapshots).
pub fn read_all(dir: &Path) -> std::io::Result<Vec<Value>> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut out = Vec::new();
    for entry in entries.flatten() {
        let path = entry.path();
        if path.extension().and_then(|e| e.to_str()) != Some("json") {
            continue;
        }
        let Ok(text) = std::fs::read_to_string(&path) else {
            continue;
        };
        let Ok(v) = serde_json::from_str::<Value>(&text) else {
            continue;
        };
        match v["pid"].as_u64() {
            Some(pid) if alive(pid) => out.push(v),
            Some(_) => {
                let _ = std::fs::remove_file(&path);
            }
            None => {}
        }
    }
    out.sort_by(|a, b| {
        (a["pid"].as_u64(), a["device"].as_str(), a["local"].as_str()).cmp(&(
            b["pid"].as_u64(),
            b["device"].as_str(),
            b["local"].as_str(),
        ))
    });
    Ok(out)
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn publish_read_remove_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let p = Publisher {
            path: dir
                .path()
                .join(format!("{}-4791-soft-x.json", std::process::id())),
        };
        let mut c = RcCounters {
            tx_packets: 7,
            cnps_sent: 2,
            ..Default::default()
        };
        c.naks_received.rnr = 3;
        let d = DeviceCounters {
            icrc_errors: 5,
            ..Default::default()
        };
        let q = QpSnapshot {
            qpn: 0x11,
            state: "RTS",
            remote: Some("127.0.0.2:4791".parse().unwrap()),
            remote_qpn: Some(0x12),
            recovery: "selective",
            counters: c,
        };
        p.publish("soft-x", "lo", "127.0.0.1:4791".parse().unwrap(), &d, &[q]);
        // A dead process's file is removed by the reader.
        let stale = dir.path().join("4194304-1-soft-y.json");
        std::fs::write(&stale, r#"{"pid": 4194304}"#).unwrap();
        let all = read_all(dir.path()).unwrap();
        assert_eq!(all.len(), 1);
        assert!(!stale.exists());
        let v = &all[0];
        assert_eq!(v["pid"].as_u64(), Some(u64::from(std::process::id())));
        assert_eq!(v["counters"]["icrc_errors"], 5);
        assert_eq!(v["qps"][0]["qpn"], 0x11);
        assert_eq!(v["qps"][0]["counters"]["tx_packets"], 7);
        assert_eq!(v["qps"][0]["counters"]["naks_received"]["rnr"], 3);
        assert_eq!(v["qps"][0]["remote"], "127.0.0.2:4791");
        p.remove();
        assert!(read_all(dir.path()).unwrap().is_empty());
    }
}
