//! In-process tests that drive the exported tables through their function pointers, as NCCL
//! does: two comms over loopback (`RDMESH_NICS`), many sizes, a send smaller than its receive,
//! grouped receives, 32 requests in flight, closing with requests in flight, finalize.
//! The process-wide state is shared, so the tests take turns.

use std::ffi::{c_char, c_int, c_ulong, c_void, CStr};
use std::ptr::null_mut;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::abi::types::*;
use crate::abi::v11::ncclNetProperties_v11_t;
use crate::abi::v12::ncclNetProperties_v12_t;
use crate::abi::v8::ncclNetProperties_v8_t;
use crate::abi::v9::ncclNetProperties_v9_t;
use crate::{
    ncclNetPlugin_v10, ncclNetPlugin_v11, ncclNetPlugin_v12, ncclNetPlugin_v8, ncclNetPlugin_v9,
};

static TURN: Mutex<()> = Mutex::new(());
static LINES: Mutex<Vec<(c_int, String)>> = Mutex::new(Vec::new());
const T: Duration = Duration::from_secs(20);

fn setup() -> std::sync::MutexGuard<'static, ()> {
    let g = TURN.lock().unwrap_or_else(|p| p.into_inner());
    std::env::set_var("RDMESH_NICS", "lo=127.0.93.1/24@25");
    std::env::set_var("RDMESH_FINALIZE_WAIT_MS", "5000");
    g
}

/// A logger with the fixed arguments NCCL's variadic logger receives from rdmesh (fmt "%s"
/// and one string). On x86-64 System V a variadic call passes these in the same registers as
/// this non-variadic signature (the callee ignores %al).
extern "C" fn test_logger(
    level: c_int,
    _flags: c_ulong,
    _file: *const c_char,
    _line: c_int,
    fmt: *const c_char,
    s: *const c_char,
) {
    // SAFETY: rdmesh passes NUL-terminated strings that live for the call.
    let (fmt, s) = unsafe { (CStr::from_ptr(fmt), CStr::from_ptr(s)) };
    assert_eq!(fmt.to_bytes(), b"%s");
    LINES
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .push((level, s.to_string_lossy().into_owned()));
}

fn logger() -> ncclDebugLogger_t {
    type L = unsafe extern "C" fn(c_int, c_ulong, *const c_char, c_int, *const c_char, ...);
    // SAFETY: see `test_logger`: on x86-64 the fixed-argument function is call-compatible for
    // the one call shape rdmesh makes (fmt "%s", one char*).
    Some(unsafe { std::mem::transmute::<usize, L>(test_logger as *const () as usize) })
}

fn ok(r: ncclResult_t) {
    assert_eq!(r, NCCL_SUCCESS, "ncclResult {r}");
}

fn pattern(len: usize, seed: u32) -> Vec<u8> {
    let mut x = seed.wrapping_mul(2654435761) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x as u8
        })
        .collect()
}

/// Connects a send comm to a receive comm through the v11 table, polling both like NCCL's
/// service thread.
fn connect_v11(ctx: *mut c_void) -> (*mut c_void, *mut c_void) {
    let n = &ncclNetPlugin_v11;
    let mut handle = [0u8; NCCL_NET_HANDLE_MAXSIZE];
    let mut lc = null_mut();
    // SAFETY: valid out-parameters; the table's functions are the plugin's.
    unsafe {
        ok(n.listen.unwrap()(
            ctx,
            0,
            handle.as_mut_ptr().cast(),
            &mut lc,
        ))
    };
    assert!(!lc.is_null());
    let (mut sc, mut rc): (*mut c_void, *mut c_void) = (null_mut(), null_mut());
    let start = Instant::now();
    while sc.is_null() || rc.is_null() {
        assert!(start.elapsed() < T, "connection not up");
        let mut dev = null_mut();
        // SAFETY: as above; the handle buffer is 128 bytes.
        unsafe {
            if sc.is_null() {
                ok(n.connect.unwrap()(
                    ctx,
                    0,
                    handle.as_mut_ptr().cast(),
                    &mut sc,
                    &mut dev,
                ));
            }
            if rc.is_null() {
                ok(n.accept.unwrap()(lc, &mut rc, &mut dev));
            }
        }
        assert!(dev.is_null(), "device handle left untouched");
        std::thread::sleep(Duration::from_millis(1));
    }
    // SAFETY: lc is a live listen comm.
    unsafe { ok(n.close_listen.unwrap()(lc)) };
    (sc, rc)
}

/// Polls `test` until done; returns the sizes.
fn wait(req: *mut c_void, n: usize) -> Vec<c_int> {
    let mut sizes = vec![-7 as c_int; 64];
    let mut done = 0;
    let start = Instant::now();
    loop {
        // SAFETY: req is a live request; sizes has room for 64 ints (as NCCL passes).
        unsafe {
            ok(ncclNetPlugin_v11.test.unwrap()(
                req,
                &mut done,
                sizes.as_mut_ptr(),
            ))
        };
        if done == 1 {
            return sizes[..n].to_vec();
        }
        assert!(start.elapsed() < T, "request not done");
        std::thread::yield_now();
    }
}

fn isend(sc: *mut c_void, data: &mut [u8], tag: c_int, mh: *mut c_void) -> *mut c_void {
    let mut req: *mut c_void = null_mut();
    let start = Instant::now();
    while req.is_null() {
        assert!(start.elapsed() < T);
        // SAFETY: data is a live host buffer of data.len() bytes.
        unsafe {
            ok(ncclNetPlugin_v11.isend.unwrap()(
                sc,
                data.as_mut_ptr().cast(),
                data.len(),
                tag,
                mh,
                null_mut(),
                &mut req,
            ))
        };
    }
    req
}

fn irecv(rc: *mut c_void, bufs: &mut [&mut [u8]], tags: &[c_int], mh: *mut c_void) -> *mut c_void {
    let mut data: Vec<*mut c_void> = bufs.iter_mut().map(|b| b.as_mut_ptr().cast()).collect();
    let mut sizes: Vec<usize> = bufs.iter().map(|b| b.len()).collect();
    let mut tags = tags.to_vec();
    let mut mhs = vec![mh; bufs.len()];
    let mut phs = vec![null_mut(); bufs.len()];
    let mut req = NCCL_NET_OPTIONAL_RECV_COMPLETION as *mut c_void;
    // SAFETY: arrays of n entries; buffers are live host memory.
    unsafe {
        ok(ncclNetPlugin_v11.irecv.unwrap()(
            rc,
            bufs.len() as c_int,
            data.as_mut_ptr(),
            sizes.as_mut_ptr(),
            tags.as_mut_ptr(),
            mhs.as_mut_ptr(),
            phs.as_mut_ptr(),
            &mut req,
        ))
    };
    assert_ne!(
        req as usize, NCCL_NET_OPTIONAL_RECV_COMPLETION,
        "*request overwritten"
    );
    assert!(!req.is_null(), "room for the receive");
    req
}

#[test]
fn tables_have_the_name_and_the_functions() {
    // SAFETY: the names are 'static C strings.
    for name in [
        ncclNetPlugin_v8.name,
        ncclNetPlugin_v9.name,
        ncclNetPlugin_v10.name,
        ncclNetPlugin_v11.name,
        ncclNetPlugin_v12.name,
    ] {
        assert_eq!(unsafe { CStr::from_ptr(name) }.to_bytes(), b"rdmesh");
    }
    assert!(ncclNetPlugin_v9.make_v_device.is_none());
    assert!(ncclNetPlugin_v10.make_v_device.is_none());
    assert!(ncclNetPlugin_v11.make_v_device.is_none());
    assert!(ncclNetPlugin_v12.make_v_device.is_none());
    assert!(ncclNetPlugin_v11.finalize.is_some() && ncclNetPlugin_v12.finalize.is_some());
    assert!(ncclNetPlugin_v8.irecv.is_some() && ncclNetPlugin_v8.test.is_some());
}

#[test]
fn v11_transfers_grouped_receives_close_in_flight_and_finalize() {
    let _g = setup();
    LINES.lock().unwrap().clear();
    let n = &ncclNetPlugin_v11;
    let mut ctx = null_mut();
    let mut cfg = ncclNetCommConfig_t { traffic_class: -1 };
    // SAFETY: valid out-parameters and config.
    unsafe { ok(n.init.unwrap()(&mut ctx, 0x1234, &mut cfg, logger(), None)) };
    assert!(!ctx.is_null());
    let mut ndev = 0;
    // SAFETY: valid out-parameter.
    unsafe { ok(n.devices.unwrap()(&mut ndev)) };
    assert_eq!(ndev, 1);
    // SAFETY: a zeroed properties struct is a valid out-parameter (all fields are plain data).
    let mut p: ncclNetProperties_v11_t = unsafe { std::mem::zeroed() };
    unsafe { ok(n.get_properties.unwrap()(0, &mut p)) };
    assert_eq!(unsafe { CStr::from_ptr(p.name) }.to_bytes(), b"soft_lo");
    assert_ne!(p.guid, 0);
    assert_eq!(
        (p.ptr_support, p.speed, p.port, p.max_recvs),
        (NCCL_PTR_HOST, 25_000, 1, 8)
    );
    assert_eq!(
        (p.net_device_type, p.v_props.ndevs, p.v_props.devs[0]),
        (NCCL_NET_DEVICE_HOST, 1, 0)
    );
    assert_eq!(
        (p.max_p2p_bytes, p.max_coll_bytes, p.max_multi_request_size),
        (1 << 30, 1 << 30, 1)
    );
    assert!(p.pci_path.is_null(), "lo is virtual");
    assert_ne!(
        unsafe { n.get_properties.unwrap()(1, &mut p) },
        NCCL_SUCCESS
    );

    let (sc, rc) = connect_v11(ctx);
    {
        let lines = LINES.lock().unwrap();
        let conn: Vec<&String> = lines
            .iter()
            .filter(|(_, s)| s.contains("connection dev 0"))
            .map(|(_, s)| s)
            .collect();
        assert_eq!(conn.len(), 2, "{lines:?}");
        assert!(
            conn.iter().all(|s| s.contains("rail")
                && s.contains("MTU")
                && s.contains("GID ::ffff:127.0.93.1")),
            "{conn:?}"
        );
    }

    // Registration: host memory works, CUDA memory is refused with a clear error.
    let mut region = vec![0u8; 4 << 20];
    let mut mh = null_mut();
    unsafe {
        ok(n.reg_mr.unwrap()(
            sc,
            region.as_mut_ptr().cast(),
            region.len(),
            NCCL_PTR_HOST,
            &mut mh,
        ));
        let mut bad = 1 as *mut c_void;
        assert_eq!(
            n.reg_mr.unwrap()(rc, region.as_mut_ptr().cast(), 64, NCCL_PTR_CUDA, &mut bad),
            NCCL_INVALID_USAGE
        );
        assert!(bad.is_null());
    }
    assert!(LINES
        .lock()
        .unwrap()
        .iter()
        .any(|(l, s)| *l == NCCL_LOG_WARN && s.contains("host memory only")));

    // Many sizes, each receive posted larger than its send: the actual size is reported.
    for (i, &size) in [0usize, 1, 127, 128, 4096, 65_537, 1_000_003]
        .iter()
        .enumerate()
    {
        let mut src = pattern(size, i as u32);
        let mut dst = vec![0xeeu8; size + 100];
        let r = irecv(rc, &mut [&mut dst[..]], &[5], null_mut());
        let s = isend(sc, &mut src, 5, null_mut());
        assert_eq!(wait(s, 1), vec![size as c_int]);
        assert_eq!(wait(r, 1), vec![size as c_int]);
        assert!(dst[..size] == src[..], "bytes of a {size}-byte message");
        assert!(
            dst[size..].iter().all(|&b| b == 0xee),
            "nothing past the message"
        );
    }

    // A send inside the registered region with its mhandle.
    region[100..200].copy_from_slice(&pattern(100, 77));
    let mut dst = vec![0u8; 100];
    let r = irecv(rc, &mut [&mut dst[..]], &[1], null_mut());
    let s = isend(sc, &mut region[100..200], 1, mh);
    wait(s, 1);
    assert_eq!(wait(r, 1), vec![100]);
    assert_eq!(dst, pattern(100, 77));

    // Grouped receive: tags choose the buffer, sends in another order.
    let (mut a, mut b, mut c) = (vec![0u8; 300], vec![0u8; 300], vec![0u8; 300]);
    let r = irecv(
        rc,
        &mut [&mut a[..], &mut b[..], &mut c[..]],
        &[10, 11, 12],
        null_mut(),
    );
    let mut s12 = pattern(30, 12);
    let mut s10 = pattern(10, 10);
    let mut s11 = pattern(200, 11);
    let q: Vec<*mut c_void> = [(&mut s12, 12), (&mut s10, 10), (&mut s11, 11)]
        .into_iter()
        .map(|(d, t)| isend(sc, d, t, null_mut()))
        .collect();
    assert_eq!(wait(r, 3), vec![10, 200, 30]);
    for x in q {
        wait(x, 1);
    }
    assert_eq!(
        (&a[..10], &b[..200], &c[..30]),
        (&s10[..], &s11[..], &s12[..])
    );

    // 32 requests in flight on each side, completed in FIFO order.
    let mut srcs: Vec<Vec<u8>> = (0..32)
        .map(|i| pattern(1000 + i * 31, 100 + i as u32))
        .collect();
    let mut dsts: Vec<Vec<u8>> = (0..32).map(|_| vec![0u8; 2048]).collect();
    let rr: Vec<*mut c_void> = dsts
        .iter_mut()
        .map(|d| irecv(rc, &mut [&mut d[..]], &[3], null_mut()))
        .collect();
    let ss: Vec<*mut c_void> = srcs
        .iter_mut()
        .map(|s| isend(sc, s, 3, null_mut()))
        .collect();
    for (i, (r, s)) in rr.into_iter().zip(ss).enumerate() {
        assert_eq!(wait(s, 1), vec![srcs[i].len() as c_int]);
        assert_eq!(wait(r, 1), vec![srcs[i].len() as c_int]);
        assert!(dsts[i][..srcs[i].len()] == srcs[i][..]);
    }

    // Garbage pointers are errors, not crashes.
    let mut done = 0;
    unsafe {
        assert_eq!(
            n.test.unwrap()(0x1000 as *mut c_void, &mut done, null_mut()),
            NCCL_INTERNAL_ERROR
        );
        assert_eq!(
            n.close_send.unwrap()(rc),
            NCCL_INTERNAL_ERROR,
            "a recv comm is not a send comm"
        );
        ok(n.dereg_mr.unwrap()(sc, mh));
        assert_eq!(
            n.dereg_mr.unwrap()(sc, mh),
            NCCL_INTERNAL_ERROR,
            "double deregistration"
        );
        let mut fr = 5 as *mut c_void;
        let mut d = null_mut();
        let mut sz = 0 as c_int;
        ok(n.iflush.unwrap()(
            rc,
            1,
            &mut d,
            &mut sz,
            null_mut(),
            &mut fr,
        ));
        assert!(fr.is_null(), "nothing to flush for host memory");
    }

    // Close both with requests in flight: two 4 MiB transfers just started, and a receive
    // no send will ever match. NCCL never tests them again; the plugin frees them.
    let mut pend = vec![0u8; 4 << 20];
    let mut pend2 = vec![0u8; 4 << 20];
    let mut never = [0u8; 64];
    let mut big = pattern(4 << 20, 1);
    let _r1 = irecv(rc, &mut [&mut pend[..]], &[9], null_mut());
    let _r2 = irecv(rc, &mut [&mut pend2[..]], &[9], null_mut());
    let _r3 = irecv(rc, &mut [&mut never[..]], &[9], null_mut());
    let _s1 = isend(sc, &mut big, 9, null_mut());
    let _s2 = isend(sc, &mut big, 9, null_mut());
    assert_eq!(crate::state::census().3, 5, "five requests in flight");
    unsafe {
        ok(n.close_recv.unwrap()(rc));
        ok(n.close_send.unwrap()(sc));
    }
    assert_eq!(
        crate::state::census(),
        (1, 0, 0, 0),
        "only the context is left"
    );
    unsafe { ok(n.finalize.unwrap()(ctx)) };
    assert_eq!(crate::state::census(), (0, 0, 0, 0));
    assert!(
        crate::state::rdmesh_threads().is_empty(),
        "{:?}",
        crate::state::rdmesh_threads()
    );
    assert!(crate::state::current().is_err());
}

#[test]
fn v8_int_sizes_and_every_properties_layout() {
    let _g = setup();
    // SAFETY: as in the test above: valid out-parameters, live host buffers.
    unsafe {
        ok(ncclNetPlugin_v8.init.unwrap()(None));
        let mut p8: ncclNetProperties_v8_t = std::mem::zeroed();
        ok(ncclNetPlugin_v8.get_properties.unwrap()(0, &mut p8));
        assert_eq!(
            (p8.speed, p8.max_recvs, p8.ptr_support),
            (25_000, 8, NCCL_PTR_HOST)
        );
        let mut p9: ncclNetProperties_v9_t = std::mem::zeroed();
        ok(ncclNetPlugin_v9.get_properties.unwrap()(0, &mut p9));
        assert_eq!(
            (p9.speed, p9.max_p2p_bytes, p9.v_props.ndevs),
            (25_000, 1 << 30, 1)
        );
        ok(ncclNetPlugin_v10.get_properties.unwrap()(0, &mut p9));
        let mut p12: ncclNetProperties_v12_t = std::mem::zeroed();
        ok(ncclNetPlugin_v12.get_properties.unwrap()(0, &mut p12));
        assert_eq!(
            (p12.rail_id, p12.plane_id, p12.max_coll_bytes, p12.guid),
            (-1, -1, 1 << 30, p8.guid)
        );

        let v8 = &ncclNetPlugin_v8;
        let mut handle = [0u8; 128];
        let mut lc = null_mut();
        ok(v8.listen.unwrap()(0, handle.as_mut_ptr().cast(), &mut lc));
        let (mut sc, mut rc): (*mut c_void, *mut c_void) = (null_mut(), null_mut());
        let start = Instant::now();
        while sc.is_null() || rc.is_null() {
            assert!(start.elapsed() < T);
            let mut d = null_mut();
            if sc.is_null() {
                ok(v8.connect.unwrap()(
                    0,
                    handle.as_mut_ptr().cast(),
                    &mut sc,
                    &mut d,
                ));
            }
            if rc.is_null() {
                ok(v8.accept.unwrap()(lc, &mut rc, &mut d));
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        let mut src = pattern(5000, 3);
        let mut dst = vec![0u8; 8000];
        let mut data = [dst.as_mut_ptr().cast::<c_void>()];
        let mut sizes = [8000 as c_int];
        let mut tags = [4 as c_int];
        let mut mhs = [null_mut()];
        let mut rreq = null_mut();
        ok(v8.irecv.unwrap()(
            rc,
            1,
            data.as_mut_ptr(),
            sizes.as_mut_ptr(),
            tags.as_mut_ptr(),
            mhs.as_mut_ptr(),
            &mut rreq,
        ));
        let mut sreq = null_mut();
        ok(v8.isend.unwrap()(
            sc,
            src.as_mut_ptr().cast(),
            5000,
            4,
            null_mut(),
            &mut sreq,
        ));
        assert!(!rreq.is_null() && !sreq.is_null());
        let mut got = [0 as c_int; 64];
        for r in [sreq, rreq] {
            let mut done = 0;
            let start = Instant::now();
            while done == 0 {
                assert!(start.elapsed() < T);
                ok(v8.test.unwrap()(r, &mut done, got.as_mut_ptr()));
            }
            assert_eq!(got[0], 5000);
        }
        assert_eq!(&dst[..5000], &src[..]);
        // A send larger than its receive fails on both ends.
        let mut small = vec![0u8; 10];
        let mut data = [small.as_mut_ptr().cast::<c_void>()];
        let mut sizes = [10 as c_int];
        ok(v8.irecv.unwrap()(
            rc,
            1,
            data.as_mut_ptr(),
            sizes.as_mut_ptr(),
            tags.as_mut_ptr(),
            mhs.as_mut_ptr(),
            &mut rreq,
        ));
        ok(v8.isend.unwrap()(
            sc,
            src.as_mut_ptr().cast(),
            11,
            4,
            null_mut(),
            &mut sreq,
        ));
        for r in [sreq, rreq] {
            let mut done = 0;
            let start = Instant::now();
            let rc = loop {
                assert!(start.elapsed() < T);
                let x = v8.test.unwrap()(r, &mut done, got.as_mut_ptr());
                if x != NCCL_SUCCESS || done == 1 {
                    break x;
                }
            };
            assert_eq!(rc, NCCL_INVALID_USAGE);
        }
        // Bad counts are refused and *request is still written.
        let mut req = 1 as *mut c_void;
        assert_eq!(
            v8.irecv.unwrap()(
                rc,
                9,
                data.as_mut_ptr(),
                sizes.as_mut_ptr(),
                tags.as_mut_ptr(),
                mhs.as_mut_ptr(),
                &mut req
            ),
            NCCL_INTERNAL_ERROR
        );
        assert!(req.is_null());
        ok(v8.close_listen.unwrap()(lc));
        ok(v8.close_send.unwrap()(sc));
        ok(v8.close_recv.unwrap()(rc));
    }
    // v8 has no finalize: drop its init reference the way a last finalize would.
    crate::state::release();
    assert!(crate::state::current().is_err());
}

#[test]
fn two_communicators_share_the_node_and_the_last_finalize_cleans_up() {
    let _g = setup();
    // Two NICs; RDMESH_HCA (NCCL's syntax, host's select.rs) leaves exactly the second out.
    std::env::set_var("RDMESH_NICS", "lo=127.0.94.1/24,lo=127.0.95.1/24");
    std::env::set_var("RDMESH_HCA", "^=soft_lo_1");
    let n = &ncclNetPlugin_v12;
    let (mut c1, mut c2) = (null_mut(), null_mut());
    // SAFETY: valid out-parameters; NULL config and logger are allowed.
    unsafe {
        ok(n.init.unwrap()(&mut c1, 1, null_mut(), None, None));
        ok(n.init.unwrap()(&mut c2, 2, null_mut(), None, None));
    }
    std::env::remove_var("RDMESH_HCA");
    assert_ne!(c1, c2);
    let mut ndev = 0;
    unsafe { ok(n.devices.unwrap()(&mut ndev)) };
    assert_eq!(ndev, 1, "RDMESH_HCA=^=soft_lo_1 leaves one device");
    let mut p: ncclNetProperties_v12_t = unsafe { std::mem::zeroed() };
    unsafe { ok(n.get_properties.unwrap()(0, &mut p)) };
    assert_eq!(unsafe { CStr::from_ptr(p.name) }.to_bytes(), b"soft_lo");
    // A listen comm and a connection left open by the first communicator.
    let (sc, rc) = connect_v11(c1);
    let mut hb = [0u8; 128];
    let mut lc = null_mut();
    unsafe { ok(n.listen.unwrap()(c2, 0, hb.as_mut_ptr().cast(), &mut lc)) };
    let mut attr: ncclNetAttr_t = unsafe { std::mem::zeroed() };
    unsafe { ok(n.set_net_attr.unwrap()(c2, &mut attr)) };
    unsafe { ok(n.finalize.unwrap()(c1)) };
    assert!(
        crate::state::current().is_ok(),
        "the second communicator keeps the node"
    );
    assert!(!crate::state::rdmesh_threads().is_empty());
    let mut data = pattern(10, 1);
    let r = isend(sc, &mut data, 0, null_mut());
    assert!(
        !r.is_null(),
        "comms of a finalized communicator stay usable while others live"
    );
    unsafe {
        ok(n.finalize.unwrap()(c2));
        assert_ne!(
            n.finalize.unwrap()(c2),
            NCCL_SUCCESS,
            "a finalized context is gone"
        );
    }
    assert_eq!(
        crate::state::census(),
        (0, 0, 0, 0),
        "comms left open were closed"
    );
    assert!(
        crate::state::rdmesh_threads().is_empty(),
        "{:?}",
        crate::state::rdmesh_threads()
    );
    let mut done = 0;
    unsafe {
        assert_ne!(n.test.unwrap()(r, &mut done, null_mut()), NCCL_SUCCESS);
        assert_ne!(n.close_send.unwrap()(sc), NCCL_SUCCESS);
        assert_ne!(n.close_recv.unwrap()(rc), NCCL_SUCCESS);
        assert_ne!(n.close_listen.unwrap()(lc), NCCL_SUCCESS);
        let mut nd = 0;
        assert_eq!(
            n.devices.unwrap()(&mut nd),
            NCCL_INTERNAL_ERROR,
            "not initialized"
        );
    }
    // A later init starts afresh (NCCL 2.28+ re-opens the plugin for the next communicator).
    let mut c3 = null_mut();
    unsafe {
        ok(n.init.unwrap()(&mut c3, 3, null_mut(), None, None));
        ok(n.devices.unwrap()(&mut ndev));
        ok(n.finalize.unwrap()(c3));
    }
    assert_eq!(ndev, 2, "without RDMESH_HCA both NICs are devices");
}

#[test]
fn v9_table_transfers_with_size_t_sizes() {
    let _g = setup();
    let v9 = &ncclNetPlugin_v9;
    // SAFETY: valid out-parameters, live host buffers of the sizes given.
    unsafe {
        ok(v9.init.unwrap()(logger()));
        let mut handle = [0u8; 128];
        let mut lc = null_mut();
        ok(v9.listen.unwrap()(0, handle.as_mut_ptr().cast(), &mut lc));
        let (mut sc, mut rc): (*mut c_void, *mut c_void) = (null_mut(), null_mut());
        let start = Instant::now();
        while sc.is_null() || rc.is_null() {
            assert!(start.elapsed() < T);
            let mut d = null_mut();
            if sc.is_null() {
                ok(v9.connect.unwrap()(
                    0,
                    handle.as_mut_ptr().cast(),
                    &mut sc,
                    &mut d,
                ));
            }
            if rc.is_null() {
                ok(v9.accept.unwrap()(lc, &mut rc, &mut d));
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        ok(v9.close_listen.unwrap()(lc));
        let (mut a, mut b) = (vec![0u8; 3000], vec![0u8; 3000]);
        let mut data = [a.as_mut_ptr().cast::<c_void>(), b.as_mut_ptr().cast()];
        let mut sizes = [3000usize, 3000];
        let mut tags = [1 as c_int, 2];
        let mut mhs = [null_mut(), null_mut()];
        let mut rreq = null_mut();
        ok(v9.irecv.unwrap()(
            rc,
            2,
            data.as_mut_ptr(),
            sizes.as_mut_ptr(),
            tags.as_mut_ptr(),
            mhs.as_mut_ptr(),
            &mut rreq,
        ));
        let mut s2 = pattern(2999, 2);
        let mut s1 = pattern(1, 1);
        let mut reqs = vec![rreq];
        for (s, t) in [(&mut s2, 2), (&mut s1, 1)] {
            let mut q = null_mut();
            ok(v9.isend.unwrap()(
                sc,
                s.as_mut_ptr().cast(),
                s.len(),
                t,
                null_mut(),
                &mut q,
            ));
            reqs.push(q);
        }
        for (i, r) in reqs.into_iter().enumerate() {
            let mut done = 0;
            let mut got = [0 as c_int; 64];
            let start = Instant::now();
            while done == 0 {
                assert!(start.elapsed() < T);
                ok(v9.test.unwrap()(r, &mut done, got.as_mut_ptr()));
            }
            match i {
                0 => assert_eq!(&got[..2], &[1, 2999]),
                1 => assert_eq!(got[0], 2999),
                _ => assert_eq!(got[0], 1),
            }
        }
        assert_eq!((&a[..1], &b[..2999]), (&s1[..], &s2[..]));
        ok(v9.close_send.unwrap()(sc));
        ok(v9.close_recv.unwrap()(rc));
    }
    crate::state::release();
}

/// With `RDMESH_PLACEMENT=1`, `regMr` registers the range with the connection's devices: receives
/// posted in it with the mhandle are RDMA WRITTEN by the sender (two lanes on two progress
/// shards, so two protection domains and two loans of the region), byte-exact; a receive
/// without the mhandle still copies; `deregMr` ends the registration.
#[test]
fn v11_receives_into_registered_memory_are_placed_directly() {
    let _g = setup();
    std::env::set_var("RDMESH_NICS", "lo=127.0.96.1/24@25");
    std::env::set_var("RDMESH_PROGRESS_THREADS", "2");
    std::env::set_var("RDMESH_LANES", "2");
    std::env::set_var("RDMESH_PLACEMENT", "1");
    let n = &ncclNetPlugin_v11;
    let mut ctx = null_mut();
    let mut cfg = ncclNetCommConfig_t { traffic_class: -1 };
    // SAFETY: valid out-parameters and config.
    unsafe { ok(n.init.unwrap()(&mut ctx, 0x77, &mut cfg, logger(), None)) };
    std::env::remove_var("RDMESH_PROGRESS_THREADS");
    std::env::remove_var("RDMESH_LANES");
    std::env::remove_var("RDMESH_PLACEMENT");
    let (sc, rc) = connect_v11(ctx);
    let stats = || match crate::state::lookup(rc as usize, "receive comm").unwrap() {
        crate::state::Object::Recv(r) => r.comm.placement_stats(),
        _ => unreachable!(),
    };
    let slot = 4 << 20;
    let sizes = [3 << 20, 1, 65_537, (2 << 20) + 5];
    let mut region = vec![0xeeu8; slot * sizes.len()];
    let mut mh = null_mut();
    // SAFETY: region is live host memory until after deregMr below.
    unsafe {
        ok(n.reg_mr.unwrap()(
            rc,
            region.as_mut_ptr().cast(),
            region.len(),
            NCCL_PTR_HOST,
            &mut mh,
        ))
    };
    let srcs: Vec<Vec<u8>> = sizes
        .iter()
        .enumerate()
        .map(|(i, &s)| pattern(s, 200 + i as u32))
        .collect();
    // The sends come from memory registered on the send comm too.
    let mut sregion = vec![0u8; slot * sizes.len()];
    for (i, src) in srcs.iter().enumerate() {
        sregion[i * slot..i * slot + src.len()].copy_from_slice(src);
    }
    let mut smh = null_mut();
    // SAFETY: sregion is live host memory until after deregMr below.
    unsafe {
        ok(n.reg_mr.unwrap()(
            sc,
            sregion.as_mut_ptr().cast(),
            sregion.len(),
            NCCL_PTR_HOST,
            &mut smh,
        ))
    };
    let rr: Vec<*mut c_void> = region
        .chunks_mut(slot)
        .map(|d| irecv(rc, &mut [d], &[4], mh))
        .collect();
    let ss: Vec<*mut c_void> = sregion
        .chunks_mut(slot)
        .zip(&sizes)
        .map(|(s, &len)| isend(sc, &mut s[..len], 4, smh))
        .collect();
    for (i, (r, s)) in rr.into_iter().zip(ss).enumerate() {
        assert_eq!(wait(s, 1), vec![sizes[i] as c_int]);
        assert_eq!(wait(r, 1), vec![sizes[i] as c_int]);
    }
    for (i, src) in srcs.iter().enumerate() {
        let got = &region[i * slot..(i + 1) * slot];
        assert!(got[..src.len()] == src[..], "bytes of message {i}");
        assert!(got[src.len()..].iter().all(|&b| b == 0xee), "past {i}");
    }
    let total: usize = sizes.iter().sum();
    let st = stats();
    assert_eq!((st.placed, st.copied), (total as u64, 0), "{st:?}");
    let sent = match crate::state::lookup(sc as usize, "send comm").unwrap() {
        crate::state::Object::Send(s) => s.comm.placement_stats(),
        _ => unreachable!(),
    };
    assert_eq!(sent.sent_from_registration, total as u64, "{sent:?}");
    // Without the mhandle: copied.
    let mut src = pattern(100_000, 9);
    let mut dst = vec![0u8; 100_000];
    let r = irecv(rc, &mut [&mut dst[..]], &[4], null_mut());
    let s = isend(sc, &mut src, 4, null_mut());
    wait(s, 1);
    wait(r, 1);
    assert_eq!(dst, src);
    assert_eq!(stats().copied, 100_000);
    // SAFETY: live comms and handle.
    unsafe {
        ok(n.dereg_mr.unwrap()(rc, mh));
        ok(n.dereg_mr.unwrap()(sc, smh));
        ok(n.close_recv.unwrap()(rc));
        ok(n.close_send.unwrap()(sc));
        ok(n.finalize.unwrap()(ctx));
    }
    drop((region, sregion));
}
