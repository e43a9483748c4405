//! The boilerplate shared by the fixed-length segment views (smoltcp's wire pattern): the view
//! struct, `new_unchecked` / `new_checked` / `check_len` / `into_inner` and `AsRef<[u8]>`.
//! Each segment file supplies `LEN` and its accessors.

/// Declares `pub struct $view<T: AsRef<[u8]>>` for a fixed-length structure named `$what`
/// whose length is the constant `LEN` in the calling module.
macro_rules! mlx5_view {
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
            /// [`Error::Truncated`](crate::mlx5::Error::Truncated) when the buffer is too short.
            pub fn new_checked(buffer: T) -> crate::mlx5::Result<$view<T>> {
                let v = Self::new_unchecked(buffer);
                v.check_len()?;
                Ok(v)
            }

            /// Checks that the buffer holds the whole structure; afterwards no accessor panics.
            ///
            /// # Errors
            /// [`Error::Truncated`](crate::mlx5::Error::Truncated) when the buffer is too short.
            pub fn check_len(&self) -> crate::mlx5::Result<()> {
                if self.buffer.as_ref().len() < LEN {
                    Err(crate::mlx5::Error::Truncated)
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
