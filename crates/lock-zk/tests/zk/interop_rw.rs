//! Sharing one read-write lock with Apache Curator's `InterProcessReadWriteLock` (a JVM driven
//! by `lock_testkit::interop::curator_peer`): our `RwLock` on ZooKeeper queues `__READ__` and
//! `__WRIT__` nodes in the gate's directory as Curator does, so readers of either side share,
//! writers exclude everyone, and a waiting writer keeps later readers of either side out.
use lock_core::RwLock;
use lock_testkit::within;
use tokio::sync::oneshot;

use crate::common;

use common::peer::{self, ANSWER, REFUSED_WAIT, acquire_side, answer, release};
use common::{locker, queued, run_id};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_share_and_writers_exclude_across_sides() {
    let Some(mut peer) = peer::curator().await else { return };
    let z = peer::zk_lock("/interop-rw").await;
    let l = locker(&z);
    let rw = RwLock::new(&l, format!("share-{}", run_id())).expect("rwlock");
    assert!(rw.is_native(), "ZooKeeper has shared holds");
    let path = z.lock_dir(rw.gate_key());

    // Curator reads: we read beside it, we cannot write.
    let theirs = acquire_side(&mut peer, &path, ANSWER, "read").await.expect("a free lock");
    assert!(theirs.node.starts_with(&format!("{path}/")) && theirs.node.contains("__READ__"), "{theirs:?}");
    let ours = rw.read().try_acquire().await.expect("try").expect("readers share with Curator's");
    let names = z.client().list_children(&path).await.expect("list");
    assert!(names.iter().filter(|n| n.contains("-__READ__")).count() == 2, "Curator's layout: {names:?}");
    ours.release().await.expect("release");
    assert!(rw.write().try_acquire().await.expect("try").is_none(), "Curator reads: no writer");
    release(&mut peer).await;

    // We write: Curator can neither read nor write; its writer's fence comes after ours.
    let w = rw.write().try_acquire().await.expect("try").expect("free");
    assert_eq!(acquire_side(&mut peer, &path, REFUSED_WAIT, "read").await.map(|a| a.node), None);
    assert_eq!(acquire_side(&mut peer, &path, REFUSED_WAIT, "write").await.map(|a| a.node), None);
    let our_fence = w.fence().expect("fenced").0;
    w.release().await.expect("release");

    // Curator writes: we can neither read nor write; our next writer's fence comes after its.
    let theirs = acquire_side(&mut peer, &path, ANSWER, "write").await.expect("free again");
    assert!(theirs.node.contains("__WRIT__") && theirs.czxid > our_fence, "{theirs:?} after {our_fence}");
    assert!(rw.read().try_acquire().await.expect("try").is_none(), "Curator writes: no reader");
    assert!(rw.write().try_acquire().await.expect("try").is_none(), "Curator writes: no writer");
    release(&mut peer).await;
    let w = rw.write().try_acquire().await.expect("try").expect("free after Curator's writer");
    assert!(w.fence().expect("fenced").0 > theirs.czxid);
    w.release().await.expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_writer_keeps_later_readers_out_across_sides() {
    let (Some(mut first), Some(mut later)) = (peer::curator().await, peer::curator().await) else { return };
    let z = peer::zk_lock("/interop-rw").await;
    let observer = z.client();
    let rw = RwLock::new(&locker(&z), format!("order-{}", run_id())).expect("rwlock");
    let path = z.lock_dir(rw.gate_key());

    // Curator reads, our writer queues, a later Curator reader queues behind our writer.
    acquire_side(&mut first, &path, ANSWER, "read").await.expect("a free lock");
    let (tx, granted) = oneshot::channel();
    let writer = rw.clone();
    tokio::spawn(async move {
        let g = writer.write().wait(ANSWER).acquire().await.expect("our writer");
        let _ = tx.send(g);
    });
    queued(&observer, &path, 2).await;
    later.send(&format!("acquire {path} {} read", ANSWER.as_millis())).await;
    queued(&observer, &path, 3).await;
    assert!(rw.read().try_acquire().await.expect("try").is_none(), "our reader queues behind our writer");
    assert!(
        tokio::time::timeout(REFUSED_WAIT, later.recv(ANSWER)).await.is_err(),
        "Curator's later reader must wait behind our writer"
    );
    release(&mut first).await;
    let w = within(ANSWER, "our writer after Curator's reader", granted).await.expect("granted");
    assert!(
        tokio::time::timeout(REFUSED_WAIT, later.recv(ANSWER)).await.is_err(),
        "Curator's reader must wait while we write"
    );
    w.release().await.expect("release");
    answer(&mut later).await.expect("Curator's reader after our writer");
    release(&mut later).await;

    // We read, Curator's writer queues: a new reader of ours waits behind it.
    let r = rw.read().try_acquire().await.expect("try").expect("free");
    first.send(&format!("acquire {path} {} write", ANSWER.as_millis())).await;
    queued(&observer, &path, 2).await;
    assert!(rw.read().try_acquire().await.expect("try").is_none(), "Curator's writer is waiting");
    r.release().await.expect("release");
    answer(&mut first).await.expect("Curator's writer after our reader");
    assert!(rw.read().try_acquire().await.expect("try").is_none(), "Curator writes");
    release(&mut first).await;
}
