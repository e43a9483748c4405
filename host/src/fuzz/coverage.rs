//! What the fuzzer sent, per opcode and per violation kind, and how the target took it.

use std::collections::BTreeMap;
use std::fmt::Write;

use rdmesh_core::wire::gen::{Generated, Violation};
use rdmesh_core::wire::Opcode;

/// How a live target answered one frame (peer mode).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// A READ response or atomic ACK came back.
    Answered,
    /// An ACK came back.
    Acked,
    /// A NAK or RNR NAK came back.
    Naked,
    /// Nothing came back within the reply wait (dropped, or accepted without an ACK).
    Silent,
}

/// Counters of one row.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    /// Frames sent.
    pub sent: u64,
    /// Answered with data (READ response, atomic ACK).
    pub answered: u64,
    /// ACKed.
    pub acked: u64,
    /// NAKed (NAK or RNR NAK).
    pub naked: u64,
    /// No reply.
    pub silent: u64,
}

impl Counts {
    fn add(&mut self, o: Option<Outcome>) {
        self.sent += 1;
        match o {
            Some(Outcome::Answered) => self.answered += 1,
            Some(Outcome::Acked) => self.acked += 1,
            Some(Outcome::Naked) => self.naked += 1,
            Some(Outcome::Silent) => self.silent += 1,
            None => {}
        }
    }
}

/// Per-opcode and per-violation counters.
#[derive(Debug, Clone, Default)]
pub struct Coverage {
    /// By BTH opcode byte.
    pub by_opcode: BTreeMap<u8, Counts>,
    /// By violation kind.
    pub by_violation: BTreeMap<Violation, Counts>,
    /// All frames.
    pub total: Counts,
}

/// The opcode's name (`RcSendOnly`, or `reserved 0x15`).
pub fn opcode_name(op: u8) -> String {
    match Opcode::from(op) {
        Opcode::Unknown(v) => format!("reserved {v:#04x}"),
        o => format!("{o:?}"),
    }
}

impl Coverage {
    /// Counts one frame (`outcome` is `None` where the target gives no per-frame answer).
    pub fn record(&mut self, info: &Generated, outcome: Option<Outcome>) {
        self.by_opcode.entry(info.opcode).or_default().add(outcome);
        self.by_violation
            .entry(info.violation)
            .or_default()
            .add(outcome);
        self.total.add(outcome);
    }

    /// Two tables (per opcode, per violation); with `outcomes`, the answered / ACKed / NAKed /
    /// silent columns too.
    pub fn table(&self, outcomes: bool) -> String {
        let mut s = String::new();
        let row = |s: &mut String, name: &str, c: &Counts| {
            if outcomes {
                let _ = writeln!(
                    s,
                    "  {name:<34} {:>8} {:>8} {:>8} {:>8} {:>8}",
                    c.sent, c.answered, c.acked, c.naked, c.silent
                );
            } else {
                let _ = writeln!(s, "  {name:<34} {:>8}", c.sent);
            }
        };
        let head = |s: &mut String, what: &str| {
            if outcomes {
                let _ = writeln!(
                    s,
                    "  {what:<34} {:>8} {:>8} {:>8} {:>8} {:>8}",
                    "sent", "answered", "acked", "naked", "silent"
                );
            } else {
                let _ = writeln!(s, "  {what:<34} {:>8}", "sent");
            }
        };
        head(&mut s, "opcode");
        for (op, c) in &self.by_opcode {
            row(&mut s, &format!("{op:#04x} {}", opcode_name(*op)), c);
        }
        head(&mut s, "violation");
        for (v, c) in &self.by_violation {
            row(&mut s, v.name(), c);
        }
        row(&mut s, "total", &self.total);
        s
    }
}
