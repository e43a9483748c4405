//! `rdmesh bench`: perftest-shaped bandwidth and latency tests over the verbs API.

pub mod affinity;
pub mod counters;
pub mod endpoint;
pub mod loss_split;
pub mod oob;
pub mod pattern;
pub mod perftest;
pub mod perftest_oob;
pub mod reference;
pub mod run;
pub mod spin;
pub mod stats;
pub mod trace;

pub use run::{run, BenchOptions, Mode};
