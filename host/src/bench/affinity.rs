//! `--cpus`: pinning a benchmark run to a CPU list, taskset's semantics (`sched_setaffinity`
//! on the process before it starts any thread; threads and child processes inherit it).

use nix::sched::{sched_setaffinity, CpuSet};
use nix::unistd::Pid;

use crate::error::{Error, Result};

/// Pins the calling thread — and every thread and process it starts afterwards — to `cpus`.
///
/// Errors: [`Error::Config`] when a CPU number is beyond what the kernel's CPU set holds or
/// the kernel refuses the set (a CPU that is offline or outside this process's cpuset).
pub fn pin(cpus: &[usize]) -> Result<()> {
    let mut set = CpuSet::new();
    for &c in cpus {
        set.set(c).map_err(|e| {
            Error::Config(format!(
                "--cpus: CPU {c} is out of range ({e}); see `nproc`"
            ))
        })?;
    }
    sched_setaffinity(Pid::from_raw(0), &set).map_err(|e| {
        Error::Config(format!(
            "--cpus {cpus:?}: the kernel refused the CPU set ({e}); check `nproc` and the cgroup's cpuset"
        ))
    })?;
    tracing::info!(
        ?cpus,
        "pinned the benchmark (every thread and the reference's processes)"
    );
    Ok(())
}
