//! Tagged send/receive with NCCL's rules, as a state machine over mesh frames (no I/O here:
//! frames come in through [`Tagged::on_frame`], frames to send go out through
//! [`Tagged::take_outbox`]).
//!
//! The protocol is receiver-driven, like NCCL IB's "clear to send" (`net_ib/p2p.cc`):
//! - `irecv` announces the receive to the sender in a CTS frame: its sequence number on the
//!   connection and, for each of its buffers (a grouped receive has up to 8), the posted size
//!   and tag.
//! - Sends match receives **in posting order** (FIFO per connection): the oldest unmatched send
//!   takes a free buffer of the oldest receive that still has one, the buffer whose tag equals
//!   the send's tag (tags only choose the buffer inside a grouped receive). A send whose tag
//!   matches no free buffer of that receive fails with [`MeshError::TagMismatch`].
//! - A send larger than the buffer it matched is refused on both ends with
//!   [`MeshError::Truncated`], naming both sizes (the sender tells the receiver with ABORT).
//! - Otherwise the send becomes DATA frames (striped over the rails, see
//!   [`crate::mesh::stripe`]); the receiver copies each chunk into place, ignores duplicates
//!   (a chunk resent after a rail failure), and completes the buffer once all of the send's
//!   bytes arrived, reporting the **actual** size. A send completes when every one of its
//!   frames was acknowledged by the next hop.
//! - **Eager sends** ([`Eager`], agreed in the handshake): a send of at most the receiving
//!   end's eager size whose CTS has not come yet goes at once, as one DATA frame flagged
//!   [`FLAG_EAGER`] for receive `seq` = the send's number (an end that takes eager sends
//!   refuses grouped receives, so its k-th receive meets the k-th send). The receiving end
//!   keeps a frame that comes before its receive (a copy, at most `max_requests` of them) and
//!   places it when `irecv` posts that receive, checking size and tag as the sender would; at
//!   most [`EAGER_AHEAD`] eager sends wait for their CTS at once (later ones wait as usual); the
//!   CTS is still sent, and the sender checks it against what it sent and moves on. A small
//!   message then costs one trip, not the CTS's trip and then its own.
//! - Direct placement ([`crate::mesh::frame::FLAG_PLACED`]): a receive buffer in memory the
//!   application registered ([`Placement`]) is announced with its address and the rkey of
//!   each rail; a sender on a direct connection then sends each chunk as an RDMA WRITE into
//!   it followed by a payload-less placed DATA frame ([`FrameBody::Placed`]), and the receiver
//!   counts the chunk's bytes without copying them. A sender that does not offer placement
//!   (an older version, a relayed connection) sends DATA with payload, copied as before.
//! - Each side keeps at most `max_requests` requests (≥ 32, NCCL's `NCCL_NET_MAX_REQUESTS`);
//!   beyond that `isend`/`irecv` answer "not now" (NCCL's NULL request) and the caller retries.

use std::collections::{BTreeMap, HashSet, VecDeque};

use crate::mesh::buffer::Buffer;
use crate::mesh::error::MeshError;
use crate::mesh::frame::{
    cts_frame_placed, Frame, FrameKind, FrameRepr, RailKeys, FLAG_EAGER, FLAG_PLACED, MAX_RECVS,
};
use crate::mesh::rail::{FrameBody, DATA_CHUNK};
use crate::mesh::railset::NO_TOKEN;
use crate::mesh::stripe;

/// NCCL's `NCCL_NET_MAX_REQUESTS`: requests every connection must sustain.
pub const NCCL_NET_MAX_REQUESTS: usize = 32;
/// Most eager sends whose CTS has not come yet (NCCL keeps `NCCL_STEPS` = 8 in flight per
/// connection): what a receiver keeps at most for receives it has not posted. An eager send
/// completes when its frame is acknowledged, so without this bound a sender could run any
/// distance ahead of the receives.
pub const EAGER_AHEAD: usize = 16;

/// One buffer of a receive.
#[derive(Debug, Clone)]
pub struct RecvBuf {
    /// Where the data goes.
    pub buf: Buffer,
    /// Offset in `buf`, bytes.
    pub offset: usize,
    /// Posted size, bytes: the largest send this buffer accepts.
    pub len: usize,
    /// Tag: which send lands here (in a grouped receive).
    pub tag: i32,
}

/// Where a buffer lies in registered memory: a receive's (what its CTS announces so that the
/// sender can RDMA WRITE into it), or a send's (where the sender's WRITEs gather from).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    /// Virtual address of the buffer's first byte (RETH VA; a send's SGE address).
    pub va: u64,
    /// The region's key on each rail of the connection, in rail order: the rkey of a
    /// receive's memory, the lkey of a send's (the soft provider's keys are both).
    pub keys: RailKeys,
}

/// Bytes of message data a connection end moved, by path.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PlacementStats {
    /// Received bytes a sender RDMA WROTE into registered memory (never copied here).
    pub placed: u64,
    /// Received bytes copied from DATA frames into the receive buffer.
    pub copied: u64,
    /// Sent bytes as placed chunks.
    pub sent_placed: u64,
    /// Sent bytes in DATA frames.
    pub sent_copied: u64,
    /// Of `sent_placed`, the bytes WRITTEN straight from memory registered on this end (not
    /// copied into a send slot first).
    pub sent_from_registration: u64,
}

#[derive(Debug)]
enum SendStatus {
    /// Waiting for the receive it will match.
    Unmatched,
    /// Frames queued or in flight.
    Sending {
        frames_left: usize,
    },
    Done,
    Failed(MeshError),
}

#[derive(Debug)]
struct SendState {
    buf: Buffer,
    /// The send's bytes in memory registered on this end: placed chunks are WRITTEN from
    /// there instead of from a send slot.
    local: Option<Placement>,
    offset: usize,
    len: usize,
    tag: i32,
    status: SendStatus,
}

#[derive(Debug, Clone)]
struct CtsEntry {
    size: u64,
    tag: i32,
    matched: bool,
    place: Option<Placement>,
}

#[derive(Debug)]
struct BufState {
    req: RecvBuf,
    total: Option<u64>,
    received: u64,
    seen: HashSet<u64>,
    done: bool,
    error: Option<MeshError>,
    /// Announced with a placement: placed DATA frames may fill it.
    placed: bool,
}

#[derive(Debug)]
struct RecvState {
    bufs: Vec<BufState>,
}

/// Eager sends of one connection end, agreed in the handshake (`messages::Accept::eager_bytes`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Eager {
    /// Largest send, bytes, that goes before its CTS (what the peer takes, capped by this
    /// node's `RDMESH_EAGER_BYTES`); 0: every send waits for its CTS.
    pub send_bytes: usize,
    /// This end takes eager DATA frames (and so refuses grouped receives).
    pub accept: bool,
}

/// An eager DATA frame that came before its receive was posted.
#[derive(Debug)]
struct Early {
    tag: i32,
    payload: Vec<u8>,
}

/// The size of each buffer's send in a completed receive (bytes, buffer order; at most
/// [`MAX_RECVS`], held without allocation).
pub type RecvSizes = heapless::Vec<usize, MAX_RECVS>;

/// A frame for the rails: which rail (`None`: any), the token to report on completion, the
/// bytes.
pub type OutFrame = (Option<usize>, u64, FrameBody);

/// The tagged-messaging state of one connection end (see the module docs).
#[derive(Debug)]
pub struct Tagged {
    peer: String,
    max_requests: usize,
    stripe_min: usize,
    live: Vec<(usize, f64)>,
    next_send_id: u64,
    sends: BTreeMap<u64, SendState>,
    unmatched: VecDeque<u64>,
    /// CTS frames not matched yet, by receive: one entry per buffer (at most
    /// [`MAX_RECVS`], kept inline: no allocation per CTS).
    cts: BTreeMap<u64, heapless::Vec<CtsEntry, MAX_RECVS>>,
    cts_next: u64,
    next_recv_seq: u64,
    recvs: BTreeMap<u64, RecvState>,
    outbox: Vec<OutFrame>,
    failed: Option<MeshError>,
    eager: Eager,
    /// Sends that went eagerly and whose CTS has not come yet: id (= seq) → (size, tag).
    eager_sent: BTreeMap<u64, (usize, i32)>,
    /// Eager frames that came before their receive: seq → frame.
    early: BTreeMap<u64, Early>,
    /// Whether this end uses placements (a direct connection): announces them in CTS frames
    /// and writes into those the peer announces.
    placement: bool,
    /// Rails of the connection (the length of a placement's rkey list).
    rails: usize,
    /// Largest chunk WRITTEN straight from registered memory, bytes.
    placed_chunk: usize,
    stats: PlacementStats,
}

impl Tagged {
    /// A connection end talking to `peer` (named in errors). `max_requests` is raised to 32.
    pub fn new(peer: String, max_requests: usize, stripe_min: usize) -> Tagged {
        Tagged {
            peer,
            max_requests: max_requests.max(NCCL_NET_MAX_REQUESTS),
            stripe_min,
            live: Vec::new(),
            next_send_id: 0,
            sends: BTreeMap::new(),
            unmatched: VecDeque::new(),
            cts: BTreeMap::new(),
            cts_next: 0,
            next_recv_seq: 0,
            recvs: BTreeMap::new(),
            outbox: Vec::new(),
            failed: None,
            eager: Eager::default(),
            eager_sent: BTreeMap::new(),
            early: BTreeMap::new(),
            placement: false,
            rails: 0,
            placed_chunk: DATA_CHUNK,
            stats: PlacementStats::default(),
        }
    }

    /// The same end with the eager sends agreed in the handshake.
    pub fn with_eager(mut self, eager: Eager) -> Tagged {
        self.eager = Eager {
            send_bytes: eager.send_bytes.min(DATA_CHUNK),
            accept: eager.accept,
        };
        self
    }

    /// The same end with direct placement: `rails` > 0 turns it on (a direct connection of
    /// `rails` rails: CTS frames announce placements, and the peer's are used), 0 leaves it
    /// off (an older peer's behaviour, or a relayed connection). `placed_chunk`: the largest
    /// chunk, bytes, of a send WRITTEN straight from registered memory (no send slot limits
    /// it; raised to at least [`DATA_CHUNK`]).
    pub fn with_placement(mut self, rails: usize, placed_chunk: usize) -> Tagged {
        self.placement = rails > 0;
        self.rails = rails;
        self.placed_chunk = placed_chunk.max(DATA_CHUNK);
        self
    }

    /// Bytes moved so far, by path.
    pub fn stats(&self) -> PlacementStats {
        self.stats
    }

    /// The rails that work now, `(index, weight)`, first rail first: where new sends go.
    pub fn set_live_rails(&mut self, live: Vec<(usize, f64)>) {
        self.live = live;
    }

    /// Frames to hand to the rails (the outbox keeps its capacity: no allocation per
    /// message).
    pub fn take_outbox(&mut self) -> std::vec::Drain<'_, OutFrame> {
        self.outbox.drain(..)
    }

    /// The connection's failure, if any.
    pub fn failure(&self) -> Option<&MeshError> {
        self.failed.as_ref()
    }

    /// Fails the connection: every request not complete yet fails with `e` (first error wins).
    pub fn fail(&mut self, e: MeshError) {
        if self.failed.is_none() {
            self.failed = Some(e);
        }
    }

    /// Whether requests are outstanding (someone waits on the peer).
    pub fn waiting(&self) -> bool {
        self.sends
            .values()
            .any(|s| matches!(s.status, SendStatus::Unmatched | SendStatus::Sending { .. }))
            || self
                .recvs
                .values()
                .any(|r| r.bufs.iter().any(|b| !b.done && b.error.is_none()))
    }

    /// Starts a send of `len` bytes of `buf` at `offset` with `tag`. `Ok(None)`: too many
    /// requests in flight, try again later.
    ///
    /// Errors: the connection's failure; [`MeshError::Request`] for a bad range.
    pub fn isend(
        &mut self,
        buf: &Buffer,
        offset: usize,
        len: usize,
        tag: i32,
    ) -> Result<Option<u64>, MeshError> {
        self.isend_registered(buf, offset, len, tag, None)
    }

    /// [`Tagged::isend`] of bytes that also lie in memory registered on this end (`local`:
    /// the address of the send's first byte and the lkey per rail): chunks placed into the
    /// receiver's memory are RDMA WRITTEN straight from there (no copy into a send slot).
    ///
    /// Errors: as [`Tagged::isend`].
    pub fn isend_registered(
        &mut self,
        buf: &Buffer,
        offset: usize,
        len: usize,
        tag: i32,
        local: Option<Placement>,
    ) -> Result<Option<u64>, MeshError> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        buf.check_range(offset, len)?;
        if self.sends.len() >= self.max_requests {
            return Ok(None);
        }
        let id = self.next_send_id;
        self.next_send_id += 1;
        let mut status = SendStatus::Unmatched;
        if self.eager.send_bytes > 0
            && len <= self.eager.send_bytes
            && !self.cts.contains_key(&id)
            && self.eager_sent.len() < EAGER_AHEAD
        {
            // Its CTS has not come: send it now, in one frame, for receive `id`.
            if let [c] = stripe::plan(len, &self.live, self.stripe_min, DATA_CHUNK)[..] {
                let header = FrameRepr {
                    flags: FLAG_EAGER,
                    seq: id,
                    total: len as u64,
                    tag,
                    ..FrameRepr::new(FrameKind::Data)
                }
                .to_bytes();
                self.outbox.push((
                    Some(c.rail),
                    id,
                    FrameBody::Chunk {
                        header,
                        buf: buf.clone(),
                        offset,
                        len,
                    },
                ));
                self.eager_sent.insert(id, (len, tag));
                status = SendStatus::Sending { frames_left: 1 };
            }
        }
        let unmatched = matches!(status, SendStatus::Unmatched);
        self.sends.insert(
            id,
            SendState {
                buf: buf.clone(),
                local: local.filter(|l| l.keys.len() == self.rails),
                offset,
                len,
                tag,
                status,
            },
        );
        if unmatched {
            self.unmatched.push_back(id);
        }
        self.match_sends();
        Ok(Some(id))
    }

    /// Posts a receive into `bufs` (1 to 8 buffers). `Ok(None)`: too many requests in flight.
    ///
    /// Errors: the connection's failure; [`MeshError::Request`] for no buffers, more than 8,
    /// or a bad range.
    pub fn irecv(&mut self, bufs: &[RecvBuf]) -> Result<Option<u64>, MeshError> {
        self.irecv_placed(bufs, &[])
    }

    /// [`Tagged::irecv`] with a placement for each buffer that lies in registered memory
    /// (`places[i]` for `bufs[i]`; missing entries: none). Placements are announced only when
    /// this end uses placement ([`Tagged::with_placement`]) and each rkey list has one rkey per
    /// rail.
    ///
    /// Errors: as [`Tagged::irecv`].
    pub fn irecv_placed(
        &mut self,
        bufs: &[RecvBuf],
        places: &[Option<Placement>],
    ) -> Result<Option<u64>, MeshError> {
        // A message that came eagerly is still received after the peer closed (its send
        // completed when the frame was acknowledged, so the peer may be gone by now).
        let arrived = self.early.contains_key(&self.next_recv_seq);
        if let Some(e) = self.failed.as_ref().filter(|_| !arrived) {
            return Err(e.clone());
        }
        if bufs.is_empty() || bufs.len() > MAX_RECVS {
            return Err(MeshError::Request(format!(
                "a receive has 1 to {MAX_RECVS} buffers, not {}",
                bufs.len()
            )));
        }
        if bufs.len() > 1 && self.eager.accept {
            return Err(MeshError::Request(format!(
                "a grouped receive of {} buffers is refused on a connection that takes eager \
                 sends (its sender could not tell which receive a send meets); set \
                 RDMESH_EAGER_BYTES=0 on the receiving node",
                bufs.len()
            )));
        }
        for b in bufs {
            b.buf.check_range(b.offset, b.len)?;
        }
        if self.recvs.len() >= self.max_requests {
            return Ok(None);
        }
        let seq = self.next_recv_seq;
        self.next_recv_seq += 1;
        // At most MAX_RECVS buffers (checked above): on the stack, no allocation.
        let entries: heapless::Vec<(u64, i32), MAX_RECVS> =
            bufs.iter().map(|b| (b.len as u64, b.tag)).collect();
        let places: heapless::Vec<Option<(u64, &[u32])>, MAX_RECVS> = (0..bufs.len())
            .map(|i| {
                places
                    .get(i)
                    .and_then(Option::as_ref)
                    .filter(|p| self.placement && p.keys.len() == self.rails && p.va != 0)
                    .map(|p| (p.va, &p.keys[..]))
            })
            .collect();
        let cts = cts_frame_placed(seq, &entries, &places, self.rails);
        let placed = cts[1] & FLAG_PLACED != 0;
        if self.failed.is_none() {
            self.outbox.push((None, NO_TOKEN, FrameBody::Bytes(cts)));
        }
        self.recvs.insert(
            seq,
            RecvState {
                bufs: bufs
                    .iter()
                    .zip(&places)
                    .map(|(b, p)| BufState {
                        req: b.clone(),
                        total: None,
                        received: 0,
                        seen: HashSet::new(),
                        done: false,
                        error: None,
                        placed: placed && p.is_some(),
                    })
                    .collect(),
            },
        );
        if let Some(e) = self.early.remove(&seq) {
            let r = FrameRepr {
                flags: FLAG_EAGER,
                seq,
                total: e.payload.len() as u64,
                tag: e.tag,
                ..FrameRepr::new(FrameKind::Data)
            };
            self.on_data(&r, &e.payload, None);
        }
        Ok(Some(seq))
    }

    fn match_sends(&mut self) {
        loop {
            if let Some(&(len, tag)) = self.eager_sent.get(&self.cts_next) {
                let seq = self.cts_next;
                let Some(entries) = self.cts.remove(&seq) else {
                    return;
                };
                self.eager_sent.remove(&seq);
                self.cts_next += 1;
                self.check_eager_cts(seq, len, tag, &entries);
                continue;
            }
            let Some(&id) = self.unmatched.front() else {
                return;
            };
            let Some(entries) = self.cts.get_mut(&self.cts_next) else {
                return;
            };
            let seq = self.cts_next;
            if entries.iter().all(|e| e.matched) {
                self.cts.remove(&seq);
                self.cts_next += 1;
                continue;
            }
            self.unmatched.pop_front();
            let s = self.sends.get_mut(&id).expect("unmatched sends exist");
            let Some(index) = entries.iter().position(|e| !e.matched && e.tag == s.tag) else {
                s.status = SendStatus::Failed(MeshError::TagMismatch {
                    tag: s.tag,
                    seq,
                    tags: entries
                        .iter()
                        .filter(|e| !e.matched)
                        .map(|e| e.tag)
                        .collect(),
                });
                continue;
            };
            let entry = &mut entries[index];
            entry.matched = true;
            let header = |offset: u64| {
                FrameRepr {
                    index: index as u8,
                    seq,
                    total: s.len as u64,
                    offset,
                    tag: s.tag,
                    ..FrameRepr::new(FrameKind::Data)
                }
                .to_bytes()
            };
            let place = entry.place.clone();
            if s.len as u64 > entry.size {
                s.status = SendStatus::Failed(MeshError::Truncated {
                    send: s.len as u64,
                    recv: entry.size,
                    tag: s.tag,
                    seq,
                    index: index as u8,
                });
                let mut abort = header(0);
                abort[0] = FrameKind::Abort.into();
                self.outbox
                    .push((None, NO_TOKEN, FrameBody::Bytes(abort.to_vec())));
            } else {
                let place = place.filter(|_| self.placement && s.len > 0);
                let placed = place.is_some();
                // A chunk WRITTEN from registered memory needs no send slot: larger chunks.
                let max_chunk = if placed && s.local.is_some() {
                    self.placed_chunk
                } else {
                    DATA_CHUNK
                };
                let chunks = stripe::plan(s.len, &self.live, self.stripe_min, max_chunk);
                if chunks.is_empty() {
                    // No rail left: the connection fails in this same progress step.
                    s.status = SendStatus::Failed(self.failed.clone().unwrap_or_else(|| {
                        MeshError::Host(format!("no rail left to {}", self.peer))
                    }));
                } else {
                    s.status = SendStatus::Sending {
                        frames_left: chunks.len(),
                    };
                    for c in chunks {
                        let body = match &place {
                            Some(p) => {
                                let mut header = header(c.offset as u64);
                                header[1] = FLAG_PLACED;
                                FrameBody::Placed {
                                    header,
                                    buf: s.buf.clone(),
                                    offset: s.offset + c.offset,
                                    len: c.len,
                                    remote_va: p.va + c.offset as u64,
                                    rkeys: p.keys.clone(),
                                    local: s.local.as_ref().map(|l| Placement {
                                        va: l.va + c.offset as u64,
                                        keys: l.keys.clone(),
                                    }),
                                }
                            }
                            None => FrameBody::Chunk {
                                header: header(c.offset as u64),
                                buf: s.buf.clone(),
                                offset: s.offset + c.offset,
                                len: c.len,
                            },
                        };
                        self.outbox.push((Some(c.rail), id, body));
                    }
                    if placed {
                        self.stats.sent_placed += s.len as u64;
                        if s.local.is_some() {
                            self.stats.sent_from_registration += s.len as u64;
                        }
                    } else {
                        self.stats.sent_copied += s.len as u64;
                    }
                }
            }
            if entries.iter().all(|e| e.matched) {
                self.cts.remove(&seq);
                self.cts_next += 1;
            }
        }
    }

    /// The CTS of receive `seq` came after send `seq` went eagerly (`len` bytes, `tag`): the
    /// receive must be one buffer that takes it. The receiving end fails its receive by the
    /// same rule; this end fails the send if it is still in flight.
    fn check_eager_cts(&mut self, seq: u64, len: usize, tag: i32, entries: &[CtsEntry]) {
        let error = match entries {
            [e] if e.tag != tag => Some(MeshError::TagMismatch {
                tag,
                seq,
                tags: vec![e.tag],
            }),
            [e] if (len as u64) > e.size => Some(MeshError::Truncated {
                send: len as u64,
                recv: e.size,
                tag,
                seq,
                index: 0,
            }),
            [_] => None,
            _ => {
                return self.protocol(format!(
                    "CTS of {} buffers for receive #{seq}, which took an eager send",
                    entries.len()
                ))
            }
        };
        if let (Some(e), Some(s)) = (error, self.sends.get_mut(&seq)) {
            s.status = SendStatus::Failed(e);
        }
    }

    /// The SEND of a frame with `token` completed.
    pub fn on_sent(&mut self, token: u64) {
        if let Some(s) = self.sends.get_mut(&token) {
            if let SendStatus::Sending { frames_left } = &mut s.status {
                *frames_left = frames_left.saturating_sub(1);
                if *frames_left == 0 {
                    s.status = SendStatus::Done;
                }
            }
        }
    }

    fn protocol(&mut self, reason: String) {
        tracing::warn!(peer = %self.peer, %reason, "mesh protocol error");
        self.fail(MeshError::Protocol {
            peer: self.peer.clone(),
            reason,
        });
    }

    /// Handles one received frame (end-to-end kinds; hop-local ones never get here).
    pub fn on_frame(&mut self, bytes: &[u8]) {
        let f = match Frame::new_checked(bytes) {
            Ok(f) => f,
            Err(e) => return self.protocol(format!("{e} ({} bytes)", bytes.len())),
        };
        let r = match FrameRepr::parse(&f) {
            Ok(r) => r,
            Err(e) => return self.protocol(e.to_string()),
        };
        match r.kind {
            FrameKind::Data | FrameKind::Abort => {
                let placed = f.placed_len();
                self.on_data(&r, f.payload(), placed)
            }
            FrameKind::Cts => {
                if r.seq < self.cts_next || self.cts.contains_key(&r.seq) {
                    return; // a CTS resent after a rail failure
                }
                if r.seq >= self.cts_next + 1_000_000 {
                    return self.protocol(format!(
                        "CTS for receive #{} while #{} is the oldest pending",
                        r.seq, self.cts_next
                    ));
                }
                let rails = self.rails;
                let entries = (0..usize::from(r.count).min(MAX_RECVS))
                    .filter_map(|i| f.cts_entry(i).map(|e| (i, e)))
                    .map(|(i, (size, tag))| CtsEntry {
                        size,
                        tag,
                        matched: false,
                        place: f
                            .cts_placement(i)
                            .filter(|(_, keys)| keys.len() == rails)
                            .map(|(va, keys)| Placement { va, keys }),
                    })
                    .collect();
                self.cts.insert(r.seq, entries);
                self.match_sends();
            }
            FrameKind::Close => {
                let why = String::from_utf8_lossy(f.payload()).into_owned();
                self.fail(MeshError::Closed(format!("{}: {why}", self.peer)));
            }
            FrameKind::Fail => {
                let why = String::from_utf8_lossy(f.payload()).into_owned();
                self.fail(MeshError::LinkDown {
                    link: format!("beyond the relay to {}", self.peer),
                    reason: why,
                });
            }
            FrameKind::RailDown | FrameKind::Unknown(_) => {}
        }
    }

    /// A DATA (or ABORT) frame; `placed`: the length of a placed chunk (its bytes are in the
    /// buffer already, `payload` holds only that length).
    fn on_data(&mut self, r: &FrameRepr, payload: &[u8], placed: Option<u64>) {
        let eager = r.flags & FLAG_EAGER != 0;
        if eager && !self.eager.accept {
            return self.protocol(format!(
                "eager DATA for receive #{} on a connection that did not agree to eager sends",
                r.seq
            ));
        }
        let Some(recv) = self.recvs.get_mut(&r.seq) else {
            if eager && r.seq >= self.next_recv_seq {
                if self.early.len() >= self.max_requests {
                    return self.protocol(format!(
                        "more than {} eager sends ahead of the receives posted",
                        self.max_requests
                    ));
                }
                self.early.entry(r.seq).or_insert_with(|| Early {
                    tag: r.tag,
                    payload: payload.to_vec(),
                });
                return;
            }
            if r.seq >= self.next_recv_seq {
                self.protocol(format!(
                    "{:?} for receive #{} which was never posted",
                    r.kind, r.seq
                ));
            }
            return; // a duplicate for a receive already completed
        };
        let nbufs = recv.bufs.len();
        let Some(b) = recv.bufs.get_mut(usize::from(r.index)) else {
            return self.protocol(format!(
                "{:?} for buffer {} of receive #{} which has {nbufs}",
                r.kind, r.index, r.seq
            ));
        };
        if b.done || b.error.is_some() {
            return;
        }
        if eager && r.tag != b.req.tag {
            b.error = Some(MeshError::TagMismatch {
                tag: r.tag,
                seq: r.seq,
                tags: vec![b.req.tag],
            });
            return;
        }
        if r.kind == FrameKind::Abort || r.total > b.req.len as u64 {
            b.error = Some(MeshError::Truncated {
                send: r.total,
                recv: b.req.len as u64,
                tag: r.tag,
                seq: r.seq,
                index: r.index,
            });
            return;
        }
        if b.total.is_some_and(|t| t != r.total) {
            let t = b.total;
            return self.protocol(format!(
                "chunks of receive #{} buffer {} disagree on the send size ({t:?} and {})",
                r.seq, r.index, r.total
            ));
        }
        if placed.is_some() && !b.placed {
            let (seq, index) = (r.seq, r.index);
            return self.protocol(format!(
                "placed DATA for buffer {index} of receive #{seq}, which announced no placement"
            ));
        }
        b.total = Some(r.total);
        // A chunk that is the whole message (the usual small one) needs no record of the
        // offsets seen: a duplicate finds the buffer done.
        let whole = b.received == 0 && placed.unwrap_or(payload.len() as u64) >= r.total;
        if whole || b.seen.insert(r.offset) {
            match placed {
                Some(n) => {
                    b.received += n;
                    self.stats.placed += n;
                }
                None => {
                    if let Err(e) = b.req.buf.write(b.req.offset + r.offset as usize, payload) {
                        b.error = Some(e);
                        return;
                    }
                    b.received += payload.len() as u64;
                    self.stats.copied += payload.len() as u64;
                }
            }
        }
        if b.received >= r.total {
            b.done = true;
            b.seen = HashSet::new();
        }
    }

    /// NCCL's `test` for send `id`: `Ok(Some(size))` once done (the request is then gone),
    /// `Ok(None)` while in flight.
    ///
    /// Errors: the send's error ([`MeshError::Truncated`], [`MeshError::TagMismatch`]) or the
    /// connection's; [`MeshError::Request`] for an unknown id.
    pub fn test_send(&mut self, id: u64) -> Result<Option<usize>, MeshError> {
        let Some(s) = self.sends.get(&id) else {
            return Err(MeshError::Request(format!(
                "send request {id} is unknown (already completed?)"
            )));
        };
        match &s.status {
            SendStatus::Done => {
                let len = s.len;
                self.sends.remove(&id);
                Ok(Some(len))
            }
            SendStatus::Failed(e) => {
                let e = e.clone();
                self.sends.remove(&id);
                Err(e)
            }
            _ => match &self.failed {
                Some(e) => {
                    let e = e.clone();
                    self.sends.remove(&id);
                    self.unmatched.retain(|&u| u != id);
                    Err(e)
                }
                None => Ok(None),
            },
        }
    }

    /// NCCL's `test` for receive `seq`: `Ok(Some(sizes))` (the actual size of each buffer's
    /// send) once every buffer is filled, `Ok(None)` while in flight.
    ///
    /// Errors: a buffer's error (e.g. [`MeshError::Truncated`]) or the connection's;
    /// [`MeshError::Request`] for an unknown sequence number.
    pub fn test_recv(&mut self, seq: u64) -> Result<Option<RecvSizes>, MeshError> {
        let Some(r) = self.recvs.get(&seq) else {
            return Err(MeshError::Request(format!(
                "receive request {seq} is unknown (already completed?)"
            )));
        };
        if let Some(e) = r.bufs.iter().find_map(|b| b.error.clone()) {
            self.recvs.remove(&seq);
            return Err(e);
        }
        if r.bufs.iter().all(|b| b.done) {
            let sizes = r
                .bufs
                .iter()
                .map(|b| b.total.unwrap_or(0) as usize)
                .collect();
            self.recvs.remove(&seq);
            return Ok(Some(sizes));
        }
        match &self.failed {
            Some(e) => {
                let e = e.clone();
                self.recvs.remove(&seq);
                Err(e)
            }
            None => Ok(None),
        }
    }

    /// Requests outstanding (sends, receives).
    pub fn outstanding(&self) -> (usize, usize) {
        (self.sends.len(), self.recvs.len())
    }
}

#[cfg(test)]
mod test {
    use super::*;
    use crate::mesh::frame::text_frame;

    /// The bytes a rail sends for a frame that carries its payload (not a placed chunk).
    fn wire(body: &FrameBody) -> Vec<u8> {
        assert!(
            !matches!(body, FrameBody::Placed { .. }),
            "a placed chunk needs deliver_placed"
        );
        let mut v = vec![0u8; body.len()];
        body.write_into(&mut v).unwrap();
        v
    }

    /// Moves every frame from `a` to `b` as the rails would (all on one rail), acknowledging
    /// each one to `a`.
    fn deliver(a: &mut Tagged, b: &mut Tagged) -> usize {
        let out = a.take_outbox().collect::<Vec<_>>();
        let n = out.len();
        for (_, token, body) in out {
            b.on_frame(&wire(&body));
            a.on_sent(token);
        }
        n
    }

    /// [`deliver`] where placed chunks are "RDMA WRITTEN" into `mem`, whose first byte has
    /// the virtual address `base`, before their frame arrives.
    fn deliver_placed(a: &mut Tagged, b: &mut Tagged, mem: &Buffer, base: u64) -> usize {
        let out = a.take_outbox().collect::<Vec<_>>();
        let n = out.len();
        for (_, token, body) in out {
            let mut v = vec![0u8; body.len()];
            match &body {
                FrameBody::Placed {
                    header,
                    buf,
                    offset,
                    len,
                    remote_va,
                    rkeys,
                    ..
                } => {
                    assert_eq!(rkeys[..], [7, 8]);
                    let mut chunk = vec![0u8; *len];
                    buf.read(*offset, &mut chunk).unwrap();
                    mem.write((remote_va - base) as usize, &chunk).unwrap();
                    v[..32].copy_from_slice(header);
                    v[32..].copy_from_slice(&(*len as u64).to_be_bytes());
                }
                other => v = wire(other),
            }
            b.on_frame(&v);
            a.on_sent(token);
        }
        n
    }

    /// A receive into "registered" memory at address 0x1000 (+ 100 for the buffer), a
    /// 300 KiB send; `sender` and `receiver`: whether each end uses placement.
    fn placed_exchange(sender: bool, receiver: bool) -> (PlacementStats, PlacementStats) {
        let (s, r) = pair();
        let mut s = s.with_placement(if sender { 2 } else { 0 }, DATA_CHUNK);
        let mut r = r.with_placement(if receiver { 2 } else { 0 }, DATA_CHUNK);
        let mem = Buffer::new(400_000);
        let place = Placement {
            va: 0x1000 + 100,
            keys: RailKeys::from_slice(&[7, 8]).unwrap(),
        };
        let seq = r
            .irecv_placed(
                &[RecvBuf {
                    buf: mem.clone(),
                    offset: 100,
                    len: 350_000,
                    tag: 0,
                }],
                &[Some(place)],
            )
            .unwrap()
            .unwrap();
        deliver(&mut r, &mut s);
        let src = pattern(300_000, 3);
        let id = s.isend(&src, 0, 300_000, 0).unwrap().unwrap();
        deliver_placed(&mut s, &mut r, &mem, 0x1000);
        assert_eq!(s.test_send(id).unwrap(), Some(300_000));
        assert_eq!(r.test_recv(seq).unwrap().as_deref(), Some(&[300_000][..]));
        assert_eq!(mem.to_vec()[100..300_100], src.to_vec()[..]);
        (s.stats(), r.stats())
    }

    #[test]
    fn placement_when_both_ends_use_it_copies_otherwise() {
        let (s, r) = placed_exchange(true, true);
        assert_eq!((s.sent_placed, s.sent_copied), (300_000, 0));
        assert_eq!((r.placed, r.copied), (300_000, 0));
        // An end without placement (an older peer): the receiver announces none, or the
        // sender ignores the announcement; DATA frames are copied.
        for (sender, receiver) in [(false, true), (true, false)] {
            let (s, r) = placed_exchange(sender, receiver);
            assert_eq!((s.sent_placed, s.sent_copied), (0, 300_000));
            assert_eq!((r.placed, r.copied), (0, 300_000));
        }
    }

    #[test]
    fn placed_data_for_an_unregistered_buffer_fails_the_connection() {
        let (_, r) = pair();
        let mut r = r.with_placement(2, DATA_CHUNK);
        let seq = r
            .irecv(&[RecvBuf {
                buf: Buffer::new(100),
                offset: 0,
                len: 100,
                tag: 0,
            }])
            .unwrap()
            .unwrap();
        let mut v = FrameRepr {
            flags: FLAG_PLACED,
            seq,
            total: 50,
            ..FrameRepr::new(FrameKind::Data)
        }
        .to_bytes()
        .to_vec();
        v.extend_from_slice(&50u64.to_be_bytes());
        r.on_frame(&v);
        let e = r.test_recv(seq).unwrap_err().to_string();
        assert!(e.contains("announced no placement"), "{e}");
    }

    fn pair() -> (Tagged, Tagged) {
        let mut s = Tagged::new("receiver".into(), 32, 65536);
        let mut r = Tagged::new("sender".into(), 32, 65536);
        s.set_live_rails(vec![(0, 1.0), (1, 3.0)]);
        r.set_live_rails(vec![(0, 1.0)]);
        (s, r)
    }

    fn pattern(len: usize, seed: u8) -> Buffer {
        Buffer::from_vec((0..len).map(|i| (i as u8).wrapping_mul(7) ^ seed).collect())
    }

    #[test]
    fn fifo_matching_actual_sizes_and_striping() {
        let (mut s, mut r) = pair();
        let dst1 = Buffer::new(1 << 20);
        let dst2 = Buffer::new(4096);
        let q1 = r
            .irecv(&[RecvBuf {
                buf: dst1.clone(),
                offset: 0,
                len: 1 << 20,
                tag: 7,
            }])
            .unwrap()
            .unwrap();
        let q2 = r
            .irecv(&[RecvBuf {
                buf: dst2.clone(),
                offset: 0,
                len: 4096,
                tag: 7,
            }])
            .unwrap()
            .unwrap();
        // Sends posted before the CTS arrives wait for it.
        let big = pattern(300_000, 1);
        let small = pattern(100, 2);
        let a = s.isend(&big, 0, 300_000, 7).unwrap().unwrap();
        let b = s.isend(&small, 0, 100, 7).unwrap().unwrap();
        assert_eq!(s.test_send(a).unwrap(), None);
        deliver(&mut r, &mut s);
        // The big send is striped 1:3 over rails 0 and 1; the small one goes on the first.
        let out = s.take_outbox().collect::<Vec<_>>();
        let per_rail = |rail| -> usize {
            out.iter()
                .filter(|o| o.0 == Some(rail) && o.1 == a)
                .map(|o| o.2.len() - 32)
                .sum()
        };
        assert_eq!(per_rail(0) + per_rail(1), 300_000);
        assert!((per_rail(0) as f64 / 300_000.0 - 0.25).abs() < 0.01);
        assert!(out.iter().filter(|o| o.1 == b).all(|o| o.0 == Some(0)));
        // Deliver in reverse order: reassembly in place does not care.
        for (_, token, body) in out.into_iter().rev() {
            if let FrameBody::Chunk {
                header,
                buf,
                offset,
                len,
            } = body
            {
                let mut v = header.to_vec();
                v.extend_from_slice(&buf.to_vec()[offset..offset + len]);
                r.on_frame(&v);
                r.on_frame(&v); // duplicates are ignored
                s.on_sent(token);
            }
        }
        assert_eq!(r.test_recv(q1).unwrap().as_deref(), Some(&[300_000][..]));
        assert_eq!(r.test_recv(q2).unwrap().as_deref(), Some(&[100][..]));
        assert_eq!(&dst1.to_vec()[..300_000], &big.to_vec()[..]);
        assert_eq!(&dst2.to_vec()[..100], &small.to_vec()[..]);
        assert_eq!(s.test_send(a).unwrap(), Some(300_000));
        assert_eq!(s.test_send(b).unwrap(), Some(100));
        assert!(s.test_send(a).is_err(), "a completed request is gone");
    }

    #[test]
    fn larger_send_fails_on_both_ends_naming_both_sizes() {
        let (mut s, mut r) = pair();
        let q = r
            .irecv(&[RecvBuf {
                buf: Buffer::new(64),
                offset: 0,
                len: 64,
                tag: 1,
            }])
            .unwrap()
            .unwrap();
        deliver(&mut r, &mut s);
        let id = s.isend(&pattern(65, 0), 0, 65, 1).unwrap().unwrap();
        let e = s.test_send(id).unwrap_err().to_string();
        assert!(
            e.contains("send of 65 bytes") && e.contains("receive of 64 bytes"),
            "{e}"
        );
        deliver(&mut s, &mut r);
        let e = r.test_recv(q).unwrap_err().to_string();
        assert!(
            e.contains("send of 65 bytes") && e.contains("receive of 64 bytes"),
            "{e}"
        );
        // The connection goes on: the next pair matches.
        let q = r
            .irecv(&[RecvBuf {
                buf: Buffer::new(64),
                offset: 0,
                len: 64,
                tag: 1,
            }])
            .unwrap()
            .unwrap();
        deliver(&mut r, &mut s);
        let id = s.isend(&pattern(0, 0), 0, 0, 1).unwrap().unwrap();
        deliver(&mut s, &mut r);
        assert_eq!(r.test_recv(q).unwrap().as_deref(), Some(&[0][..]));
        assert_eq!(s.test_send(id).unwrap(), Some(0));
    }

    #[test]
    fn grouped_receive_matches_by_tag_and_rejects_strangers() {
        let (mut s, mut r) = pair();
        let bufs: Vec<RecvBuf> = (0..3)
            .map(|t| RecvBuf {
                buf: Buffer::new(1000),
                offset: 0,
                len: 1000,
                tag: 10 + t,
            })
            .collect();
        let q = r.irecv(&bufs).unwrap().unwrap();
        deliver(&mut r, &mut s);
        let x = s.isend(&pattern(5, 0), 0, 5, 12).unwrap().unwrap();
        let y = s.isend(&pattern(9, 0), 0, 9, 99).unwrap().unwrap();
        let e = s.test_send(y).unwrap_err().to_string();
        assert!(e.contains("tag 99") && e.contains("[10, 11]"), "{e}");
        let z = s.isend(&pattern(7, 0), 0, 7, 10).unwrap().unwrap();
        let w = s.isend(&pattern(3, 0), 0, 3, 11).unwrap().unwrap();
        deliver(&mut s, &mut r);
        assert_eq!(r.test_recv(q).unwrap().as_deref(), Some(&[7, 3, 5][..]));
        for id in [x, z, w] {
            assert!(s.test_send(id).unwrap().is_some());
        }
    }

    #[test]
    fn at_least_32_in_flight_then_not_now() {
        let (mut s, mut r) = pair();
        let buf = Buffer::new(8);
        for _ in 0..32 {
            assert!(s.isend(&buf, 0, 8, 0).unwrap().is_some());
            assert!(r
                .irecv(&[RecvBuf {
                    buf: buf.clone(),
                    offset: 0,
                    len: 8,
                    tag: 0
                }])
                .unwrap()
                .is_some());
        }
        assert!(s.isend(&buf, 0, 8, 0).unwrap().is_none());
        assert!(r.irecv(&[]).is_err());
        assert!(s.isend(&buf, 4, 8, 0).is_err(), "range past the buffer");
        s.fail(MeshError::Closed("test".into()));
        assert!(s.test_send(0).is_err());
        assert!(s.isend(&buf, 0, 1, 0).is_err());
    }

    fn eager_pair() -> (Tagged, Tagged) {
        let (s, r) = pair();
        let s = s.with_eager(Eager {
            send_bytes: 65536,
            accept: false,
        });
        let r = r.with_eager(Eager {
            send_bytes: 0,
            accept: true,
        });
        (s, r)
    }

    fn one(buf: &Buffer, len: usize, tag: i32) -> [RecvBuf; 1] {
        [RecvBuf {
            buf: buf.clone(),
            offset: 0,
            len,
            tag,
        }]
    }

    #[test]
    fn eager_sends_go_before_their_cts_and_keep_fifo_order() {
        let (mut s, mut r) = eager_pair();
        // Two small sends before any receive is posted: they leave at once.
        let m0 = pattern(100, 1);
        // (65535 bytes: below the striping threshold, one frame on one rail)
        let m1 = pattern(65535, 2);
        let a = s.isend(&m0, 0, 100, 3).unwrap().unwrap();
        let b = s.isend(&m1, 0, 65535, 3).unwrap().unwrap();
        assert_eq!(deliver(&mut s, &mut r), 2);
        assert_eq!(s.test_send(a).unwrap(), Some(100));
        assert_eq!(s.test_send(b).unwrap(), Some(65535));
        // A large one waits for its CTS.
        let big = pattern(300_000, 3);
        let c = s.isend(&big, 0, 300_000, 3).unwrap().unwrap();
        assert!(s.take_outbox().collect::<Vec<_>>().is_empty());
        // The receiver posts three receives: the first two complete from the kept frames.
        let d0 = Buffer::new(4096);
        let d1 = Buffer::new(65536);
        let d2 = Buffer::new(1 << 20);
        let q0 = r.irecv(&one(&d0, 4096, 3)).unwrap().unwrap();
        let q1 = r.irecv(&one(&d1, 65536, 3)).unwrap().unwrap();
        let q2 = r.irecv(&one(&d2, 1 << 20, 3)).unwrap().unwrap();
        assert_eq!(r.test_recv(q0).unwrap().as_deref(), Some(&[100][..]));
        assert_eq!(r.test_recv(q1).unwrap().as_deref(), Some(&[65535][..]));
        assert_eq!(r.test_recv(q2).unwrap(), None);
        // Their CTSs reach the sender: the first two are checked and skipped, the third
        // matches the large send.
        deliver(&mut r, &mut s);
        assert!(s.failure().is_none());
        deliver(&mut s, &mut r);
        assert_eq!(r.test_recv(q2).unwrap().as_deref(), Some(&[300_000][..]));
        assert_eq!(s.test_send(c).unwrap(), Some(300_000));
        assert_eq!(&d0.to_vec()[..100], &m0.to_vec()[..]);
        assert_eq!(&d1.to_vec()[..65535], &m1.to_vec()[..]);
        assert_eq!(&d2.to_vec()[..300_000], &big.to_vec()[..]);
        // A receive posted first: the small send matches its CTS the usual way.
        let d3 = Buffer::new(64);
        let q3 = r.irecv(&one(&d3, 64, 3)).unwrap().unwrap();
        deliver(&mut r, &mut s);
        let m3 = pattern(64, 4);
        let e = s.isend(&m3, 0, 64, 3).unwrap().unwrap();
        let out = s.take_outbox().collect::<Vec<_>>();
        assert_eq!(out.len(), 1);
        if let FrameBody::Chunk { header, .. } = &out[0].2 {
            assert_eq!(
                header[1], 0,
                "a send whose CTS is here is not flagged eager"
            );
        }
        s.outbox = out;
        deliver(&mut s, &mut r);
        assert_eq!(r.test_recv(q3).unwrap().as_deref(), Some(&[64][..]));
        assert_eq!(s.test_send(e).unwrap(), Some(64));
        assert_eq!(d3.to_vec(), m3.to_vec());
    }

    #[test]
    fn eager_sends_run_at_most_eager_ahead_before_the_receives() {
        let (mut s, mut r) = eager_pair();
        let m = pattern(100, 1);
        let n = EAGER_AHEAD + 4;
        let ids: Vec<u64> = (0..n)
            .map(|_| s.isend(&m, 0, 100, 3).unwrap().unwrap())
            .collect();
        assert_eq!(
            deliver(&mut s, &mut r),
            EAGER_AHEAD,
            "the rest wait for their CTS"
        );
        let d = Buffer::new(128 * n);
        let qs: Vec<u64> = (0..n)
            .map(|i| {
                let b = [RecvBuf {
                    buf: d.clone(),
                    offset: 128 * i,
                    len: 128,
                    tag: 3,
                }];
                r.irecv(&b).unwrap().unwrap()
            })
            .collect();
        deliver(&mut r, &mut s);
        assert_eq!(deliver(&mut s, &mut r), 4);
        for (id, q) in ids.into_iter().zip(qs) {
            assert_eq!(s.test_send(id).unwrap(), Some(100));
            assert_eq!(r.test_recv(q).unwrap().as_deref(), Some(&[100][..]));
        }
    }

    #[test]
    fn eager_messages_are_received_after_the_peer_closed() {
        let (mut s, mut r) = eager_pair();
        let m = pattern(100, 1);
        let a = s.isend(&m, 0, 100, 3).unwrap().unwrap();
        deliver(&mut s, &mut r);
        assert_eq!(s.test_send(a).unwrap(), Some(100));
        r.on_frame(&text_frame(FrameKind::Close, 0, "send side closed"));
        let d = Buffer::new(100);
        let q = r.irecv(&one(&d, 100, 3)).unwrap().unwrap();
        assert_eq!(r.test_recv(q).unwrap().as_deref(), Some(&[100][..]));
        assert_eq!(d.to_vec(), m.to_vec());
        assert!(
            r.take_outbox().collect::<Vec<_>>().is_empty(),
            "no CTS to a closed peer"
        );
        // Nothing more came: the next receive fails with the close.
        let e = r.irecv(&one(&d, 100, 3)).unwrap_err().to_string();
        assert!(e.contains("send side closed"), "{e}");
    }

    #[test]
    fn eager_sends_that_do_not_fit_fail_on_both_ends() {
        let (mut s, mut r) = eager_pair();
        let m = pattern(2000, 1);
        let a = s.isend(&m, 0, 2000, 3).unwrap().unwrap();
        let b = s.isend(&m, 0, 100, 4).unwrap().unwrap();
        // Keep the frames' acknowledgements back: the sends are still in flight.
        for (_, _, body) in &s.take_outbox().collect::<Vec<_>>() {
            r.on_frame(&wire(body));
        }
        let d = Buffer::new(4096);
        let q0 = r.irecv(&one(&d, 1000, 3)).unwrap().unwrap();
        let q1 = r.irecv(&one(&d, 1000, 9)).unwrap().unwrap();
        let e0 = r.test_recv(q0).unwrap_err().to_string();
        assert!(e0.contains("2000") && e0.contains("1000"), "{e0}");
        assert!(matches!(
            r.test_recv(q1),
            Err(MeshError::TagMismatch { tag: 4, .. })
        ));
        assert!(
            d.to_vec().iter().all(|&x| x == 0),
            "nothing written by a refused eager send"
        );
        deliver(&mut r, &mut s);
        assert!(matches!(
            s.test_send(a),
            Err(MeshError::Truncated {
                send: 2000,
                recv: 1000,
                ..
            })
        ));
        assert!(matches!(s.test_send(b), Err(MeshError::TagMismatch { .. })));
    }

    #[test]
    fn eager_frames_need_the_agreement_and_single_buffer_receives() {
        let (mut s, _) = eager_pair();
        let (_, mut plain) = pair();
        let m = pattern(10, 1);
        s.isend(&m, 0, 10, 0).unwrap().unwrap();
        deliver(&mut s, &mut plain);
        let e = plain.failure().unwrap().to_string();
        assert!(e.contains("did not agree to eager"), "{e}");
        let (_, mut r) = eager_pair();
        let d = Buffer::new(64);
        let grouped = [one(&d, 8, 1)[0].clone(), one(&d, 8, 2)[0].clone()];
        let e = r.irecv(&grouped).unwrap_err().to_string();
        assert!(e.contains("RDMESH_EAGER_BYTES=0"), "{e}");
    }

    #[test]
    fn garbage_frames_fail_the_connection_without_panicking() {
        let (_, mut r) = pair();
        r.on_frame(&[1, 2, 3]);
        assert!(matches!(r.failure(), Some(MeshError::Protocol { .. })));
        let (_, mut r) = pair();
        let mut d = FrameRepr {
            seq: 5,
            total: 4,
            ..FrameRepr::new(FrameKind::Data)
        }
        .to_bytes()
        .to_vec();
        d.extend_from_slice(&[0; 4]);
        r.on_frame(&d);
        let e = r.failure().unwrap().to_string();
        assert!(e.contains("never posted"), "{e}");
    }
}
