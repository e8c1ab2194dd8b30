//! The conformance suite: one generic async function per guarantee, run against every backend
//! through `Arc<dyn LockBackend>`, on the clients of any [`Factory`] (whose fault hooks break
//! holds behind their backs; a case whose hook or capability is missing skips loudly).
//! [`conformance_tests!`](crate::conformance_tests) turns them into one named `#[tokio::test]`
//! each.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use lock_core::backend::Capability;
use lock_core::{LeaseState, LockError, Locker, MAX_KEY_BYTES, MultiLock, OwnerToken};
use tokio::time::{Instant, timeout};

use crate::factory::{Client, Factory};
use crate::poll::{eventually, within};
// Also reachable here, where backend fault tests have always found them.
pub use crate::factory::{key, skip};
pub use crate::poll::cut_after;

async fn locker<F: Factory + ?Sized>(f: &F) -> Locker {
    f.client().await.locker()
}

/// Panic with `what` unless `key` is free for `l` right now (it is taken and released again).
async fn assert_free(l: &Locker, key: &str, what: &str) {
    match l.try_lock(key).await {
        Ok(Some(g)) => g.release().await.unwrap_or_else(|e| panic!("{what}: release: {e}")),
        Ok(None) => panic!("{what}: {key:?} is held"),
        Err(e) => panic!("{what}: {e}"),
    }
}

/// Panic with `what` unless `key` is held (by anyone but `l`'s next attempt) right now.
async fn assert_held(l: &Locker, key: &str, what: &str) {
    assert!(l.try_lock(key).await.expect("try").is_none(), "{what}: {key:?} is free");
}

/// A new client, or `None` after a loud skip of `case` when its backend lacks what `has` checks.
async fn client_with<F: Factory + ?Sized>(
    f: &F,
    case: &str,
    has: fn(&Capability) -> bool,
    lacks: &str,
) -> Option<Client> {
    let c = f.client().await;
    if has(&c.backend.capabilities()) {
        Some(c)
    } else {
        skip(&f.label(), case, lacks);
        None
    }
}

/// 1. Acquire/release round trip; `try_lock` on a held key answers "held" without waiting.
pub async fn round_trip<F: Factory + ?Sized>(f: &F) {
    let (a, b) = (locker(f).await, locker(f).await);
    let k = key("round_trip");
    let g = a.try_lock(&k).await.expect("try_lock").expect("free key must be acquired");
    assert_eq!(g.key(), k);
    // A fencing token only where the backend has real ones.
    assert_eq!(
        g.fence().is_some(),
        a.backend().capabilities().fencing,
        "fence without fencing, or none with"
    );
    let t = Instant::now();
    assert!(b.try_lock(&k).await.expect("try_lock").is_none(), "held key must not be acquired");
    assert!(t.elapsed() < Duration::from_millis(500), "try_lock waited {:?}", t.elapsed());
    g.release().await.expect("release");
    let g2 = b.try_lock(&k).await.expect("try_lock").expect("released key must be free");
    g2.release().await.expect("release");
}

/// 2. Mutual exclusion under contention: 10 tasks, each on its own client, add 1000 times to a
///    non-atomic counter (read, yield, write); the total must be exactly 10 000.
pub async fn mutual_exclusion<F: Factory + ?Sized>(f: &F) {
    const TASKS: usize = 10;
    const ROUNDS: u64 = 1000;
    let k = key("mutex");
    let counter = Arc::new(AtomicU64::new(0));
    let inside = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..TASKS {
        let l = locker(f).await;
        let (k, counter, inside) = (k.clone(), counter.clone(), inside.clone());
        tasks.push(tokio::spawn(async move {
            let mut fences = Vec::with_capacity(ROUNDS as usize);
            for _ in 0..ROUNDS {
                let g =
                    l.lock(&k).lease(Duration::from_secs(10)).wait(Duration::from_secs(60)).acquire().await;
                let g = g.expect("acquire under contention");
                assert_eq!(inside.fetch_add(1, Ordering::SeqCst), 0, "two holders at once");
                // Deliberately not atomic: only the lock keeps this exact.
                let v = counter.load(Ordering::SeqCst);
                tokio::task::yield_now().await;
                counter.store(v + 1, Ordering::SeqCst);
                inside.fetch_sub(1, Ordering::SeqCst);
                fences.push(g.fence());
                // What the guard knew before the release, for a failure to say why it was lost.
                let (state, deadline) = (g.state(), g.lease_deadline());
                if let Err(e) = g.release().await {
                    let left = deadline.map(|d| d.saturating_duration_since(tokio::time::Instant::now()));
                    panic!("release: {e:?} (state before: {state:?}, lease left: {left:?})");
                }
            }
            fences
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(within(Duration::from_secs(120), "contended increments", t).await.expect("task"));
    }
    assert_eq!(counter.load(Ordering::SeqCst), TASKS as u64 * ROUNDS);
    if f.client().await.backend.capabilities().fencing {
        all.sort();
        all.dedup();
        assert_eq!(all.len() as u64, TASKS as u64 * ROUNDS, "every acquisition needs its own fencing token");
    } else {
        assert!(all.iter().all(Option::is_none), "a backend without fencing handed out a fence");
    }
}

/// 3a. A blocked waiter gets the lock promptly after the holder releases.
pub async fn waiter_wakes_on_release<F: Factory + ?Sized>(f: &F) {
    let (a, b) = (locker(f).await, locker(f).await);
    let k = key("wake");
    let g = a.lock(&k).lease(Duration::from_secs(30)).try_acquire().await.expect("try").expect("free");
    let k2 = k.clone();
    let waiter = tokio::spawn(async move {
        let g = b.lock(&k2).wait(Duration::from_secs(10)).acquire().await;
        (Instant::now(), g)
    });
    // Give the waiter time to block; if it has not, the assertions below still hold.
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!waiter.is_finished(), "waiter must block while the key is held");
    let released = Instant::now();
    g.release().await.expect("release");
    let (got, g2) = within(Duration::from_secs(5), "waiter", waiter).await.expect("task");
    let g2 = g2.expect("waiter acquires after release");
    let handoff = got - released;
    assert!(
        handoff < Duration::from_secs(1),
        "handoff took {handoff:?}; a 30 s lease must not be waited out"
    );
    g2.release().await.expect("release");
}

/// 3b. A waiter with a deadline gets `Timeout` close to it (300 ms wait, +1 s tolerance).
pub async fn wait_times_out<F: Factory + ?Sized>(f: &F) {
    let (a, b) = (locker(f).await, locker(f).await);
    let k = key("timeout");
    let g = a.lock(&k).lease(Duration::from_secs(30)).try_acquire().await.expect("try").expect("free");
    let wait = Duration::from_millis(300);
    let t = Instant::now();
    match b.lock(&k).wait(wait).acquire().await {
        Err(LockError::Timeout { key: ek, waited }) => {
            assert_eq!(ek, k);
            assert!(waited >= wait, "reported wait {waited:?} shorter than the deadline");
            assert!(t.elapsed() < wait + Duration::from_secs(1), "timeout came late: {:?}", t.elapsed());
        }
        other => panic!("expected Timeout, got {other:?}"),
    }
    g.release().await.expect("release");
}

/// Make `client`'s lease on `k` run out: the caller waits it out, and session-bound backends
/// (no lease to wait out) have it severed.
async fn expire(client: &Client, k: &str) {
    if client.backend.capabilities().session_bound
        && let Err(u) = client.faults.sever(k).await
    {
        panic!("session-bound backends need a sever hook: {u}");
    }
}

/// 4. An expired lease can be taken over, and the stale owner's release afterwards must not
///    remove the new owner's lock (the seed's "A's delete frees B's lock" bug).
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

/// 5. A release with a foreign token is rejected and changes nothing; release is idempotent
///    for its owner.
pub async fn foreign_release_rejected<F: Factory + ?Sized>(f: &F) {
    let ca = f.client().await.backend;
    let (a, b) = (Locker::new(ca.clone()), locker(f).await);
    let k = key("foreign");
    let g = a.lock(&k).lease(Duration::from_secs(30)).try_acquire().await.expect("try").expect("free");
    let other = f.client().await.backend;
    assert!(
        !other.release(&k, OwnerToken::random()).await.expect("foreign release"),
        "foreign token released"
    );
    assert_held(&b, &k, "foreign release freed the lock").await;
    let owner = g.owner();
    g.release().await.expect("owner release");
    assert!(!ca.release(&k, owner).await.expect("second release"), "second release must report not held");
    let gb = b.try_lock(&k).await.expect("try").expect("free after release");
    assert!(!ca.release(&k, owner).await.expect("stale release"), "old owner released the new holder");
    assert_held(&a, &k, "new holder's lock must survive").await;
    gb.release().await.expect("release");
}

/// 6. Renew extends the lease past the original TTL; renew after loss reports the loss.
pub async fn renew_extends_lease<F: Factory + ?Sized>(f: &F) {
    let Some(ca) = client_with(f, "renew_extends_lease", |c| c.renew, "backend has no renew").await else {
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
    let Some(ca) = client_with(f, "watchdog_keeps_lock", |c| c.renew, "backend has no renew").await else {
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

/// 10. A cancelled (dropped) acquire leaves no lock behind.
pub async fn cancelled_acquire_leaves_nothing<F: Factory + ?Sized>(f: &F) {
    let (a, b, c) = (locker(f).await, locker(f).await, locker(f).await);
    let k = key("cancel");
    let g = a.lock(&k).lease(Duration::from_secs(30)).try_acquire().await.expect("try").expect("free");
    // A waiter gives up (its future is dropped) while the key is held.
    let r = timeout(Duration::from_millis(100), b.lock(&k).wait(Duration::from_secs(30)).acquire()).await;
    assert!(r.is_err(), "waiter cannot have acquired a held key");
    g.release().await.expect("release");
    let t = Instant::now();
    let g = c.lock(&k).wait(Duration::from_secs(5)).acquire().await.expect("free after release");
    assert!(t.elapsed() < Duration::from_secs(2), "cancelled waiter held the key for {:?}", t.elapsed());
    g.release().await.expect("release");
    // Attempts cut off at arbitrary points must not leak either.
    for i in 0..20u64 {
        let cut = Duration::from_micros(50 * i);
        if let Ok(Ok(Some(g))) = timeout(cut, b.try_lock(&k)).await {
            g.release().await.expect("release");
        }
        let g =
            c.lock(&k).wait(Duration::from_secs(5)).acquire().await.expect("cut-off attempt leaked the lock");
        g.release().await.expect("release");
    }
}

/// 11. Dropping a guard releases the lock (best effort) within a bounded time.
pub async fn dropped_guard_releases<F: Factory + ?Sized>(f: &F) {
    let (a, b) = (locker(f).await, locker(f).await);
    let k = key("drop");
    let g = a.lock(&k).lease(Duration::from_secs(30)).try_acquire().await.expect("try").expect("free");
    drop(g);
    let t = Instant::now();
    let g = b.lock(&k).wait(Duration::from_secs(5)).acquire().await.expect("dropped guard must release");
    assert!(t.elapsed() < Duration::from_secs(2), "release after drop took {:?}", t.elapsed());
    g.release().await.expect("release");
}

/// 12. Reentrancy: a nested acquisition by the same owner succeeds and only the outermost
///     release frees the key.
pub async fn reentrant_nesting<F: Factory + ?Sized>(f: &F) {
    let Some(ca) = client_with(f, "reentrant_nesting", |c| c.reentrant, "backend is not reentrant").await
    else {
        return;
    };
    let (a, b) = (ca.locker(), locker(f).await);
    let k = key("reenter");
    let outer = a.try_lock(&k).await.expect("try").expect("free");
    let inner = a.lock(&k).owner(outer.owner()).try_acquire().await.expect("try").expect("nested acquire");
    assert_eq!(inner.fence(), outer.fence(), "a nested hold keeps the outer fencing token");
    assert_held(&b, &k, "a nested hold keeps the key").await;
    inner.release().await.expect("inner release");
    assert_held(&b, &k, "inner release freed the outer hold").await;
    outer.release().await.expect("outer release");
    assert_free(&b, &k, "free after outer release").await;
}

/// Keys with bytes that break naive escaping in Redis, SQL, Lua or ZooKeeper paths.
pub const ODD_KEYS: &[&str] = &[
    "with space",
    "quote'single",
    "quote\"double",
    "sql--comment",
    "semi;colon; DROP TABLE locks;",
    "back\\slash",
    "lua]]..'..",
    "{hash}tag}",
    "{",
    "/slash/path/",
    ".",
    "..",
    "percent%25%",
    "ünïcødé-ключ-锁-🔒",
    "*?[glob]",
];

/// 13. Bad input gets typed errors (never a panic); odd but valid keys work and stay distinct.
pub async fn bad_input<F: Factory + ?Sized>(f: &F) {
    let (a, b) = (locker(f).await, locker(f).await);
    let long = "k".repeat(MAX_KEY_BYTES + 1);
    for bad in ["", long.as_str(), "nul\0byte", "line\nbreak"] {
        assert!(
            matches!(a.try_lock(bad).await, Err(LockError::InvalidKey { .. })),
            "key {bad:?} must be refused"
        );
    }
    let k = key("bad");
    assert!(matches!(
        a.lock(&k).lease(Duration::ZERO).try_acquire().await,
        Err(LockError::InvalidLease { .. })
    ));
    assert!(matches!(
        a.lock(&k).lease(Duration::MAX).try_acquire().await,
        Err(LockError::InvalidLease { .. })
    ));
    assert!(matches!(a.lock(&k).wait(Duration::MAX).acquire().await, Err(LockError::InvalidWait { .. })));
    // Absurd durations anywhere saturate or give typed errors, never an overflow panic.
    assert!(matches!(
        MultiLock::new().with(&a, &k).acquire(Duration::MAX, None).await,
        Err(LockError::InvalidWait { .. })
    ));
    let held = a.lock(&k).lease(Duration::from_secs(30)).try_acquire().await.expect("try").expect("free");
    let slow = locker(f).await.with_poll_backoff(Duration::MAX, Duration::MAX);
    assert!(matches!(
        slow.lock(&k).wait(Duration::from_millis(50)).acquire().await,
        Err(LockError::Timeout { .. })
    ));
    assert!(matches!(
        locker(f).await.with_clock_drift(f64::NAN, Duration::MAX),
        Err(LockError::InvalidConfig { .. })
    ));
    held.release().await.expect("release");
    assert!(matches!(
        locker(f).await.with_watchdog_lease(Duration::ZERO),
        Err(LockError::InvalidLease { .. })
    ));
    // The longest valid key, built on the run prefix so runs stay apart.
    let mut longest = key("max");
    while longest.len() < MAX_KEY_BYTES {
        longest.push('x');
    }
    let base = key("odd");
    let mut keys: Vec<String> = ODD_KEYS.iter().map(|k| format!("{base}{k}")).collect();
    keys.push(longest);
    let mut guards = Vec::new();
    for k in &keys {
        let g = a.try_lock(k).await.expect("odd key").unwrap_or_else(|| panic!("odd key {k:?} must be free"));
        assert!(b.try_lock(k).await.expect("odd key").is_none(), "odd key {k:?} not exclusive");
        guards.push(g);
    }
    // Distinct odd keys must not alias one another or their common prefix.
    let prefix = b.try_lock(&base).await.expect("prefix").expect("odd keys aliased their prefix");
    prefix.release().await.expect("release prefix");
    for g in guards {
        g.release().await.expect("release odd key");
    }
    for k in &keys {
        assert_free(&b, k, "released odd key is free").await;
    }
}

/// 14. Distinct keys are independent; MultiLock is all-or-nothing.
pub async fn keys_independent_multilock<F: Factory + ?Sized>(f: &F) {
    let (a, b) = (locker(f).await, locker(f).await);
    let base = key("multi");
    let keys: Vec<String> = (0..20).map(|i| format!("{base}-{i}")).collect();
    let mut guards = Vec::new();
    for k in &keys {
        guards.push(a.try_lock(k).await.expect("try").expect("distinct keys are independent"));
    }
    for g in guards {
        g.release().await.expect("release");
    }
    let (k1, k2, k3) = (keys[0].clone(), keys[1].clone(), keys[2].clone());
    let blocker = b.lock(&k2).lease(Duration::from_secs(30)).try_acquire().await.expect("try").expect("free");
    let multi = MultiLock::new().with(&a, &k3).with(&a, &k1).with(&a, &k2);
    match multi.acquire(Duration::from_millis(200), None).await {
        Err(LockError::Timeout { key, .. }) => assert_eq!(key, k2),
        other => panic!("multi-lock over a held key must time out, got {other:?}"),
    }
    for k in [&k1, &k3] {
        assert_free(&b, k, "partial multi-lock must be rolled back").await;
    }
    blocker.release().await.expect("release");
    let dup = MultiLock::new().with(&a, &k1).with(&a, &k1);
    assert!(matches!(dup.acquire(Duration::ZERO, None).await, Err(LockError::InvalidConfig { .. })));
    let m = MultiLock::new().with(&a, &k3).with(&a, &k1).with(&a, &k2);
    let mg = m.acquire(Duration::from_secs(5), None).await.expect("multi-lock");
    assert_eq!(mg.guards().len(), 3);
    assert_held(&b, &k2, "the multi-lock holds every key").await;
    mg.release().await.expect("release all");
    for k in [&k1, &k2, &k3] {
        assert_free(&b, k, "free after multi release").await;
    }
}

/// Median time of a `try_lock` + release on a free key: the scale of the cut-off offsets.
async fn median_acquire(l: &Locker, case: &str) -> Duration {
    let mut samples = Vec::new();
    for _ in 0..21 {
        let k = key(case);
        let t = std::time::Instant::now();
        let g = l.try_lock(&k).await.expect("try").expect("free");
        samples.push(t.elapsed());
        g.release().await.expect("release");
    }
    samples.sort();
    samples[samples.len() / 2]
}

/// Bound on how long a cancelled attempt's grant may outlive it: the background cleanup is one
/// round trip (plus scheduling on a loaded 2-core machine).
pub const CLEANUP_BOUND: Duration = Duration::from_millis(250);

/// 15. Renew and nested acquisition only ever extend: a short renewal or a short nested lease
///     never cuts a longer lease the key still has.
pub async fn renew_only_extends<F: Factory + ?Sized>(f: &F) {
    let Some(ca) = client_with(f, "renew_only_extends", |c| c.renew, "backend has no renew").await else {
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
    let Some(ca) = client_with(f, case, |c| c.reentrant, "backend is not reentrant").await else { return };
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

/// 18. Acquisitions cut off at sub-millisecond offsets around the median acquire time, on a
///     free key, leave nothing behind: the key is free again within [`CLEANUP_BOUND`].
pub async fn cancel_on_free_key<F: Factory + ?Sized>(f: &F) {
    const ROUNDS: u32 = 400;
    let (a, c) = (locker(f).await, locker(f).await);
    let median = median_acquire(&a, "cutmed").await;
    let k = key("cut");
    let mut worst = Duration::ZERO;
    let mut cut = 0;
    for i in 0..ROUNDS {
        let offset = median * (i % 40) / 20; // 0 .. 2x the median
        let out = if i % 2 == 0 {
            cut_after(a.lock(&k).lease(Duration::from_secs(30)).try_acquire(), offset).await
        } else {
            cut_after(
                a.lock(&k).lease(Duration::from_secs(30)).wait(Duration::from_secs(5)).acquire(),
                offset,
            )
            .await
            .map(|r| r.map(Some))
        };
        match out {
            Some(r) => {
                if let Some(g) = r.expect("attempt") {
                    g.release().await.expect("release");
                }
            }
            None => cut += 1,
        }
        let t = Instant::now();
        loop {
            if let Some(g) = c.try_lock(&k).await.expect("try") {
                g.release().await.expect("release");
                break;
            }
            assert!(t.elapsed() < CLEANUP_BOUND, "a cut-off attempt (offset {offset:?}) left the key held");
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        worst = worst.max(t.elapsed());
    }
    eprintln!(
        "[{}] {cut} of {ROUNDS} attempts cut off (median {median:?}); key free again within {worst:?}",
        f.label()
    );
}

/// 19. A cleanup never frees a later grant to the same owner: neither the late cleanup of a
///     cut-off attempt, nor the late release of a guard whose hold was lost and taken again.
pub async fn late_cleanup_spares_later_grant<F: Factory + ?Sized>(f: &F) {
    const ROUNDS: u32 = 200;
    let ca = f.client().await;
    let (a, b) = (ca.locker(), locker(f).await);
    let median = median_acquire(&a, "latemed").await;
    let long = Duration::from_secs(30);
    let mut temporary = 0;
    for i in 0..ROUNDS {
        let k = key("late");
        let owner = OwnerToken::random();
        let offset = median * (i % 20) / 10;
        if let Some(r) = cut_after(a.lock(&k).owner(owner).lease(long).try_acquire(), offset).await {
            if let Some(g) = r.expect("attempt") {
                g.release().await.expect("release");
            }
            continue;
        }
        // The cut-off attempt's cleanup may still be on its way: a second grant to the same
        // owner must survive it.
        let g = match a.lock(&k).owner(owner).lease(long).try_acquire().await {
            Ok(Some(g)) => g,
            Ok(None) => continue,
            // Not a safety question; counted so that a backend failing all the time still fails.
            Err(e) if e.is_temporary() => {
                eprintln!("[{}] late_cleanup: temporary error on the second grant: {e}", f.label());
                temporary += 1;
                continue;
            }
            Err(e) => panic!("second grant: {e}"),
        };
        for _ in 0..3 {
            assert_held(&b, &k, &format!("a late cleanup freed a later grant (offset {offset:?})")).await;
        }
        let _ = g.release().await;
    }
    assert!(temporary < ROUNDS / 10, "{temporary} of {ROUNDS} second grants failed with temporary errors");
    // A guard whose hold was lost, released after the same owner took the key again.
    let k = key("lateguard");
    let owner = OwnerToken::random();
    let lease = f.lease();
    let g1 = a.lock(&k).owner(owner).lease(lease).try_acquire().await.expect("try").expect("free");
    // Without a sever hook the lease runs out instead.
    if let Err(u) = ca.faults.sever(&k).await {
        eprintln!("[{}] late_cleanup_spares_later_grant: {u}; waiting the lease out instead", f.label());
    }
    within(lease * 10 + Duration::from_secs(5), "first hold lost", g1.lost()).await;
    let g2 = a.lock(&k).owner(owner).lease(long).wait(lease * 10).acquire().await.expect("taken again");
    assert!(
        matches!(g1.release().await, Err(LockError::LeaseLost { .. })),
        "stale release must report the loss"
    );
    assert_held(&b, &k, "the stale guard's release freed the new hold").await;
    g2.release().await.expect("release");
}

/// 20. `inspect` tells free from held without taking anything, with the holder's fence where it
///     reports one; a backend that cannot tell says `Unsupported`.
pub async fn inspect_without_acquiring<F: Factory + ?Sized>(f: &F) {
    let (a, b) = (locker(f).await, locker(f).await);
    let k = key("inspect");
    let info = match a.backend().inspect(&k).await {
        Ok(i) => i,
        Err(LockError::Unsupported { .. }) => {
            return skip(&f.label(), "inspect_without_acquiring", "the backend cannot look without locking");
        }
        Err(e) => panic!("inspect: {e}"),
    };
    assert!(!info.held, "a fresh key is free: {info:?}");
    let g = a
        .lock(&k)
        .lease(Duration::from_secs(30))
        .try_acquire()
        .await
        .expect("try")
        .expect("inspect took nothing");
    let info = b.backend().inspect(&k).await.expect("inspect");
    assert!(info.held, "{info:?}");
    if let (Some(fi), Some(fg)) = (info.fence, g.fence()) {
        assert_eq!(fi, fg, "inspect reports the holder's fence");
    }
    if let Some(r) = info.remaining {
        assert!(r <= Duration::from_secs(30), "{r:?}");
    }
    assert_held(&b, &k, "inspect must not free or take the lock").await;
    if let Some(o) = &info.owner {
        assert!(!o.contains(&g.owner().to_string()), "inspect must not hand out the owner token: {o}");
    }
    g.release().await.expect("release");
    assert!(!b.backend().inspect(&k).await.expect("inspect").held, "released key shows free");
}

/// Expand the conformance suite into one `#[tokio::test]` per case. The argument is an
/// expression (it may `.await`) evaluated in each test to build a [`Factory`].
#[macro_export]
macro_rules! conformance_tests {
    ($factory:expr) => {
        $crate::conformance_tests!(@cases $factory;
            round_trip, mutual_exclusion, waiter_wakes_on_release, wait_times_out,
            expired_lease_taken_over, foreign_release_rejected, renew_extends_lease,
            watchdog_keeps_lock, fencing_tokens_increase, lost_signal_fires,
            cancelled_acquire_leaves_nothing, dropped_guard_releases, reentrant_nesting,
            bad_input, keys_independent_multilock, renew_only_extends, lost_reaches_nested_guards,
            lost_before_successor, cancel_on_free_key, late_cleanup_spares_later_grant,
            inspect_without_acquiring);
    };
    (@cases $factory:expr; $($case:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() {
                let factory = $factory;
                $crate::conformance::$case(&factory).await;
            }
        )*
    };
}
