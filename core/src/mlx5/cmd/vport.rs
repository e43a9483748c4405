//! Typed inputs and outputs of the vport and RoCE address commands:
//! MODIFY_NIC_VPORT_CONTEXT (`roce_en`), QUERY_NIC_VPORT_CONTEXT (permanent MAC, MTU),
//! QUERY_VPORT_STATE, SET_ROCE_ADDRESS / QUERY_ROCE_ADDRESS (the GID table, which nobody
//! else fills under VFIO). Layouts: Linux mlx5_ifc.h; usage: Linux `lib/gid.c`,
//! `hw/mlx5/main.c` `set_roce_addr`, rdma-core mlx5_vfio.c.

use super::layout::*;
use super::Opcode;

/// `roce_l3_type` of a GID entry: IPv4 (an IPv4-mapped RoCEv2 GID).
pub const ROCE_L3_TYPE_IPV4: u8 = 0;
/// `roce_l3_type` of a GID entry: IPv6.
pub const ROCE_L3_TYPE_IPV6: u8 = 1;
/// `roce_version` of a GID entry: RoCE v1.
pub const ROCE_VERSION_1: u8 = 0;
/// `roce_version` of a GID entry: RoCE v2.
pub const ROCE_VERSION_2: u8 = 2;

ifc_struct! {
    /// A MAC address slot (mlx5_ifc.h `mac_address_layout`): the 48-bit address in the low
    /// 48 bits of 64. See [`MacAddress::octets`].
    pub struct MacAddress : mac_address_layout {
        /// Address bits 47..32 (octets 0 and 1).
        mac_addr_47_32: u16 = MAC_ADDR_47_32,
        /// Address bits 31..0 (octets 2..5).
        mac_addr_31_0: u32 = MAC_ADDR_31_0,
    }
}

impl MacAddress {
    /// The address as six octets in transmission order.
    pub fn octets(&self) -> [u8; 6] {
        let h = self.mac_addr_47_32.to_be_bytes();
        let l = self.mac_addr_31_0.to_be_bytes();
        [h[0], h[1], l[0], l[1], l[2], l[3]]
    }
    /// From six octets in transmission order.
    pub fn from_octets(o: [u8; 6]) -> MacAddress {
        MacAddress {
            mac_addr_47_32: u16::from_be_bytes([o[0], o[1]]),
            mac_addr_31_0: u32::from_be_bytes([o[2], o[3], o[4], o[5]]),
        }
    }
}

ifc_struct! {
    /// NIC vport context (mlx5_ifc.h `nic_vport_context_bits`), the fields a RoCE driver
    /// uses.
    pub struct NicVportContext : nic_vport_context {
        /// Minimum inline mode of the send WQEs.
        min_wqe_inline_mode: u8 = MIN_WQE_INLINE_MODE,
        /// Block multicast loopback.
        disable_mc_local_lb: bool = DISABLE_MC_LOCAL_LB,
        /// Block unicast loopback.
        disable_uc_local_lb: bool = DISABLE_UC_LOCAL_LB,
        /// RoCE enabled on this vport.
        roce_en: bool = ROCE_EN,
        /// Port MTU in bytes (Ethernet MTU).
        mtu: u16 = MTU,
        /// System image GUID.
        system_image_guid: u64 = SYSTEM_IMAGE_GUID,
        /// Port GUID.
        port_guid: u64 = PORT_GUID,
        /// Node GUID.
        node_guid: u64 = NODE_GUID,
        /// Unicast promiscuous.
        promisc_uc: bool = PROMISC_UC,
        /// Multicast promiscuous.
        promisc_mc: bool = PROMISC_MC,
        /// All promiscuous.
        promisc_all: bool = PROMISC_ALL,
        /// The factory MAC address of the function.
        permanent_address: MacAddress = PERMANENT_ADDRESS,
    }
}

ifc_struct! {
    /// Which context fields MODIFY_NIC_VPORT_CONTEXT changes
    /// (mlx5_ifc.h `modify_nic_vport_field_select_bits`).
    pub struct NicVportFieldSelect : modify_nic_vport_field_select {
        /// Change `affiliation`.
        affiliation: bool = AFFILIATION,
        /// Change `disable_uc_local_lb`.
        disable_uc_local_lb: bool = DISABLE_UC_LOCAL_LB,
        /// Change `disable_mc_local_lb`.
        disable_mc_local_lb: bool = DISABLE_MC_LOCAL_LB,
        /// Change `node_guid`.
        node_guid: bool = NODE_GUID,
        /// Change `port_guid`.
        port_guid: bool = PORT_GUID,
        /// Change `min_wqe_inline_mode`.
        min_inline: bool = MIN_INLINE,
        /// Change `mtu`.
        mtu: bool = MTU,
        /// Change the event flags.
        change_event: bool = CHANGE_EVENT,
        /// Change `promisc_*`.
        promisc: bool = PROMISC,
        /// Change `permanent_address`.
        permanent_address: bool = PERMANENT_ADDRESS,
        /// Change the address lists.
        addresses_list: bool = ADDRESSES_LIST,
        /// Change `roce_en`.
        roce_en: bool = ROCE_EN,
    }
}

command! {
    /// MODIFY_NIC_VPORT_CONTEXT input (0x755): e.g. `field_select.roce_en = true`,
    /// `nic_vport_context.roce_en = true` to enable RoCE (rdma-core
    /// `mlx5_vfio_nic_vport_update_roce_state`).
    pub struct ModifyNicVportContextIn : in modify_nic_vport_context_in (modify_nic_vport_context_out), ModifyNicVportContext {
        /// Modify another vport (0).
        other_vport: bool = OTHER_VPORT,
        /// The other vport's number.
        vport_number: u16 = VPORT_NUMBER,
        /// Which fields change.
        field_select: NicVportFieldSelect = FIELD_SELECT,
        /// The new values.
        nic_vport_context: NicVportContext = NIC_VPORT_CONTEXT,
    }
}
command! {
    /// MODIFY_NIC_VPORT_CONTEXT output.
    pub struct ModifyNicVportContextOut : out modify_nic_vport_context_out, ModifyNicVportContext {}
}
command! {
    /// QUERY_NIC_VPORT_CONTEXT input (0x754).
    pub struct QueryNicVportContextIn : in query_nic_vport_context_in (query_nic_vport_context_out), QueryNicVportContext {
        /// Query another vport (0).
        other_vport: bool = OTHER_VPORT,
        /// The other vport's number.
        vport_number: u16 = VPORT_NUMBER,
        /// Which address list to return (0 unicast).
        allowed_list_type: u8 = ALLOWED_LIST_TYPE,
    }
}
command! {
    /// QUERY_NIC_VPORT_CONTEXT output: the context (own MAC in `permanent_address`).
    pub struct QueryNicVportContextOut : out query_nic_vport_context_out, QueryNicVportContext {
        /// The vport context.
        nic_vport_context: NicVportContext = NIC_VPORT_CONTEXT,
    }
}
command! {
    /// QUERY_VPORT_STATE input (0x750).
    pub struct QueryVportStateIn : in query_vport_state_in (query_vport_state_out), QueryVportState {
        /// 0: this vport.
        op_mod: u16 = OP_MOD,
        /// Query another vport (0).
        other_vport: bool = OTHER_VPORT,
        /// The other vport's number.
        vport_number: u16 = VPORT_NUMBER,
    }
}
command! {
    /// QUERY_VPORT_STATE output: 0 down, 1 up (admin state also 2 = auto; Linux device.h
    /// `MLX5_VPORT_ADMIN_STATE_*`).
    pub struct QueryVportStateOut : out query_vport_state_out, QueryVportState {
        /// Administrative state.
        admin_state: u8 = ADMIN_STATE,
        /// Operational state.
        state: u8 = STATE,
    }
}

ifc_struct! {
    /// One GID table entry (mlx5_ifc.h `roce_addr_layout_bits`): for RoCEv2 over IPv4 the
    /// GID is `::ffff:a.b.c.d` with `roce_l3_type` [`ROCE_L3_TYPE_IPV4`] and `roce_version`
    /// [`ROCE_VERSION_2`] (Linux `hw/mlx5/main.c` `set_roce_addr`).
    pub struct RoceAddress : roce_addr_layout {
        /// The GID / source IP address (16 bytes, network order).
        source_l3_address: [u8; 16] = SOURCE_L3_ADDRESS,
        /// A VLAN tag is used.
        vlan_valid: bool = VLAN_VALID,
        /// The VLAN id (12 bits).
        vlan_id: u16 = VLAN_ID,
        /// Source MAC bits 47..32.
        source_mac_47_32: u16 = SOURCE_MAC_47_32,
        /// Source MAC bits 31..0.
        source_mac_31_0: u32 = SOURCE_MAC_31_0,
        /// [`ROCE_L3_TYPE_IPV4`] or [`ROCE_L3_TYPE_IPV6`].
        roce_l3_type: u8 = ROCE_L3_TYPE,
        /// [`ROCE_VERSION_1`] or [`ROCE_VERSION_2`].
        roce_version: u8 = ROCE_VERSION,
    }
}

impl RoceAddress {
    /// The source MAC as six octets.
    pub fn source_mac(&self) -> [u8; 6] {
        MacAddress {
            mac_addr_47_32: self.source_mac_47_32,
            mac_addr_31_0: self.source_mac_31_0,
        }
        .octets()
    }
    /// Sets the source MAC from six octets.
    pub fn set_source_mac(&mut self, mac: [u8; 6]) {
        let m = MacAddress::from_octets(mac);
        self.source_mac_47_32 = m.mac_addr_47_32;
        self.source_mac_31_0 = m.mac_addr_31_0;
    }
}

command! {
    /// SET_ROCE_ADDRESS input (0x761): program GID table entry `roce_address_index`.
    pub struct SetRoceAddressIn : in set_roce_address_in (set_roce_address_out), SetRoceAddress {
        /// GID index (the `src_addr_index` a QP's address path names).
        roce_address_index: u16 = ROCE_ADDRESS_INDEX,
        /// vHCA port (only when the `num_vhca_ports` capability is not 0; else 0).
        vhca_port_num: u8 = VHCA_PORT_NUM,
        /// The entry.
        roce_address: RoceAddress = ROCE_ADDRESS,
    }
}
command! {
    /// SET_ROCE_ADDRESS output.
    pub struct SetRoceAddressOut : out set_roce_address_out, SetRoceAddress {}
}
command! {
    /// QUERY_ROCE_ADDRESS input (0x760).
    pub struct QueryRoceAddressIn : in query_roce_address_in (query_roce_address_out), QueryRoceAddress {
        /// GID index.
        roce_address_index: u16 = ROCE_ADDRESS_INDEX,
        /// vHCA port (see [`SetRoceAddressIn`]).
        vhca_port_num: u8 = VHCA_PORT_NUM,
    }
}
command! {
    /// QUERY_ROCE_ADDRESS output.
    pub struct QueryRoceAddressOut : out query_roce_address_out, QueryRoceAddress {
        /// The entry.
        roce_address: RoceAddress = ROCE_ADDRESS,
    }
}
