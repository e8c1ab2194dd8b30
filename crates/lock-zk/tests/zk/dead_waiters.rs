//! Waiters that died without cleaning up (SIGKILL: their sessions, and so their queue nodes,
//! live on until the server expires them) cost the next live waiter about
//! `DEAD_WAITER_AFTER + WAITER_HEARTBEAT`, not a session timeout (issue 46, point 8).
//!
//! A dead waiter is a raw ZooKeeper session, kept open and idle (as a killed process's is until
//! it times out, 20 s here), whose node is marked as a waiting one of ours and whose heartbeats
//! stop. Nodes that are not marked so (Curator's, kazoo's, a holder's) are never passed over.
//! All share this binary's server.
use std::time::Duration;

use lock_core::{LockBackend, LockGuard};
use lock_testkit::{eventually, within};
use lock_zk::{DEAD_WAITER_AFTER, WAITER_HEARTBEAT, WAITING_DATA, ZkLock, zookeeper_client as zk};
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::common;

use common::{locker, queued, run_id};

/// Our clients' session timeout: the default, what a dead waiter cost before.
const SESSION: Duration = lock_zk::DEFAULT_SESSION_TIMEOUT;
/// The dead waiters' session: far longer than what passing over them may take.
const DEAD_SESSION: Duration = Duration::from_secs(20);
/// How long any answer may take on a loaded 2-core machine.
const ANSWER: Duration = Duration::from_secs(10);
/// What a live waiter may wait after the release for dead waiters ahead of it: one verdict (a
/// chain of dead waiters is judged at once), one heartbeat period of slack, a second of load.
const PASS_OVER: Duration =
    Duration::from_millis(DEAD_WAITER_AFTER.as_millis() as u64 + WAITER_HEARTBEAT.as_millis() as u64 + 1000);

async fn zk_lock() -> ZkLock {
    common::zk_lock(&lock_zk_testing::shared_zk().connect_string(), "/dead-waiters", SESSION).await
}

/// A session standing for a killed process: it never closes its nodes (until dropped).
async fn dead_session() -> zk::Client {
    let connect = lock_zk_testing::shared_zk().connect_string();
    let connector = zk::Client::connector().with_session_timeout(DEAD_SESSION).connect(&connect);
    connector.await.expect("raw session")
}

/// Queue a node in `dir` through `client` as our waiters name theirs, with `data`; its path.
async fn enqueue_raw(client: &zk::Client, dir: &str, data: &[u8]) -> String {
    let prefix = format!("{dir}/_c_{}-lock-", uuid::Uuid::new_v4());
    let options = zk::CreateMode::EphemeralSequential.with_acls(zk::Acls::anyone_all());
    let (_, seq) = client.create(&prefix, data, &options).await.expect("create a raw node");
    format!("{prefix}{seq}")
}

/// A waiter on `key` through `z` (waiting up to `wait`), reporting its guard once granted.
fn spawn_waiter(z: &ZkLock, key: &str, wait: Duration) -> mpsc::UnboundedReceiver<LockGuard> {
    let (tx, rx) = mpsc::unbounded_channel();
    let (l, k) = (locker(z), key.to_owned());
    tokio::spawn(async move {
        let g = l.lock(&k).wait(wait).acquire().await.expect("waiter acquires");
        let _ = tx.send(g);
    });
    rx
}

/// Three dead waiters in a row ahead of a live one: after the holder releases, the live one is
/// granted within one verdict, not a session timeout, nor one verdict per dead waiter. Their
/// nodes were deleted by the live waiter, not expired with their session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chain_of_dead_waiters_is_passed_over_at_once() {
    let (holder, live) = (zk_lock().await, zk_lock().await);
    let key = format!("chain-{}", run_id());
    let dir = holder.lock_dir(&key);
    let g = locker(&holder).try_lock(&key).await.expect("try").expect("free");
    let dead = dead_session().await;
    let mut ghosts = Vec::new();
    for _ in 0..3 {
        ghosts.push(enqueue_raw(&dead, &dir, WAITING_DATA).await);
    }
    let mut granted = spawn_waiter(&live, &key, DEAD_SESSION);
    queued(&holder.client(), &dir, 5).await;

    let released = Instant::now();
    g.release().await.expect("release");
    let next = within(PASS_OVER, "the live waiter is granted", granted.recv()).await.expect("granted");
    let took = released.elapsed();
    println!("3 dead waiters ahead: the live one was granted {took:?} after the release");
    for ghost in &ghosts {
        assert!(dead.check_stat(ghost).await.expect("stat").is_none(), "{ghost} passed over");
    }
    assert!(!dead.state().is_terminated(), "the dead waiters' session outlived their nodes");
    next.release().await.expect("release");
}

/// A waiter killed right before the holder releases becomes first and never takes the lock:
/// the live waiter behind it is granted within about one verdict after the release. While it
/// heartbeats, longer than a verdict, it keeps its place.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_waiter_that_becomes_first_is_passed_over() {
    let (holder, live) = (zk_lock().await, zk_lock().await);
    let key = format!("first-{}", run_id());
    let dir = holder.lock_dir(&key);
    let g = locker(&holder).try_lock(&key).await.expect("try").expect("free");
    let dying = dead_session().await;
    let node = enqueue_raw(&dying, &dir, &[]).await;
    let mut granted = spawn_waiter(&live, &key, DEAD_SESSION);
    queued(&holder.client(), &dir, 3).await;
    // Alive: marked and heartbeating as our waiters do, for longer than a verdict takes.
    let mut version = 0;
    let alive_until = Instant::now() + DEAD_WAITER_AFTER + WAITER_HEARTBEAT * 2;
    while Instant::now() < alive_until {
        version = dying.set_data(&node, WAITING_DATA, Some(version)).await.expect("heartbeat").version;
        tokio::time::sleep(WAITER_HEARTBEAT / 2).await;
    }
    assert!(granted.try_recv().is_err(), "granted while the holder holds");
    assert_eq!(
        dying.check_stat(&node).await.expect("stat").map(|s| s.version),
        Some(version),
        "kept its place"
    );

    // Killed: no more heartbeats, its node stays with its session.
    let released = Instant::now();
    g.release().await.expect("release");
    let next = within(PASS_OVER, "the live waiter is granted", granted.recv()).await.expect("granted");
    let took = released.elapsed();
    println!("a dead waiter became first: the live one was granted {took:?} after the release");
    assert!(dying.check_stat(&node).await.expect("stat").is_none(), "the dead waiter was passed over");
    next.release().await.expect("release");
}

/// Nodes not marked as our waiters' are never passed over, however old: Curator's (its
/// client's address as data), one of ours that was never behind anyone (a holder's, empty),
/// and one whose claim marks it held. The live waiter behind them waits for their deletes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unmarked_nodes_are_never_passed_over() {
    let (holder, live) = (zk_lock().await, zk_lock().await);
    let key = format!("foreign-{}", run_id());
    let dir = holder.lock_dir(&key);
    let g = locker(&holder).try_lock(&key).await.expect("try").expect("free");
    let other = dead_session().await;
    let mut nodes = Vec::new();
    for data in [&b"10.0.0.7"[..], &[], lock_zk::HELD_DATA] {
        nodes.push(enqueue_raw(&other, &dir, data).await);
    }
    let mut granted = spawn_waiter(&live, &key, DEAD_SESSION);
    queued(&holder.client(), &dir, 5).await;
    g.release().await.expect("release");
    let waited = tokio::time::timeout(PASS_OVER, granted.recv()).await;
    assert!(waited.is_err(), "granted past nodes that are not our waiters'");
    for node in &nodes {
        assert!(other.check_stat(node).await.expect("stat").is_some(), "{node} was deleted");
        other.delete(node, None).await.expect("delete");
    }
    let next = within(ANSWER, "the live waiter is granted", granted.recv()).await.expect("granted");
    next.release().await.expect("release");
}

/// A live waiter judged dead (its node deleted, conditioned on the version it was seen with,
/// as a waiter behind it does) queues again with a new node and is granted once the holder
/// releases: the verdict costs it its place, not its acquisition.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_judged_dead_queues_again() {
    let (holder, live) = (zk_lock().await, zk_lock().await);
    let key = format!("judged-{}", run_id());
    let dir = holder.lock_dir(&key);
    let g = locker(&holder).try_lock(&key).await.expect("try").expect("free");
    let observer = holder.client();
    let mut granted = spawn_waiter(&live, &key, SESSION);
    queued(&observer, &dir, 2).await;
    let waiting = || async {
        let names = observer.list_children(&dir).await.expect("list");
        for name in names {
            let path = format!("{dir}/{name}");
            if let Ok((data, stat)) = observer.get_data(&path).await
                && data == WAITING_DATA
            {
                return Some((path, stat.version));
            }
        }
        None
    };
    let marked = async {
        loop {
            match waiting().await {
                Some(marked) => return marked,
                None => tokio::time::sleep(Duration::from_millis(5)).await,
            }
        }
    };
    let (path, version) = within(ANSWER, "the waiter marks its node", marked).await;
    observer.delete(&path, Some(version)).await.expect("judge the waiter dead");
    eventually(ANSWER, "the waiter queues again", || async {
        waiting().await.is_some_and(|(p, _)| p != path)
    })
    .await;
    assert!(granted.try_recv().is_err(), "granted while the holder holds");
    g.release().await.expect("release");
    let next = within(ANSWER, "the waiter is granted", granted.recv()).await.expect("granted");
    // It holds through its new node, the head of the queue, never through the deleted one.
    let head = holder.inspect(&key).await.expect("inspect");
    assert_eq!(head.fence, next.fence(), "the grant is the head's");
    assert!(observer.check_stat(&path).await.expect("stat").is_none(), "the old node stays deleted");
    next.release().await.expect("release");
}

/// Not a check: the median hand-over between two clients ping-ponging one key, from the
/// holder's release call to the waiter's grant (what a waiter's claim costs).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handover_latency() {
    const HANDOVERS: usize = 500;
    let clients = [zk_lock().await, zk_lock().await];
    let key = format!("pingpong-{}", run_id());
    let dir = clients[0].lock_dir(&key);
    let observer = clients[0].client();
    let (tx, mut rx) = mpsc::unbounded_channel::<(usize, Instant, Instant)>();
    let mut tasks = Vec::new();
    for (side, z) in clients.iter().enumerate() {
        let (l, k, tx, watcher, d) = (locker(z), key.clone(), tx.clone(), observer.clone(), dir.clone());
        tasks.push(tokio::spawn(async move {
            for round in 0..HANDOVERS / 2 {
                let g = l.lock(&k).wait(ANSWER).acquire().await.expect("acquire");
                let granted = Instant::now();
                // Hand over only once the other side waits: the next grant is a hand-over.
                let last = side == 1 && round == HANDOVERS / 2 - 1;
                if !last {
                    queued(&watcher, &d, 2).await;
                }
                let released = Instant::now();
                g.release().await.expect("release");
                tx.send((side, granted, released)).expect("collector");
            }
        }));
        if side == 0 {
            // Side 0 holds first.
            queued(&observer, &dir, 1).await;
        }
    }
    drop(tx);
    let mut events = Vec::new();
    while let Some(e) = rx.recv().await {
        events.push(e);
    }
    for t in tasks {
        t.await.expect("side");
    }
    events.sort_by_key(|(_, granted, _)| *granted);
    let mut handovers: Vec<Duration> =
        events.windows(2).map(|w| w[1].1.saturating_duration_since(w[0].2)).collect();
    assert_eq!(handovers.len(), HANDOVERS - 1);
    handovers.sort();
    let at = |q: usize| handovers[(handovers.len() - 1) * q / 100];
    println!("{HANDOVERS} hand-overs: median {:?}, p90 {:?}, p99 {:?}", at(50), at(90), at(99));
}

/// A semaphore's gate is the lock recipe's queue: a dead waiter at the gate, ahead of a live
/// one, is passed over too once a permit is given back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_waiter_at_a_semaphore_gate_is_passed_over() {
    let (holder, live) = (zk_lock().await, zk_lock().await);
    let name = format!("gate-{}", run_id());
    let sem = lock_core::Semaphore::new(&locker(&holder), name.clone(), 1).expect("semaphore");
    let permit = sem.try_acquire().await.expect("try").expect("a free permit");
    let gate = format!("{}/locks", holder.lock_dir(&sem.pool_key()));
    let dead = dead_session().await;
    let ghost = enqueue_raw(&dead, &gate, WAITING_DATA).await;
    let (tx, mut granted) = mpsc::unbounded_channel();
    let theirs = lock_core::Semaphore::new(&locker(&live), name, 1).expect("semaphore");
    tokio::spawn(async move {
        let p = theirs.acquire().wait(DEAD_SESSION).acquire().await.expect("waiter acquires");
        let _ = tx.send(p);
    });
    queued(&holder.client(), &gate, 2).await;

    let released = Instant::now();
    permit.release().await.expect("release");
    let next = within(PASS_OVER, "the live waiter gets the permit", granted.recv()).await.expect("granted");
    println!(
        "a dead waiter at the gate: the live one got the permit {:?} after the release",
        released.elapsed()
    );
    assert!(dead.check_stat(&ghost).await.expect("stat").is_none(), "the dead waiter was passed over");
    next.release().await.expect("release");
}
