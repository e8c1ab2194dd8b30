//! Releasing a queue hold: out of the table, then its entry deleted by its exact name, the
//! same steps and answers on every queue store.

use async_trait::async_trait;

use super::QueueHold;
use super::holds::Released;
use super::recipe::QueueStore;
use crate::{LockError, LostReason, OwnerToken, Result};

/// What deleting a released hold's entry came to ([`QueueEnd::end`]).
#[derive(Debug)]
#[non_exhaustive]
pub enum Ended {
    /// The entry was ours and is gone: the lock passes to the next in the queue.
    Deleted,
    /// No entry of ours by that name (taken by an operator, or expired): the hold was lost.
    NotOurs,
    /// The session or lease the entry lived on ended, and the entry with it.
    SessionEnded,
    /// A temporary failure: the entry is still ours, and the store keeps deleting it in the
    /// background until it is gone or its session ends (either frees the lock), so the
    /// release answers that it happened rather than failing one that will.
    Later(String),
    /// A permanent failure.
    Failed(LockError),
}

/// The calls a queue store adds to [`QueueStore`] for a release.
#[async_trait]
pub trait QueueEnd: QueueStore {
    /// Whether the session or lease `hold`'s entry lives on is still this client's and alive:
    /// a hold whose session is gone was freed with it.
    fn lives(&self, hold: &QueueHold) -> bool;

    /// Delete `hold`'s entry by its exact name (comparing its fence where the store can),
    /// stopping the hold's watch when the store's own event no longer needs it.
    async fn end(&self, hold: &mut QueueHold) -> Ended;
}

/// Release `owner`'s hold of `key`: a nested acquisition counts down; the last one deletes the
/// entry, so that the next in the queue, which watches it, holds. `Ok(false)` when `owner` did
/// not hold `key`, or the hold was lost (its guards are told why).
///
/// # Errors
/// A permanent failure to delete the entry.
pub async fn release<S: QueueEnd>(store: &S, key: &str, owner: OwnerToken) -> Result<bool> {
    let mut hold = match store.holds().release(key, owner) {
        Released::NotHeld => return Ok(false),
        Released::Nested => return Ok(true),
        Released::Ended(hold) => hold,
    };
    if !store.lives(&hold) {
        hold.stop_watch();
        return Ok(false); // the session that held it is gone, and its entry with it
    }
    if hold.is_lost() {
        store.delete_lost(hold);
        return Ok(false);
    }
    let ended = store.end(&mut hold).await;
    hold.stop_watch();
    match ended {
        Ended::Deleted => Ok(true),
        Ended::NotOurs => {
            hold.mark_lost(LostReason::NotOwner);
            Ok(false)
        }
        Ended::SessionEnded => {
            hold.mark_lost(LostReason::SessionEnded);
            Ok(false)
        }
        Ended::Later(why) => {
            tracing::debug!(error = %why, "lock release delayed; deleting in the background");
            Ok(true)
        }
        Ended::Failed(e) => Err(e),
    }
}
