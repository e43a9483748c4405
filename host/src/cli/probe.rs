//! `rdmesh doctor --probe BDF`: first contact with a ConnectX function on vfio-pci. Runs the
//! driver's bring-up up to INIT_HCA, reads the port MAC, status and MTU, and goes back down
//! (TEARDOWN_HCA, every page reclaimed, DISABLE_HCA), printing each step and each command
//! with its status and time; writes the whole transcript (every command's input and output
//! bytes) as JSON to attach to a bug report. `--probe model` does the same against the device
//! model (a dry run, and what the tests use).

use rdmesh_vfio::mlx5::{probe, DriverConfig, ProbeReport};
use serde_json::{json, Value};
use std::io::Write;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// The transcript as JSON: device, firmware, MAC, port, steps, and every command record.
pub fn transcript_json(r: &ProbeReport) -> Value {
    let steps: Vec<Value> = r
        .steps
        .iter()
        .map(|s| {
            json!({
                "step": s.name,
                "ok": s.result.is_ok(),
                "detail": match &s.result { Ok(d) | Err(d) => d },
                "elapsed_us": s.elapsed.as_micros() as u64,
            })
        })
        .collect();
    let commands: Vec<Value> = r
        .commands
        .iter()
        .filter_map(|c| serde_json::from_str(&c.to_json(&r.device)).ok())
        .collect();
    json!({
        "rdmesh": env!("CARGO_PKG_VERSION"),
        "device": r.device,
        "ok": r.ok(),
        "firmware": r.fw.map(|f| format!("{}.{}.{}", f.0, f.1, f.2)),
        "mac": r.mac.map(crate::verbs::format_mac),
        "port": r.port.map(|p| json!({
            "admin_status": p.admin_status,
            "oper_status": p.oper_status,
            "oper_mtu": p.oper_mtu,
            "max_mtu": p.max_mtu,
        })),
        "startup_pages": r.startup_pages,
        "pages_left": r.pages_left,
        "steps": steps,
        "commands": commands,
    })
}

/// Prints the probe: each step, each command with status and time.
pub fn print(r: &ProbeReport, w: &mut impl Write) -> std::io::Result<()> {
    writeln!(w, "probe {}:", r.device)?;
    for c in &r.commands {
        writeln!(
            w,
            "  [{:>3}] {:<32} op_mod {:#06x}  {:<14} {:>9.3} ms{}",
            c.seq,
            c.opcode.to_string(),
            c.op_mod,
            c.status_name(),
            c.elapsed.as_secs_f64() * 1e3,
            match (&c.error, c.status) {
                (Some(e), _) => format!("  {e}"),
                (None, Some(s)) if s != 0 => format!("  syndrome {:#010x}", c.syndrome),
                _ => String::new(),
            }
        )?;
    }
    for s in &r.steps {
        let (tag, text) = match &s.result {
            Ok(d) => ("OK  ", d),
            Err(e) => ("FAIL", e),
        };
        writeln!(
            w,
            "{tag} {:<46} {:>9.3} ms  {text}",
            s.name,
            s.elapsed.as_secs_f64() * 1e3
        )?;
    }
    Ok(())
}

fn run_probe(target: &str) -> Result<ProbeReport> {
    if target == "model" {
        let m = rdmesh_vfio::model::ModelDevice::new(Default::default());
        return Ok(probe(m.mmio(), m.dma(), DriverConfig::for_model("model")));
    }
    let bdf = rdmesh_vfio::sys::PciAddress::parse(target)
        .map_err(|e| Error::Config(format!("--probe {target}: {e}")))?
        .to_string();
    let (dev, bar, dma) = crate::vfio_provider::open_pci_parts(&bdf)?;
    let r = probe(bar, dma, DriverConfig::new(bdf));
    drop(dev);
    Ok(r)
}

/// Runs the probe of `target` (a BDF, or `model`), prints it and writes the transcript to
/// `out` (default `rdmesh-probe-<target>.json` in the current directory).
///
/// Errors: the function cannot be opened; a step failed (after printing and writing).
pub fn run(target: &str, out: Option<&Path>) -> Result<()> {
    let r = run_probe(target)?;
    let mut so = std::io::stdout().lock();
    print(&r, &mut so).map_err(|e| Error::io("writing the probe report", e))?;
    let path = out.map(Path::to_path_buf).unwrap_or_else(|| {
        PathBuf::from(format!(
            "rdmesh-probe-{}.json",
            target.replace([':', '.'], "_")
        ))
    });
    let text = serde_json::to_string_pretty(&transcript_json(&r))
        .map_err(|e| Error::Config(format!("encoding the transcript: {e}")))?;
    std::fs::write(&path, text + "\n")
        .map_err(|e| Error::io(format!("writing the transcript {}", path.display()), e))?;
    writeln!(
        so,
        "transcript: {} ({} commands; attach it to a bug report)",
        path.display(),
        r.commands.len()
    )
    .map_err(|e| Error::io("writing the probe report", e))?;
    if !r.ok() {
        return Err(Error::Config(format!(
            "the probe of {target} failed (see the FAIL line above and {})",
            path.display()
        )));
    }
    Ok(())
}

/// Helper for tests: probes and returns the transcript JSON.
pub fn probe_json(target: &str) -> Result<Value> {
    Ok(transcript_json(&run_probe(target)?))
}
