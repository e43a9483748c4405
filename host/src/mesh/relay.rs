//! Relaying: a node that links two nodes without a shared subnet forwards their connection's
//! frames between its two hops, byte for byte.
//!
//! The relay joins the rails toward the connection's origin with the rails toward its target
//! (the next node on the path: the target or another relay). Every frame received on one side
//! is copied into a send slot on the other side and posted; only then is its receive slot
//! released, which returns the credit to the sender. So the relay's buffering is bounded by
//! its rails' slots (16 data slots of 64 KiB per rail toward the origin, 64 control slots
//! toward the target): when the far side is slow, credits stop and the near sender waits.
//! Frames are not parsed beyond their kind: end-to-end sequence numbers, offsets and the data
//! pass through unchanged, so what the target receives is exactly what the origin sent.
//!
//! When one side fails entirely, the relay sends a FAIL frame naming itself and the failed
//! link to the other side, so the endpoint's requests fail with that error instead of waiting.
//! When both endpoints have sent CLOSE (or one failed), the relay drains and goes away.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::mesh::frame::{text_frame, FrameKind, HEADER_LEN};
use crate::mesh::progress::{Pump, PumpState};
use crate::mesh::rail::FrameBody;
use crate::mesh::railset::{Consumed, RailSet, NO_TOKEN};

const DRAIN: Duration = Duration::from_secs(2);

struct Side {
    rails: RailSet,
    closed: bool,
    fail_sent: bool,
}

struct RelayCore {
    sides: [Side; 2],
    label: String,
    keepalive: Duration,
    ending: Option<Instant>,
}

/// A relay between the rails toward a connection's origin and toward its target.
pub struct Relay {
    core: Mutex<RelayCore>,
}

impl std::fmt::Debug for Relay {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let c = self.core.lock().unwrap_or_else(|p| p.into_inner());
        write!(f, "Relay({})", c.label)
    }
}

impl Relay {
    /// Joins `toward_origin` and `toward_target`. `label` names the relay in FAIL messages
    /// ("relay node 01234567… (10.0.1.2/24, 10.0.2.2/24) between node A and node B").
    pub fn new(
        toward_origin: RailSet,
        toward_target: RailSet,
        label: String,
        keepalive: Duration,
    ) -> Relay {
        let side = |rails| Side {
            rails,
            closed: false,
            fail_sent: false,
        };
        tracing::info!(relay = %label, "mesh relay up");
        Relay {
            core: Mutex::new(RelayCore {
                sides: [side(toward_origin), side(toward_target)],
                label,
                keepalive,
                ending: None,
            }),
        }
    }
}

/// Forwards what `from` received to `to`. Returns (anything moved, a CLOSE passed).
fn forward(from: &mut RailSet, to: &mut RailSet) -> (bool, bool) {
    let mut closed = false;
    let moved = from.poll_frames(|_, bytes| match to.try_forward(bytes) {
        Some(rail) => {
            match FrameKind::from(bytes.first().copied().unwrap_or(0)) {
                FrameKind::Data => to.rails()[rail]
                    .nic()
                    .counters
                    .relayed(bytes.len().saturating_sub(HEADER_LEN) as u64),
                FrameKind::Close => closed = true,
                _ => {}
            }
            Consumed::Yes
        }
        None => Consumed::NotYet,
    });
    (moved, closed)
}

/// When `from` has no rail left, tells the endpoint behind `to` once with a FAIL frame.
fn notify_failure(from: &Side, to: &mut Side, toward: &str, label: &str) -> bool {
    let Some(e) = from.rails.failure() else {
        return false;
    };
    if to.fail_sent {
        return false;
    }
    to.fail_sent = true;
    let text = format!("{label} lost its link(s) toward the {toward}: {e}");
    tracing::warn!(relay = %label, error = %e, "mesh relay side failed");
    to.rails.push(
        None,
        NO_TOKEN,
        FrameBody::Bytes(text_frame(FrameKind::Fail, 0, &text)),
    );
    to.rails.pump();
    true
}

impl Pump for Relay {
    fn pump(&self) -> PumpState {
        let mut guard = self.core.lock().unwrap_or_else(|p| p.into_inner());
        let c = &mut *guard;
        let mut any = false;
        for s in c.sides.iter_mut() {
            any |= s.rails.pump();
            s.rails.take_done();
        }
        let [a, b] = &mut c.sides;
        let (m1, closed_a) = forward(&mut a.rails, &mut b.rails);
        let (m2, closed_b) = forward(&mut b.rails, &mut a.rails);
        any |= m1 | m2;
        a.closed |= closed_a;
        b.closed |= closed_b;
        any |= notify_failure(a, b, "target", &c.label);
        any |= notify_failure(b, a, "origin", &c.label);
        for s in c.sides.iter_mut() {
            s.rails.keepalive(c.keepalive);
        }
        let over = (c.sides[0].closed && c.sides[1].closed) || c.sides.iter().any(|s| s.fail_sent);
        if over && c.ending.is_none() {
            c.ending = Some(Instant::now());
        }
        if let Some(t) = c.ending {
            let drained = c
                .sides
                .iter()
                .all(|s| !s.rails.busy() || s.rails.failure().is_some());
            if drained || t.elapsed() > DRAIN {
                tracing::info!(relay = %c.label, "mesh relay closed");
                return PumpState::Finished;
            }
        }
        if any {
            PumpState::Busy
        } else {
            PumpState::Idle
        }
    }
}
