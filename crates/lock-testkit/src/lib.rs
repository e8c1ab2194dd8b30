//! Test-only kit: real servers on loopback with fault hooks, and the conformance suite every
//! lock backend runs.
//!
//! A backend plugs in with a [`Factory`] (its clients, each with [`ClientFaults`]); then
//! `conformance_tests!(factory)` expands the suite, [`history::run`] checks exclusion under a
//! nemesis, and [`server`] provides the private servers to fault.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod conformance;
pub mod contracts;
pub mod deadlines;
mod factory;
pub mod history;
pub mod hooked;
pub mod interop;
mod memory;
pub mod pki;
mod poll;
pub mod primitives;
pub mod proxy;
pub mod runtime_gone;
pub mod server;
pub mod side;
pub mod slow_link;
pub mod stall;
pub mod zk_queue;

pub use factory::{Client, ClientFaults, Factory, FaultResult, LoseBy, Loss, Unsupported, key, skip};
pub use memory::MemoryFactory;
pub use poll::{cut_after, eventually, within};
