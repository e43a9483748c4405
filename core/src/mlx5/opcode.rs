//! Send WQE opcodes: bits 7..0 of the control segment's `opmod_idx_opcode` (rdma-core
//! mlx5dv.h and Linux device.h `MLX5_OPCODE_*`; rdma-core calls 0x0e `TSO`, Linux `LSO`).

enum_with_unknown! {
    /// The operation a send WQE asks for (`MLX5_OPCODE_*`). Values the headers do not name
    /// round-trip through `Unknown`.
    pub enum Opcode(u8) {
        /// No operation; the WQE only produces a completion if asked (`MLX5_OPCODE_NOP`).
        Nop = 0x00,
        /// SEND with invalidate; ctrl `imm` holds the rkey to invalidate (`SEND_INVAL`).
        SendInval = 0x01,
        /// RDMA WRITE (`RDMA_WRITE`).
        RdmaWrite = 0x08,
        /// RDMA WRITE with immediate (`RDMA_WRITE_IMM`).
        RdmaWriteImm = 0x09,
        /// SEND (`SEND`).
        Send = 0x0a,
        /// SEND with immediate (`SEND_IMM`).
        SendImm = 0x0b,
        /// Large send offload on raw-packet QPs (Linux `LSO`, rdma-core `TSO`).
        Lso = 0x0e,
        /// RDMA READ (`RDMA_READ`).
        RdmaRead = 0x10,
        /// Atomic compare-and-swap, 8 bytes (`ATOMIC_CS`).
        AtomicCs = 0x11,
        /// Atomic fetch-and-add, 8 bytes (`ATOMIC_FA`).
        AtomicFa = 0x12,
        /// Masked compare-and-swap (`ATOMIC_MASKED_CS`).
        AtomicMaskedCs = 0x14,
        /// Masked fetch-and-add (`ATOMIC_MASKED_FA`).
        AtomicMaskedFa = 0x15,
        /// Memory-window bind (Linux `BIND_MW`; rdma-core binds with UMR).
        BindMw = 0x18,
        /// Fast memory registration (rdma-core `FMR`).
        Fmr = 0x19,
        /// Local invalidate (rdma-core `LOCAL_INVAL`).
        LocalInval = 0x1b,
        /// Configuration command (`CONFIG_CMD`).
        ConfigCmd = 0x1f,
        /// Set protection signature value (`SET_PSV`).
        SetPsv = 0x20,
        /// Get PSV (Linux `GET_PSV`).
        GetPsv = 0x21,
        /// Check PSV (Linux `CHECK_PSV`).
        CheckPsv = 0x22,
        /// Dump (Linux `DUMP`).
        Dump = 0x23,
        /// User-mode memory registration (`UMR`).
        Umr = 0x25,
        /// Remote get PSV (Linux `RGET_PSV`).
        RgetPsv = 0x26,
        /// Remote check PSV (Linux `RCHECK_PSV`).
        RcheckPsv = 0x27,
        /// Tag-matching list operation (rdma-core `TAG_MATCHING`).
        TagMatching = 0x28,
        /// Enhanced multi-packet send (Linux `ENHANCED_MPSW`).
        EnhancedMpsw = 0x29,
        /// Flow table access (`FLOW_TBL_ACCESS`).
        FlowTblAccess = 0x2c,
        /// Advanced steering operation access (Linux `ACCESS_ASO`).
        AccessAso = 0x2d,
        /// Memory-to-memory offload (rdma-core `MMO`).
        Mmo = 0x2f,
    }
}

impl Opcode {
    /// The lowercase name used by `rdmesh mlx5` (`"rdma_write"`, `"send_imm"`, ...), or `None`
    /// for values without a name.
    pub const fn name(self) -> Option<&'static str> {
        Some(match self {
            Opcode::Nop => "nop",
            Opcode::SendInval => "send_inval",
            Opcode::RdmaWrite => "rdma_write",
            Opcode::RdmaWriteImm => "rdma_write_imm",
            Opcode::Send => "send",
            Opcode::SendImm => "send_imm",
            Opcode::Lso => "lso",
            Opcode::RdmaRead => "rdma_read",
            Opcode::AtomicCs => "atomic_cs",
            Opcode::AtomicFa => "atomic_fa",
            Opcode::AtomicMaskedCs => "atomic_masked_cs",
            Opcode::AtomicMaskedFa => "atomic_masked_fa",
            Opcode::BindMw => "bind_mw",
            Opcode::Fmr => "fmr",
            Opcode::LocalInval => "local_inval",
            Opcode::ConfigCmd => "config_cmd",
            Opcode::SetPsv => "set_psv",
            Opcode::GetPsv => "get_psv",
            Opcode::CheckPsv => "check_psv",
            Opcode::Dump => "dump",
            Opcode::Umr => "umr",
            Opcode::RgetPsv => "rget_psv",
            Opcode::RcheckPsv => "rcheck_psv",
            Opcode::TagMatching => "tag_matching",
            Opcode::EnhancedMpsw => "enhanced_mpsw",
            Opcode::FlowTblAccess => "flow_tbl_access",
            Opcode::AccessAso => "access_aso",
            Opcode::Mmo => "mmo",
            Opcode::Unknown(_) => return None,
        })
    }

    /// `true` for the opcodes followed by a remote-address segment on RC/UC QPs
    /// (RDMA WRITE, WRITE with immediate, READ and the two plain atomics; rdma-core qp.c).
    pub const fn has_raddr(self) -> bool {
        matches!(
            self,
            Opcode::RdmaWrite
                | Opcode::RdmaWriteImm
                | Opcode::RdmaRead
                | Opcode::AtomicCs
                | Opcode::AtomicFa
        )
    }

    /// `true` for compare-swap and fetch-add, which carry an atomic segment after the remote
    /// address.
    pub const fn is_atomic(self) -> bool {
        matches!(self, Opcode::AtomicCs | Opcode::AtomicFa)
    }

    /// `true` for the opcodes whose segment layout the decoder knows (NOP, SEND family, RDMA
    /// family, the two plain atomics, LSO). Others decode as opaque 16-byte chunks.
    pub const fn layout_known(self) -> bool {
        matches!(
            self,
            Opcode::Nop
                | Opcode::SendInval
                | Opcode::Send
                | Opcode::SendImm
                | Opcode::Lso
                | Opcode::RdmaWrite
                | Opcode::RdmaWriteImm
                | Opcode::RdmaRead
                | Opcode::AtomicCs
                | Opcode::AtomicFa
        )
    }
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn test_round_trip_every_value() {
        for v in 0..=255u8 {
            assert_eq!(u8::from(Opcode::from(v)), v);
        }
        assert_eq!(Opcode::from(0x08), Opcode::RdmaWrite);
        assert_eq!(Opcode::from(0x03), Opcode::Unknown(0x03));
        assert_eq!(Opcode::RdmaWrite.name(), Some("rdma_write"));
        assert_eq!(Opcode::Unknown(3).name(), None);
    }
}
