//! [`RedisLock`]: the [`LockBackend`] over one Redis server.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use lock_core::{
    AcquireRequest, Attempt, Capability, FencingToken, Grant, LockBackend, LockError, LockInfo, OwnerToken,
    RENEW_BATCH, RenewItem, Result, Subscription,
};
use redis::ConnectionInfo;
use redis::aio::ConnectionManager;
use tokio::sync::OnceCell;
use tokio::time::Instant;

use crate::builder::{Mode, RedisLockBuilder};
use crate::error::{NAME, bad_reply, classify};
use crate::keys::{KeyLayout, KeyNames};
use crate::notify::Notifier;
use crate::scripts;

/// Distributed locks on one Redis server (standalone, or the primary of a replicated set: a
/// failover to a replica can lose the latest grants, see the README).
///
/// Build it with [`RedisLock::builder`]; clones share the connection, the subscriber and
/// the scripts. Use it as `Arc<dyn LockBackend>` under a [`lock_core::Locker`].
#[derive(Clone)]
pub struct RedisLock {
    inner: Arc<Inner>,
}

pub(crate) struct Inner {
    conn: ConnectionManager,
    /// Where the subscriber connects (`None`: waiters poll).
    subscriber: Option<ConnectionInfo>,
    notifier: OnceCell<Notifier>,
    mode: Mode,
    layout: Arc<KeyLayout>,
    fair_waiter_timeout: Duration,
    connection_timeout: Duration,
    /// `redis://host:port/db?prefix=...`, without credentials (see `LockBackend::identity`).
    identity: String,
}

impl Inner {
    pub(crate) fn new(
        conn: ConnectionManager,
        server: Option<&ConnectionInfo>,
        notifications: bool,
        mode: Mode,
        layout: Arc<KeyLayout>,
        fair_waiter_timeout: Duration,
        connection_timeout: Duration,
    ) -> Self {
        let identity = match server {
            Some(i) => format!("redis://{}/{}?prefix={}", i.addr(), i.redis_settings().db(), layout.prefix()),
            // Built from a bare connection manager: the address is unknown here.
            None => format!("redis://?prefix={}", layout.prefix()),
        };
        Inner {
            conn,
            subscriber: server.filter(|_| notifications).cloned(),
            notifier: OnceCell::new(),
            mode,
            layout,
            fair_waiter_timeout,
            connection_timeout,
            identity,
        }
    }
}

impl fmt::Debug for RedisLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // ConnectionInfo's own Debug redacts the password, but the address is all we need.
        let addr = self.inner.subscriber.as_ref().map(|i| i.addr().to_string());
        f.debug_struct("RedisLock")
            .field("mode", &self.inner.mode)
            .field("key_prefix", &self.inner.layout.prefix())
            .field("server", &addr)
            .field("notifications", &self.inner.subscriber.is_some())
            .finish()
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX).max(1)
}

/// The waiter's hint from a `PTTL` reply: `0` means "under a millisecond left", so retry in
/// one (reading it as "no hint" made a waiter sleep a whole heartbeat after a crashed holder's
/// lease ran out); `-1` (no expiry) and `-2` (no key) give no hint.
fn hint(pttl: i64) -> Option<Duration> {
    u64::try_from(pttl).ok().map(|ms| Duration::from_millis(ms.max(1)))
}

/// What to undo if an acquisition is abandoned midway.
enum Undo {
    /// Simple mode: compare-and-delete of this attempt's value (owner token and nonce).
    Simple { lock: String, token: String, channel: String },
    /// Hash modes: undo the hold this attempt made (by nonce) and leave the fair queue.
    Hash { names: KeyNames, token: String, nonce: String },
}

impl Inner {
    async fn undo(&self, undo: &Undo) -> redis::RedisResult<()> {
        let mut conn = self.conn.clone();
        match undo {
            Undo::Simple { lock, token, channel } => {
                let _: i64 =
                    scripts::RELEASE_SIMPLE.key(lock).arg(token).arg(channel).invoke_async(&mut conn).await?;
            }
            Undo::Hash { names, token, nonce } => {
                let _: i64 = scripts::CANCEL_HASH
                    .key(&names.lock)
                    .key(&names.queue)
                    .key(&names.waiters)
                    .arg(token)
                    .arg(nonce)
                    .arg(&names.channel)
                    .invoke_async(&mut conn)
                    .await?;
            }
        }
        Ok(())
    }
}

/// Armed before an acquisition is sent; if the attempt's future is dropped before it is
/// disarmed, the undo script runs in the background (it is idempotent and harmless if the
/// attempt never reached the server). Without a runtime the lease frees the key.
struct Cleanup {
    inner: Arc<Inner>,
    undo: Option<Undo>,
}

impl Cleanup {
    fn arm(inner: &Arc<Inner>, undo: Undo) -> Self {
        Cleanup { inner: inner.clone(), undo: Some(undo) }
    }

    fn disarm(mut self) {
        self.undo = None;
    }
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        let Some(undo) = self.undo.take() else { return };
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            tracing::warn!("abandoned redis lock attempt without a runtime; its lease will free the key");
            return;
        };
        let inner = self.inner.clone();
        rt.spawn(async move {
            if let Err(e) = inner.undo(&undo).await {
                tracing::warn!(error = %e, "cleanup of an abandoned redis lock attempt failed; the lease frees it");
            }
        });
    }
}

impl RedisLock {
    /// Start configuring a backend.
    pub fn builder() -> RedisLockBuilder {
        RedisLockBuilder::default()
    }

    /// A backend on `url` with every other setting at its default. Two query parameters of
    /// this crate are read and removed before the URL reaches the driver:
    /// `mode=simple|reentrant|fair` (default simple) and `key_prefix=...` (default `dlock:`).
    ///
    /// # Errors
    /// As [`RedisLockBuilder::build`]; an unknown `mode` is [`LockError::InvalidConfig`].
    pub async fn from_url(url: &str) -> Result<Self> {
        let (base, query) = url.split_once('?').unwrap_or((url, ""));
        let mut builder = Self::builder();
        let mut rest = Vec::new();
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            match pair.split_once('=') {
                Some(("mode", m)) => {
                    builder = builder.mode(match m {
                        "simple" => Mode::Simple,
                        "reentrant" => Mode::Reentrant,
                        "fair" => Mode::Fair,
                        _ => {
                            return Err(LockError::InvalidConfig {
                                reason: format!("unknown redis lock mode {m:?} (simple, reentrant or fair)"),
                            });
                        }
                    })
                }
                Some(("key_prefix", p)) => builder = builder.key_prefix(p),
                _ => rest.push(pair),
            }
        }
        let url = if rest.is_empty() { base.to_owned() } else { format!("{base}?{}", rest.join("&")) };
        builder.url(url).build().await
    }

    pub(crate) fn from_inner(inner: Inner) -> Self {
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

    /// The connection lock commands go through (a clone sharing it).
    pub fn connection(&self) -> ConnectionManager {
        self.inner.conn.clone()
    }

    async fn notifier(&self) -> Result<Option<&Notifier>> {
        let Some(info) = &self.inner.subscriber else { return Ok(None) };
        let n = self
            .inner
            .notifier
            .get_or_try_init(|| {
                Notifier::start(info, self.inner.layout.clone(), self.inner.connection_timeout)
            })
            .await
            .map_err(classify)?;
        Ok(Some(n))
    }

    async fn acquire_simple(&self, req: &AcquireRequest<'_>) -> Result<Attempt> {
        let names = self.inner.layout.names(req.key);
        // The value is owner token + attempt nonce: release and renew match the owner prefix,
        // while the cleanup of an abandoned attempt matches only the grant that attempt made
        // (a late cleanup never deletes a later grant to the same owner).
        let token = format!("{}{}", req.owner, OwnerToken::random());
        let mut conn = self.inner.conn.clone();
        let cleanup = Cleanup::arm(
            &self.inner,
            Undo::Simple { lock: names.lock.clone(), token: token.clone(), channel: names.channel },
        );
        let (ok, value): (i64, i64) = scripts::ACQUIRE_SIMPLE
            .key(&names.lock)
            .key(&names.fence)
            .arg(&token)
            .arg(millis(req.lease))
            .invoke_async(&mut conn)
            .await
            .map_err(classify)?;
        cleanup.disarm();
        Ok(self.attempt(ok, value, req.lease))
    }

    fn attempt(&self, ok: i64, value: i64, lease: Duration) -> Attempt {
        if ok == 1 {
            Attempt::Acquired(Grant { fence: FencingToken(value.max(0) as u64), lease: Some(lease) })
        } else {
            Attempt::Held { retry_after: hint(value) }
        }
    }

    /// One reentrant or fair attempt; `wait_ms` > 0 joins (or stays in) the fair queue.
    async fn acquire_hash(
        &self,
        req: &AcquireRequest<'_>,
        names: &KeyNames,
        nonce: &str,
        wait_ms: u64,
    ) -> Result<(i64, i64)> {
        let mut conn = self.inner.conn.clone();
        let token = req.owner.to_string();
        let r = match self.inner.mode {
            Mode::Fair => {
                scripts::ACQUIRE_FAIR
                    .key(&names.lock)
                    .key(&names.fence)
                    .key(&names.queue)
                    .key(&names.waiters)
                    .arg(&token)
                    .arg(millis(req.lease))
                    .arg(nonce)
                    .arg(wait_ms)
                    .arg(&names.channel)
                    .invoke_async(&mut conn)
                    .await
            }
            _ => {
                scripts::ACQUIRE_REENTRANT
                    .key(&names.lock)
                    .key(&names.fence)
                    .arg(&token)
                    .arg(millis(req.lease))
                    .arg(nonce)
                    .invoke_async(&mut conn)
                    .await
            }
        };
        r.map_err(classify)
    }

    async fn acquire_reentrant(&self, req: &AcquireRequest<'_>) -> Result<Attempt> {
        let names = self.inner.layout.names(req.key);
        let nonce = OwnerToken::random().to_string();
        let cleanup = Cleanup::arm(
            &self.inner,
            Undo::Hash { names: names.clone(), token: req.owner.to_string(), nonce: nonce.clone() },
        );
        let (ok, value) = self.acquire_hash(req, &names, &nonce, 0).await?;
        cleanup.disarm();
        Ok(self.attempt(ok, value, req.lease))
    }

    /// Fair mode: with `wait_until`, wait in the server's queue until served or the deadline.
    async fn acquire_fair(&self, req: &AcquireRequest<'_>) -> Result<Attempt> {
        let names = self.inner.layout.names(req.key);
        let nonce = OwnerToken::random().to_string();
        let undo = Undo::Hash { names: names.clone(), token: req.owner.to_string(), nonce: nonce.clone() };
        let cleanup = Cleanup::arm(&self.inner, undo);
        let Some(until) = req.wait_until else {
            let (ok, value) = self.acquire_hash(req, &names, &nonce, 0).await?;
            cleanup.disarm();
            return Ok(self.attempt(ok, value, req.lease));
        };
        // The core counts the granted lease from before it called us; the lease really starts
        // at the attempt that succeeded, possibly long into the wait.
        let started = Instant::now();
        let timeout = self.inner.fair_waiter_timeout;
        let heartbeat = timeout / 3;
        let token = req.owner.to_string();
        let mut sub: Option<Subscription> = None;
        loop {
            let sent = Instant::now();
            let (ok, value) = self.acquire_hash(req, &names, &nonce, millis(timeout)).await?;
            if ok == 1 {
                cleanup.disarm();
                return Ok(self.attempt(ok, value, req.lease + (sent - started)));
            }
            if Instant::now() >= until {
                // Leave the queue now rather than block it for the waiter timeout.
                if let Err(e) = self.inner.undo(&cleanup_undo(&cleanup)).await {
                    tracing::debug!(error = %e, "leaving the fair queue failed; the waiter timeout will");
                }
                cleanup.disarm();
                return Ok(Attempt::Held { retry_after: hint(value) });
            }
            if sub.is_none() {
                sub = self.subscribe(req.key).await.ok().flatten();
                if sub.is_some() {
                    continue; // a release between the attempt and the subscription is not missed
                }
            }
            // Sleep until the heartbeat is due, the holder's lease runs out, the deadline, or a
            // release that names this waiter (or nobody) as the next in line.
            let wake = until.min(sent + hint(value).map_or(heartbeat, |h| h.min(heartbeat)));
            let Some(s) = sub.as_mut() else {
                tokio::time::sleep_until(wake).await;
                continue;
            };
            loop {
                tokio::select! {
                    _ = tokio::time::sleep_until(wake) => break,
                    alive = s.notified() => {
                        if !alive {
                            sub = None;
                            break;
                        }
                        let next = self.inner.notifier.get().and_then(|n| n.last_payload(req.key));
                        if next.is_none_or(|n| n == token) {
                            break;
                        }
                    }
                }
            }
        }
    }
}

fn cleanup_undo(c: &Cleanup) -> Undo {
    match c.undo.as_ref() {
        Some(Undo::Hash { names, token, nonce }) => {
            Undo::Hash { names: names.clone(), token: token.clone(), nonce: nonce.clone() }
        }
        Some(Undo::Simple { lock, token, channel }) => {
            Undo::Simple { lock: lock.clone(), token: token.clone(), channel: channel.clone() }
        }
        None => unreachable!("an armed cleanup has an undo"),
    }
}

#[async_trait]
impl LockBackend for RedisLock {
    fn name(&self) -> &'static str {
        NAME
    }

    fn identity(&self) -> String {
        self.inner.identity.clone()
    }

    fn capabilities(&self) -> Capability {
        // Capability is non-exhaustive outside lock-core: start from NONE and set fields.
        // Not failover_safe: replication to replicas is asynchronous, so a promoted replica can
        // miss the latest grants and fence increments (see the README).
        let mut c = Capability::NONE;
        c.renew = true;
        c.fencing = true;
        c.notify = self.inner.subscriber.is_some();
        c.reentrant = self.inner.mode != Mode::Simple;
        c.fair = self.inner.mode == Mode::Fair;
        c.native_wait = self.inner.mode == Mode::Fair;
        c
    }

    async fn try_acquire(&self, req: &AcquireRequest<'_>) -> Result<Attempt> {
        match self.inner.mode {
            Mode::Simple => self.acquire_simple(req).await,
            Mode::Reentrant => self.acquire_reentrant(req).await,
            Mode::Fair => self.acquire_fair(req).await,
        }
    }

    async fn release(&self, key: &str, owner: OwnerToken) -> Result<bool> {
        let names = self.inner.layout.names(key);
        let mut conn = self.inner.conn.clone();
        let token = owner.to_string();
        let r: i64 = match self.inner.mode {
            Mode::Simple => {
                scripts::RELEASE_SIMPLE
                    .key(&names.lock)
                    .arg(&token)
                    .arg(&names.channel)
                    .invoke_async(&mut conn)
                    .await
            }
            _ => {
                scripts::RELEASE_HASH
                    .key(&names.lock)
                    .key(&names.queue)
                    .arg(&token)
                    .arg(&names.channel)
                    .invoke_async(&mut conn)
                    .await
            }
        }
        .map_err(classify)?;
        if r == 2
            && let Some(n) = self.inner.notifier.get()
        {
            n.notify(key);
        }
        Ok(r > 0)
    }

    async fn renew(&self, items: &[RenewItem<'_>]) -> Result<Vec<bool>> {
        let script = match self.inner.mode {
            Mode::Simple => &*scripts::RENEW_SIMPLE,
            _ => &*scripts::RENEW_HASH,
        };
        let mut out = Vec::with_capacity(items.len());
        let mut conn = self.inner.conn.clone();
        for chunk in items.chunks(RENEW_BATCH) {
            let mut inv = script.prepare_invoke();
            for it in chunk {
                inv.key(self.inner.layout.lock(it.key)).arg(it.owner.to_string()).arg(millis(it.lease));
            }
            let flags: Vec<i64> = inv.invoke_async(&mut conn).await.map_err(classify)?;
            if flags.len() != chunk.len() {
                return Err(bad_reply("the renew script"));
            }
            out.extend(flags.into_iter().map(|f| f == 1));
        }
        Ok(out)
    }

    async fn inspect(&self, key: &str) -> Result<LockInfo> {
        let names = self.inner.layout.names(key);
        let mut conn = self.inner.conn.clone();
        let (held, pttl, owner, fence, waiters): (i64, i64, String, String, i64) = scripts::INSPECT
            .key(&names.lock)
            .key(&names.fence)
            .key(&names.queue)
            .invoke_async(&mut conn)
            .await
            .map_err(classify)?;
        let mut info = if held == 1 { LockInfo::held() } else { LockInfo::free() };
        if held == 1 {
            info.remaining = hint(pttl);
            info.fence = fence.parse::<u64>().ok().map(FencingToken);
            info.owner = Some(owner).filter(|o| !o.is_empty()).map(|o| LockInfo::short_owner(&o));
        }
        info.waiters = (self.inner.mode == Mode::Fair).then(|| usize::try_from(waiters).unwrap_or(0));
        Ok(info)
    }

    async fn leave_queue(&self, _key: &str, _owner: OwnerToken) -> Result<()> {
        Ok(())
    }

    async fn subscribe(&self, key: &str) -> Result<Option<Subscription>> {
        let Some(n) = self.notifier().await? else { return Ok(None) };
        Ok(Some(n.subscribe(key).await.map_err(classify)?))
    }
}
