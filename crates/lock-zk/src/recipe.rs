//! The lock recipe: create an `EPHEMERAL_SEQUENTIAL` node with the listing pipelined behind
//! it, the lowest sequence holds, a waiter watches only its predecessor until its deadline
//! (the backend's native wait); nesting by a current holder; watching our own node while held.
//! The store calls the shared recipe makes are in `queue.rs`, the contenders' names and order
//! in `contenders.rs`.

use std::sync::Arc;
use std::time::Duration;

use lock_core::backend::queue::{self as lock_queue, HoldKey, Place, QueueHold};
use lock_core::backend::{AcquireRequest, Attempt, Side};
use lock_core::{LostReason, Result};
use tokio::task::AbortHandle;
use zookeeper_client as zk;

use crate::contenders::{is_reader, queue};
use crate::error::session_ended;
use crate::queue::Queue;
use crate::session::{Inner, Session};

/// Pause before watching our own node again after a request failed (the connection is down;
/// the session monitor handles the state, this only re-arms the watch).
const WATCH_RETRY: Duration = Duration::from_millis(100);

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
    ///
    /// `None` when `name` is not among them: deleted behind our back (judged dead, see
    /// `waiting.rs`), or the session ended.
    pub(crate) fn place(dir: &str, name: &str, side: Side, children: Vec<String>) -> Option<Place<String>> {
        warn_of_kazoo(dir, &children);
        let queue = queue(children);
        let pos = queue.iter().position(|(_, c)| *c == name)?;
        Some(match lock_queue::place_behind(&queue[..pos], side, |(_, c)| is_reader(c)) {
            Place::Head => Place::Head,
            Place::Behind((_, node)) => Place::Behind(format!("{dir}/{node}")),
        })
    }

    /// Record the hold of `req` on node `path` (created as `czxid` in `session`), watched from
    /// now on (first through `dir_watch`, see `watch_own_node`).
    pub(crate) fn record_hold(
        self: &Arc<Self>,
        req: &AcquireRequest<'_>,
        session: &Session,
        path: String,
        czxid: i64,
        dir_watch: Option<zk::OneshotWatcher>,
    ) {
        let generation = session.generation;
        session.held(req.signal, self.cfg.clock_drift);
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
