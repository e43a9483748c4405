//! rdmesh-core: the hardware-free heart of rdmesh.
//!
//! - [`wire`]: RoCEv2 wire formats (Ethernet, IPv4/IPv6, UDP, BTH and every extended header,
//!   CNP) with ICRC, following smoltcp's checked-view + `Repr` pattern.
//! - [`rc`]: RC transport state machines (requester, completer, responder) with time as an input.
//! - [`cc`]: congestion control (ECN, DCQCN notification and reaction points, pacing).
//!
//! The crate is `#![no_std]`, allocates nothing and contains no `unsafe`. It never does I/O and
//! never reads a clock: callers feed packets and timestamps in and take packets and completions out.
//!
//! Features:
//! - `std`: runtime CPU detection for the CRC (crc32fast's PCLMULQDQ path, ~7x faster ICRC) and
//!   `std::error::Error` impls.
//! - `defmt`: derives `defmt::Format` on the public types.
#![cfg_attr(not(any(test, feature = "std")), no_std)]
#![forbid(unsafe_code)]
#![warn(missing_docs)]

#[macro_use]
mod macros;

pub mod cc;
pub mod mlx5;
pub mod rc;
pub mod wire;
