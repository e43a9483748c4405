//! The boilerplate shared by the fixed-length views (smoltcp's wire pattern): the view struct,
//! `new_unchecked` / `new_checked` / `check_len` / `into_inner` and `AsRef<[u8]>`. Each format
//! file supplies `LEN` and its accessors. WQE/CQE segments report
//! [`Error::Truncated`](crate::mlx5::Error::Truncated); the command-interface formats
//! (`mlx5_view!(View, "…", cmd)`) report [`CmdError::Truncated`](crate::mlx5::cmd::CmdError)
//! with the sizes.

/// Declares `pub struct $view<T: AsRef<[u8]>>` for a fixed-length structure named `$what`
/// whose length is the constant `LEN` in the calling module.
macro_rules! mlx5_view {
    ($view:ident, $what:literal) => {
        mlx5_view!(@view $view, $what, crate::mlx5::Error,
            "[`Error::Truncated`](crate::mlx5::Error::Truncated) when the buffer is too short.",
            |_needed, _len| crate::mlx5::Error::Truncated);
    };
    ($view:ident, $what:literal, cmd) => {
        mlx5_view!(@view $view, $what, crate::mlx5::cmd::CmdError,
            "[`CmdError::Truncated`](crate::mlx5::cmd::CmdError::Truncated) when the buffer is too short.",
            |needed, len| crate::mlx5::cmd::CmdError::Truncated { needed, len });
    };
    (@view $view:ident, $what:literal, $err:ty, $err_doc:literal, $truncated:expr) => {
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
            #[doc = $err_doc]
            pub fn new_checked(buffer: T) -> core::result::Result<$view<T>, $err> {
                let v = Self::new_unchecked(buffer);
                v.check_len()?;
                Ok(v)
            }

            /// Checks that the buffer holds the whole structure; afterwards no accessor panics.
            ///
            /// # Errors
            #[doc = $err_doc]
            pub fn check_len(&self) -> core::result::Result<(), $err> {
                let len = self.buffer.as_ref().len();
                if len < LEN {
                    let truncated: fn(usize, usize) -> $err = $truncated;
                    Err(truncated(LEN, len))
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
