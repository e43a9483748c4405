//! Firmware health: the health counter (BAR0 0x1010, low 24 bits keep changing while the
//! firmware runs) and the health buffer (0x200: `fw_ver` reads all ones when the PCI link is
//! gone; `synd` non-zero after a firmware assert). rdma-core `mlx5_vfio.c`
//! `mlx5_vfio_poll_health`: three unchanged samples one second apart mean the device is dead.

use std::time::{Duration, Instant};

use rdmesh_core::mlx5::cmd::init_seg as seg;

use super::{DriverError, Result};
use crate::seam::Mmio;

/// Health-counter sampling state.
#[derive(Debug, Clone)]
pub struct Health {
    interval: Duration,
    max_misses: u32,
    last: Option<u32>,
    misses: u32,
    last_sample: Option<Instant>,
}

/// What one read of the health registers shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HealthSnapshot {
    /// `health_counter & 0xffffff`.
    pub counter: u32,
    /// Health syndrome (0x23d); 0 = healthy.
    pub synd: u8,
    /// Extended syndrome (0x23e).
    pub ext_synd: u16,
    /// `fw_ver` of the health buffer (0x230); all ones when PCI reads fail.
    pub fw_ver: u32,
}

impl HealthSnapshot {
    /// Reads the registers.
    pub fn read(mmio: &dyn Mmio) -> HealthSnapshot {
        let synd_word = mmio.read32_be(seg::HEALTH_SYND & !3);
        HealthSnapshot {
            counter: seg::health_count(mmio.read32_be(seg::HEALTH_COUNTER)),
            synd: (synd_word >> 16) as u8,
            ext_synd: synd_word as u16,
            fw_ver: mmio.read32_be(seg::HEALTH_FW_VER),
        }
    }
}

/// The name of a health syndrome (rdma-core `mlx5_vfio.c` `hsynd_str`).
pub fn syndrome_name(synd: u8) -> &'static str {
    match synd {
        0x1 => "firmware internal error",
        0x7 => "IRISC not responding",
        0x8 => "unrecoverable hardware error",
        0x9 => "firmware CRC error",
        0xa => "ICM fetch PCI error",
        0xb => "HW fatal error",
        0xc => "async EQ buffer overrun",
        0xd => "EQ error",
        0xe => "invalid EQ referenced",
        0xf => "FFSER error",
        0x10 => "high temperature",
        _ => "unknown health syndrome",
    }
}

impl Health {
    /// A monitor sampling every `interval`, declaring death after `max_misses` unchanged
    /// samples.
    pub fn new(interval: Duration, max_misses: u32) -> Health {
        Health {
            interval,
            max_misses: max_misses.max(1),
            last: None,
            misses: 0,
            last_sample: None,
        }
    }

    /// Samples now if `interval` has passed since the previous sample.
    ///
    /// # Errors
    /// [`DriverError::DeviceDead`] when the PCI link reads all ones, the health syndrome is
    /// set, or the counter did not change for `max_misses` samples.
    pub fn poll(&mut self, mmio: &dyn Mmio, device: &str) -> Result<()> {
        if let Some(t) = self.last_sample {
            if t.elapsed() < self.interval {
                return Ok(());
            }
        }
        self.sample(mmio, device)
    }

    /// Takes one sample regardless of the interval.
    ///
    /// # Errors
    /// As [`Health::poll`].
    pub fn sample(&mut self, mmio: &dyn Mmio, device: &str) -> Result<()> {
        self.last_sample = Some(Instant::now());
        let s = HealthSnapshot::read(mmio);
        let dead = |reason: String| DriverError::DeviceDead {
            device: device.to_string(),
            reason,
            counter: s.counter,
            synd: s.synd,
            ext_synd: s.ext_synd,
        };
        if s.fw_ver == u32::MAX {
            return Err(dead(
                "PCI reads return all ones (link down or function reset)".into(),
            ));
        }
        if s.synd != 0 {
            return Err(dead(format!(
                "firmware reports health syndrome {:#x} ({})",
                s.synd,
                syndrome_name(s.synd)
            )));
        }
        if self.last == Some(s.counter) {
            self.misses += 1;
            if self.misses >= self.max_misses {
                return Err(dead(format!(
                    "health counter stuck for {} samples {:?} apart",
                    self.misses + 1,
                    self.interval
                )));
            }
        } else {
            self.misses = 0;
        }
        self.last = Some(s.counter);
        Ok(())
    }
}
