//! Congestion control for RoCEv2 flows, hardware-free and with time as an input: ECN
//! codepoints, the DCQCN notification point (CE marks → CNPs), the DCQCN reaction point (CNPs →
//! rate) and a token-bucket pacer that turns the rate into send times.
//!
//! Sources: RFC 3168 §5 (ECN), Zhu et al. "Congestion Control for Large-Scale RDMA Deployments"
//! (SIGCOMM'15) and the authors' reference simulator (rocev2.md §4.2), NVIDIA ConnectX DCQCN
//! parameters and defaults (rocev2.md §4.3), IBTA RoCEv2 Annex A17.9 (CNP).
//!
//! [`RcQp`](crate::rc::RcQp) wires these together per QP (`handle_packet_ecn`, `handle_cnp`,
//! `poll_cnp`, `enable_dcqcn`); they can also be used on their own.

mod dcqcn;
mod ecn;
mod np;
mod pacer;

pub use dcqcn::{DcqcnConfig, IncreaseEvent, IncreasePhase, ReactionPoint};
pub use ecn::Ecn;
pub use np::{NotificationPoint, NpConfig};
pub use pacer::TokenBucket;
