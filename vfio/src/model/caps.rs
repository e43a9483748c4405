//! The HCA capabilities the model reports (QUERY_HCA_CAP) and accepts (SET_HCA_CAP): a
//! ConnectX-7-like general capability (`cmd_hca_cap`) and RoCE capability (`roce_cap`),
//! each as a maximum and a current 4096-byte page (mlx5_ifc.h; op_mod = type << 1 | mode).

use rdmesh_core::mlx5::cmd::{HcaCap, RoceCap, CAPABILITY_LEN, CAP_GENERAL, CAP_ROCE};

/// log2 of the QPs the model offers.
pub const LOG_MAX_QP: u8 = 12;
/// log2 of the WQEBBs / CQEs / EQEs per queue the model accepts.
pub const LOG_MAX_QUEUE: u8 = 15;
/// GID (RoCE address) table size.
pub const GID_TABLE_SIZE: u16 = 256;
/// Q counter sets the model offers (ALLOC_Q_COUNTER; ConnectX-7 reports a few hundred).
pub const MAX_Q_COUNTERS: u16 = 128;
/// log2 of the bfreg size (512 B: two 256-B BlueFlame halves).
pub const LOG_BF_REG_SIZE: u8 = 9;

/// One capability type's maximum and current pages.
#[derive(Debug, Clone)]
pub struct CapPair {
    /// What the device supports (mode 0).
    pub max: Vec<u8>,
    /// What is in effect (mode 1).
    pub cur: Vec<u8>,
}

/// The capability pages of a model device.
#[derive(Debug, Clone)]
pub struct Caps {
    /// General device capabilities (type 0).
    pub general: CapPair,
    /// RoCE capabilities (type 4).
    pub roce: CapPair,
}

fn general(max: bool) -> HcaCap {
    HcaCap {
        log_max_srq_sz: LOG_MAX_QUEUE,
        log_max_qp_sz: LOG_MAX_QUEUE,
        log_max_qp: LOG_MAX_QP,
        log_max_cq_sz: LOG_MAX_QUEUE,
        log_max_cq: LOG_MAX_QP,
        log_max_eq_sz: LOG_MAX_QUEUE,
        log_max_mkey: 16,
        fast_teardown: true,
        log_max_eq: 6,
        log_max_ra_req_qp: 4,
        log_max_ra_res_qp: 4,
        gid_table_size: GID_TABLE_SIZE,
        pkey_table_size: 0,
        port_type: rdmesh_core::mlx5::cmd::PORT_TYPE_ETH,
        num_ports: 1,
        log_max_msg: 30,
        cqe_version: 1,
        // Checksums of command entries: the maximum says "supported", current "off".
        cmdif_checksum: if max { 3 } else { 0 },
        roce: true,
        atomic: true,
        uar_4k: true,
        uar_sz: 0,
        umem_uid_0: true,
        log_pg_sz: 12,
        bf: true,
        mkey_by_name: max,
        log_bf_reg_size: LOG_BF_REG_SIZE,
        max_wqe_sz_sq: 1024,
        max_wqe_sz_rq: 512,
        log_max_pd: 16,
        sq_ts_format: 1,
        rq_ts_format: 1,
        log_uar_page_sz: 0,
        num_of_uars_per_page: 1,
        num_vhca_ports: 0,
        max_qp_cnt: MAX_Q_COUNTERS,
        cc_query_allowed: true,
    }
}

fn roce(max: bool) -> RoceCap {
    RoceCap {
        sw_r_roce_src_udp_port: max,
        qp_ts_format: 1,
        // Bit 0 IPv4, bit 1 IPv6 (mlx5_ifc.h `l3_type`); bit 2 = RoCEv2 (`roce_version`).
        l3_type: 0x3,
        roce_version: 0x4,
        r_roce_dest_udp_port: 4791,
        r_roce_max_src_udp_port: 0xffff,
        r_roce_min_src_udp_port: 0xc000,
        roce_address_table_size: GID_TABLE_SIZE,
    }
}

fn page<F: FnOnce(&mut [u8])>(f: F) -> Vec<u8> {
    let mut p = vec![0u8; CAPABILITY_LEN];
    f(&mut p);
    p
}

impl Default for Caps {
    fn default() -> Self {
        let g = |m| page(|p| general(m).emit_at(p, 0).expect("capability fits its page"));
        let r = |m| page(|p| roce(m).emit_at(p, 0).expect("capability fits its page"));
        Caps {
            general: CapPair {
                max: g(true),
                cur: g(false),
            },
            roce: CapPair {
                max: r(true),
                cur: r(false),
            },
        }
    }
}

/// Why SET_HCA_CAP was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CapRefused(pub &'static str);

impl Caps {
    /// The page for `cap_type` (0 general, 4 RoCE).
    pub fn pair(&self, cap_type: u16) -> Option<&CapPair> {
        match cap_type {
            CAP_GENERAL => Some(&self.general),
            CAP_ROCE => Some(&self.roce),
            _ => None,
        }
    }

    /// The current general capability, typed.
    pub fn general_cur(&self) -> HcaCap {
        HcaCap::parse_at(&self.general.cur, 0).expect("own capability page parses")
    }

    /// Applies SET_HCA_CAP for `cap_type` with the `capability` page the driver sent. Only
    /// the fields a driver sets (Linux `handle_hca_cap`, rdma-core `mlx5_vfio_setup_function`)
    /// change; everything else stays as the device has it.
    ///
    /// Errors: [`CapRefused`] naming the field when a value exceeds the maximum or is not
    /// supported by the model.
    pub fn set(&mut self, cap_type: u16, capability: &[u8]) -> Result<(), CapRefused> {
        match cap_type {
            CAP_GENERAL => {
                let want = HcaCap::parse_at(capability, 0).map_err(|_| CapRefused("capability"))?;
                let max = HcaCap::parse_at(&self.general.max, 0).expect("own page");
                let mut cur = self.general_cur();
                if want.cmdif_checksum != 0 {
                    return Err(CapRefused(
                        "cmdif_checksum (the model only runs without command checksums)",
                    ));
                }
                if want.log_uar_page_sz != 0 {
                    return Err(CapRefused(
                        "log_uar_page_sz (the model has 4 KiB UAR pages only)",
                    ));
                }
                if want.mkey_by_name && !max.mkey_by_name {
                    return Err(CapRefused("mkey_by_name"));
                }
                cur.cmdif_checksum = want.cmdif_checksum;
                cur.log_uar_page_sz = want.log_uar_page_sz;
                cur.mkey_by_name = want.mkey_by_name;
                cur.uar_4k = want.uar_4k || cur.uar_4k;
                cur.emit_at(&mut self.general.cur, 0)
                    .map_err(|_| CapRefused("capability"))?;
                Ok(())
            }
            CAP_ROCE => {
                let want =
                    RoceCap::parse_at(capability, 0).map_err(|_| CapRefused("capability"))?;
                let mut cur = RoceCap::parse_at(&self.roce.cur, 0).expect("own page");
                cur.sw_r_roce_src_udp_port = want.sw_r_roce_src_udp_port;
                cur.emit_at(&mut self.roce.cur, 0)
                    .map_err(|_| CapRefused("capability"))?;
                Ok(())
            }
            _ => Err(CapRefused("op_mod (capability type not settable)")),
        }
    }
}
