//! Driving the other side's real client over its line protocol (`acquire`, `release`).

use std::time::Duration;

use lock_testkit::interop::{self, Peer};
use lock_zk::ZkLock;

/// How long any answer may take on a loaded 2-core machine (a JVM starting included).
pub const ANSWER: Duration = Duration::from_secs(20);
/// Our session timeout in the interop tests.
pub const SESSION: Duration = Duration::from_secs(2);
/// A JVM starting next to others on a loaded 2-core machine has been seen to miss a 1 s session.
pub const PEER_SESSION: Duration = Duration::from_secs(4);
/// A wait that must not be granted: long enough for a wrongly granted lock to be answered.
pub const REFUSED_WAIT: Duration = Duration::from_millis(300);

/// A Curator peer on the shared server (`None` when Curator is missing and not required).
pub async fn curator() -> Option<Peer> {
    interop::curator_peer(&lock_zk_testing::shared_zk().connect_string(), PEER_SESSION).await
}

/// Our backend on the shared server, with lock directories under `root`.
pub async fn zk_lock(root: &str) -> ZkLock {
    super::zk_lock(&lock_zk_testing::shared_zk().connect_string(), root, SESSION).await
}

/// What a peer answered to `acquire`: its lock node and that node's `czxid`.
#[derive(Debug)]
pub struct Acquired {
    pub node: String,
    pub czxid: u64,
}

/// Sends `acquire <path> <wait>` and reads the answer: `Some` for `ACQUIRED`, `None` for
/// `TIMEOUT`; an `ERROR` fails the test.
pub async fn acquire(peer: &mut Peer, path: &str, wait: Duration) -> Option<Acquired> {
    peer.send(&format!("acquire {path} {}", wait.as_millis())).await;
    answer(peer).await
}

/// [`acquire`] of one side (`read` or `write`) of Curator's `InterProcessReadWriteLock`.
pub async fn acquire_side(peer: &mut Peer, path: &str, wait: Duration, side: &str) -> Option<Acquired> {
    peer.send(&format!("acquire {path} {} {side}", wait.as_millis())).await;
    answer(peer).await
}

pub async fn answer(peer: &mut Peer) -> Option<Acquired> {
    let line = peer.recv(ANSWER).await;
    if line == "TIMEOUT" {
        return None;
    }
    let mut words =
        line.strip_prefix("ACQUIRED ").unwrap_or_else(|| panic!("peer answered {line:?}")).split(' ');
    let node = words.next().expect("node path").to_owned();
    let czxid = words.next().and_then(|z| z.parse().ok()).unwrap_or_else(|| panic!("czxid in {line:?}"));
    Some(Acquired { node, czxid })
}

pub async fn release(peer: &mut Peer) {
    peer.call("release", "RELEASED", ANSWER).await;
}
