//! Teardown in the reference order (rdma-core `mlx5_vfio_free_context`, Linux
//! `mlx5_function_close` / `mlx5_function_disable`): DESTROY_EQ → DEALLOC_UAR →
//! TEARDOWN_HCA (graceful close) → reclaim every lent page (MANAGE_PAGES TAKE) →
//! DISABLE_HCA; then the command interface refuses further commands and the DMA memory
//! (queue, mailboxes, pages, EQ buffer) is released as the owners drop.
//!
//! Objects (QPs, CQs, MKEYs, PDs) are destroyed before this by their own `Drop`, because
//! each holds the device.

use rdmesh_core::mlx5::cmd::{
    DeallocUarIn, DestroyEqIn, DisableHcaIn, TeardownHcaIn, TEARDOWN_GRACEFUL_CLOSE,
};

use super::hca::HcaInfo;
use super::hw::Hw;
use super::{DriverError, Result};

/// Tears a brought-up device down. Every step is attempted even after a failure; the first
/// error is returned. A `dead` device (fatal health) gets no commands: the pages it held are
/// released with their DMA mappings right away (Linux `reclaim_pages` in the internal-error
/// state), and the command interface closes.
///
/// # Errors
/// The first command error.
pub(crate) fn teardown(hw: &mut Hw, info: &HcaInfo, dead: bool) -> Result<()> {
    if dead {
        hw.eq = None;
        let n = hw.pages.release_all();
        tracing::warn!(
            device = %hw.name(),
            "device dead: {n} pages the firmware held are released with their DMA mappings, without MANAGE_PAGES"
        );
        hw.cmd.close();
        return Ok(());
    }
    let mut first: Option<DriverError> = None;
    let mut note = |r: Result<()>| {
        if let Err(e) = r {
            first.get_or_insert(e);
        }
    };
    let eq = hw.eq.take();
    hw.cmd.use_polling();
    if let Some(eq) = &eq {
        note(
            hw.exec(
                &DestroyEqIn {
                    eq_number: eq.eqn(),
                },
                0,
                "async EQ",
            )
            .map(drop),
        );
    }
    drop(eq);
    note(
        hw.exec(&DeallocUarIn { uar: info.uar }, 0, "async EQ UAR")
            .map(drop),
    );
    note(close_hca(hw, true));
    hw.cmd.close();
    first.map_or(Ok(()), Err)
}

/// TEARDOWN_HCA (if `initialized`), page reclaim, DISABLE_HCA.
pub(crate) fn close_hca(hw: &mut Hw, initialized: bool) -> Result<()> {
    let mut first: Option<DriverError> = None;
    if initialized {
        if let Err(e) = hw.exec(
            &TeardownHcaIn {
                profile: TEARDOWN_GRACEFUL_CLOSE,
            },
            0,
            "graceful close",
        ) {
            first.get_or_insert(e);
        }
    }
    let lent = hw.pages.lent();
    if lent > 0 {
        match hw.take_pages(lent) {
            Ok(n) if n < lent => tracing::warn!(
                device = %hw.name(),
                "firmware returned {n} of {lent} pages at teardown; the rest are released with \
                 the DMA mapping"
            ),
            Ok(_) => {}
            Err(e) => {
                first.get_or_insert(e);
            }
        }
        // Whatever the firmware did not give back goes with its DMA mapping.
        hw.pages.release_all();
    }
    if let Err(e) = hw.exec(&DisableHcaIn::default(), 0, "function 0") {
        first.get_or_insert(e);
    }
    first.map_or(Ok(()), Err)
}

/// Undoes a failed bring-up when the device still answers commands (not after a timeout, a
/// full queue or a dead device, where every command would only wait again).
pub(crate) fn unwind(
    hw: &mut Hw,
    enabled: bool,
    initialized: bool,
    uar: Option<u32>,
    cause: &DriverError,
) {
    let answers = !matches!(
        cause,
        DriverError::CmdTimeout { .. }
            | DriverError::CmdQueueFull { .. }
            | DriverError::DeviceDead { .. }
            | DriverError::InitTimeout { .. }
    );
    if answers && enabled {
        hw.eq = None;
        hw.cmd.use_polling();
        if let Some(uar) = uar {
            let _ = hw.exec(&DeallocUarIn { uar }, 0, "UAR (unwinding)");
        }
        if let Err(e) = close_hca(hw, initialized) {
            tracing::warn!(device = %hw.name(), "unwinding a failed bring-up: {e}");
        }
    }
    hw.cmd.close();
}
