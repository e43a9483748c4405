//! [`ModelFaults`]: failures the model can be told to show, so that a driver's error paths
//! (timeouts, malformed outputs, a dead device) can be tested without hardware.

/// Fault-injection knobs of a model device; all off by default. Change them at any time with
/// [`ModelDevice::set_faults`](super::ModelDevice::set_faults).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ModelFaults {
    /// `initializing` (init segment 0x1fc bit 31) never clears: firmware that does not come up.
    pub initializing_stuck: bool,
    /// The health counter (0x1010) stops advancing: a dead firmware.
    pub health_counter_frozen: bool,
    /// A health syndrome (health buffer byte 0x23d, e.g. 0x1 FW error, 0x8 HW unrecoverable)
    /// is reported; the counter also stops.
    pub health_syndrome: Option<u8>,
    /// Command doorbells are ignored: entries stay owned by hardware forever (a full /
    /// stuck command queue).
    pub cmd_never_complete: bool,
    /// Completed command entries carry a wrong signature byte.
    pub cmd_bad_signature: bool,
    /// Commands complete with delivery status "output length error" (8) and no output.
    pub cmd_bad_output_length: bool,
    /// Commands complete with this raw value in the output's status byte (e.g. 0xee, not a
    /// defined `MLX5_CMD_STAT_*`), syndrome 0xdead_beef, and no other output.
    pub cmd_garbage_status: Option<u8>,
    /// Only apply the command faults above to this opcode (e.g. 0x301 CREATE_EQ); `None` =
    /// every command.
    pub cmd_fault_opcode: Option<u16>,
    /// Received RoCE frames are dropped (a dead link).
    pub link_down: bool,
    /// Every N-th received RoCE data frame (not ACKs or CNPs) arrives with ECN CE (`0b11`),
    /// as a congested switch marks it: the notification point answers with CNPs. 0 = off.
    pub ce_mark_every: u32,
}

impl ModelFaults {
    /// Whether the command faults apply to `opcode`.
    pub fn applies_to(&self, opcode: u16) -> bool {
        self.cmd_fault_opcode.map_or(true, |o| o == opcode)
    }
}
