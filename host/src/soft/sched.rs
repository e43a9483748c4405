//! The progress thread's scheduling policy — `SCHED_BATCH` while an application thread drives
//! the device, `SCHED_OTHER` while the progress thread receives itself — and the timer slack
//! of its sleeps.
//!
//! While an application thread drives a device (polls its CQ, waits on it, polls memory), that
//! thread receives and runs the QP timers after each receive; the progress thread wakes to see
//! whether it still drives (every 500 µs), for an ACK held too long while the driver is away
//! (`engine::app_driven_wake`), and at each QP deadline in case the driver is away — under
//! loss the READ reorder window and re-READ timer move every few tens of µs: 5 700–7 100 wakes
//! a second in a READ stream at 1 % loss. Under `SCHED_OTHER` each wake preempts whatever runs
//! on the CPU it lands on — on a machine whose CPUs are all busy, the very threads doing the
//! work. On the 2-core VM that was a fifth of a loopback
//! stream: READ at 1 % loss kept 0.80 of its loss-free goodput with the progress thread under
//! `SCHED_OTHER` and 0.95–1.00 with it moved to `SCHED_BATCH`; a loss-free 1 MiB WRITE stream
//! moved 4.2–4.7 GB/s against 4.9–5.4 GB/s (`docs/reliability.md`, "The progress thread's
//! wakes under loss"; `docs/benchmarks.md`). A
//! `SCHED_BATCH` thread does not preempt a running thread when it wakes (Linux
//! `check_preempt_wakeup_fair`: batch and idle tasks leave wake-up preemption to the tick); it
//! runs at once on an idle CPU — where the driver blocked in the kernel — and otherwise within a
//! scheduler tick.
//!
//! When no application thread drives the device, the progress thread is the receiver (a
//! passive responder) and goes back to `SCHED_OTHER`, so a packet's wake-up preempts as any
//! receiver's would. Both changes keep the thread's nice value, and neither needs a privilege
//! (sched(7): an unprivileged thread may switch between `SCHED_OTHER` and `SCHED_BATCH`).
//!
//! **Timer slack.** Most of those wakes only check whether the application still drives (every
//! 500 µs, nothing due earlier). In a VM each is a timer interrupt of its own — an exit to the
//! hypervisor and an injected interrupt on the CPU the driving thread runs on: in a pinned
//! 8-byte ping-pong on the development VM they were ~300 in 20 000 round trips, and the trips
//! they landed in took 10-30 µs longer, which made the 99th percentile. Such a sleep runs with
//! a timer slack of [`CHECK_SLACK_NS`] (`PR_SET_TIMERSLACK`, prctl(2)): the kernel may end it
//! with the next interrupt that comes anyway (the scheduler tick, a packet) within that slack.
//! Every other sleep — a QP deadline, a held ACK, receiving as the only receiver — keeps the
//! thread's default slack (50 µs unless its parent set another).
//!
//! Only where the process has at most [`BATCH_MAX_CPUS`] CPUs ([`few_cpus`]): there the
//! threads doing the work fill every CPU. With CPUs to spare a wake lands on an idle one and
//! preempts nobody, while some of the progress thread's wakes are what a peer waits on (a held
//! ACK, an RNR retry): on the 32-CPU GPU host NCCL all_reduce and all_gather from 8 KiB to
//! 512 KiB over the plugin ran 5–16 % slower with the policy switched there
//! (`docs/benchmarks.md`).

use thread_priority::{
    set_thread_priority_and_policy, thread_native_id, NormalThreadSchedulePolicy, ThreadPriority,
    ThreadPriorityValue, ThreadSchedulePolicy,
};

/// The most CPUs (available to the process: affinity and cgroup quota,
/// `std::thread::available_parallelism`) at which the progress thread switches to
/// `SCHED_BATCH` while an application drives its device.
pub(crate) const BATCH_MAX_CPUS: usize = 2;

/// Whether the process has at most [`BATCH_MAX_CPUS`] CPUs (an unknown count counts as many).
pub(crate) fn few_cpus() -> bool {
    std::thread::available_parallelism().is_ok_and(|n| n.get() <= BATCH_MAX_CPUS)
}

/// The timer slack of a progress thread's sleep that only checks whether an application still
/// drives its device, ns: the check comes at most this much later than the 500 µs asked for.
pub(crate) const CHECK_SLACK_NS: u64 = 500_000;

/// The policy and timer slack of the calling thread as this module set them, each switched
/// only on a change.
#[derive(Debug, Default)]
pub(crate) struct ProgressPolicy {
    /// `SCHED_BATCH` now (else `SCHED_OTHER`, the policy threads start with).
    batch: bool,
    /// A change failed (a seccomp filter, a kernel without `SCHED_BATCH`): the thread stays as
    /// it is and no further change is tried.
    failed: bool,
    /// The timer slack is [`CHECK_SLACK_NS`] now (else the thread's default).
    slack: bool,
    /// A slack change failed: no further change is tried.
    slack_failed: bool,
}

impl ProgressPolicy {
    /// `SCHED_BATCH` for the calling thread when `batch`, else `SCHED_OTHER`, its nice value
    /// kept. A failure is logged once (`tracing` debug) and leaves the thread's policy as it
    /// was; the progress thread works under either policy.
    pub(crate) fn set(&mut self, batch: bool) {
        if batch == self.batch || self.failed {
            return;
        }
        let policy = ThreadSchedulePolicy::Normal(if batch {
            NormalThreadSchedulePolicy::Batch
        } else {
            NormalThreadSchedulePolicy::Other
        });
        match set_policy(policy) {
            Ok(()) => self.batch = batch,
            Err(e) => {
                self.failed = true;
                tracing::debug!(batch, error = %e, "progress thread: scheduling policy unchanged");
            }
        }
    }

    /// A timer slack of [`CHECK_SLACK_NS`] for the calling thread's sleeps when `slack`, else
    /// its default slack (`PR_SET_TIMERSLACK` with 0 restores it). A failure is logged once
    /// (`tracing` debug) and leaves the slack as it was.
    pub(crate) fn set_slack(&mut self, slack: bool) {
        if slack == self.slack || self.slack_failed {
            return;
        }
        let value = if slack {
            std::num::NonZeroU64::new(CHECK_SLACK_NS)
        } else {
            None
        };
        match rustix::thread::set_current_timer_slack(value) {
            Ok(()) => self.slack = slack,
            Err(e) => {
                self.slack_failed = true;
                tracing::debug!(slack, error = %e, "progress thread: timer slack unchanged");
            }
        }
    }

    /// Whether the calling thread runs under `SCHED_BATCH` (as this module set it).
    #[cfg(test)]
    pub(crate) fn batch(&self) -> bool {
        self.batch
    }
}

/// Sets `policy` (a normal one) for the calling thread, keeping its nice value.
///
/// `thread_priority` sets the policy and then the nice value that a priority of 0–99 maps to;
/// the priority used is the one that maps to the thread's nice value now (Linux: the nice
/// value is per thread; `getpriority(PRIO_PROCESS, 0)` reads the calling thread's).
fn set_policy(policy: ThreadSchedulePolicy) -> Result<(), String> {
    let nice = rustix::process::getpriority_process(None).map_err(|e| e.to_string())?;
    let priority = (0..=u8::from(ThreadPriorityValue::MAX))
        .filter_map(|p| ThreadPriorityValue::try_from(p).ok())
        .map(ThreadPriority::Crossplatform)
        .find(|p| p.to_posix(policy).is_ok_and(|n| n == nice))
        .ok_or_else(|| format!("no priority maps to nice {nice}"))?;
    set_thread_priority_and_policy(thread_native_id(), priority, policy).map_err(|e| e.to_string())
}

#[cfg(test)]
mod test {
    use super::ProgressPolicy;

    /// The kernel's view of the calling thread: (policy, nice) from `/proc/thread-self/stat`
    /// (fields 41 `policy` and 19 `nice`, proc(5)).
    fn kernel_view() -> (u32, i32) {
        let stat = std::fs::read_to_string("/proc/thread-self/stat").unwrap();
        // Fields after the command name, which is in parentheses and may hold spaces.
        let rest = &stat[stat.rfind(')').unwrap() + 2..];
        let f: Vec<&str> = rest.split(' ').collect();
        // `rest` starts at field 3 (state).
        (f[41 - 3].parse().unwrap(), f[19 - 3].parse().unwrap())
    }

    /// The thread moves to SCHED_BATCH (3) and back to SCHED_OTHER (0) with its nice value
    /// kept, as the kernel reports it — also a nice value other than 0 (raising it needs no
    /// privilege).
    #[test]
    fn switches_between_batch_and_other_keeping_nice() {
        std::thread::spawn(|| {
            let (policy0, nice0) = kernel_view();
            assert_eq!(policy0, 0, "a new thread runs under SCHED_OTHER");
            let mut p = ProgressPolicy::default();
            p.set(true);
            assert!(p.batch());
            assert_eq!(kernel_view(), (3, nice0));
            p.set(false);
            assert!(!p.batch());
            assert_eq!(kernel_view(), (0, nice0));
            // A thread started under `nice`.
            let nice1 = (nice0 + 5).min(19);
            rustix::process::setpriority_process(None, nice1).unwrap();
            p.set(true);
            assert_eq!(kernel_view(), (3, nice1));
            p.set(false);
            assert_eq!(kernel_view(), (0, nice1));
        })
        .join()
        .unwrap();
    }

    /// The slack of a check-only sleep, then the thread's default again, as the kernel
    /// reports them (`PR_GET_TIMERSLACK`).
    #[test]
    fn switches_the_timer_slack_and_restores_the_default() {
        std::thread::spawn(|| {
            let default = rustix::thread::current_timer_slack().unwrap();
            assert_ne!(default, super::CHECK_SLACK_NS);
            let mut p = ProgressPolicy::default();
            p.set_slack(true);
            assert_eq!(
                rustix::thread::current_timer_slack().unwrap(),
                super::CHECK_SLACK_NS
            );
            p.set_slack(false);
            assert_eq!(rustix::thread::current_timer_slack().unwrap(), default);
        })
        .join()
        .unwrap();
    }
}
