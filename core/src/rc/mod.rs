//! RC transport state machines.
