//! The lease under every lock of an `EtcdLock`: granting it (and a new one once it ended), its
//! generation, the send time of its last confirmed keep-alive, and what the keep-alive's
//! failures mean for the holds taken on it (uncertain, held again, lost).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use etcd_client::{Client, GetOptions, Txn, TxnOp, TxnOpResponse};
use lock_core::backend::{Backoff, Mutex};
use lock_core::{LeaseSignal, LostReason, OwnerToken, Result};
use tokio::runtime::Handle;
use tokio::task::AbortHandle;
use tokio::time::Instant;

use crate::builder::Config;
use crate::cleanup;
use crate::error::{bounded, lease_gone, lock_error};

/// Shortest keep-alive period and idle re-check of the deadline keeper: a tiny TTL must not
/// turn either into a busy loop.
const MIN_PERIOD: Duration = Duration::from_millis(10);

/// One lease. Its generation tells its holds from those of an earlier lease.
pub(crate) struct Session {
    pub lease: i64,
    pub generation: u64,
    /// The TTL the server granted.
    pub ttl: Duration,
    /// Send time of the last keep-alive (or the grant) the server answered: the server expires
    /// the lease a TTL after it last renewed it, which is no earlier.
    confirmed: Arc<Mutex<Instant>>,
    /// The lease is gone (revoked, expired) or given up: the next acquisition grants a new one.
    ended: Arc<AtomicBool>,
    clock_drift: (f64, Duration),
    /// The keep-alive and the deadline keeper of this lease.
    tasks: Mutex<Vec<AbortHandle>>,
}

impl Drop for Session {
    fn drop(&mut self) {
        self.tasks.lock().drain(..).for_each(|h| h.abort());
    }
}

fn confirm(confirmed: &Mutex<Instant>, sent: Instant) {
    let mut c = confirmed.lock();
    if sent > *c {
        *c = sent;
    }
}

impl Session {
    pub fn is_ended(&self) -> bool {
        self.ended.load(Ordering::Acquire)
    }

    /// When the holds of this lease must be given up: a TTL after the last confirmed send, less
    /// the drift margin.
    /// Send time of the last confirmed keep-alive (or the grant).
    #[cfg(feature = "testing")]
    pub fn confirmed_at(&self) -> Instant {
        *self.confirmed.lock()
    }

    pub fn give_up_at(&self) -> Instant {
        give_up_at(&self.confirmed, self.ttl, self.clock_drift)
    }
}

fn give_up_at(confirmed: &Mutex<Instant>, ttl: Duration, (rate, floor): (f64, Duration)) -> Instant {
    *confirmed.lock() + ttl.saturating_sub(lock_core::drift_margin(ttl, rate, floor))
}

/// One held lock (reentrant holds of one owner share it).
pub(crate) struct Hold {
    /// The etcd key of the grant: `<prefix>/<key>/<lease>_<n>`.
    pub name: String,
    /// Its create revision: the fencing token, and what a delete compares.
    pub fence: i64,
    pub count: u32,
    pub generation: u64,
    /// The lost signal of every acquisition of this hold.
    pub signals: Vec<LeaseSignal>,
}

impl Hold {
    pub fn is_lost(&self) -> bool {
        self.signals.iter().any(LeaseSignal::is_lost)
    }
    pub fn mark_lost(&self, reason: LostReason) {
        self.signals.iter().for_each(|s| s.mark_lost(reason));
    }
    fn mark_uncertain(&self) {
        self.signals.iter().for_each(LeaseSignal::mark_uncertain);
    }
    fn mark_held(&self) {
        self.signals.iter().for_each(LeaseSignal::mark_held);
    }
}

pub(crate) type HoldKey = (String, OwnerToken);

/// Everything an `EtcdLock` and its clones share.
pub(crate) struct Inner {
    pub cfg: Config,
    pub client: Client,
    /// The cluster this client talks to (part of the identity).
    pub cluster_id: u64,
    session: Mutex<Arc<Session>>,
    regrant: tokio::sync::Mutex<()>,
    pub holds: Mutex<HashMap<HoldKey, Hold>>,
    next_generation: AtomicU64,
    /// Makes every attempt's key unique under the lease (several owners share one lease).
    pub nonce: AtomicU64,
    /// Predecessor-watch wake-ups of this client's waiters (tests count them: no herd effect).
    #[cfg(feature = "testing")]
    pub wakeups: AtomicU64,
    pub runtime: Handle,
}

impl Drop for Inner {
    /// The last handle is gone: revoke the lease, so its keys go now and not a TTL later
    /// (like closing a ZooKeeper session).
    fn drop(&mut self) {
        let session = self.session.lock().clone();
        if !session.is_ended() {
            let mut lease = self.client.lease_client();
            let id = session.lease;
            let timeout = self.cfg.request_timeout;
            self.runtime.spawn(async move {
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
    let resp = bounded(cfg.request_timeout, leases.grant(secs, None)).await.map_err(lock_error)?;
    let granted = Duration::from_secs(u64::try_from(resp.ttl()).unwrap_or(1).max(1));
    let cluster = resp.header().map_or(0, |h| h.cluster_id());
    Ok((resp.id(), granted, sent, cluster))
}

impl Inner {
    /// Grant the first lease and start keeping it alive.
    pub async fn start(cfg: Config, client: Client, runtime: Handle) -> Result<Arc<Inner>> {
        let (lease, ttl, sent, cluster_id) = grant(&client, &cfg).await?;
        let session = Session::new(0, lease, ttl, sent, cfg.clock_drift);
        let inner = Arc::new(Inner {
            cfg,
            client,
            cluster_id,
            session: Mutex::new(session.clone()),
            regrant: tokio::sync::Mutex::new(()),
            holds: Mutex::default(),
            next_generation: AtomicU64::new(1),
            nonce: AtomicU64::new(0),
            #[cfg(feature = "testing")]
            wakeups: AtomicU64::new(0),
            runtime,
        });
        session.watch(&inner);
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

    fn for_holds(&self, generation: u64, f: impl Fn(&Hold)) {
        self.holds.lock().values().filter(|h| h.generation == generation).for_each(f);
    }

    fn has_holds(&self, generation: u64) -> bool {
        self.holds.lock().values().any(|h| h.generation == generation)
    }

    /// Take every hold of `generation` out of the table, telling each of its guards.
    fn take_holds(&self, generation: u64, reason: LostReason) {
        let taken: Vec<Hold> = {
            let mut holds = self.holds.lock();
            let keys: Vec<HoldKey> =
                holds.iter().filter(|(_, h)| h.generation == generation).map(|(k, _)| k.clone()).collect();
            keys.iter().filter_map(|k| holds.remove(k)).collect()
        };
        // Outside the table's lock: a guard woken by the loss finds the table clean.
        taken.iter().for_each(|h| h.mark_lost(reason));
    }

    /// The lease of `generation` is gone (revoked or expired on the server): its keys are gone
    /// too. (The core sends no release for a lost guard, so the table is cleaned here.)
    pub fn lease_ended(&self, generation: u64) {
        let session = self.current();
        if session.generation == generation {
            session.ended.store(true, Ordering::Release);
        }
        self.take_holds(generation, LostReason::SessionEnded);
    }

    /// The holds of a lease that could not be kept alive in time are lost. The lease may still
    /// live on the server (we may only be cut off), so it is revoked in the background, which
    /// deletes every key under it; until then, or until it expires, the keys stay.
    fn give_up(&self, generation: u64) {
        let session = self.current();
        if session.generation == generation && !session.ended.swap(true, Ordering::AcqRel) {
            cleanup::spawn_revoke(
                &self.runtime,
                self.client.clone(),
                session.lease,
                session.ttl,
                self.cfg.request_timeout,
            );
        }
        self.take_holds(generation, LostReason::DeadlinePassed);
    }

    /// Delete the key of a hold already out of the table, by name and create revision (never
    /// a later grant), if its lease may still be alive.
    pub fn delete_lost(&self, h: Hold) {
        let session = self.current();
        if session.generation == h.generation && !session.is_ended() {
            cleanup::spawn_delete(
                &self.runtime,
                self.client.clone(),
                h.name,
                h.fence,
                self.cfg.request_timeout,
            );
        }
    }

    /// Check that every hold of `generation` still has its key with its create revision (one
    /// transaction of reads per 100 holds); a hold whose key was deleted behind our back is
    /// lost. Run after each confirmed keep-alive: a hold taken with an explicit lease gets no
    /// renewals from the core's watchdog, so this is what notices a foreign delete.
    async fn verify(&self, generation: u64) {
        let holds: Vec<(HoldKey, String, i64)> = self
            .holds
            .lock()
            .iter()
            .filter(|(_, h)| h.generation == generation && !h.is_lost())
            .map(|(k, h)| (k.clone(), h.name.clone(), h.fence))
            .collect();
        let mut kv = self.client.kv_client();
        for chunk in holds.chunks(100) {
            let ops: Vec<TxnOp> = chunk
                .iter()
                .map(|(_, n, _)| TxnOp::get(n.as_str(), Some(GetOptions::new().with_keys_only())))
                .collect();
            let Ok(resp) = bounded(self.cfg.request_timeout, kv.txn(Txn::new().and_then(ops))).await else {
                return; // the keep-alive notices connection trouble on its own
            };
            for (op, (hk, name, fence)) in resp.op_responses().into_iter().zip(chunk) {
                let present = matches!(op, TxnOpResponse::Get(g) if g.kvs().iter().any(|k| k.create_revision() == *fence));
                if !present {
                    self.lose(hk, name, LostReason::NotOwner);
                }
            }
        }
    }

    /// The hold `(key, owner)` with key `name` is lost: out of the table first (no release
    /// follows), then every guard is told. A later grant to the same owner has another name and
    /// is left alone.
    pub fn lose(&self, hk: &HoldKey, name: &str, reason: LostReason) {
        let hold = {
            let mut holds = self.holds.lock();
            if holds.get(hk).is_some_and(|h| h.name == name) { holds.remove(hk) } else { None }
        };
        if let Some(h) = hold {
            h.mark_lost(reason);
        }
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
            confirmed: Arc::new(Mutex::new(sent)),
            ended: Arc::new(AtomicBool::new(false)),
            clock_drift,
            tasks: Mutex::default(),
        })
    }

    /// Start the keep-alive and the deadline keeper. Only once `inner` exists: a task that
    /// found its backend gone (a `Weak` not yet upgradable) would end for good.
    fn watch(&self, inner: &Arc<Inner>) {
        let watch = || Watch {
            inner: Arc::downgrade(inner),
            generation: self.generation,
            lease: self.lease,
            ttl: self.ttl,
            client: inner.client.clone(),
            confirmed: self.confirmed.clone(),
            ended: self.ended.clone(),
            clock_drift: self.clock_drift,
        };
        let tasks = [
            inner.runtime.spawn(keep_alive(watch())).abort_handle(),
            inner.runtime.spawn(keep_deadline(watch())).abort_handle(),
        ];
        self.tasks.lock().extend(tasks);
    }
}

/// What the lease's tasks need: the backend (weakly) and the lease they keep.
struct Watch {
    inner: Weak<Inner>,
    generation: u64,
    lease: i64,
    ttl: Duration,
    client: Client,
    confirmed: Arc<Mutex<Instant>>,
    ended: Arc<AtomicBool>,
    clock_drift: (f64, Duration),
}

impl Watch {
    async fn confirmed(&self, sent: Instant) {
        confirm(&self.confirmed, sent);
        if let Some(inner) = self.inner.upgrade() {
            inner.for_holds(self.generation, Hold::mark_held);
            // Bounded by the keep-alive period, so that the next keep-alive is never late.
            if inner.has_holds(self.generation) {
                let _ = tokio::time::timeout(self.ttl / 3, inner.verify(self.generation)).await;
            }
        }
    }

    fn failed(&self, why: &dyn std::fmt::Display) {
        tracing::debug!(generation = self.generation, error = %why, "etcd lease keep-alive failed; locks uncertain");
        if let Some(inner) = self.inner.upgrade() {
            inner.for_holds(self.generation, Hold::mark_uncertain);
        }
    }

    fn gone(&self) {
        tracing::warn!(generation = self.generation, "etcd lease revoked or expired; its locks are lost");
        if let Some(inner) = self.inner.upgrade() {
            inner.lease_ended(self.generation);
        }
    }
}

/// Keep the lease alive: one keep-alive every third of the TTL on one stream, each answer
/// awaited at most a sixth of the TTL (so a frozen server shows as uncertain at most half a TTL
/// after the last answer, well before the deadline makes it lost). A failure makes the holds uncertain at once and opens a
/// new stream (whose first answer is unambiguous: a late answer on the old stream could not
/// be told from the answer to a later request). An answer with TTL 0 means the lease is gone.
async fn keep_alive(w: Watch) {
    let period = (w.ttl / 3).max(MIN_PERIOD);
    let answer = (w.ttl / 6).max(MIN_PERIOD);
    let mut lease = w.client.lease_client();
    let mut backoff = Backoff::new(MIN_PERIOD, period);
    loop {
        if w.ended.load(Ordering::Acquire) {
            return;
        }
        let sent = Instant::now();
        let (mut keeper, mut stream) = match tokio::time::timeout(answer, lease.keep_alive(w.lease)).await {
            Ok(Ok(opened)) => opened,
            Ok(Err(e)) if lease_gone(&e) => return w.gone(),
            Ok(Err(e)) => {
                w.failed(&e);
                tokio::time::sleep(backoff.next_delay()).await;
                continue;
            }
            Err(_) => {
                w.failed(&"no answer within a sixth of the ttl");
                continue;
            }
        };
        w.confirmed(sent).await;
        backoff = Backoff::new(MIN_PERIOD, period);
        loop {
            tokio::time::sleep(period).await;
            // Given up (its holds were told lost): keeping it alive would keep its keys, and
            // with them the locks, for as long as this client lives.
            if w.ended.load(Ordering::Acquire) {
                return;
            }
            let sent = Instant::now();
            if let Err(e) = keeper.keep_alive().await {
                w.failed(&e);
                break;
            }
            match tokio::time::timeout(answer, stream.message()).await {
                Ok(Ok(Some(r))) if r.ttl() > 0 => w.confirmed(sent).await,
                Ok(Ok(Some(_))) => return w.gone(),
                Ok(Ok(None)) => {
                    w.failed(&"keep-alive stream closed");
                    break;
                }
                Ok(Err(e)) => {
                    w.failed(&e);
                    break;
                }
                Err(_) => {
                    w.failed(&"no answer within a sixth of the ttl");
                    break;
                }
            }
        }
    }
}

/// When nothing has been confirmed for a TTL less the drift margin (disconnected, server
/// paused, partitioned), give the holds of the lease up: the server may expire it from then on
/// and let another client in. Its own task on its own timer, so that a keep-alive awaiting an
/// answer cannot delay it.
async fn keep_deadline(w: Watch) {
    let idle = (w.ttl / 3).max(MIN_PERIOD);
    loop {
        let at = give_up_at(&w.confirmed, w.ttl, w.clock_drift);
        {
            let Some(inner) = w.inner.upgrade() else { return };
            if !inner.has_holds(w.generation) {
                drop(inner);
                // A grant checks the deadline itself, so an idle re-check is enough here.
                tokio::time::sleep(idle).await;
                continue;
            }
            if Instant::now() >= at {
                tracing::warn!(
                    generation = w.generation,
                    "etcd lease not confirmed within its ttl; locks given up"
                );
                inner.give_up(w.generation);
                return;
            }
        }
        // Confirmations only move the deadline later: recompute it on waking.
        tokio::time::sleep_until(at).await;
    }
}
