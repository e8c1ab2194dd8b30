//! The store calls of the shared queue recipe (`lock_core::backend::queue`): our node created
//! with the listing pipelined behind it, a waiter watching its predecessor, heartbeating its
//! own node and passing over dead waiters ahead of it (see `waiting.rs`), and claiming its node
//! before it holds.

use std::sync::Arc;
#[cfg(feature = "testing")]
use std::sync::atomic::Ordering;

use lock_core::backend::queue::{Place, QueueHold, QueueHolds, QueueStore, Watched};
use lock_core::backend::{AcquireRequest, Attempt, Cleanup, Side};
use lock_core::{Result, async_trait};
use tokio::time::Instant;
use zookeeper_client as zk;

use crate::cleanup::{self, Node};
use crate::contenders::node_name;
use crate::error::{lock_error, outcome_unknown, session_ended, temporary};
use crate::keys::{GATE_SUFFIX, gate_dir, leases_dir};
use crate::session::{Inner, Session};
use crate::waiting::{DEAD_WAITER_AFTER, HELD_DATA, Mark, Waiting, reread};

/// How often a create that finds its lock directory missing re-creates it and tries again: the
/// server reaps an empty container at any time, even between our create of it and the node's,
/// but not over and over.
const DIR_RETRIES: usize = 5;
/// How often a create whose reply was lost is sent again within one attempt, once the listing
/// behind it (which just came through, so the connection is back) proved it was not applied:
/// Curator's protected create does the same, and the core does not retry a try-once attempt.
const RESEND_RETRIES: usize = 5;

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
    /// The node's heartbeats and claim.
    waiting: Waiting,
    /// The predecessor watched, and when to read it again (a waiting one turns stale then).
    watching: Option<(String, Option<Instant>)>,
    /// The predecessor was deleted: the next look sends the claim ahead of its listing.
    claim_next: bool,
}

impl Entry {
    fn path(&self) -> String {
        format!("{}/{}", self.dir, self.name)
    }

    /// Leave the queue: the delete of our node is sent before this returns (behind any request
    /// of the session sent before), and retried in the background until the node is gone.
    pub(crate) fn leave_behind(self, runtime: &tokio::runtime::Handle) {
        let Entry { session, dir, name, cleanup, .. } = self;
        cleanup.disarm();
        cleanup::spawn_delete(runtime, session.client.clone(), format!("{dir}/{name}"));
    }
}

impl Queue<'_> {
    /// Create our node in `dir` on `session`; the child listing is pipelined behind it (one
    /// round trip: both go out in one write, and the server answers them in order, so the
    /// listing has our node). The listing also sets a child watch on the directory: a holder's
    /// first watch of its own node (see `watch_own_node`), so an uncontended grant costs no
    /// request of its own.
    async fn create(&self, session: Arc<Session>, side: Side, dir: String) -> Result<(Entry, Place<String>)> {
        let inner = self.0;
        let client = &session.client;
        let permit = matches!(side, Side::Permit { .. });
        let base = if permit { dir.trim_end_matches(GATE_SUFFIX).to_owned() } else { dir.clone() };
        let unique = format!("_c_{}-{}", uuid::Uuid::new_v4(), node_name(side));
        let prefix = format!("{dir}/{unique}");
        let mut cleanup = cleanup::guard(client, Node::Prefix { dir: dir.clone(), unique: unique.clone() });
        let options = zk::CreateMode::EphemeralSequential.with_acls(inner.acls());
        let (mut dir_attempts, mut resent) = (0, 0);
        let (name, stat, children, dir_watch, leases) = loop {
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
                    break (name, stat, children, Some(watch), leases);
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
                    break (name, stat, children, None, None);
                }
                Err(e) => return Err(lock_error(e)),
            }
        };
        let place = Inner::place(&dir, &name, side, children)
            .ok_or_else(|| temporary("own lock node vanished while queueing"))?;
        let entry = Entry {
            side,
            dir_watch,
            session,
            dir,
            name,
            czxid: stat.czxid,
            cleanup,
            leases,
            waiting: Waiting::new(&stat),
            watching: None,
            claim_next: false,
        };
        Ok((entry, place))
    }

    /// Our node was judged dead (deleted, or its version moved): queue a new one. The old
    /// entry's cleanup deletes the old node if it is still there.
    async fn requeue(&self, entry: &mut Entry) -> Result<Place<String>> {
        tracing::debug!(node = entry.name, "lock waiter lost its place; queueing again");
        let (fresh, place) = self.create(entry.session.clone(), entry.side, entry.dir.clone()).await?;
        *entry = fresh;
        Ok(place)
    }

    /// Our place, from a listing; first only once claimed if the node was ever marked waiting
    /// (see `waiting.rs`). With `claim`, the claim goes out ahead of the listing (the
    /// predecessor is gone: most likely we are first), else only once the listing says first.
    async fn settle(&self, entry: &mut Entry, claim: bool) -> Result<Place<String>> {
        if entry.waiting.is_lost() {
            return self.requeue(entry).await;
        }
        let path = entry.path();
        let session = entry.session.clone();
        let client = &session.client;
        // Held across the claim and the listing: no heartbeat may write in between.
        let mut mark = entry.waiting.lock().await;
        if claim && mark.marked && !mark.held && mark.version.is_none() {
            mark.version = Some(reread(client, &path).await.map_err(lock_error)?);
        }
        let sent = Instant::now();
        let claimed =
            (claim && mark.marked && !mark.held).then(|| client.set_data(&path, HELD_DATA, mark.version));
        let listed = client.list_children(&entry.dir);
        let leases = matches!(entry.side, Side::Permit { .. })
            .then(|| client.list_children(&leases_dir(entry.dir.trim_end_matches(GATE_SUFFIX))));
        let mut claimed = match claimed {
            None => false,
            Some(c) => match claim_answer(&mut mark, &entry.waiting, c.await)? {
                Claim::Made => true,
                Claim::Lost => {
                    drop(mark);
                    return self.requeue(entry).await;
                }
            },
        };
        let children = listed.await.map_err(lock_error)?;
        session.confirm(sent);
        entry.leases = match leases {
            Some(l) => Some(l.await),
            None => None,
        };
        let Some(place) = Inner::place(&entry.dir, &entry.name, entry.side, children) else {
            drop(mark);
            return self.requeue(entry).await;
        };
        if let Place::Behind(_) = place {
            // An early claim is undone by the next heartbeat.
            return Ok(place);
        }
        if mark.marked && !claimed {
            if mark.version.is_none() {
                mark.version = Some(reread(client, &path).await.map_err(lock_error)?);
            }
            let answer = client.set_data(&path, HELD_DATA, mark.version).await;
            match claim_answer(&mut mark, &entry.waiting, answer)? {
                Claim::Made => claimed = true,
                Claim::Lost => {
                    drop(mark);
                    return self.requeue(entry).await;
                }
            }
        }
        tracing::trace!(claimed, "lock node first");
        // No heartbeat writes again: the node holds.
        mark.held = true;
        Ok(Place::Head)
    }
}

/// What a claim's answer says of our place.
enum Claim {
    /// The node is ours and holds (or is about to): no verdict can delete it now.
    Made,
    /// Judged dead before the claim landed: the place is lost, queue again.
    Lost,
}

/// Take in the answer to a claim (a compared write of `HELD_DATA`): the version it made, or
/// the place lost, or an error after which the node's version must be read again.
fn claim_answer(mark: &mut Mark, waiting: &Waiting, answer: Result<zk::Stat, zk::Error>) -> Result<Claim> {
    match answer {
        Ok(stat) => {
            mark.version = Some(stat.version);
            waiting.wrote(&stat);
            Ok(Claim::Made)
        }
        Err(zk::Error::NoNode | zk::Error::BadVersion) => Ok(Claim::Lost),
        Err(e) => {
            mark.version = None;
            Err(lock_error(e))
        }
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

    async fn enqueue(&self, req: &AcquireRequest<'_>) -> Result<(Entry, Place<String>)> {
        let inner = self.0;
        let session = inner.session().await?;
        let base = inner.dir(req.key);
        let dir = if matches!(req.side, Side::Permit { .. }) { gate_dir(&base) } else { base };
        self.create(session, req.side, dir).await
    }

    /// Watch the predecessor, heartbeating our node meanwhile; a dead waiter ahead is passed
    /// over at once (see `waiting.rs`).
    async fn watch(
        &self,
        entry: &mut Entry,
        predecessor: String,
    ) -> Result<Watched<zk::OneshotWatcher, String>> {
        // A waiter watches its predecessor only (no herd): dropping the directory's watch asks
        // the server to remove it.
        entry.dir_watch = None;
        let path = entry.path();
        entry.waiting.start(&self.0.runtime, &entry.session, path);
        let sent = Instant::now();
        let client = &entry.session.client;
        let (data, stat, watcher) = match client.get_and_watch_data(&predecessor).await {
            Ok(read) => read,
            Err(zk::Error::NoNode) => {
                // Deleted before the watch was set again (after its data changed or it went
                // stale): this waiter acts on that deletion as on the watch's event.
                #[cfg(feature = "testing")]
                self.0.wakeups.fetch_add(1, Ordering::Relaxed);
                return Ok(Watched::Moved(self.settle(entry, true).await?));
            }
            Err(e) => return Err(lock_error(e)),
        };
        entry.session.confirm(sent);
        match entry.waiting.verdict(&data, &stat) {
            Err(recheck) => {
                entry.watching = Some((predecessor, recheck));
                Ok(Watched::Armed(watcher))
            }
            Ok(()) => {
                // Conditioned on the version read: a claim or heartbeat made since makes it fail.
                match client.delete(&predecessor, Some(stat.version)).await {
                    Ok(()) => tracing::info!(node = predecessor, "passed over a dead lock waiter"),
                    Err(zk::Error::NoNode | zk::Error::BadVersion) => {}
                    Err(e) if session_ended(&e) => return Err(lock_error(e)),
                    Err(e) => {
                        // Not ours to delete after all (an ACL), or no answer: wait on it as on
                        // any node, and try again only a verdict's time later, not in a loop.
                        tracing::debug!(node = predecessor, error = %e, "dead lock waiter not deleted");
                        let later = Instant::now() + DEAD_WAITER_AFTER;
                        entry.watching = Some((predecessor, Some(later)));
                        return Ok(Watched::Armed(watcher));
                    }
                }
                drop(watcher);
                Ok(Watched::Moved(self.settle(entry, true).await?))
            }
        }
    }

    /// Until the predecessor is deleted; its data changing (its heartbeats, its claim, a note)
    /// or its turning stale has it read again, and our place lost has us queue again.
    async fn deleted(&self, entry: &mut Entry, watcher: zk::OneshotWatcher) -> Result<Option<Place<String>>> {
        let (predecessor, recheck) = entry.watching.take().unwrap_or_default();
        let mut lost = entry.waiting.lost();
        let stale = async {
            match recheck {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        let event = tokio::select! {
            event = watcher.changed() => event,
            () = stale => return Ok(Some(Place::Behind(predecessor))),
            _ = lost.wait_for(|lost| *lost) => return Ok(None),
        };
        match event.event_type {
            zk::EventType::NodeDeleted => {
                #[cfg(feature = "testing")]
                self.0.wakeups.fetch_add(1, Ordering::Relaxed);
                entry.claim_next = true;
                Ok(None)
            }
            zk::EventType::NodeDataChanged => Ok(Some(Place::Behind(predecessor))),
            zk::EventType::Session if event.session_state.is_terminated() => {
                Err(lock_error(zk::Error::SessionExpired))
            }
            _ => Ok(None),
        }
    }

    async fn look(&self, entry: &mut Entry) -> Result<Place<String>> {
        let claim = std::mem::take(&mut entry.claim_next);
        self.settle(entry, claim).await
    }

    /// Our node goes with the attempt's cleanup.
    async fn leave(&self, _entry: Entry) -> Result<Attempt> {
        Ok(Attempt::Held { retry_after: None })
    }

    fn hold(&self, req: &AcquireRequest<'_>, entry: Entry) -> Result<i64> {
        let Entry { dir_watch, session, dir, name, czxid, cleanup, .. } = entry;
        cleanup.disarm();
        self.0.record_hold(req, &session, format!("{dir}/{name}"), czxid, dir_watch);
        Ok(czxid)
    }
}
