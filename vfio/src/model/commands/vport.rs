//! NIC vport and RoCE address commands: MODIFY/QUERY_NIC_VPORT_CONTEXT (roce_en, MTU,
//! permanent MAC), QUERY_VPORT_STATE, SET/QUERY_ROCE_ADDRESS (the GID table that nobody
//! but the driver fills under VFIO; Linux lib/gid.c).

use rdmesh_core::mlx5::cmd::*;

use super::{bad_input, fail, need_init, reply, CmdResult, SYND_PARAM};
use crate::model::caps::GID_TABLE_SIZE;
use crate::model::device::DeviceState;

pub fn execute(st: &mut DeviceState, op: Opcode, input: &[u8], out: &mut [u8]) -> CmdResult {
    match op {
        Opcode::ModifyNicVportContext => {
            let i = ModifyNicVportContextIn::parse(input).map_err(bad_input)?;
            need_init(st)?;
            if i.other_vport {
                return Err(fail(
                    CmdStatus::BadParam,
                    SYND_PARAM,
                    "other_vport: the model has one vport",
                ));
            }
            if i.field_select.roce_en {
                st.roce_en = i.nic_vport_context.roce_en;
            }
            if i.field_select.mtu {
                st.vport_mtu = i.nic_vport_context.mtu;
            }
            reply(&ModifyNicVportContextOut {}, out)
        }
        Opcode::QueryNicVportContext => {
            let i = QueryNicVportContextIn::parse(input).map_err(bad_input)?;
            super::need_enabled(st)?;
            if i.other_vport {
                return Err(fail(
                    CmdStatus::BadParam,
                    SYND_PARAM,
                    "other_vport: the model has one vport",
                ));
            }
            let ctx = NicVportContext {
                roce_en: st.roce_en,
                mtu: st.vport_mtu,
                permanent_address: MacAddress::from_octets(st.cfg.mac),
                ..Default::default()
            };
            reply(
                &QueryNicVportContextOut {
                    nic_vport_context: ctx,
                },
                out,
            )
        }
        Opcode::QueryVportState => {
            QueryVportStateIn::parse(input).map_err(bad_input)?;
            super::need_enabled(st)?;
            reply(
                &QueryVportStateOut {
                    admin_state: 1,
                    state: 1,
                },
                out,
            )
        }
        Opcode::SetRoceAddress => {
            let i = SetRoceAddressIn::parse(input).map_err(bad_input)?;
            need_init(st)?;
            if i.roce_address_index >= GID_TABLE_SIZE {
                return Err(fail(
                    CmdStatus::BadParam,
                    SYND_PARAM,
                    format!(
                        "GID index {} beyond the table ({GID_TABLE_SIZE})",
                        i.roce_address_index
                    ),
                ));
            }
            let a = i.roce_address;
            if a == RoceAddress::default() {
                st.gids.remove(&i.roce_address_index);
            } else {
                if a.roce_version != ROCE_VERSION_2 {
                    return Err(fail(
                        CmdStatus::BadParam,
                        SYND_PARAM,
                        format!(
                            "roce_version {} (the model speaks RoCEv2 = 2 only)",
                            a.roce_version
                        ),
                    ));
                }
                if a.roce_l3_type > ROCE_L3_TYPE_IPV6 {
                    return Err(fail(
                        CmdStatus::BadParam,
                        SYND_PARAM,
                        format!("roce_l3_type {}", a.roce_l3_type),
                    ));
                }
                st.gids.insert(i.roce_address_index, a);
            }
            reply(&SetRoceAddressOut {}, out)
        }
        Opcode::QueryRoceAddress => {
            let i = QueryRoceAddressIn::parse(input).map_err(bad_input)?;
            need_init(st)?;
            if i.roce_address_index >= GID_TABLE_SIZE {
                return Err(fail(
                    CmdStatus::BadParam,
                    SYND_PARAM,
                    format!(
                        "GID index {} beyond the table ({GID_TABLE_SIZE})",
                        i.roce_address_index
                    ),
                ));
            }
            let a = st
                .gids
                .get(&i.roce_address_index)
                .copied()
                .unwrap_or_default();
            reply(&QueryRoceAddressOut { roce_address: a }, out)
        }
        _ => Err(fail(
            CmdStatus::BadOp,
            super::SYND_OPCODE,
            "not a vport command",
        )),
    }
}
