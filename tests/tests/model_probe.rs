//! First contact tooling against the device model: `rdmesh doctor --probe model` (bring-up up
//! to INIT_HCA and back down, each command with status and time, a JSON transcript), a probe
//! that fails at INIT_HCA still gives every page back and names the command, and
//! `RDMESH_CMD_TRACE` records every command's input and output of any run.

use std::process::Command;
use std::time::Duration;

use rdmesh_tests::{assert_ok, rdmesh_bin, run_bounded};
use rdmesh_vfio::mlx5::{probe, DriverConfig};
use rdmesh_vfio::model::{ModelConfig, ModelDevice, ModelFaults};
use serde_json::Value;

#[test]
fn doctor_probe_prints_commands_and_writes_a_transcript() {
    let path = rdmesh_tests::scratch("probe").join("probe.json");
    let mut c = Command::new(rdmesh_bin());
    c.args(["doctor", "--probe", "model", "--transcript"])
        .arg(&path);
    let out = run_bounded(c, Duration::from_secs(60));
    let stdout = assert_ok(&out, "rdmesh doctor --probe model");
    for want in [
        "ENABLE_HCA (0x104)",
        "INIT_HCA (0x102)",
        "TEARDOWN_HCA (0x103)",
        "DISABLE_HCA (0x105)",
        "OK   ENABLE_HCA .. INIT_HCA",
        "0 pages still lent",
    ] {
        assert!(stdout.contains(want), "{want} missing:\n{stdout}");
    }
    let t: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    assert_eq!(t["ok"], true);
    assert_eq!(t["firmware"], "28.39.1002");
    assert_eq!(t["mac"], "02:00:00:00:00:01");
    assert_eq!(t["port"]["oper_mtu"], 9022);
    let cmds = t["commands"].as_array().unwrap();
    let names: Vec<&str> = cmds.iter().map(|c| c["name"].as_str().unwrap()).collect();
    assert_eq!(names.first(), Some(&"MLX5_CMD_OP_ENABLE_HCA"));
    assert_eq!(names.last(), Some(&"MLX5_CMD_OP_DISABLE_HCA"));
    assert!(names.contains(&"MLX5_CMD_OP_INIT_HCA"));
    assert!(
        !names.contains(&"MLX5_CMD_OP_CREATE_EQ"),
        "stops at INIT_HCA"
    );
    for c in cmds {
        assert_eq!(c["status"], 0, "{c}");
        assert!(c["input"].as_str().unwrap().len() >= 32, "{c}");
        assert!(c["elapsed_us"].is_u64());
    }
}

#[test]
fn probe_failing_at_init_hca_names_it_and_returns_the_pages() {
    let dev = ModelDevice::new(ModelConfig::default());
    dev.set_faults(ModelFaults {
        cmd_garbage_status: Some(0x03),
        cmd_fault_opcode: Some(0x102),
        ..Default::default()
    });
    let r = probe(dev.mmio(), dev.dma(), DriverConfig::for_model("faulty"));
    assert!(!r.ok());
    let failed: Vec<_> = r.steps.iter().filter(|s| s.result.is_err()).collect();
    assert_eq!(failed.len(), 1, "{:?}", r.steps);
    let e = failed[0].result.as_ref().unwrap_err();
    assert!(e.contains("INIT_HCA"), "{e}");
    let last = r
        .commands
        .iter()
        .find(|c| u16::from(c.opcode) == 0x102)
        .unwrap();
    assert_eq!(last.status, Some(0x03));
    assert_eq!(r.pages_left, 0);
    assert_eq!(dev.pages_held(), 0, "every page back after a failed probe");
    assert!(r.steps.last().unwrap().result.is_ok(), "{:?}", r.steps);
}

#[test]
fn cmd_trace_records_every_command_of_a_run() {
    let path = rdmesh_tests::scratch("cmd-trace").join("trace.jsonl");
    let mut c = Command::new(rdmesh_bin());
    c.args([
        "bench",
        "write",
        "--loopback",
        "--provider",
        "model",
        "-s",
        "4K",
        "-n",
        "10",
    ])
    .env("RDMESH_CMD_TRACE", &path);
    let out = run_bounded(c, Duration::from_secs(120));
    assert_ok(&out, "rdmesh bench with RDMESH_CMD_TRACE");
    let text = std::fs::read_to_string(&path).unwrap();
    let recs: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    let names: Vec<&str> = recs.iter().map(|r| r["name"].as_str().unwrap()).collect();
    for want in [
        "MLX5_CMD_OP_ENABLE_HCA",
        "MLX5_CMD_OP_CREATE_EQ",
        "MLX5_CMD_OP_CREATE_QP",
        "MLX5_CMD_OP_INIT2RTR_QP",
        "MLX5_CMD_OP_DESTROY_QP",
        "MLX5_CMD_OP_DISABLE_HCA",
    ] {
        assert!(names.contains(&want), "{want} not traced: {names:?}");
    }
    // Two devices (both ends of the loopback run), each with its own sequence.
    let devices: std::collections::BTreeSet<&str> =
        recs.iter().map(|r| r["device"].as_str().unwrap()).collect();
    assert_eq!(devices.len(), 2, "{devices:?}");
    assert!(recs
        .iter()
        .all(|r| r["output"].is_string() && r["input"].is_string()));
}
