//! Resource commands: ALLOC/DEALLOC_UAR, ALLOC/DEALLOC_PD, CREATE/DESTROY_EQ,
//! CREATE/DESTROY_MKEY, CREATE/DESTROY_CQ (mlx5_ifc.h contexts `eqc`, `mkc`, `cqc`).

use rdmesh_core::mlx5::cmd::*;

use super::{
    bad_input, fail, need_init, reply, CmdResult, SYND_BUSY, SYND_DMA, SYND_HANDLE, SYND_LIMIT,
    SYND_PARAM,
};
use crate::model::caps::LOG_MAX_QUEUE;
use crate::model::device::DeviceState;
use crate::model::memory::PagedBuf;
use crate::model::objects::{Cq, Eq, Mkey};

/// Event type of page requests (mlx5 device.h `MLX5_EVENT_TYPE_PAGE_REQUEST`).
const EVENT_PAGE_REQUEST: u8 = 0x0b;

fn no_handle(what: &str, n: u32) -> super::Fail {
    fail(
        CmdStatus::BadRes,
        SYND_HANDLE,
        format!("{what} {n:#x} does not exist"),
    )
}

/// A queue buffer from a PAS list: checks that it covers `bytes` and that every page is
/// mapped.
pub fn queue_buf(
    st: &DeviceState,
    pas: &Pas<'_>,
    log_page_size: u8,
    bytes: usize,
) -> std::result::Result<PagedBuf, super::Fail> {
    let page_shift = u32::from(log_page_size) + 12;
    if page_shift > 30 {
        return Err(fail(
            CmdStatus::BadParam,
            SYND_PARAM,
            format!("log_page_size {log_page_size}"),
        ));
    }
    let buf = PagedBuf {
        pas: pas.iter().collect(),
        page_shift,
    };
    if buf.len() < bytes {
        return Err(fail(
            CmdStatus::BadParam,
            SYND_PARAM,
            format!(
                "{} PAS entries of {} bytes cover {} bytes, the queue needs {bytes}",
                buf.pas.len(),
                1u64 << page_shift,
                buf.len()
            ),
        ));
    }
    let psize = 1usize << page_shift;
    for (i, p) in buf.pas.iter().enumerate() {
        let n = psize.min(bytes.saturating_sub(i * psize)).max(1);
        if !st.space.is_mapped(*p, n) {
            return Err(fail(
                CmdStatus::BadParam,
                SYND_DMA,
                format!("PAS entry {i} ({p:#x}) is not mapped"),
            ));
        }
    }
    Ok(buf)
}

fn check_log(name: &str, v: u8) -> CmdResult {
    if v > LOG_MAX_QUEUE {
        return Err(fail(
            CmdStatus::BadParam,
            SYND_LIMIT,
            format!("{name} {v} exceeds the capability ({LOG_MAX_QUEUE})"),
        ));
    }
    Ok(())
}

pub fn execute(st: &mut DeviceState, op: Opcode, input: &[u8], out: &mut [u8]) -> CmdResult {
    match op {
        Opcode::AllocUar => {
            AllocUarIn::parse(input).map_err(bad_input)?;
            need_init(st)?;
            let uar = st.alloc_id();
            if (uar as usize + 1) * 4096 > st.cfg.bar_len {
                return Err(fail(
                    CmdStatus::NoRes,
                    SYND_LIMIT,
                    "no UAR page left in BAR0",
                ));
            }
            reply(&AllocUarOut { uar }, out)?;
            st.uars.insert(uar);
            Ok(())
        }
        Opcode::DeallocUar => {
            let i = DeallocUarIn::parse(input).map_err(bad_input)?;
            need_init(st)?;
            if !st.uars.contains(&i.uar) {
                return Err(no_handle("UAR", i.uar));
            }
            if st.eqs.values().any(|e| e.uar == i.uar)
                || st.cqs.values().any(|c| c.uar == i.uar)
                || st.qps.values().any(|q| q.ctx.uar_page == i.uar)
            {
                return Err(fail(
                    CmdStatus::ResBusy,
                    SYND_BUSY,
                    format!("UAR {:#x} is still used by an EQ, CQ or QP", i.uar),
                ));
            }
            st.uars.remove(&i.uar);
            reply(&DeallocUarOut {}, out)
        }
        Opcode::AllocPd => {
            AllocPdIn::parse(input).map_err(bad_input)?;
            need_init(st)?;
            let pd = st.alloc_id();
            reply(&AllocPdOut { pd }, out)?;
            st.pds.insert(pd);
            Ok(())
        }
        Opcode::DeallocPd => {
            let i = DeallocPdIn::parse(input).map_err(bad_input)?;
            need_init(st)?;
            if !st.pds.contains(&i.pd) {
                return Err(no_handle("PD", i.pd));
            }
            if st.mkeys.values().any(|m| m.pd == i.pd) || st.qps.values().any(|q| q.ctx.pd == i.pd)
            {
                return Err(fail(
                    CmdStatus::ResBusy,
                    SYND_BUSY,
                    format!("PD {:#x} still has MKEYs or QPs", i.pd),
                ));
            }
            st.pds.remove(&i.pd);
            reply(&DeallocPdOut {}, out)
        }
        Opcode::CreateEq => {
            let i = CreateEqIn::parse(input).map_err(bad_input)?;
            need_init(st)?;
            let c = i.eq_context_entry;
            check_log("log_eq_size", c.log_eq_size)?;
            if !st.uars.contains(&c.uar_page) {
                return Err(no_handle("UAR", c.uar_page));
            }
            if c.intr != 0 {
                return Err(fail(
                    CmdStatus::BadParam,
                    SYND_PARAM,
                    format!("intr {} (the model has MSI-X vector 0 only)", c.intr),
                ));
            }
            let buf = queue_buf(st, &i.pas, c.log_page_size, 64 << c.log_eq_size)?;
            let Some(eqn) = (0..=u8::MAX).find(|n| !st.eqs.contains_key(n)) else {
                return Err(fail(CmdStatus::NoRes, SYND_LIMIT, "no EQ number left"));
            };
            reply(&CreateEqOut { eq_number: eqn }, out)?;
            let eq = Eq {
                log_size: c.log_eq_size,
                uar: c.uar_page,
                buf,
                bitmask: i.event_bitmask.0,
                pi: 0,
                ci: 0,
                armed: false,
            };
            let pages = eq.wants(EVENT_PAGE_REQUEST);
            st.eqs.insert(eqn, eq);
            if pages {
                super::hca::request_regular_pages(st);
            }
            Ok(())
        }
        Opcode::DestroyEq => {
            let i = DestroyEqIn::parse(input).map_err(bad_input)?;
            need_init(st)?;
            if !st.eqs.contains_key(&i.eq_number) {
                return Err(no_handle("EQ", u32::from(i.eq_number)));
            }
            if st.cqs.values().any(|c| c.eqn == u32::from(i.eq_number)) {
                return Err(fail(
                    CmdStatus::ResBusy,
                    SYND_BUSY,
                    format!("EQ {} still has CQs", i.eq_number),
                ));
            }
            st.eqs.remove(&i.eq_number);
            reply(&DestroyEqOut {}, out)
        }
        Opcode::CreateMkey => {
            let i = CreateMkeyIn::parse(input).map_err(bad_input)?;
            need_init(st)?;
            let m = i.memory_key_mkey_entry;
            if !st.pds.contains(&m.pd) {
                return Err(no_handle("PD", m.pd));
            }
            let mtt = match m.access_mode_1_0 {
                MKC_ACCESS_MODE_PA => None,
                MKC_ACCESS_MODE_MTT => {
                    let page_shift = u32::from(m.log_page_size);
                    if !(12..=30).contains(&page_shift) {
                        return Err(fail(
                            CmdStatus::BadParam,
                            SYND_PARAM,
                            format!("mkc.log_page_size {page_shift} (absolute; 12..=30)"),
                        ));
                    }
                    let psize = 1u64 << page_shift;
                    let first = m.start_addr & !(psize - 1);
                    let pages = (m.start_addr + m.len)
                        .div_ceil(psize)
                        .saturating_sub(first / psize);
                    let entries = i.pas.len() as u64;
                    if !m.length64 && entries < pages {
                        return Err(fail(
                            CmdStatus::BadParam,
                            SYND_PARAM,
                            format!(
                                "{entries} MTT entries for a {}-byte region of {pages} pages",
                                m.len
                            ),
                        ));
                    }
                    Some(PagedBuf {
                        pas: i.pas.iter().collect(),
                        page_shift,
                    })
                }
                a => {
                    return Err(fail(
                        CmdStatus::BadParam,
                        SYND_PARAM,
                        format!("access_mode {a} (PA 0 and MTT 1 are modeled)"),
                    ))
                }
            };
            let index = st.alloc_id();
            reply(&CreateMkeyOut { mkey_index: index }, out)?;
            st.mkeys.insert(
                index,
                Mkey {
                    key8: m.mkey_7_0,
                    pd: m.pd,
                    start: m.start_addr,
                    len: m.len,
                    length64: m.length64,
                    lw: m.lw,
                    rr: m.rr,
                    rw: m.rw,
                    atomic: m.a,
                    mtt,
                },
            );
            Ok(())
        }
        Opcode::DestroyMkey => {
            let i = DestroyMkeyIn::parse(input).map_err(bad_input)?;
            need_init(st)?;
            if st.mkeys.remove(&i.mkey_index).is_none() {
                return Err(no_handle("MKEY index", i.mkey_index));
            }
            reply(&DestroyMkeyOut {}, out)
        }
        Opcode::CreateCq => {
            let i = CreateCqIn::parse(input).map_err(bad_input)?;
            need_init(st)?;
            let c = i.cq_context;
            check_log("log_cq_size", c.log_cq_size)?;
            if c.cqe_sz != CQE_SIZE_64 || c.cqe_comp_en {
                return Err(fail(
                    CmdStatus::BadParam,
                    SYND_PARAM,
                    "the model writes 64-byte uncompressed CQEs only (cqe_sz 0, cqe_comp_en 0)",
                ));
            }
            if i.cq_umem_valid {
                return Err(fail(
                    CmdStatus::BadParam,
                    SYND_PARAM,
                    "cq_umem_valid: UMEMs are not modeled, give a PAS list",
                ));
            }
            if !st.uars.contains(&c.uar_page) {
                return Err(no_handle("UAR", c.uar_page));
            }
            if !st.eqs.contains_key(&(c.c_eqn_or_apu_element as u8))
                || c.c_eqn_or_apu_element > 0xff
            {
                return Err(no_handle("EQ", c.c_eqn_or_apu_element));
            }
            if !st.space.is_mapped(c.dbr_addr, 8) {
                return Err(fail(
                    CmdStatus::BadParam,
                    SYND_DMA,
                    format!("dbr_addr {:#x} is not mapped", c.dbr_addr),
                ));
            }
            let buf = queue_buf(st, &i.pas, c.log_page_size, 64 << c.log_cq_size)?;
            let cqn = st.alloc_id();
            reply(&CreateCqOut { cqn }, out)?;
            st.cqs.insert(
                cqn,
                Cq {
                    log_size: c.log_cq_size,
                    uar: c.uar_page,
                    eqn: c.c_eqn_or_apu_element,
                    dbr_addr: c.dbr_addr,
                    buf,
                    pi: 0,
                    armed: None,
                },
            );
            Ok(())
        }
        Opcode::DestroyCq => {
            let i = DestroyCqIn::parse(input).map_err(bad_input)?;
            need_init(st)?;
            if !st.cqs.contains_key(&i.cqn) {
                return Err(no_handle("CQ", i.cqn));
            }
            if st
                .qps
                .values()
                .any(|q| q.ctx.cqn_snd == i.cqn || q.ctx.cqn_rcv == i.cqn)
            {
                return Err(fail(
                    CmdStatus::ResBusy,
                    SYND_BUSY,
                    format!("CQ {:#x} is still used by a QP", i.cqn),
                ));
            }
            st.cqs.remove(&i.cqn);
            reply(&DestroyCqOut {}, out)
        }
        _ => Err(fail(
            CmdStatus::BadOp,
            super::SYND_OPCODE,
            "not a resource command",
        )),
    }
}
