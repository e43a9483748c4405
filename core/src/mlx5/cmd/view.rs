//! The view boilerplate of the command-interface formats (smoltcp's wire pattern with
//! [`CmdError`](super::CmdError)): the view struct, `new_unchecked` / `new_checked` /
//! `check_len` / `into_inner` and `AsRef<[u8]>`. Each format file supplies `LEN`.

/// Declares `pub struct $view<T: AsRef<[u8]>>` for a fixed-length structure named `$what`
/// whose length is the constant `LEN` in the calling module.
macro_rules! cmd_view {
    ($view:ident, $what:literal) => {
        #[doc = concat!("A read/write view of ", $what, " at the start of a buffer.")]
        #[derive(Debug, Clone, PartialEq, Eq)]
        pub struct $view<T: AsRef<[u8]>> {
            buffer: T,
        }

        impl<T: AsRef<[u8]>> $view<T> {
            /// Wraps a buffer without checking its length.
            pub const fn new_unchecked(buffer: T) -> $view<T> {
                $view { buffer }
            }

            /// Wraps a buffer and checks that it holds at least `LEN` bytes.
            ///
            /// # Errors
            /// [`CmdError::Truncated`](crate::mlx5::cmd::CmdError::Truncated) when the buffer
            /// is too short.
            pub fn new_checked(buffer: T) -> Result<$view<T>, crate::mlx5::cmd::CmdError> {
                let v = Self::new_unchecked(buffer);
                v.check_len()?;
                Ok(v)
            }

            /// Checks that the buffer holds the whole structure; afterwards no accessor panics.
            ///
            /// # Errors
            /// [`CmdError::Truncated`](crate::mlx5::cmd::CmdError::Truncated) when the buffer
            /// is too short.
            pub fn check_len(&self) -> Result<(), crate::mlx5::cmd::CmdError> {
                let len = self.buffer.as_ref().len();
                if len < LEN {
                    Err(crate::mlx5::cmd::CmdError::Truncated { needed: LEN, len })
                } else {
                    Ok(())
                }
            }

            /// Returns the wrapped buffer.
            pub fn into_inner(self) -> T {
                self.buffer
            }
        }

        impl<T: AsRef<[u8]>> AsRef<[u8]> for $view<T> {
            fn as_ref(&self) -> &[u8] {
                self.buffer.as_ref()
            }
        }
    };
}

/// XOR of `bytes` (Linux cmd.c `xor8_buf`): the command interface's signature primitive.
pub(crate) fn xor8(bytes: &[u8]) -> u8 {
    bytes.iter().fold(0, |a, b| a ^ b)
}
