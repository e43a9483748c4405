//! Faults of a modeled mlx5 device give the VFIO driver clear errors in bounded time, never a
//! hang: firmware stuck `initializing`, a dead health counter, a health syndrome, malformed
//! command outputs (garbage status byte, delivery error, corrupt signature), and a command
//! queue whose entries the device never gives back (timeouts naming the command, then "command
//! queue full" at once).

use std::time::{Duration, Instant};

use rdmesh_core::mlx5::cmd::Opcode;
use rdmesh_vfio::mlx5::{DriverConfig, DriverError, Hca};
use rdmesh_vfio::model::{ModelConfig, ModelDevice, ModelFaults};

fn cfg(name: &str) -> DriverConfig {
    DriverConfig {
        cmd_timeout: Duration::from_millis(50),
        init_timeout: Duration::from_millis(200),
        ..DriverConfig::for_model(name)
    }
}

fn up(dev: &ModelDevice, name: &str) -> Result<Hca, DriverError> {
    Hca::bring_up(dev.mmio(), dev.dma(), dev.interrupt(), cfg(name))
}

#[test]
fn stuck_initializing_times_out_clearly() {
    let dev = ModelDevice::new(ModelConfig::default());
    dev.set_faults(ModelFaults {
        initializing_stuck: true,
        ..Default::default()
    });
    let t = Instant::now();
    let e = up(&dev, "0000:01:00.0").unwrap_err();
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
    assert!(matches!(e, DriverError::InitTimeout { .. }), "{e:?}");
    let m = e.to_string();
    assert!(
        m.contains("0000:01:00.0") && m.contains("initializing"),
        "{m}"
    );
    // Nothing was sent to a device that never came up.
    assert_eq!(dev.counters().cmd_doorbells, 0);
}

#[test]
fn dead_health_counter_is_reported_and_stops_commands() {
    let dev = ModelDevice::new(ModelConfig::default());
    let hca = up(&dev, "dev-health").unwrap();
    hca.check_health().unwrap();
    hca.check_health().unwrap();
    dev.set_faults(ModelFaults {
        health_counter_frozen: true,
        ..Default::default()
    });
    let t = Instant::now();
    let mut dead = None;
    for _ in 0..10 {
        if let Err(e) = hca.check_health() {
            dead = Some(e);
            break;
        }
    }
    let e = dead.expect("a frozen health counter must be noticed");
    assert!(matches!(e, DriverError::DeviceDead { .. }), "{e:?}");
    let m = e.to_string();
    assert!(
        m.contains("dev-health") && m.contains("health counter stuck"),
        "{m}"
    );
    // Every later command fails at once with the same diagnosis.
    let e2 = hca.alloc_pd().unwrap_err();
    assert!(matches!(e2, DriverError::DeviceDead { .. }), "{e2:?}");
    assert!(t.elapsed() < Duration::from_secs(5));
}

#[test]
fn health_syndrome_while_a_command_hangs_names_the_syndrome() {
    let dev = ModelDevice::new(ModelConfig::default());
    let hca = up(&dev, "dev-synd").unwrap();
    dev.set_faults(ModelFaults {
        health_syndrome: Some(0x8),
        cmd_never_complete: true,
        ..Default::default()
    });
    let t = Instant::now();
    let e = hca.alloc_pd().unwrap_err();
    assert!(t.elapsed() < Duration::from_secs(5));
    assert!(
        matches!(e, DriverError::DeviceDead { synd: 0x8, .. }),
        "{e:?}"
    );
    assert!(
        e.to_string().contains("unrecoverable hardware error"),
        "{e}"
    );
}

#[test]
fn malformed_command_outputs_give_typed_errors() {
    // A status byte that is no MLX5_CMD_STAT_* value, on CREATE_EQ (the last bring-up step).
    let dev = ModelDevice::new(ModelConfig::default());
    dev.set_faults(ModelFaults {
        cmd_garbage_status: Some(0xee),
        cmd_fault_opcode: Some(0x301),
        ..Default::default()
    });
    let e = up(&dev, "dev-status").unwrap_err();
    let m = e.to_string();
    assert!(matches!(e, DriverError::Cmd { .. }), "{e:?}");
    assert!(
        m.contains("CREATE_EQ") && m.contains("0xee") && m.contains("0xdeadbeef"),
        "{m}"
    );
    // The failed bring-up was unwound: no UAR, no pages left with the device.
    assert_eq!(dev.object_counts(), (0, 0, 0, 0, 0, 0));
    assert_eq!(dev.pages_held(), 0);

    // Delivery status "output length error" on SET_ISSI.
    let dev = ModelDevice::new(ModelConfig::default());
    dev.set_faults(ModelFaults {
        cmd_bad_output_length: true,
        cmd_fault_opcode: Some(0x10b),
        ..Default::default()
    });
    let e = up(&dev, "dev-delivery").unwrap_err();
    let m = e.to_string();
    assert!(m.contains("not delivered") && m.contains("SET_ISSI"), "{m}");

    // A completed entry whose signature is wrong, on INIT_HCA.
    let dev = ModelDevice::new(ModelConfig::default());
    dev.set_faults(ModelFaults {
        cmd_bad_signature: true,
        cmd_fault_opcode: Some(0x102),
        ..Default::default()
    });
    let e = up(&dev, "dev-sig").unwrap_err();
    let m = e.to_string();
    assert!(m.contains("signature") && m.contains("INIT_HCA"), "{m}");
}

#[test]
fn command_queue_that_never_completes_fills_then_fails_fast() {
    // From the first command: ENABLE_HCA times out, naming the command.
    let dev = ModelDevice::new(ModelConfig::default());
    dev.set_faults(ModelFaults {
        cmd_never_complete: true,
        ..Default::default()
    });
    let t = Instant::now();
    let e = up(&dev, "dev-hang").unwrap_err();
    assert!(t.elapsed() < Duration::from_secs(5));
    assert!(matches!(e, DriverError::CmdTimeout { .. }), "{e:?}");
    assert!(e.to_string().contains("ENABLE_HCA"), "{e}");

    // After bring-up: every slot ends up owned by the device, then posting fails at once.
    let dev = ModelDevice::new(ModelConfig::default());
    let hca = up(&dev, "dev-full").unwrap();
    dev.set_faults(ModelFaults {
        cmd_never_complete: true,
        ..Default::default()
    });
    let t = Instant::now();
    let mut timeouts = 0;
    let full = loop {
        match hca.alloc_pd() {
            Err(DriverError::CmdTimeout { opcode, .. }) => {
                assert_eq!(opcode, Opcode::AllocPd);
                timeouts += 1;
                assert!(timeouts <= 32, "queue never reported full");
            }
            Err(e) => break e,
            Ok(_) => panic!("a command completed on a hung device"),
        }
    };
    assert!(matches!(full, DriverError::CmdQueueFull { .. }), "{full:?}");
    assert!(full.to_string().contains("command queue full"), "{full}");
    // 32 slots, the last kept for page commands.
    assert_eq!(timeouts, 31);
    // At once: a full queue is refused as full, not after waiting out a command timeout (a
    // wall-clock bound here failed on a loaded 2-core machine; the error kind is the proof).
    let again = hca.alloc_pd().unwrap_err();
    assert!(
        matches!(again, DriverError::CmdQueueFull { .. }),
        "full queue must fail at once: {again:?}"
    );
    assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
    // Teardown of a hung device is bounded too.
    let t = Instant::now();
    drop(hca);
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
}
