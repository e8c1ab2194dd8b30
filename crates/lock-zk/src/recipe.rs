//! The lock recipe: create an `EPHEMERAL_SEQUENTIAL` node with the listing pipelined behind
//! it, the lowest sequence holds, a waiter watches only its predecessor until its deadline
//! (the backend's native wait); nesting by a current holder; watching our own node while held.

use std::sync::Arc;
#[cfg(feature = "testing")]
use std::sync::atomic::Ordering;
use std::time::Duration;

use lock_core::backend::{AcquireRequest, Attempt, Grant};
use lock_core::{FencingToken, LeaseSignal, LostReason, OwnerToken, Result};
use tokio::task::AbortHandle;
use tokio::time::Instant;
use zookeeper_client as zk;

use crate::cleanup::{self, Node};
use crate::error::{lock_error, outcome_unknown, session_ended, temporary};
use crate::session::{Hold, HoldKey, Inner};

/// Curator's lock-node name between the `_c_<uuid>-` protection prefix and the sequence.
const LOCK_NAME: &str = "lock-";
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

fn granted(fence: u64) -> Attempt {
    Attempt::Acquired(Grant { fence: FencingToken(fence), lease: None })
}

/// What precedes the sequence number in the name of a node that contends for the lock:
/// Curator's `InterProcessMutex` and ours (`_c_<uuid>-lock-<seq>`), kazoo's `Lock`/`WriteLock`
/// (`<uuid>__lock__<seq>`) and kazoo's `ReadLock` (`<uuid>__rlock__<seq>`). Every one of them
/// excludes us, so a kazoo node ahead of ours is waited for like one of ours: all are numbered
/// by the same per-directory counter, so one order holds for all (see the README on which mixes
/// are safe in the other direction).
const CONTENDERS: [&str; 3] = ["-lock-", "__lock__", "__rlock__"];

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
    /// A nested acquisition by a current holder: the outer hold's fence.
    fn nest(&self, key: &str, owner: OwnerToken, signal: &LeaseSignal) -> Option<u64> {
        let mut holds = self.holds.lock();
        let hk = (key.to_owned(), owner);
        let h = holds.get_mut(&hk)?;
        if h.is_lost() {
            // Told lost by the core (a refused renewal), not by us: no release will come for
            // it, and its node would stay queued ahead of the new attempt.
            let old = holds.remove(&hk);
            drop(holds);
            if let Some(old) = old {
                self.delete_lost(old);
            }
            return None;
        }
        h.count += 1;
        // Nesting through the same `Locker` brings the hold's own signal again: keep one copy,
        // so a long hold nested in a loop does not grow. (A release does not say which guard
        // it ends, so a signal from another `Locker` stays until the hold ends.)
        if !h.signals.iter().any(|s| s.same_as(signal)) {
            h.signals.push(signal.clone());
        }
        Some(h.fence)
    }

    /// One acquisition: nest, or queue a node and wait (until `req.wait_until`) to be first.
    pub async fn acquire(self: &Arc<Self>, req: &AcquireRequest<'_>) -> Result<Attempt> {
        if let Some(fence) = self.nest(req.key, req.owner, req.signal) {
            return Ok(granted(fence));
        }
        let session = self.session().await?;
        let client = &session.client;
        let dir = self.dir(req.key);
        let unique = format!("_c_{}-{LOCK_NAME}", uuid::Uuid::new_v4());
        let prefix = format!("{dir}/{unique}");
        let mut cleanup = cleanup::guard(client, Node::Prefix { dir: dir.clone(), unique: unique.clone() });
        let options = zk::CreateMode::EphemeralSequential.with_acls(self.acls());

        // Create our node; the child listing is pipelined behind it (one round trip: both go out
        // in one write, and the server answers them in order, so the listing has our node). The
        // listing also sets a child watch on the directory: a holder's first watch of its own
        // node (see `watch_own_node`), so an uncontended grant costs no request of its own.
        let (mut dir_attempts, mut resent) = (0, 0);
        let (name, fence, mut children, mut dir_watch) = loop {
            let sent = Instant::now();
            let created = client.create(&prefix, &[], &options);
            let listed = client.list_and_watch_children(&dir);
            match created.await {
                Ok((stat, seq)) => {
                    session.confirm(sent);
                    let name = format!("{unique}{seq}");
                    cleanup::found(&mut cleanup, client, format!("{dir}/{name}"));
                    let (children, watch) = listed.await.map_err(lock_error)?;
                    break (name, stat.czxid, children, Some(watch));
                }
                Err(zk::Error::NoNode) if dir_attempts < DIR_RETRIES => {
                    drop(listed);
                    dir_attempts += 1;
                    self.ensure_dir(client, &dir).await.map_err(lock_error)?;
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
                    break (name, stat.czxid, children, None);
                }
                Err(e) => return Err(lock_error(e)),
            }
        };
        let path = format!("{dir}/{name}");

        // Lowest sequence holds; otherwise watch only the immediate predecessor.
        loop {
            warn_of_kazoo(&dir, &children);
            let queue = queue(children);
            let Some(pos) = queue.iter().position(|(_, c)| *c == name) else {
                // Deleted behind our back, or the session ended; nothing left to clean up.
                return Err(temporary("own lock node vanished while waiting"));
            };
            if pos == 0 {
                break;
            }
            // A waiter watches its predecessor only (no herd): dropping the directory's watch
            // asks the server to remove it.
            dir_watch = None;
            let Some(deadline) = req.wait_until.filter(|d| Instant::now() < *d) else {
                return Ok(Attempt::Held { retry_after: None }); // the cleanup deletes our node
            };
            let predecessor = format!("{dir}/{}", queue[pos - 1].1);
            let sent = Instant::now();
            let (stat, watcher) = client.check_and_watch_stat(&predecessor).await.map_err(lock_error)?;
            session.confirm(sent);
            if stat.is_some() {
                tokio::select! {
                    event = watcher.changed() => {
                        #[cfg(feature = "testing")]
                        self.wakeups.fetch_add(1, Ordering::Relaxed);
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

        cleanup.disarm();
        let hk = (req.key.to_owned(), req.owner);
        let hold = Hold {
            path: path.clone(),
            fence: fence as u64,
            count: 1,
            generation: session.generation,
            signals: vec![req.signal.clone()],
            watch: None,
        };
        let old = {
            let mut holds = self.holds.lock();
            let old = holds.insert(hk.clone(), hold);
            // The watch starts with the hold in the table, where it looks after each event.
            let watch = self.watch_own_node(session.generation, hk.clone(), path, dir_watch);
            if let Some(h) = holds.get_mut(&hk) {
                h.watch = Some(watch);
            }
            old
        };
        if let Some(old) = old {
            // Only a lost hold can be replaced (a live one nests): its node goes, by its path.
            self.delete_lost(old);
        }
        Ok(granted(fence as u64))
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
                inner.lose(&hk, &guarded, reason);
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
                    if !inner.holds_path(&held, &path) {
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
                        if weak.upgrade().is_none_or(|inner| !inner.holds_path(&held, &path)) {
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

    /// Whether the hold `hk` is still in the table with its node at `path`.
    fn holds_path(&self, hk: &HoldKey, path: &str) -> bool {
        self.holds.lock().get(hk).is_some_and(|h| h.path == path)
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
}

#[cfg(test)]
mod tests {
    use super::{queue, sequence};

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
}
