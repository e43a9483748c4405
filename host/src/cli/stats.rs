//! `rdmesh stats`: the device and QP counters of running rdmesh processes, like
//! `rdma statistic show` — read from the snapshots soft devices publish (see
//! [`crate::soft::stats`]).
//!
//! Table output: one block per process and device (device counters on one line), then one row
//! per QP: packets and payload bytes each way, retransmitted packets, timeouts, NAKs sent and
//! received (all codes; per code below the row when any is non-zero), RNR NAKs (sent +
//! received), duplicate and out-of-sequence requests, CNPs sent and received, CE marks
//! received, current DCQCN rate in Mb/s (`-` when no rate limit applies). `--json` prints the
//! snapshots as one JSON array instead.

use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use serde_json::Value;

use crate::error::{Error, Result};
use crate::soft::stats;

/// `rdmesh stats` arguments.
#[derive(Debug, Args)]
pub struct StatsArgs {
    /// Print the snapshots as a JSON array (the format of `crate::soft::stats`).
    #[arg(long)]
    pub json: bool,
    /// Print again every SECS seconds until interrupted.
    #[arg(long, value_name = "SECS")]
    pub watch: Option<f64>,
    /// Stats directory (default: $RDMESH_STATS_DIR, $XDG_RUNTIME_DIR/rdmesh or /tmp/rdmesh-stats-UID).
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// Only processes with this pid.
    #[arg(long)]
    pub pid: Option<u32>,
}

fn n(v: &Value, k: &str) -> u64 {
    v[k].as_u64().unwrap_or(0)
}

fn nak_total(v: &Value) -> u64 {
    v.as_object()
        .map(|o| o.values().filter_map(Value::as_u64).sum())
        .unwrap_or(0)
}

/// Formats the snapshots as the `rdmesh stats` table.
pub fn table(snaps: &[Value]) -> String {
    use std::fmt::Write as _;
    let mut s = String::new();
    if snaps.is_empty() {
        s.push_str("no open rdmesh devices\n");
        return s;
    }
    for d in snaps {
        let c = &d["counters"];
        let _ = writeln!(
            s,
            "pid {} ({}) device {} netdev {} local {}",
            n(d, "pid"),
            d["process"].as_str().unwrap_or(""),
            d["device"].as_str().unwrap_or("?"),
            d["netdev"].as_str().unwrap_or("?"),
            d["local"].as_str().unwrap_or("?"),
        );
        let _ = writeln!(
            s,
            "  device tx_packets {} rx_packets {} icrc_errors {} malformed {} unknown_qp {} wrong_source {} cnp_received {} tx_errors {}",
            n(c, "tx_packets"),
            n(c, "rx_packets"),
            n(c, "icrc_errors"),
            n(c, "malformed"),
            n(c, "unknown_qp"),
            n(c, "wrong_source"),
            n(c, "cnp_received"),
            n(c, "tx_errors"),
        );
        let qps = d["qps"].as_array().map(Vec::as_slice).unwrap_or(&[]);
        if qps.is_empty() {
            let _ = writeln!(s, "  (no QPs)");
            continue;
        }
        let _ = writeln!(
            s,
            "  {:<8} {:<5} {:>10} {:>13} {:>10} {:>13} {:>8} {:>6} {:>6} {:>6} {:>5} {:>6} {:>7} {:>6} {:>6} {:>6} {:>9}",
            "QPN", "state", "tx_pkts", "tx_bytes", "rx_pkts", "rx_bytes", "retx", "tmout",
            "nak_tx", "nak_rx", "rnr", "dup", "oos", "cnp_tx", "cnp_rx", "ce", "rate_Mbps"
        );
        for q in qps {
            let qc = &q["counters"];
            let rate = match n(qc, "current_rate_mbps") {
                0 => "-".to_string(),
                r => r.to_string(),
            };
            let _ = writeln!(
                s,
                "  {:<8} {:<5} {:>10} {:>13} {:>10} {:>13} {:>8} {:>6} {:>6} {:>6} {:>5} {:>6} {:>7} {:>6} {:>6} {:>6} {:>9}",
                format!("{:#08x}", n(q, "qpn")),
                q["state"].as_str().unwrap_or("?"),
                n(qc, "tx_packets"),
                n(qc, "tx_payload_bytes"),
                n(qc, "rx_packets"),
                n(qc, "rx_payload_bytes"),
                n(qc, "retransmitted_packets"),
                n(qc, "timeouts"),
                nak_total(&qc["naks_sent"]),
                nak_total(&qc["naks_received"]),
                n(&qc["naks_sent"], "rnr") + n(&qc["naks_received"], "rnr"),
                n(qc, "duplicate_requests"),
                n(qc, "out_of_sequence_requests"),
                n(qc, "cnps_sent"),
                n(qc, "cnps_received"),
                n(qc, "ce_marks_received"),
                rate,
            );
            // Selective repeat (rdmesh<->rdmesh extension): its own line when it did anything.
            let sr = [
                ("sacks_tx", "sacks_sent"),
                ("sacks_rx", "sacks_received"),
                ("fast_retx", "fast_retransmits"),
                ("ooo_placed", "out_of_order_placed"),
                ("dup_dropped", "duplicates_dropped"),
            ];
            if q["recovery"].as_str() == Some("selective") || sr.iter().any(|(_, k)| n(qc, k) > 0) {
                let vals: Vec<String> = sr
                    .iter()
                    .map(|(name, k)| format!("{name}={}", n(qc, k)))
                    .collect();
                let _ = writeln!(s, "           selective: {}", vals.join(" "));
            }
            for dir in ["naks_sent", "naks_received"] {
                if nak_total(&qc[dir]) == 0 {
                    continue;
                }
                let codes: Vec<String> = qc[dir]
                    .as_object()
                    .into_iter()
                    .flatten()
                    .filter(|(_, v)| v.as_u64().unwrap_or(0) > 0)
                    .map(|(k, v)| format!("{k}={v}"))
                    .collect();
                let _ = writeln!(s, "           {dir}: {}", codes.join(" "));
            }
        }
    }
    s
}

/// Runs `rdmesh stats`.
///
/// Errors: the stats directory exists but cannot be read; stdout is closed.
pub fn run(args: &StatsArgs) -> Result<()> {
    let dir = args.dir.clone().unwrap_or_else(stats::stats_dir);
    let interval = match args.watch {
        Some(s) if s > 0.0 && s.is_finite() => Some(Duration::from_secs_f64(s)),
        Some(s) => {
            return Err(Error::Config(format!(
                "--watch {s}: give a positive number of seconds"
            )))
        }
        None => None,
    };
    loop {
        let mut snaps = stats::read_all(&dir).map_err(|e| {
            Error::io(
                format!(
                    "reading the stats directory {} (set RDMESH_STATS_DIR or --dir to where the rdmesh processes publish)",
                    dir.display()
                ),
                e,
            )
        })?;
        if let Some(pid) = args.pid {
            snaps.retain(|v| v["pid"].as_u64() == Some(u64::from(pid)));
        }
        let text = if args.json {
            format!("{}\n", Value::Array(snaps))
        } else {
            table(&snaps)
        };
        let mut out = std::io::stdout().lock();
        out.write_all(text.as_bytes())
            .and_then(|()| out.flush())
            .map_err(|e| Error::io("writing to stdout", e))?;
        match interval {
            Some(i) => {
                drop(out);
                std::thread::sleep(i);
                if !args.json {
                    println!();
                }
            }
            None => return Ok(()),
        }
    }
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn table_has_a_row_per_qp_with_its_values() {
        let v: Value = serde_json::from_str(
            r#"{"pid": 42, "process": "rdmesh", "device": "soft-lo", "netdev": "lo", "local": "127.0.0.1:4791",
                "counters": {"tx_packets": 10, "rx_packets": 9, "icrc_errors": 1},
                "qps": [{"qpn": 17, "state": "RTS", "counters": {"tx_packets": 123, "retransmitted_packets": 5,
                         "naks_received": {"psn_sequence": 2, "rnr": 1}, "naks_sent": {}, "current_rate_mbps": 900,
                         "sacks_sent": 4, "fast_retransmits": 2}}]}"#,
        )
        .unwrap();
        let t = table(&[v]);
        assert!(
            t.contains("pid 42 (rdmesh) device soft-lo netdev lo local 127.0.0.1:4791"),
            "{t}"
        );
        assert!(t.contains("icrc_errors 1"), "{t}");
        let row = t.lines().find(|l| l.contains("0x000011")).expect(&t);
        let cols: Vec<&str> = row.split_whitespace().collect();
        assert_eq!(cols[1], "RTS");
        assert_eq!(cols[2], "123");
        assert_eq!(cols[6], "5");
        assert_eq!(cols[9], "3", "nak_rx sums the codes: {row}");
        assert_eq!(cols[10], "1", "rnr: {row}");
        assert_eq!(cols[16], "900");
        assert!(t.contains("naks_received: psn_sequence=2 rnr=1"), "{t}");
        assert!(
            t.contains("selective: sacks_tx=4 sacks_rx=0 fast_retx=2 ooo_placed=0 dup_dropped=0"),
            "{t}"
        );
        assert_eq!(table(&[]), "no open rdmesh devices\n");
    }
}
