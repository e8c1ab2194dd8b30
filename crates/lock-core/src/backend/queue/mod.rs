//! For stores that order waiters by a sequence or revision (ZooKeeper's sequential nodes,
//! etcd's create revisions), where every hold of a client lives on one shared session or
//! lease: the predecessor-queue recipe and its bookkeeping, written once so that a fix to it
//! is made once.
//!
//! - [`acquire`]: nest into the owner's hold, or create an entry with the next sequence
//!   number; the lowest holds, and a waiter watches only the entry just before its own (no
//!   herd) until it is deleted or the wait ends. The store supplies its calls through
//!   [`QueueStore`]: create, watch a predecessor, await its deletion, give an entry up, record
//!   a grant.
//! - [`release`]: count a nested hold down, or delete the entry by its exact name; the store
//!   supplies the delete through [`QueueEnd`].
//! - [`QueueHolds`]: the hold table (nesting without a round trip, every guard's lost signal,
//!   the holds of one session told uncertain, held or lost at once).
//! - [`DeadlineKeeper`] and [`Confirmed`]: the send time of the session's last confirmed
//!   request, and the task that gives its holds up a TTL less the drift margin after it.
//! - [`capabilities`]: what such a store can do, and [`stored_note`]: the note in the holder's
//!   entry.

mod capability;
mod deadline;
mod holds;
mod note;
mod recipe;
mod release;

#[cfg(test)]
mod model;
#[cfg(test)]
mod tests;

pub use crate::backend::Confirmed;
pub use crate::backend::confirmed::span;
pub use capability::capabilities;
pub use deadline::{DeadlineKeeper, Holder, Idle};
pub use holds::{HoldKey, Nest, QueueHold, QueueHolds, Released};
pub use note::stored_note;
pub use recipe::{Place, QueueStore, Watched, acquire, first, granted, nested, place_behind};
pub use release::{Ended, QueueEnd, release};
