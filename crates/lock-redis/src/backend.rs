//! [`RedisLock`]: the [`LockBackend`] over one Redis server.

use std::collections::HashMap;
use std::fmt::{self, Write as _};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use lock_core::backend::{
    AcquireRequest, Attempt, Backoff, Capability, Cleanup, Grant, LockBackend, LockInfo, RENEW_BATCH,
    RenewItem, Subscription, jitter, millis,
};
use lock_core::{FencingToken, LockError, OwnerToken, Result};
use redis::ConnectionInfo;
use redis::aio::ConnectionManagerConfig;
use redis::cluster::ClusterClientBuilder;
use redis::cluster_routing::Slot;
use tokio::sync::{OnceCell, watch};
use tokio::time::Instant;

use crate::conn::RedisConnection;
use crate::error::{NAME, bad_reply, classify};
use crate::handoffs::{self, Before, Handoffs};
use crate::keys::{KeyLayout, KeyNames};
use crate::notify::{Notifier, Source};
use crate::options::Mode;
use crate::replica::{ReplicaAck, ReplicasNotAcknowledged};
use crate::scripts;

/// Longest pause between a connection manager's reconnection attempts: a restarted server is
/// found again within a second, without hammering one that stays down.
const RECONNECT_MAX_DELAY: Duration = Duration::from_secs(1);
/// A waiter refreshes its place in the wait set this many times per waiter timeout, so one
/// slow or lost refresh does not cost it its place.
const HEARTBEATS_PER_TIMEOUT: u32 = 3;
/// How long python-redis-lock's signal list lives after a release pushed it: that library's
/// default `signal_expire` (1000 ms), so our release leaves the list exactly as its own does.
const PRL_SIGNAL_EXPIRE: Duration = Duration::from_millis(1000);

/// The settings of every connection manager of a client (commands and pub/sub).
pub(crate) fn manager_config(connect: Duration, response: Duration) -> ConnectionManagerConfig {
    ConnectionManagerConfig::new()
        .set_connection_timeout(Some(connect))
        .set_response_timeout(Some(response))
        .set_max_delay(RECONNECT_MAX_DELAY)
}

/// Distributed locks on one Redis server (standalone, or the primary of a replicated set,
/// found through Sentinel), or on a Redis Cluster. A failover to a replica can lose the latest
/// grants, see the README.
///
/// Build it with [`RedisLock::builder`]; clones share the connection, the subscriber and
/// the scripts. Use it as `Arc<dyn LockBackend>` under a [`lock_core::Locker`].
#[derive(Clone)]
pub struct RedisLock {
    inner: Arc<Inner>,
}

/// Shared by the clones of one [`RedisLock`].
struct Inner {
    conn: RedisConnection,
    /// Where the server is, if known (not for a bare connection manager or cluster connection).
    target: Target,
    /// Waiters listen for releases on pub/sub (else they poll).
    notifications: bool,
    /// Started by the first `subscribe`.
    notifier: OnceCell<Notifier>,
    /// This client's inbox channel, where a release that hands a lock to one of its waiters is
    /// published ('' without notifications: the lock's channel is used).
    inbox: String,
    /// What this client's waiters register with (`handoff.lua`): a random id of this client
    /// (32 hex digits), which marks a hold handed to one of them, then the inbox.
    tag: String,
    mode: Mode,
    layout: Arc<KeyLayout>,
    fair_waiter_timeout: Duration,
    connection_timeout: Duration,
    /// Interop modes: the longest a waiter sleeps between attempts (the other side's releases
    /// are not published).
    interop_poll: Duration,
    /// Replicas that must acknowledge each grant (`WAIT`), if any.
    replica_ack: Option<ReplicaAck>,
    /// Hand-overs to this client's waiters, heard by the notifier or made by its own releases.
    handoffs: Arc<Handoffs>,
    /// Acquisition attempts sent (feature `testing`: the wake-up tests count them).
    #[cfg(feature = "testing")]
    attempts: std::sync::atomic::AtomicU64,
    /// Hand-overs taken without a round trip (feature `testing`).
    #[cfg(feature = "testing")]
    taken_handoffs: std::sync::atomic::AtomicU64,
}

impl fmt::Debug for RedisLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // ConnectionInfo's own Debug redacts the password, but the address is all we need.
        let addr = self.inner.target.addresses();
        f.debug_struct("RedisLock")
            .field("mode", &self.inner.mode)
            .field("key_prefix", &self.inner.layout.prefix())
            .field("server", &addr)
            .field("notifications", &self.inner.notifications)
            .finish()
    }
}

/// The waiter's hint from a `PTTL` reply: `0` means "under a millisecond left", so retry in
/// one (reading it as "no hint" made a waiter sleep a whole heartbeat after a crashed holder's
/// lease ran out); `-1` (no expiry) and `-2` (no key) give no hint.
fn hint(pttl: i64) -> Option<Duration> {
    u64::try_from(pttl).ok().map(|ms| Duration::from_millis(ms.max(1)))
}

/// The answer of an acquire script: `{1, fence, _}` or `{0, PTTL hint, _}`.
fn attempt(ok: i64, value: i64, lease: Duration) -> Attempt {
    if ok == 1 {
        Attempt::Acquired(Grant { fence: FencingToken(value.max(0) as u64), lease: Some(lease) })
    } else {
        Attempt::Held { retry_after: hint(value) }
    }
}

impl RedisLock {
    /// A backend sending commands through `conn` to `server`. Waiters listen for releases
    /// when `notifications` is on and the server's address is known; else they poll.
    #[allow(clippy::too_many_arguments)] // one call site, the builder
    pub(crate) fn new(
        conn: RedisConnection,
        target: Target,
        notifications: bool,
        mode: Mode,
        layout: KeyLayout,
        fair_waiter_timeout: Duration,
        connection_timeout: Duration,
        interop_poll: Duration,
        replica_ack: Option<ReplicaAck>,
    ) -> Self {
        let notifications = notifications && !matches!(target, Target::Unknown);
        // A cluster has no inbox: a sharded channel lives in one slot, and a client's inbox
        // would be in none of its locks' slots. The hand-over names the waiter on the lock's
        // own channel instead (every subscriber of that key reads it, only the named one wakes).
        let inbox = if notifications && !matches!(target, Target::Cluster(_)) {
            layout.inbox(&OwnerToken::random().to_string())
        } else {
            String::new()
        };
        let tag = format!("{}{inbox}", OwnerToken::random());
        let inner = Inner {
            notifications,
            tag,
            inbox,
            conn,
            target,
            notifier: OnceCell::new(),
            mode,
            layout: Arc::new(layout),
            fair_waiter_timeout,
            connection_timeout,
            interop_poll,
            replica_ack,
            handoffs: Arc::default(),
            #[cfg(feature = "testing")]
            attempts: std::sync::atomic::AtomicU64::new(0),
            #[cfg(feature = "testing")]
            taken_handoffs: std::sync::atomic::AtomicU64::new(0),
        };
        RedisLock { inner: Arc::new(inner) }
    }

    /// The storage mode.
    pub fn mode(&self) -> Mode {
        self.inner.mode
    }

    /// The Redis key names used for lock `key` (for inspection, monitoring and tests).
    pub fn key_names(&self, key: &str) -> KeyNames {
        self.inner.layout.names(key)
    }

    /// The connection lock commands go through (a clone sharing it), so a test can find and
    /// kill it on the server. Feature `testing`; not for production use.
    #[cfg(feature = "testing")]
    pub fn connection(&self) -> RedisConnection {
        self.inner.conn.clone()
    }

    /// Runs what an acquisition attempt of `owner` on `key` leaves behind when its request
    /// failed before it reached the server (its cleanup, with a nonce the server never saw), so
    /// a test can show that it undoes nothing it did not do. Feature `testing`.
    #[cfg(feature = "testing")]
    pub async fn undo_unsent_attempt(&self, key: &str, owner: OwnerToken) -> Result<()> {
        let names = Arc::new(self.inner.layout.names(key));
        let nonce = OwnerToken::random().to_string();
        let cleanup = match self.inner.mode {
            Mode::Simple => self.arm_simple(names, format!("{owner}{nonce}"), 32, Duration::from_secs(1)),
            _ => self.arm_hash(names, owner.to_string(), nonce, Duration::from_secs(1)),
        };
        cleanup.run_now().await
    }

    /// Acquisition attempts this client has sent (`try_acquire` calls), so a test can count
    /// how many waiters a release woke. Feature `testing`; not for production use.
    #[cfg(feature = "testing")]
    pub fn attempts(&self) -> u64 {
        self.inner.attempts.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Locks this client's waiters took from a hand-over without a round trip (of
    /// [`attempts`](Self::attempts), the ones that sent nothing). Feature `testing`.
    #[cfg(feature = "testing")]
    pub fn taken_handoffs(&self) -> u64 {
        self.inner.taken_handoffs.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// `WAIT` for `ack.replicas` replicas after a grant. The grant's script (the hold and the
    /// fence increment) went out on this connection (on a cluster: to the lock's master) before
    /// the `WAIT`, so the count covers it.
    /// Short of the count, or on an error, the grant is released (so is it when this future is
    /// dropped) and the acquisition fails with a temporary error.
    async fn replicated(&self, req: &AcquireRequest<'_>, ack: ReplicaAck) -> Result<()> {
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

    /// How often a waiter refreshes its place.
    fn heartbeat(&self) -> Duration {
        self.inner.fair_waiter_timeout / HEARTBEATS_PER_TIMEOUT
    }

    /// The longest a hold handed over to a waiter lasts before the waiter takes or claims it
    /// (`handoff.lua` also keeps it within the waiter's own liveness deadline): a heartbeat, so
    /// a waiter that vanished (a crashed process next in line) blocks the key no longer than
    /// the other waiters take to come back on their own. A waiter that takes the hold without
    /// a round trip holds it for what is left of this until the core's top-up renewal (which
    /// the core makes before returning when little is left).
    fn claim_window(&self) -> Duration {
        self.heartbeat()
    }

    /// The waiter timeout an attempt sends: the acquisition waits (`wait_until` in the future),
    /// so a refused attempt registers (or keeps its place) in the wait set; else 0, a single
    /// attempt that neither registers nor jumps the fair queue.
    fn wait_ms(&self, req: &AcquireRequest<'_>) -> u64 {
        if req.wait_until.is_some_and(|t| t > Instant::now()) {
            millis(self.inner.fair_waiter_timeout)
        } else {
            0
        }
    }

    /// A registered waiter comes back before its place expires, whatever the holder's lease.
    fn refused(&self, a: Attempt, registered: bool) -> Attempt {
        match a {
            Attempt::Held { retry_after } if registered => {
                let heartbeat = self.heartbeat();
                Attempt::Held { retry_after: Some(retry_after.map_or(heartbeat, |h| h.min(heartbeat))) }
            }
            a => a,
        }
    }

    async fn notifier(&self) -> Result<Option<&Notifier>> {
        if !self.inner.notifications {
            return Ok(None);
        }
        let timeout = self.inner.connection_timeout;
        let n = self
            .inner
            .notifier
            .get_or_try_init(|| {
                Notifier::start(
                    self.inner.target.source(),
                    self.inner.layout.clone(),
                    self.inner.inbox.clone(),
                    self.inner.handoffs.clone(),
                    manager_config(timeout, timeout),
                )
            })
            .await
            .map_err(classify)?;
        Ok(Some(n))
    }

    /// Undoes a simple-mode attempt whose answer never came (see [`cancel`]): a
    /// compare-and-delete of this attempt's value only (owner token and nonce), so it never
    /// frees a later grant to the same owner. The waiter's place is its acquisition's to leave.
    /// `value` is the owner token (its first `owner_len` bytes) and the nonce.
    fn arm_simple(&self, names: Arc<KeyNames>, value: String, owner_len: usize, lease: Duration) -> Cleanup {
        let conn = self.inner.conn.clone();
        let claim = millis(self.claim_window());
        Cleanup::arm("redis lock attempt", move || async move {
            let (owner, nonce) = value.split_at(owner_len);
            undo_attempt(lease, || cancel(Mode::Simple, conn.clone(), &names, owner, nonce, claim, "", ""))
                .await
        })
    }

    /// Undoes a reentrant or fair attempt whose answer never came (see [`cancel`]).
    fn arm_hash(&self, names: Arc<KeyNames>, owner: String, nonce: String, lease: Duration) -> Cleanup {
        let (conn, mode) = (self.inner.conn.clone(), self.inner.mode);
        let claim = millis(self.claim_window());
        Cleanup::arm("redis lock attempt", move || async move {
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
    fn before_attempt(&self, req: &AcquireRequest<'_>) -> Result<String, Attempt> {
        let may_take = self.inner.replica_ack.is_none() && req.wait_until.is_some();
        match self.inner.handoffs.before(req.key, req.owner, req.lease, may_take) {
            Before::Take(fence, left) => {
                #[cfg(feature = "testing")]
                self.inner.taken_handoffs.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                Err(Attempt::Acquired(Grant { fence: FencingToken(fence), lease: Some(left) }))
            }
            Before::Send { taken } => Ok(taken.map(|f| f.to_string()).unwrap_or_default()),
        }
    }

    /// One interop-mode attempt: `SET NX PX` on the other library's key, and our fence.
    async fn acquire_plain(&self, req: &AcquireRequest<'_>) -> Result<Attempt> {
        let names = Arc::new(self.inner.layout.names(req.key));
        // Owner token + attempt nonce, as in simple mode (the other side only compares the
        // value with its own token, which never matches ours).
        let mut value = String::with_capacity(64);
        let _ = write!(value, "{}{}", req.owner, OwnerToken::random());
        let mut conn = self.inner.conn.clone();
        let mut inv = scripts::ACQUIRE_PLAIN.prepare_invoke();
        inv.key(&names.lock).key(&names.fence).arg(&value).arg(millis(req.lease));
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

    async fn acquire_simple(&self, req: &AcquireRequest<'_>) -> Result<Attempt> {
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
        let mut conn = self.inner.conn.clone();
        // The invocation holds copies of its arguments, so the cleanup can take the originals.
        let mut inv = scripts::ACQUIRE_SIMPLE.get(conn.sharded()).prepare_invoke();
        inv.key(&names.lock)
            .key(&names.fence)
            .key(&names.waiters)
            .key(&names.queue)
            .arg(&value)
            .arg(millis(req.lease))
            .arg(&value[..owner_len])
            .arg(wait_ms)
            .arg(&self.inner.tag)
            .arg(&taken);
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
    async fn acquire_hash(&self, req: &AcquireRequest<'_>) -> Result<Attempt> {
        let names = Arc::new(self.inner.layout.names(req.key));
        let taken = match self.before_attempt(req) {
            Ok(flag) => flag,
            Err(grant) => return Ok(grant),
        };
        let owner = req.owner.to_string();
        let nonce = OwnerToken::random().to_string();
        // Past the deadline a place in the queue is of no use: the core leaves it anyway. The
        // attempt still takes the lock if this waiter is next.
        let wait_ms = self.wait_ms(req);
        let mut conn = self.inner.conn.clone();
        let mut inv = match self.inner.mode {
            Mode::Fair => scripts::ACQUIRE_FAIR.get(conn.sharded()).prepare_invoke(),
            _ => scripts::ACQUIRE_REENTRANT.get(conn.sharded()).prepare_invoke(),
        };
        inv.key(&names.lock).key(&names.fence);
        if self.inner.mode == Mode::Fair {
            inv.key(&names.queue)
                .key(&names.waiters)
                .arg(&owner)
                .arg(millis(req.lease))
                .arg(&nonce)
                .arg(wait_ms)
                .arg(&names.channel)
                .arg(millis(self.claim_window()))
                .arg(&self.inner.tag)
                .arg(&taken);
        } else {
            inv.key(&names.waiters)
                .key(&names.queue)
                .arg(&owner)
                .arg(millis(req.lease))
                .arg(&nonce)
                .arg(wait_ms)
                .arg(&self.inner.tag)
                .arg(&taken);
        }
        // Armed only around the request: a place kept in the queue afterwards is the core's to
        // leave (`leave_queue`), a request dropped midway is ours to undo. The invocation holds
        // copies of its arguments, so the cleanup can take the originals.
        let cleanup = self.arm_hash(names, owner, nonce, req.lease);
        let sent = Instant::now();
        let (ok, value, deadline): (i64, i64, i64) = inv.invoke_async(&mut conn).await.map_err(classify)?;
        cleanup.disarm();
        self.inner.handoffs.answered(req.key, req.owner, ok == 1, deadline, sent);
        Ok(self.refused(attempt(ok, value, req.lease), wait_ms > 0))
    }
}

/// `release_simple.lua`: delete the lock if its value starts with `owner` and hand it over to
/// one waiter; `(2, waiter named or "")` when deleted, `(0, "")` otherwise.
async fn release_simple(
    mut conn: RedisConnection,
    names: &KeyNames,
    owner: &str,
    claim_ms: u64,
) -> Result<(i64, String)> {
    scripts::RELEASE_SIMPLE
        .get(conn.sharded())
        .key(&names.lock)
        .key(&names.waiters)
        .key(&names.queue)
        .key(&names.fence)
        .arg(owner)
        .arg(&names.channel)
        .arg(claim_ms)
        .invoke_async(&mut conn)
        .await
        .map_err(classify)
}

/// `release_plain.lua`: delete the lock if its value starts with `token` (an owner token, or
/// owner token and nonce), push python-redis-lock's signal in that mode, publish for our own
/// waiters; 1 when deleted.
async fn release_plain(mut conn: RedisConnection, names: &KeyNames, token: &str) -> Result<i64> {
    let mut inv = scripts::RELEASE_PLAIN.prepare_invoke();
    inv.key(&names.lock);
    if let Some(signal) = &names.signal {
        inv.key(signal);
    }
    inv.arg(token).arg(&names.channel).arg(millis(PRL_SIGNAL_EXPIRE));
    inv.invoke_async(&mut conn).await.map_err(classify)
}

/// Runs `undo`, the cleanup of an attempt whose answer never came, until it succeeds, a
/// permanent error, or `lease` has passed (what the attempt may have granted has expired by
/// then, and its wait-set entry much sooner): the same fault that lost the answer (a paused or
/// failing-over server) usually fails the first try too, and a grant left behind would block
/// the key for its whole lease.
async fn undo_attempt<F, Fut>(lease: Duration, mut undo: F) -> Result<()>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<()>>,
{
    let give_up = Instant::now() + lease;
    let mut backoff = Backoff::new(Duration::from_millis(20), Duration::from_secs(1));
    loop {
        match undo().await {
            Err(e) if e.is_temporary() && Instant::now() < give_up => {
                tokio::time::sleep(backoff.next_delay()).await;
            }
            r => return r,
        }
    }
}

/// The mode's cancel script (`cancel_simple.lua`, `cancel_hash.lua`) for `owner`: with a
/// `nonce`, undoes the grant or hold made by the attempt with that nonce and nothing else;
/// without, leaves the wait set (and the fair queue) as the waiter `tag` and gives up a hold
/// handed to it, unless this client took it (`taken`: the fence it took, or ''). Both take the
/// same arguments, their keys in their own order.
#[allow(clippy::too_many_arguments)] // the script's own arguments, named
async fn cancel(
    mode: Mode,
    mut conn: RedisConnection,
    names: &KeyNames,
    owner: &str,
    nonce: &str,
    claim_ms: u64,
    tag: &str,
    taken: &str,
) -> Result<()> {
    let (script, keys) = match mode {
        Mode::Simple => (
            scripts::CANCEL_SIMPLE.get(conn.sharded()),
            [&names.lock, &names.waiters, &names.queue, &names.fence],
        ),
        Mode::Reentrant | Mode::Fair => (
            scripts::CANCEL_HASH.get(conn.sharded()),
            [&names.lock, &names.queue, &names.waiters, &names.fence],
        ),
        // No wait set to leave; an interop attempt's own cleanup is `arm_plain`.
        Mode::RedisPy | Mode::PythonRedisLock => return Ok(()),
    };
    let mut inv = script.prepare_invoke();
    for k in keys {
        inv.key(k);
    }
    let _: i64 = inv
        .arg(owner)
        .arg(nonce)
        .arg(&names.channel)
        .arg(claim_ms)
        .arg(tag)
        .arg(taken)
        .invoke_async(&mut conn)
        .await
        .map_err(classify)?;
    Ok(())
}

#[async_trait]
impl LockBackend for RedisLock {
    fn name(&self) -> &'static str {
        NAME
    }

    /// `redis://host:port/db?prefix=...`, without credentials; the interop modes add
    /// `&mode=...` (their keys are another lock space).
    fn identity(&self) -> String {
        let prefix = self.inner.layout.prefix();
        let mode = self.inner.mode;
        let space = if mode.is_interop() {
            format!("prefix={prefix}&mode={mode}")
        } else {
            format!("prefix={prefix}")
        };
        self.inner.target.identity(&space)
    }

    fn capabilities(&self) -> Capability {
        // Capability is non-exhaustive outside lock-core: start from NONE and set fields.
        // Not failover_safe: replication to replicas is asynchronous, so a promoted replica can
        // miss the latest grants and fence increments (see the README).
        let mut c = Capability::NONE;
        c.renew = true;
        c.fencing = true;
        c.notify = self.inner.notifications;
        c.reentrant = matches!(self.inner.mode, Mode::Reentrant | Mode::Fair);
        c.fair = self.inner.mode == Mode::Fair;
        // Waiters keep their place in the wait set (fair: the queue) between attempts, so a
        // release wakes only the one it hands the lock to; the core does the waiting. Not in
        // the interop modes: the other library's clients would ignore a reservation, so there
        // is no wait set, and `notify` covers our own releases only (waiters also poll).
        c.queue = !self.inner.mode.is_interop();
        // Notes live inside the hold and the fence counter is ours in every mode (see
        // set_note.lua, raise_fence.lua); neither changes what the other library reads.
        c.notes = true;
        c.raise_fence = true;
        // A release grants the next waiter its hold in advance (handoffs.rs).
        c.early_grants = !self.inner.mode.is_interop();
        c
    }

    async fn try_acquire(&self, req: &AcquireRequest<'_>) -> Result<Attempt> {
        #[cfg(feature = "testing")]
        self.inner.attempts.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let attempt = match self.inner.mode {
            Mode::Simple => self.acquire_simple(req).await?,
            Mode::Reentrant | Mode::Fair => self.acquire_hash(req).await?,
            Mode::RedisPy | Mode::PythonRedisLock => self.acquire_plain(req).await?,
        };
        if let (Some(ack), Attempt::Acquired(_)) = (self.inner.replica_ack, attempt) {
            self.replicated(req, ack).await?;
        }
        Ok(attempt)
    }

    async fn release(&self, key: &str, owner: OwnerToken) -> Result<bool> {
        let names = self.inner.layout.names(key);
        let mut conn = self.inner.conn.clone();
        let token = owner.to_string();
        let claim = millis(self.claim_window());
        let (r, next): (i64, String) = match self.inner.mode {
            Mode::Simple => release_simple(conn, &names, &token, claim).await?,
            // 2 = freed, as the other release scripts say; nobody is named next.
            Mode::RedisPy | Mode::PythonRedisLock => {
                (2 * release_plain(conn, &names, &token).await?, String::new())
            }
            Mode::Reentrant | Mode::Fair => scripts::RELEASE_HASH
                .get(conn.sharded())
                .key(&names.lock)
                .key(&names.queue)
                .key(&names.waiters)
                .key(&names.fence)
                .arg(&token)
                .arg(&names.channel)
                .arg(claim)
                .arg(OwnerToken::random().to_string())
                .invoke_async(&mut conn)
                .await
                .map_err(classify)?,
        };
        if r != 1 {
            // A hold taken from a hand-over ends with its last release (or was not ours).
            self.inner.handoffs.released(key, owner);
        }
        if r == 2
            && let Some(n) = self.inner.notifier.get()
        {
            // This client's own waiters need not wait for the message to come back; only the
            // one the lock was handed to wakes, and takes the hold if it waits here.
            let next = match handoffs::parse(&next) {
                Some((waiter, handed, _)) => {
                    self.inner.handoffs.handed_if_waiting(key, waiter, handed);
                    next.get(..32)
                }
                None => None,
            };
            n.notify_next(key, next);
        }
        Ok(r > 0)
    }

    async fn renew(&self, items: &[RenewItem<'_>]) -> Result<Vec<bool>> {
        let script = match self.inner.mode {
            // A plain string whose value starts with the owner token, in the interop modes too.
            Mode::Simple | Mode::RedisPy | Mode::PythonRedisLock => &*scripts::RENEW_SIMPLE,
            Mode::Reentrant | Mode::Fair => &*scripts::RENEW_HASH,
        };
        let mut out = vec![false; items.len()];
        let mut conn = self.inner.conn.clone();
        let locks: Vec<String> = items.iter().map(|it| self.inner.layout.lock(it.key)).collect();
        // On a cluster one script runs in one slot: each slot's keys go in their own batches.
        let groups: Vec<Vec<usize>> = if conn.sharded() {
            let mut by_slot: HashMap<Slot, Vec<usize>> = HashMap::new();
            for (i, lock) in locks.iter().enumerate() {
                by_slot.entry(Slot::for_key(lock)).or_default().push(i);
            }
            by_slot.into_values().collect()
        } else {
            vec![(0..items.len()).collect()]
        };
        for chunk in groups.iter().flat_map(|g| g.chunks(RENEW_BATCH)) {
            let mut inv = script.prepare_invoke();
            for &i in chunk {
                inv.key(&locks[i]).arg(items[i].owner.to_string()).arg(millis(items[i].lease));
            }
            let flags: Vec<i64> = inv.invoke_async(&mut conn).await.map_err(classify)?;
            if flags.len() != chunk.len() {
                return Err(bad_reply("the renew script"));
            }
            for (&i, f) in chunk.iter().zip(flags) {
                out[i] = f == 1;
                if !out[i] {
                    // A hold taken from a hand-over and now lost is nothing to remember.
                    self.inner.handoffs.released(items[i].key, items[i].owner);
                }
            }
        }
        Ok(out)
    }

    async fn inspect(&self, key: &str) -> Result<LockInfo> {
        let names = self.inner.layout.names(key);
        let mut conn = self.inner.conn.clone();
        let mut inv = scripts::INSPECT.prepare_invoke();
        inv.key(&names.lock);
        // Interop modes: the holder may be the other library's client, which has no fence,
        // and there is no queue; the script then reports neither.
        if !self.inner.mode.is_interop() {
            inv.key(&names.fence).key(&names.queue);
        }
        let (held, pttl, owner, fence, waiters): (i64, i64, Vec<u8>, String, i64) =
            inv.invoke_async(&mut conn).await.map_err(classify)?;
        // The other library's token need not be UTF-8.
        let owner = String::from_utf8_lossy(&owner).into_owned();
        let mut info = if held == 1 { LockInfo::held() } else { LockInfo::free() };
        if held == 1 {
            info.remaining = hint(pttl);
            info.fence = fence.parse::<u64>().ok().map(FencingToken);
            info.owner = Some(owner).filter(|o| !o.is_empty()).map(|o| LockInfo::short_owner(&o));
        }
        info.waiters = usize::try_from(waiters).ok();
        Ok(info)
    }

    async fn leave_queue(&self, key: &str, owner: OwnerToken) -> Result<()> {
        let (conn, names) = (self.inner.conn.clone(), self.inner.layout.names(key));
        let claim = millis(self.claim_window());
        // The wait ended without a guard: what was noted for it goes, but not a hand-over this
        // owner took here for another acquisition (it nests), which the script must not free.
        self.inner.handoffs.forget(key, owner);
        let taken = self.inner.handoffs.taken(key, owner).map(|f| f.to_string()).unwrap_or_default();
        let token = owner.to_string();
        // An empty nonce: leave the wait set and free a hold handed to this waiter and not
        // taken; never touch a hold otherwise.
        cancel(self.inner.mode, conn, &names, &token, "", claim, &self.inner.tag, &taken).await
    }

    async fn subscribe(&self, key: &str) -> Result<Option<Subscription>> {
        let Some(n) = self.notifier().await? else { return Ok(None) };
        Ok(Some(n.subscribe(key).await.map_err(classify)?))
    }

    /// `set_note.lua`: the note goes inside the hold (after the value's owner token and nonce,
    /// or the hash field `m`), so it leaves with the hold.
    async fn set_note(&self, key: &str, owner: OwnerToken, note: &str) -> Result<bool> {
        let mut conn = self.inner.conn.clone();
        let stored: i64 = scripts::SET_NOTE
            .key(self.inner.layout.lock(key))
            .arg(owner.to_string())
            .arg(note)
            .invoke_async(&mut conn)
            .await
            .map_err(classify)?;
        Ok(stored == 1)
    }

    /// One read of the hold itself (`GET`, or `HMGET` of the marker and note fields): what it
    /// returns is the current holder's note or nothing.
    async fn note(&self, key: &str) -> Result<Option<String>> {
        let lock = self.inner.layout.lock(key);
        let mut conn = self.inner.conn.clone();
        if matches!(self.inner.mode, Mode::Reentrant | Mode::Fair) {
            // A hold made by a hand-over starts without a note (handoff.lua writes a new hash).
            return redis::cmd("HGET").arg(&lock).arg("m").query_async(&mut conn).await.map_err(classify);
        }
        let value: Option<Vec<u8>> =
            redis::cmd("GET").arg(&lock).query_async(&mut conn).await.map_err(classify)?;
        Ok(value.as_deref().and_then(note_of_value))
    }

    /// `raise_fence.lua`, for the holder only; a counter above `floor` is left alone.
    async fn raise_fence(&self, key: &str, owner: OwnerToken, floor: FencingToken) -> Result<bool> {
        // The counter is a Redis integer: a floor it cannot hold is no token this backend drew.
        if i64::try_from(floor.0).is_err() {
            return Err(LockError::InvalidConfig {
                reason: format!("fence floor {} is above a redis counter's range", floor.0),
            });
        }
        let names = self.inner.layout.names(key);
        let mut conn = self.inner.conn.clone();
        let held: i64 = scripts::RAISE_FENCE
            .key(&names.lock)
            .key(&names.fence)
            .arg(owner.to_string())
            .arg(floor.0)
            .invoke_async(&mut conn)
            .await
            .map_err(classify)?;
        Ok(held == 1)
    }
}

/// The note in a string-layout hold (`set_note.lua`): owner token and nonce (64 hex digits),
/// `:`, the note. Anything else (no note, a hand-over marker, the other library's value in
/// the interop modes) has none.
fn note_of_value(v: &[u8]) -> Option<String> {
    let (head, rest) = (v.get(..64)?, v.get(64..)?);
    let note = rest.strip_prefix(b":")?;
    if !head.iter().all(u8::is_ascii_hexdigit) {
        return None;
    }
    String::from_utf8(note.to_vec()).ok()
}

/// Where the backend's server is: what the subscriber connects to and what `identity` names.
pub(crate) enum Target {
    /// Built from a bare connection manager or cluster connection: the address is unknown
    /// (waiters poll).
    Unknown,
    /// One server.
    Single(ConnectionInfo),
    /// A cluster: its seed nodes.
    Cluster(ClusterSpec),
    /// The primary named by `master` on the sentinels; `primary` follows it.
    Sentinel { sentinels: Vec<String>, master: String, db: i64, primary: watch::Receiver<ConnectionInfo> },
}

/// How to open another connection to a cluster (the subscriber's).
pub(crate) struct ClusterSpec {
    pub(crate) nodes: Vec<ConnectionInfo>,
    pub(crate) connection_timeout: Duration,
    pub(crate) response_timeout: Duration,
    /// PEM CA certificate(s) for `rediss+cluster://`.
    #[cfg_attr(not(feature = "tls"), allow(dead_code))]
    pub(crate) tls_root_cert: Option<Vec<u8>>,
}

impl ClusterSpec {
    /// A client builder with the seed nodes (their credentials and TLS), the timeouts, and few
    /// retries: a request redirected (MOVED, ASK) or refused during a failover (CLUSTERDOWN,
    /// TRYAGAIN) is retried a few times, then the caller sees a temporary error.
    pub(crate) fn builder(&self) -> ClusterClientBuilder {
        let b = ClusterClientBuilder::new(self.nodes.clone())
            .connection_timeout(self.connection_timeout)
            .response_timeout(self.response_timeout)
            .retries(CLUSTER_RETRIES)
            .min_retry_wait(10)
            .max_retry_wait(200);
        #[cfg(feature = "tls")]
        let b = match &self.tls_root_cert {
            Some(pem) => b.certs(redis::TlsCertificates { client_tls: None, root_cert: Some(pem.clone()) }),
            None => b,
        };
        b
    }
}

/// Retries of one cluster request (redirections, a node reconnecting).
const CLUSTER_RETRIES: u32 = 3;

impl Target {
    /// The subscriber's connection.
    fn source(&self) -> Source {
        match self {
            Target::Unknown => unreachable!("no notifier without an address"),
            Target::Single(info) => Source::Single(info.clone()),
            Target::Cluster(spec) => Source::Cluster(Box::new(spec.builder())),
            Target::Sentinel { primary, .. } => Source::Sentinel(primary.clone()),
        }
    }

    /// The addresses, for `Debug` (no credentials).
    fn addresses(&self) -> Option<String> {
        match self {
            Target::Unknown => None,
            Target::Single(info) => Some(info.addr().to_string()),
            Target::Cluster(spec) => Some(join(spec.nodes.iter().map(|n| n.addr().to_string()))),
            Target::Sentinel { sentinels, master, .. } => Some(format!("{}/{master}", sentinels.join(","))),
        }
    }

    /// The lock space's name, without credentials (see [`LockBackend::identity`]).
    fn identity(&self, space: &str) -> String {
        match self {
            Target::Single(i) => format!("redis://{}/{}?{space}", i.addr(), i.redis_settings().db()),
            Target::Cluster(spec) => {
                format!("redis+cluster://{}/?{space}", join(spec.nodes.iter().map(|n| n.addr().to_string())))
            }
            Target::Sentinel { sentinels, master, db, .. } => {
                format!("redis+sentinel://{}/{master}/{db}?{space}", sentinels.join(","))
            }
            // Built from a bare connection: the address is unknown here.
            Target::Unknown => format!("redis://?{space}"),
        }
    }
}

fn join(it: impl Iterator<Item = String>) -> String {
    it.collect::<Vec<_>>().join(",")
}
