//! The steps that change a hold: an attempt (create-if-absent), a nested attempt, a rewrite
//! (renewal or note: compare-and-set on the hold's revision), a release (compare-and-delete)
//! and the clean-ups of attempts and holds whose answer was lost.

use std::time::Duration;

use lock_core::backend::{AcquireRequest, Attempt, Cleanup, Grant, Side, retry_cleanup, spawn_cleanup};
use lock_core::{FencingToken, LostReason, Result, backend::unsupported};
use tokio::time::Instant;

use crate::client::Inner;
use crate::error::{self, NAME, Refused};
use crate::holds::{Hold, Released};
use crate::keys::{Value, lock_key};
use crate::store::{Bucket, Current, nonce, retry};

/// Tries of a create against a key that keeps changing between the refusal and the read.
const CREATE_TRIES: usize = 4;
/// Tries of a hold's write or delete that finds the key moved on by earlier writes of its own
/// (sent before a timeout or a cut, landing late: a blackholed link delivers several at once).
/// Two was too few: the generative checker saw a release answer "not held" for a key its
/// holder still had, after a blackhole and after a pause (the writes queued meanwhile land
/// together).
const ADOPT_TRIES: usize = 8;

impl Inner {
    /// One attempt: nest into the owner's live hold, or create the key if it is absent or
    /// deleted, naming the revision it was read at (create-if-absent).
    pub(crate) async fn acquire(&self, req: &AcquireRequest<'_>) -> Result<Attempt> {
        if !matches!(req.side, Side::Exclusive | Side::Write) {
            return Err(unsupported(NAME, "shared holds (read locks, permits)"));
        }
        let key = lock_key(req.key);
        let started = Instant::now();
        match self.holds.live(req.key, req.owner) {
            Ok(Some(hold)) => {
                if self.rewrite(&key, &hold, None, Some(req.lease)).await? {
                    self.holds.nest(&hold, req.signal);
                    return Ok(granted(hold.fence, req.lease));
                }
                // Gone behind our back: a new hold, once this one is out of the table (the
                // core sends no release for a lost guard, so the new hold is safe from it).
                hold.mark_lost(LostReason::NotOwner);
                self.holds.release_lost(req.key, req.owner, &hold);
            }
            Ok(None) => {}
            Err(lost) => self.forget(&key, &lost),
        }
        let value = Value { owner: req.owner, nonce: nonce(), fence: None, note: None };
        // Armed before the first send: a create whose answer is lost (the future dropped, a
        // timeout) may have landed, and then only this attempt's value is deleted.
        let cleanup = undo_create(self.bucket.clone(), key.clone(), value.nonce);
        let id = format!("{:016x}", value.nonce);
        let mut expected = self.markers.take(&key);
        for _ in 0..CREATE_TRIES {
            let revision = match self.bucket.write(&key, value.encode(), expected, &id).await {
                Ok(revision) => revision,
                Err(Refused::Failed(e)) => return Err(e),
                Err(Refused::Conflict) => match self.bucket.current(&key).await? {
                    // A copy of this attempt's create landed (answered by the server as a
                    // duplicate elsewhere): the hold is ours.
                    Current::Held { revision, value: Some(v), .. } if v.nonce == value.nonce => revision,
                    Current::Held { written, .. } => {
                        // Every create of this attempt was refused: nothing to undo.
                        cleanup.disarm();
                        return Ok(Attempt::Held { retry_after: Some(self.bucket.remaining(written)) });
                    }
                    free => {
                        expected = free.free_at().unwrap_or(0);
                        continue;
                    }
                },
            };
            self.holds.insert(
                req.key,
                req.owner,
                Hold::new(revision, value, req.signal, started, (req.lease, self.bucket.ttl)),
            );
            cleanup.disarm();
            return Ok(granted(revision, req.lease));
        }
        cleanup.disarm();
        Ok(Attempt::Held { retry_after: Some(Duration::from_millis(5)) })
    }

    /// Write the hold's value again on its last revision (a renewal: the max age counts from
    /// the last write), with `note` replaced when given, and the lease extended to `lease`
    /// from the send when given. `Ok(false)`: the key is no longer this hold's.
    pub(crate) async fn rewrite(
        &self,
        key: &str,
        hold: &Hold,
        note: Option<Option<String>>,
        lease: Option<Duration>,
    ) -> Result<bool> {
        let mut w = hold.written.lock().await;
        if hold.is_lost() {
            return Ok(false);
        }
        let mut value = w.value.clone();
        if let Some(note) = note {
            value.note = note;
        }
        for _ in 0..ADOPT_TRIES {
            let id = w.next_id();
            let sent = Instant::now();
            match self.bucket.write(key, value.encode(), w.revision, &id).await {
                Ok(revision) => {
                    w.revision = revision;
                    w.value = value;
                    hold.confirm(sent, lease);
                    return Ok(true);
                }
                Err(Refused::Failed(e)) => return Err(e),
                Err(Refused::Conflict) => match self.bucket.current(key).await? {
                    // An earlier write of this hold landed without its answer (a timeout):
                    // only this hold writes its nonce with its fence, each write naming the
                    // one before, so the key has been this hold's all along.
                    Current::Held { revision, value: Some(v), .. }
                        if v.nonce == w.value.nonce && v.fence == Some(hold.fence) =>
                    {
                        w.revision = revision;
                    }
                    _ => return Ok(false),
                },
            }
        }
        // Still this hold's after every try (its earlier writes keep landing): not known lost.
        Err(error::temporary("the lock's key kept changing under its holder's writes"))
    }

    /// Compare-and-delete of the owner's hold (one nesting less if nested).
    pub(crate) async fn release(&self, key_name: &str, owner: lock_core::OwnerToken) -> Result<bool> {
        let hold = match self.holds.release(key_name, owner) {
            Released::NotHeld => return Ok(false),
            Released::Nested => return Ok(true),
            Released::Ended(hold) => hold,
        };
        let key = lock_key(key_name);
        if hold.is_lost() {
            self.forget(&key, &hold);
            return Ok(false);
        }
        let mut w = hold.written.lock().await;
        for _ in 0..ADOPT_TRIES {
            let id = w.next_id();
            match self.bucket.delete(&key, w.revision, &id).await {
                Ok(marker) => {
                    self.markers.put(&key, marker);
                    return Ok(true);
                }
                Err(Refused::Conflict) => match self.bucket.current(&key).await {
                    Ok(Current::Held { revision, value: Some(v), .. })
                        if v.nonce == w.value.nonce && v.fence == Some(hold.fence) =>
                    {
                        w.revision = revision;
                    }
                    Ok(_) => {
                        hold.mark_lost(LostReason::NotOwner);
                        return Ok(false);
                    }
                    Err(e) => {
                        drop(w);
                        self.forget(&key, &hold);
                        return Err(e);
                    }
                },
                Err(Refused::Failed(e)) => {
                    // Still ours, or gone: deleted in the background while it could block
                    // the key (until its TTL), instead of failing a release that will happen.
                    drop(w);
                    self.forget(&key, &hold);
                    if e.is_temporary() {
                        tracing::debug!(error = %e, "nats lock release delayed; deleting in the background");
                        return Ok(true);
                    }
                    return Err(e);
                }
            }
        }
        // Still ours after every try (earlier writes of the hold keep landing): deleted in the
        // background, as after a timeout; never answered "not held" for a key that is.
        drop(w);
        self.forget(&key, &hold);
        Ok(true)
    }

    /// Delete `hold`'s key in the background if it still carries the hold's value.
    pub(crate) fn forget(&self, key: &str, hold: &Hold) {
        let nonce = hold.nonce;
        let (bucket, key) = (self.bucket.clone(), key.to_owned());
        spawn_cleanup(&self.runtime, async move {
            let ttl = bucket.ttl;
            let _ =
                retry_cleanup(|| delete_if_ours(&bucket, &key, nonce), retry, tokio::time::sleep(ttl)).await;
        });
    }
}

/// A grant of `lease`: the server keeps the key for the TTL from the create's store time, after
/// this call began, and this client's keeper rewrites it while the lease is longer
/// (keeper.rs).
fn granted(fence: u64, lease: Duration) -> Attempt {
    Attempt::Acquired(Grant { fence: FencingToken(fence), lease: Some(lease), slot: None })
}

/// The cleanup of a create: delete the key while it carries this attempt's nonce, retrying
/// temporary failures until the TTL would have freed it anyway.
fn undo_create(bucket: Bucket, key: String, nonce: u64) -> Cleanup {
    Cleanup::arm("nats lock attempt", move || async move {
        let until = tokio::time::sleep_until(Instant::now() + bucket.ttl);
        match retry_cleanup(|| delete_if_ours(&bucket, &key, nonce), retry, until).await {
            Some(Err(e)) => Err(e),
            _ => Ok(()),
        }
    })
}

/// Delete `key` if its value carries `nonce` (compare-and-delete on the revision read): a
/// later hold, even of the same owner, has another nonce and is left alone.
pub(crate) async fn delete_if_ours(bucket: &Bucket, key: &str, nonce: u64) -> Result<()> {
    for _ in 0..ADOPT_TRIES {
        let Current::Held { revision, value: Some(v), .. } = bucket.current(key).await? else {
            return Ok(());
        };
        if v.nonce != nonce {
            return Ok(());
        }
        match bucket.delete(key, revision, &format!("{nonce:016x}.x{revision}")).await {
            Ok(_) => return Ok(()),
            Err(Refused::Conflict) => continue,
            Err(Refused::Failed(e)) => return Err(e),
        }
    }
    // Still ours: a temporary error, so the clean-up tries again.
    Err(error::temporary("the attempt's key kept changing while it was undone"))
}
