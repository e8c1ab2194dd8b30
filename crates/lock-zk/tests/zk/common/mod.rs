//! Helpers shared by the test binaries (`mod common;` in each; cargo builds only the files
//! directly under `tests/`): backends on a root of their own, their lockers, and a session
//! closed behind its client's back.

// Each test binary uses its own subset.
#![allow(dead_code)]

pub mod peer;

use std::sync::Arc;
use std::time::Duration;

use lock_core::{LockBackend, Locker};
use lock_testkit::eventually;
use lock_zk::{ZkLock, zookeeper_client as zk};

/// A short id that keeps one run's keys apart from another's.
pub fn run_id() -> String {
    uuid::Uuid::new_v4().simple().to_string()[..8].to_owned()
}

/// A backend on `connect` (a session of its own) with lock directories under `root`.
pub async fn zk_lock(connect: &str, root: &str, session: Duration) -> ZkLock {
    let builder = ZkLock::builder().connect_string(connect).root(root).session_timeout(session);
    builder.build().await.expect("connect to zookeeper")
}

pub fn locker(z: &ZkLock) -> Locker {
    Locker::new(Arc::new(z.clone()) as Arc<dyn LockBackend>)
}

/// How many nodes `dir` holds (0 when it does not exist).
pub async fn children(client: &zk::Client, dir: &str) -> usize {
    client.list_children(dir).await.map(|c| c.len()).unwrap_or(0)
}

/// Waits until `dir` holds `n` nodes (a waiter queued: its node is its place in the queue).
pub async fn queued(client: &zk::Client, dir: &str, n: usize) {
    eventually(peer::ANSWER, &format!("{n} nodes queued in {dir}"), || async {
        children(client, dir).await == n
    })
    .await;
}

/// Ends `session` behind its client's back, as a server that expired it would: another
/// connection to `connect` takes the session over and closes it, and its nodes go with it.
/// The client's own connection must be held up meanwhile, else it takes the session back.
pub async fn close_session(connect: &str, session: &zk::SessionInfo, timeout: Duration) {
    let killer = zk::Client::connector()
        .with_session(session.clone())
        .with_session_timeout(timeout)
        .connect(connect)
        .await
        .expect("take the session over");
    drop(killer);
}
