//! Function life-cycle commands: ENABLE/DISABLE_HCA, QUERY/SET_ISSI, QUERY/MANAGE_PAGES,
//! QUERY/SET_HCA_CAP, ACCESS_REG, INIT/TEARDOWN_HCA (mlx5_ifc.h; order as in rdma-core
//! mlx5_vfio.c `mlx5_vfio_setup_function`).

use rdmesh_core::mlx5::cmd::*;

use super::{
    bad_input, fail, need_enabled, reply, CmdResult, SYND_BUSY, SYND_DMA, SYND_HCA_STATE,
    SYND_PAGES, SYND_PARAM,
};
use crate::model::device::{DeviceState, HcaState};
use crate::model::eq::post_event;

/// ISSI values the model supports (bit n = ISSI n): 0 and 1.
pub const SUPPORTED_ISSI: u32 = 0b11;

fn boot_done(st: &DeviceState) -> CmdResult {
    if st.pages.given_total < u64::from(st.cfg.boot_pages) {
        return Err(fail(
            CmdStatus::BadSysState,
            SYND_PAGES,
            format!(
                "{} of {} boot pages given: QUERY_PAGES(boot) then MANAGE_PAGES(give) first",
                st.pages.given_total, st.cfg.boot_pages
            ),
        ));
    }
    Ok(())
}

pub fn execute(st: &mut DeviceState, op: Opcode, input: &[u8], out: &mut [u8]) -> CmdResult {
    match op {
        Opcode::EnableHca => {
            EnableHcaIn::parse(input).map_err(bad_input)?;
            if st.hca == HcaState::Disabled {
                st.hca = HcaState::Enabled;
            }
            reply(&EnableHcaOut {}, out)
        }
        Opcode::DisableHca => {
            DisableHcaIn::parse(input).map_err(bad_input)?;
            if st.hca == HcaState::Initialized {
                return Err(fail(
                    CmdStatus::BadSysState,
                    SYND_HCA_STATE,
                    "TEARDOWN_HCA must come before DISABLE_HCA",
                ));
            }
            st.hca = HcaState::Disabled;
            reply(&DisableHcaOut {}, out)
        }
        Opcode::QueryIssi => {
            QueryIssiIn::parse(input).map_err(bad_input)?;
            need_enabled(st)?;
            reply(
                &QueryIssiOut {
                    current_issi: st.issi,
                    supported_issi_dw0: SUPPORTED_ISSI,
                },
                out,
            )
        }
        Opcode::SetIssi => {
            let i = SetIssiIn::parse(input).map_err(bad_input)?;
            need_enabled(st)?;
            if i.current_issi > 31 || SUPPORTED_ISSI & (1 << i.current_issi) == 0 {
                return Err(fail(
                    CmdStatus::BadParam,
                    SYND_PARAM,
                    format!(
                        "ISSI {} not supported (supported mask {SUPPORTED_ISSI:#b})",
                        i.current_issi
                    ),
                ));
            }
            st.issi = i.current_issi;
            reply(&SetIssiOut {}, out)
        }
        Opcode::QueryPages => {
            let i = QueryPagesIn::parse(input).map_err(bad_input)?;
            need_enabled(st)?;
            let given = st.pages.given_total as i64;
            let boot = i64::from(st.cfg.boot_pages);
            let init = i64::from(st.cfg.init_pages);
            let num = match i.op_mod {
                PAGES_BOOT => (boot - given).max(0),
                PAGES_INIT => (boot + init - given).max(0),
                PAGES_REGULAR => st.pages.requested.max(0),
                m => {
                    return Err(fail(
                        CmdStatus::BadParam,
                        SYND_PARAM,
                        format!("QUERY_PAGES op_mod {m} (1 boot, 2 init, 3 regular)"),
                    ))
                }
            };
            reply(
                &QueryPagesOut {
                    embedded_cpu_function: false,
                    function_id: i.function_id,
                    num_pages: num as i32,
                },
                out,
            )
        }
        Opcode::ManagePages => manage_pages(st, input, out),
        Opcode::QueryHcaCap => {
            let i = QueryHcaCapIn::parse(input).map_err(bad_input)?;
            need_enabled(st)?;
            boot_done(st)?;
            let Some(pair) = st.caps.pair(i.op_mod >> 1) else {
                return Err(fail(
                    CmdStatus::BadParam,
                    SYND_PARAM,
                    format!(
                        "capability type {} not modeled (0 general, 4 RoCE)",
                        i.op_mod >> 1
                    ),
                ));
            };
            let page = if i.op_mod & 1 == CAP_MODE_CUR {
                &pair.cur
            } else {
                &pair.max
            };
            let page = page.clone();
            reply(&QueryHcaCapOut { capability: &page }, out)
        }
        Opcode::SetHcaCap => {
            let i = SetHcaCapIn::parse(input).map_err(bad_input)?;
            need_enabled(st)?;
            boot_done(st)?;
            if st.hca == HcaState::Initialized {
                return Err(fail(
                    CmdStatus::BadSysState,
                    SYND_HCA_STATE,
                    "SET_HCA_CAP after INIT_HCA",
                ));
            }
            st.caps.set(i.op_mod >> 1, i.capability).map_err(|r| {
                fail(
                    CmdStatus::BadParam,
                    SYND_PARAM,
                    format!("SET_HCA_CAP refused: {}", r.0),
                )
            })?;
            reply(&SetHcaCapOut {}, out)
        }
        Opcode::AccessReg => access_reg(st, input, out),
        Opcode::InitHca => {
            InitHcaIn::parse(input).map_err(bad_input)?;
            if st.hca != HcaState::Enabled {
                return Err(fail(
                    CmdStatus::BadSysState,
                    SYND_HCA_STATE,
                    format!(
                        "INIT_HCA in state {:?} (needs ENABLE_HCA, and not twice)",
                        st.hca
                    ),
                ));
            }
            let need = u64::from(st.cfg.boot_pages + st.cfg.init_pages);
            if st.pages.given_total < need {
                return Err(fail(
                    CmdStatus::BadSysState,
                    SYND_PAGES,
                    format!("INIT_HCA with {} of {need} boot+init pages given: QUERY_PAGES(init) then MANAGE_PAGES(give) first", st.pages.given_total),
                ));
            }
            st.hca = HcaState::Initialized;
            st.init.nic_ifc = NicIfcState::Full;
            reply(&InitHcaOut {}, out)
        }
        Opcode::TeardownHca => {
            let i = TeardownHcaIn::parse(input).map_err(bad_input)?;
            if st.hca != HcaState::Initialized {
                return Err(fail(
                    CmdStatus::BadSysState,
                    SYND_HCA_STATE,
                    format!("TEARDOWN_HCA in state {:?}", st.hca),
                ));
            }
            if i.profile > TEARDOWN_PREPARE_FAST_TEARDOWN {
                return Err(fail(
                    CmdStatus::BadParam,
                    SYND_PARAM,
                    format!("teardown profile {}", i.profile),
                ));
            }
            st.hca = HcaState::Enabled;
            st.qps.clear();
            st.cqs.clear();
            st.eqs.clear();
            st.mkeys.clear();
            st.pds.clear();
            st.uars.clear();
            st.q_counters.clear();
            reply(&TeardownHcaOut { state: false }, out)
        }
        Opcode::QuerySpecialContexts => {
            QuerySpecialContextsIn::parse(input).map_err(bad_input)?;
            reply(
                &QuerySpecialContextsOut {
                    dump_fill_mkey: 0,
                    resd_lkey: 0x100,
                    null_mkey: 0,
                },
                out,
            )
        }
        // SET_DRIVER_VERSION and NOP: accepted, nothing to do; the output is the header.
        _ => {
            if out.len() < 16 {
                return Err(fail(
                    CmdStatus::BadOutpLen,
                    super::SYND_OUT_LEN,
                    "output shorter than 16 bytes",
                ));
            }
            Ok(())
        }
    }
}

fn manage_pages(st: &mut DeviceState, input: &[u8], out: &mut [u8]) -> CmdResult {
    let i = ManagePagesIn::parse(input).map_err(bad_input)?;
    need_enabled(st)?;
    i.validate()
        .map_err(|e| fail(CmdStatus::BadParam, SYND_PARAM, e.to_string()))?;
    match i.op_mod {
        MANAGE_PAGES_GIVE => {
            let pages: Vec<u64> = i.pas.iter().collect();
            for &p in &pages {
                if !st.space.is_mapped(p, 4096) {
                    return Err(fail(
                        CmdStatus::BadParam,
                        SYND_DMA,
                        format!("page {p:#x} is not a mapped 4 KiB IOVA range"),
                    ));
                }
                if st.pages.held.contains(&p) {
                    return Err(fail(
                        CmdStatus::BadParam,
                        SYND_PARAM,
                        format!("page {p:#x} given twice"),
                    ));
                }
            }
            let n = pages.len() as u64;
            st.pages.held.extend(pages);
            st.pages.given_total += n;
            st.pages.requested = (st.pages.requested - n as i64).max(0);
            reply(
                &ManagePagesOut {
                    output_num_entries: 0,
                    pas: Pas::Addrs(&[]),
                },
                out,
            )
        }
        MANAGE_PAGES_TAKE => {
            let keep = if st.hca == HcaState::Initialized {
                u64::from(st.cfg.boot_pages + st.cfg.init_pages)
            } else {
                0
            };
            let spare = st.pages.count().saturating_sub(keep);
            let n = u64::from(i.input_num_entries).min(spare) as usize;
            if n == 0 && i.input_num_entries > 0 {
                return Err(fail(
                    CmdStatus::ResBusy,
                    SYND_BUSY,
                    "the firmware needs every page it holds until TEARDOWN_HCA",
                ));
            }
            let taken: Vec<u64> = st.pages.held.iter().rev().take(n).copied().collect();
            let o = ManagePagesOut {
                output_num_entries: n as u32,
                pas: Pas::Addrs(&taken),
            };
            reply(&o, out)?;
            for p in &taken {
                st.pages.held.remove(p);
            }
            Ok(())
        }
        _ => {
            // CANT_GIVE: the driver declines a page request.
            st.pages.requested = 0;
            reply(
                &ManagePagesOut {
                    output_num_entries: 0,
                    pas: Pas::Addrs(&[]),
                },
                out,
            )
        }
    }
}

fn access_reg(st: &mut DeviceState, input: &[u8], out: &mut [u8]) -> CmdResult {
    let i = AccessRegisterIn::parse(input).map_err(bad_input)?;
    need_enabled(st)?;
    boot_done(st)?;
    let mut data = i.data.to_vec();
    match i.register_id {
        REG_HOST_ENDIANNESS => {
            let he = HostEndianness::parse_at(&data, 0).map_err(bad_input)?;
            if i.op_mod == ACCESS_REG_WRITE && he.he {
                return Err(fail(
                    CmdStatus::BadParam,
                    SYND_PARAM,
                    "big-endian host (he = 1) is not modeled",
                ));
            }
        }
        REG_PAOS => {
            let mut p = Paos::parse_at(&data, 0).map_err(bad_input)?;
            if p.local_port != 1 {
                return Err(fail(
                    CmdStatus::BadParam,
                    SYND_PARAM,
                    format!("PAOS local_port {} (the model has port 1)", p.local_port),
                ));
            }
            p.admin_status = PORT_STATUS_UP;
            p.oper_status = if st.faults.link_down {
                PORT_STATUS_DOWN
            } else {
                PORT_STATUS_UP
            };
            p.emit_at(&mut data, 0).map_err(bad_input)?;
        }
        REG_PMTU => {
            let mut p = Pmtu::parse_at(&data, 0).map_err(bad_input)?;
            if p.local_port != 1 {
                return Err(fail(
                    CmdStatus::BadParam,
                    SYND_PARAM,
                    format!("PMTU local_port {} (the model has port 1)", p.local_port),
                ));
            }
            if i.op_mod == ACCESS_REG_WRITE {
                if p.admin_mtu > MODEL_MAX_MTU || p.admin_mtu < 256 {
                    return Err(fail(
                        CmdStatus::BadParam,
                        SYND_PARAM,
                        format!("PMTU admin_mtu {} (256..={MODEL_MAX_MTU})", p.admin_mtu),
                    ));
                }
                st.cfg.port_mtu = p.admin_mtu;
            }
            p.max_mtu = MODEL_MAX_MTU;
            p.admin_mtu = st.cfg.port_mtu;
            p.oper_mtu = st.cfg.port_mtu;
            p.emit_at(&mut data, 0).map_err(bad_input)?;
        }
        r => {
            return Err(fail(
                CmdStatus::BadParam,
                SYND_PARAM,
                format!(
                    "register {r:#x} not modeled (HOST_ENDIANNESS 0x7004, PAOS 0x5006, PMTU 0x5003)"
                ),
            ))
        }
    }
    // The driver sizes the output for the register it expects back (Linux
    // `mlx5_core_access_reg`: out = header + register); answer what fits.
    let room = out.len().saturating_sub(access_register_out::SIZE_BYTES);
    data.truncate(room);
    reply(&AccessRegisterOut { data: &data }, out)
}

/// PMTU `max_mtu` of the model's port (a ConnectX-7 reports 9978).
pub const MODEL_MAX_MTU: u16 = 9978;

/// After an EQ with page-request events exists, the firmware asks for its regular pages.
pub fn request_regular_pages(st: &mut DeviceState) {
    let n = st.cfg.regular_pages;
    if n == 0
        || st.pages.requested > 0
        || st.pages.given_total >= u64::from(st.cfg.boot_pages + st.cfg.init_pages + n)
    {
        return;
    }
    st.pages.requested = i64::from(n);
    post_event(
        st,
        EqeRepr::PageRequest {
            ec_function: 0,
            func_id: 0,
            num_pages: n as i32,
        },
    );
}
