//! mlx5 firmware commands: arbitrary bytes fed to every command output parser (the driver's
//! side), every input parser (the device model's side), the EQE parser and the command queue
//! entry / mailbox views. Nothing panics; whatever parses re-emits and parses to the same value.
//! `data[0]` picks the parser, the rest is the buffer.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rdmesh_core::mlx5::cmd::eqe::Eqe;
use rdmesh_core::mlx5::cmd::*;

macro_rules! stable {
    ($sel:expr, $buf:expr, $($t:ident : $tr:ident),* $(,)?) => {{
        let list: &[fn(&[u8])] = &[$(
            |b: &[u8]| {
                if let Ok(v) = $t::parse(b) {
                    let mut out = vec![0u8; $tr::buffer_len(&v)];
                    let n = $tr::emit(&v, &mut out).expect("a parsed value re-emits");
                    assert_eq!(n, out.len());
                    assert_eq!($t::parse(&out), Ok(v), stringify!($t));
                }
            }
        ),*];
        list[usize::from($sel) % list.len()]($buf);
    }};
}

fuzz_target!(|data: &[u8]| {
    let Some((&sel, buf)) = data.split_first() else {
        return;
    };
    // Views of the device formats.
    if let Ok(e) = CmdEntry::new_checked(buf) {
        let _ = (
            e.signature_ok(),
            e.check_delivery(),
            e.hw_owned(),
            e.delivery_status(),
        );
        if let Ok(r) = CmdEntryRepr::parse(&e) {
            let mut out = [0u8; entry::LEN];
            let mut v = CmdEntry::new_unchecked(&mut out[..]);
            r.emit(&mut v).unwrap();
            assert!(v.signature_ok() && v.hw_owned());
            assert_eq!(CmdEntryRepr::parse(&v), Ok(r));
        }
    }
    if let Ok(m) = Mailbox::new_checked(buf) {
        let _ = (m.check_signatures(), m.check_position(u32::from(sel), sel));
        let r = MailboxRepr::parse(&m).unwrap();
        let mut out = [0u8; mailbox::LEN];
        let mut v = Mailbox::new_unchecked(&mut out[..]);
        r.emit(&mut v, m.data()).unwrap();
        assert_eq!(v.check_signatures(), Ok(()));
        assert_eq!(v.data(), m.data());
    }
    let _ = mailbox::block_range(buf.len(), usize::from(sel));
    if let Ok(e) = Eqe::new_checked(buf) {
        let _ = e.sw_owned(u32::from(sel), 256);
        let r = EqeRepr::parse(&e).unwrap();
        let mut out = [0u8; eqe::LEN];
        if r.emit(&mut Eqe::new_unchecked(&mut out[..]), e.owner())
            .is_ok()
        {
            assert_eq!(EqeRepr::parse(&Eqe::new_unchecked(&out[..])), Ok(r));
        }
    }
    let _ = EqeRepr::parse(&Eqe::new_unchecked(buf));
    if buf.len() >= init_seg::LEN {
        let s = InitSeg::new_checked(buf).unwrap();
        let _ = CmdqAddrLSz::decode(s.cmdq_addr_l_sz()).check_geometry();
        let _ = (
            s.read(usize::from(sel) * 4),
            s.health_counter(),
            s.health_synd(),
        );
    }
    let _ = (InHeader::parse(buf), OutHeader::parse(buf));

    if sel & 1 == 0 {
        stable!(sel >> 1, buf,
            EnableHcaOut: CmdOut, DisableHcaOut: CmdOut, QueryIssiOut: CmdOut, SetIssiOut: CmdOut,
            QueryPagesOut: CmdOut, ManagePagesOut: CmdOut, QueryHcaCapOut: CmdOut,
            SetHcaCapOut: CmdOut, AccessRegisterOut: CmdOut, InitHcaOut: CmdOut,
            TeardownHcaOut: CmdOut, QuerySpecialContextsOut: CmdOut,
            ModifyNicVportContextOut: CmdOut, QueryNicVportContextOut: CmdOut,
            QueryVportStateOut: CmdOut, SetRoceAddressOut: CmdOut, QueryRoceAddressOut: CmdOut,
            AllocUarOut: CmdOut, DeallocUarOut: CmdOut, CreateEqOut: CmdOut, DestroyEqOut: CmdOut,
            AllocPdOut: CmdOut, DeallocPdOut: CmdOut, CreateMkeyOut: CmdOut,
            DestroyMkeyOut: CmdOut, CreateCqOut: CmdOut, DestroyCqOut: CmdOut,
            CreateQpOut: CmdOut, DestroyQpOut: CmdOut, Rst2InitQpOut: CmdOut,
            Init2RtrQpOut: CmdOut, Rtr2RtsQpOut: CmdOut, Qp2ErrOut: CmdOut, QueryQpOut: CmdOut,
        );
    } else {
        stable!(sel >> 1, buf,
            EnableHcaIn: CmdIn, DisableHcaIn: CmdIn, QueryIssiIn: CmdIn, SetIssiIn: CmdIn,
            QueryPagesIn: CmdIn, ManagePagesIn: CmdIn, QueryHcaCapIn: CmdIn, SetHcaCapIn: CmdIn,
            AccessRegisterIn: CmdIn, InitHcaIn: CmdIn, TeardownHcaIn: CmdIn,
            QuerySpecialContextsIn: CmdIn, ModifyNicVportContextIn: CmdIn,
            QueryNicVportContextIn: CmdIn, QueryVportStateIn: CmdIn, SetRoceAddressIn: CmdIn,
            QueryRoceAddressIn: CmdIn, AllocUarIn: CmdIn, DeallocUarIn: CmdIn, CreateEqIn: CmdIn,
            DestroyEqIn: CmdIn, AllocPdIn: CmdIn, DeallocPdIn: CmdIn, CreateMkeyIn: CmdIn,
            DestroyMkeyIn: CmdIn, CreateCqIn: CmdIn, DestroyCqIn: CmdIn, CreateQpIn: CmdIn,
            DestroyQpIn: CmdIn, Rst2InitQpIn: CmdIn, Init2RtrQpIn: CmdIn, Rtr2RtsQpIn: CmdIn,
            Qp2ErrIn: CmdIn, QueryQpIn: CmdIn,
        );
    }
});
