//! Sharing one semaphore with Apache Curator's `InterProcessSemaphoreV2` (a JVM driven by
//! `lock_testkit::interop::curator_peer`): our `Semaphore` on ZooKeeper keeps its permits as
//! Curator does (a gate mutex in `locks/`, one lease node per permit in `leases/`), so Curator's
//! permits and ours count against one limit, and waiters of either kind queue at one gate.
use lock_core::Semaphore;
use lock_testkit::within;
use tokio::sync::oneshot;

use crate::common;

use common::peer::{self, ANSWER, REFUSED_WAIT, acquire_side, answer, release};
use common::{locker, queued, run_id};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn curators_permits_and_ours_count_against_one_limit() {
    let Some(mut peer) = peer::curator().await else { return };
    let z = peer::zk_lock("/interop-sem").await;
    let sem = Semaphore::new(&locker(&z), format!("limit-{}", run_id()), 3).expect("semaphore");
    assert!(sem.is_native(), "ZooKeeper keeps permits itself");
    let path = z.lock_dir(&sem.pool_key());
    let permit = |n: u32| format!("permit:{n}");

    // Curator takes one of three: we get the other two, with slots of their own, and no third.
    let theirs = acquire_side(&mut peer, &path, ANSWER, &permit(3)).await.expect("a free semaphore");
    assert!(theirs.node.starts_with(&format!("{path}/leases/")), "Curator's layout: {theirs:?}");
    let a = sem.try_acquire().await.expect("try").expect("a second permit");
    let b = sem.try_acquire().await.expect("try").expect("a third permit");
    assert_ne!(a.slot(), b.slot(), "two permits, two slots");
    assert!(a.fence().expect("fenced").0 > theirs.czxid, "our lease was created after Curator's");
    let leases = z.client().list_children(&format!("{path}/leases")).await.expect("list");
    assert_eq!(leases.len(), 3, "one lease per permit, Curator's layout: {leases:?}");
    assert!(sem.try_acquire().await.expect("try").is_none(), "Curator's permit counts against ours");
    assert_eq!(sem.available().await.expect("available"), 0);

    // Curator cannot take a fourth either; once it gives its permit back, we can.
    assert_eq!(acquire_side(&mut peer, &path, REFUSED_WAIT, &permit(3)).await.map(|a| a.node), None);
    release(&mut peer).await;
    let c = sem.try_acquire().await.expect("try").expect("Curator's permit is free again");
    assert!(c.slot() != a.slot() && c.slot() != b.slot(), "a slot of its own");

    // Ours given back, Curator takes all three and we none.
    for p in [a, b, c] {
        p.release().await.expect("release");
    }
    for _ in 0..3 {
        acquire_side(&mut peer, &path, ANSWER, &permit(3)).await.expect("our permits are free");
    }
    assert!(sem.try_acquire().await.expect("try").is_none(), "Curator holds every permit");
    for _ in 0..3 {
        release(&mut peer).await;
    }
    let d = sem.try_acquire().await.expect("try").expect("free after Curator's");
    d.release().await.expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_of_either_kind_queue_at_one_gate() {
    let (Some(mut holder), Some(mut later)) = (peer::curator().await, peer::curator().await) else { return };
    let z = peer::zk_lock("/interop-sem").await;
    let observer = z.client();
    let sem = Semaphore::new(&locker(&z), format!("gate-{}", run_id()), 1).expect("semaphore");
    let path = z.lock_dir(&sem.pool_key());
    let gate = format!("{path}/locks");

    // Curator holds the only permit; our waiter holds the gate, a later Curator waiter queues.
    acquire_side(&mut holder, &path, ANSWER, "permit:1").await.expect("a free semaphore");
    let (tx, granted) = oneshot::channel();
    let waiter = sem.clone();
    tokio::spawn(async move {
        let p = waiter.acquire().wait(ANSWER).acquire().await.expect("our waiter");
        let _ = tx.send(p);
    });
    queued(&observer, &gate, 1).await;
    later.send(&format!("acquire {path} {} permit:1", ANSWER.as_millis())).await;
    queued(&observer, &gate, 2).await;

    // The permit goes to our waiter, first at the gate, and then to Curator's.
    release(&mut holder).await;
    let ours = within(ANSWER, "our waiter after Curator's holder", granted).await.expect("granted");
    assert!(
        tokio::time::timeout(REFUSED_WAIT, later.recv(ANSWER)).await.is_err(),
        "Curator's later waiter must wait while we hold the only permit"
    );
    let fence = ours.fence().expect("fenced").0;
    ours.release().await.expect("release");
    let theirs = answer(&mut later).await.expect("Curator's waiter after ours");
    assert!(theirs.czxid > fence, "{theirs:?} after {fence}");
    release(&mut later).await;
}
