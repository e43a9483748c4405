//! rdmesh-vfio: drives a ConnectX-7 (mlx5) from user space through VFIO, with no kernel driver.
//!
//! Layers:
//! - [`seam`]: the traits every device access goes through (MMIO, DMA memory, interrupts).
//! - [`mlx5`]: the mlx5 driver (bring-up, commands, EQ, pages, PD/MR/CQ/QP, doorbells).
//! - [`sys`]: the VFIO system layer (container, group, device, BAR, DMA, MSI) behind the seam.

pub mod mlx5;
pub mod model;
pub mod seam;
pub mod sys;
