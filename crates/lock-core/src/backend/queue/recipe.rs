//! The predecessor-queue recipe: create an entry with the next sequence number, hold when it is
//! first, else watch only the entry just before it until that is deleted or the wait ends.

use async_trait::async_trait;
use tokio::time::Instant;

use super::holds::{Nest, QueueHolds};
use crate::backend::{AcquireRequest, Attempt, Grant, Side};
use crate::{FencingToken, Result};

/// Where an entry stands in its lock's queue.
#[derive(Debug)]
pub enum Place<P> {
    /// First: the lock is held.
    Head,
    /// Behind this entry (or what the store knows of it), the one created just before ours.
    Behind(P),
}

/// What [`QueueStore::watch`] found.
#[derive(Debug)]
pub enum Watched<W, P> {
    /// A watch on the predecessor, set while it still existed: its deletion comes through it.
    Armed(W),
    /// No watch needed: the queue moved before the watch could be set (the predecessor went).
    Moved(Place<P>),
}

/// The store calls of the recipe. One value serves one acquisition attempt at a time; the
/// entry carries what the attempt needs (its session, its cleanup, its name and fence).
#[async_trait]
pub trait QueueStore: Send + Sync {
    /// One attempt's entry in the queue, with the cleanup that deletes it if the attempt ends
    /// without a grant (dropped at any `.await`, `Held`, or an error).
    type Entry: Send;
    /// What the store knows of a predecessor.
    type Predecessor: Send;
    /// A watch on a predecessor.
    type Watch: Send;

    /// The holds of this client.
    fn holds(&self) -> &QueueHolds;

    /// Delete the entry of a hold already out of the table (lost), by its exact name, if its
    /// session may still live.
    fn delete_lost(&self, hold: super::QueueHold);

    /// Create this attempt's entry with the next sequence number (its cleanup armed before
    /// the create is sent), and its place as read with the create.
    async fn enqueue(&self, req: &AcquireRequest<'_>) -> Result<(Self::Entry, Place<Self::Predecessor>)>;

    /// Set a watch on `predecessor`'s deletion, or find the queue moved.
    async fn watch(
        &self,
        entry: &mut Self::Entry,
        predecessor: Self::Predecessor,
    ) -> Result<Watched<Self::Watch, Self::Predecessor>>;

    /// Wait on `watch` until the predecessor is deleted; then the entry's place where the
    /// store knows it without a request, or `None` to [`look`](QueueStore::look) (a request
    /// sent after the wake-up is not cut short by the end of the wait).
    async fn deleted(
        &self,
        entry: &mut Self::Entry,
        watch: Self::Watch,
    ) -> Result<Option<Place<Self::Predecessor>>>;

    /// Read the entry's place in the queue.
    async fn look(&self, entry: &mut Self::Entry) -> Result<Place<Self::Predecessor>>;

    /// The wait ended without a grant: give the entry up and say `Held`.
    async fn leave(&self, entry: Self::Entry) -> Result<Attempt>;

    /// The entry is first: record the hold (disarming its cleanup) and return its fence.
    ///
    /// # Errors
    /// The grant cannot be trusted (its session was not confirmed in time); the entry goes.
    fn hold(&self, req: &AcquireRequest<'_>, entry: Self::Entry) -> Result<i64>;
}

/// Where an entry stands behind `ahead`, the contenders created before it in queue order,
/// `reader` telling a shared hold's entry. An exclusive request holds when nothing is ahead and
/// watches the entry just before it. A shared one holds when no exclusive entry is ahead and
/// watches the first of those, as Curator's read lock does: the readers queued behind a writer
/// all go in together when it leaves, and each looks again for any writer still ahead.
pub fn place_behind<T>(ahead: &[T], side: Side, reader: impl Fn(&T) -> bool) -> Place<&T> {
    let waits_for = match side {
        Side::Read => ahead.iter().find(|e| !reader(e)),
        _ => ahead.last(),
    };
    waits_for.map_or(Place::Head, Place::Behind)
}

/// A grant with fence `fence` (a store's creation number, never negative for a created entry).
pub fn granted(fence: i64) -> Attempt {
    Attempt::Acquired(Grant {
        fence: FencingToken(u64::try_from(fence).unwrap_or(0)),
        lease: None,
        slot: None,
    })
}

/// One acquisition attempt through `store`: nest into the owner's hold, or queue an entry and
/// wait (until `req.wait_until`, the backend's native wait) to be first. Each waiter watches
/// only its predecessor, so a release wakes one waiter, not the herd.
///
/// # Errors
/// Whatever the store's calls answer; the entry's cleanup then deletes it.
pub async fn acquire<S: QueueStore>(store: &S, req: &AcquireRequest<'_>) -> Result<Attempt> {
    if let Some(nested) = nested(store, req) {
        return Ok(nested);
    }
    match first(store, req).await? {
        Ok(entry) => store.hold(req, entry).map(granted),
        Err(left) => Ok(left),
    }
}

/// The grant of a nested acquisition into the owner's live hold, if it has one; a lost hold
/// of the owner is taken out of the table (and its entry deleted) so that a new one can start.
pub fn nested<S: QueueStore>(store: &S, req: &AcquireRequest<'_>) -> Option<Attempt> {
    match store.holds().nest(req.key, req.owner, req.signal) {
        Nest::Nested(fence) => Some(granted(fence)),
        Nest::Lost(old) => {
            store.delete_lost(old);
            None
        }
        Nest::Free => None,
    }
}

/// Queue an entry through `store` and wait (until `req.wait_until`) for it to be first: the
/// entry at the head, with its cleanup still armed, or what [`QueueStore::leave`] said when the
/// wait ended first. For a store that takes one more step once first (a semaphore's gate,
/// held while the permit is taken) before it records anything.
///
/// # Errors
/// Whatever the store's calls answer; the entry's cleanup then deletes it.
pub async fn first<S: QueueStore>(
    store: &S,
    req: &AcquireRequest<'_>,
) -> Result<std::result::Result<S::Entry, Attempt>> {
    let (mut entry, mut place) = store.enqueue(req).await?;
    loop {
        let predecessor = match place {
            Place::Head => return Ok(Ok(entry)),
            Place::Behind(p) => p,
        };
        let Some(deadline) = req.wait_until.filter(|d| Instant::now() < *d) else {
            return store.leave(entry).await.map(Err);
        };
        place = match store.watch(&mut entry, predecessor).await? {
            Watched::Moved(next) => next,
            Watched::Armed(watch) => {
                let woke = tokio::select! {
                    next = store.deleted(&mut entry, watch) => Some(next?),
                    () = tokio::time::sleep_until(deadline) => None,
                };
                match woke {
                    None => return store.leave(entry).await.map(Err),
                    Some(Some(next)) => next,
                    Some(None) => store.look(&mut entry).await?,
                }
            }
        };
    }
}
