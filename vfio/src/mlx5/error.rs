//! The driver's error type: every variant says what happened on which device and what to
//! check.

use core::time::Duration;

use rdmesh_core::mlx5::cmd::{CmdError, Opcode};

use crate::seam::DmaError;

/// Why a driver operation failed. `device` is the name given in
/// [`DriverConfig::name`](super::DriverConfig) (the PCI BDF for a real device).
#[derive(Debug, thiserror::Error, Clone, PartialEq)]
pub enum DriverError {
    /// The `initializing` bit (init segment 0x1fc bit 31) stayed set.
    #[error(
        "{device}: firmware still initializing after {waited:?} (init segment 0x1fc bit 31 stays \
         set); check that the function is not held in reset, that no other driver owns it, and \
         the firmware health buffer (health syndrome {health_synd:#x})"
    )]
    InitTimeout {
        /// Device name.
        device: String,
        /// How long the driver waited.
        waited: Duration,
        /// Health syndrome byte read at timeout (init segment 0x23d).
        health_synd: u8,
    },
    /// The command-interface revision is not 5.
    #[error(
        "{device}: command interface revision {found} (init segment 0x004 bits 31..16), this \
         driver speaks revision 5; check the firmware version ({fw})"
    )]
    CmdifRev {
        /// Device name.
        device: String,
        /// Revision read.
        found: u16,
        /// Firmware version major.minor.subminor.
        fw: String,
    },
    /// The device reports a command-queue geometry the driver cannot use.
    #[error(
        "{device}: command queue geometry log_cmdq_size {log_size}, log_cmdq_stride {log_stride} \
         is invalid (need at most 32 entries of at least 64 bytes in one 4 KiB page)"
    )]
    CmdqGeometry {
        /// Device name.
        device: String,
        /// `log_cmdq_size` read from 0x014.
        log_size: u8,
        /// `log_cmdq_stride` read from 0x014.
        log_stride: u8,
    },
    /// A command did not complete in time.
    #[error(
        "{device}: command {opcode} (slot {slot}) did not complete within {waited:?}; the \
         device kept ownership of the queue entry. Check the device health (health counter at \
         BAR0 0x1010), the MSI-X/event queue setup and the PCI bus-master bit"
    )]
    CmdTimeout {
        /// Device name.
        device: String,
        /// The command.
        opcode: Opcode,
        /// Command queue slot.
        slot: usize,
        /// How long the driver waited.
        waited: Duration,
    },
    /// Every usable command-queue slot is still owned by the device.
    #[error(
        "{device}: command queue full: all {slots} slots are still owned by the device, cannot \
         post {opcode}; earlier commands timed out without completing. The device is likely \
         hung: check its health and reset the function"
    )]
    CmdQueueFull {
        /// Device name.
        device: String,
        /// The command that could not be posted.
        opcode: Opcode,
        /// Number of slots usable for this command.
        slots: usize,
    },
    /// A command failed or its output could not be read.
    #[error("{device}: {source}{hint}")]
    Cmd {
        /// Device name.
        device: String,
        /// The layer-level error (status + syndrome, delivery status, malformed output).
        source: CmdError,
        /// Extra context (command, object number) and what to check.
        hint: String,
    },
    /// The health counter stopped or the health buffer reports a fatal syndrome.
    #[error(
        "{device}: device dead: {reason} (health counter {counter:#08x}, syndrome {synd:#x}, \
         ext syndrome {ext_synd:#06x}); the firmware stopped. Check `dmesg` for PCI/AER errors, \
         reset the function (echo 1 > /sys/bus/pci/devices/<bdf>/reset) and re-open it"
    )]
    DeviceDead {
        /// Device name.
        device: String,
        /// What was seen.
        reason: String,
        /// Last health counter value.
        counter: u32,
        /// Health syndrome (init segment 0x23d).
        synd: u8,
        /// Extended syndrome (0x23e).
        ext_synd: u16,
    },
    /// DMA memory failed.
    #[error("{device}: {source}")]
    Dma {
        /// Device name.
        device: String,
        /// The allocator's error.
        source: DmaError,
    },
    /// A work-queue or completion-queue operation failed.
    #[error("{device}: QP/CQ {qpn:#x}: {source}")]
    Queue {
        /// Device name.
        device: String,
        /// QPN or CQN.
        qpn: u32,
        /// The formats layer's error.
        source: rdmesh_core::mlx5::Error,
    },
    /// A request the device cannot satisfy (sizes, capabilities, MTU, GID index).
    #[error("{device}: {what}")]
    Config {
        /// Device name.
        device: String,
        /// What is wrong and what to check.
        what: String,
    },
    /// The device was torn down or declared dead; no more commands go out.
    #[error("{device}: device is closed (torn down or dead); re-open it")]
    Closed {
        /// Device name.
        device: String,
    },
}

impl DriverError {
    /// A [`DriverError::Cmd`] with context.
    pub(crate) fn cmd(device: &str, source: CmdError, hint: impl Into<String>) -> DriverError {
        DriverError::Cmd {
            device: device.to_string(),
            source,
            hint: hint.into(),
        }
    }

    /// A [`DriverError::Dma`].
    pub(crate) fn dma(device: &str, source: DmaError) -> DriverError {
        DriverError::Dma {
            device: device.to_string(),
            source,
        }
    }

    /// A [`DriverError::Config`].
    pub(crate) fn config(device: &str, what: impl Into<String>) -> DriverError {
        DriverError::Config {
            device: device.to_string(),
            what: what.into(),
        }
    }

    /// A [`DriverError::Queue`].
    pub(crate) fn queue(device: &str, qpn: u32, source: rdmesh_core::mlx5::Error) -> DriverError {
        DriverError::Queue {
            device: device.to_string(),
            qpn,
            source,
        }
    }
}

/// Result of driver operations.
pub type Result<T> = core::result::Result<T, DriverError>;
