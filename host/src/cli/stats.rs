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
//!
//! Devices of the vfio provider and the device model show the device's own counters: the
//! port's (RoCE packets and bytes each way, receive errors, CNPs handled and sent, ECN-marked
//! packets) and, per QP, its Q counter set under the mlx5 names (`rdma statistic`): WRITE /
//! READ / atomic requests received, out-of-sequence and duplicate requests, PSN-sequence
//! NAKs, local ACK timeouts, RNR and transport retries exceeded, error and flush CQEs.
//! `--provider soft|model|vfio:BDF` shows only devices of that provider.

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
    /// Only devices of this provider: soft, model, or vfio:BDF (one function).
    #[arg(long, value_parser = parse_provider)]
    pub provider: Option<crate::verbs::ProviderKind>,
}

fn parse_provider(s: &str) -> std::result::Result<crate::verbs::ProviderKind, String> {
    s.parse()
}

/// Whether snapshot `v` is a device of provider `p` (snapshots without a `provider` key are
/// soft devices of an older rdmesh).
pub fn matches_provider(v: &Value, p: &crate::verbs::ProviderKind) -> bool {
    let prov = v["provider"].as_str().unwrap_or("soft");
    match p {
        crate::verbs::ProviderKind::Vfio(bdf) => {
            prov == "vfio" && v["netdev"].as_str() == Some(bdf.as_str())
        }
        k => prov == k.name(),
    }
}

/// The device's own counters (vfio provider, model): a port line and a row per QP.
fn hw_table(s: &mut String, d: &Value) {
    use std::fmt::Write as _;
    let c = &d["counters"];
    let _ = writeln!(
        s,
        "  port tx_packets {} tx_bytes {} rx_packets {} rx_bytes {} rx_errors {} np_ecn_marked_roce_packets {} np_cnp_sent {} rp_cnp_handled {} rp_cnp_ignored {}",
        n(c, "tx_packets"),
        n(c, "tx_bytes"),
        n(c, "rx_packets"),
        n(c, "rx_bytes"),
        n(c, "rx_errors"),
        n(c, "np_ecn_marked_roce_packets"),
        n(c, "np_cnp_sent"),
        n(c, "rp_cnp_handled"),
        n(c, "rp_cnp_ignored"),
    );
    let qps = d["qps"].as_array().map(Vec::as_slice).unwrap_or(&[]);
    if qps.is_empty() {
        let _ = writeln!(s, "  (no QPs)");
        return;
    }
    let _ = writeln!(
        s,
        "  {:<8} {:<5} {:>4} {:>9} {:>9} {:>9} {:>7} {:>7} {:>7} {:>7} {:>7} {:>7} {:>7} {:>7} {:>7}",
        "QPN", "state", "set", "rx_write", "rx_read", "rx_atomic", "oos", "dup", "seq_err",
        "tmout", "rnr_buf", "rnr_exc", "retr_exc", "cqe_err", "flush"
    );
    for q in qps {
        let qc = &q["counters"];
        let _ = writeln!(
            s,
            "  {:<8} {:<5} {:>4} {:>9} {:>9} {:>9} {:>7} {:>7} {:>7} {:>7} {:>7} {:>7} {:>7} {:>7} {:>7}",
            format!("{:#08x}", n(q, "qpn")),
            q["state"].as_str().unwrap_or("?"),
            q["counter_set"]
                .as_u64()
                .map_or("-".to_string(), |v| v.to_string()),
            n(qc, "rx_write_requests"),
            n(qc, "rx_read_requests"),
            n(qc, "rx_atomic_requests"),
            n(qc, "out_of_sequence"),
            n(qc, "duplicate_request"),
            n(qc, "packet_seq_err"),
            n(qc, "local_ack_timeout_err"),
            n(qc, "out_of_buffer"),
            n(qc, "rnr_nak_retry_err"),
            n(qc, "req_transport_retries_exceeded"),
            n(qc, "req_cqe_error") + n(qc, "resp_cqe_error"),
            n(qc, "req_cqe_flush_error") + n(qc, "resp_cqe_flush_error"),
        );
    }
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
        let provider = d["provider"].as_str().unwrap_or("soft");
        let _ = writeln!(
            s,
            "pid {} ({}) device {} netdev {} local {}{}",
            n(d, "pid"),
            d["process"].as_str().unwrap_or(""),
            d["device"].as_str().unwrap_or("?"),
            d["netdev"].as_str().unwrap_or("?"),
            d["local"].as_str().unwrap_or("?"),
            if provider == "soft" {
                String::new()
            } else {
                format!(" provider {provider}")
            },
        );
        if provider != "soft" {
            hw_table(&mut s, d);
            continue;
        }
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
        if let Some(p) = &args.provider {
            snaps.retain(|v| matches_provider(v, p));
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

    #[test]
    fn hw_table_shows_port_and_q_counters() {
        let v: Value = serde_json::from_str(
            r#"{"pid": 7, "process": "rdmesh", "provider": "model", "device": "mlx5_vfio_model_10.0.0.1",
                "netdev": "model_10.0.0.1", "local": "10.0.0.1:4791",
                "counters": {"tx_packets": 500, "tx_bytes": 33000, "rx_packets": 40, "np_cnp_sent": 3, "rp_cnp_handled": 2},
                "qps": [{"qpn": 20, "state": "RTS", "counter_set": 1,
                         "counters": {"rx_write_requests": 500, "out_of_sequence": 4, "req_cqe_flush_error": 1}}]}"#,
        )
        .unwrap();
        let t = table(std::slice::from_ref(&v));
        assert!(t.contains("provider model"), "{t}");
        assert!(
            t.contains("port tx_packets 500 tx_bytes 33000 rx_packets 40"),
            "{t}"
        );
        assert!(t.contains("np_cnp_sent 3 rp_cnp_handled 2"), "{t}");
        let row = t.lines().find(|l| l.contains("0x000014")).expect(&t);
        let cols: Vec<&str> = row.split_whitespace().collect();
        assert_eq!(&cols[..4], &["0x000014", "RTS", "1", "500"]);
        assert_eq!(cols[6], "4", "oos: {row}");
        assert_eq!(cols[14], "1", "flush: {row}");
        use crate::verbs::ProviderKind as P;
        assert!(matches_provider(&v, &P::Model));
        assert!(!matches_provider(&v, &P::Soft));
        let old_soft: Value = serde_json::from_str(r#"{"pid": 1}"#).unwrap();
        assert!(matches_provider(&old_soft, &P::Soft));
        let vf: Value =
            serde_json::from_str(r#"{"provider": "vfio", "netdev": "0000:01:00.0"}"#).unwrap();
        assert!(matches_provider(&vf, &P::Vfio("0000:01:00.0".into())));
        assert!(!matches_provider(&vf, &P::Vfio("0000:02:00.0".into())));
    }
}
