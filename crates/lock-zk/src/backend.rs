//! The lock recipe: ephemeral sequential nodes, predecessor watches, one session per client.

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use lock_core::{
    AcquireRequest, Attempt, Capability, FencingToken, Grant, LeaseSignal, LockBackend, LockError, LockInfo,
    LostReason, OwnerToken, RenewItem, Result, Subscription, async_trait,
};
use tokio::runtime::Handle;
use tokio::task::AbortHandle;
use tokio::time::Instant;
use zookeeper_client as zk;

use crate::builder::{Config, ZkLockBuilder};
use crate::encode_key;
use crate::error::{NAME, is_temporary, lock_error, outcome_unknown, session_ended, temporary};

/// Curator's lock-node name between the `_c_<uuid>-` protection prefix and the sequence.
const LOCK_NAME: &str = "lock-";
/// First and longest pause between retries of a background delete.
const RETRY_MIN: Duration = Duration::from_millis(20);
const RETRY_MAX: Duration = Duration::from_secs(1);
/// How often a create under a just-reaped lock directory (or one whose reply was lost) is retried.
const DIR_RETRIES: usize = 5;

/// ZooKeeper locks: one `EPHEMERAL_SEQUENTIAL` node per acquisition under
/// `<root>/<encoded key>/`, lowest sequence holds, each waiter watches only its predecessor.
///
/// One ZooKeeper session is shared by every lock taken through this value and its clones;
/// the session *is* the lease (see the crate docs). If the session expires, every lock taken
/// on it is reported lost and the next acquisition opens a new session.
#[derive(Clone)]
pub struct ZkLock {
    inner: Arc<Inner>,
}

struct Session {
    client: zk::Client,
    generation: u64,
    /// The state monitor and the deadline keeper of this session.
    tasks: Mutex<Vec<AbortHandle>>,
    /// Send time of the last request the server answered in this session: the server expires
    /// the session a session timeout after it last heard from us, which is no earlier.
    confirmed: Arc<Mutex<Instant>>,
}

impl Session {
    fn confirm(&self, sent: Instant) {
        confirm(&self.confirmed, sent);
    }
}

fn confirm(confirmed: &Mutex<Instant>, sent: Instant) {
    let mut c = lock(confirmed);
    if sent > *c {
        *c = sent;
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        lock(&self.tasks).drain(..).for_each(|h| h.abort());
    }
}

/// One held lock (reentrant holds of one owner share it).
struct Hold {
    path: String,
    fence: u64,
    count: u32,
    generation: u64,
    /// The lost signal of every acquisition of this hold: nested ones taken through another
    /// `Locker` come with their own, and each must hear of a loss.
    signals: Vec<LeaseSignal>,
    watch: Option<AbortHandle>,
}

impl Hold {
    fn is_lost(&self) -> bool {
        self.signals.iter().any(LeaseSignal::is_lost)
    }
    fn mark_lost(&self, reason: LostReason) {
        self.signals.iter().for_each(|s| s.mark_lost(reason));
    }
    fn mark_uncertain(&self) {
        self.signals.iter().for_each(LeaseSignal::mark_uncertain);
    }
    fn mark_held(&self) {
        self.signals.iter().for_each(LeaseSignal::mark_held);
    }
}

type HoldKey = (String, OwnerToken);

struct Inner {
    cfg: Config,
    acls: Vec<zk::Acl>,
    session: Mutex<Arc<Session>>,
    reconnect: tokio::sync::Mutex<()>,
    holds: Mutex<HashMap<HoldKey, Hold>>,
    next_generation: AtomicU64,
    wakeups: AtomicU64,
    runtime: Handle,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Every critical section is a plain map/option update, so a poisoned value is consistent.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl fmt::Debug for ZkLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = self.inner.current();
        f.debug_struct("ZkLock")
            .field("config", &self.inner.cfg)
            .field("session", &format_args!("{:#x}", s.client.session_id().0))
            .field("state", &s.client.state())
            .field("holds", &lock(&self.inner.holds).len())
            .finish()
    }
}

async fn open_client(cfg: &Config, connect: &str) -> Result<zk::Client> {
    let mut c = zk::Client::connector().with_session_timeout(cfg.session_timeout).with_fail_eagerly();
    if let Some(t) = cfg.connection_timeout {
        c = c.with_connection_timeout(t);
    }
    if let Some((user, pw)) = &cfg.auth {
        c = c.with_auth("digest", format!("{user}:{pw}").as_bytes());
    }
    c.connect(connect).await.map_err(lock_error)
}

impl ZkLock {
    /// Start configuring a ZooKeeper lock client.
    pub fn builder() -> ZkLockBuilder {
        ZkLockBuilder::default()
    }

    pub(crate) async fn connect(cfg: Config) -> Result<ZkLock> {
        let runtime = Handle::try_current()
            .map_err(|_| LockError::InvalidConfig { reason: "ZkLock needs a tokio runtime".to_owned() })?;
        let acls = match cfg.auth {
            Some(_) => vec![
                zk::Acl::new(zk::Permission::ALL, zk::AuthId::authed()),
                zk::Acl::new(zk::Permission::READ, zk::AuthId::anyone()),
            ],
            None => vec![zk::Acl::new(zk::Permission::ALL, zk::AuthId::anyone())],
        };
        let opened = Instant::now();
        let client = open_client(&cfg, &cfg.connect).await?;
        if !cfg.root.is_empty() {
            let opts = zk::CreateMode::Persistent.with_acls(zk::Acls::new(&acls));
            match client.mkdir(&cfg.root, &opts).await {
                Err(zk::Error::NoNode) if cfg.chroot().is_some() && !cfg.create_chroot => {
                    let (_, chroot) = cfg.chroot().unwrap_or_default();
                    return Err(LockError::InvalidConfig {
                        reason: format!(
                            "zookeeper chroot {chroot:?} does not exist: create it, or set create_chroot \
                             (builder) / ?create_chroot=true (url)"
                        ),
                    });
                }
                Err(zk::Error::NoNode) if cfg.chroot().is_some() => {
                    // The chroot itself is missing: create it through a session without it.
                    let (hosts, chroot) = cfg.chroot().unwrap_or_default();
                    let plain = open_client(&cfg, hosts).await?;
                    plain.mkdir(chroot, &opts).await.map_err(lock_error)?;
                    drop(plain);
                    client.mkdir(&cfg.root, &opts).await.map_err(lock_error)?;
                }
                // The root may exist with an ACL that lets us create lock directories but not
                // siblings of the root: ZooKeeper checks CREATE on the parent before existence.
                Err(zk::Error::NoAuth) if client.check_stat(&cfg.root).await.is_ok_and(|s| s.is_some()) => {}
                r => r.map_err(lock_error)?,
            }
        }
        let session = Session::new(0, client, opened);
        let inner = Arc::new(Inner {
            cfg,
            acls,
            session: Mutex::new(session.clone()),
            reconnect: tokio::sync::Mutex::new(()),
            holds: Mutex::default(),
            next_generation: AtomicU64::new(1),
            wakeups: AtomicU64::new(0),
            runtime,
        });
        session.watch(&inner);
        Ok(ZkLock { inner })
    }

    /// The client of the current session (for diagnostics and tests; do not close it).
    pub fn client(&self) -> zk::Client {
        self.inner.current().client.clone()
    }

    /// Id of the current ZooKeeper session: the `ephemeralOwner` of this client's lock nodes.
    pub fn session_id(&self) -> i64 {
        self.inner.current().client.session_id().0
    }

    /// The session timeout the server negotiated.
    pub fn session_timeout(&self) -> Duration {
        self.inner.current().client.session_timeout()
    }

    /// The lock directory of `key`: `<root>/<encode_key(key)>` (inside the chroot).
    pub fn lock_dir(&self, key: &str) -> String {
        self.inner.dir(key)
    }

    /// How many predecessor-watch events this client's waiters received (each one wakes one
    /// waiter; with no herd effect, one release causes at most one).
    pub fn watch_wakeups(&self) -> u64 {
        self.inner.wakeups.load(Ordering::Relaxed)
    }

    /// Number of locks currently held through this client (reentrant holds count once).
    pub fn held_count(&self) -> usize {
        lock(&self.inner.holds).len()
    }
}

impl Session {
    fn new(generation: u64, client: zk::Client, opened: Instant) -> Arc<Session> {
        let confirmed = Arc::new(Mutex::new(opened));
        Arc::new(Session { client, generation, tasks: Mutex::default(), confirmed })
    }

    /// Start the monitor and the deadline keeper. Only once `inner` exists: a task that found
    /// its backend gone (a `Weak` not yet upgradable) would end for good.
    fn watch(&self, inner: &Arc<Inner>) {
        let watch = || Watch {
            inner: Arc::downgrade(inner),
            generation: self.generation,
            client: self.client.clone(),
            confirmed: self.confirmed.clone(),
            clock_drift: inner.cfg.clock_drift,
        };
        let tasks = [
            inner.runtime.spawn(monitor(watch(), self.client.state_watcher())).abort_handle(),
            inner.runtime.spawn(keep_deadline(watch())).abort_handle(),
        ];
        lock(&self.tasks).extend(tasks);
    }
}

/// What the session monitor needs: the backend (weakly) and the session it watches.
struct Watch {
    inner: Weak<Inner>,
    generation: u64,
    client: zk::Client,
    confirmed: Arc<Mutex<Instant>>,
    clock_drift: (f64, Duration),
}

impl Watch {
    /// When the holds of this session must be given up: a session timeout after the last
    /// confirmed send, less the core's drift margin.
    fn give_up_at(&self) -> Instant {
        let timeout = self.client.session_timeout();
        let (rate, floor) = self.clock_drift;
        *lock(&self.confirmed) + timeout.saturating_sub(lock_core::drift_margin(timeout, rate, floor))
    }

    /// While this session holds locks: one request per third of the session timeout, so the
    /// confirmation is recent; an unanswered one makes the holds uncertain.
    async fn heartbeat(&self, inner: &Inner, period: Duration) {
        if !inner.has_holds(self.generation) {
            return;
        }
        let sent = Instant::now();
        let root = if inner.cfg.root.is_empty() { "/" } else { inner.cfg.root.as_str() };
        match tokio::time::timeout(period, self.client.check_stat(root)).await {
            Ok(Ok(_)) => {
                confirm(&self.confirmed, sent);
                inner.for_holds(self.generation, Hold::mark_held);
            }
            Ok(Err(e)) if session_ended(&e) => inner.end_session(self.generation),
            _ => inner.for_holds(self.generation, Hold::mark_uncertain),
        }
    }
}

/// Follow the session: Disconnected makes every hold of the session uncertain (Curator's
/// SUSPENDED), a reconnect re-checks the nodes, a terminal state loses them all. While locks are
/// held, a heartbeat request every third of the session timeout keeps the time of the last
/// confirmed *send* recent ([`keep_deadline`] gives the holds up when it gets too old).
async fn monitor(w: Watch, mut states: zk::StateWatcher) {
    let mut state = states.peek_state();
    let period = (w.client.session_timeout() / 3).max(Duration::from_millis(10));
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
                        inner.for_holds(w.generation, Hold::mark_uncertain);
                    }
                    zk::SessionState::SyncConnected | zk::SessionState::ConnectedReadOnly => {
                        inner.verify(w.generation).await;
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

/// When nothing has been confirmed for a session timeout less the drift margin (disconnected,
/// server paused, partitioned), give the holds of the session up: the server may expire the
/// session from then on and let another client in. Its own task on its own timer, so that
/// neither the tick of the heartbeat nor a request the monitor awaits can delay it.
async fn keep_deadline(w: Watch) {
    let idle = (w.client.session_timeout() / 3).max(Duration::from_millis(10));
    loop {
        let at = w.give_up_at();
        {
            let Some(inner) = w.inner.upgrade() else { return };
            if !inner.has_holds(w.generation) {
                drop(inner);
                // A hold is granted with the send time of its last request confirmed, so its
                // deadline is at least a session timeout less the margin away, far beyond this.
                tokio::time::sleep(idle).await;
                continue;
            }
            if Instant::now() >= at {
                tracing::warn!(
                    generation = w.generation,
                    "nothing confirmed within the session timeout; locks given up"
                );
                inner.give_up(w.generation);
                continue;
            }
        }
        // Confirmations only move the deadline later: recompute it on waking.
        tokio::time::sleep_until(at).await;
    }
}

impl Inner {
    fn current(&self) -> Arc<Session> {
        lock(&self.session).clone()
    }

    /// The current session, or a new one if it ended (its holds are reported lost first).
    async fn session(self: &Arc<Self>) -> Result<Arc<Session>> {
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
        let opened = Instant::now();
        let client = open_client(&self.cfg, &self.cfg.connect).await?;
        let generation = self.next_generation.fetch_add(1, Ordering::Relaxed);
        let session = Session::new(generation, client, opened);
        session.watch(self);
        *lock(&self.session) = session.clone();
        tracing::info!(generation, "opened a new zookeeper session after the old one ended");
        Ok(session)
    }

    fn dir(&self, key: &str) -> String {
        format!("{}/{}", self.cfg.root, encode_key(key))
    }

    fn acls(&self) -> zk::Acls<'_> {
        zk::Acls::new(&self.acls)
    }

    fn for_holds(&self, generation: u64, f: impl Fn(&Hold)) {
        lock(&self.holds).values().filter(|h| h.generation == generation).for_each(f);
    }

    fn has_holds(&self, generation: u64) -> bool {
        lock(&self.holds).values().any(|h| h.generation == generation)
    }

    /// Take every hold of `generation` out of the table, telling each of its guards.
    fn take_holds(&self, generation: u64, reason: LostReason) -> Vec<Hold> {
        let mut holds = lock(&self.holds);
        let keys: Vec<HoldKey> =
            holds.iter().filter(|(_, h)| h.generation == generation).map(|(k, _)| k.clone()).collect();
        keys.iter()
            .filter_map(|k| holds.remove(k))
            .inspect(|h| {
                if let Some(w) = &h.watch {
                    w.abort();
                }
                h.mark_lost(reason);
            })
            .collect()
    }

    /// The session ended: its nodes are gone with it. (The core sends no release for a lost
    /// guard, so the table is cleaned here.)
    fn end_session(&self, generation: u64) {
        self.take_holds(generation, LostReason::SessionEnded);
    }

    /// The holds of a session that could not be confirmed in time are lost; their nodes may
    /// still exist (the session may yet be alive), so they are deleted in the background, and
    /// the lock is free for others as soon as the server hears from us again or expires us.
    fn give_up(&self, generation: u64) {
        for h in self.take_holds(generation, LostReason::DeadlinePassed) {
            self.delete_lost(h);
        }
    }

    /// Delete the node of a hold already out of the table, by its exact path (never a later
    /// grant), if its session may still be alive.
    fn delete_lost(&self, h: Hold) {
        let session = self.current();
        if session.generation == h.generation && !session.client.state().is_terminated() {
            let dir = h.path.rsplit_once('/').map_or_else(String::new, |(d, _)| d.to_owned());
            self.delete_in_background(session.client.clone(), dir, String::new(), Some(h.path));
        }
    }

    /// The hold `(key, owner)` at `path` is lost: out of the table first (no release follows),
    /// then every guard is told, so a guard woken by the loss finds the table clean. A later
    /// grant to the same owner has another path and is left alone.
    fn lose(&self, hk: &HoldKey, path: &str, reason: LostReason) {
        let hold = {
            let mut holds = lock(&self.holds);
            if holds.get(hk).is_some_and(|h| h.path == path) { holds.remove(hk) } else { None }
        };
        if let Some(h) = hold {
            if let Some(w) = &h.watch {
                w.abort();
            }
            h.mark_lost(reason);
        }
    }

    /// After a reconnect: confirm each hold's node still exists and is ours.
    async fn verify(&self, generation: u64) {
        let session = self.current();
        if session.generation != generation {
            return;
        }
        let holds: Vec<(HoldKey, String, Vec<LeaseSignal>)> = lock(&self.holds)
            .iter()
            .filter(|(_, h)| h.generation == generation && !h.is_lost())
            .map(|(k, h)| (k.clone(), h.path.clone(), h.signals.clone()))
            .collect();
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
                Ok(_) => self.lose(hk, path, LostReason::NotOwner),
                Err(e) => tracing::debug!(error = %e, "could not re-check a lock node after reconnect"),
            }
        }
    }

    /// Create `dir` as a CONTAINER node (the server reaps it once empty), and the root if a
    /// create finds it missing.
    async fn ensure_dir(&self, client: &zk::Client, dir: &str) -> std::result::Result<(), zk::Error> {
        let container = zk::CreateMode::Container.with_acls(self.acls());
        match client.create(dir, &[], &container).await {
            Ok(_) | Err(zk::Error::NodeExists) => Ok(()),
            Err(zk::Error::NoNode) if !self.cfg.root.is_empty() => {
                client.mkdir(&self.cfg.root, &zk::CreateMode::Persistent.with_acls(self.acls())).await?;
                match client.create(dir, &[], &container).await {
                    Ok(_) | Err(zk::Error::NodeExists) => Ok(()),
                    Err(e) => Err(e),
                }
            }
            Err(e) => Err(e),
        }
    }

    /// Delete a node of ours in the background until it is gone or the session ends. The
    /// delete (when the path is known) is sent before this returns.
    fn delete_in_background(&self, client: zk::Client, dir: String, unique: String, path: Option<String>) {
        let first = path.as_deref().map(|p| client.delete(p, None));
        self.runtime.spawn(async move {
            if let Some(first) = first {
                match first.await {
                    Ok(()) | Err(zk::Error::NoNode) => return,
                    Err(e) if session_ended(&e) => return,
                    Err(e) => tracing::debug!(error = %e, "lock node delete failed; retrying"),
                }
            }
            let mut pause = RETRY_MIN;
            let mut disconnected_since: Option<Instant> = None;
            loop {
                match client.state() {
                    s if s.is_terminated() => return,
                    // Disconnected for a whole session timeout: the server has expired the
                    // session (and the node with it); stop holding the client open.
                    zk::SessionState::Disconnected => {
                        let since = *disconnected_since.get_or_insert_with(Instant::now);
                        if since.elapsed() > client.session_timeout() {
                            return;
                        }
                    }
                    _ => disconnected_since = None,
                }
                let result = match &path {
                    Some(p) => client.delete(p, None).await,
                    None => find_and_delete(&client, &dir, &unique).await,
                };
                match result {
                    Ok(()) | Err(zk::Error::NoNode) => return,
                    Err(e) if session_ended(&e) => return,
                    Err(e) => tracing::debug!(error = %e, "lock node delete failed; retrying"),
                }
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(RETRY_MAX);
            }
        });
    }
}

/// Find our node by its unique `_c_<uuid>-` prefix (the create's reply was lost) and delete it.
async fn find_and_delete(client: &zk::Client, dir: &str, unique: &str) -> std::result::Result<(), zk::Error> {
    let children = client.list_children(dir).await?;
    match children.iter().find(|c| c.starts_with(unique)) {
        Some(name) => client.delete(&format!("{dir}/{name}"), None).await,
        None => Ok(()),
    }
}

/// The sequence number of a lock node name `..-lock-<digits>`; `None` for foreign children.
fn sequence(name: &str) -> Option<i64> {
    let (head, digits) = name.rsplit_once('-')?;
    if !head.ends_with("-lock") || digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// Deletes our contender node unless disarmed: armed before the create is sent, so a dropped
/// (cancelled) acquisition, a `Held` answer or an error never leaves a node in the queue.
struct Cleanup<'a> {
    inner: &'a Inner,
    client: Option<zk::Client>,
    dir: String,
    unique: String,
    path: Option<String>,
}

impl Drop for Cleanup<'_> {
    fn drop(&mut self) {
        if let Some(client) = self.client.take() {
            self.inner.delete_in_background(
                client,
                std::mem::take(&mut self.dir),
                std::mem::take(&mut self.unique),
                self.path.take(),
            );
        }
    }
}

impl ZkLock {
    /// A nested acquisition by a current holder: the outer hold's fence.
    fn nest(&self, key: &str, owner: OwnerToken, signal: &LeaseSignal) -> Option<u64> {
        let mut holds = lock(&self.inner.holds);
        let hk = (key.to_owned(), owner);
        let h = holds.get_mut(&hk)?;
        if h.is_lost() {
            // Told lost by the core (a refused renewal), not by us: no release will come for
            // it, and its node would stay queued ahead of the new attempt.
            let old = holds.remove(&hk);
            drop(holds);
            if let Some(old) = old {
                if let Some(w) = &old.watch {
                    w.abort();
                }
                self.inner.delete_lost(old);
            }
            return None;
        }
        h.count += 1;
        // Nesting through the same `Locker` brings the hold's own signal again: keep one copy,
        // so a long hold nested in a loop does not grow. (A release does not say which guard
        // it ends, so a signal from another `Locker` stays until the hold ends.)
        let known = signal.subscribe();
        if !h.signals.iter().any(|s| s.subscribe().same_channel(&known)) {
            h.signals.push(signal.clone());
        }
        Some(h.fence)
    }

    async fn acquire(&self, req: &AcquireRequest<'_>) -> Result<Attempt> {
        if let Some(fence) = self.nest(req.key, req.owner, req.signal) {
            return Ok(Attempt::Acquired(Grant { fence: FencingToken(fence), lease: None }));
        }
        let inner = &self.inner;
        let session = inner.session().await?;
        let client = &session.client;
        let dir = inner.dir(req.key);
        let unique = format!("_c_{}-{LOCK_NAME}", uuid::Uuid::new_v4());
        let prefix = format!("{dir}/{unique}");
        let mut cleanup = Cleanup {
            inner,
            client: Some(client.clone()),
            dir: dir.clone(),
            unique: unique.clone(),
            path: None,
        };
        let options = zk::CreateMode::EphemeralSequential.with_acls(inner.acls());

        // Create our node; the child listing is pipelined behind it (one round trip).
        let (mut dir_attempts, mut lost_replies) = (0, 0);
        let (name, fence, mut children) = loop {
            let sent = Instant::now();
            let created = client.create(&prefix, &[], &options);
            let listed = client.list_children(&dir);
            match created.await {
                Ok((stat, seq)) => {
                    session.confirm(sent);
                    let name = format!("{unique}{seq}");
                    cleanup.path = Some(format!("{dir}/{name}"));
                    break (name, stat.czxid, listed.await.map_err(lock_error)?);
                }
                Err(zk::Error::NoNode) if dir_attempts < DIR_RETRIES => {
                    drop(listed);
                    dir_attempts += 1;
                    inner.ensure_dir(client, &dir).await.map_err(lock_error)?;
                }
                Err(e) if outcome_unknown(&e) && lost_replies < DIR_RETRIES => {
                    drop(listed);
                    lost_replies += 1;
                    tracing::debug!(error = %e, "lock node create reply lost; looking for our node");
                    let children = client.list_children(&dir).await.map_err(lock_error)?;
                    let Some(name) = children.iter().find(|c| c.starts_with(&unique)).cloned() else {
                        continue; // the create was not applied: send it again
                    };
                    let path = format!("{dir}/{name}");
                    cleanup.path = Some(path.clone());
                    let stat = client
                        .check_stat(&path)
                        .await
                        .map_err(lock_error)?
                        .ok_or_else(|| temporary("own lock node vanished"))?;
                    break (name, stat.czxid, children);
                }
                Err(e) => return Err(lock_error(e)),
            }
        };
        let path = format!("{dir}/{name}");

        // Lowest sequence holds; otherwise watch only the immediate predecessor.
        loop {
            let mut queue: Vec<(i64, String)> =
                children.into_iter().filter_map(|c| sequence(&c).map(|s| (s, c))).collect();
            queue.sort_unstable();
            let Some(pos) = queue.iter().position(|(_, c)| *c == name) else {
                // Deleted behind our back, or the session ended; nothing left to clean up.
                return Err(temporary("own lock node vanished while waiting"));
            };
            if pos == 0 {
                break;
            }
            let Some(deadline) = req.wait_until.filter(|d| Instant::now() < *d) else {
                return Ok(Attempt::Held { retry_after: None }); // cleanup deletes our node
            };
            let predecessor = format!("{dir}/{}", queue[pos - 1].1);
            let sent = Instant::now();
            let (stat, watcher) = client.check_and_watch_stat(&predecessor).await.map_err(lock_error)?;
            session.confirm(sent);
            if stat.is_some() {
                tokio::select! {
                    event = watcher.changed() => {
                        inner.wakeups.fetch_add(1, Ordering::Relaxed);
                        if event.event_type == zk::EventType::Session && event.session_state.is_terminated() {
                            return Err(lock_error(zk::Error::SessionExpired));
                        }
                    }
                    _ = tokio::time::sleep_until(deadline) => return Ok(Attempt::Held { retry_after: None }),
                }
            }
            // A grant after a long wait must not start from an old confirmation: the listing's
            // send time is one too.
            let sent = Instant::now();
            children = client.list_children(&dir).await.map_err(lock_error)?;
            session.confirm(sent);
        }

        cleanup.client = None;
        let hk = (req.key.to_owned(), req.owner);
        let watch = self.watch_own_node(session.generation, hk.clone(), path.clone());
        let hold = Hold {
            path,
            fence: fence as u64,
            count: 1,
            generation: session.generation,
            signals: vec![req.signal.clone()],
            watch: Some(watch),
        };
        let old = lock(&inner.holds).insert(hk, hold);
        if let Some(old) = old {
            // Only a lost hold can be replaced (a live one nests): its node goes, by its path.
            if let Some(w) = &old.watch {
                w.abort();
            }
            inner.delete_lost(old);
        }
        Ok(Attempt::Acquired(Grant { fence: FencingToken(fence as u64), lease: None }))
    }

    /// Watch our own node while held: deleted behind our back, or the session ended -> lost.
    /// Holds no `Client` between requests, so dropping every `ZkLock` still closes the session.
    fn watch_own_node(&self, generation: u64, hk: HoldKey, path: String) -> AbortHandle {
        let weak = Arc::downgrade(&self.inner);
        let guarded = path.clone();
        let lose = move |reason: LostReason| {
            if let Some(inner) = weak.upgrade() {
                inner.lose(&hk, &guarded, reason);
            }
        };
        let weak = Arc::downgrade(&self.inner);
        let task = self.inner.runtime.spawn(async move {
            loop {
                let result = {
                    let Some(inner) = weak.upgrade() else { return };
                    let session = inner.current();
                    drop(inner);
                    if session.generation != generation {
                        return lose(LostReason::SessionEnded);
                    }
                    let sid = session.client.session_id().0;
                    session.client.check_and_watch_stat(&path).await.map(|(stat, w)| (stat, w, sid))
                };
                match result {
                    Ok((Some(stat), watcher, sid)) if stat.ephemeral_owner == sid => {
                        let event = watcher.changed().await;
                        match event.event_type {
                            zk::EventType::NodeDeleted => return lose(LostReason::NotOwner),
                            zk::EventType::Session if event.session_state.is_terminated() => {
                                return lose(LostReason::SessionEnded);
                            }
                            _ => {}
                        }
                    }
                    Ok(_) => return lose(LostReason::NotOwner),
                    Err(e) if session_ended(&e) => return lose(LostReason::SessionEnded),
                    Err(e) => {
                        tracing::debug!(error = %e, "watching own lock node failed; retrying");
                        tokio::time::sleep(RETRY_MIN * 5).await;
                    }
                }
            }
        });
        task.abort_handle()
    }
}

#[async_trait]
impl LockBackend for ZkLock {
    fn name(&self) -> &'static str {
        NAME
    }

    fn identity(&self) -> String {
        self.inner.cfg.identity()
    }

    fn capabilities(&self) -> Capability {
        let mut c = Capability::NONE;
        c.renew = true;
        c.fencing = true;
        c.native_wait = true;
        // Every grant is a quorum write in the ensemble: a leader failover neither loses it nor
        // repeats a czxid (see the README).
        c.failover_safe = true;
        c.reentrant = true;
        c.fair = true;
        c.session_bound = true;
        c
    }

    async fn try_acquire(&self, req: &AcquireRequest<'_>) -> Result<Attempt> {
        self.acquire(req).await
    }

    async fn release(&self, key: &str, owner: OwnerToken) -> Result<bool> {
        let inner = &self.inner;
        let hold = {
            let mut holds = lock(&inner.holds);
            let hk = (key.to_owned(), owner);
            match holds.get_mut(&hk) {
                None => return Ok(false),
                Some(h) if h.count > 1 && !h.is_lost() => {
                    h.count -= 1;
                    return Ok(true);
                }
                Some(_) => holds.remove(&hk),
            }
        };
        let Some(mut hold) = hold else { return Ok(false) };
        // Stop watching first, so our own delete is not taken for a loss.
        if let Some(w) = hold.watch.take() {
            w.abort();
        }
        let session = inner.current();
        let dir = inner.dir(key);
        if session.generation != hold.generation || session.client.state().is_terminated() {
            return Ok(false); // the session that held it is gone, and its node with it
        }
        if hold.is_lost() {
            inner.delete_in_background(session.client.clone(), dir, String::new(), Some(hold.path));
            return Ok(false);
        }
        match session.client.delete(&hold.path, None).await {
            Ok(()) => Ok(true),
            Err(zk::Error::NoNode) => {
                hold.mark_lost(LostReason::NotOwner);
                Ok(false)
            }
            Err(e) if session_ended(&e) => {
                hold.mark_lost(LostReason::SessionEnded);
                Ok(false)
            }
            Err(e) if is_temporary(&e) => {
                // Still ours: keep deleting in the background until it is gone or the session
                // ends (either frees the lock), instead of failing a release that will happen.
                tracing::debug!(error = %e, "lock release delayed; deleting in the background");
                inner.delete_in_background(session.client.clone(), dir, String::new(), Some(hold.path));
                Ok(true)
            }
            Err(e) => Err(lock_error(e)),
        }
    }

    async fn renew(&self, items: &[RenewItem<'_>]) -> Result<Vec<bool>> {
        let inner = &self.inner;
        let session = inner.current();
        let sid = session.client.session_id().0;
        let paths: Vec<Option<String>> = {
            let holds = lock(&inner.holds);
            items
                .iter()
                .map(|it| {
                    holds
                        .get(&(it.key.to_owned(), it.owner))
                        .filter(|h| h.generation == session.generation && !h.is_lost())
                        .map(|h| h.path.clone())
                })
                .collect()
        };
        // One pipelined batch: every check is sent before the first answer is awaited.
        let sent = Instant::now();
        let checks: Vec<_> =
            paths.iter().map(|p| p.as_deref().map(|p| session.client.check_stat(p))).collect();
        let mut out = Vec::with_capacity(items.len());
        for check in checks {
            out.push(match check {
                None => false,
                Some(check) => match check.await {
                    Ok(stat) => {
                        session.confirm(sent);
                        stat.is_some_and(|s| s.ephemeral_owner == sid)
                    }
                    Err(e) if session_ended(&e) => false,
                    Err(e) => return Err(lock_error(e)),
                },
            });
        }
        Ok(out)
    }

    async fn inspect(&self, key: &str) -> Result<LockInfo> {
        let session = self.inner.session().await?;
        let dir = self.inner.dir(key);
        let children = match session.client.list_children(&dir).await {
            Ok(c) => c,
            Err(zk::Error::NoNode) => return Ok(LockInfo::free()),
            Err(e) => return Err(lock_error(e)),
        };
        let mut queue: Vec<(i64, String)> =
            children.into_iter().filter_map(|c| sequence(&c).map(|s| (s, c))).collect();
        queue.sort_unstable();
        let Some((_, head)) = queue.first() else { return Ok(LockInfo::free()) };
        let stat = session.client.check_stat(&format!("{dir}/{head}")).await.map_err(lock_error)?;
        let mut info = LockInfo::held();
        info.fence = stat.map(|s| FencingToken(s.czxid as u64));
        info.waiters = Some(queue.len() - 1);
        info.owner = Some(head.clone());
        Ok(info)
    }

    async fn leave_queue(&self, _key: &str, _owner: OwnerToken) -> Result<()> {
        Ok(())
    }

    async fn subscribe(&self, _key: &str) -> Result<Option<Subscription>> {
        // Waiting happens in the server's queue (native_wait), not through notifications.
        Ok(None)
    }
}
