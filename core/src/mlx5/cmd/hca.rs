//! Typed inputs and outputs of the HCA bring-up commands: ENABLE_HCA / DISABLE_HCA,
//! QUERY_ISSI / SET_ISSI, QUERY_PAGES / MANAGE_PAGES, QUERY_HCA_CAP / SET_HCA_CAP (with the
//! general and RoCE capabilities), ACCESS_REG (HOST_ENDIANNESS, PAOS), INIT_HCA,
//! TEARDOWN_HCA and QUERY_SPECIAL_CONTEXTS. Layouts: Linux mlx5_ifc.h; bring-up order:
//! rdma-core `providers/mlx5/mlx5_vfio.c` (see `docs/mlx5.md`).
//!
//! Every input has `parse(&[u8])` and `emit(&mut [u8]) -> Result<usize>` ([`CmdIn`]); every
//! output has `parse` (which first turns a failed status into [`CmdError::Status`]) and
//! `emit` ([`CmdOut`], status OK).

use super::layout::*;
use super::value::{check_in, check_out, start_in, start_out, CmdIn, CmdOut};
use super::{get, set, CmdError, Opcode};

/// QUERY_PAGES / page-request kind: boot pages (`MLX5_QUERY_PAGES_IN_OP_MOD_BOOT_PAGES`).
pub const PAGES_BOOT: u16 = 1;
/// QUERY_PAGES kind: init pages (`MLX5_QUERY_PAGES_IN_OP_MOD_INIT_PAGES`).
pub const PAGES_INIT: u16 = 2;
/// QUERY_PAGES kind: regular pages (`MLX5_QUERY_PAGES_IN_OP_MOD_REGULAR_PAGES`).
pub const PAGES_REGULAR: u16 = 3;
/// MANAGE_PAGES op_mod: cannot give (`MLX5_PAGES_CANT_GIVE`).
pub const MANAGE_PAGES_CANT_GIVE: u16 = 0;
/// MANAGE_PAGES op_mod: give pages (`MLX5_PAGES_GIVE`).
pub const MANAGE_PAGES_GIVE: u16 = 1;
/// MANAGE_PAGES op_mod: take pages back (`MLX5_PAGES_TAKE`).
pub const MANAGE_PAGES_TAKE: u16 = 2;
/// Capability type: general device (`MLX5_SET_HCA_CAP_OP_MOD_GENERAL_DEVICE`).
pub const CAP_GENERAL: u16 = 0;
/// Capability type: RoCE (`MLX5_SET_HCA_CAP_OP_MOD_ROCE`).
pub const CAP_ROCE: u16 = 4;
/// QUERY_HCA_CAP mode: maximum supported (`HCA_CAP_OPMOD_GET_MAX`).
pub const CAP_MODE_MAX: u16 = 0;
/// QUERY_HCA_CAP mode: currently set (`HCA_CAP_OPMOD_GET_CUR`).
pub const CAP_MODE_CUR: u16 = 1;
/// ACCESS_REG op_mod: write the register.
pub const ACCESS_REG_WRITE: u16 = 0;
/// ACCESS_REG op_mod: read the register.
pub const ACCESS_REG_READ: u16 = 1;
/// Register id of HOST_ENDIANNESS (`MLX5_REG_HOST_ENDIANNESS`, Linux driver.h).
pub const REG_HOST_ENDIANNESS: u16 = 0x7004;
/// Register id of PAOS (`MLX5_REG_PAOS`).
pub const REG_PAOS: u16 = 0x5006;
/// Register id of PMTU (`MLX5_REG_PMTU`).
pub const REG_PMTU: u16 = 0x5003;
/// PAOS `admin_status` / `oper_status`: up.
pub const PORT_STATUS_UP: u8 = 1;
/// PAOS `admin_status` / `oper_status`: down.
pub const PORT_STATUS_DOWN: u8 = 2;
/// TEARDOWN_HCA profile: graceful close.
pub const TEARDOWN_GRACEFUL_CLOSE: u16 = 0;
/// TEARDOWN_HCA profile: force close.
pub const TEARDOWN_FORCE_CLOSE: u16 = 1;
/// TEARDOWN_HCA profile: prepare fast teardown (needs the `fast_teardown` capability).
pub const TEARDOWN_PREPARE_FAST_TEARDOWN: u16 = 2;
/// `port_type` capability: Ethernet (RoCE).
pub const PORT_TYPE_ETH: u8 = 1;

/// QUERY_HCA_CAP / SET_HCA_CAP `op_mod` for capability `cap_type` (`CAP_GENERAL`,
/// `CAP_ROCE`, ...) and `mode` (`CAP_MODE_CUR` / `CAP_MODE_MAX`): `cap_type << 1 | mode`.
pub const fn hca_cap_op_mod(cap_type: u16, mode: u16) -> u16 {
    cap_type << 1 | (mode & 1)
}

command! {
    /// ENABLE_HCA input (0x104): the first command after firmware initialization.
    pub struct EnableHcaIn : in enable_hca_in (enable_hca_out), EnableHca {
        /// 0 on a host.
        embedded_cpu_function: bool = EMBEDDED_CPU_FUNCTION,
        /// 0 for this physical function.
        function_id: u16 = FUNCTION_ID,
    }
}
command! {
    /// ENABLE_HCA output.
    pub struct EnableHcaOut : out enable_hca_out, EnableHca {}
}
command! {
    /// DISABLE_HCA input (0x105).
    pub struct DisableHcaIn : in disable_hca_in (disable_hca_out), DisableHca {
        /// 0 on a host.
        embedded_cpu_function: bool = EMBEDDED_CPU_FUNCTION,
        /// 0 for this physical function.
        function_id: u16 = FUNCTION_ID,
    }
}
command! {
    /// DISABLE_HCA output.
    pub struct DisableHcaOut : out disable_hca_out, DisableHca {}
}
command! {
    /// QUERY_ISSI input (0x10a).
    pub struct QueryIssiIn : in query_issi_in (query_issi_out), QueryIssi {}
}
command! {
    /// QUERY_ISSI output: the current ISSI and the bitmask of supported ones (bit `n` of
    /// `supported_issi_dw0` = ISSI `n`; a driver requires ISSI 1).
    pub struct QueryIssiOut : out query_issi_out, QueryIssi {
        /// Current interface step sequence id.
        current_issi: u16 = CURRENT_ISSI,
        /// Supported ISSIs 0..31 (the last dword of the 80-byte `supported_issi` array).
        supported_issi_dw0: u32 = SUPPORTED_ISSI_DW0,
    }
}
command! {
    /// SET_ISSI input (0x10b).
    pub struct SetIssiIn : in set_issi_in (set_issi_out), SetIssi {
        /// The ISSI to use (1).
        current_issi: u16 = CURRENT_ISSI,
    }
}
command! {
    /// SET_ISSI output.
    pub struct SetIssiOut : out set_issi_out, SetIssi {}
}
command! {
    /// QUERY_PAGES input (0x107).
    pub struct QueryPagesIn : in query_pages_in (query_pages_out), QueryPages {
        /// [`PAGES_BOOT`], [`PAGES_INIT`] or [`PAGES_REGULAR`].
        op_mod: u16 = OP_MOD,
        /// 0 on a host.
        embedded_cpu_function: bool = EMBEDDED_CPU_FUNCTION,
        /// 0 for this physical function.
        function_id: u16 = FUNCTION_ID,
    }
}
command! {
    /// QUERY_PAGES output: 4 KiB pages the firmware wants (negative: pages it returns).
    pub struct QueryPagesOut : out query_pages_out, QueryPages {
        /// 0 on a host.
        embedded_cpu_function: bool = EMBEDDED_CPU_FUNCTION,
        /// The function the pages are for.
        function_id: u16 = FUNCTION_ID,
        /// Pages wanted (> 0) or to reclaim (< 0).
        num_pages: i32 = NUM_PAGES,
    }
}
command! {
    /// MANAGE_PAGES input (0x108): give `pas` to the firmware ([`MANAGE_PAGES_GIVE`], with
    /// `input_num_entries == pas.len()`), or ask for `input_num_entries` pages back
    /// ([`MANAGE_PAGES_TAKE`], empty `pas`). Use [`ManagePagesIn::validate`] before use.
    pub struct ManagePagesIn<'a> : in manage_pages_in (manage_pages_out), ManagePages {
        /// [`MANAGE_PAGES_GIVE`], [`MANAGE_PAGES_TAKE`] or [`MANAGE_PAGES_CANT_GIVE`].
        op_mod: u16 = OP_MOD,
        /// 0 on a host.
        embedded_cpu_function: bool = EMBEDDED_CPU_FUNCTION,
        /// The function the pages are for.
        function_id: u16 = FUNCTION_ID,
        /// Pages given (GIVE) or requested back (TAKE).
        input_num_entries: u32 = INPUT_NUM_ENTRIES,
    } pas PAS
}
impl ManagePagesIn<'_> {
    /// Checks the list against the count: GIVE carries exactly `input_num_entries`
    /// addresses (each 4 KiB aligned), TAKE and CANT_GIVE carry none.
    ///
    /// # Errors
    /// [`CmdError::BadLength`] for a count mismatch, [`CmdError::BadField`] (`pas`) for an
    /// unaligned page, (`op_mod`) for an unknown op_mod.
    pub fn validate(&self) -> Result<(), CmdError> {
        match self.op_mod {
            MANAGE_PAGES_GIVE => {
                if self.pas.len() != self.input_num_entries as usize {
                    return Err(CmdError::BadLength {
                        what: "pas",
                        len: self.pas.len(),
                    });
                }
                if self.pas.iter().any(|a| a % 4096 != 0) {
                    return Err(CmdError::BadField { field: "pas" });
                }
                Ok(())
            }
            MANAGE_PAGES_TAKE | MANAGE_PAGES_CANT_GIVE => {
                if self.pas.is_empty() {
                    Ok(())
                } else {
                    Err(CmdError::BadLength {
                        what: "pas",
                        len: self.pas.len(),
                    })
                }
            }
            _ => Err(CmdError::BadField { field: "op_mod" }),
        }
    }
}
command! {
    /// MANAGE_PAGES output: for TAKE, the `output_num_entries` pages returned in `pas`.
    pub struct ManagePagesOut<'a> : out manage_pages_out, ManagePages {
        /// Pages returned.
        output_num_entries: u32 = OUTPUT_NUM_ENTRIES,
    } pas PAS
}
command! {
    /// QUERY_HCA_CAP input (0x100).
    pub struct QueryHcaCapIn : in query_hca_cap_in (query_hca_cap_out), QueryHcaCap {
        /// [`hca_cap_op_mod`]`(cap_type, mode)`.
        op_mod: u16 = OP_MOD,
        /// Query another function (0).
        other_function: bool = OTHER_FUNCTION,
        /// The other function's id.
        function_id: u16 = FUNCTION_ID,
    }
}
command! {
    /// SET_HCA_CAP output.
    pub struct SetHcaCapOut : out set_hca_cap_out, SetHcaCap {}
}

/// Length of the capability union in bytes (4096).
pub const CAPABILITY_LEN: usize = (query_hca_cap_out::CAPABILITY.bits / 8) as usize;

/// QUERY_HCA_CAP output: the raw capability page (decode with [`HcaCap`] / [`RoceCap`],
/// or read any field with `cmd_hca_cap::X`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct QueryHcaCapOut<'a> {
    /// The 4096-byte capability union (when emitting, a shorter slice is padded with zeros).
    pub capability: &'a [u8],
}

impl<'a> QueryHcaCapOut<'a> {
    /// Reads the output.
    ///
    /// # Errors
    /// [`CmdError::Status`] for a failed command, [`CmdError::Truncated`] for a short buffer.
    pub fn parse(buf: &'a [u8]) -> Result<Self, CmdError> {
        check_out(buf, query_hca_cap_out::SIZE_BYTES, Opcode::QueryHcaCap)?;
        let f = query_hca_cap_out::CAPABILITY;
        Ok(QueryHcaCapOut {
            capability: &buf[f.byte_offset()..f.end_byte()],
        })
    }
}

impl CmdOut for QueryHcaCapOut<'_> {
    const OPCODE: Opcode = Opcode::QueryHcaCap;
    fn buffer_len(&self) -> usize {
        query_hca_cap_out::SIZE_BYTES
    }
    fn emit(&self, buf: &mut [u8]) -> Result<usize, CmdError> {
        if self.capability.len() > CAPABILITY_LEN {
            return Err(CmdError::BadLength {
                what: "capability",
                len: self.capability.len(),
            });
        }
        let b = start_out(buf, query_hca_cap_out::SIZE_BYTES)?;
        let at = query_hca_cap_out::CAPABILITY.byte_offset();
        b[at..at + self.capability.len()].copy_from_slice(self.capability);
        Ok(query_hca_cap_out::SIZE_BYTES)
    }
}

/// SET_HCA_CAP input (0x109): the capability page to set (the current page with the fields
/// the driver changes, e.g. `cmdif_checksum = 0`, `log_uar_page_sz`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct SetHcaCapIn<'a> {
    /// [`hca_cap_op_mod`]`(cap_type, 0)`.
    pub op_mod: u16,
    /// The capability union (up to 4096 bytes; padded with zeros).
    pub capability: &'a [u8],
}

impl<'a> SetHcaCapIn<'a> {
    /// Reads the input.
    ///
    /// # Errors
    /// [`CmdError::WrongOpcode`] for another command, [`CmdError::Truncated`] for a short
    /// buffer.
    pub fn parse(buf: &'a [u8]) -> Result<Self, CmdError> {
        check_in(buf, set_hca_cap_in::SIZE_BYTES, Opcode::SetHcaCap)?;
        let f = set_hca_cap_in::CAPABILITY;
        Ok(SetHcaCapIn {
            op_mod: get(buf, set_hca_cap_in::OP_MOD)? as u16,
            capability: &buf[f.byte_offset()..f.end_byte()],
        })
    }
}

impl CmdIn for SetHcaCapIn<'_> {
    const OPCODE: Opcode = Opcode::SetHcaCap;
    const OUT_LEN: usize = set_hca_cap_out::SIZE_BYTES;
    fn buffer_len(&self) -> usize {
        set_hca_cap_in::SIZE_BYTES
    }
    fn emit(&self, buf: &mut [u8]) -> Result<usize, CmdError> {
        if self.capability.len() > CAPABILITY_LEN {
            return Err(CmdError::BadLength {
                what: "capability",
                len: self.capability.len(),
            });
        }
        let b = start_in(buf, set_hca_cap_in::SIZE_BYTES, Opcode::SetHcaCap)?;
        set(b, set_hca_cap_in::OP_MOD, u64::from(self.op_mod))?;
        let at = set_hca_cap_in::CAPABILITY.byte_offset();
        b[at..at + self.capability.len()].copy_from_slice(self.capability);
        Ok(set_hca_cap_in::SIZE_BYTES)
    }
}

ifc_struct! {
    /// The general device capabilities a driver and a device model need (mlx5_ifc.h
    /// `cmd_hca_cap_bits`); parse from the capability page with `HcaCap::parse_at(cap, 0)`.
    /// Every other field stays readable with `cmd_hca_cap::X`.
    pub struct HcaCap : cmd_hca_cap {
        /// log2 of the maximum SRQs' WQEs.
        log_max_srq_sz: u8 = LOG_MAX_SRQ_SZ,
        /// log2 of the maximum WQEs per QP.
        log_max_qp_sz: u8 = LOG_MAX_QP_SZ,
        /// log2 of the number of QPs.
        log_max_qp: u8 = LOG_MAX_QP,
        /// log2 of the maximum CQEs per CQ.
        log_max_cq_sz: u8 = LOG_MAX_CQ_SZ,
        /// log2 of the number of CQs.
        log_max_cq: u8 = LOG_MAX_CQ,
        /// log2 of the maximum EQEs per EQ.
        log_max_eq_sz: u8 = LOG_MAX_EQ_SZ,
        /// log2 of the number of memory keys.
        log_max_mkey: u8 = LOG_MAX_MKEY,
        /// TEARDOWN_HCA fast teardown supported.
        fast_teardown: bool = FAST_TEARDOWN,
        /// log2 of the number of EQs.
        log_max_eq: u8 = LOG_MAX_EQ,
        /// log2 of outstanding RDMA READ/atomic as requester per QP.
        log_max_ra_req_qp: u8 = LOG_MAX_RA_REQ_QP,
        /// log2 of outstanding RDMA READ/atomic as responder per QP.
        log_max_ra_res_qp: u8 = LOG_MAX_RA_RES_QP,
        /// GID table entries per port.
        gid_table_size: u16 = GID_TABLE_SIZE,
        /// P_Key table entries.
        pkey_table_size: u16 = PKEY_TABLE_SIZE,
        /// 0 InfiniBand, 1 Ethernet ([`PORT_TYPE_ETH`]).
        port_type: u8 = PORT_TYPE,
        /// Number of ports.
        num_ports: u8 = NUM_PORTS,
        /// log2 of the maximum message size in bytes.
        log_max_msg: u8 = LOG_MAX_MSG,
        /// CQE version (0 or 1).
        cqe_version: u8 = CQE_VERSION,
        /// Command-interface checksum mode (the driver sets 0: disabled).
        cmdif_checksum: u8 = CMDIF_CHECKSUM,
        /// RoCE supported.
        roce: bool = ROCE,
        /// Atomics supported.
        atomic: bool = ATOMIC,
        /// 4 KiB UAR pages supported.
        uar_4k: bool = UAR_4K,
        /// `uar_sz` (6 bits) as the device reports it.
        uar_sz: u8 = UAR_SZ,
        /// UMEMs with uid 0 supported.
        umem_uid_0: bool = UMEM_UID_0,
        /// log2 of the system page size the device uses.
        log_pg_sz: u8 = LOG_PG_SZ,
        /// BlueFlame supported.
        bf: bool = BF,
        /// Memory keys by name supported.
        mkey_by_name: bool = MKEY_BY_NAME,
        /// log2 of the BlueFlame register size in bytes.
        log_bf_reg_size: u8 = LOG_BF_REG_SIZE,
        /// Largest send WQE in bytes.
        max_wqe_sz_sq: u16 = MAX_WQE_SZ_SQ,
        /// Largest receive WQE in bytes.
        max_wqe_sz_rq: u16 = MAX_WQE_SZ_RQ,
        /// log2 of the number of protection domains.
        log_max_pd: u8 = LOG_MAX_PD,
        /// Send-queue timestamp formats.
        sq_ts_format: u8 = SQ_TS_FORMAT,
        /// Receive-queue timestamp formats.
        rq_ts_format: u8 = RQ_TS_FORMAT,
        /// log2 of the UAR page size minus 12 (the driver sets `sys_page_shift - 12`).
        log_uar_page_sz: u16 = LOG_UAR_PAGE_SZ,
        /// UARs per system page.
        num_of_uars_per_page: u32 = NUM_OF_UARS_PER_PAGE,
        /// Number of vHCA ports (SET_ROCE_ADDRESS takes `vhca_port_num` only when > 0).
        num_vhca_ports: u8 = NUM_VHCA_PORTS,
        /// Q counter sets available (ALLOC_Q_COUNTER).
        max_qp_cnt: u16 = MAX_QP_CNT,
        /// QUERY_CONG_STATISTICS allowed.
        cc_query_allowed: bool = CC_QUERY_ALLOWED,
    }
}

ifc_struct! {
    /// RoCE capabilities (mlx5_ifc.h `roce_cap_bits`, capability type 4).
    pub struct RoceCap : roce_cap {
        /// Software may choose the RoCEv2 UDP source port.
        sw_r_roce_src_udp_port: bool = SW_R_ROCE_SRC_UDP_PORT,
        /// QP timestamp formats.
        qp_ts_format: u8 = QP_TS_FORMAT,
        /// Supported L3 types.
        l3_type: u8 = L3_TYPE,
        /// Supported RoCE versions (bitmask).
        roce_version: u8 = ROCE_VERSION,
        /// RoCEv2 destination UDP port (4791).
        r_roce_dest_udp_port: u16 = R_ROCE_DEST_UDP_PORT,
        /// Highest RoCEv2 UDP source port.
        r_roce_max_src_udp_port: u16 = R_ROCE_MAX_SRC_UDP_PORT,
        /// Lowest RoCEv2 UDP source port.
        r_roce_min_src_udp_port: u16 = R_ROCE_MIN_SRC_UDP_PORT,
        /// GID table entries.
        roce_address_table_size: u16 = ROCE_ADDRESS_TABLE_SIZE,
    }
}

/// ACCESS_REG input (0x805): write ([`ACCESS_REG_WRITE`]) or read ([`ACCESS_REG_READ`]) the
/// register `register_id`; `data` is the register image (e.g. 16 bytes of
/// `register_host_endianness`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct AccessRegisterIn<'a> {
    /// [`ACCESS_REG_WRITE`] or [`ACCESS_REG_READ`].
    pub op_mod: u16,
    /// [`REG_HOST_ENDIANNESS`], [`REG_PAOS`], ...
    pub register_id: u16,
    /// Register-specific argument (0).
    pub argument: u32,
    /// The register data (parsing: everything after the 16-byte header).
    pub data: &'a [u8],
}

impl<'a> AccessRegisterIn<'a> {
    /// Reads the input; `data` is the rest of `buf`, so pass exactly `inlen` bytes.
    ///
    /// # Errors
    /// [`CmdError::WrongOpcode`] for another command, [`CmdError::Truncated`] for a short
    /// buffer.
    pub fn parse(buf: &'a [u8]) -> Result<Self, CmdError> {
        check_in(buf, access_register_in::SIZE_BYTES, Opcode::AccessReg)?;
        Ok(AccessRegisterIn {
            op_mod: get(buf, access_register_in::OP_MOD)? as u16,
            register_id: get(buf, access_register_in::REGISTER_ID)? as u16,
            argument: get(buf, access_register_in::ARGUMENT)? as u32,
            data: &buf[access_register_in::SIZE_BYTES..],
        })
    }
}

impl CmdIn for AccessRegisterIn<'_> {
    const OPCODE: Opcode = Opcode::AccessReg;
    const OUT_LEN: usize = access_register_out::SIZE_BYTES;
    fn buffer_len(&self) -> usize {
        access_register_in::SIZE_BYTES + self.data.len()
    }
    fn emit(&self, buf: &mut [u8]) -> Result<usize, CmdError> {
        let len = self.buffer_len();
        let b = start_in(buf, len, Opcode::AccessReg)?;
        set(b, access_register_in::OP_MOD, u64::from(self.op_mod))?;
        set(
            b,
            access_register_in::REGISTER_ID,
            u64::from(self.register_id),
        )?;
        set(b, access_register_in::ARGUMENT, u64::from(self.argument))?;
        b[access_register_in::SIZE_BYTES..].copy_from_slice(self.data);
        Ok(len)
    }
}

/// ACCESS_REG output: the register image (read) or its echo (write). The output length the
/// driver asks for is 16 + the register size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct AccessRegisterOut<'a> {
    /// Register data (parsing: everything after the 16-byte header).
    pub data: &'a [u8],
}

impl<'a> AccessRegisterOut<'a> {
    /// Reads the output.
    ///
    /// # Errors
    /// [`CmdError::Status`] for a failed command, [`CmdError::Truncated`] for a short buffer.
    pub fn parse(buf: &'a [u8]) -> Result<Self, CmdError> {
        check_out(buf, access_register_out::SIZE_BYTES, Opcode::AccessReg)?;
        Ok(AccessRegisterOut {
            data: &buf[access_register_out::SIZE_BYTES..],
        })
    }
}

impl CmdOut for AccessRegisterOut<'_> {
    const OPCODE: Opcode = Opcode::AccessReg;
    fn buffer_len(&self) -> usize {
        access_register_out::SIZE_BYTES + self.data.len()
    }
    fn emit(&self, buf: &mut [u8]) -> Result<usize, CmdError> {
        let len = self.buffer_len();
        let b = start_out(buf, len)?;
        b[access_register_out::SIZE_BYTES..].copy_from_slice(self.data);
        Ok(len)
    }
}

ifc_struct! {
    /// HOST_ENDIANNESS register (0x7004): `he` = 0 for a little-endian host, 1 (the byte
    /// 0x80) for big-endian (Linux device.h `MLX5_SET_HOST_ENDIANNESS`).
    pub struct HostEndianness : register_host_endianness {
        /// Host endianness bit (bit 7 of byte 0).
        he: bool = HE,
    }
}

ifc_struct! {
    /// PAOS register (0x5006): port administrative / operational status.
    pub struct Paos : paos_reg {
        /// Switch id.
        swid: u8 = SWID,
        /// Local port number (1-based).
        local_port: u8 = LOCAL_PORT,
        /// Administrative status: 1 up, 2 down.
        admin_status: u8 = ADMIN_STATUS,
        /// Operational status: 1 up, 2 down.
        oper_status: u8 = OPER_STATUS,
        /// Admin state update enable.
        ase: bool = ASE,
        /// Event update enable.
        ee: bool = EE,
        /// Event generation mode.
        e: u8 = E,
    }
}

ifc_struct! {
    /// PMTU register (0x5003): the port's MTU in bytes of the Ethernet payload (Linux
    /// `mlx5_query_port_oper_mtu`; the RoCE path MTU must fit below it).
    pub struct Pmtu : pmtu_reg {
        /// Local port number (1-based).
        local_port: u8 = LOCAL_PORT,
        /// Largest MTU the port supports.
        max_mtu: u16 = MAX_MTU,
        /// MTU configured.
        admin_mtu: u16 = ADMIN_MTU,
        /// MTU in effect.
        oper_mtu: u16 = OPER_MTU,
    }
}

command! {
    /// INIT_HCA input (0x102).
    pub struct InitHcaIn : in init_hca_in (init_hca_out), InitHca {
        /// Software vHCA id (0).
        sw_vhca_id: u16 = SW_VHCA_ID,
        /// Software owner id (zeros unless the `sw_owner_id` capability is used).
        sw_owner_id: [u8; 16] = SW_OWNER_ID,
    }
}
command! {
    /// INIT_HCA output.
    pub struct InitHcaOut : out init_hca_out, InitHca {}
}
command! {
    /// TEARDOWN_HCA input (0x103).
    pub struct TeardownHcaIn : in teardown_hca_in (teardown_hca_out), TeardownHca {
        /// [`TEARDOWN_GRACEFUL_CLOSE`], [`TEARDOWN_FORCE_CLOSE`] or
        /// [`TEARDOWN_PREPARE_FAST_TEARDOWN`].
        profile: u16 = PROFILE,
    }
}
command! {
    /// TEARDOWN_HCA output: `state` 1 (`FORCE_STATE_FAIL`) when a fast/force teardown failed.
    pub struct TeardownHcaOut : out teardown_hca_out, TeardownHca {
        /// 0 success, 1 fail.
        state: bool = STATE,
    }
}
command! {
    /// QUERY_SPECIAL_CONTEXTS input (0x203).
    pub struct QuerySpecialContextsIn : in query_special_contexts_in (query_special_contexts_out), QuerySpecialContexts {}
}
command! {
    /// QUERY_SPECIAL_CONTEXTS output.
    pub struct QuerySpecialContextsOut : out query_special_contexts_out, QuerySpecialContexts {
        /// Dump-fill memory key.
        dump_fill_mkey: u32 = DUMP_FILL_MKEY,
        /// Reserved lkey (covers all memory when `rlky` is set in a QP).
        resd_lkey: u32 = RESD_LKEY,
        /// Null memory key.
        null_mkey: u32 = NULL_MKEY,
    }
}
