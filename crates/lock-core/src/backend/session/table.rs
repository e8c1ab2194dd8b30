//! The hold table: every live hold of one backend by key and owner, and what its keeper is
//! sent. Apart from [`Sessions`](super::Sessions), which fills it, and the keeper, which takes
//! a lost hold out of it, so that neither imports the other.

use std::collections::HashMap;
use std::sync::Arc;

use tokio::sync::{mpsc, oneshot};

use super::link::Signals;
use crate::backend::{Confirmed, Mutex};
use crate::{OwnerToken, Result};

/// A request to one hold's keeper.
pub(crate) enum Cmd {
    /// Is the holding connection alive? (renew)
    Ping(oneshot::Sender<bool>),
    /// Store a note with the hold.
    Note(String, oneshot::Sender<Result<bool>>),
}

/// The holding connection with the send time of the last request the server answered on it.
pub(crate) struct Live<H> {
    pub(crate) held: H,
    pub(crate) confirmed: Confirmed,
}

/// The connection of one hold, shared by its keeper (pings, notes) and its release, which
/// takes it out. `None` once taken, by the release or by the keeper when the hold is lost.
pub(crate) type Slot<H> = Arc<tokio::sync::Mutex<Option<Live<H>>>>;

pub(crate) struct Hold<H> {
    pub(crate) id: u64,
    pub(crate) owner: OwnerToken,
    pub(crate) count: u32,
    /// A shared hold: it takes no note (its fence is the latest writer's, and readers share
    /// the key, so a note would pass for the writer's).
    pub(crate) shared: bool,
    pub(crate) fence: u64,
    pub(crate) session: u64,
    pub(crate) cmd: mpsc::Sender<Cmd>,
    pub(crate) slot: Slot<H>,
    pub(crate) signals: Signals,
}

/// The holds by key: one per owner, so a key has several only while shared
/// ([`AcquireRequest::shared`]).
pub(crate) type Holds<H> = Mutex<HashMap<String, Vec<Hold<H>>>>;

/// `owner`'s hold of `key` in `holds`.
pub(crate) fn find<'a, H>(
    holds: &'a mut HashMap<String, Vec<Hold<H>>>,
    key: &str,
    owner: OwnerToken,
) -> Option<&'a mut Hold<H>> {
    holds.get_mut(key)?.iter_mut().find(|h| h.owner == owner)
}

/// Take the hold that `pick` names out of `key`'s list (dropping an emptied list).
pub(crate) fn take<H>(
    holds: &mut HashMap<String, Vec<Hold<H>>>,
    key: &str,
    pick: impl Fn(&Hold<H>) -> bool,
) -> Option<Hold<H>> {
    let list = holds.get_mut(key)?;
    let hold = list.iter().position(pick).map(|i| list.swap_remove(i));
    if list.is_empty() {
        holds.remove(key);
    }
    hold
}
