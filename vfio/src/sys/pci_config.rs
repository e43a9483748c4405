//! PCI configuration space offsets and bits used here (PCI Local Bus spec 3.0 §6.2; Linux
//! `include/uapi/linux/pci_regs.h`). All registers are little-endian.

/// Vendor ID, 16 bits.
pub const VENDOR_ID: u64 = 0x00;
/// Device ID, 16 bits.
pub const DEVICE_ID: u64 = 0x02;
/// Command register, 16 bits.
pub const COMMAND: u64 = 0x04;
/// Command bit 1: respond to memory-space accesses (`PCI_COMMAND_MEMORY`).
pub const COMMAND_MEMORY: u16 = 0x0002;
/// Command bit 2: bus master — the device may issue DMA (`PCI_COMMAND_MASTER`).
pub const COMMAND_MASTER: u16 = 0x0004;
