//! Facade crate: placeholder until backends land.
pub use lock_core::*;
