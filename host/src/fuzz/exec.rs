//! `rdmesh fuzz exec`: generated frames as a pcap file, given to a program; the pcaps that
//! kill it with a signal (a crash) or outlive `--timeout` (a hang) are findings, minimized to
//! the fewest frames and then the smallest frames that still do it, and saved with the seed
//! that reproduces them.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use rdmesh_core::wire::gen::{Generated, Violation};

use super::coverage::{opcode_name, Coverage};
use super::{entropy_for, generate, pcap_target, pcapio, refit, SplitMix64};
use crate::error::{Error, Result};

/// What `rdmesh fuzz exec` does.
#[derive(Debug, Clone)]
pub struct ExecOptions {
    /// The program and its arguments; the pcap path is appended.
    pub program: Vec<String>,
    /// Iterations (one pcap and one run each).
    pub iters: u64,
    /// Index of the first iteration (to reproduce iteration N: `--first-iter N --iters 1`).
    pub first_iter: u64,
    /// Seed of every decision.
    pub seed: u64,
    /// Frames per pcap.
    pub frames: usize,
    /// Where findings (and the working pcap) go.
    pub out: PathBuf,
    /// A run longer than this is a hang.
    pub timeout: Duration,
    /// Stop after this long even if iterations remain.
    pub duration: Option<Duration>,
    /// Stop after this many distinct findings (0: never).
    pub max_findings: usize,
    /// Control: frames of random bytes with the same count and lengths instead of generated
    /// ones.
    pub random_bytes: bool,
    /// Most program runs spent minimizing one finding.
    pub minimize_runs: u32,
}

/// How a run ended badly.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Failure {
    /// Killed by this signal.
    Crash(i32),
    /// Still running after the timeout (then killed).
    Hang,
}

impl Failure {
    /// `crash-sig11` or `hang`.
    pub fn tag(self) -> String {
        match self {
            Failure::Crash(s) => format!("crash-sig{s}"),
            Failure::Hang => "hang".into(),
        }
    }
}

/// One saved finding.
#[derive(Debug, Clone)]
pub struct Finding {
    /// Crash or hang.
    pub failure: Failure,
    /// Iteration that produced it.
    pub iter: u64,
    /// The minimized reproducer.
    pub pcap: PathBuf,
    /// Frames before and after minimizing.
    pub frames: (usize, usize),
    /// Bytes of the minimized frames.
    pub bytes: usize,
    /// Whether the minimized pcap still failed the same way when last run.
    pub reproduced: bool,
    /// Generator description of the minimized frames (original index, opcode, violation).
    pub cases: Vec<(usize, Generated)>,
}

/// The result of a run.
#[derive(Debug, Clone, Default)]
pub struct ExecSummary {
    /// Iterations run.
    pub iterations: u64,
    /// Frames written.
    pub frames: u64,
    /// Distinct findings, saved.
    pub findings: Vec<Finding>,
    /// Failing iterations whose finding duplicated a saved one.
    pub duplicates: u64,
    /// Frames per opcode and violation.
    pub coverage: Coverage,
    /// Wall time.
    pub elapsed: Duration,
}

struct Runner<'a> {
    opts: &'a ExecOptions,
    work: PathBuf,
    runs: u64,
}

impl Runner<'_> {
    /// Runs the program on `frames`; `Some(failure)` when it crashed or hung.
    fn run(&mut self, frames: &[Vec<u8>]) -> Result<Option<Failure>> {
        pcapio::write(&self.work, frames)?;
        self.runs += 1;
        let stderr = std::fs::File::create(self.work.with_extension("stderr"))
            .map_err(|e| Error::io("creating the program's stderr file", e))?;
        let mut child = Command::new(&self.opts.program[0])
            .args(&self.opts.program[1..])
            .arg(&self.work)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr)
            .process_group(0)
            .spawn()
            .map_err(|e| {
                Error::io(
                    format!(
                        "running {} (is it installed and executable?)",
                        self.opts.program[0]
                    ),
                    e,
                )
            })?;
        let start = Instant::now();
        let mut nap = Duration::from_micros(200);
        loop {
            if let Some(st) = child
                .try_wait()
                .map_err(|e| Error::io("waiting for the program", e))?
            {
                return Ok(st.signal().map(Failure::Crash));
            }
            if start.elapsed() > self.opts.timeout {
                // The child leads its own process group: end it and whatever it started.
                let pgid = nix::unistd::Pid::from_raw(child.id() as i32);
                let _ = nix::sys::signal::killpg(pgid, nix::sys::signal::Signal::SIGKILL);
                let _ = child.wait();
                return Ok(Some(Failure::Hang));
            }
            std::thread::sleep(nap);
            nap = (nap * 2).min(Duration::from_millis(5));
        }
    }
}

/// The frames of iteration `iter`: generated (with their descriptions), or with
/// `random_bytes` the same count and lengths of random bytes.
pub fn iteration_frames(opts: &ExecOptions, iter: u64) -> Result<Vec<super::Frame>> {
    let target = pcap_target(opts.seed, iter);
    let mut out = Vec::with_capacity(opts.frames);
    for j in 0..opts.frames as u64 {
        let mut f = generate(&target, &entropy_for(opts.seed, iter, j))?;
        if opts.random_bytes {
            let mut r = SplitMix64::new(opts.seed ^ iter.rotate_left(29) ^ j.rotate_left(47));
            r.fill(&mut f.bytes);
        }
        out.push(f);
    }
    Ok(out)
}

/// Fewest frames, then smallest frames, that still fail as `want`. Returns the kept original
/// indices and bytes.
fn minimize(
    r: &mut Runner<'_>,
    frames: &[Vec<u8>],
    want: Failure,
) -> Result<(Vec<usize>, Vec<Vec<u8>>)> {
    let budget = r.runs + u64::from(r.opts.minimize_runs);
    let mut keep: Vec<usize> = (0..frames.len()).collect();
    let pick = |k: &[usize]| k.iter().map(|&i| frames[i].clone()).collect::<Vec<_>>();
    // 1. One frame alone, last frames first (a parser fails after reading its trigger).
    let mut single = None;
    for &i in keep.iter().rev() {
        if r.runs >= budget {
            break;
        }
        if r.run(&pick(&[i]))? == Some(want) {
            single = Some(i);
            break;
        }
    }
    if let Some(i) = single {
        keep = vec![i];
    } else {
        // 2. ddmin over the frames: drop chunks while it still fails.
        let mut n = 2usize;
        while keep.len() >= 2 && r.runs < budget {
            let chunk = keep.len().div_ceil(n);
            let mut reduced = false;
            let chunks = n;
            for c in 0..chunks {
                let lo = c * chunk;
                if lo >= keep.len() {
                    break;
                }
                let hi = (lo + chunk).min(keep.len());
                let rest: Vec<usize> = keep[..lo].iter().chain(&keep[hi..]).copied().collect();
                if rest.is_empty() || r.runs >= budget {
                    continue;
                }
                if r.run(&pick(&rest))? == Some(want) {
                    keep = rest;
                    n = (n - 1).max(2);
                    reduced = true;
                    break;
                }
            }
            if !reduced {
                if n >= keep.len() {
                    break;
                }
                n = (2 * n).min(keep.len());
            }
        }
    }
    // 3. Shrink each frame: cut bytes before its ICRC, refit lengths and ICRC.
    let mut cur = pick(&keep);
    for k in 0..cur.len() {
        let mut cut = cur[k].len() / 2;
        while cut > 0 && r.runs < budget {
            let f = &cur[k];
            let min_len = 14 + 40 + 8 + 12 + 4;
            if f.len() <= min_len || f.len() - cut < min_len {
                cut /= 2;
                continue;
            }
            let at = f.len() - 4 - cut;
            let mut c = f[..at].to_vec();
            c.extend_from_slice(&f[f.len() - 4..]);
            let Some(c) = refit(&c) else {
                cut /= 2;
                continue;
            };
            let mut trial = cur.clone();
            trial[k] = c;
            if r.run(&trial)? == Some(want) {
                cur = trial;
            } else {
                cut /= 2;
            }
        }
    }
    Ok((keep, cur))
}

fn write_report(
    path: &Path,
    opts: &ExecOptions,
    iter: u64,
    failure: Failure,
    cases: &[(usize, Generated)],
    frames: &[Vec<u8>],
    reproduced: bool,
) -> Result<()> {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{} of `{}` at iteration {iter} (seed {})",
        match failure {
            Failure::Crash(sig) => format!("crash: killed by signal {sig}"),
            Failure::Hang => format!("hang: still running after {:?}", opts.timeout),
        },
        opts.program.join(" "),
        opts.seed
    );
    let _ = writeln!(
        s,
        "minimized reproducer {} (still fails: {reproduced})",
        path.with_extension("pcap").display()
    );
    let _ = writeln!(
        s,
        "regenerate the original pcap: rdmesh fuzz exec --seed {} --first-iter {iter} --iters 1 --frames {}{} -- {}",
        opts.seed,
        opts.frames,
        if opts.random_bytes { " --random-bytes" } else { "" },
        opts.program.join(" ")
    );
    let _ = writeln!(s, "frames (original index: generator case; decode):");
    for ((i, g), f) in cases.iter().zip(frames) {
        if opts.random_bytes {
            let _ = writeln!(
                s,
                "  #{i}: random bytes -> {}",
                crate::cli::pcap::frame_text(*i as u64 + 1, f).trim()
            );
            continue;
        }
        let _ = writeln!(
            s,
            "  #{i}: opcode {:#04x} {} violation {} psn {} payload {} -> {}",
            g.opcode,
            opcode_name(g.opcode),
            g.violation.name(),
            g.psn,
            g.payload_len,
            crate::cli::pcap::frame_text(*i as u64 + 1, f).trim()
        );
    }
    std::fs::write(path, s).map_err(|e| Error::io(format!("writing {}", path.display()), e))
}

/// Runs `rdmesh fuzz exec`. Progress lines go to `log` (every 10 s and per finding).
///
/// Errors: an empty program, an unwritable `out` directory, a program that cannot be
/// started.
pub fn run(opts: &ExecOptions, log: &mut dyn std::io::Write) -> Result<ExecSummary> {
    if opts.program.is_empty() {
        return Err(Error::Config(
            "give the program after `--`, e.g. `rdmesh fuzz exec -- tshark -r`".into(),
        ));
    }
    if opts.frames == 0 {
        return Err(Error::Config("--frames must be at least 1".into()));
    }
    std::fs::create_dir_all(&opts.out)
        .map_err(|e| Error::io(format!("creating {}", opts.out.display()), e))?;
    let mut r = Runner {
        opts,
        work: opts
            .out
            .join(format!("current-{}.pcap", std::process::id())),
        runs: 0,
    };
    let start = Instant::now();
    let mut sum = ExecSummary::default();
    let mut seen: BTreeSet<(Failure, u8, Violation)> = BTreeSet::new();
    let mut last_log = Instant::now();
    for iter in opts.first_iter..opts.first_iter.saturating_add(opts.iters) {
        if opts.duration.is_some_and(|d| start.elapsed() >= d) {
            break;
        }
        let frames = iteration_frames(opts, iter)?;
        let bytes: Vec<Vec<u8>> = frames.iter().map(|f| f.bytes.clone()).collect();
        if !opts.random_bytes {
            for f in &frames {
                sum.coverage.record(&f.info, None);
            }
        }
        sum.iterations += 1;
        sum.frames += frames.len() as u64;
        if let Some(failure) = r.run(&bytes)? {
            let (keep, min) = minimize(&mut r, &bytes, failure)?;
            let reproduced = r.run(&min)? == Some(failure);
            let last = *keep.last().unwrap_or(&0);
            let key = (
                failure,
                frames[last].info.opcode,
                frames[last].info.violation,
            );
            if !seen.insert(key) {
                sum.duplicates += 1;
            } else {
                let base = opts
                    .out
                    .join(format!("{}-seed{}-iter{iter}", failure.tag(), opts.seed));
                let pcap = base.with_extension("pcap");
                pcapio::write(&pcap, &min)?;
                pcapio::write(&base.with_extension("orig.pcap"), &bytes)?;
                let cases: Vec<(usize, Generated)> =
                    keep.iter().map(|&i| (i, frames[i].info)).collect();
                write_report(
                    &base.with_extension("txt"),
                    opts,
                    iter,
                    failure,
                    &cases,
                    &min,
                    reproduced,
                )?;
                let f = Finding {
                    failure,
                    iter,
                    pcap,
                    frames: (bytes.len(), min.len()),
                    bytes: min.iter().map(Vec::len).sum(),
                    reproduced,
                    cases,
                };
                let _ = writeln!(
                    log,
                    "rdmesh fuzz exec: finding {}: {} at iteration {iter}, minimized {} -> {} frame(s) of {} bytes: {}",
                    sum.findings.len() + 1,
                    failure.tag(),
                    f.frames.0,
                    f.frames.1,
                    f.bytes,
                    f.pcap.display()
                );
                sum.findings.push(f);
                if opts.max_findings > 0 && sum.findings.len() >= opts.max_findings {
                    break;
                }
            }
        }
        if last_log.elapsed() > Duration::from_secs(10) {
            last_log = Instant::now();
            let _ = writeln!(
                log,
                "rdmesh fuzz exec: {} iterations, {} frames, {} findings, {:.0} s",
                sum.iterations,
                sum.frames,
                sum.findings.len(),
                start.elapsed().as_secs_f64()
            );
        }
    }
    let _ = std::fs::remove_file(&r.work);
    let _ = std::fs::remove_file(r.work.with_extension("stderr"));
    sum.elapsed = start.elapsed();
    Ok(sum)
}

/// The summary text `rdmesh fuzz exec` prints.
pub fn summary_text(opts: &ExecOptions, s: &ExecSummary) -> String {
    let crashes = s
        .findings
        .iter()
        .filter(|f| matches!(f.failure, Failure::Crash(_)))
        .count();
    let mut t = format!(
        "rdmesh fuzz exec: {} iterations, {} frames ({}, seed {}), {} findings (crashes {crashes}, hangs {}, duplicates {}) in {:.1} s\n",
        s.iterations,
        s.frames,
        if opts.random_bytes { "random bytes" } else { "generated" },
        opts.seed,
        s.findings.len(),
        s.findings.len() - crashes,
        s.duplicates,
        s.elapsed.as_secs_f64()
    );
    for (i, f) in s.findings.iter().enumerate() {
        let _ = writeln!(
            t,
            "finding {}: {} at iteration {}: {} -> {} frame(s), {} bytes, reproduces: {}: {}",
            i + 1,
            f.failure.tag(),
            f.iter,
            f.frames.0,
            f.frames.1,
            f.bytes,
            f.reproduced,
            f.pcap.display()
        );
    }
    t += "coverage (frames written):\n";
    t += &s.coverage.table(false);
    t
}
