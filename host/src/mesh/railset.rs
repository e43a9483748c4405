//! The rails of one hop: every RC connection between this node and one next node (the peer,
//! or a relay). Frames wait in per-rail queues (a striped message's chunks go to the rail the
//! plan chose) or in a shared queue (any rail will do), and are posted as credits allow.
//!
//! When a rail fails, the frames it had in flight and the frames queued on it move to the
//! shared queue, so they go out on the rails that are left, and a RAIL_DOWN frame tells the
//! other end (which then fails its end of that rail at once instead of waiting for its own
//! retries). Both ends number rails in handshake order. Only when no rail is left does the hop
//! fail, with an error naming every link.

use std::collections::VecDeque;
use std::time::Duration;

use crate::mesh::error::MeshError;
use crate::mesh::frame::{text_frame, Frame, FrameKind};
use crate::mesh::rail::{FrameBody, Rail};

/// The token of frames nobody waits for (RAIL_DOWN, CLOSE, forwarded frames).
pub const NO_TOKEN: u64 = u64::MAX;

#[derive(Debug)]
struct Out {
    token: u64,
    body: FrameBody,
}

/// What a frame handler did with a received frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Consumed {
    /// The frame was used; release its slot.
    Yes,
    /// Keep it (no room to forward it yet); stop delivering frames for now.
    NotYet,
}

/// The rails to one next hop.
#[derive(Debug)]
pub struct RailSet {
    rails: Vec<Rail>,
    handled_failure: Vec<bool>,
    queues: Vec<VecDeque<Out>>,
    shared: VecDeque<Out>,
    done: Vec<u64>,
    next_rr: usize,
}

impl RailSet {
    /// The rails (connected), numbered as the other end numbers them.
    pub fn new(mut rails: Vec<Rail>) -> RailSet {
        let n = rails.len();
        for (i, r) in rails.iter_mut().enumerate() {
            r.set_index(i);
        }
        RailSet {
            rails,
            handled_failure: vec![false; n],
            queues: (0..n).map(|_| VecDeque::new()).collect(),
            shared: VecDeque::new(),
            done: Vec::new(),
            next_rr: 0,
        }
    }

    /// Leaves the driving of the rails' devices to the caller: polling a rail then only takes
    /// completions already queued. Returns each distinct device once, for the caller to drive
    /// ([`crate::verbs::Device::progress`]) before it polls.
    pub fn drive_outside(&mut self) -> Vec<crate::verbs::Device> {
        for r in &mut self.rails {
            r.set_drives(false);
        }
        crate::verbs::Device::distinct(self.rails.iter().map(|r| r.device()))
            .into_iter()
            .cloned()
            .collect()
    }

    /// The rails.
    pub fn rails(&self) -> &[Rail] {
        &self.rails
    }

    /// Indices of the rails that work.
    pub fn live(&self) -> Vec<usize> {
        (0..self.rails.len())
            .filter(|&i| self.rails[i].is_up())
            .collect()
    }

    /// The error of the hop once no rail is left: the one rail's error, or every link named.
    pub fn failure(&self) -> Option<MeshError> {
        if self.rails.iter().any(Rail::is_up) {
            return None;
        }
        let errs: Vec<&MeshError> = self.rails.iter().filter_map(Rail::failure).collect();
        match errs.as_slice() {
            [] => Some(MeshError::Host("the hop has no rails".into())),
            [one] => Some((*one).clone()),
            many => {
                let mut links = Vec::new();
                let mut reasons = Vec::new();
                for e in many {
                    if let MeshError::LinkDown { link, reason } = e {
                        links.push(link.clone());
                        reasons.push(reason.clone());
                    } else {
                        reasons.push(e.to_string());
                    }
                }
                reasons.dedup();
                Some(MeshError::LinkDown {
                    link: format!("all {} rails ({})", many.len(), links.join("; ")),
                    reason: reasons.join("; "),
                })
            }
        }
    }

    /// Queues a frame on rail `rail` (the striping plan's choice), or on any rail.
    pub fn push(&mut self, rail: Option<usize>, token: u64, body: FrameBody) {
        let out = Out { token, body };
        match rail {
            Some(i) if i < self.rails.len() && self.rails[i].is_up() => {
                self.queues[i].push_back(out)
            }
            _ => self.shared.push_back(out),
        }
    }

    /// Tokens of frames whose SEND completed since the last call (the list keeps its
    /// capacity: no allocation per round).
    pub fn take_done(&mut self) -> std::vec::Drain<'_, u64> {
        self.done.drain(..)
    }

    /// Polls every rail, moves the frames of failed rails to the rails left, and posts what
    /// credits allow. Returns whether anything happened.
    pub fn pump(&mut self) -> bool {
        let mut any = false;
        for r in &mut self.rails {
            any |= r.poll(&mut self.done);
        }
        for i in 0..self.rails.len() {
            if self.rails[i].failure().is_some() && !self.handled_failure[i] {
                self.handled_failure[i] = true;
                any = true;
                self.requeue_failed(i);
            }
        }
        any | self.post_queued()
    }

    fn requeue_failed(&mut self, i: usize) {
        let frames = self.rails[i].take_failed_frames();
        let queued: Vec<Out> = self.queues[i].drain(..).collect();
        for o in queued.into_iter().rev() {
            self.shared.push_front(o);
        }
        for (token, body) in frames.into_iter().rev() {
            self.shared.push_front(Out { token, body });
        }
        let text = self.rails[i]
            .failure()
            .map(|e| e.to_string())
            .unwrap_or_default();
        if !self.live().is_empty() {
            tracing::warn!(
                link = %self.rails[i].link(),
                left = self.live().len(),
                "mesh rail down; its frames go on the rails left"
            );
            self.shared.push_back(Out {
                token: NO_TOKEN,
                body: FrameBody::Bytes(text_frame(FrameKind::RailDown, i as u8, &text)),
            });
        }
    }

    /// Posts what credits allow of the queued frames, without polling any completion queue
    /// (no receive, no completion processing: what an application thread does to send a small
    /// message at once while the progress shard keeps everything else). Returns whether it
    /// posted anything.
    pub fn post_now(&mut self) -> bool {
        self.post_queued()
    }

    fn post_queued(&mut self) -> bool {
        let mut any = false;
        for i in 0..self.rails.len() {
            while let Some(o) = self.queues[i].front() {
                if !self.rails[i].can_post_body(&o.body) {
                    break;
                }
                let o = self.queues[i].pop_front().expect("front");
                any = true;
                if let Err(e) = self.rails[i].post(o.token, &o.body) {
                    if self.rails[i].failure().is_some() {
                        // The rail failed: the frame waits for the next pump's requeue.
                        self.queues[i].push_front(o);
                        break;
                    }
                    dropped(&e);
                }
            }
        }
        let n = self.rails.len();
        'frames: while let Some(o) = self.shared.front() {
            for k in 0..n {
                let i = (self.next_rr + k) % n;
                if self.rails[i].can_post_body(&o.body) {
                    let o = self.shared.pop_front().expect("front");
                    self.next_rr = (i + 1) % n;
                    any = true;
                    if let Err(e) = self.rails[i].post(o.token, &o.body) {
                        if self.rails[i].failure().is_some() {
                            self.shared.push_front(o);
                        } else {
                            dropped(&e);
                        }
                    }
                    continue 'frames;
                }
            }
            break;
        }
        any
    }

    /// Posts a copy of `frame` now on any rail with room (a relay forwarding): the rail used,
    /// or `None` when no rail has room (or the shared queue is not empty: earlier frames go
    /// first).
    pub fn try_forward(&mut self, frame: &[u8]) -> Option<usize> {
        if !self.shared.is_empty() {
            return None;
        }
        let n = self.rails.len();
        for k in 0..n {
            let i = (self.next_rr + k) % n;
            if self.rails[i].can_post(frame.len()) {
                self.next_rr = (i + 1) % n;
                if self.rails[i].post_slice(NO_TOKEN, frame).is_ok() {
                    return Some(i);
                }
            }
        }
        None
    }

    /// Delivers received frames to `f(rail index, frame bytes)` until it returns
    /// [`Consumed::NotYet`] or none is left. RAIL_DOWN frames are handled here: the named rail
    /// is failed at this end too. Returns whether a frame was consumed.
    pub fn poll_frames(&mut self, mut f: impl FnMut(usize, &[u8]) -> Consumed) -> bool {
        let mut any = false;
        let n = self.rails.len();
        for k in 0..n {
            let i = (self.next_rr + k) % n;
            while let Some((slot, len)) = self.rails[i].next_frame() {
                let rail_down =
                    self.rails[i].with_frame(slot, len, |b| match Frame::new_checked(b) {
                        Ok(fr) if fr.kind() == FrameKind::RailDown => Some((
                            fr.index() as usize,
                            String::from_utf8_lossy(fr.payload()).into_owned(),
                        )),
                        _ => None,
                    });
                if let Some((idx, text)) = rail_down {
                    self.rails[i].release_front();
                    any = true;
                    if let Some(r) = self.rails.get_mut(idx) {
                        r.fail(format!("the peer reported this link down: {text}"));
                    }
                    continue;
                }
                let c = self.rails[i].with_frame(slot, len, |b| f(i, b));
                if c == Consumed::NotYet {
                    return any;
                }
                self.rails[i].release_front();
                any = true;
            }
        }
        any
    }

    /// Probes idle rails (see [`Rail::keepalive`]).
    pub fn keepalive(&mut self, idle: Duration) {
        for r in &mut self.rails {
            r.keepalive(idle);
        }
    }

    /// Whether frames are queued, in flight or received and not released.
    pub fn busy(&self) -> bool {
        !self.shared.is_empty()
            || self.queues.iter().any(|q| !q.is_empty())
            || self.rails.iter().any(|r| r.is_up() && r.busy())
    }

    /// Whether a frame is queued (not posted yet).
    pub fn has_queued(&self) -> bool {
        !self.shared.is_empty() || self.queues.iter().any(|q| !q.is_empty())
    }
}

/// A frame that cannot be built (its application buffer was released: the request was freed
/// with its connection) is dropped; its request is gone, and later frames (CLOSE) must not
/// wait behind it.
fn dropped(e: &MeshError) {
    tracing::debug!(error = %e, "mesh frame dropped");
}
