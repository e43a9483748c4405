//! Pages the firmware borrows from the host (QUERY_PAGES / MANAGE_PAGES, page-request
//! EQEs): how many it asks for at each stage and which it holds.

use std::collections::BTreeSet;

/// The page ledger of one function.
#[derive(Debug, Clone, Default)]
pub struct Pages {
    /// IOVAs of the 4 KiB pages the driver gave and has not taken back.
    pub held: BTreeSet<u64>,
    /// Pages asked for by QUERY_PAGES(boot/init) answers or page-request events that the
    /// driver has not given yet.
    pub requested: i64,
    /// Pages given in total (never decreases; for the stage checks).
    pub given_total: u64,
}

impl Pages {
    /// Pages currently held.
    pub fn count(&self) -> u64 {
        self.held.len() as u64
    }
}
