//! NVIDIA's net plugin ABI, versions 8 to 12, with exact x86-64 layouts checked at compile
//! time (`const _: () = assert!(size_of/offset_of …)` in every file).

pub mod types;
pub mod v10;
pub mod v11;
pub mod v12;
pub mod v8;
pub mod v9;
