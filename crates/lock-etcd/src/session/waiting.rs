//! The waiting lease: a second, short lease per client that carries only the keys of attempts
//! that wait (not those that hold).
//!
//! A waiter's key under the session lease outlives its process by up to that lease's TTL (10 s
//! by default): a waiter killed without clean-up (SIGKILL) left its key in the queue, and the
//! waiter behind it, which watches that key, stood still for a whole lease. On the waiting
//! lease (TTL [`WAITING_TTL`], about 2 s) the key goes within that TTL instead. A waiter that
//! becomes the head moves its key to the session lease before it is granted (a put keeps the
//! key's create revision, so its place and its fence do not change): a hold lives exactly as
//! long as the session lease, as before.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use etcd_client::{Client, Compare, CompareOp, PutOptions, Txn, TxnOp};
use lock_core::Result;
use lock_core::backend::Mutex;
use tokio::sync::watch;
use tokio::task::AbortHandle;
use tokio::time::Instant;

use super::{Inner, Session};
use crate::builder::Config;
use crate::cleanup::Life;
use crate::error::{bounded, lease_gone, lock_error, temporary};

/// TTL asked for the waiting lease, the bound on what a dead waiter costs the next one; never
/// more than the session lease's (a longer one would make that cost worse, not better). etcd
/// raises a TTL below its minimum (1.5 election timeouts, rounded up to a second), and then the
/// bound is that minimum.
pub const WAITING_TTL: Duration = Duration::from_secs(2);

/// After a refused grant, how long waiters queue on the session lease before another grant is
/// tried: an acquisition must not pay a grant that keeps failing.
const RETRY_REFUSED: Duration = Duration::from_secs(5);

/// Shortest keep-alive period: a tiny TTL must not turn it into a busy loop.
const MIN_PERIOD: Duration = Duration::from_millis(10);

/// The value a promotion writes: a control character, never a valid note. The put makes the
/// key's version 2, which `note.rs` would otherwise take for a note set after the grant.
pub(crate) const PROMOTED: &str = "\u{0}";

/// One waiting lease.
pub(crate) struct WaitingLease {
    pub id: i64,
    /// The TTL the server granted.
    pub ttl: Duration,
    /// Gone on the server, or no longer kept alive (it expires within its TTL, its keys too).
    ended: AtomicBool,
    /// Tells the cleanups of keys on this lease when it ended (or was dropped with the client).
    over: watch::Sender<bool>,
    keeper: Mutex<Option<AbortHandle>>,
}

impl Drop for WaitingLease {
    fn drop(&mut self) {
        if let Some(h) = self.keeper.lock().take() {
            h.abort();
        }
    }
}

impl WaitingLease {
    pub fn is_ended(&self) -> bool {
        self.ended.load(Ordering::Acquire)
    }

    fn end(&self) {
        self.ended.store(true, Ordering::Release);
        self.over.send_replace(true);
    }

    /// How long the keys on this lease need their cleanups: once it ended they go by
    /// themselves within its TTL, as nothing renews it any more.
    pub fn life(&self) -> Life {
        Life::new(self.over.subscribe())
    }
}

/// The client's waiting lease, granted at start and again, lazily, once it ended.
#[derive(Default)]
pub(crate) struct Waiting {
    current: Mutex<Option<Arc<WaitingLease>>>,
    regrant: tokio::sync::Mutex<()>,
    /// No grant is tried before this (the last one was refused).
    refused_until: Mutex<Option<Instant>>,
}

impl Waiting {
    fn live(&self) -> Option<Arc<WaitingLease>> {
        self.current.lock().clone().filter(|w| !w.is_ended())
    }

    /// The current lease, if any, for its revoke when the client goes.
    pub fn take(&self) -> Option<Arc<WaitingLease>> {
        self.current.lock().take()
    }
}

/// Grant a waiting lease: its id, its granted TTL and the send time.
pub(crate) async fn grant(client: &Client, cfg: &Config) -> Result<(i64, Duration, Instant)> {
    let sent = Instant::now();
    let ttl = WAITING_TTL.min(cfg.lease_ttl);
    let secs = i64::try_from(ttl.as_secs()).unwrap_or(i64::MAX).max(1);
    let mut leases = client.lease_client();
    let resp = bounded(cfg.conn.request_timeout, leases.grant(secs, None)).await.map_err(lock_error)?;
    Ok((resp.id(), Duration::from_secs(u64::try_from(resp.ttl()).unwrap_or(1).max(1)), sent))
}

impl Inner {
    /// The waiting lease for a new waiter's key: the current one, or a new one if it ended.
    /// `None` when the server refuses one: the key then queues on the session lease, as it did
    /// before there was a waiting lease (a dead waiter costs a session TTL), and the acquisition
    /// goes on.
    pub async fn waiting_lease(self: &Arc<Self>) -> Option<Arc<WaitingLease>> {
        if let Some(w) = self.waiting.live() {
            return Some(w);
        }
        let _one = self.waiting.regrant.lock().await;
        if let Some(w) = self.waiting.live() {
            return Some(w);
        }
        if self.waiting.refused_until.lock().is_some_and(|at| Instant::now() < at) {
            return None;
        }
        let granted = grant(&self.client, &self.cfg).await;
        self.install_waiting(granted)
    }

    /// Start keeping the lease of `granted` alive and make it the current one; remember a
    /// refusal (waiters queue on the session lease meanwhile).
    pub(crate) fn install_waiting(
        &self,
        granted: Result<(i64, Duration, Instant)>,
    ) -> Option<Arc<WaitingLease>> {
        let (id, ttl, sent) = match granted {
            Ok(g) => g,
            Err(e) => {
                tracing::debug!(error = %e, "etcd waiting lease not granted; waiters queue on the session lease");
                *self.waiting.refused_until.lock() = Some(Instant::now() + RETRY_REFUSED);
                return None;
            }
        };
        let lease = Arc::new(WaitingLease {
            id,
            ttl,
            ended: AtomicBool::new(false),
            over: watch::Sender::new(false),
            keeper: Mutex::default(),
        });
        let task = self.runtime.spawn(keep_alive(self.client.clone(), Arc::downgrade(&lease), sent));
        *lease.keeper.lock() = Some(task.abort_handle());
        *self.waiting.current.lock() = Some(lease.clone());
        Some(lease)
    }

    /// Move the key `name` (created at `fence`, queued on the waiting lease) to the session
    /// lease, now that it is first: one put that keeps its create revision, so its place and
    /// its fence stay. Compared on the create revision, so it can never land on a later
    /// attempt's key.
    ///
    /// # Errors
    /// Temporary when the key is gone (its waiting lease ran out, or it was deleted behind our
    /// back) or the session lease is gone.
    pub async fn promote(&self, name: &str, fence: i64, session: &Session) -> Result<()> {
        let put = TxnOp::put(name, PROMOTED, Some(PutOptions::new().with_lease(session.lease)));
        let txn = Txn::new().when([Compare::create_revision(name, CompareOp::Equal, fence)]).and_then([put]);
        let mut kv = self.client.kv_client();
        match bounded(self.cfg.conn.request_timeout, kv.txn(txn)).await {
            Ok(resp) if resp.succeeded() => Ok(()),
            Ok(_) => Err(temporary("own lock key vanished while waiting")),
            // The put names only the session lease.
            Err(e) if lease_gone(&e) => {
                self.lease_ended(session.generation);
                Err(temporary("etcd lease ended while waiting"))
            }
            Err(e) => Err(lock_error(e)),
        }
    }
}

/// Keep a waiting lease alive: a keep-alive every quarter of its TTL, each answer awaited as
/// long. It ends when the server says the lease is gone, or when nothing was confirmed for a
/// whole TTL (it may have expired, and its keys with it): then it is no longer renewed (so it
/// expires if it has not yet), and the next waiter gets a new one. Its waiters see their own
/// keys' deletes on their watch, and start again.
async fn keep_alive(client: Client, lease: Weak<WaitingLease>, granted: Instant) {
    let Some((id, ttl)) = lease.upgrade().map(|l| (l.id, l.ttl)) else { return };
    let period = (ttl / 4).max(MIN_PERIOD);
    let mut confirmed = granted;
    let mut leases = client.lease_client();
    'streams: while confirmed.elapsed() < ttl {
        let sent = Instant::now();
        let (mut keeper, mut stream) = match tokio::time::timeout(period, leases.keep_alive(id)).await {
            Ok(Ok(opened)) => opened,
            Ok(Err(e)) if lease_gone(&e) => break,
            Ok(Err(_)) => {
                tokio::time::sleep(period).await;
                continue;
            }
            Err(_) => continue,
        };
        confirmed = sent;
        loop {
            tokio::time::sleep(period).await;
            if lease.strong_count() == 0 {
                return; // the client is gone, and revoked it
            }
            let sent = Instant::now();
            if keeper.keep_alive().await.is_err() {
                continue 'streams;
            }
            match tokio::time::timeout(period, stream.message()).await {
                Ok(Ok(Some(r))) if r.ttl() > 0 => confirmed = sent,
                Ok(Ok(Some(_))) => break 'streams,
                Ok(Err(e)) if lease_gone(&e) => break 'streams,
                _ if confirmed.elapsed() >= ttl => break 'streams,
                _ => continue 'streams,
            }
        }
    }
    if let Some(l) = lease.upgrade() {
        tracing::debug!(lease = id, "etcd waiting lease ended; the next waiter gets a new one");
        l.end();
    }
}
