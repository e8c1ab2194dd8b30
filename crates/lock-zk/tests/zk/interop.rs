//! Sharing one lock path with the other side's real client: Apache Curator's `InterProcessMutex`
//! (a JVM driven by `lock_testkit::interop::curator_peer`) and kazoo's `Lock` (Python, from the
//! pinned venv of `lock_testkit::interop::python`, driven through `tests/kazoo_peer.py`).
//!
//! The scenarios (exclusion, FIFO hand-over, a holder killed mid-hold, fences, notes) are written
//! once and run against Curator and against kazoo configured with `extra_lock_patterns=["-lock-"]`.
//! Two more tests pin the unsafe mixes the README warns about. All share this binary's server.
use std::time::Duration;

use lock_core::{LockBackend, LockError, LockGuard};
use lock_testkit::interop::{self, Peer};
use lock_testkit::{eventually, within};
use lock_zk::{ZkLock, zookeeper_client as zk};
use tokio::process::Command;
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::common;

use common::peer::{ANSWER, acquire, answer, release};
use common::{locker, run_id};
use lock_core::backend::Notes;

/// Session timeout of our clients (nothing here waits for one to expire).
const SESSION: Duration = Duration::from_secs(2);
/// Session timeout of the other side: a JVM or a Python process starting next to others on a
/// loaded 2-core machine has been seen to miss a 1 s session.
const PEER_SESSION: Duration = Duration::from_secs(4);
/// The session of a peer that the test kills while it holds: the time our waiter then waits.
const KILLED_SESSION: Duration = Duration::from_secs(2);
/// A wait that must not be granted: long enough for a wrongly granted lock to be answered.
const REFUSED_WAIT: Duration = Duration::from_millis(300);
const KAZOO_PEER: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/kazoo_peer.py");

/// The client on the other side of the lock path.
#[derive(Clone, Copy, Debug)]
enum Other {
    /// Apache Curator 5.4 `InterProcessMutex`.
    Curator,
    /// kazoo 2.11 `Lock(client, path, extra_lock_patterns=["-lock-"])`: counts our nodes.
    Kazoo,
    /// kazoo 2.11 `Lock(client, path)`: its default, which does not see our nodes.
    KazooDefault,
}

impl Other {
    /// Starts the other side connected to the shared server; `None` when skipped.
    async fn spawn(self) -> Option<Peer> {
        self.spawn_with(PEER_SESSION).await
    }

    async fn spawn_with(self, session: Duration) -> Option<Peer> {
        let connect = lock_zk_testing::shared_zk().connect_string();
        if let Other::Curator = self {
            return interop::curator_peer(&connect, session).await;
        }
        let mut command = Command::new(interop::python()?);
        command.arg(KAZOO_PEER).arg(&connect).arg(session.as_millis().to_string());
        if let Other::Kazoo = self {
            command.arg("-lock-");
        }
        let mut peer = Peer::spawn("kazoo", command);
        peer.expect("READY", ANSWER).await;
        Some(peer)
    }
}

async fn zk_lock() -> ZkLock {
    ZkLock::builder()
        .connect_string(lock_zk_testing::shared_zk().connect_string())
        .root("/interop")
        .session_timeout(SESSION)
        .build()
        .await
        .expect("connect to zookeeper")
}

async fn children(client: &zk::Client, dir: &str) -> Vec<String> {
    client.list_children(dir).await.unwrap_or_default()
}

/// Waits until `dir` holds `n` nodes (a waiter queued: its node is its place in the queue).
async fn queued(client: &zk::Client, dir: &str, n: usize) {
    eventually(ANSWER, &format!("{n} nodes queued in {dir}"), || async {
        children(client, dir).await.len() == n
    })
    .await;
}

/// A waiter of ours on `key`, reporting its guard on `tx` once granted.
fn our_waiter(z: &ZkLock, key: &str, tx: mpsc::UnboundedSender<LockGuard>) {
    let (l, key) = (locker(z), key.to_owned());
    tokio::spawn(async move {
        let g = l.lock(&key).wait(ANSWER).acquire().await.expect("our waiter acquires");
        let _ = tx.send(g);
    });
}

// ---------------------------------------------------------------------------------------------
// The scenarios, for any safe mix
// ---------------------------------------------------------------------------------------------

/// A holder on either side excludes the other: a try fails, a bounded wait times out; after the
/// release the other side gets the lock.
async fn mutual_exclusion(other: Other) {
    let Some(mut peer) = other.spawn().await else { return };
    let z = zk_lock().await;
    let l = locker(&z);
    let key = format!("excl-{other:?}-{}", run_id());
    let path = z.lock_dir(&key);

    let theirs = acquire(&mut peer, &path, ANSWER).await.expect("free lock: the peer gets it");
    assert!(
        theirs.node.starts_with(&format!("{path}/")),
        "{other:?} node {} is in our lock dir",
        theirs.node
    );
    assert!(l.try_lock(&key).await.expect("try").is_none(), "{other:?} holds: our try must fail");
    let waited = l.lock(&key).wait(REFUSED_WAIT).acquire().await;
    assert!(matches!(waited, Err(LockError::Timeout { .. })), "{other:?} holds: our wait must time out");
    release(&mut peer).await;

    let g = l.try_lock(&key).await.expect("try").expect("free after the peer's release");
    assert_eq!(
        acquire(&mut peer, &path, REFUSED_WAIT).await.map(|a| a.node),
        None,
        "we hold: {other:?} must time out"
    );
    g.release().await.expect("release");
    let again = acquire(&mut peer, &path, ANSWER).await.expect("free after our release");
    release(&mut peer).await;
    assert_ne!(again.node, theirs.node);
}

/// The other side holds, we queue, a second peer queues behind us: the release goes to us, and
/// the second peer only gets the lock after we release.
async fn fifo_peer_then_us_then_peer(other: Other) {
    let (Some(mut first), Some(mut third)) = (other.spawn().await, other.spawn().await) else { return };
    let z = zk_lock().await;
    let observer = z.client();
    let key = format!("fifo-peer-{other:?}-{}", run_id());
    let path = z.lock_dir(&key);

    acquire(&mut first, &path, ANSWER).await.expect("first peer holds");
    let (tx, mut granted) = mpsc::unbounded_channel();
    our_waiter(&z, &key, tx);
    queued(&observer, &path, 2).await;
    third.send(&format!("acquire {path} {}", ANSWER.as_millis())).await;
    queued(&observer, &path, 3).await;
    assert!(
        tokio::time::timeout(REFUSED_WAIT, granted.recv()).await.is_err(),
        "our waiter must not be granted while {other:?} holds"
    );

    release(&mut first).await;
    let g = within(ANSWER, "our waiter granted after the first peer", granted.recv()).await.expect("granted");
    // The third peer still waits behind us: its node is queued and it has not answered.
    assert_eq!(children(&observer, &path).await.len(), 2, "our node and the third peer's");
    assert!(
        tokio::time::timeout(REFUSED_WAIT, third.recv(ANSWER)).await.is_err(),
        "{other:?} behind us must not be granted while we hold"
    );
    g.release().await.expect("release");
    answer(&mut third).await.expect("the third peer gets it after our release");
    release(&mut third).await;
}

/// We hold, a peer queues, a second waiter of ours queues behind it: the release goes to the
/// peer, and our second waiter only after the peer released.
async fn fifo_us_then_peer_then_us(other: Other) {
    let Some(mut second) = other.spawn().await else { return };
    let (z1, z3) = (zk_lock().await, zk_lock().await);
    let observer = z1.client();
    let key = format!("fifo-us-{other:?}-{}", run_id());
    let path = z1.lock_dir(&key);

    let g = locker(&z1).try_lock(&key).await.expect("try").expect("free");
    second.send(&format!("acquire {path} {}", ANSWER.as_millis())).await;
    queued(&observer, &path, 2).await;
    let (tx, mut granted) = mpsc::unbounded_channel();
    our_waiter(&z3, &key, tx);
    queued(&observer, &path, 3).await;
    assert!(
        tokio::time::timeout(REFUSED_WAIT, second.recv(ANSWER)).await.is_err(),
        "{other:?} must not be granted while we hold"
    );

    g.release().await.expect("release");
    answer(&mut second).await.expect("the peer queued second gets it");
    assert!(
        tokio::time::timeout(REFUSED_WAIT, granted.recv()).await.is_err(),
        "our waiter behind {other:?} must not be granted while it holds"
    );
    release(&mut second).await;
    let g3 = within(ANSWER, "our second waiter granted", granted.recv()).await.expect("granted");
    g3.release().await.expect("release");
}

/// A peer holding the lock is killed (SIGKILL): a try right after the kill fails (its session
/// is alive), our waiter is granted only once the server expired that session (its node gone,
/// at least 2/3 of the session timeout after the kill, as the client pings every third).
async fn killed_peer_holder(other: Other) {
    let Some(mut peer) = other.spawn_with(KILLED_SESSION).await else { return };
    let (z, probe) = (zk_lock().await, zk_lock().await);
    let observer = z.client();
    let key = format!("killed-{other:?}-{}", run_id());
    let path = z.lock_dir(&key);

    let theirs = acquire(&mut peer, &path, ANSWER).await.expect("peer holds");
    let (tx, mut granted) = mpsc::unbounded_channel();
    our_waiter(&z, &key, tx);
    queued(&observer, &path, 2).await;

    let killed = Instant::now();
    peer.kill().await;
    assert!(
        locker(&probe).try_lock(&key).await.expect("try").is_none(),
        "killed holder's session still alive"
    );
    let g = within(ANSWER, "our waiter granted after the session expired", granted.recv())
        .await
        .expect("granted");
    let after = killed.elapsed();
    assert_eq!(
        observer.check_stat(&theirs.node).await.expect("exists"),
        None,
        "the dead holder's node is gone"
    );
    assert!(
        after >= KILLED_SESSION * 2 / 3 - Duration::from_millis(100),
        "granted {after:?} after the kill: before expiry"
    );
    println!("{other:?} holder killed: our waiter granted {after:?} later (session {KILLED_SESSION:?})");
    g.release().await.expect("release");
}

/// Fences across both sides are one increasing sequence: ours is our node's `czxid`, and the
/// `czxid` of the peer's node (what a peer would use as its token) is below ours when it held
/// before us and above when after. `inspect` reports the peer holder's `czxid` as the fence.
async fn fences_increase_across_sides(other: Other) {
    let Some(mut peer) = other.spawn().await else { return };
    let z = zk_lock().await;
    let l = locker(&z);
    let key = format!("fence-{other:?}-{}", run_id());
    let path = z.lock_dir(&key);

    let before = acquire(&mut peer, &path, ANSWER).await.expect("peer holds");
    let info = z.inspect(&key).await.expect("inspect");
    assert_eq!(info.fence.map(|f| f.0), Some(before.czxid), "inspect shows the peer holder's czxid");
    release(&mut peer).await;
    let g = l.try_lock(&key).await.expect("try").expect("free");
    let ours = g.fence().expect("zk fences").0;
    // Our node follows Curator's layout: `_c_<uuid>-lock-<10-digit sequence>`.
    let names = children(&z.client(), &path).await;
    let [name] = names.as_slice() else { panic!("one node while we hold: {names:?}") };
    let (prefix, seq) = name.rsplit_once("-lock-").expect("Curator's lock name");
    assert!(prefix.starts_with("_c_") && uuid::Uuid::parse_str(&prefix[3..]).is_ok(), "{name}");
    assert!(seq.len() == 10 && seq.bytes().all(|b| b.is_ascii_digit()), "{name}");
    g.release().await.expect("release");
    let after = acquire(&mut peer, &path, ANSWER).await.expect("peer holds again");
    release(&mut peer).await;
    assert!(before.czxid < ours && ours < after.czxid, "{} < {ours} < {}", before.czxid, after.czxid);
    println!("{other:?} fences: peer {} -> ours {ours} -> peer {}", before.czxid, after.czxid);
}

/// Notes across sides. A peer holder's node data (Curator's: its client's address; kazoo's: its
/// identifier) was set at its create, so it is no note: `note` reads `None`. Our note is our
/// node's data: kazoo's `Lock.contenders()` shows it as our identifier, and a peer queued
/// behind us while we change it (its predecessor watch fires on data changes) looks, waits on
/// in its place, and is granted after our release, when the note reads `None` again.
async fn notes_across_sides(other: Other) {
    let Some(mut peer) = other.spawn().await else { return };
    let z = zk_lock().await;
    let l = locker(&z);
    let key = format!("notes-{other:?}-{}", run_id());
    let path = z.lock_dir(&key);

    let theirs = acquire(&mut peer, &path, ANSWER).await.expect("peer holds");
    let (data, stat) = z.client().get_data(&theirs.node).await.expect("peer's node data");
    println!("{other:?} lock node data: {:?} (version {})", String::from_utf8_lossy(&data), stat.version);
    assert_eq!(stat.version, 0, "{other:?} sets its node's data at the create only");
    assert_eq!(z.note(&key).await.expect("note"), None, "{other:?}'s own data is no note");
    release(&mut peer).await;

    let g = l.try_lock(&key).await.expect("try").expect("free");
    assert!(z.set_note(&key, g.owner(), "ours").await.expect("set_note"));
    if let Other::Kazoo = other {
        let line = peer.call(&format!("contenders {path}"), "CONTENDERS", ANSWER).await;
        assert_eq!(line, r#"CONTENDERS ["ours"]"#, "kazoo reads our note as our identifier");
    }
    peer.send(&format!("acquire {path} {}", ANSWER.as_millis())).await;
    queued(&z.client(), &path, 2).await;
    for i in 0..3 {
        assert!(z.set_note(&key, g.owner(), &format!("ours {i}")).await.expect("set_note"));
    }
    assert!(
        tokio::time::timeout(REFUSED_WAIT, peer.recv(ANSWER)).await.is_err(),
        "{other:?} must not be granted while we hold, notes changing or not"
    );
    assert_eq!(z.note(&key).await.expect("note").as_deref(), Some("ours 2"));
    g.release().await.expect("release");
    answer(&mut peer).await.expect("the peer gets it after our release");
    assert_eq!(z.note(&key).await.expect("note"), None, "{other:?} holds: no note, never ours");
    release(&mut peer).await;
}

macro_rules! scenarios {
    ($($module:ident: $other:expr;)*) => {$(
        mod $module {
            use super::*;
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn mutual_exclusion_both_ways() {
                mutual_exclusion($other).await;
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn fifo_peer_holds_we_wait_before_a_later_peer() {
                fifo_peer_then_us_then_peer($other).await;
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn fifo_we_hold_peer_waits_before_our_later_waiter() {
                fifo_us_then_peer_then_us($other).await;
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn killed_holder_frees_the_lock_only_when_its_session_expires() {
                killed_peer_holder($other).await;
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn fences_increase_across_both_sides() {
                fences_increase_across_sides($other).await;
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn notes_are_ours_only_and_leave_a_waiting_peer_waiting() {
                notes_across_sides($other).await;
            }
        }
    )*};
}

scenarios! {
    curator: Other::Curator;
    kazoo: Other::Kazoo;
}

// ---------------------------------------------------------------------------------------------
// The unsafe mixes (documented in the README; these tests pin the reason)
// ---------------------------------------------------------------------------------------------

/// kazoo's default `Lock` counts only `__lock__` nodes: it takes the lock while we hold it. We
/// still wait for a kazoo holder (we count its nodes), so only kazoo's side needs the setting.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kazoo_without_extra_lock_patterns_ignores_our_holder() {
    let Some(mut peer) = Other::KazooDefault.spawn().await else { return };
    let z = zk_lock().await;
    let l = locker(&z);
    let key = format!("kazoo-default-{}", run_id());
    let path = z.lock_dir(&key);

    let g = l.try_lock(&key).await.expect("try").expect("free");
    let wrong = acquire(&mut peer, &path, ANSWER).await;
    assert!(wrong.is_some(), "kazoo's default Lock does not see our node (if this fails, kazoo changed)");
    g.release().await.expect("release");
    assert!(l.try_lock(&key).await.expect("try").is_none(), "we see kazoo's holder");
    release(&mut peer).await;
}

/// Curator sorts a kazoo node by its whole name (it has no `lock-`), after every `lock-` node:
/// Curator takes a lock kazoo holds, even with kazoo's `extra_lock_patterns`. Never mix the two
/// on one path.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn curator_ignores_a_kazoo_holder() {
    let (Some(mut kazoo), Some(mut curator)) = (Other::Kazoo.spawn().await, Other::Curator.spawn().await)
    else {
        return;
    };
    let z = zk_lock().await;
    let path = z.lock_dir(&format!("kazoo-curator-{}", run_id()));
    acquire(&mut kazoo, &path, ANSWER).await.expect("kazoo holds");
    let wrong = acquire(&mut curator, &path, ANSWER).await;
    assert!(wrong.is_some(), "Curator mis-sorts kazoo's node (if this fails, Curator changed)");
    release(&mut curator).await;
    release(&mut kazoo).await;
}
