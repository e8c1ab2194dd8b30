//! Waiters that die without cleaning up (SIGKILL) are passed over within about
//! [`DEAD_WAITER_AFTER`] + [`WAITER_HEARTBEAT`], not a session timeout (issue 46, point 8).
//!
//! A ZooKeeper node has no lease of its own: it lives as long as its session, so a killed
//! waiter's node stayed in the queue, and the waiter watching it stood still, until the server
//! expired the session (6 s by default; Curator has the same flaw). So a waiter proves it is
//! alive through its node, and the one behind it judges it by that:
//!
//! 1. **Heartbeats.** A node is created as before (empty data: an uncontended acquisition costs
//!    nothing more). Once its waiter has seen it is not first and waits, it writes
//!    [`WAITING_DATA`] to it at once and every [`WAITER_HEARTBEAT`] after, each write
//!    conditioned on the version its last one made. A heartbeat that finds the node gone or
//!    its version moved (someone judged it dead) means the place is lost: the attempt queues a
//!    new node and goes on within its deadline (a fairness cost, never a safety one).
//! 2. **Claims.** A node that was ever marked waiting is held only once a write of
//!    [`HELD_DATA`] conditioned on its owner's last version succeeded, sent right ahead of the
//!    listing that finds it first (one round trip, not two: the server answers one session's
//!    requests in order). A claim that turns out early (not first after all) is undone by the
//!    next heartbeat.
//! 3. **Verdicts.** A waiter whose predecessor's data is [`WAITING_DATA`] compares the
//!    predecessor's `mtime` with the `mtime` of its own latest write: both are the server's
//!    clock, so nobody's local clock matters, and every dead node of a chain is judged at once
//!    (not one verdict per node). Older by more than [`DEAD_WAITER_AFTER`]: it is deleted,
//!    conditioned on the version it was read with, and the waiter looks again. Else a timer set
//!    for when it would turn stale (plus a heartbeat of slack) reads it again, as does each of
//!    its heartbeats (they fire the predecessor watch). No verdict is made while our own last
//!    two writes are more than [`STALLED`] apart: we were stalled ourselves (the process, the
//!    machine or the server), and so may the predecessor have been, for the same reason; one
//!    more heartbeat of ours gives it time to write its own. (Added to the protocol first
//!    proposed: waiters in one process starved for a moment, by JVMs starting on a 2-core test
//!    machine say, all stall together, and the first to write after the stall would see the
//!    others' last heartbeats as old and judge them dead.)
//!
//! Why no holder is ever deleted by a verdict: a deleter only deletes a node whose data it read
//! as [`WAITING_DATA`], with the version it read. Only the owner writes that data, and only
//! after it saw its node behind another, so it claims before it holds; its claim makes a new
//! version, so a delete conditioned on any earlier one fails, and a claim sent after the
//! delete fails (the owner then queues again instead of holding). A claimed node is never
//! written [`WAITING_DATA`] again (the owner stops its heartbeats, under the same lock as the
//! claim, before it takes the hold), and a note written later is no marker either. A node never
//! marked (an uncontended holder's, Curator's or kazoo's, an old version of ours) is never
//! judged at all, so it keeps its place for its session's life, as before.
//!
//! A live waiter delayed by more than `DEAD_WAITER_AFTER - WAITER_HEARTBEAT` (1.5 s) while the
//! one behind it is not can be judged dead: it loses its place and queues again, nothing more.
//! Not passed over, so costing a session timeout as every node did before: a waiter killed
//! between its create and its first mark (a few milliseconds), and one killed in the heartbeat
//! period after a claim that turned out early (its node reads as held until the next one).
//!
//! The marker cannot be written with the create (which would close the first window): a
//! deleter must know that the owner will claim before holding, and only the owner's own
//! listing can tell it that it was ever behind (another waiter's listing can be older than the
//! owner's, which may already find it first).
//!
//! The `mtime` is the ZooKeeper leader's wall clock: a jump of it, or a new leader's clock, can
//! make wrong verdicts for a moment, with the same fairness-only cost.

use std::sync::Arc;
use std::time::Duration;

use lock_core::backend::Mutex;
use tokio::sync::watch;
use tokio::task::AbortHandle;
use tokio::time::Instant;
use zookeeper_client as zk;

use crate::error::session_ended;
use crate::session::Session;

/// How often a waiting node is written to prove its waiter alive.
pub const WAITER_HEARTBEAT: Duration = Duration::from_millis(500);
/// How long, on the server's clock, a waiting node may go unwritten before the waiter behind
/// it judges it dead and deletes it: its waiter may be late by this less a heartbeat.
pub const DEAD_WAITER_AFTER: Duration = Duration::from_secs(2);
/// Our own writes further apart than this (server time) tell us we were stalled ourselves,
/// and no verdict is made until the next one: twice the period, less than the stall that could
/// make a live waiter look dead (`DEAD_WAITER_AFTER - WAITER_HEARTBEAT`).
const STALLED: Duration = Duration::from_secs(1);
/// The shortest wait before a waiting predecessor is read again.
const MIN_RECHECK: Duration = Duration::from_millis(100);
/// The data of a waiting node: ours (Curator and kazoo write none like it), and no valid note
/// (a control character), so `note` reads none.
pub const WAITING_DATA: &[u8] = b"\0dlock waiting";
/// The data a claim writes: a node that holds, or is about to, which no verdict may delete.
pub const HELD_DATA: &[u8] = b"\0dlock held";

/// What the owner knows of its node's writes; behind an async lock, held across each write so
/// that heartbeats and the claim never race on the version.
pub(crate) struct Mark {
    /// The version our last answered write made; `None` after one whose answer was lost.
    pub version: Option<i32>,
    /// A [`WAITING_DATA`] write was sent: others may judge the node, so it must be claimed.
    pub marked: bool,
    /// First and claimed (or never marked): no heartbeat may write again.
    pub held: bool,
}

/// The server's time as our own latest write saw it, when its answer came here, and how long
/// before it (server time) the write ahead of it was applied.
#[derive(Clone, Copy)]
struct Clock {
    mtime: i64,
    at: Instant,
    gap: i64,
}

struct Shared {
    mark: tokio::sync::Mutex<Mark>,
    clock: Mutex<Clock>,
    lost: watch::Sender<bool>,
}

/// One queue node's heartbeats and what its owner knows of it.
pub(crate) struct Waiting {
    shared: Arc<Shared>,
    task: Option<AbortHandle>,
}

impl Drop for Waiting {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

impl Waiting {
    /// For a node just created with `stat`.
    pub fn new(stat: &zk::Stat) -> Waiting {
        let mark = Mark { version: Some(stat.version), marked: false, held: false };
        let shared = Shared {
            mark: tokio::sync::Mutex::new(mark),
            clock: Mutex::new(Clock { mtime: stat.mtime, at: Instant::now(), gap: 0 }),
            lost: watch::Sender::new(false),
        };
        Waiting { shared: Arc::new(shared), task: None }
    }

    /// Start heartbeating the node at `path` (the first write goes at once), unless started.
    pub fn start(&mut self, runtime: &tokio::runtime::Handle, session: &Arc<Session>, path: String) {
        if self.task.is_none() {
            let task = runtime.spawn(heartbeats(self.shared.clone(), session.clone(), path));
            self.task = Some(task.abort_handle());
        }
    }

    /// The lock every write of the node is made under.
    pub async fn lock(&self) -> tokio::sync::MutexGuard<'_, Mark> {
        self.shared.mark.lock().await
    }

    /// A write of ours made `stat`: the server's time moved on.
    pub fn wrote(&self, stat: &zk::Stat) {
        self.shared.wrote(stat);
    }

    /// Whether a heartbeat found the place lost.
    pub fn is_lost(&self) -> bool {
        *self.shared.lost.borrow()
    }

    /// Tells when a heartbeat finds the place lost.
    pub fn lost(&self) -> watch::Receiver<bool> {
        self.shared.lost.subscribe()
    }

    /// Whether a predecessor whose data is `data` and whose `stat` was just read is a dead
    /// waiter (`Ok`), or else when to look at it again (`Err(Some(at))`, `Err(None)`: never,
    /// it is no waiter of ours).
    pub fn verdict(&self, data: &[u8], stat: &zk::Stat) -> Result<(), Option<Instant>> {
        if data != WAITING_DATA {
            return Err(None);
        }
        let Clock { mtime, at, gap } = *self.shared.clock.lock();
        let limit = millis(DEAD_WAITER_AFTER);
        let age = mtime.saturating_sub(stat.mtime);
        // Never sooner than this: our own heartbeats stuck (the clock not moving on) must not
        // turn the rechecks into a loop of reads.
        let soonest = Instant::now() + MIN_RECHECK;
        if age > limit && gap > millis(STALLED) {
            // We were stalled ourselves (this process, this machine or the server): the dead
            // may be alive and stalled with us. Judge after our next heartbeat, by which time
            // they have had one period to write theirs.
            return Err(Some((at + WAITER_HEARTBEAT).max(soonest)));
        }
        if age > limit {
            return Ok(());
        }
        let left = Duration::from_millis(u64::try_from(limit - age).unwrap_or(0));
        Err(Some((at + left + WAITER_HEARTBEAT).max(soonest)))
    }
}

impl Shared {
    fn wrote(&self, stat: &zk::Stat) {
        let mut clock = self.clock.lock();
        if stat.mtime >= clock.mtime {
            let gap = stat.mtime - clock.mtime;
            *clock = Clock { mtime: stat.mtime, at: Instant::now(), gap };
        }
    }
}

fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// The version of our node at `path` as the server has it now (after a write whose answer was
/// lost: only its owner writes it, so that is the version of its last write).
pub(crate) async fn reread(client: &zk::Client, path: &str) -> Result<i32, zk::Error> {
    client.check_stat(path).await?.map(|s| s.version).ok_or(zk::Error::NoNode)
}

/// Write [`WAITING_DATA`] to our node every [`WAITER_HEARTBEAT`] until it is held, or lost.
async fn heartbeats(shared: Arc<Shared>, session: Arc<Session>, path: String) {
    let mut tick = tokio::time::interval(WAITER_HEARTBEAT);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let client = &session.client;
    loop {
        tick.tick().await;
        let mut mark = shared.mark.lock().await;
        if mark.held {
            return;
        }
        let version = match mark.version {
            Some(v) => Ok(v),
            None => reread(client, &path).await,
        };
        let sent = Instant::now();
        let written = match version {
            Ok(v) => {
                mark.version = Some(v);
                // Before it is sent: a write whose answer is lost may have been applied.
                mark.marked = true;
                client.set_data(&path, WAITING_DATA, Some(v)).await
            }
            Err(e) => Err(e),
        };
        match written {
            Ok(stat) => {
                session.confirm(sent);
                mark.version = Some(stat.version);
                shared.wrote(&stat);
            }
            Err(e @ (zk::Error::NoNode | zk::Error::BadVersion)) => {
                tracing::debug!(path, error = %e, "waiting lock node judged dead; queueing again");
                shared.lost.send_replace(true);
                return;
            }
            Err(e) if session_ended(&e) => {
                shared.lost.send_replace(true);
                return;
            }
            Err(e) => {
                tracing::debug!(path, error = %e, "lock node heartbeat failed; retrying");
                mark.version = None;
            }
        }
    }
}
