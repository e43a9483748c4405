//! Logging through NCCL's logger (`ncclDebugLogger_t`, given to `init`), subsystem `NCCL_NET`
//! (plus `NCCL_INIT` for setup lines), so `NCCL_DEBUG=INFO` shows rdmesh's lines as
//! `NET/rdmesh …`. Without a logger (a program that drives the plugin itself), lines go to
//! `tracing`, and warnings also to stderr.
//!
//! The logger is variadic; rdmesh always passes the format `"%s"` and one preformatted,
//! NUL-free string, so no varargs other than one `char*` cross the boundary.

use std::ffi::{c_char, c_int, c_ulong, CString};
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::abi::types::{ncclDebugLogger_t, NCCL_LOG_INFO, NCCL_LOG_TRACE, NCCL_LOG_WARN};

/// The logger NCCL gave the latest `init`, as an address (0: none).
static LOGGER: AtomicUsize = AtomicUsize::new(0);

/// Remembers NCCL's logger (a NULL logger keeps the previous one).
pub fn set_logger(logger: ncclDebugLogger_t) {
    if let Some(f) = logger {
        LOGGER.store(f as usize, Ordering::Release);
    }
}

/// Forgets the logger (after the last `finalize`: the next `init` brings a new one).
pub fn clear_logger() {
    LOGGER.store(0, Ordering::Release);
}

/// Whether NCCL gave a logger.
pub fn has_logger() -> bool {
    LOGGER.load(Ordering::Acquire) != 0
}

fn current() -> ncclDebugLogger_t {
    let a = LOGGER.load(Ordering::Acquire);
    if a == 0 {
        return None;
    }
    type LogFn = unsafe extern "C" fn(c_int, c_ulong, *const c_char, c_int, *const c_char, ...);
    // SAFETY: `a` was stored by `set_logger` from a non-NULL `ncclDebugLogger_t`, a function
    // pointer of exactly this type; function pointers and usize have the same size on the
    // supported targets.
    Some(unsafe { std::mem::transmute::<usize, LogFn>(a) })
}

/// Logs `msg` at `level` (`NCCL_LOG_*`) with subsystem `flags` (`NCCL_NET`, …). `file`/`line`
/// are the caller's (`file!()`, `line!()`).
pub fn log(level: c_int, flags: c_ulong, file: &'static str, line: u32, msg: &str) {
    let text = format!("NET/rdmesh {msg}");
    match current() {
        Some(f) => {
            let c = CString::new(text.replace('\0', " ")).unwrap_or_default();
            let file_c = CString::new(file).unwrap_or_default();
            // SAFETY: NCCL's logger takes (level, flags, file, line, fmt, ...); fmt "%s"
            // consumes exactly one `char*`, which points at a NUL-terminated string alive for
            // the call. Both C strings outlive the call.
            unsafe {
                f(
                    level,
                    flags,
                    file_c.as_ptr(),
                    line as c_int,
                    c"%s".as_ptr(),
                    c.as_ptr(),
                )
            };
        }
        None => {
            if level == NCCL_LOG_WARN {
                eprintln!("rdmesh WARN {text}");
                tracing::warn!("{text}");
            } else if level == NCCL_LOG_INFO {
                tracing::info!("{text}");
            } else if level == NCCL_LOG_TRACE {
                tracing::trace!("{text}");
            }
        }
    }
}

/// `info!(flags, "fmt", args)`: an INFO line.
#[macro_export]
macro_rules! info {
    ($flags:expr, $($arg:tt)*) => {
        $crate::log::log($crate::abi::types::NCCL_LOG_INFO, $flags, file!(), line!(), &format!($($arg)*))
    };
}

/// `warn!(flags, "fmt", args)`: a WARN line.
#[macro_export]
macro_rules! warn {
    ($flags:expr, $($arg:tt)*) => {
        $crate::log::log($crate::abi::types::NCCL_LOG_WARN, $flags, file!(), line!(), &format!($($arg)*))
    };
}
