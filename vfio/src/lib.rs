//! rdmesh-vfio: drives a ConnectX-7 (mlx5) from user space through VFIO, with no kernel driver.
//!
//! Layers:
//! - [`seam`]: the traits every device access goes through (MMIO, DMA memory, interrupts).
//! - [`sys`]: the VFIO system layer (container, group, device, BAR, DMA, MSI) behind the seam.

pub mod seam;
pub mod sys;
