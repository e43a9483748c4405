//! The out-of-band handshake that sets up a connection's rails, over TCP to the next node's
//! handshake port on one of its link addresses ([`crate::mesh::messages`] has the formats).
//!
//! Connecting side, per hop: pick the direct rails (longest prefix match), open TCP to the
//! peer's addresses on those subnets in turn (retrying until the deadline, so a peer that is
//! still starting is waited for), HELLO → CHALLENGE (check the listener's proof when a key is
//! set) → create the rails' QPs → REQUEST (with proof) → ACCEPT → connect the accepted rails
//! (RTR, RTS) → READY. A timeout or refusal is an error naming every address tried.
//!
//! Listening side, one short-lived thread per incoming TCP connection: HELLO → CHALLENGE →
//! REQUEST (check the proof) → then by kind: *connect*: create and connect this end of each
//! proposed rail whose address is a selected local NIC, ACCEPT, wait for READY, hand the
//! receive end to the listener's accept queue; *relay*: first connect onward to the next node
//! on the path (the same handshake, as the connecting side), then accept the rails from the
//! previous node and join both hops in a [`Relay`]; *topology*: answer with the topology table
//! (after asking the neighbours when the query may go further).
//!
//! Every blocking step happens on these background threads, never in the application's
//! `listen`/`connect`/`accept` calls, and every read and write is bounded by the handshake's
//! deadline.

use std::net::{IpAddr, SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::framing::FramedStream;
use crate::mesh::auth::{self, LABEL_ACCEPT, LABEL_CLIENT, LABEL_SERVER, MAC_LEN, NONCE_LEN};
use crate::mesh::comm::{Route, RouteLink};
use crate::mesh::error::{MeshError, Result};
use crate::mesh::frame::{text_frame, FrameKind};
use crate::mesh::handle::NodeInfo;
use crate::mesh::messages::{
    reject, reject_reason, split_proof, with_proof, Accept, Lane, RailProposal, Request,
    RequestKind, PROTOCOL, T_ACCEPT, T_CHALLENGE, T_HELLO, T_READY, T_REJECT, T_REQUEST,
};
use crate::mesh::node::NodeInner;
use crate::mesh::rail::{FrameBody, Rail, RailInfo, RailParams};
use crate::mesh::railset::{RailSet, NO_TOKEN};
use crate::mesh::relay::Relay;
use crate::mesh::route::{direct_rails, RailChoice};
use crate::mesh::tagged::Eager;

/// Time reserved for a relay's own answer when it connects onward.
const RELAY_MARGIN: Duration = Duration::from_millis(500);
/// Longest single TCP connect attempt.
const CONNECT_ATTEMPT: Duration = Duration::from_secs(2);

/// What the connecting side asks of one hop.
#[derive(Debug, Clone)]
pub(crate) struct HopRequest {
    pub kind: RequestKind,
    pub origin: NodeInfo,
    pub target: NodeInfo,
    pub listen_id: u32,
    pub path: Vec<u64>,
    pub hops_left: u8,
    pub lane: Lane,
}

/// One hop set up from the connecting side.
pub(crate) struct Hop {
    /// The accepted rails, connected, in proposal order (the other end numbers them alike).
    pub rails: Vec<Rail>,
    /// Largest send the far end takes before its CTS, bytes (`Accept::eager_bytes`).
    pub eager_bytes: usize,
}

fn remaining(deadline: Instant) -> Duration {
    deadline.saturating_duration_since(Instant::now())
}

fn hs_err(peer: &NodeInfo, reason: impl Into<String>, tried: &[String]) -> MeshError {
    MeshError::Handshake {
        peer: peer.id_hex(),
        reason: reason.into(),
        tried: if tried.is_empty() {
            "none".into()
        } else {
            tried.join(", ")
        },
    }
}

/// Opens TCP to `next` on the addresses of `choices`, retrying until `deadline`.
fn dial(next: &NodeInfo, addrs: &[IpAddr], deadline: Instant) -> Result<(TcpStream, Vec<String>)> {
    let mut tried: Vec<String> = Vec::new();
    let note = |tried: &mut Vec<String>, a: SocketAddr, e: String| {
        let entry = format!("{a} ({e})");
        if let Some(t) = tried.iter_mut().find(|t| t.starts_with(&format!("{a} "))) {
            *t = entry;
        } else {
            tried.push(entry);
        }
    };
    loop {
        for ip in addrs {
            let a = SocketAddr::new(*ip, next.tcp_port);
            let left = remaining(deadline);
            if left.is_zero() {
                return Err(hs_err(
                    next,
                    "timed out connecting to its handshake port",
                    &tried,
                ));
            }
            match TcpStream::connect_timeout(&a, left.min(CONNECT_ATTEMPT)) {
                Ok(s) => {
                    note(&mut tried, a, "connected".into());
                    return Ok((s, tried));
                }
                Err(e) => note(&mut tried, a, e.to_string()),
            }
        }
        if remaining(deadline) < Duration::from_millis(100) {
            return Err(hs_err(
                next,
                "timed out connecting to its handshake port (is rdmesh running there, and the link up?)",
                &tried,
            ));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn io_err(next: &NodeInfo, tried: &[String], e: crate::Error) -> MeshError {
    hs_err(next, e.to_string(), tried)
}

/// Sets up one hop toward `next` (see the module docs). `role` is this end's rail role.
pub(crate) fn client_hop(
    node: &Arc<NodeInner>,
    next: &NodeInfo,
    req: HopRequest,
    role: RailParams,
    shard: usize,
    deadline: Instant,
) -> Result<Hop> {
    let specs = node.nic_specs();
    let choices = if next.id == node.id {
        // Two endpoints of one node (two NCCL ranks in one process): one rail from the first
        // NIC to itself.
        vec![RailChoice {
            nic: 0,
            peer_addr: specs[0].addr.ip,
        }]
    } else {
        direct_rails(&specs, &next.addrs)
    };
    if choices.is_empty() {
        return Err(hs_err(
            next,
            format!(
                "no local NIC shares a subnet with it ({})",
                next.addrs_text()
            ),
            &[],
        ));
    }
    let mut addrs: Vec<IpAddr> = Vec::new();
    for c in &choices {
        if !addrs.contains(&c.peer_addr) {
            addrs.push(c.peer_addr);
        }
    }
    let (stream, tried) = dial(next, &addrs, deadline)?;
    let mut fs = FramedStream::new(stream, remaining(deadline), &PROTOCOL)
        .map_err(|e| io_err(next, &tried, e))?;
    let peer_tcp = fs.peer().to_string();
    let key = node.config.auth_key.clone();
    let nonce_c = auth::nonce();
    let mut hello = nonce_c.to_vec();
    hello.push(u8::from(key.is_some()));
    fs.send(T_HELLO, &hello)
        .map_err(|e| io_err(next, &tried, e))?;
    let (ty, p) = fs
        .recv_any(T_CHALLENGE)
        .map_err(|e| io_err(next, &tried, e))?;
    if ty == T_REJECT {
        return Err(refused(next, &peer_tcp, &reject_reason(&p), &tried));
    }
    if ty != T_CHALLENGE || p.len() < NONCE_LEN + 1 {
        return Err(hs_err(
            next,
            format!(
                "unexpected message type {ty} ({} bytes) instead of CHALLENGE",
                p.len()
            ),
            &tried,
        ));
    }
    let nonce_s = &p[..NONCE_LEN];
    let server_keyed = p[NONCE_LEN] != 0;
    match (&key, server_keyed) {
        (Some(k), true) => {
            let proof = p.get(NONCE_LEN + 1..NONCE_LEN + 1 + MAC_LEN).unwrap_or(&[]);
            if !k.verify(LABEL_SERVER, &[&nonce_c, nonce_s], proof) {
                let _ = fs.send(T_REJECT, &reject("your proof of RDMESH_AUTH_KEY is wrong"));
                return Err(MeshError::Auth {
                    peer: peer_tcp,
                    reason: "the listener could not prove it holds RDMESH_AUTH_KEY (are the keys the same on both nodes?)".into(),
                });
            }
        }
        (Some(_), false) => {
            let _ = fs.send(T_REJECT, &reject("this node requires RDMESH_AUTH_KEY"));
            return Err(MeshError::Auth {
                peer: peer_tcp,
                reason: "the listener does not use RDMESH_AUTH_KEY but this node does; refusing it (set the same key on both nodes)".into(),
            });
        }
        (None, true) => {
            let _ = fs.send(T_REJECT, &reject("this node has no RDMESH_AUTH_KEY"));
            return Err(MeshError::Auth {
                peer: peer_tcp,
                reason: "the listener requires RDMESH_AUTH_KEY and this node has none (set the same key on both nodes)".into(),
            });
        }
        (None, false) => {}
    }
    let mut rails = Vec::new();
    let mut proposals = Vec::new();
    if req.kind != RequestKind::Topology {
        for c in &choices {
            let nic = node.nics[c.nic].clone();
            let rail = Rail::new(
                nic,
                shard,
                c.peer_addr,
                role,
                node.config.timing,
                node.config.recovery,
            )?;
            proposals.push(RailProposal {
                to: c.peer_addr,
                info: rail.local_info(),
            });
            rails.push(rail);
        }
    }
    let request = Request {
        kind: req.kind,
        origin: req.origin,
        sender: node.info(),
        target: req.target,
        listen_id: req.listen_id,
        budget_ms: remaining(deadline).as_millis().min(u32::MAX as u128) as u32,
        path: req.path,
        hops_left: req.hops_left,
        rails: proposals,
        topology: node.topology_table(),
        lane: req.lane,
    };
    let body = request.encode();
    let proof = key
        .as_ref()
        .map(|k| k.mac(LABEL_CLIENT, &[nonce_s, &nonce_c, &body]));
    fs.send(T_REQUEST, &with_proof(proof, &body))
        .map_err(|e| io_err(next, &tried, e))?;
    fs.set_timeout(remaining(deadline))
        .map_err(|e| io_err(next, &tried, e))?;
    let (ty, p) = fs.recv_any(T_ACCEPT).map_err(|e| io_err(next, &tried, e))?;
    if ty == T_REJECT {
        return Err(refused(next, &peer_tcp, &reject_reason(&p), &tried));
    }
    if ty != T_ACCEPT {
        return Err(hs_err(
            next,
            format!("unexpected message type {ty} instead of ACCEPT"),
            &tried,
        ));
    }
    let (proof, body) = split_proof(&p).map_err(|e| hs_err(next, e, &tried))?;
    if let Some(k) = &key {
        if !proof.is_some_and(|t| k.verify(LABEL_ACCEPT, &[&nonce_c, nonce_s, body], t)) {
            return Err(MeshError::Auth {
                peer: peer_tcp,
                reason: "the listener's answer does not carry a valid RDMESH_AUTH_KEY proof".into(),
            });
        }
    }
    let accept =
        Accept::decode(body).map_err(|e| hs_err(next, format!("bad ACCEPT: {e}"), &tried))?;
    for n in accept.topology {
        node.learn(n);
    }
    if req.kind == RequestKind::Topology {
        return Ok(Hop {
            rails: Vec::new(),
            eager_bytes: 0,
        });
    }
    if accept.rails.len() != rails.len() {
        return Err(hs_err(
            next,
            format!(
                "ACCEPT answers {} rails, {} were proposed",
                accept.rails.len(),
                rails.len()
            ),
            &tried,
        ));
    }
    let mut up = Vec::new();
    for (mut rail, info) in rails.into_iter().zip(accept.rails) {
        if let Some(info) = info {
            rail.connect(&info)?;
            up.push(rail);
        } else {
            tracing::info!(link = %rail.link(), "peer declined this rail");
        }
    }
    if up.is_empty() {
        return Err(hs_err(
            next,
            "the peer accepted none of the proposed rails",
            &tried,
        ));
    }
    fs.send(T_READY, &[]).map_err(|e| io_err(next, &tried, e))?;
    Ok(Hop {
        rails: up,
        eager_bytes: accept.eager_bytes as usize,
    })
}

fn refused(next: &NodeInfo, peer_tcp: &str, reason: &str, tried: &[String]) -> MeshError {
    if reason.contains("RDMESH_AUTH_KEY") {
        MeshError::Auth {
            peer: peer_tcp.to_string(),
            reason: format!("refused by the listener: {reason}"),
        }
    } else {
        hs_err(next, format!("refused: {reason}"), tried)
    }
}

/// Asks the directly linked known nodes (except `exclude`) for their topology tables, each
/// query going `hops_left` hops further; everything learned goes into the node's table.
pub(crate) fn query_topology(
    node: &Arc<NodeInner>,
    exclude: &[u64],
    hops_left: u8,
    deadline: Instant,
) {
    let specs = node.nic_specs();
    for n in node.known_nodes() {
        if exclude.contains(&n.id) || direct_rails(&specs, &n.addrs).is_empty() {
            continue;
        }
        let left = remaining(deadline);
        if left.is_zero() {
            return;
        }
        let req = HopRequest {
            kind: RequestKind::Topology,
            origin: node.info(),
            target: n.clone(),
            listen_id: 0,
            path: Vec::new(),
            hops_left,
            lane: Lane::SINGLE,
        };
        let d = Instant::now() + left.min(Duration::from_secs(2));
        if let Err(e) = client_hop(node, &n, req, RailParams::DATA_SENDER, 0, d) {
            tracing::debug!(peer = %n.id_hex(), error = %e, "topology query failed");
        }
    }
}

/// Serves one incoming TCP connection (see the module docs). Errors are logged and, where
/// the peer can still hear it, sent as REJECT.
pub(crate) fn serve(node: Arc<NodeInner>, stream: TcpStream) {
    let peer = stream
        .peer_addr()
        .map(|a| a.to_string())
        .unwrap_or_else(|_| "?".into());
    let deadline = Instant::now() + node.config.handshake_timeout;
    let mut fs = match FramedStream::new(stream, node.config.handshake_timeout, &PROTOCOL) {
        Ok(f) => f,
        Err(e) => {
            tracing::warn!(%peer, error = %e, "mesh handshake: socket setup failed");
            return;
        }
    };
    if let Err(e) = serve_inner(&node, &mut fs, deadline) {
        tracing::warn!(%peer, error = %e, "mesh handshake refused or failed");
        let text = match &e {
            MeshError::Auth { reason, .. } => reason.clone(),
            other => other.to_string(),
        };
        let _ = fs.send(T_REJECT, &reject(&text));
    }
}

fn serve_inner(node: &Arc<NodeInner>, fs: &mut FramedStream, deadline: Instant) -> Result<()> {
    // The progress shard of whatever this handshake makes (a connection end or a relay).
    let shard = node.progress.next_shard();
    let peer_tcp = fs.peer().to_string();
    let p = fs.recv(T_HELLO)?;
    if p.len() != NONCE_LEN + 1 {
        return Err(MeshError::Protocol {
            peer: peer_tcp,
            reason: format!("HELLO of {} bytes, expected {}", p.len(), NONCE_LEN + 1),
        });
    }
    let nonce_c = p[..NONCE_LEN].to_vec();
    let client_keyed = p[NONCE_LEN] != 0;
    let key = node.config.auth_key.clone();
    if key.is_some() && !client_keyed {
        return Err(MeshError::Auth {
            peer: peer_tcp,
            reason: "the peer has no RDMESH_AUTH_KEY and this node requires it (set the same key on both nodes)".into(),
        });
    }
    let nonce_s = auth::nonce();
    let mut ch = nonce_s.to_vec();
    ch.push(u8::from(key.is_some()));
    if let Some(k) = &key {
        ch.extend_from_slice(&k.mac(LABEL_SERVER, &[&nonce_c, &nonce_s]));
    }
    fs.send(T_CHALLENGE, &ch)?;
    let (ty, p) = fs.recv_any(T_REQUEST)?;
    if ty == T_REJECT {
        tracing::warn!(peer = %peer_tcp, reason = %reject_reason(&p), "mesh peer refused this node");
        return Ok(());
    }
    if ty != T_REQUEST {
        return Err(MeshError::Protocol {
            peer: peer_tcp,
            reason: format!("message type {ty} instead of REQUEST"),
        });
    }
    let (proof, body) = split_proof(&p).map_err(|reason| MeshError::Protocol {
        peer: peer_tcp.clone(),
        reason,
    })?;
    if let Some(k) = &key {
        if !proof.is_some_and(|t| k.verify(LABEL_CLIENT, &[&nonce_s, &nonce_c, body], t)) {
            return Err(MeshError::Auth {
                peer: peer_tcp,
                reason: "the peer could not prove it holds RDMESH_AUTH_KEY (are the keys the same on both nodes?)".into(),
            });
        }
    }
    let req = Request::decode(body).map_err(|reason| MeshError::Protocol {
        peer: peer_tcp.clone(),
        reason,
    })?;
    for n in req.topology.iter().chain([&req.origin, &req.sender]) {
        node.learn(n.clone());
    }
    let deadline = deadline.min(Instant::now() + Duration::from_millis(u64::from(req.budget_ms)));
    let answer = |fs: &mut FramedStream, accept: &Accept| -> Result<()> {
        let body = accept.encode();
        let proof = key
            .as_ref()
            .map(|k| k.mac(LABEL_ACCEPT, &[&nonce_c, &nonce_s, &body]));
        fs.send(T_ACCEPT, &with_proof(proof, &body))?;
        Ok(())
    };
    match req.kind {
        RequestKind::Topology => {
            if req.hops_left > 1 {
                let half = Instant::now() + remaining(deadline) / 2;
                query_topology(
                    node,
                    &[req.sender.id, req.origin.id],
                    req.hops_left - 1,
                    half,
                );
            }
            answer(
                fs,
                &Accept {
                    rails: Vec::new(),
                    topology: node.topology_table(),
                    eager_bytes: 0,
                },
            )
        }
        RequestKind::Connect => {
            if req.target.id != node.id {
                return Err(MeshError::Request(format!(
                    "this is node {:016x}, not node {} that the request names",
                    node.id,
                    req.target.id_hex()
                )));
            }
            let Some(queue) = node.listener_queue(req.listen_id) else {
                return Err(MeshError::Request(format!(
                    "node {:016x} has no listener with id {} (closed, or a stale handle)",
                    node.id, req.listen_id
                )));
            };
            let (rails, infos) = accept_rails(node, shard, &req.rails)?;
            // Through a relay the origin sends none (the relay answers 0), so this end keeps
            // grouped receives.
            let relayed = req.sender.id != req.origin.id;
            let eager_bytes = if relayed { 0 } else { node.config.eager_bytes };
            answer(
                fs,
                &Accept {
                    rails: infos,
                    topology: node.topology_table(),
                    eager_bytes: eager_bytes as u32,
                },
            )?;
            fs.set_timeout(remaining(deadline))?;
            fs.recv(T_READY)?;
            let via = if req.sender.id != req.origin.id {
                vec![req.sender.id_hex()]
            } else {
                Vec::new()
            };
            let route = route_of(&req.origin, via, &rails);
            let label = peer_label(&req.origin, &route);
            let eager = Eager {
                send_bytes: 0,
                accept: eager_bytes > 0,
            };
            let conn = node.start_conn(rails, route, label, shard, eager);
            queue
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .add_lane(req.lane, conn);
            Ok(())
        }
        RequestKind::Relay => {
            if !node.config.relay {
                return Err(MeshError::Request(format!(
                    "node {:016x} does not relay (RDMESH_RELAY=0)",
                    node.id
                )));
            }
            let next_id = req.path[0];
            let next = if next_id == req.target.id {
                req.target.clone()
            } else {
                node.known(next_id).ok_or_else(|| {
                    MeshError::Request(format!(
                        "relay node {:016x} does not know the next node {next_id:016x} on the path",
                        node.id
                    ))
                })?
            };
            let onward_req = HopRequest {
                kind: if req.path.len() == 1 {
                    RequestKind::Connect
                } else {
                    RequestKind::Relay
                },
                origin: req.origin.clone(),
                target: req.target.clone(),
                listen_id: req.listen_id,
                path: req.path[1..].to_vec(),
                hops_left: 0,
                lane: req.lane,
            };
            let onward_deadline = deadline
                .checked_sub(RELAY_MARGIN)
                .unwrap_or(deadline)
                .max(Instant::now());
            let onward = client_hop(
                node,
                &next,
                onward_req,
                RailParams::DATA_SENDER,
                shard,
                onward_deadline,
            )
            .map_err(|e| {
                MeshError::Request(format!(
                    "relay node {:016x} could not reach node {}: {e}",
                    node.id,
                    next.id_hex()
                ))
            })?;
            let result = (|| {
                let (rails, infos) = accept_rails(node, shard, &req.rails)?;
                answer(
                    fs,
                    &Accept {
                        rails: infos,
                        topology: node.topology_table(),
                        // A relay forwards frames; eager sends are between the two ends only.
                        eager_bytes: 0,
                    },
                )?;
                fs.set_timeout(remaining(deadline))?;
                fs.recv(T_READY)?;
                Ok::<_, MeshError>(rails)
            })();
            let rails = match result {
                Ok(r) => r,
                Err(e) => {
                    abandon(onward.rails, &format!("relay setup failed: {e}"));
                    return Err(e);
                }
            };
            let label = format!(
                "relay node {:016x} ({}) between node {} and node {}",
                node.id,
                node.info().addrs_text(),
                req.origin.id_hex(),
                req.target.id_hex()
            );
            let relay = Relay::new(
                RailSet::new(rails),
                RailSet::new(onward.rails),
                label,
                node.config.keepalive,
            );
            node.progress.add_to(shard, Arc::new(relay));
            Ok(())
        }
    }
}

/// Creates and connects this end of each proposed rail whose destination is a local NIC.
fn accept_rails(
    node: &Arc<NodeInner>,
    shard: usize,
    proposals: &[RailProposal],
) -> Result<(Vec<Rail>, Vec<Option<RailInfo>>)> {
    let mut rails = Vec::new();
    let mut infos = Vec::new();
    for p in proposals {
        let Some(nic) = node.nics.iter().find(|n| n.spec.addr.ip == p.to) else {
            tracing::info!(to = %p.to, "declining a rail to an address that is not a selected NIC here");
            infos.push(None);
            continue;
        };
        let made = Rail::new(
            nic.clone(),
            shard,
            p.info.addr,
            RailParams::DATA_RECEIVER,
            node.config.timing,
            node.config.recovery,
        )
        .and_then(|mut r| r.connect(&p.info).map(|_| r));
        match made {
            Ok(r) => {
                infos.push(Some(r.local_info()));
                rails.push(r);
            }
            Err(e) => {
                tracing::warn!(to = %p.to, error = %e, "declining a rail");
                infos.push(None);
            }
        }
    }
    if rails.is_empty() {
        let to: Vec<String> = proposals.iter().map(|p| p.to.to_string()).collect();
        return Err(MeshError::NoNic(format!(
            "none of the proposed rails (to {}) ends at a selected NIC of node {:016x} ({})",
            to.join(", "),
            node.id,
            node.info().addrs_text()
        )));
    }
    Ok((rails, infos))
}

/// Tells the far end of rails that will not be used, and drops them.
fn abandon(rails: Vec<Rail>, why: &str) {
    let mut set = RailSet::new(rails);
    set.push(
        None,
        NO_TOKEN,
        FrameBody::Bytes(text_frame(FrameKind::Close, 0, why)),
    );
    set.pump();
}

/// The route of a connection whose first hop is `rails`.
pub(crate) fn route_of(peer: &NodeInfo, via: Vec<String>, rails: &[Rail]) -> Route {
    Route {
        peer: peer.id_hex(),
        via,
        links: rails
            .iter()
            .map(|r| RouteLink {
                netdev: r.nic().spec.netdev.clone(),
                local: r.nic().spec.addr.ip,
                remote: r.peer_addr(),
                gbps: (r.gbps() * 1000.0).round() / 1000.0,
                recovery: r.recovery(),
                path_mtu: r.path_mtu(),
            })
            .collect(),
    }
}

/// How a connection's errors name its peer.
pub(crate) fn peer_label(peer: &NodeInfo, route: &Route) -> String {
    if route.via.is_empty() {
        format!("node {} ({})", peer.id_hex(), peer.addrs_text())
    } else {
        format!(
            "node {} ({}) via {}",
            peer.id_hex(),
            peer.addrs_text(),
            route.via.join(" -> ")
        )
    }
}
