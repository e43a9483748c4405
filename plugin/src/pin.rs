//! Keeps the plugin mapped for the life of the process.
//!
//! NCCL 2.28+ dlcloses a net plugin after its last communicator (`NCCL_NET_PLUGIN_REF_COUNT`
//! defaults to 0). `finalize` stops rdmesh's threads, but v10-and-older tables have no
//! `finalize`, a thread may still be returning from its last call, and NCCL may keep the
//! `name`/`pciPath` pointers of `getProperties`. Re-opening the library with
//! `RTLD_NOLOAD | RTLD_NODELETE` (glibc `dlopen(3)`) makes every later `dlclose` leave it
//! mapped; NCCL's next `dlopen` finds it again and `init` starts afresh.

use std::ffi::c_void;
use std::sync::Once;

/// Pins the shared object holding this code (once; a no-op when linked into an executable).
pub fn pin_library() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let mut info = libc::Dl_info {
            dli_fname: std::ptr::null(),
            dli_fbase: std::ptr::null_mut(),
            dli_sname: std::ptr::null(),
            dli_saddr: std::ptr::null_mut(),
        };
        let addr = pin_library as *const c_void;
        // SAFETY: `addr` is an address inside this object; `info` is a valid out-parameter
        // that dladdr fills with pointers owned by the dynamic linker.
        let found = unsafe { libc::dladdr(addr, &mut info) };
        if found == 0 || info.dli_fname.is_null() {
            return;
        }
        // SAFETY: `dli_fname` is a NUL-terminated path owned by the dynamic linker, valid
        // while the object is loaded (it is: this code runs from it). RTLD_NOLOAD only takes
        // a reference on an object already loaded; the handle is kept forever on purpose.
        let h = unsafe {
            libc::dlopen(
                info.dli_fname,
                libc::RTLD_NOW | libc::RTLD_NOLOAD | libc::RTLD_NODELETE,
            )
        };
        let _ = h;
    });
}
