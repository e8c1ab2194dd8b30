//! The read-write lock cases of losses: a part severed, a crashed writer, a part lost while a
//! writer waits for the others.

use std::time::Duration;

use lock_core::{LockError, RwLock};

use super::rwlock::rw;
use crate::factory::{Factory, key, skip};
use crate::poll::{outlasting_its_lease, within};

/// A reader's lost signal fires when its slot is severed behind its back.
pub async fn rw_reader_lost_signal_fires<F: Factory + ?Sized>(f: &F) {
    let c = f.client().await;
    let lease = f.lease();
    let l = c.locker().with_watchdog_lease(lease).expect("lease");
    let r = RwLock::new(&l, key("rw_rlost")).expect("rwlock").with_reader_slots(2).expect("slots");
    let g = r.read().try_acquire().await.expect("try").expect("free");
    if let Err(u) = c.faults.sever(g.key()).await {
        return skip(&f.label(), "rw_reader_lost_signal_fires", u);
    }
    within(lease * 10 + Duration::from_secs(5), "reader lost signal", g.lost()).await;
    assert!(g.is_lost());
    assert!(matches!(g.release().await, Err(LockError::LeaseLost { .. })));
}

/// A writer's lost signal fires when any one part (here a reader slot) is severed.
pub async fn rw_writer_lost_signal_fires<F: Factory + ?Sized>(f: &F) {
    let c = f.client().await;
    let lease = f.lease();
    let l = c.locker().with_watchdog_lease(lease).expect("lease");
    let r = RwLock::new(&l, key("rw_wlost")).expect("rwlock").with_reader_slots(3).expect("slots");
    let g = r.write().try_acquire().await.expect("try").expect("free");
    assert!(!g.is_lost());
    let part = g.slots().get(1).map_or(g.gate().key(), |slot| slot.key());
    if let Err(u) = c.faults.sever(part).await {
        return skip(&f.label(), "rw_writer_lost_signal_fires", u);
    }
    within(lease * 10 + Duration::from_secs(5), "writer lost signal", g.lost()).await;
    assert!(g.is_lost());
    assert!(matches!(g.release().await, Err(LockError::LeaseLost { .. })));
    // Every other part was released: the lock is free again.
    let g =
        r.write().wait(Duration::from_secs(5)).acquire().await.expect("free after a lost writer's release");
    g.release().await.expect("release");
}

/// A writer that crashes (abandons its guard, drops its client) frees the lock when its leases
/// or session end.
pub async fn rw_crashed_writer_frees_lock<F: Factory + ?Sized>(f: &F) {
    let name = key("rw_crash");
    let lease = f.lease();
    let c = f.client().await;
    let r = RwLock::new(&c.locker(), &name).expect("rwlock").with_reader_slots(2).expect("slots");
    let g = r.write().lease(lease).try_acquire().await.expect("try").expect("free");
    g.abandon();
    drop((r, c));
    let b = rw(f, &name, 2).await;
    let g = b.read().lease(lease).wait(Duration::from_secs(15)).acquire().await.expect("reader after crash");
    g.release().await.expect("release");
    let g = b.write().lease(lease).wait(Duration::from_secs(15)).acquire().await.expect("writer after crash");
    g.release().await.expect("release");
}

/// A writer waiting for a reader holds what it gathered (the gate, the free slots); with a
/// fixed lease those run out meanwhile and may be taken by others. The writer is granted only
/// live parts: it gathers again rather than hand out a write side already lost.
pub async fn rw_write_grants_only_live_parts<F: Factory + ?Sized>(f: &F) {
    let name = key("rw_wlive");
    let reader = rw(f, &name, 2).await;
    let held = reader.read().try_acquire().await.expect("try").expect("free");
    // The store's short lease: on NATS a lost hold's key stays for the bucket's TTL.
    let lease = f.lease();
    let waiter = tokio::spawn({
        let w = rw(f, &name, 2).await;
        async move { w.write().lease(lease).wait(Duration::from_secs(15)).acquire().await }
    });
    let probe = rw(f, &name, 2).await;
    let gathered = || async { probe.read().try_acquire().await.expect("try").is_none() };
    let w = outlasting_its_lease("the writer", lease, waiter, gathered, held.release()).await;
    assert!(!w.is_lost(), "granted a write side already lost: {w:?}");
    let e = w.release().await;
    assert!(e.is_ok(), "releasing a live write side: {e:?}");
}

/// An upgradeable read waiting for a writer holds the upgrade gate meanwhile; with a fixed
/// lease the gate runs out and another upgradeable reader could take it. The guard is granted
/// only with a live gate.
pub async fn rw_upgradeable_read_grants_only_live_parts<F: Factory + ?Sized>(f: &F) {
    let case = "rw_upgradeable_read_grants_only_live_parts";
    let name = key("rw_ulive");
    let writer = rw(f, &name, 2).await;
    let held = writer.write().try_acquire().await.expect("try").expect("free");
    let lease = f.lease();
    let asking = rw(f, &name, 2).await;
    if let Err(e @ LockError::Unsupported { .. }) = asking.upgradeable_read().try_acquire().await {
        held.release().await.expect("release");
        return skip(&f.label(), case, e);
    }
    let waiter = tokio::spawn(async move {
        asking.upgradeable_read().lease(lease).wait(Duration::from_secs(15)).acquire().await
    });
    let probe = rw(f, &name, 2).await;
    let gathered = || async { probe.upgradeable_read().try_acquire().await.expect("try").is_none() };
    let u = outlasting_its_lease("the upgradeable read", lease, waiter, gathered, held.release()).await;
    assert!(!u.is_lost(), "granted an upgradeable read already lost: {u:?}");
    let e = u.release().await;
    assert!(e.is_ok(), "releasing a live upgradeable read: {e:?}");
}
