//! Shared pieces of the `qemu_rxe_*` tests: a Linux guest running rdma_rxe under QEMU TCG on
//! a bridge inside a network namespace this test creates, the rdmesh side in the same
//! namespace, a capture on the bridge, and teardown of all of it (also on failure, when every
//! guest's console is printed).
//!
//! Scripts: `tests/qemu/` (build-image.sh, net-up.sh, net-down.sh, run-guest.sh, guest/init).
//! Addresses: bridge `qfbr0` 10.250.0.1/24 (rdmesh), guests 10.250.0.11 and up.
//! Needs root, /dev/net/tun, qemu-system-x86_64, debootstrap, kmod, cpio, zstd, tshark and
//! python3; with `RDMESH_REQUIRE_TOOLS=1` a missing one fails the test with its name.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use rdmesh_tests::{have, is_root, need, rdmesh_bin, run_bounded, scratch, workspace_root};

/// The rdmesh side's address (the bridge's).
pub const HOST_IP: &str = "10.250.0.1";
/// The first guest's address.
pub const GUEST_IP: &str = "10.250.0.11";

/// A test network with its guests, capture and scratch directory.
pub struct Lab {
    /// Network namespace name.
    pub ns: String,
    /// Scratch directory: consoles, capture, images of this run.
    pub dir: PathBuf,
    img: PathBuf,
    guests: Vec<(String, Child)>,
    tshark: Option<Child>,
    start: Instant,
}

fn qemu_dir() -> PathBuf {
    workspace_root().join("tests/qemu")
}

/// Checks every tool the tests need; `None` (skip) or a failure naming what is missing.
fn tools_ok() -> bool {
    let checks: [(bool, &str); 8] = [
        (is_root(), "root (network namespaces, taps, debootstrap)"),
        (
            Path::new("/dev/net/tun").exists(),
            "/dev/net/tun (tap devices for the guests)",
        ),
        (
            have("qemu-system-x86_64", &["--version"]),
            "qemu-system-x86_64 (apt-get install qemu-system-x86)",
        ),
        (
            have("debootstrap", &["--version"]) || Path::new("/usr/sbin/debootstrap").exists(),
            "debootstrap",
        ),
        (have("cpio", &["--version"]), "cpio"),
        (have("zstd", &["--version"]), "zstd"),
        (have("tshark", &["-v"]), "tshark"),
        (have("python3", &["--version"]), "python3"),
    ];
    checks.iter().all(|(ok, what)| need(*ok, what))
}

/// Boots nothing yet: checks tools, builds (or reuses) the guest image, creates the namespace.
/// Returns `None` when a tool is missing and missing tools are allowed (developer machine).
pub fn lab(test: &str) -> Option<Lab> {
    if !tools_ok() {
        return None;
    }
    let start = Instant::now();
    let dir = scratch(test);
    let mut build = Command::new("bash");
    build.arg(qemu_dir().join("build-image.sh"));
    let out = run_bounded(build, Duration::from_secs(900));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "building the guest image failed ({}):\n{}\n{}",
        out.status,
        stdout,
        String::from_utf8_lossy(&out.stderr)
    );
    eprint!("{}", String::from_utf8_lossy(&out.stderr));
    let img = PathBuf::from(stdout.lines().last().expect("image path").trim());
    remove_stale_namespaces();
    let ns = format!("rdmq{}", std::process::id());
    let lab = Lab {
        ns: ns.clone(),
        dir,
        img,
        guests: Vec::new(),
        tshark: None,
        start,
    };
    let out = run_bounded(
        {
            let mut c = Command::new("bash");
            c.arg(qemu_dir().join("net-up.sh")).arg(&ns).arg("2");
            c
        },
        Duration::from_secs(30),
    );
    assert!(
        out.status.success(),
        "net-up.sh failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    lab.check_qemu_runs();
    lab.log("network up");
    Some(lab)
}

/// Removes namespaces an earlier run of these tests left behind when it was killed (named
/// `rdmq<pid>` after a process that no longer exists).
fn remove_stale_namespaces() {
    let Ok(out) = Command::new("ip").args(["netns", "list"]).output() else {
        return;
    };
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let name = line.split_whitespace().next().unwrap_or("");
        let Some(pid) = name
            .strip_prefix("rdmq")
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        if !Path::new(&format!("/proc/{pid}")).exists() {
            eprintln!("removing stale test namespace {name}");
            let _ = Command::new("bash")
                .arg(qemu_dir().join("net-down.sh"))
                .arg(name)
                .status();
        }
    }
}

impl Lab {
    /// Prints a timestamped progress line.
    pub fn log(&self, what: &str) {
        eprintln!(
            "[qemu lab {:6.1}s] {what}",
            self.start.elapsed().as_secs_f64()
        );
    }

    /// Fails with QEMU's own words when it cannot start at all (no TCG, broken install).
    fn check_qemu_runs(&self) {
        let out = run_bounded(
            {
                let mut c = Command::new("qemu-system-x86_64");
                c.args([
                    "-accel",
                    "tcg",
                    "-machine",
                    "q35",
                    "-display",
                    "none",
                    "-nic",
                    "none",
                    "-monitor",
                    "none",
                    "-serial",
                    "none",
                    "-S",
                    "-no-reboot",
                ])
                .args(["-kernel"])
                .arg(self.img.join("vmlinuz"))
                .args(["-daemonize", "-pidfile"])
                .arg(self.dir.join("probe.pid"));
                c
            },
            Duration::from_secs(60),
        );
        assert!(
            out.status.success(),
            "QEMU cannot run on this machine (qemu-system-x86_64 -accel tcg): {}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        if let Ok(pid) = std::fs::read_to_string(self.dir.join("probe.pid")) {
            let _ = Command::new("kill").arg(pid.trim()).status();
        }
    }

    /// The console file of guest `name`.
    pub fn console_path(&self, name: &str) -> PathBuf {
        self.dir.join(format!("{name}.console"))
    }

    /// The console text of guest `name` so far.
    pub fn console(&self, name: &str) -> String {
        std::fs::read(self.console_path(name))
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_default()
    }

    /// Boots guest `name` on tap `tap` with address `ip`; `script` (shell, run by the guest's
    /// /init after rxe0 is up, with `$GIDX` set) becomes its /qf/run.sh. Helpers the script can
    /// use: `step NAME CMD...` (logs `QF_STEP`/`QF_RESULT NAME rc=N`), `retry CMD...`.
    pub fn boot(&mut self, name: &str, tap: u32, ip: &str, script: &str) {
        let script_path = self.dir.join(format!("{name}.run.sh"));
        std::fs::write(&script_path, script).unwrap();
        let child = Command::new("bash")
            .arg(qemu_dir().join("run-guest.sh"))
            .arg(&self.img)
            .arg(&self.ns)
            .arg(tap.to_string())
            .arg(ip)
            .arg(&script_path)
            .arg(&self.dir)
            .arg(name)
            .stdout(std::fs::File::create(self.dir.join(format!("{name}.qemu.out"))).unwrap())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("starting run-guest.sh");
        self.guests.push((name.to_string(), child));
        self.log(&format!("guest {name} ({ip}) booting"));
    }

    /// Waits until `needle` appears in guest `name`'s console after byte `from`; returns the
    /// byte offset just past it. Panics (with the console) after `limit`, or when the guest
    /// stops before.
    pub fn wait_for(&mut self, name: &str, needle: &str, from: usize, limit: Duration) -> usize {
        let t = Instant::now();
        loop {
            let c = self.console(name);
            if let Some(at) = c.get(from..).and_then(|s| s.find(needle)) {
                return from + at + needle.len();
            }
            let exited = self
                .guests
                .iter_mut()
                .find(|(n, _)| n == name)
                .is_some_and(|(_, ch)| ch.try_wait().ok().flatten().is_some());
            assert!(
                !exited
                    || self
                        .console(name)
                        .get(from..)
                        .is_some_and(|s| s.contains(needle)),
                "guest {name} stopped before printing {needle:?}"
            );
            assert!(
                t.elapsed() < limit,
                "guest {name}: no {needle:?} within {limit:?}"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Waits for guest `name` to power off (it prints `QF_DONE rc=N` first); returns its console.
    pub fn wait_done(&mut self, name: &str, limit: Duration) -> String {
        self.wait_for(name, "QF_DONE rc=", 0, limit);
        let t = Instant::now();
        if let Some((_, ch)) = self.guests.iter_mut().find(|(n, _)| n == name) {
            while t.elapsed() < Duration::from_secs(30) {
                if ch.try_wait().ok().flatten().is_some() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        }
        self.log(&format!("guest {name} done"));
        self.console(name)
    }

    /// An `rdmesh` command that runs inside the test namespace.
    pub fn rdmesh(&self) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.ns]).arg(rdmesh_bin());
        c
    }

    /// Runs `rdmesh ARGS` in the namespace to completion (bounded); returns its output.
    pub fn run_rdmesh(&self, args: &[&str], limit: Duration) -> Output {
        let mut c = self.rdmesh();
        c.args(args);
        self.log(&format!("rdmesh {}", args.join(" ")));
        run_bounded(c, limit)
    }

    /// Starts `rdmesh ARGS` in the namespace in the background (a server).
    pub fn spawn_rdmesh(&self, args: &[&str]) -> Child {
        let mut c = self.rdmesh();
        c.args(args).stdout(Stdio::piped()).stderr(Stdio::piped());
        self.log(&format!("rdmesh {} (background)", args.join(" ")));
        c.spawn().expect("starting rdmesh")
    }

    /// Starts a capture of RoCEv2, the out-of-band TCP port and ICMP on the bridge.
    pub fn start_capture(&mut self) {
        let pcap = self.dir.join("bridge.pcap");
        let err = self.dir.join("tshark.err");
        let child = Command::new("ip")
            .args([
                "netns", "exec", &self.ns, "tshark", "-q", "-i", "qfbr0", "-F", "pcap", "-w",
            ])
            .arg(&pcap)
            .args(["-f", "udp port 4791 or tcp port 18515 or icmp"])
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&err).unwrap())
            .spawn()
            .expect("starting tshark");
        self.tshark = Some(child);
        let t = Instant::now();
        while !std::fs::read_to_string(&err)
            .unwrap_or_default()
            .contains("Capturing on")
        {
            assert!(
                t.elapsed() < Duration::from_secs(60),
                "tshark did not start capturing: {}",
                std::fs::read_to_string(&err).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Stops the capture; returns the pcap file.
    pub fn stop_capture(&mut self) -> PathBuf {
        if let Some(mut c) = self.tshark.take() {
            std::thread::sleep(Duration::from_millis(500));
            let _ = Command::new("kill")
                .args(["-INT", &c.id().to_string()])
                .status();
            let t = Instant::now();
            while c.try_wait().ok().flatten().is_none() && t.elapsed() < Duration::from_secs(20) {
                std::thread::sleep(Duration::from_millis(100));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
        self.dir.join("bridge.pcap")
    }

    /// Runs the independent ICRC checker (Python zlib; with `scapy`, scapy.contrib.roce
    /// too) over the capture; returns the number of RoCEv2 frames and the frame numbers whose
    /// ICRC is wrong.
    pub fn icrc_check(&self, pcap: &Path, scapy: bool) -> (u64, Vec<u64>) {
        let script = workspace_root().join("tests/scripts/icrc_check.py");
        let mut c = Command::new("python3");
        c.arg(&script).arg(pcap);
        if scapy {
            c.arg("--scapy");
        }
        let out = run_bounded(c, Duration::from_secs(600));
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        eprintln!("icrc_check.py: {}", text.lines().last().unwrap_or(""));
        let roce: u64 = text
            .split_whitespace()
            .find_map(|w| w.strip_prefix("roce="))
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| {
                panic!(
                    "icrc_check.py printed no roce= ({}):\n{text}{}",
                    out.status,
                    String::from_utf8_lossy(&out.stderr)
                )
            });
        let mut bad: Vec<u64> = text
            .lines()
            .filter_map(|l| l.strip_prefix("frame "))
            .filter_map(|l| l.split(':').next()?.parse().ok())
            .collect();
        bad.dedup();
        assert_eq!(
            out.status.success(),
            bad.is_empty() && roce > 0,
            "icrc_check.py's exit status disagrees with its output:\n{text}"
        );
        (roce, bad)
    }

    /// Checks the capture: every RoCEv2 frame passes the independent ICRC check, tshark finds
    /// no malformed frame and no ICMP (port unreachable would mean a datagram reached a port
    /// nobody owns), and tshark dissects as many InfiniBand frames as the checker saw RoCEv2
    /// frames. Returns the number of RoCEv2 frames.
    pub fn check_capture(&self, pcap: &Path, scapy: bool) -> u64 {
        let (roce, bad) = self.icrc_check(pcap, scapy);
        assert!(
            bad.is_empty(),
            "frames {bad:?} of {} have a bad ICRC",
            pcap.display()
        );
        self.check_dissection(pcap, roce);
        roce
    }

    /// The tshark part of [`check_capture`](Self::check_capture).
    pub fn check_dissection(&self, pcap: &Path, roce: u64) {
        let count = |filter: &str| -> Vec<String> {
            let out = run_bounded(
                {
                    let mut c = Command::new("tshark");
                    c.arg("-r").arg(pcap).args(["-Y", filter]);
                    c
                },
                Duration::from_secs(300),
            );
            assert!(
                out.status.success(),
                "tshark -Y {filter}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            String::from_utf8_lossy(&out.stdout)
                .lines()
                .map(str::to_string)
                .collect()
        };
        let malformed = count("_ws.malformed");
        assert!(
            malformed.is_empty(),
            "tshark finds malformed frames:\n{}",
            malformed.join("\n")
        );
        let icmp = count("icmp");
        assert!(
            icmp.is_empty(),
            "ICMP on the bridge (port unreachable?):\n{}",
            icmp.join("\n")
        );
        let ib = count("infiniband");
        assert_eq!(
            ib.len() as u64,
            roce,
            "tshark dissects {} InfiniBand frames, the ICRC checker saw {roce} RoCEv2 frames",
            ib.len()
        );
    }

    /// Runs `tshark -r PCAP -Y FILTER -T fields -e FIELDS...`; returns its lines.
    pub fn tshark_fields(&self, pcap: &Path, filter: &str, fields: &[&str]) -> Vec<String> {
        let mut c = Command::new("tshark");
        c.arg("-r").arg(pcap).args(["-Y", filter, "-T", "fields"]);
        for f in fields {
            c.args(["-e", f]);
        }
        let out = run_bounded(c, Duration::from_secs(300));
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(str::to_string)
            .collect()
    }

    /// Reads every RoCEv2 frame of the capture and asserts the addressing facts: each goes
    /// between [`HOST_IP`] and [`GUEST_IP`] (the RoCE v2 IPv4 GIDs) to UDP port 4791.
    /// Returns per-source facts for the test's own assertions.
    pub fn wire_facts(&self, pcap: &Path) -> WireFacts {
        let frames = self.tshark_fields(
            pcap,
            "infiniband",
            &[
                "ip.src",
                "ip.dst",
                "udp.dstport",
                "udp.length",
                "ip.id",
                "infiniband.bth.opcode",
            ],
        );
        let mut f = WireFacts::default();
        for line in &frames {
            let v: Vec<&str> = line.split('\t').collect();
            assert!(v.len() >= 6, "tshark fields: {line}");
            let (src, dst, dport) = (v[0], v[1], v[2]);
            assert!(
                (src == HOST_IP && dst == GUEST_IP) || (src == GUEST_IP && dst == HOST_IP),
                "RoCEv2 frame between unexpected addresses: {line}"
            );
            assert_eq!(dport, "4791", "RoCEv2 frame to another UDP port: {line}");
            let len: u32 = v[3].parse().expect("udp.length");
            let id = u16::from_str_radix(v[4].trim_start_matches("0x"), 16).expect("ip.id");
            let op: u8 = v[5].parse().expect("bth.opcode");
            let m = f.max_udp_len.entry(src.to_string()).or_insert(0);
            *m = (*m).max(len);
            *f.nonzero_ip_id.entry(src.to_string()).or_insert(0) += u64::from(id != 0);
            f.opcodes.entry(src.to_string()).or_default().insert(op);
            *f.frames.entry(src.to_string()).or_insert(0) += 1;
        }
        f
    }

    /// Examines every retransmission in the capture. rdmesh must retransmit nothing and send
    /// no NAK in a clean run. rxe may retransmit on its own: its retransmit timer is armed by
    /// the first send and only pushed back by ACKs that leave work outstanding, so in a
    /// ping-pong it can fire while a message is still being sent (it counts
    /// `completer_retry_err`). Such a retry is spurious — it follows the original packet by
    /// less than the QPs' local ACK timeout (4.096 µs · 2^14 ≈ 67 ms) — and every rxe
    /// retransmission must be of that kind: one that came later would mean rdmesh failed to
    /// ACK in time. Returns the number of rxe retry episodes (a PSN repeating or going backwards on
    /// a QP).
    pub fn rxe_spurious_retries(&self, pcap: &Path) -> u64 {
        let rows = self.tshark_fields(
            pcap,
            "infiniband",
            &[
                "frame.number",
                "frame.time_relative",
                "ip.src",
                "udp.srcport",
                "infiniband.bth.destqp",
                "infiniband.bth.opcode",
                "infiniband.bth.psn",
                "infiniband.aeth.syndrome",
            ],
        );
        let mut first_seen = std::collections::HashMap::new();
        let mut last_psn = std::collections::HashMap::new();
        let mut episodes = 0u64;
        for r in &rows {
            let v: Vec<&str> = r.split('\t').collect();
            let (frame, t, src, sport, qp) = (v[0], v[1], v[2], v[3], v[4]);
            let t: f64 = t.parse().expect("frame.time_relative");
            let op: u8 = v[5].parse().expect("opcode");
            let psn: u32 = v[6].parse().expect("psn");
            if op == 17 {
                let syndrome: u8 = v[7].parse().unwrap_or(0);
                assert!(
                    src != HOST_IP || syndrome >> 5 == 0,
                    "rdmesh sent a NAK/RNR NAK (syndrome {syndrome:#04x}) in a clean run: frame {frame}"
                );
                continue;
            }
            // rdmesh's READ responses repeat when rxe repeats a READ request (its own retry).
            if src == HOST_IP && (13..=16).contains(&op) {
                continue;
            }
            // Requests and READ responses, per sending QP (source port, destination QP).
            let key = (src.to_string(), sport.to_string(), qp.to_string());
            if let Some(&t0) = first_seen.get(&(key.clone(), psn)) {
                assert_eq!(
                    src, GUEST_IP,
                    "rdmesh retransmitted PSN {psn} (frame {frame}) in a clean run"
                );
                let dt: f64 = t - t0;
                assert!(
                    dt < 0.067,
                    "rxe retransmitted PSN {psn} (frame {frame}) {:.1} ms after sending it: rdmesh's ACK was late or lost",
                    dt * 1e3
                );
            } else {
                first_seen.insert((key.clone(), psn), t);
            }
            if let Some(prev) = last_psn.insert(key, psn) {
                let back = prev.wrapping_sub(psn) & 0xff_ffff;
                if back < 0x80_0000 {
                    episodes += 1;
                    eprintln!("rxe retry episode at frame {frame}: PSN {prev} -> {psn} (QP {qp})");
                }
            }
        }
        episodes
    }

    fn teardown(&mut self) {
        let _ = self.stop_capture();
        for (_, c) in &mut self.guests {
            let _ = c.kill();
            let _ = c.wait();
        }
        // run-guest.sh execs `ip netns exec`, which execs QEMU: the child is QEMU itself.
        let _ = Command::new("bash")
            .arg(qemu_dir().join("net-down.sh"))
            .arg(&self.ns)
            .status();
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        if std::thread::panicking() {
            for (name, _) in &self.guests {
                eprintln!(
                    "===== console of guest {name} ({}) =====\n{}\n===== end of console {name} =====",
                    self.console_path(name).display(),
                    self.console(name)
                );
            }
        }
        self.teardown();
        self.log("torn down");
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// Per-source facts of the RoCEv2 frames in a capture (keys: source IP as text).
#[derive(Debug, Default)]
pub struct WireFacts {
    /// Largest UDP length (header + BTH + extension headers + payload + ICRC), bytes.
    pub max_udp_len: std::collections::HashMap<String, u32>,
    /// Frames with a non-zero IPv4 identification.
    pub nonzero_ip_id: std::collections::HashMap<String, u64>,
    /// BTH opcodes seen.
    pub opcodes: std::collections::HashMap<String, std::collections::BTreeSet<u8>>,
    /// Frames.
    pub frames: std::collections::HashMap<String, u64>,
}

impl WireFacts {
    /// Asserts what a correct exchange between rdmesh and rxe looks like: rdmesh (at
    /// [`HOST_IP`]) sends IPv4 ID 0 (its ICRC rule), rxe sends non-zero IDs (so rdmesh verified
    /// rxe's ICRCs over the real header), and the largest frame each way has UDP length
    /// `max_udp_len` (the path MTU both ends negotiated).
    pub fn assert_rdmesh_rxe(&self, max_udp_len: u32) {
        eprintln!("wire facts: {self:?}");
        assert_eq!(
            self.max_udp_len.get(HOST_IP),
            Some(&max_udp_len),
            "rdmesh's largest frame"
        );
        assert_eq!(
            self.max_udp_len.get(GUEST_IP),
            Some(&max_udp_len),
            "rxe's largest frame"
        );
        assert_eq!(
            self.nonzero_ip_id.get(HOST_IP),
            Some(&0),
            "rdmesh sends IPv4 ID 0"
        );
        assert!(
            self.nonzero_ip_id.get(GUEST_IP).is_some_and(|&n| n > 0),
            "rxe sends non-zero IPv4 IDs"
        );
    }
}

/// rxe's port counters printed by the guest (`QF_COUNTER name=value`).
pub fn counters(console: &str) -> Vec<(String, u64)> {
    console
        .lines()
        .filter_map(|l| l.trim().strip_prefix("QF_COUNTER "))
        .filter_map(|kv| {
            let (k, v) = kv.split_once('=')?;
            Some((k.to_string(), v.trim().parse().ok()?))
        })
        .collect()
}

/// The value of counter `name`.
pub fn counter(console: &str, name: &str) -> u64 {
    counters(console)
        .into_iter()
        .find(|(k, _)| k == name)
        .unwrap_or_else(|| panic!("rxe counter {name} not printed by the guest"))
        .1
}

/// Prints rxe's counters and asserts that none of the error counters moved: no sequence
/// errors, RNR NAKs, duplicates or send errors, and no retries beyond `spurious_retries`
/// (rxe's own timer retries, each shown spurious in the capture by
/// [`Lab::rxe_spurious_retries`]).
pub fn assert_clean_counters(console: &str, spurious_retries: u64) {
    let all = counters(console);
    assert!(!all.is_empty(), "the guest printed no rxe counters");
    eprintln!(
        "rxe hw_counters: {}",
        all.iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(" ")
    );
    for name in [
        "rcvd_seq_err",
        "out_of_seq_request",
        "duplicate_request",
        "retry_exceeded_err",
        "retry_rnr_exceeded_err",
        "rcvd_rnr_err",
        "send_rnr_err",
        "send_err",
    ] {
        assert_eq!(
            counter(console, name),
            0,
            "rxe counter {name} moved in a clean run"
        );
    }
    let retries = counter(console, "completer_retry_err");
    assert!(
        retries <= spurious_retries,
        "rxe counted {retries} retries (completer_retry_err), the capture shows {spurious_retries} spurious ones"
    );
    if retries > 0 {
        eprintln!(
            "rxe retried {retries} time(s) on its own timer (spurious: shown in the capture)"
        );
    }
}

/// The `QF_RESULT NAME rc=N` of a guest step.
pub fn step_rc(console: &str, step: &str) -> Option<i32> {
    let key = format!("QF_RESULT {step} rc=");
    console
        .lines()
        .find_map(|l| l.split_once(&key).map(|(_, rc)| rc.trim().parse().ok()))
        .flatten()
}

/// Asserts a successful rdmesh run, printing both of its streams either way.
pub fn rdmesh_ok(out: &Output, what: &str) -> String {
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    eprintln!("--- {what}: {}\n{stdout}{stderr}", out.status);
    assert!(out.status.success(), "{what} failed ({})", out.status);
    stdout
}
