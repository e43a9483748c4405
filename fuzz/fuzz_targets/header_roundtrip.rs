//! Every header type, smoltcp-style: `Packet::new_checked` → `Repr::parse` → `emit` into a fresh
//! buffer → parse again must give the same repr. Runs all header parsers over the same input.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rdmesh_core::wire::{
    aeth, atomic_ack_eth, atomic_eth, bth, cnp, deth, ethernet, ieth, immdt, ipv4, ipv6, reth, udp,
    AethRepr, AtomicAckEthRepr, AtomicEthRepr, BthRepr, CnpRepr, DethRepr, EthernetRepr, IbPacket,
    IethRepr, ImmDtRepr, Ipv4Repr, Ipv6Repr, RethRepr, TransportRepr, UdpRepr,
};

/// Checks `data` with `$module::Packet::new_checked`, parses it with `$Repr::parse`, emits into a
/// zeroed buffer of `$len(&repr)` bytes (header plus the payload length the view's check needs),
/// parses that and compares.
macro_rules! roundtrip {
    ($module:ident, $Repr:ident, $data:expr, $len:expr) => {{
        if let Ok(p) = $module::Packet::new_checked($data) {
            if let Ok(r) = $Repr::parse(&p) {
                let mut buf = vec![0u8; $len(&r)];
                r.emit(&mut $module::Packet::new_unchecked(&mut buf[..]));
                let q = $module::Packet::new_checked(&buf[..]).expect("emitted header checks");
                assert_eq!($Repr::parse(&q).expect("emitted header parses"), r);
            }
        }
    }};
}

fuzz_target!(|data: &[u8]| {
    roundtrip!(bth, BthRepr, data, |r: &BthRepr| r.buffer_len());
    roundtrip!(reth, RethRepr, data, |r: &RethRepr| r.buffer_len());
    roundtrip!(aeth, AethRepr, data, |r: &AethRepr| r.buffer_len());
    roundtrip!(immdt, ImmDtRepr, data, |r: &ImmDtRepr| r.buffer_len());
    roundtrip!(ieth, IethRepr, data, |r: &IethRepr| r.buffer_len());
    roundtrip!(atomic_eth, AtomicEthRepr, data, |r: &AtomicEthRepr| r
        .buffer_len());
    roundtrip!(
        atomic_ack_eth,
        AtomicAckEthRepr,
        data,
        |r: &AtomicAckEthRepr| r.buffer_len()
    );
    roundtrip!(deth, DethRepr, data, |r: &DethRepr| r.buffer_len());
    roundtrip!(cnp, CnpRepr, data, |r: &CnpRepr| r.buffer_len());
    roundtrip!(ethernet, EthernetRepr, data, |r: &EthernetRepr| r
        .buffer_len());
    roundtrip!(ipv4, Ipv4Repr, data, |r: &Ipv4Repr| r.buffer_len()
        + usize::from(r.payload_len));
    roundtrip!(ipv6, Ipv6Repr, data, |r: &Ipv6Repr| r.buffer_len()
        + usize::from(r.payload_len));
    roundtrip!(udp, UdpRepr, data, |r: &UdpRepr| r.buffer_len()
        + usize::from(r.payload_len));

    // BTH + extended headers as a unit.
    if let Ok((t, n)) = TransportRepr::parse(data) {
        assert_eq!(n, t.header_len());
        let mut buf = vec![0u8; n];
        assert_eq!(t.emit(&mut buf), Ok(n));
        assert_eq!(TransportRepr::parse(&buf), Ok((t, n)));
    }

    // A whole UDP payload (headers, payload, pad, ICRC).
    if let Ok(p) = IbPacket::parse(data) {
        let mut buf = vec![0u8; IbPacket::buffer_len(&p.transport, p.payload.len())];
        let n = IbPacket::emit(&p.transport, p.payload, &mut buf).expect("re-emit");
        buf[n..].copy_from_slice(&p.icrc.to_le_bytes());
        let q = IbPacket::parse(&buf).expect("re-parse");
        assert_eq!(q.transport, p.transport);
        assert_eq!(q.payload, p.payload);
        assert_eq!(q.pad.len(), p.pad.len());
        assert_eq!(q.icrc, p.icrc);
    }
});
