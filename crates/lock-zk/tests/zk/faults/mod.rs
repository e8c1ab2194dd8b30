//! ZooKeeper-specific behaviour and faults, by what goes wrong: the session and the ensemble
//! (`session`), the queue and its directory (`queue`), cut-off acquisitions and late clean-ups
//! (`cancel`); here, a holder process killed (its child half must be a test at the root, which
//! the parent runs by its exact name).
//!
//! Tests that stop or kill a server start their own; the others share this binary's server.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

use lock_core::{LeaseState, LockBackend, LockError, LockGuard, LostReason, OwnerToken};
use lock_testkit::proxy::Proxy;
use lock_testkit::{cut_after, eventually};
use lock_zk::{ZkLock, zookeeper_client as zk};
use lock_zk_testing::{ZkEnsemble, ZkServer};
use tokio::time::{Instant, timeout};

use crate::common;

mod cancel;
mod queue;
mod session;

use common::{children, close_session, locker, run_id};

const SESSION: Duration = Duration::from_millis(1000);

async fn zk_lock(connect: &str, session: Duration) -> ZkLock {
    common::zk_lock(connect, "/faults", session).await
}

/// Child-process half of [`killed_holder_is_replaced_within_session_timeout`]: acquire, report,
/// then hang until killed. A no-op unless the parent set `LOCK_ZK_CRASH_CHILD`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_child_helper() {
    let Ok(spec) = std::env::var("LOCK_ZK_CRASH_CHILD") else { return };
    let (connect, key) = spec.split_once('|').expect("connect|key");
    let z = zk_lock(connect, SESSION).await;
    let g = locker(&z).try_lock(key).await.expect("try").expect("child gets the free lock");
    println!("ACQUIRED fence={}", g.fence().expect("zk fences"));
    std::future::pending::<()>().await;
}

/// Never leave the holder process behind, even when an assertion fails first.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The holder's process is SIGKILLed (no release, no session close): a waiter acquires within
/// the session timeout (plus a tick of expiry rounding).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_holder_is_replaced_within_session_timeout() {
    let connect = lock_zk_testing::shared_zk().connect_string();
    let key = format!("crash-{}", run_id());
    let mut child = KillOnDrop(
        Command::new(std::env::current_exe().expect("test binary"))
            .args(["--exact", "faults::crash_child_helper", "--nocapture", "--test-threads=1"])
            .env("LOCK_ZK_CRASH_CHILD", format!("{connect}|{key}"))
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn holder process"),
    );
    let stdout = child.0.stdout.take().expect("stdout");
    let line = tokio::task::spawn_blocking(move || {
        let mut lines = BufReader::new(stdout).lines();
        // libtest prints `test crash_child_helper ... ` before the child's own output on one line.
        lines.find_map(|l| l.ok()?.split_once("ACQUIRED fence=").map(|(_, f)| f.trim().to_owned()))
    })
    .await
    .expect("reader");
    let child_fence: u64 =
        line.and_then(|f| f.parse().ok()).expect("child reports its acquisition and fence");

    let waiter = zk_lock(&connect, SESSION).await;
    let session = waiter.session_timeout();
    let wl = locker(&waiter);
    assert!(wl.try_lock(&key).await.expect("try").is_none(), "child holds the lock");
    let k2 = key.clone();
    let waiting = tokio::spawn(async move {
        let g = wl.lock(&k2).wait(Duration::from_secs(20)).acquire().await;
        (Instant::now(), g)
    });
    let wc = waiter.client();
    let dir = waiter.lock_dir(&key);
    eventually(Duration::from_secs(5), "waiter queued", || async { children(&wc, &dir).await == 2 }).await;

    child.0.kill().expect("SIGKILL the holder");
    let killed = Instant::now();
    let _ = child.0.wait();
    let (got, g) = timeout(Duration::from_secs(20), waiting).await.expect("waiter").expect("task");
    let g = g.expect("waiter acquires after the holder's session expired");
    let took = got - killed;
    println!("holder SIGKILLed: waiter acquired after {took:?} (session timeout {session:?})");
    assert!(g.fence().expect("zk fences").0 > child_fence, "fencing token grows after the crash");
    assert!(took <= session + Duration::from_millis(300), "took {took:?}, session timeout {session:?}");
    g.release().await.expect("release");
}

/// A random duration below `max` (phases and offsets only; never a synchronisation).
fn random_below(max: Duration) -> Duration {
    let nanos = max.as_nanos().max(1);
    Duration::from_nanos((uuid::Uuid::new_v4().as_u128() % nanos) as u64)
}
