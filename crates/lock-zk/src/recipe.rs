//! The lock recipe: create an `EPHEMERAL_SEQUENTIAL` node with the listing pipelined behind
//! it, the lowest sequence holds, a waiter watches only its predecessor until its deadline
//! (the backend's native wait); nesting by a current holder; watching our own node while held.

use std::sync::Arc;
#[cfg(feature = "testing")]
use std::sync::atomic::Ordering;
use std::time::Duration;

use lock_core::backend::queue::{
    self as lock_queue, HoldKey, Place, QueueHold, QueueHolds, QueueStore, Watched,
};
use lock_core::backend::{AcquireRequest, Attempt, Cleanup, Side};
use lock_core::{LostReason, Result, async_trait};
use tokio::task::AbortHandle;
use tokio::time::Instant;
use zookeeper_client as zk;

use crate::cleanup::{self, Node};
use crate::error::{lock_error, outcome_unknown, session_ended, temporary};
use crate::permits::{GATE_SUFFIX, gate_dir, leases_dir};
use crate::session::{Inner, Session};

/// Curator's node names between the `_c_<uuid>-` protection prefix and the sequence: its
/// `InterProcessMutex` (and our mutex), and the two sides of its `InterProcessReadWriteLock`
/// (and ours), which name readers and writers apart so that either kind of client sees both.
const LOCK_NAME: &str = "lock-";
const READ_NAME: &str = "__READ__";
const WRITE_NAME: &str = "__WRIT__";
/// How often a create that finds its lock directory missing re-creates it and tries again: the
/// server reaps an empty container at any time, even between our create of it and the node's,
/// but not over and over.
const DIR_RETRIES: usize = 5;
/// How often a create whose reply was lost is sent again within one attempt, once the listing
/// behind it (which just came through, so the connection is back) proved it was not applied:
/// Curator's protected create does the same, and the core does not retry a try-once attempt.
const RESEND_RETRIES: usize = 5;
/// Pause before watching our own node again after a request failed (the connection is down;
/// the session monitor handles the state, this only re-arms the watch).
const WATCH_RETRY: Duration = Duration::from_millis(100);

/// What precedes the sequence number in the name of a node that contends for the lock:
/// Curator's `InterProcessMutex` and ours (`_c_<uuid>-lock-<seq>`), Curator's read and write
/// sides and ours (`_c_<uuid>-__READ__<seq>`, `-__WRIT__`), kazoo's `Lock`/`WriteLock`
/// (`<uuid>__lock__<seq>`) and kazoo's `ReadLock` (`<uuid>__rlock__<seq>`). A node ahead of
/// ours is waited for whoever made it: all are numbered by the same per-directory counter, so
/// one order holds for all (see the README on which mixes are safe in the other direction).
const CONTENDERS: [&str; 5] = ["-lock-", "__lock__", "__rlock__", READ_NAME, WRITE_NAME];

/// The contenders that are readers: they exclude writers, not each other.
const READERS: [&str; 2] = [READ_NAME, "__rlock__"];

/// Whether a contender's node is a reader's.
pub(crate) fn is_reader(name: &str) -> bool {
    let head = name.trim_end_matches(|c: char| c.is_ascii_digit());
    READERS.iter().any(|r| head.ends_with(r))
}

/// The name our node for `side` gets between the protection prefix and the sequence.
fn node_name(side: Side) -> &'static str {
    match side {
        Side::Read => READ_NAME,
        Side::Write => WRITE_NAME,
        _ => LOCK_NAME,
    }
}

/// Says once per process that kazoo shares a lock directory: we wait for its nodes, but a kazoo
/// `Lock` without `extra_lock_patterns=["-lock-"]` ignores ours, and Curator ignores kazoo's
/// (see the README). Its configuration cannot be seen from here, so this is told, not refused.
fn warn_of_kazoo(dir: &str, children: &[String]) {
    static TOLD: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    let kazoo = |c: &String| c.contains("__lock__") || c.contains("__rlock__");
    if !TOLD.load(std::sync::atomic::Ordering::Relaxed)
        && children.iter().any(kazoo)
        && !TOLD.swap(true, std::sync::atomic::Ordering::Relaxed)
    {
        tracing::warn!(
            dir,
            "kazoo lock nodes share this lock directory: kazoo must use Lock(.., \
             extra_lock_patterns=[\"-lock-\"]) to see our holders, and no Curator client may use it \
             (logged once)"
        );
    }
}

/// The sequence number of a contender's node name; `None` for other children.
fn sequence(name: &str) -> Option<i64> {
    let head = name.trim_end_matches(|c: char| c.is_ascii_digit());
    let digits = &name[head.len()..];
    if digits.is_empty() || !CONTENDERS.iter().any(|p| head.ends_with(p)) {
        return None;
    }
    digits.parse().ok()
}

/// The lock nodes among `children`, in queue order (the head holds the lock).
pub(crate) fn queue(children: Vec<String>) -> Vec<(i64, String)> {
    let mut queue: Vec<(i64, String)> =
        children.into_iter().filter_map(|c| sequence(&c).map(|s| (s, c))).collect();
    queue.sort_unstable();
    queue
}

impl Inner {
    /// One acquisition: nest, or queue a node and wait (until `req.wait_until`) to be first; a
    /// permit goes through its semaphore's gate (see `permits.rs`).
    pub async fn acquire(self: &Arc<Self>, req: &AcquireRequest<'_>) -> Result<Attempt> {
        match req.side {
            Side::Permit { of } => self.acquire_permit(req, of).await,
            _ => lock_queue::acquire(&Queue(self), req).await,
        }
    }

    /// Where `name`, a request for `side`, stands among `children` of `dir`: holding, or
    /// behind the path of the node it waits for (the one just before it; for a reader, the
    /// first writer ahead).
    fn place(dir: &str, name: &str, side: Side, children: Vec<String>) -> Result<Place<String>> {
        warn_of_kazoo(dir, &children);
        let queue = queue(children);
        let Some(pos) = queue.iter().position(|(_, c)| *c == name) else {
            // Deleted behind our back, or the session ended; nothing left to clean up.
            return Err(temporary("own lock node vanished while waiting"));
        };
        Ok(match lock_queue::place_behind(&queue[..pos], side, |(_, c)| is_reader(c)) {
            Place::Head => Place::Head,
            Place::Behind((_, node)) => Place::Behind(format!("{dir}/{node}")),
        })
    }

    /// Record the hold of `req` on node `path` (created as `czxid` in session `generation`),
    /// watched from now on (first through `dir_watch`, see `watch_own_node`).
    pub(crate) fn record_hold(
        self: &Arc<Self>,
        req: &AcquireRequest<'_>,
        generation: u64,
        path: String,
        czxid: i64,
        dir_watch: Option<zk::OneshotWatcher>,
    ) {
        let hold = QueueHold::new(path.clone(), czxid, generation, req.signal).of_side(req.side);
        let hk = (req.key.to_owned(), req.owner);
        // The watch starts with the hold in the table, where it looks after each event.
        let start = || Some(self.watch_own_node(generation, hk, path, dir_watch));
        if let Some(old) = self.holds.insert(req.key, req.owner, hold, start) {
            // Only a lost hold can be replaced (a live one nests): its node goes, by its path.
            self.delete_lost(old);
        }
    }

    /// Watch our own node while held: deleted behind our back, or the session ended -> lost.
    /// Holds no `Client` between requests, so dropping every `ZkLock` still closes the session.
    ///
    /// `dir_watch`, the child watch the grant's listing set, comes first: it fires on any change
    /// in the directory, our node's deletion among them, so only then is our node watched by
    /// itself. Uncontended, the first change is our own release's delete; its event reaches the
    /// client before the delete's answer, so the release leaves no watch for the client to
    /// remove with another request.
    fn watch_own_node(
        self: &Arc<Self>,
        generation: u64,
        hk: HoldKey,
        path: String,
        mut dir_watch: Option<zk::OneshotWatcher>,
    ) -> AbortHandle {
        let weak = Arc::downgrade(self);
        let (guarded, held) = (path.clone(), hk.clone());
        let lose = move |reason: LostReason| {
            if let Some(inner) = weak.upgrade() {
                inner.holds.lose(&hk, &guarded, reason);
            }
        };
        let weak = Arc::downgrade(self);
        let task = self.runtime.spawn(async move {
            loop {
                if let Some(watch) = dir_watch.take() {
                    let event = watch.changed().await;
                    if event.event_type == zk::EventType::Session && event.session_state.is_terminated() {
                        return lose(LostReason::SessionEnded);
                    }
                    // Released (or lost) meanwhile: nothing left to watch, and no request to send.
                    let Some(inner) = weak.upgrade() else { return };
                    if !inner.holds.holds_name(&held, &path) {
                        return;
                    }
                }
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
                        if weak.upgrade().is_none_or(|inner| !inner.holds.holds_name(&held, &path)) {
                            return;
                        }
                    }
                    Ok(_) => return lose(LostReason::NotOwner),
                    Err(e) if session_ended(&e) => return lose(LostReason::SessionEnded),
                    Err(e) => {
                        tracing::debug!(error = %e, "watching own lock node failed; retrying");
                        tokio::time::sleep(WATCH_RETRY).await;
                    }
                }
            }
        });
        task.abort_handle()
    }

    /// Create `dir` as a CONTAINER node (the server reaps it once empty), and its parent if a
    /// create finds it missing: the root (persistent), or a semaphore's directory above its
    /// gate and leases (a container too, as Curator creates it).
    pub(crate) async fn ensure_dir(
        &self,
        client: &zk::Client,
        dir: &str,
    ) -> std::result::Result<(), zk::Error> {
        let container = zk::CreateMode::Container.with_acls(self.acls());
        match client.create(dir, &[], &container).await {
            Ok(_) | Err(zk::Error::NodeExists) => return Ok(()),
            Err(zk::Error::NoNode) => {}
            Err(e) => return Err(e),
        }
        let parent = &dir[..dir.rfind('/').unwrap_or(0)];
        if parent.is_empty() {
            return Err(zk::Error::NoNode);
        }
        if parent == self.cfg.root {
            client.mkdir(parent, &zk::CreateMode::Persistent.with_acls(self.acls())).await?;
        } else {
            Box::pin(self.ensure_dir(client, parent)).await?;
        }
        match client.create(dir, &[], &container).await {
            Ok(_) | Err(zk::Error::NodeExists) => Ok(()),
            Err(e) => Err(e),
        }
    }
}

/// The store calls of the shared queue recipe, for one acquisition.
pub(crate) struct Queue<'a>(pub(crate) &'a Arc<Inner>);

/// One attempt's node, on the session it was created in, with the cleanup that deletes it
/// unless the attempt ends in a grant.
pub(crate) struct Entry {
    /// The child watch the create's listing set on the directory: a holder's first watch of its
    /// own node (see `watch_own_node`). Declared first, so that it goes before the cleanup runs.
    dir_watch: Option<zk::OneshotWatcher>,
    /// The kind of hold asked for.
    side: Side,
    pub(crate) session: Arc<Session>,
    dir: String,
    name: String,
    czxid: i64,
    cleanup: Cleanup,
    /// A permit's gate: the semaphore's leases, listed right behind the gate's queue (the
    /// listing that found the entry first comes before it, so it has every lease a former
    /// holder of the gate created); `None` when not listed with the latest place.
    pub(crate) leases: Option<std::result::Result<Vec<String>, zk::Error>>,
}

impl Entry {
    /// Leave the queue: the delete of our node is sent before this returns (behind any request
    /// of the session sent before), and retried in the background until the node is gone.
    pub(crate) fn leave_behind(self, runtime: &tokio::runtime::Handle) {
        let Entry { session, dir, name, cleanup, .. } = self;
        cleanup.disarm();
        cleanup::spawn_delete(runtime, session.client.clone(), format!("{dir}/{name}"));
    }
}

#[async_trait]
impl QueueStore for Queue<'_> {
    type Entry = Entry;
    /// The predecessor's path.
    type Predecessor = String;
    type Watch = zk::OneshotWatcher;

    fn holds(&self) -> &QueueHolds {
        &self.0.holds
    }

    fn delete_lost(&self, hold: QueueHold) {
        self.0.delete_lost(hold);
    }

    /// Create our node; the child listing is pipelined behind it (one round trip: both go out
    /// in one write, and the server answers them in order, so the listing has our node). The
    /// listing also sets a child watch on the directory: a holder's first watch of its own node
    /// (see `watch_own_node`), so an uncontended grant costs no request of its own.
    async fn enqueue(&self, req: &AcquireRequest<'_>) -> Result<(Entry, Place<String>)> {
        let inner = self.0;
        let session = inner.session().await?;
        let client = &session.client;
        let base = inner.dir(req.key);
        let permit = matches!(req.side, Side::Permit { .. });
        let dir = if permit { gate_dir(&base) } else { base.clone() };
        let unique = format!("_c_{}-{}", uuid::Uuid::new_v4(), node_name(req.side));
        let prefix = format!("{dir}/{unique}");
        let mut cleanup = cleanup::guard(client, Node::Prefix { dir: dir.clone(), unique: unique.clone() });
        let options = zk::CreateMode::EphemeralSequential.with_acls(inner.acls());
        let (mut dir_attempts, mut resent) = (0, 0);
        let (name, czxid, children, dir_watch, leases) = loop {
            let sent = Instant::now();
            let created = client.create(&prefix, &[], &options);
            let listed = client.list_and_watch_children(&dir);
            let leases = permit.then(|| client.list_children(&leases_dir(&base)));
            match created.await {
                Ok((stat, seq)) => {
                    session.confirm(sent);
                    let name = format!("{unique}{seq}");
                    cleanup::found(&mut cleanup, client, format!("{dir}/{name}"));
                    let (children, watch) = listed.await.map_err(lock_error)?;
                    let leases = match leases {
                        Some(l) => Some(l.await),
                        None => None,
                    };
                    break (name, stat.czxid, children, Some(watch), leases);
                }
                Err(zk::Error::NoNode) if dir_attempts < DIR_RETRIES => {
                    drop(listed);
                    dir_attempts += 1;
                    inner.ensure_dir(client, &dir).await.map_err(lock_error)?;
                }
                // The reply was lost, not necessarily the create: find our node by its unique
                // prefix before creating another (a second node would queue behind the first
                // for the rest of the session). Not there: the create was not applied (one
                // session's requests are applied in order), so it is sent again.
                Err(e) if outcome_unknown(&e) && resent < RESEND_RETRIES => {
                    drop(listed);
                    resent += 1;
                    tracing::debug!(error = %e, "lock node create reply lost; looking for our node");
                    let children = client.list_children(&dir).await.map_err(lock_error)?;
                    let Some(name) = children.iter().find(|c| c.starts_with(&unique)).cloned() else {
                        continue;
                    };
                    let path = format!("{dir}/{name}");
                    cleanup::found(&mut cleanup, client, path.clone());
                    let stat = client
                        .check_stat(&path)
                        .await
                        .map_err(lock_error)?
                        .ok_or_else(|| temporary("own lock node vanished"))?;
                    break (name, stat.czxid, children, None, None);
                }
                Err(e) => return Err(lock_error(e)),
            }
        };
        let place = Inner::place(&dir, &name, req.side, children)?;
        Ok((Entry { side: req.side, dir_watch, session, dir, name, czxid, cleanup, leases }, place))
    }

    async fn watch(
        &self,
        entry: &mut Entry,
        predecessor: String,
    ) -> Result<Watched<zk::OneshotWatcher, String>> {
        // A waiter watches its predecessor only (no herd): dropping the directory's watch asks
        // the server to remove it.
        entry.dir_watch = None;
        let sent = Instant::now();
        let (stat, watcher) =
            entry.session.client.check_and_watch_stat(&predecessor).await.map_err(lock_error)?;
        entry.session.confirm(sent);
        if stat.is_some() {
            return Ok(Watched::Armed(watcher));
        }
        let place = self.look(entry).await;
        drop(watcher);
        Ok(Watched::Moved(place?))
    }

    async fn deleted(
        &self,
        _entry: &mut Entry,
        watcher: zk::OneshotWatcher,
    ) -> Result<Option<Place<String>>> {
        let event = watcher.changed().await;
        #[cfg(feature = "testing")]
        self.0.wakeups.fetch_add(1, Ordering::Relaxed);
        if event.event_type == zk::EventType::Session && event.session_state.is_terminated() {
            return Err(lock_error(zk::Error::SessionExpired));
        }
        Ok(None)
    }

    async fn look(&self, entry: &mut Entry) -> Result<Place<String>> {
        // A grant after a long wait must not start from an old confirmation: the listing's send
        // time is one too.
        let sent = Instant::now();
        let client = &entry.session.client;
        let listed = client.list_children(&entry.dir);
        let leases = matches!(entry.side, Side::Permit { .. })
            .then(|| client.list_children(&leases_dir(entry.dir.trim_end_matches(GATE_SUFFIX))));
        let children = listed.await.map_err(lock_error)?;
        entry.session.confirm(sent);
        entry.leases = match leases {
            Some(l) => Some(l.await),
            None => None,
        };
        Inner::place(&entry.dir, &entry.name, entry.side, children)
    }

    /// Our node goes with the attempt's cleanup.
    async fn leave(&self, _entry: Entry) -> Result<Attempt> {
        Ok(Attempt::Held { retry_after: None })
    }

    fn hold(&self, req: &AcquireRequest<'_>, entry: Entry) -> Result<i64> {
        let Entry { dir_watch, session, dir, name, czxid, cleanup, .. } = entry;
        cleanup.disarm();
        self.0.record_hold(req, session.generation, format!("{dir}/{name}"), czxid, dir_watch);
        Ok(czxid)
    }
}

#[cfg(test)]
mod tests {
    use super::{is_reader, queue, sequence};

    #[test]
    fn curator_and_kazoo_nodes_share_one_order() {
        let ours = "_c_0f2c0a57-5fd4-4d6b-9a38-3b3c4f5e6a7b-lock-0000000003";
        assert_eq!(sequence(ours), Some(3));
        assert_eq!(sequence("_c_1-lock-0000000012"), Some(12));
        assert_eq!(sequence("3f9ac1e0d2b84c5f8e7a6b5c4d3e2f10__lock__0000000001"), Some(1));
        assert_eq!(sequence("3f9ac1e0d2b84c5f8e7a6b5c4d3e2f10__rlock__0000000007"), Some(7));
        for foreign in ["leases", "__lock__", "lock-", "x-lock-", "a-lock-12b", "lease-0000000001"] {
            assert_eq!(sequence(foreign), None, "{foreign}");
        }
        let children = vec![
            "_c_b-lock-0000000004".to_owned(),
            "ab__lock__0000000002".to_owned(),
            "leases".to_owned(),
            "_c_a-lock-0000000003".to_owned(),
            "cd__rlock__0000000010".to_owned(),
        ];
        let order: Vec<i64> = queue(children).into_iter().map(|(s, _)| s).collect();
        assert_eq!(order, [2, 3, 4, 10]);
    }

    #[test]
    fn curator_read_write_nodes_queue_with_the_rest() {
        let reader = "_c_0f2c0a57-5fd4-4d6b-9a38-3b3c4f5e6a7b-__READ__0000000005";
        let writer = "_c_0f2c0a57-5fd4-4d6b-9a38-3b3c4f5e6a7b-__WRIT__0000000006";
        assert_eq!((sequence(reader), sequence(writer)), (Some(5), Some(6)));
        assert!(is_reader(reader) && is_reader("ab__rlock__0000000001"));
        assert!(
            !is_reader(writer) && !is_reader("_c_1-lock-0000000012") && !is_reader("ab__lock__0000000002")
        );
    }
}
