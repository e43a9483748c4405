//! Driver settings: the device's name for messages, and the time limits.

use core::time::Duration;

/// How the driver waits and what it calls the device.
///
/// The defaults follow rdma-core `providers/mlx5/mlx5_vfio.c`: firmware initialization polled
/// every 2 ms up to 120 s (`FW_INIT_WAIT_MS`, `FW_PRE_INIT_TIMEOUT_MILI`), commands up to 60 s,
/// health counter sampled every second and declared dead after 3 unchanged samples.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DriverConfig {
    /// Name used in every error and log line (the PCI BDF, e.g. `0000:01:00.0`).
    pub name: String,
    /// Longest wait for the `initializing` bit to clear.
    pub init_timeout: Duration,
    /// Interval between `initializing` polls.
    pub init_poll: Duration,
    /// Longest wait for one command.
    pub cmd_timeout: Duration,
    /// Interval between health-counter samples (also taken while a command is waiting).
    pub health_interval: Duration,
    /// Unchanged health-counter samples after which the device is declared dead.
    pub health_misses: u32,
    /// Log2 of the async event queue's entries (rdma-core: roundup_pow2(32 + 128) = 256).
    pub log_async_eq_size: u8,
    /// Pages given per MANAGE_PAGES command.
    pub pages_per_command: usize,
    /// Check the signature bytes of completed command entries and output mailboxes. Off by
    /// default: the driver turns command checksums off (`cmdif_checksum = 0`, as Linux and
    /// rdma-core do), and firmware then need not sign its outputs. The device model signs
    /// every output, so tests turn it on to catch corrupted completions.
    pub verify_output_signatures: bool,
    /// Append every command (opcode, status, syndrome, time, input and output bytes) to this
    /// file as one JSON object per line ([`super::cmdif::CmdRecord::to_json`]). Default:
    /// `RDMESH_CMD_TRACE` from the environment.
    pub cmd_trace: Option<std::path::PathBuf>,
    /// Keep every command's record in memory ([`super::CmdIf::transcript`]; `rdmesh doctor
    /// --probe`).
    pub record_transcript: bool,
}

/// The environment variable naming the command trace file.
pub const CMD_TRACE_ENV: &str = "RDMESH_CMD_TRACE";

impl DriverConfig {
    /// The defaults for a device called `name`.
    pub fn new(name: impl Into<String>) -> DriverConfig {
        DriverConfig {
            name: name.into(),
            init_timeout: Duration::from_secs(120),
            init_poll: Duration::from_millis(2),
            cmd_timeout: Duration::from_secs(60),
            health_interval: Duration::from_secs(1),
            health_misses: 3,
            log_async_eq_size: 8,
            pages_per_command: 512,
            verify_output_signatures: false,
            cmd_trace: std::env::var_os(CMD_TRACE_ENV)
                .filter(|v| !v.is_empty())
                .map(std::path::PathBuf::from),
            record_transcript: false,
        }
    }

    /// Short limits for a device model in tests: 1 s init, 2 s per command, health every
    /// 20 ms, output signatures checked (the model signs its outputs).
    pub fn for_model(name: impl Into<String>) -> DriverConfig {
        DriverConfig {
            init_timeout: Duration::from_secs(1),
            init_poll: Duration::from_micros(200),
            cmd_timeout: Duration::from_secs(2),
            health_interval: Duration::from_millis(20),
            verify_output_signatures: true,
            ..DriverConfig::new(name)
        }
    }
}
