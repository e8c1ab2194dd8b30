//! One acquisition attempt per mode, the cleanups armed around it, and the wait for replicas
//! after a grant.

use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Duration;

use lock_core::backend::{
    AcquireRequest, Attempt, Cleanup, Grant, LockBackend, Side, jitter, millis, retry_cleanup,
};
use lock_core::{FencingToken, LockError, OwnerToken, Result};
use tokio::time::Instant;

use super::script_calls::{cancel, release_plain};
use super::{RedisLock, attempt};
use crate::call::Token;
use crate::error::{NAME, classify};
use crate::handoffs::Before;
use crate::keys::KeyNames;
use crate::options::Mode;
use crate::replica::{ReplicaAck, ReplicasNotAcknowledged};
use crate::scripts;

impl RedisLock {
    /// `WAIT` for `ack.replicas` replicas after a grant. The grant's script (the hold and the
    /// fence increment) went out on this connection (on a cluster: to the lock's master) before
    /// the `WAIT`, so the count covers it.
    /// Short of the count, or on an error, the grant is released (so is it when this future is
    /// dropped) and the acquisition fails with a temporary error.
    pub(super) async fn replicated(&self, req: &AcquireRequest<'_>, ack: ReplicaAck) -> Result<()> {
        let (this, key, owner) = (self.clone(), req.key.to_owned(), req.owner);
        let undo = Cleanup::arm("redis grant awaiting its replicas", move || async move {
            this.release(&key, owner).await.map(drop)
        });
        let mut conn = self.inner.conn.clone();
        let mut wait = redis::cmd("WAIT");
        wait.arg(ack.replicas).arg(millis(ack.timeout));
        // On a cluster, to the master of the lock's slot, which ran the script.
        let acked: redis::RedisResult<i64> = conn.query_at_key(&wait, &self.inner.layout.lock(req.key)).await;
        let err = match acked {
            Ok(n) if n >= i64::from(ack.replicas) => {
                undo.disarm();
                return Ok(());
            }
            Ok(n) => LockError::temporary(
                NAME,
                ReplicasNotAcknowledged {
                    wanted: ack.replicas,
                    acknowledged: u32::try_from(n).unwrap_or(0),
                    timeout: ack.timeout,
                },
            ),
            Err(e) => classify(e),
        };
        // Failures of the release are logged by the cleanup; the lease frees what it missed.
        let _ = undo.run_now().await;
        Err(err)
    }

    /// Undoes a simple-mode attempt whose answer never came (see [`cancel`]): a
    /// compare-and-delete of this attempt's value only (owner token and nonce), so it never
    /// frees a later grant to the same owner. The waiter's place is its acquisition's to leave.
    /// `value` is the owner token (its first `owner_len` bytes) and the nonce.
    pub(super) fn arm_simple(
        &self,
        names: Arc<KeyNames>,
        value: String,
        owner_len: usize,
        lease: Duration,
    ) -> Cleanup {
        let conn = self.inner.conn.clone();
        let claim = millis(self.claim_window());
        Cleanup::arm("redis lock attempt", move || async move {
            let (owner, nonce) = value.split_at(owner_len);
            undo_attempt(lease, || cancel(Mode::Simple, conn.clone(), &names, owner, nonce, claim, "", ""))
                .await
        })
    }

    /// Undoes a reentrant or fair attempt whose answer never came (see [`cancel`]).
    pub(super) fn arm_hash(
        &self,
        names: Arc<KeyNames>,
        owner: OwnerToken,
        nonce: OwnerToken,
        lease: Duration,
    ) -> Cleanup {
        let (conn, mode) = (self.inner.conn.clone(), self.inner.mode);
        let claim = millis(self.claim_window());
        Cleanup::arm("redis lock attempt", move || async move {
            // Written out only if the undo runs: most attempts are answered.
            let (owner, nonce) = (owner.to_string(), nonce.to_string());
            undo_attempt(lease, || cancel(mode, conn.clone(), &names, &owner, &nonce, claim, "", "")).await
        })
    }

    /// Undoes an interop-mode attempt if it is abandoned: `release_plain.lua` with the whole
    /// value (owner token and nonce), so only the grant this attempt made goes.
    fn arm_plain(&self, names: Arc<KeyNames>, value: String) -> Cleanup {
        let conn = self.inner.conn.clone();
        Cleanup::arm("redis lock attempt", move || async move {
            release_plain(conn, &names, &value).await.map(drop)
        })
    }

    /// Before an attempt: the hold a release handed to this waiter, if it can be held without
    /// a round trip (see `handoffs.rs`: its fence, and a lease of what is left of the claim
    /// window, which the core extends to the lease asked for), or the attempt's argument naming
    /// the fence of a hand-over this owner took here and holds ('' for none: the attempt is then
    /// a nesting and must not claim that hold a second time). Never with replica acknowledgement
    /// (the hand-over's writes went through the releasing client's connection, so a `WAIT` here
    /// covers nothing), nor for a single attempt (it never registered).
    pub(super) fn before_attempt(&self, req: &AcquireRequest<'_>) -> Result<String, Attempt> {
        let may_take = self.inner.replica_ack.is_none() && req.wait_until.is_some();
        match self.inner.handoffs.before(req.key, req.owner, req.lease, may_take) {
            Before::Take(fence, left, slot) => {
                #[cfg(feature = "testing")]
                self.inner.taken_handoffs.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                Err(Attempt::Acquired(Grant { fence: FencingToken(fence), lease: Some(left), slot }))
            }
            Before::Send { taken } => Ok(taken.map(|f| f.to_string()).unwrap_or_default()),
        }
    }

    /// One interop-mode attempt: `SET NX PX` on the other library's key, and our fence.
    pub(super) async fn acquire_plain(&self, req: &AcquireRequest<'_>) -> Result<Attempt> {
        let names = Arc::new(self.inner.layout.names(req.key));
        // Owner token + attempt nonce, as in simple mode (the other side only compares the
        // value with its own token, which never matches ours).
        let mut value = String::with_capacity(64);
        let _ = write!(value, "{}{}", req.owner, OwnerToken::random());
        let mut conn = self.inner.conn.clone();
        let mut inv = scripts::ACQUIRE_PLAIN.prepare_invoke();
        inv.key(names.lock()).key(names.fence()).arg(&value).arg(millis(req.lease));
        let cleanup = self.arm_plain(names, value);
        let (ok, reply): (i64, i64) = inv.invoke_async(&mut conn).await.map_err(classify)?;
        cleanup.disarm();
        Ok(match attempt(ok, reply, req.lease) {
            // The other library's release publishes nothing we hear: look again within the
            // poll interval (jittered, so waiters spread), sooner if the holder's lease ends.
            Attempt::Held { retry_after } => {
                let poll = jitter(self.inner.interop_poll / 2, self.inner.interop_poll);
                Attempt::Held { retry_after: Some(retry_after.map_or(poll, |h| h.min(poll))) }
            }
            granted => granted,
        })
    }

    pub(super) async fn acquire_simple(&self, req: &AcquireRequest<'_>) -> Result<Attempt> {
        let names = Arc::new(self.inner.layout.names(req.key));
        // The value is owner token + attempt nonce: release and renew match the owner prefix,
        // while the cleanup of an abandoned attempt matches only the grant that attempt made
        // (a late cleanup never deletes a later grant to the same owner). One buffer for both.
        let mut value = String::with_capacity(64);
        let _ = write!(value, "{}", req.owner);
        let owner_len = value.len();
        let _ = write!(value, "{}", OwnerToken::random());
        let taken = match self.before_attempt(req) {
            Ok(flag) => flag,
            Err(grant) => return Ok(grant),
        };
        let wait_ms = self.wait_ms(req);
        self.listen_first(wait_ms > 0).await;
        let mut conn = self.inner.conn.clone();
        // The invocation holds copies of its arguments, so the cleanup can take the originals.
        let mut inv = scripts::ACQUIRE_SIMPLE.get(conn.sharded()).prepare_invoke();
        inv.key(names.lock())
            .key(names.fence())
            .key(names.waiters())
            .key(names.queue())
            .arg(&value)
            .arg(millis(req.lease))
            .arg(&value[..owner_len])
            .arg(wait_ms)
            .arg(self.tag())
            .arg(&taken)
            .arg(upgraded(req));
        let cleanup = self.arm_simple(names, value, owner_len, req.lease);
        let sent = Instant::now();
        let (ok, reply, deadline): (i64, i64, i64) = inv.invoke_async(&mut conn).await.map_err(classify)?;
        cleanup.disarm();
        self.inner.handoffs.answered(req.key, req.owner, ok == 1, deadline, sent);
        Ok(self.refused(attempt(ok, reply, req.lease), wait_ms > 0))
    }

    /// One reentrant or fair attempt. With `wait_until` it registers in the wait set (fair:
    /// joins the queue) or refreshes this waiter's place; without, it neither registers nor
    /// jumps the fair queue.
    pub(super) async fn acquire_hash(&self, req: &AcquireRequest<'_>) -> Result<Attempt> {
        let names = Arc::new(self.inner.layout.names(req.key));
        let taken = match self.before_attempt(req) {
            Ok(flag) => flag,
            Err(grant) => return Ok(grant),
        };
        let (owner, nonce) = (Token(req.owner), Token(OwnerToken::random()));
        // Past the deadline a place in the queue is of no use: the core leaves it anyway. The
        // attempt still takes the lock if this waiter is next.
        let wait_ms = self.wait_ms(req);
        self.listen_first(wait_ms > 0).await;
        let mut conn = self.inner.conn.clone();
        let mut inv = match self.inner.mode {
            Mode::Fair => scripts::ACQUIRE_FAIR.get(conn.sharded()).prepare_invoke(),
            _ => scripts::ACQUIRE_REENTRANT.get(conn.sharded()).prepare_invoke(),
        };
        inv.key(names.lock()).key(names.fence());
        if self.inner.mode == Mode::Fair {
            inv.key(names.queue())
                .key(names.waiters())
                .arg(owner)
                .arg(millis(req.lease))
                .arg(nonce)
                .arg(wait_ms)
                .arg(names.channel())
                .arg(millis(self.claim_window()))
                .arg(self.tag())
                .arg(&taken)
                .arg(upgraded(req));
        } else {
            inv.key(names.waiters())
                .key(names.queue())
                .arg(owner)
                .arg(millis(req.lease))
                .arg(nonce)
                .arg(wait_ms)
                .arg(self.tag())
                .arg(&taken)
                .arg(upgraded(req));
        }
        // Armed only around the request: a place kept in the queue afterwards is the core's to
        // leave (`leave_queue`), a request dropped midway is ours to undo. The invocation holds
        // copies of its arguments, so the cleanup can take the originals.
        let cleanup = self.arm_hash(names, owner.0, nonce.0, req.lease);
        let sent = Instant::now();
        let (ok, value, deadline): (i64, i64, i64) = inv.invoke_async(&mut conn).await.map_err(classify)?;
        cleanup.disarm();
        self.inner.handoffs.answered(req.key, req.owner, ok == 1, deadline, sent);
        Ok(self.refused(attempt(ok, value, req.lease), wait_ms > 0))
    }
}

/// Runs `undo`, the cleanup of an attempt whose answer never came, until it succeeds, a
/// permanent error, or `lease` has passed: what the attempt may have granted has expired by
/// then, and its wait-set entry much sooner.
async fn undo_attempt<F, Fut>(lease: Duration, undo: F) -> Result<()>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<()>>,
{
    let expired = tokio::time::sleep(lease);
    retry_cleanup(undo, LockError::is_temporary, expired).await.unwrap_or(Ok(()))
}

/// The owner token of the read an upgrade asks to become the write ([`Side::Upgrade`]), which
/// the acquire scripts do not count as a reader; '' for any other request.
fn upgraded(req: &AcquireRequest<'_>) -> String {
    match req.side {
        Side::Upgrade { reader } => reader.to_string(),
        _ => String::new(),
    }
}
