//! A grant no guard holds yet, and the cleanups that keep it from being nobody's: the top-up
//! of a grant shorter than asked, the release of a grant whose acquisition was dropped, and
//! leaving a queue store's line.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::backend::{Attempt, Cleanup, Grant, RenewItem};
use crate::{LockBackend, OwnerToken, Result};

/// Shortest local validity (a short grant less the drift margin) left to the watchdog's top-up:
/// below it, a loaded machine could miss the deadline before the renewal is answered, and tell
/// the holder of a loss that never happened (at 200 ms, the conformance suite's 10 x 1000 case
/// saw that at a load average of 12).
const SHORT_GRANT_MIN: Duration = Duration::from_secs(1);

/// A grant shorter than the lease asked for (a hold handed over in advance, see
/// [`Grant::lease`](crate::backend::Grant)) is topped up by the watchdog soon after; one so short
/// that the drift margin would eat half of it, or leave less than [`SHORT_GRANT_MIN`], is
/// topped up here, before the guard exists.
/// Answers the grant with the lease it now has (counted from `sent_at`, moved to the top-up's
/// send), or `Held` if the short grant ran out first.
pub(super) async fn top_up(
    backend: &Arc<dyn LockBackend>,
    key: &str,
    owner: OwnerToken,
    (lease, margin): (Duration, Duration),
    grant: Grant,
    sent_at: &mut Instant,
) -> Result<Attempt> {
    let Some(short) = grant.lease.filter(|g| *g < lease) else { return Ok(Attempt::Acquired(grant)) };
    let valid = short.saturating_sub(margin);
    if valid >= short / 2 && valid >= SHORT_GRANT_MIN {
        return Ok(Attempt::Acquired(grant));
    }
    let sent = Instant::now();
    // No guard exists yet: a grant whose top-up fails or is cancelled would be nobody's and
    // block the key until it expires, so it is released (in the background when dropped).
    let undo = release_on_drop(backend, key, owner);
    let held = backend.renew(&[RenewItem { key, owner, lease }]).await?;
    undo.disarm();
    if held.first() != Some(&true) {
        return Ok(Attempt::Held { retry_after: None });
    }
    *sent_at = sent;
    Ok(Attempt::Acquired(Grant { lease: Some(lease), ..grant }))
}

/// Releases `owner`'s grant on `key` when dropped armed (a grant no guard holds yet).
pub(super) fn release_on_drop(backend: &Arc<dyn LockBackend>, key: &str, owner: OwnerToken) -> Cleanup {
    let (backend, key) = (backend.clone(), key.to_owned());
    Cleanup::arm("releasing a grant no guard holds", move || async move {
        backend.release(&key, owner).await.map(drop)
    })
}

/// Leaves `key`'s server-side queue as `owner` when dropped armed (see `LockBackend::queue`).
pub(super) fn leave_on_drop(backend: &Arc<dyn LockBackend>, key: &str, owner: OwnerToken) -> Cleanup {
    let (backend, key) = (backend.clone(), key.to_owned());
    Cleanup::arm("leaving a lock's wait queue", move || async move { backend.leave_queue(&key, owner).await })
}
