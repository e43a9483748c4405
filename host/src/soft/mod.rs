//! The `soft` provider: RoCEv2 RC in software over UDP, wire-compatible with real RoCE.
//!
//! One UDP socket per device, bound to a concrete interface address (port 4791, or an ephemeral
//! port). A progress thread receives packets, verifies each ICRC, and hands them to the QP's
//! RC state machine from `rdmesh_core::rc`; packets the state machine produces are sent from
//! whichever thread made progress (the poster for new requests, the progress thread for ACKs,
//! READ responses and retransmissions).
//!
//! # Header values on the wire
//! The ICRC covers the IP and UDP headers, but a UDP socket neither chooses nor sees all of
//! them. The provider sends from an unconnected socket with `IP_MTU_DISCOVER =
//! IP_PMTUDISC_DO`, so Linux sets DF and, for an unconnected socket with DF and `ignore_df`
//! clear, writes IP ID 0 (`ip_select_ident_segs`). (With the default `IP_PMTUDISC_WANT` the
//! kernel sets DF but picks a non-zero ID.) TTL is set to 64 and TOS explicitly. TTL, TOS and both checksums
//! are masked out of the ICRC. So the sender knows every covered value: version/IHL 0x45,
//! total length, ID 0, flags DF with fragment offset 0, protocol 17, the addresses, ports and
//! UDP length. The receiver verifies under the same rule. Peers that send a non-zero IP ID
//! (rxe picks one per packet) need a receive path that sees IP headers: with
//! `SoftConfig::raw_receive` the progress thread reads a raw `IPPROTO_UDP` socket and verifies
//! each ICRC over the IPv4 header as received (module `raw_rx`).
//!
//! # Peers' UDP source ports
//! A RoCEv2 peer sends to port 4791 from a source port of its choosing (rxe: one per QP), so a
//! QP connected to a peer at port 4791 accepts packets from any source port of the peer's
//! address; a peer on another port (an rdmesh endpoint on an ephemeral port) must send from it.

pub(crate) mod ecn_rx;
mod engine;
pub(crate) mod headers;
pub mod impair;
pub(crate) mod raw_rx;
pub mod stats;

pub(crate) use engine::SoftDevice;
pub use engine::{DeviceCounters, QpShared};
pub use headers::TTL;
pub use impair::{ImpairCounters, Impairment};
