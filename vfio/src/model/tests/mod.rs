//! Unit tests of the model: commands through raw layouts (core's typed builders), the data
//! plane through core's writers and doorbell effects, and the fault knobs.

mod bringup;
mod commands;
mod faults;
mod traffic;

use super::harness::{Endpoint, EndpointConfig, Harness};
use super::{ModelConfig, ModelDevice, ModelLink};

/// A brought-up device with MAC ending in `n`.
pub fn device(n: u8) -> Harness {
    let dev = ModelDevice::new(ModelConfig {
        mac: [0x02, 0, 0, 0, 0, n],
        ..ModelConfig::default()
    });
    let mut h = Harness::new(dev).expect("harness");
    h.bring_up().expect("bring-up");
    h
}

/// Two brought-up, linked devices with one connected endpoint each.
pub fn pair(pcap: Option<&std::path::Path>) -> (Harness, Endpoint, Harness, Endpoint, ModelLink) {
    let mut ha = device(1);
    let mut hb = device(2);
    let link = ModelLink::connect(&ha.dev, &hb.dev, pcap).expect("link");
    let mut a = Endpoint::create(
        &mut ha,
        EndpointConfig {
            ip: [10, 0, 0, 1],
            ..Default::default()
        },
    )
    .expect("endpoint a");
    let mut b = Endpoint::create(
        &mut hb,
        EndpointConfig {
            ip: [10, 0, 0, 2],
            va: 0x7777_0000_0000,
            udp_sport: 0xd123,
            ..Default::default()
        },
    )
    .expect("endpoint b");
    a.connect(&mut ha, &b).expect("connect a");
    b.connect(&mut hb, &a).expect("connect b");
    (ha, a, hb, b, link)
}
