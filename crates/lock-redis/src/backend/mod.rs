//! [`RedisLock`]: the [`LockBackend`] over one Redis server.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use lock_core::backend::{AcquireRequest, Attempt, Grant, millis};
use lock_core::{FencingToken, OwnerToken, Result};
use redis::aio::ConnectionManagerConfig;
use tokio::sync::OnceCell;
use tokio::time::Instant;

use crate::conn::RedisConnection;
use crate::error::classify;
use crate::handoffs::Handoffs;
use crate::keys::{KeyLayout, KeyNames};
use crate::notify::Notifier;
use crate::options::Mode;
use crate::replica::ReplicaAck;
use crate::target::Target;

mod acquire;
mod capabilities;
mod lock_backend;
mod records;
mod script_calls;
mod shared;

/// Longest pause between a connection manager's reconnection attempts: a restarted server is
/// found again within a second, without hammering one that stays down.
const RECONNECT_MAX_DELAY: Duration = Duration::from_secs(1);
/// A waiter refreshes its place in the wait set this many times per waiter timeout, so one
/// slow or lost refresh does not cost it its place.
const HEARTBEATS_PER_TIMEOUT: u32 = 3;

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
    /// Shared holds granted here and not released (release and renewal go to their scripts).
    shared: shared::SharedHolds,
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
/// one (read as "no hint", it would make a waiter sleep a whole heartbeat after a crashed
/// holder's lease ran out); `-1` (no expiry) and `-2` (no key) give no hint.
fn hint(pttl: i64) -> Option<Duration> {
    u64::try_from(pttl).ok().map(|ms| Duration::from_millis(ms.max(1)))
}

/// The answer of an acquire script: `{1, fence, _}` or `{0, PTTL hint, _}`.
fn attempt(ok: i64, value: i64, lease: Duration) -> Attempt {
    if ok == 1 {
        Attempt::Acquired(Grant { fence: FencingToken(value.max(0) as u64), lease: Some(lease), slot: None })
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
            shared: Default::default(),
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
        let nonce = OwnerToken::random();
        let cleanup = match self.inner.mode {
            Mode::Simple => self.arm_simple(names, format!("{owner}{nonce}"), 32, Duration::from_secs(1)),
            _ => self.arm_hash(names, owner, nonce, Duration::from_secs(1)),
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

    /// The waiter tag an attempt sends: the client's id, then its inbox once the subscriber
    /// connection listens there. Before that a hand-over published to the inbox would go
    /// unheard, and `handoff.lua` passes over a waiter whose inbox nobody listens on (the sign
    /// of a dead process); without an inbox it goes to the lock's channel.
    fn tag(&self) -> &str {
        if self.inner.notifier.get().is_some() { &self.inner.tag } else { &self.inner.tag[..32] }
    }

    /// Before a waiting attempt registers: this client listens on its inbox first (once per
    /// client), so that its tag names the inbox from its first registration on. A failure
    /// leaves the tag without it: a hand-over then goes to the lock's channel, and the
    /// subscription the wait makes next reports the error.
    pub(super) async fn listen_first(&self, waiting: bool) {
        if waiting && self.inner.notifier.get().is_none() {
            let _ = self.notifier().await;
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
}
