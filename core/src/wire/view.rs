//! The boilerplate shared by the fixed-length header views: the `Packet<T>` struct,
//! `new_unchecked` / `new_checked` / `check_len` / `into_inner` and `AsRef<[u8]>`
//! (smoltcp's wire pattern). Each header file supplies `HEADER_LEN` and its accessors.

/// Declares `pub struct Packet<T: AsRef<[u8]>>` for a fixed-length header named `$name`
/// whose length is the constant `HEADER_LEN` in the calling module.
macro_rules! fixed_header_view {
    ($name:literal) => {
        #[doc = concat!("A read/write view of a ", $name, " at the start of a buffer.")]
        #[derive(Debug, Clone, PartialEq, Eq)]
        pub struct Packet<T: AsRef<[u8]>> {
            buffer: T,
        }

        impl<T: AsRef<[u8]>> Packet<T> {
            /// Wraps a buffer without checking its length.
            pub const fn new_unchecked(buffer: T) -> Packet<T> {
                Packet { buffer }
            }

            /// Wraps a buffer and checks that it holds at least `HEADER_LEN` bytes.
            ///
            /// # Errors
            /// [`Error::Truncated`](crate::wire::Error::Truncated) when the buffer is too short.
            pub fn new_checked(buffer: T) -> crate::wire::Result<Packet<T>> {
                let p = Self::new_unchecked(buffer);
                p.check_len()?;
                Ok(p)
            }

            /// Checks that the buffer holds the whole header; afterwards no accessor panics.
            ///
            /// # Errors
            /// [`Error::Truncated`](crate::wire::Error::Truncated) when the buffer is too short.
            pub fn check_len(&self) -> crate::wire::Result<()> {
                if self.buffer.as_ref().len() < HEADER_LEN {
                    Err(crate::wire::Error::Truncated)
                } else {
                    Ok(())
                }
            }

            /// Returns the wrapped buffer.
            pub fn into_inner(self) -> T {
                self.buffer
            }
        }

        impl<'a, T: AsRef<[u8]> + ?Sized> Packet<&'a T> {
            /// The bytes after this header, outliving the view.
            #[inline]
            pub fn payload(&self) -> &'a [u8] {
                &self.buffer.as_ref()[HEADER_LEN..]
            }
        }

        impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
            /// The bytes after this header, writable.
            #[inline]
            pub fn payload_mut(&mut self) -> &mut [u8] {
                &mut self.buffer.as_mut()[HEADER_LEN..]
            }
        }

        impl<T: AsRef<[u8]>> AsRef<[u8]> for Packet<T> {
            fn as_ref(&self) -> &[u8] {
                self.buffer.as_ref()
            }
        }
    };
}
