//! Leases: expiry and take-over, renewal, the watchdog, fencing tokens, and the lost signal
//! reaching every guard before a successor holds the key.

use std::time::Duration;

use lock_core::{LeaseState, LockError, MultiLock};
use tokio::time::Instant;

use super::{Factory, assert_free, assert_held, client_with, expire, key, locker, skip};
use crate::poll::{eventually, outlasting_its_lease, within};

/// 4. An expired lease can be taken over, and the stale owner's release afterwards must not
///    remove the new owner's lock.
pub async fn expired_lease_taken_over<F: Factory + ?Sized>(f: &F) {
    let ca = f.client().await;
    let (a, b, c) = (ca.locker(), locker(f).await, locker(f).await);
    let k = key("expire");
    let ga = a.lock(&k).lease(f.lease()).try_acquire().await.expect("try").expect("free");
    expire(&ca, &k).await;
    let gb = b.lock(&k).wait(f.lease() * 10).acquire().await.expect("B takes over the expired lease");
    if ca.backend.capabilities().fencing {
        assert!(gb.fence() > ga.fence(), "fencing token must grow across expiry");
    }
    match ga.release().await {
        Err(LockError::LeaseLost { .. }) => {}
        other => panic!("stale release must report the lost lease, got {other:?}"),
    }
    assert_held(&c, &k, "stale release freed the new owner's lock").await;
    gb.release().await.expect("new owner releases");
}

/// 6. Renew extends the lease past the original TTL; renew after loss reports the loss.
pub async fn renew_extends_lease<F: Factory + ?Sized>(f: &F) {
    let Some(ca) =
        client_with(f, "renew_extends_lease", |b| b.capabilities().renew, "backend has no renew").await
    else {
        return;
    };
    let (a, b) = (ca.locker(), locker(f).await);
    let k = key("renew");
    let lease = f.lease();
    let g = a.lock(&k).lease(lease).try_acquire().await.expect("try").expect("free");
    g.renew(lease * 5).await.expect("renew");
    tokio::time::sleep(lease * 2).await; // past the original lease, inside the renewed one
    assert_held(&b, &k, "renewed lock expired at the original TTL").await;
    assert!(!g.is_lost(), "renewed lease reported lost");
    if let Err(u) = ca.faults.sever(&k).await {
        eprintln!("[{}] renew_extends_lease: {u}; waiting the renewed lease out instead", f.label());
        tokio::time::sleep(lease * 6).await;
    }
    eventually(Duration::from_secs(10), "renew reports the loss", || {
        let r = g.renew(lease);
        async { matches!(r.await, Err(LockError::LeaseLost { .. })) }
    })
    .await;
    assert!(g.is_lost());
    let _ = g.release().await;
}

/// 7. The watchdog keeps a lock held for 3x its lease without explicit renewal; after release no
///    renewal work remains.
pub async fn watchdog_keeps_lock<F: Factory + ?Sized>(f: &F) {
    let Some(ca) =
        client_with(f, "watchdog_keeps_lock", |b| b.capabilities().renew, "backend has no renew").await
    else {
        return;
    };
    let lease = f.lease();
    let a = ca.locker().with_watchdog_lease(lease).expect("lease");
    let b = locker(f).await;
    let k = key("watchdog");
    let g = a.lock(&k).try_acquire().await.expect("try").expect("free");
    assert_eq!(a.watched_leases(), 1);
    tokio::time::sleep(lease * 3).await;
    assert_held(&b, &k, "watchdog let the lock expire").await;
    assert_eq!(g.state(), LeaseState::Held);
    g.release().await.expect("release");
    assert_eq!(a.watched_leases(), 0, "renewal must stop at release");
    eventually(Duration::from_secs(2), "watchdog task exits", || {
        let running = a.watchdog_running();
        async move { !running }
    })
    .await;
    assert_free(&b, &k, "free after release").await;
}

/// 8. Fencing tokens strictly increase across clients, after an expiry and after a holder's
///    crash (a client dropped without release).
pub async fn fencing_tokens_increase<F: Factory + ?Sized>(f: &F) {
    let k = key("fence");
    let lease = f.lease();
    let a = locker(f).await;
    if !a.backend().capabilities().fencing {
        return skip(&f.label(), "fencing_tokens_increase", "backend declares no fencing tokens");
    }
    let g1 = a.try_lock(&k).await.expect("try").expect("free");
    let f1 = g1.fence();
    g1.release().await.expect("release");

    let cb = f.client().await;
    let b = cb.locker();
    let g2 = b.lock(&k).lease(lease).try_acquire().await.expect("try").expect("free");
    assert!(g2.fence() > f1, "{:?} !> {f1:?}", g2.fence());
    expire(&cb, &k).await;
    let c = locker(f).await;
    let g3 = c.lock(&k).lease(lease).wait(lease * 10).acquire().await.expect("take over expired");
    assert!(g3.fence() > g2.fence(), "after expiry: {:?} !> {:?}", g3.fence(), g2.fence());
    let f3 = g3.fence();
    // Crash: the holder vanishes without releasing.
    g3.abandon();
    drop(c);
    let d = locker(f).await;
    let g4 =
        d.lock(&k).lease(lease).wait(Duration::from_secs(15)).acquire().await.expect("take over after crash");
    assert!(g4.fence() > f3, "after crash: {:?} !> {f3:?}", g4.fence());
    g4.release().await.expect("release");
    drop(g2);
}

/// 9. The lost-lock signal fires when the lease is severed behind the holder's back.
pub async fn lost_signal_fires<F: Factory + ?Sized>(f: &F) {
    let ca = f.client().await;
    let lease = f.lease();
    let a = ca.locker().with_watchdog_lease(lease).expect("lease");
    let k = key("lost");
    let g = a.lock(&k).try_acquire().await.expect("try").expect("free");
    if let Err(u) = ca.faults.sever(&k).await {
        return skip(&f.label(), "lost_signal_fires", u);
    }
    within(lease * 10 + Duration::from_secs(5), "lost signal", g.lost()).await;
    assert!(matches!(g.state(), LeaseState::Lost(_)), "state {:?}", g.state());
    assert!(matches!(g.release().await, Err(LockError::LeaseLost { .. })));
}

/// 15. Renew and nested acquisition only ever extend: a short renewal or a short nested lease
///     never cuts a longer lease the key still has.
pub async fn renew_only_extends<F: Factory + ?Sized>(f: &F) {
    let Some(ca) =
        client_with(f, "renew_only_extends", |b| b.capabilities().renew, "backend has no renew").await
    else {
        return;
    };
    let caps = ca.backend.capabilities();
    let (a, b) = (ca.locker(), locker(f).await);
    let k = key("extend");
    let outer = a.lock(&k).lease(Duration::from_secs(2)).try_acquire().await.expect("try").expect("free");
    let short = Duration::from_millis(200);
    outer.renew(short).await.expect("renew");
    if caps.reentrant {
        let inner = a.lock(&k).owner(outer.owner()).lease(short).try_acquire().await.expect("try");
        let inner = inner.expect("nested acquire");
        inner.renew(short).await.expect("nested renew");
        inner.release().await.expect("nested release");
    }
    // Past every short lease, well inside the outer one (and its drift margin).
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_held(&b, &k, "a shorter renewal or nested lease cut the 2 s lease").await;
    assert_eq!(outer.state(), LeaseState::Held);
    outer.release().await.expect("release");
}

/// 16. A loss reaches every guard of the hold, nested guards included.
pub async fn lost_reaches_nested_guards<F: Factory + ?Sized>(f: &F) {
    let case = "lost_reaches_nested_guards";
    let Some(ca) = client_with(f, case, |b| b.capabilities().reentrant, "backend is not reentrant").await
    else {
        return;
    };
    let lease = f.lease();
    let a = ca.locker().with_watchdog_lease(lease).expect("lease");
    let k = key("lostnest");
    let outer = a.try_lock(&k).await.expect("try").expect("free");
    let inner = a.lock(&k).owner(outer.owner()).try_acquire().await.expect("try").expect("nested");
    let fixed = a.lock(&k).owner(outer.owner()).lease(Duration::from_secs(60)).try_acquire().await;
    let fixed = fixed.expect("try").expect("nested with a long fixed lease");
    if let Err(u) = ca.faults.sever(&k).await {
        return skip(&f.label(), case, u);
    }
    let limit = lease * 10 + Duration::from_secs(5);
    within(limit, "outer lost", outer.lost()).await;
    // A nested guard learns it together with the outer one, not at its own (60 s) deadline.
    within(Duration::from_secs(1), "nested lost", inner.lost()).await;
    within(Duration::from_secs(1), "nested fixed-lease lost", fixed.lost()).await;
    for g in [fixed, inner, outer] {
        assert!(matches!(g.release().await, Err(LockError::LeaseLost { .. })));
    }
}

/// 17. A lease-based holder is told its lease is over at least the clock-drift margin before
///     another client can hold the key.
pub async fn lost_before_successor<F: Factory + ?Sized>(f: &F) {
    let ca = f.client().await;
    if ca.backend.capabilities().session_bound {
        return skip(
            &f.label(),
            "lost_before_successor",
            "session-bound: no lease deadline (backend fault tests)",
        );
    }
    // A wide margin, so that a busy test machine's scheduling delays stay far below it.
    let margin = Duration::from_millis(100);
    let a = ca.locker().with_clock_drift(0.0, margin).expect("drift");
    let b = locker(f).await;
    let k = key("margin");
    let lease = f.lease();
    let g = a.lock(&k).lease(lease).try_acquire().await.expect("try").expect("free");
    let fired = tokio::spawn({
        let lost = g.lost();
        async move {
            lost.await;
            Instant::now()
        }
    });
    let acquired = loop {
        if let Some(g2) = b.try_lock(&k).await.expect("try") {
            break (Instant::now(), g2);
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    };
    let lost_at = within(Duration::from_secs(1), "lost signal", fired).await.expect("task");
    let gap = acquired.0.saturating_duration_since(lost_at);
    eprintln!("[{}] lost fired {gap:?} before a successor held the key (margin {margin:?})", f.label());
    // 20 ms for timer resolution and task wake-up on a loaded machine.
    assert!(
        acquired.0 > lost_at && gap + Duration::from_millis(20) >= margin,
        "holder told {gap:?} before the successor, margin {margin:?}"
    );
    acquired.1.release().await.expect("release");
}

/// A multi-lock waiting for a later key holds the earlier ones; with a fixed lease they run
/// out meanwhile and may be taken by others. The multi-lock is granted only live locks: it
/// gives everything back and takes the set again rather than hand out a lost part.
pub async fn multilock_grants_only_live_parts<F: Factory + ?Sized>(f: &F) {
    let (a, b) = (locker(f).await, locker(f).await);
    let (k1, k2) = (key("multi_live-1"), key("multi_live-2"));
    let blocker = b.try_lock(&k2).await.expect("try").expect("free");
    // The store's short lease: on NATS a lost hold's key stays for the bucket's TTL.
    let lease = f.lease();
    let waiter = tokio::spawn({
        let (a, k1, k2) = (a.clone(), k1.clone(), k2.clone());
        async move {
            MultiLock::new().with(&a, &k1).with(&a, &k2).acquire(Duration::from_secs(15), Some(lease)).await
        }
    });
    let gathered = || async { b.try_lock(&k1).await.expect("try").is_none() };
    let m = outlasting_its_lease("the multi-lock", lease, waiter, gathered, blocker.release()).await;
    assert!(!m.is_lost(), "granted a multi-lock already lost: {:?}", m.guards());
    let e = m.release().await;
    assert!(e.is_ok(), "releasing a live multi-lock: {e:?}");
}
