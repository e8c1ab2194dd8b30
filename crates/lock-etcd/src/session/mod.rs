//! The lease under every lock of an `EtcdLock`: granting it (and a new one once it ended), its
//! generation, the send time of its last confirmed keep-alive, and what the keep-alive's
//! failures mean for the holds taken on it (uncertain, held again, lost).

mod keeper;
mod waiting;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use etcd_client::{Client, GetOptions, Txn, TxnOp, TxnOpResponse};
use lock_core::backend::Mutex;
use lock_core::backend::queue::{
    Confirmed, DeadlineKeeper, HoldKey, Holder, Idle, QueueHold, QueueHolds, span,
};
use lock_core::{LeaseSignal, LostReason, Result};
use tokio::runtime::Handle;
use tokio::sync::{Notify, watch};
use tokio::task::AbortHandle;
use tokio::time::Instant;

use crate::builder::Config;
use crate::cleanup;
use crate::cleanup::Life;
use crate::error::{bounded, lock_error};
use crate::notify::Hub;
use keeper::{Watch, keep_alive};
pub use waiting::WAITING_TTL;
pub(crate) use waiting::{PROMOTED, Waiting, WaitingLease};

/// One lease. Its generation tells its holds from those of an earlier lease.
pub(crate) struct Session {
    pub lease: i64,
    pub generation: u64,
    /// The TTL the server granted.
    pub ttl: Duration,
    /// Send time of the last keep-alive (or the grant) the server answered: the server expires
    /// the lease a TTL after it last renewed it, which is no earlier.
    confirmed: Confirmed,
    /// The lease is gone (revoked, expired) or given up: the next acquisition grants a new one.
    ended: Arc<AtomicBool>,
    /// Tells the cleanups of this lease's keys when it ended; dropped with the session (the
    /// client is gone, so the lease is revoked or expires unrenewed), which tells them too.
    over: watch::Sender<bool>,
    /// Wakes the deadline keeper for a new hold: it sleeps while there is none.
    new_hold: Arc<Notify>,
    clock_drift: (f64, Duration),
    /// The keep-alive and the deadline keeper of this lease.
    tasks: Mutex<Vec<AbortHandle>>,
}

impl Drop for Session {
    fn drop(&mut self) {
        self.tasks.lock().drain(..).for_each(|h| h.abort());
    }
}

impl Session {
    pub fn is_ended(&self) -> bool {
        self.ended.load(Ordering::Acquire)
    }

    /// Mark the lease ended; `true` for the first caller.
    fn end(&self) -> bool {
        let first = !self.ended.swap(true, Ordering::AcqRel);
        self.over.send_replace(true);
        first
    }

    /// How long the keys put under this lease need their cleanups.
    pub fn life(&self) -> Life {
        Life::new(self.over.subscribe())
    }

    /// A hold with `signal` was taken on this lease: its deadline now matters, to the deadline
    /// keeper and to the hold's guards, which read it lost past that by themselves.
    pub fn held(&self, signal: &LeaseSignal) {
        signal.kept_by(&self.confirmed, span(self.ttl, self.clock_drift));
        self.new_hold.notify_one();
    }

    /// Send time of the last confirmed keep-alive (or the grant).
    #[cfg(feature = "testing")]
    pub fn confirmed_at(&self) -> Instant {
        self.confirmed.at()
    }

    /// When the holds of this lease must be given up: a TTL after the last confirmed send, less
    /// the drift margin.
    pub fn give_up_at(&self) -> Instant {
        self.confirmed.give_up_at(self.ttl, self.clock_drift)
    }

    /// Move the give-up deadline to `at`, as if the last confirmed keep-alive had been sent
    /// that much earlier (or later).
    #[cfg(feature = "testing")]
    pub fn set_give_up_at(&self, at: Instant) {
        if let Some(sent) = at.checked_sub(span(self.ttl, self.clock_drift)) {
            self.confirmed.set(sent);
        }
    }
}

/// Everything an `EtcdLock` and its clones share.
pub(crate) struct Inner {
    pub cfg: Config,
    pub client: Client,
    /// The cluster this client talks to (part of the identity).
    pub cluster_id: u64,
    session: Mutex<Arc<Session>>,
    regrant: tokio::sync::Mutex<()>,
    pub holds: QueueHolds,
    /// The watches of lock prefixes this client's waiters share.
    pub hub: Hub,
    /// The short lease of waiters' keys (`waiting.rs`).
    pub waiting: Waiting,
    next_generation: AtomicU64,
    /// Makes every attempt's key unique under the lease (several owners share one lease).
    pub nonce: AtomicU64,
    /// Predecessor-watch wake-ups of this client's waiters (tests count them: no herd effect).
    #[cfg(feature = "testing")]
    pub wakeups: AtomicU64,
    /// Reads of a waiter's predecessor after its put (tests count them: a waiter that knew
    /// every key ahead needs none).
    #[cfg(feature = "testing")]
    pub predecessor_reads: AtomicU64,
    pub runtime: Handle,
}

impl Drop for Inner {
    /// The last handle is gone: revoke the leases, so their keys go now and not a TTL later
    /// (like closing a ZooKeeper session).
    fn drop(&mut self) {
        let session = self.session.lock().clone();
        let session = (!session.is_ended()).then_some(session.lease);
        let waiting = self.waiting.take().filter(|w| !w.is_ended()).map(|w| w.id);
        for id in session.into_iter().chain(waiting) {
            let mut lease = self.client.lease_client();
            let timeout = self.cfg.conn.request_timeout;
            // Counted as a clean-up: a program that settles them before it exits
            // (`settle_cleanups`) does not cut the revoke off, and its keys go now.
            lock_core::backend::spawn_cleanup(&self.runtime, async move {
                let _ = bounded(timeout, lease.revoke(id)).await;
            });
        }
    }
}

/// Grant a lease of `ttl`: its id, the granted TTL, the send time, and the cluster id.
async fn grant(client: &Client, cfg: &Config) -> Result<(i64, Duration, Instant, u64)> {
    let sent = Instant::now();
    let secs = i64::try_from(cfg.lease_ttl.as_secs()).unwrap_or(i64::MAX).max(1);
    let mut leases = client.lease_client();
    let resp = bounded(cfg.conn.request_timeout, leases.grant(secs, None)).await.map_err(lock_error)?;
    let granted = Duration::from_secs(u64::try_from(resp.ttl()).unwrap_or(1).max(1));
    let cluster = resp.header().map_or(0, |h| h.cluster_id());
    Ok((resp.id(), granted, sent, cluster))
}

impl Inner {
    /// Grant the first lease and start keeping it alive.
    pub async fn start(cfg: Config, client: Client, runtime: Handle) -> Result<Arc<Inner>> {
        // Both leases at once: building costs one round trip, as with one lease.
        let (granted, waiting) = tokio::join!(grant(&client, &cfg), waiting::grant(&client, &cfg));
        let (lease, ttl, sent, cluster_id) = granted?;
        let session = Session::new(0, lease, ttl, sent, cfg.clock_drift);
        let inner = Arc::new(Inner {
            cfg,
            client,
            cluster_id,
            session: Mutex::new(session.clone()),
            regrant: tokio::sync::Mutex::new(()),
            holds: QueueHolds::default(),
            hub: Hub::default(),
            waiting: Waiting::default(),
            next_generation: AtomicU64::new(1),
            nonce: AtomicU64::new(0),
            #[cfg(feature = "testing")]
            wakeups: AtomicU64::new(0),
            #[cfg(feature = "testing")]
            predecessor_reads: AtomicU64::new(0),
            runtime,
        });
        session.watch(&inner);
        inner.install_waiting(waiting);
        Ok(inner)
    }

    pub fn current(&self) -> Arc<Session> {
        self.session.lock().clone()
    }

    /// The current lease, or a new one if it ended.
    pub async fn session(self: &Arc<Self>) -> Result<Arc<Session>> {
        let cur = self.current();
        if !cur.is_ended() {
            return Ok(cur);
        }
        let _one = self.regrant.lock().await;
        let cur = self.current();
        if !cur.is_ended() {
            return Ok(cur);
        }
        let (lease, ttl, sent, _) = grant(&self.client, &self.cfg).await?;
        let generation = self.next_generation.fetch_add(1, Ordering::Relaxed);
        let session = Session::new(generation, lease, ttl, sent, self.cfg.clock_drift);
        session.watch(self);
        *self.session.lock() = session.clone();
        tracing::info!(generation, "granted a new etcd lease after the old one ended");
        Ok(session)
    }

    /// The lease of `generation` is gone (revoked or expired on the server): its keys are gone
    /// too. (The core sends no release for a lost guard, so the table is cleaned here.)
    pub fn lease_ended(&self, generation: u64) {
        let session = self.current();
        if session.generation == generation {
            session.end();
        }
        self.holds.take(generation, LostReason::SessionEnded);
    }

    /// The holds of a lease that could not be kept alive in time are lost. The lease may still
    /// live on the server (we may only be cut off), so it is revoked in the background, which
    /// deletes every key under it; until then, or until it expires, the keys stay.
    pub(crate) fn give_up(&self, generation: u64) {
        let session = self.current();
        if session.generation == generation && session.end() {
            cleanup::spawn_revoke(
                &self.runtime,
                self.client.clone(),
                session.lease,
                session.ttl,
                self.cfg.conn.request_timeout,
            );
        }
        self.holds.take(generation, LostReason::DeadlinePassed);
    }

    /// Delete the key of a hold already out of the table, by name and create revision (never
    /// a later grant), if its lease may still be alive.
    pub fn delete_lost(&self, h: QueueHold) {
        let session = self.current();
        if session.generation == h.generation && !session.is_ended() {
            cleanup::spawn_delete(
                &self.runtime,
                self.client.clone(),
                h.name,
                h.fence,
                self.cfg.conn.request_timeout,
                session.life(),
            );
        }
    }

    /// Check that every hold of `generation` still has its key with its create revision (one
    /// transaction of reads per 100 holds); a hold whose key was deleted behind our back is
    /// lost. Run after each confirmed keep-alive: a hold taken with an explicit lease gets no
    /// renewals from the core's watchdog, so this is what notices a foreign delete.
    pub(crate) async fn verify(&self, generation: u64) {
        let holds: Vec<(HoldKey, String, i64)> = self
            .holds
            .each_of(generation, |k, h| (!h.is_lost()).then(|| (k.clone(), h.name.clone(), h.fence)));
        let mut kv = self.client.kv_client();
        for chunk in holds.chunks(100) {
            let ops: Vec<TxnOp> = chunk
                .iter()
                .map(|(_, n, _)| TxnOp::get(n.as_str(), Some(GetOptions::new().with_keys_only())))
                .collect();
            let Ok(resp) = bounded(self.cfg.conn.request_timeout, kv.txn(Txn::new().and_then(ops))).await
            else {
                return; // the keep-alive notices connection trouble on its own
            };
            for (op, (hk, name, fence)) in resp.op_responses().into_iter().zip(chunk) {
                let present = matches!(op, TxnOpResponse::Get(g) if g.kvs().iter().any(|k| k.create_revision() == *fence));
                if !present {
                    self.holds.lose(hk, name, LostReason::NotOwner);
                }
            }
        }
    }
}

impl Holder for Inner {
    fn holds(&self) -> &QueueHolds {
        &self.holds
    }

    /// The lease ends with it: later grants go on a new lease.
    fn give_up(&self, generation: u64) -> bool {
        Inner::give_up(self, generation);
        false
    }
}

impl Session {
    fn new(
        generation: u64,
        lease: i64,
        ttl: Duration,
        sent: Instant,
        clock_drift: (f64, Duration),
    ) -> Arc<Self> {
        Arc::new(Session {
            lease,
            generation,
            ttl,
            confirmed: Confirmed::new(sent),
            ended: Arc::new(AtomicBool::new(false)),
            over: watch::Sender::new(false),
            new_hold: Arc::new(Notify::new()),
            clock_drift,
            tasks: Mutex::default(),
        })
    }

    /// Start the keep-alive and the deadline keeper. Only once `inner` exists: a task that
    /// found its backend gone (a `Weak` not yet upgradable) would end for good.
    fn watch(&self, inner: &Arc<Inner>) {
        let watch = Watch {
            inner: Arc::downgrade(inner),
            generation: self.generation,
            lease: self.lease,
            ttl: self.ttl,
            client: inner.client.clone(),
            confirmed: self.confirmed.clone(),
            ended: self.ended.clone(),
        };
        // Every new hold wakes the deadline keeper (a stored wake-up if it comes before its
        // wait): a grant made close to the deadline must be given up at the deadline, not at
        // the next periodic look.
        let deadline = DeadlineKeeper {
            backend: Arc::downgrade(inner),
            generation: self.generation,
            confirmed: self.confirmed.clone(),
            ttl: self.ttl,
            clock_drift: self.clock_drift,
            idle: Idle::Notified(self.new_hold.clone()),
            what: "etcd lease not confirmed within its ttl",
        };
        let tasks = [
            inner.runtime.spawn(keep_alive(watch)).abort_handle(),
            inner.runtime.spawn(deadline.run()).abort_handle(),
        ];
        self.tasks.lock().extend(tasks);
    }
}
