//! The `soft` provider: RoCEv2 RC in software over UDP, wire-compatible with real RoCE.
//!
//! One UDP socket per device, bound to a concrete interface address (port 4791, or an ephemeral
//! port). Received packets have their ICRC verified and go to the QP's RC state machine from
//! `rdmesh_core::rc`; packets the state machine produces are sent from whichever thread made
//! progress.
//!
//! # Who receives
//! An application thread that polls a CQ, waits on one, or calls `Device::progress` (a thread
//! polling memory for an RDMA WRITE) receives and processes packets itself: no hand-off to
//! another thread per packet, and a blocking wait is one blocking `recvmsg` woken by the packet.
//! The device's progress thread runs the timers (retransmission, RNR, DCQCN and its pacer, held
//! ACKs) and receives only for ends no application drives (a passive WRITE responder), or when
//! none drove the device for 500 µs. While an application drives, on a process with at most 2
//! CPUs, the progress thread runs under `SCHED_BATCH` (module `sched`) so that its wakes do
//! not preempt the threads doing the work.
//!
//! # Batching
//! A flush packs the packets it has into UDP GSO sends (`UDP_SEGMENT`, up to 64 segments or 64
//! KiB), and the socket receives with UDP GRO; ACKs of WRITEs are coalesced (module
//! `tx_batch`). GSO changes one header value the ICRC covers: Linux gives the segments of one
//! send consecutive IPv4 IDs from 0, so segment `i` is sealed with ID `i`, and a receiver that
//! gets the segments one by one — without the GRO index — recovers the ID from the ICRC (module
//! `ident`). `SoftConfig::gso = false` or `RDMESH_GSO=0` sends one datagram per `sendto`.
//!
//! # Header values on the wire
//! The ICRC covers the IP and UDP headers, but a UDP socket neither chooses nor sees all of
//! them. The provider sends from an unconnected socket with `IP_MTU_DISCOVER =
//! IP_PMTUDISC_DO`, so Linux sets DF and, for an unconnected socket with DF and `ignore_df`
//! clear, writes IP ID 0 (`ip_select_ident_segs`), and IDs 1, 2, … on the further segments of
//! a GSO send (`inet_gso_segment`). (With the default `IP_PMTUDISC_WANT` the
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

mod clock;
mod engine;
pub(crate) mod headers;
pub(crate) mod ident;
pub mod impair;
pub mod path_mtu;
mod qp_table;
pub(crate) mod raw_rx;
mod rx_place;
mod sched;
pub mod stats;
#[cfg(test)]
pub(crate) mod test_pair;
mod tx_batch;
mod tx_spans;
pub(crate) mod udp_io;

pub use engine::{DeviceCounters, QpShared};
pub(crate) use engine::{SocketWait, SoftDevice};
pub use headers::TTL;
pub use impair::{ImpairCounters, Impairment};
