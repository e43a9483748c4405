//! Typed inputs and outputs of the object commands an RC QP depends on: ALLOC_UAR /
//! DEALLOC_UAR, CREATE_EQ / DESTROY_EQ (with [`EqContext`]), ALLOC_PD / DEALLOC_PD,
//! CREATE_MKEY / DESTROY_MKEY (with [`MkeyContext`]), CREATE_CQ / DESTROY_CQ (with
//! [`CqContext`]). Layouts: Linux mlx5_ifc.h; field use: rdma-core mlx5_vfio.c, Linux
//! `eq.c`, `hw/mlx5/cq.c`, `hw/mlx5/mr.c` (see `docs/mlx5.md`).
//!
//! Page-size fields: `eqc`/`cqc` `log_page_size` is log2(page) − 12; `mkc.log_page_size` is
//! the absolute log2. The lkey/rkey of a memory key is `mkey_index << 8 | mkey_7_0`
//! ([`mkey`]).

use super::layout::*;
use super::value::FieldValue;
use super::{get, set, CmdError, IfcField, Opcode};

/// The lkey / rkey of a memory key: `mkey_index << 8 | mkey_7_0` (rdma-core
/// `mlx5_vfio_reg_mr`, Linux `mlx5_idx_to_mkey`).
pub const fn mkey(mkey_index: u32, mkey_7_0: u8) -> u32 {
    mkey_index << 8 | mkey_7_0 as u32
}

/// `mkc.access_mode_1_0`: physical addresses (`MLX5_MKC_ACCESS_MODE_PA`).
pub const MKC_ACCESS_MODE_PA: u8 = 0;
/// `mkc.access_mode_1_0`: memory translation table (`MLX5_MKC_ACCESS_MODE_MTT`).
pub const MKC_ACCESS_MODE_MTT: u8 = 1;
/// `cqc.cqe_sz`: 64-byte CQEs.
pub const CQE_SIZE_64: u8 = 0;
/// `cqc.cqe_sz`: 128-byte CQEs.
pub const CQE_SIZE_128: u8 = 1;

command! {
    /// ALLOC_UAR input (0x802).
    pub struct AllocUarIn : in alloc_uar_in (alloc_uar_out), AllocUar {}
}
command! {
    /// ALLOC_UAR output: UAR index; its page is at BAR0 + `uar` × 4096.
    pub struct AllocUarOut : out alloc_uar_out, AllocUar {
        /// UAR index (24 bits).
        uar: u32 = UAR,
    }
}
command! {
    /// DEALLOC_UAR input (0x803).
    pub struct DeallocUarIn : in dealloc_uar_in (dealloc_uar_out), DeallocUar {
        /// UAR index.
        uar: u32 = UAR,
    }
}
command! {
    /// DEALLOC_UAR output.
    pub struct DeallocUarOut : out dealloc_uar_out, DeallocUar {}
}

ifc_struct! {
    /// Event queue context (mlx5_ifc.h `eqc_bits`).
    pub struct EqContext : eqc {
        /// EQ status (query only).
        status: u8 = STATUS,
        /// Event collapse.
        ec: bool = EC,
        /// Overrun ignore.
        oi: bool = OI,
        /// Arming state.
        st: u8 = ST,
        /// Offset of the buffer in its first page, in 64-byte units.
        page_offset: u8 = PAGE_OFFSET,
        /// log2 of the number of EQEs.
        log_eq_size: u8 = LOG_EQ_SIZE,
        /// UAR index whose EQ doorbell serves this EQ.
        uar_page: u32 = UAR_PAGE,
        /// MSI-X vector.
        intr: u16 = INTR,
        /// log2(page size) − 12 of the PAS pages.
        log_page_size: u8 = LOG_PAGE_SIZE,
        /// Consumer counter (query only).
        consumer_counter: u32 = CONSUMER_COUNTER,
        /// Producer counter (query only).
        producer_counter: u32 = PRODUCER_COUNTER,
    }
}

/// The 256-bit event mask of CREATE_EQ (`u8 event_bitmask[4][0x40]`): element 0 holds event
/// types 0..63 (bit `n` = type `n`), element 1 types 64..127, and so on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct EventBitmask(pub [u64; 4]);

impl EventBitmask {
    /// A mask with exactly the given event types (each below 256).
    pub fn of(types: &[u8]) -> EventBitmask {
        let mut m = [0u64; 4];
        for &t in types {
            m[usize::from(t / 64)] |= 1 << (t % 64);
        }
        EventBitmask(m)
    }
    /// `true` when event type `t` is subscribed.
    pub fn contains(&self, t: u8) -> bool {
        self.0[usize::from(t / 64)] & (1 << (t % 64)) != 0
    }
}

impl FieldValue for EventBitmask {
    fn take(buf: &[u8], f: IfcField) -> Result<Self, CmdError> {
        let mut m = [0u64; 4];
        for (i, w) in m.iter_mut().enumerate() {
            *w = get(buf, f.element(i as u32, 64))?;
        }
        Ok(EventBitmask(m))
    }
    fn put(&self, buf: &mut [u8], f: IfcField) -> Result<(), CmdError> {
        for (i, w) in self.0.iter().enumerate() {
            set(buf, f.element(i as u32, 64), *w)?;
        }
        Ok(())
    }
}

command! {
    /// CREATE_EQ input (0x301): context, the 256-bit event mask (`event_bitmask[0]` bit `n`
    /// subscribes to event type `n`; see [`super::eqe::EventType`]) and the buffer pages.
    pub struct CreateEqIn<'a> : in create_eq_in (create_eq_out), CreateEq {
        /// The EQ context.
        eq_context_entry: EqContext = EQ_CONTEXT_ENTRY,
        /// The event mask.
        event_bitmask: EventBitmask = EVENT_BITMASK,
    } pas PAS
}
command! {
    /// CREATE_EQ output.
    pub struct CreateEqOut : out create_eq_out, CreateEq {
        /// EQ number (8 bits).
        eq_number: u8 = EQ_NUMBER,
    }
}
command! {
    /// DESTROY_EQ input (0x302).
    pub struct DestroyEqIn : in destroy_eq_in (destroy_eq_out), DestroyEq {
        /// EQ number.
        eq_number: u8 = EQ_NUMBER,
    }
}
command! {
    /// DESTROY_EQ output.
    pub struct DestroyEqOut : out destroy_eq_out, DestroyEq {}
}
command! {
    /// ALLOC_PD input (0x800).
    pub struct AllocPdIn : in alloc_pd_in (alloc_pd_out), AllocPd {}
}
command! {
    /// ALLOC_PD output.
    pub struct AllocPdOut : out alloc_pd_out, AllocPd {
        /// Protection domain number (24 bits).
        pd: u32 = PD,
    }
}
command! {
    /// DEALLOC_PD input (0x801).
    pub struct DeallocPdIn : in dealloc_pd_in (dealloc_pd_out), DeallocPd {
        /// Protection domain number.
        pd: u32 = PD,
    }
}
command! {
    /// DEALLOC_PD output.
    pub struct DeallocPdOut : out dealloc_pd_out, DeallocPd {}
}

ifc_struct! {
    /// Memory key context (mlx5_ifc.h `mkc_bits`).
    pub struct MkeyContext : mkc {
        /// The key is free (query).
        free: bool = FREE,
        /// UMR may modify the key.
        umr_en: bool = UMR_EN,
        /// Remote atomic allowed.
        a: bool = A,
        /// Remote write allowed.
        rw: bool = RW,
        /// Remote read allowed.
        rr: bool = RR,
        /// Local write allowed.
        lw: bool = LW,
        /// Local read allowed.
        lr: bool = LR,
        /// [`MKC_ACCESS_MODE_PA`] or [`MKC_ACCESS_MODE_MTT`].
        access_mode_1_0: u8 = ACCESS_MODE_1_0,
        /// QP the key is bound to (0xffffff: any).
        qpn: u32 = QPN,
        /// Low 8 bits of the key (software's choice).
        mkey_7_0: u8 = MKEY_7_0,
        /// Length is 2^64 (ignore `len`).
        length64: bool = LENGTH64,
        /// Protection domain.
        pd: u32 = PD,
        /// First virtual address (IOVA) covered.
        start_addr: u64 = START_ADDR,
        /// Length in bytes.
        len: u64 = LEN,
        /// MTT entries / 2 (16-byte units).
        translations_octword_size: u32 = TRANSLATIONS_OCTWORD_SIZE,
        /// log2 of the page size in bytes (absolute, e.g. 12).
        log_page_size: u8 = LOG_PAGE_SIZE,
    }
}

command! {
    /// CREATE_MKEY input (0x200): context and the MTT list (`klm_pas_mtt`, each entry a
    /// page address; rdma-core's VFIO provider ORs in 0x3 = read|write).
    pub struct CreateMkeyIn<'a> : in create_mkey_in (create_mkey_out), CreateMkey {
        /// Page access (MTT entries carry access bits).
        pg_access: bool = PG_ACCESS,
        /// The memory key context.
        memory_key_mkey_entry: MkeyContext = MEMORY_KEY_MKEY_ENTRY,
        /// MTT entries / 2 actually supplied.
        translations_octword_actual_size: u32 = TRANSLATIONS_OCTWORD_ACTUAL_SIZE,
    } pas KLM_PAS_MTT
}
command! {
    /// CREATE_MKEY output; the key is [`mkey`]`(mkey_index, mkey_7_0)`.
    pub struct CreateMkeyOut : out create_mkey_out, CreateMkey {
        /// Memory key index (24 bits).
        mkey_index: u32 = MKEY_INDEX,
    }
}
command! {
    /// DESTROY_MKEY input (0x202).
    pub struct DestroyMkeyIn : in destroy_mkey_in (destroy_mkey_out), DestroyMkey {
        /// Memory key index.
        mkey_index: u32 = MKEY_INDEX,
    }
}
command! {
    /// DESTROY_MKEY output.
    pub struct DestroyMkeyOut : out destroy_mkey_out, DestroyMkey {}
}

ifc_struct! {
    /// Completion queue context (mlx5_ifc.h `cqc_bits`).
    pub struct CqContext : cqc {
        /// CQ status (query only).
        status: u8 = STATUS,
        /// [`CQE_SIZE_64`] or [`CQE_SIZE_128`].
        cqe_sz: u8 = CQE_SZ,
        /// Collapsed CQ.
        cc: bool = CC,
        /// Overrun ignore.
        oi: bool = OI,
        /// Moderation period mode.
        cq_period_mode: u8 = CQ_PERIOD_MODE,
        /// CQE compression enabled.
        cqe_comp_en: bool = CQE_COMP_EN,
        /// Arming state.
        st: u8 = ST,
        /// Offset of the buffer in its first page, in 64-byte units.
        page_offset: u8 = PAGE_OFFSET,
        /// log2 of the number of CQEs.
        log_cq_size: u8 = LOG_CQ_SIZE,
        /// UAR index whose CQ doorbell serves this CQ.
        uar_page: u32 = UAR_PAGE,
        /// Moderation period (µs).
        cq_period: u16 = CQ_PERIOD,
        /// Moderation count.
        cq_max_count: u16 = CQ_MAX_COUNT,
        /// EQ number that receives completion events.
        c_eqn_or_apu_element: u32 = C_EQN_OR_APU_ELEMENT,
        /// log2(page size) − 12 of the PAS pages.
        log_page_size: u8 = LOG_PAGE_SIZE,
        /// Last notified index (query only).
        last_notified_index: u32 = LAST_NOTIFIED_INDEX,
        /// Last solicited index (query only).
        last_solicit_index: u32 = LAST_SOLICIT_INDEX,
        /// Consumer counter (query only).
        consumer_counter: u32 = CONSUMER_COUNTER,
        /// Producer counter (query only).
        producer_counter: u32 = PRODUCER_COUNTER,
        /// DMA address of the CQ doorbell record.
        dbr_addr: u64 = DBR_ADDR,
    }
}

command! {
    /// CREATE_CQ input (0x400): context and the buffer pages.
    pub struct CreateCqIn<'a> : in create_cq_in (create_cq_out), CreateCq {
        /// The CQ context.
        cq_context: CqContext = CQ_CONTEXT,
        /// The buffer is a UMEM (0 for a PAS list).
        cq_umem_valid: bool = CQ_UMEM_VALID,
    } pas PAS
}
command! {
    /// CREATE_CQ output.
    pub struct CreateCqOut : out create_cq_out, CreateCq {
        /// CQ number (24 bits).
        cqn: u32 = CQN,
    }
}
command! {
    /// DESTROY_CQ input (0x401).
    pub struct DestroyCqIn : in destroy_cq_in (destroy_cq_out), DestroyCq {
        /// CQ number.
        cqn: u32 = CQN,
    }
}
command! {
    /// DESTROY_CQ output.
    pub struct DestroyCqOut : out destroy_cq_out, DestroyCq {}
}
