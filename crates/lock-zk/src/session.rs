//! The session under every lock of a `ZkLock`: opening it (and a new one once it ended), its
//! generation, the send time of its last confirmed request, and what its state changes mean
//! for the holds taken on it (uncertain, held again, lost).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use lock_core::backend::Mutex;
use lock_core::backend::queue::{
    Confirmed, DeadlineKeeper, HoldKey, Holder, Idle, QueueHold, QueueHolds, span,
};
use lock_core::{LeaseSignal, LockError, LostReason, Result};
use tokio::runtime::Handle;
use tokio::task::AbortHandle;
use tokio::time::Instant;
use zookeeper_client as zk;

use crate::cleanup;
use crate::config::Config;
use crate::encode_key;
use crate::error::{NAME, SessionEnded, lock_error, session_ended};

/// Shortest heartbeat period and idle re-check of the deadline keeper: a tiny negotiated
/// timeout must not turn either into a busy loop.
const MIN_PERIOD: Duration = Duration::from_millis(10);

/// One ZooKeeper session. Its generation tells its holds from those of an earlier session.
pub(crate) struct Session {
    pub client: zk::Client,
    pub generation: u64,
    /// The state monitor and the deadline keeper of this session.
    tasks: Mutex<Vec<AbortHandle>>,
    /// Send time of the last request the server answered in this session: the server expires
    /// the session a session timeout after it last heard from us, which is no earlier.
    confirmed: Confirmed,
}

impl Drop for Session {
    fn drop(&mut self) {
        self.tasks.lock().drain(..).for_each(|h| h.abort());
    }
}

/// Everything a `ZkLock` and its clones share.
pub(crate) struct Inner {
    pub cfg: Config,
    acls: Vec<zk::Acl>,
    session: Mutex<Arc<Session>>,
    reconnect: tokio::sync::Mutex<()>,
    pub holds: QueueHolds,
    next_generation: AtomicU64,
    /// Predecessor-watch events received (tests count them to show there is no herd effect).
    #[cfg(feature = "testing")]
    pub wakeups: AtomicU64,
    pub runtime: Handle,
}

pub(crate) async fn open_client(cfg: &Config, connect: &str) -> Result<zk::Client> {
    let mut c = zk::Client::connector().with_session_timeout(cfg.session_timeout).with_fail_eagerly();
    if let Some(t) = cfg.connection_timeout {
        c = c.with_connection_timeout(t);
    }
    if let Some((user, pw)) = &cfg.auth {
        c = c.with_auth("digest", format!("{user}:{pw}").as_bytes());
    }
    #[cfg(feature = "tls")]
    if let Some(ca) = &cfg.tls_ca {
        let client = c.with_tls(crate::tls::options(ca)?).secure_connect(connect).await;
        return match client {
            Ok(client) => {
                crate::nodelay::apply(connect).await;
                Ok(client)
            }
            Err(e) if crate::tls::may_be_refused(&e) => {
                Err(crate::tls::diagnose(connect, ca).await.unwrap_or_else(|| lock_error(e)))
            }
            Err(e) => Err(lock_error(e)),
        };
    }
    let client = match c.connect(connect).await {
        Ok(client) => client,
        #[cfg(feature = "tls")]
        Err(e) if crate::tls::may_be_refused(&e) => {
            return Err(crate::tls::diagnose_plaintext(connect).await.unwrap_or_else(|| lock_error(e)));
        }
        Err(e) => return Err(lock_error(e)),
    };
    crate::nodelay::apply(connect).await;
    Ok(client)
}

impl Session {
    fn new(generation: u64, client: zk::Client, opened: Instant) -> Arc<Session> {
        Arc::new(Session { client, generation, tasks: Mutex::default(), confirmed: Confirmed::new(opened) })
    }

    pub fn confirm(&self, sent: Instant) {
        self.confirmed.confirm(sent);
    }

    /// A hold with `signal` was taken in this session: its guards read it lost by themselves a
    /// session timeout (less the drift margin for `clock_drift`) after the last confirmed send,
    /// when the deadline keeper gives it up.
    pub fn held(&self, signal: &LeaseSignal, clock_drift: (f64, Duration)) {
        signal.kept_by(&self.confirmed, span(self.client.session_timeout(), clock_drift));
    }

    /// Start the monitor and the deadline keeper. Only once `inner` exists: a task that found
    /// its backend gone (a `Weak` not yet upgradable) would end for good.
    fn watch(&self, inner: &Arc<Inner>) {
        let watch = Watch {
            inner: Arc::downgrade(inner),
            generation: self.generation,
            client: self.client.clone(),
            confirmed: self.confirmed.clone(),
        };
        let timeout = self.client.session_timeout();
        // A hold is granted with the send time of its last request confirmed, so its deadline
        // is at least a session timeout less the margin away, far beyond an idle look.
        let deadline = DeadlineKeeper {
            backend: Arc::downgrade(inner),
            generation: self.generation,
            confirmed: self.confirmed.clone(),
            ttl: timeout,
            clock_drift: inner.cfg.clock_drift,
            idle: Idle::Every((timeout / 3).max(MIN_PERIOD)),
            what: "nothing confirmed within the session timeout",
        };
        let tasks = [
            inner.runtime.spawn(monitor(watch, self.client.state_watcher())).abort_handle(),
            inner.runtime.spawn(deadline.run()).abort_handle(),
        ];
        self.tasks.lock().extend(tasks);
    }
}

/// What the session monitor needs: the backend (weakly) and the session it watches.
struct Watch {
    inner: Weak<Inner>,
    generation: u64,
    client: zk::Client,
    confirmed: Confirmed,
}

impl Watch {
    /// While this session holds locks: one request per third of the session timeout, so the
    /// confirmation is recent; an unanswered one makes the holds uncertain.
    async fn heartbeat(&self, inner: &Inner, period: Duration) {
        if !inner.holds.has(self.generation) {
            return;
        }
        let sent = Instant::now();
        let root = if inner.cfg.root.is_empty() { "/" } else { inner.cfg.root.as_str() };
        match tokio::time::timeout(period, self.client.check_stat(root)).await {
            Ok(Ok(_)) => {
                self.confirmed.confirm(sent);
                inner.holds.each(self.generation, QueueHold::mark_held);
            }
            Ok(Err(e)) if session_ended(&e) => inner.end_session(self.generation),
            _ => inner.holds.each(self.generation, QueueHold::mark_uncertain),
        }
    }
}

/// Follow the session: Disconnected makes every hold of the session uncertain (Curator's
/// SUSPENDED), a reconnect re-checks the nodes, a terminal state loses them all. While locks are
/// held, a heartbeat request every third of the session timeout keeps the time of the last
/// confirmed *send* recent (the `DeadlineKeeper` gives the holds up when it gets too old).
async fn monitor(w: Watch, mut states: zk::StateWatcher) {
    let mut state = states.peek_state();
    let period = (w.client.session_timeout() / 3).max(MIN_PERIOD);
    let mut tick = tokio::time::interval(period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            next = states.changed() => {
                state = next;
                let Some(inner) = w.inner.upgrade() else { return };
                match state {
                    zk::SessionState::Disconnected => {
                        tracing::debug!(generation = w.generation, "zookeeper session disconnected; locks uncertain");
                        inner.holds.each(w.generation, QueueHold::mark_uncertain);
                    }
                    zk::SessionState::SyncConnected | zk::SessionState::ConnectedReadOnly => {
                        inner.verify(w.generation).await;
                        // The client reconnected by itself: a new socket, with Nagle's algorithm
                        // on. After the holds are confirmed, which must not wait on it.
                        if inner.cfg.user_client.is_none() {
                            crate::nodelay::apply(&inner.cfg.connect).await;
                        }
                    }
                    s if s.is_terminated() => {
                        tracing::warn!(generation = w.generation, state = ?s, "zookeeper session ended; its locks are lost");
                        inner.end_session(w.generation);
                        return;
                    }
                    _ => {}
                }
            }
            _ = tick.tick() => {
                let Some(inner) = w.inner.upgrade() else { return };
                if !matches!(state, zk::SessionState::Disconnected) {
                    w.heartbeat(&inner, period).await;
                }
            }
        }
    }
}

impl Inner {
    /// The shared state over a first session, opened at `opened`; its tasks start at once.
    pub fn start(
        cfg: Config,
        acls: Vec<zk::Acl>,
        runtime: Handle,
        client: zk::Client,
        opened: Instant,
    ) -> Arc<Inner> {
        let session = Session::new(0, client, opened);
        let inner = Arc::new(Inner {
            cfg,
            acls,
            session: Mutex::new(session.clone()),
            reconnect: tokio::sync::Mutex::new(()),
            holds: QueueHolds::default(),
            next_generation: AtomicU64::new(1),
            #[cfg(feature = "testing")]
            wakeups: AtomicU64::new(0),
            runtime,
        });
        session.watch(&inner);
        inner
    }

    pub fn current(&self) -> Arc<Session> {
        self.session.lock().clone()
    }

    /// The current session, or a new one if it ended (its holds are reported lost first).
    pub async fn session(self: &Arc<Self>) -> Result<Arc<Session>> {
        let cur = self.current();
        if !cur.client.state().is_terminated() {
            return Ok(cur);
        }
        let _one = self.reconnect.lock().await;
        let cur = self.current();
        if !cur.client.state().is_terminated() {
            return Ok(cur);
        }
        self.end_session(cur.generation);
        if self.cfg.user_client.is_some() {
            // The caller's client: its session is theirs to re-create, not ours.
            return Err(LockError::permanent(NAME, SessionEnded { state: cur.client.state() }));
        }
        let opened = Instant::now();
        let client = open_client(&self.cfg, &self.cfg.connect).await?;
        let generation = self.next_generation.fetch_add(1, Ordering::Relaxed);
        let session = Session::new(generation, client, opened);
        session.watch(self);
        *self.session.lock() = session.clone();
        tracing::info!(generation, "opened a new zookeeper session after the old one ended");
        Ok(session)
    }

    /// The lock directory of `key`: `<root>/<encode_key(key)>`.
    pub fn dir(&self, key: &str) -> String {
        format!("{}/{}", self.cfg.root, encode_key(key))
    }

    pub fn acls(&self) -> zk::Acls<'_> {
        zk::Acls::new(&self.acls)
    }

    /// The session ended: its nodes are gone with it. (The core sends no release for a lost
    /// guard, so the table is cleaned here.)
    fn end_session(&self, generation: u64) {
        self.holds.take(generation, LostReason::SessionEnded);
    }

    /// The holds of a session that could not be confirmed in time are lost; their nodes may
    /// still exist (the session may yet be alive), so they are deleted in the background, and
    /// the lock is free for others as soon as the server hears from us again or expires us.
    fn give_up(&self, generation: u64) {
        for h in self.holds.take(generation, LostReason::DeadlinePassed) {
            self.delete_lost(h);
        }
    }

    /// Delete the node of a hold already out of the table, by its exact path (never a later
    /// grant), if its session may still be alive.
    pub fn delete_lost(&self, mut h: QueueHold) {
        h.stop_watch();
        let session = self.current();
        if session.generation == h.generation && !session.client.state().is_terminated() {
            cleanup::spawn_delete(&self.runtime, session.client.clone(), h.name);
        }
    }

    /// After a reconnect: confirm each hold's node still exists and is ours.
    async fn verify(&self, generation: u64) {
        let session = self.current();
        if session.generation != generation {
            return;
        }
        let holds: Vec<(HoldKey, String, Vec<LeaseSignal>)> = self.holds.each_of(generation, |k, h| {
            (!h.is_lost()).then(|| (k.clone(), h.name.clone(), h.signals.clone()))
        });
        let sid = session.client.session_id().0;
        // Requests are sent when called: issue them all, then collect the answers.
        let sent = Instant::now();
        let checks: Vec<_> = holds.iter().map(|(_, path, _)| session.client.check_stat(path)).collect();
        for ((hk, path, signals), check) in holds.iter().zip(checks) {
            match check.await {
                Ok(Some(stat)) if stat.ephemeral_owner == sid => {
                    session.confirm(sent);
                    signals.iter().for_each(LeaseSignal::mark_held);
                }
                Ok(_) => self.holds.lose(hk, path, LostReason::NotOwner),
                Err(e) => tracing::debug!(error = %e, "could not re-check a lock node after reconnect"),
            }
        }
    }
}

impl Holder for Inner {
    fn holds(&self) -> &QueueHolds {
        &self.holds
    }

    /// The session may go on (it may only be cut off): later grants on it get a deadline anew.
    fn give_up(&self, generation: u64) -> bool {
        Inner::give_up(self, generation);
        true
    }
}
