//! `rdmesh bench --counters`: the QP and device counters of one benchmark end, printed as
//! `key=value` lines that scripts and tests can parse.
//!
//! Format (one line each, keys in the order of the structs):
//! ` counters <role> qp <qpn> key=value ...` with the [`RcCounters`] fields (NAK counters as
//! `naks_sent.<kind>` / `naks_received.<kind>`), and ` counters <role> device key=value ...`
//! with the [`DeviceCounters`] fields (impairment counters as `impair.<kind>`).

use std::fmt::Write;

use rdmesh_core::rc::{NakCounters, RcCounters};

use crate::soft::DeviceCounters;

fn naks(out: &mut String, prefix: &str, n: &NakCounters) {
    let _ = write!(
        out,
        " {prefix}.psn_sequence={} {prefix}.rnr={} {prefix}.invalid_request={} {prefix}.remote_access={} {prefix}.remote_operational={}",
        n.psn_sequence, n.rnr, n.invalid_request, n.remote_access, n.remote_operational
    );
}

/// The QP counter line of `role` (`client`, `server`) for QP `qpn`.
pub fn qp_line(role: &str, qpn: u32, c: &RcCounters) -> String {
    let mut s = format!(" counters {role} qp {qpn:#08x}");
    let _ = write!(
        s,
        " tx_packets={} tx_payload_bytes={} rx_packets={} rx_payload_bytes={} retransmitted_packets={} timeouts={} retries={} implied_naks={} acks_sent={} acks_received={}",
        c.tx_packets,
        c.tx_payload_bytes,
        c.rx_packets,
        c.rx_payload_bytes,
        c.retransmitted_packets,
        c.timeouts,
        c.retries,
        c.implied_naks,
        c.acks_sent,
        c.acks_received
    );
    naks(&mut s, "naks_sent", &c.naks_sent);
    naks(&mut s, "naks_received", &c.naks_received);
    let _ = write!(
        s,
        " duplicate_requests={} out_of_sequence_requests={} ghost_responses={} dropped_packets={} out_of_order_placed={} sacks_sent={} sacks_received={} fast_retransmits={} credit_waits={} duplicates_dropped={} ce_marks_received={} cnps_sent={} cnps_received={} rate_decreases={} current_rate_mbps={} lowest_rate_mbps={}",
        c.duplicate_requests,
        c.out_of_sequence_requests,
        c.ghost_responses,
        c.dropped_packets,
        c.out_of_order_placed,
        c.sacks_sent,
        c.sacks_received,
        c.fast_retransmits,
        c.credit_waits,
        c.duplicates_dropped,
        c.ce_marks_received,
        c.cnps_sent,
        c.cnps_received,
        c.rate_decreases,
        c.current_rate_mbps,
        c.lowest_rate_mbps
    );
    s
}

/// The device counter line of `role`.
pub fn device_line(role: &str, d: &DeviceCounters) -> String {
    format!(
        " counters {role} device tx_packets={} rx_packets={} icrc_errors={} malformed={} unknown_qp={} wrong_source={} cnp_received={} tx_errors={} tx_icrc_corrupted={} acks_coalesced={} rx_placed={} rx_peeks={} progress_rounds={} impair.dropped={} impair.duplicated={} impair.reordered={} impair.corrupted={} impair.delayed={} impair.ce_marked={}",
        d.tx_packets,
        d.rx_packets,
        d.icrc_errors,
        d.malformed,
        d.unknown_qp,
        d.wrong_source,
        d.cnp_received,
        d.tx_errors,
        d.tx_icrc_corrupted,
        d.acks_coalesced,
        d.rx_placed,
        d.rx_peeks,
        d.progress_rounds,
        d.impair.dropped,
        d.impair.duplicated,
        d.impair.reordered,
        d.impair.corrupted,
        d.impair.delayed,
        d.impair.ce_marked
    )
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn lines_are_key_value_and_carry_every_value() {
        let mut c = RcCounters {
            retransmitted_packets: 17,
            cnps_sent: 3,
            ..Default::default()
        };
        c.naks_sent.psn_sequence = 5;
        let l = qp_line("client", 0x11, &c);
        assert!(l.starts_with(" counters client qp 0x000011 "), "{l}");
        assert!(l.contains(" retransmitted_packets=17 "), "{l}");
        assert!(l.contains(" naks_sent.psn_sequence=5 "), "{l}");
        assert!(l.contains(" cnps_sent=3 "), "{l}");
        let mut d = DeviceCounters {
            icrc_errors: 4,
            ..Default::default()
        };
        d.impair.dropped = 9;
        let l = device_line("server", &d);
        assert!(
            l.contains(" icrc_errors=4 ") && l.contains(" impair.dropped=9 "),
            "{l}"
        );
        // Every token after the prefix is key=value.
        for line in [qp_line("a", 1, &c), device_line("a", &d)] {
            let toks: Vec<&str> = line.split_whitespace().collect();
            let skip = if toks[2] == "qp" { 4 } else { 3 };
            assert!(toks[skip..].iter().all(|t| t.split_once('=').is_some()));
        }
    }
}
