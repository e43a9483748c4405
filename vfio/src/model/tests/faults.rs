use rdmesh_core::mlx5::cmd::*;

use super::device;
use crate::model::harness::Harness;
use crate::model::{ModelConfig, ModelDevice, ModelFaults};

#[test]
fn initializing_stuck_is_reported_not_hung() {
    let dev = ModelDevice::new(ModelConfig::default());
    dev.set_faults(ModelFaults {
        initializing_stuck: true,
        ..Default::default()
    });
    let e = Harness::new(dev).err().expect("must fail");
    assert!(e.contains("initializing"), "{e}");
}

#[test]
fn health_counter_freezes_and_syndrome_shows() {
    let dev = ModelDevice::new(ModelConfig::default());
    let bar = dev.mmio();
    dev.set_faults(ModelFaults {
        health_syndrome: Some(0x8),
        ..Default::default()
    });
    let a = bar.read32_be(init_seg::HEALTH_COUNTER);
    assert_eq!(bar.read32_be(init_seg::HEALTH_COUNTER), a);
    assert_eq!((bar.read32_be(0x23c) >> 16) & 0xff, 0x8);
    dev.set_faults(ModelFaults::default());
    assert_ne!(bar.read32_be(init_seg::HEALTH_COUNTER), a);
}

#[test]
fn command_faults() {
    let mut h = device(1);
    let pd = AllocPdIn {};
    // Never completes: the entry stays hardware-owned.
    h.dev.set_faults(ModelFaults {
        cmd_never_complete: true,
        ..Default::default()
    });
    assert!(h.exec(&pd, 0).unwrap_err().contains("owned by hardware"));
    // Bad signature.
    h.dev.set_faults(ModelFaults {
        cmd_bad_signature: true,
        ..Default::default()
    });
    assert!(h.exec(&pd, 0).unwrap_err().contains("signature"));
    // Output length error (delivery status 8).
    h.dev.set_faults(ModelFaults {
        cmd_bad_output_length: true,
        ..Default::default()
    });
    let e = h.exec(&pd, 0).unwrap_err();
    assert!(
        e.to_lowercase().contains("length") || e.contains("OutLength"),
        "{e}"
    );
    // Garbage status, only for CREATE_EQ: other commands still work.
    h.dev.set_faults(ModelFaults {
        cmd_garbage_status: Some(0xee),
        cmd_fault_opcode: Some(0x301),
        ..Default::default()
    });
    h.exec(&pd, 0).unwrap();
    let mut b = vec![0u8; CreateEqIn::default().buffer_len()];
    CreateEqIn::default().emit(&mut b).unwrap();
    let out = h.exec_raw(&b, 16).unwrap();
    let o = OutHeader::parse(&out).unwrap();
    assert_eq!((u8::from(o.status), o.syndrome), (0xee, 0xdead_beef));
    h.dev.set_faults(ModelFaults::default());
    h.exec(&pd, 0).unwrap();
}
