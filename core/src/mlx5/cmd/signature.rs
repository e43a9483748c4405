//! The command interface's signature primitive (Linux cmd.c `xor8_buf`). The checked-view
//! boilerplate of the command formats is `mlx5_view!(View, "…", cmd)` from `mlx5/view.rs`.

/// XOR of `bytes` (Linux cmd.c `xor8_buf`): the command interface's signature primitive.
pub(crate) fn xor8(bytes: &[u8]) -> u8 {
    bytes.iter().fold(0, |a, b| a ^ b)
}
