//! Shared pieces of the mlx5 conformance tests: a seeded RNG, random work requests in three
//! spellings (rdmesh's `SendWr`, a command line for the C harness, a JSON line for
//! `rdmesh mlx5 encode`), and building/running `tests/c/mlx5_harness.c` against the system's
//! `<infiniband/mlx5dv.h>` (Debian libibverbs-dev).

#![allow(dead_code)]

use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use rdmesh_core::mlx5::{Payload, SendFlags, SendWr, Sge, TransportSeg, WrOp};
use rdmesh_tests::{assert_ok, have, need, run_bounded, scratch, workspace_root};

/// SplitMix64: a small seeded generator so every run tests the same inputs.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    pub fn u32(&mut self) -> u32 {
        self.u64() as u32
    }

    /// Uniform in `0..n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.u64() % n
    }

    /// `true` with probability `num / den`.
    pub fn chance(&mut self, num: u64, den: u64) -> bool {
        self.below(den) < num
    }

    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.u64() as u8).collect()
    }
}

pub fn hex(b: &[u8]) -> String {
    b.iter().fold(String::new(), |mut s, x| {
        let _ = write!(s, "{x:02x}");
        s
    })
}

pub const OPS: [&str; 9] = [
    "nop",
    "send",
    "send_imm",
    "send_inval",
    "rdma_write",
    "rdma_write_imm",
    "rdma_read",
    "atomic_cs",
    "atomic_fa",
];

/// A random work request, owning its gather list and inline bytes.
#[derive(Debug, Clone)]
pub struct GenWr {
    pub op: &'static str,
    pub signaled: bool,
    pub solicited: bool,
    pub fence: bool,
    pub imm: u32,
    pub raddr: u64,
    pub rkey: u32,
    pub compare: u64,
    pub swap_add: u64,
    pub sges: Vec<Sge>,
    pub inline: Option<Vec<u8>>,
}

impl GenWr {
    pub fn random(r: &mut Rng) -> GenWr {
        let op = OPS[r.below(OPS.len() as u64) as usize];
        let has_imm = matches!(op, "send_imm" | "rdma_write_imm" | "send_inval");
        let remote = matches!(
            op,
            "rdma_write" | "rdma_write_imm" | "rdma_read" | "atomic_cs" | "atomic_fa"
        );
        let inline_ok = matches!(
            op,
            "send" | "send_imm" | "send_inval" | "rdma_write" | "rdma_write_imm"
        );
        let mut g = GenWr {
            op,
            signaled: r.chance(1, 2),
            solicited: r.chance(1, 4),
            fence: r.chance(1, 4),
            imm: if has_imm { r.u32() } else { 0 },
            raddr: if remote { r.u64() } else { 0 },
            rkey: if remote { r.u32() } else { 0 },
            compare: if op == "atomic_cs" { r.u64() } else { 0 },
            swap_add: if op.starts_with("atomic") { r.u64() } else { 0 },
            sges: Vec::new(),
            inline: None,
        };
        if op == "nop" {
            return g;
        }
        if inline_ok && r.chance(2, 5) {
            let n = if r.chance(1, 10) {
                r.below(1000)
            } else {
                r.below(80)
            } as usize;
            g.inline = Some(r.bytes(n));
            return g;
        }
        let n = if r.chance(1, 10) {
            r.below(66)
        } else {
            r.below(5)
        } as usize;
        for _ in 0..n {
            let len = match r.below(8) {
                0 => 0,
                1 => (r.u32() & 0x7fff_ffff).max(1),
                _ => 1 + r.below(65536) as u32,
            };
            g.sges.push(Sge {
                addr: r.u64(),
                lkey: r.u32(),
                len,
            });
        }
        g
    }

    pub fn op(&self) -> WrOp {
        let (raddr, rkey) = (self.raddr, self.rkey);
        match self.op {
            "nop" => WrOp::Nop,
            "send" => WrOp::Send,
            "send_imm" => WrOp::SendImm { imm: self.imm },
            "send_inval" => WrOp::SendInval {
                invalidate_rkey: self.imm,
            },
            "rdma_write" => WrOp::RdmaWrite { raddr, rkey },
            "rdma_write_imm" => WrOp::RdmaWriteImm {
                raddr,
                rkey,
                imm: self.imm,
            },
            "rdma_read" => WrOp::RdmaRead { raddr, rkey },
            "atomic_cs" => WrOp::AtomicCs {
                raddr,
                rkey,
                compare: self.compare,
                swap: self.swap_add,
            },
            "atomic_fa" => WrOp::AtomicFa {
                raddr,
                rkey,
                add: self.swap_add,
            },
            other => unreachable!("{other}"),
        }
    }

    pub fn wr(&self) -> SendWr<'_> {
        SendWr {
            op: self.op(),
            flags: SendFlags {
                signaled: self.signaled,
                solicited: self.solicited,
                fence: self.fence,
            },
            transport: TransportSeg::None,
            payload: match &self.inline {
                Some(b) => Payload::Inline(b),
                None => Payload::Gather(&self.sges),
            },
        }
    }

    /// The harness's `post` command.
    pub fn c_post(&self) -> String {
        let mut s = format!(
            "post {} {} {} {} {} {} {} {} {} {}",
            self.op,
            self.signaled as u8,
            self.solicited as u8,
            self.fence as u8,
            self.imm,
            self.raddr,
            self.rkey,
            self.compare,
            self.swap_add,
            self.sges.len()
        );
        for g in &self.sges {
            let _ = write!(s, " {} {} {}", g.addr, g.lkey, g.len);
        }
        match &self.inline {
            Some(b) if !b.is_empty() => {
                s.push(' ');
                s.push_str(&hex(b));
            }
            _ => s.push_str(" -"),
        }
        s.push('\n');
        s
    }

    /// A line for `rdmesh mlx5 encode`.
    pub fn json(&self, wqe_index: u16, qpn: u32) -> String {
        let mut v = serde_json::json!({
            "opcode": self.op,
            "wqe_index": wqe_index,
            "qpn": qpn,
            "signaled": self.signaled,
            "solicited": self.solicited,
            "fence": self.fence,
        });
        let m = v.as_object_mut().unwrap();
        match self.op {
            "send_imm" | "rdma_write_imm" => {
                m.insert("imm".into(), self.imm.into());
            }
            "send_inval" => {
                m.insert("invalidate_rkey".into(), self.imm.into());
            }
            _ => {}
        }
        if self.op.starts_with("rdma") || self.op.starts_with("atomic") {
            m.insert("raddr".into(), self.raddr.into());
            m.insert("rkey".into(), self.rkey.into());
        }
        if self.op == "atomic_cs" {
            m.insert("compare".into(), self.compare.into());
        }
        if self.op.starts_with("atomic") {
            m.insert("swap_add".into(), self.swap_add.into());
        }
        match &self.inline {
            Some(b) => {
                m.insert("inline".into(), hex(b).into());
            }
            None if !self.sges.is_empty() => {
                let l: Vec<serde_json::Value> = self
                    .sges
                    .iter()
                    .map(|g| serde_json::json!({"addr": g.addr, "lkey": g.lkey, "len": g.len}))
                    .collect();
                m.insert("sge".into(), l.into());
            }
            None => {}
        }
        v.to_string()
    }
}

/// Builds the C harness once per test binary; `None` (skip) when cc or mlx5dv.h is missing
/// and tools are not required.
pub fn harness() -> Option<PathBuf> {
    let available = std::path::Path::new("/usr/include/infiniband/mlx5dv.h").exists()
        && have("cc", &["--version"]);
    if !need(
        available,
        "a C compiler (cc) and libibverbs-dev's <infiniband/mlx5dv.h>",
    ) {
        return None;
    }
    static EXE: OnceLock<PathBuf> = OnceLock::new();
    Some(
        EXE.get_or_init(|| {
            let dir = scratch("mlx5-harness");
            let exe = dir.join("mlx5_harness");
            let src = workspace_root().join("tests/c/mlx5_harness.c");
            let mut cmd = Command::new("cc");
            cmd.args(["-O2", "-Wall", "-Wextra", "-Werror", "-o"])
                .arg(&exe)
                .arg(&src);
            assert_ok(
                &run_bounded(cmd, Duration::from_secs(120)),
                "compiling tests/c/mlx5_harness.c",
            );
            exe
        })
        .clone(),
    )
}

/// Runs the harness over `input` (commands, one per line) and returns its output lines.
pub fn run_harness(exe: &PathBuf, input: &str) -> Vec<String> {
    let dir = exe.parent().unwrap();
    let path = dir.join(format!(
        "in-{}.txt",
        std::thread::current()
            .name()
            .unwrap_or("t")
            .replace("::", "-")
    ));
    std::fs::write(&path, input).unwrap();
    let mut cmd = Command::new(exe);
    cmd.stdin(Stdio::from(std::fs::File::open(&path).unwrap()));
    let out = assert_ok(&run_bounded(cmd, Duration::from_secs(120)), "mlx5 harness");
    out.lines().map(str::to_owned).collect()
}
