//! The model's MSI-X vector 0: a latched event with a condition variable, behind
//! [`Interrupt`].

use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

use crate::seam::Interrupt;

/// An interrupt line: [`fire`](ModelInterrupt::fire) latches it, [`Interrupt::wait`] consumes
/// it (like reading an eventfd: several fires before a wait count once).
#[derive(Debug, Default)]
pub struct ModelInterrupt {
    pending: Mutex<bool>,
    cv: Condvar,
}

impl ModelInterrupt {
    /// Raises the interrupt.
    pub fn fire(&self) {
        *self.pending.lock().unwrap_or_else(|p| p.into_inner()) = true;
        self.cv.notify_all();
    }
}

impl Interrupt for ModelInterrupt {
    fn wait(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let mut p = self.pending.lock().unwrap_or_else(|p| p.into_inner());
        while !*p {
            let now = Instant::now();
            if now >= deadline {
                return false;
            }
            p = self
                .cv
                .wait_timeout(p, deadline - now)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        *p = false;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latch_and_timeout() {
        let i = ModelInterrupt::default();
        assert!(!i.wait(Duration::from_millis(1)));
        i.fire();
        i.fire();
        assert!(i.wait(Duration::from_millis(1)));
        assert!(!i.wait(Duration::from_millis(1)));
    }
}
