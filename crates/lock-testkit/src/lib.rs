//! Test-only kit: real servers on loopback with fault hooks, and the conformance suite every
//! lock backend runs.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod conformance;
pub mod history;
mod memory;
pub mod proxy;

pub use conformance::Factory;
pub use memory::MemoryFactory;
pub mod server;
