//! The core's watchdog, lost signal and guard mechanics, against the memory backend wrapped in
//! a fault-injecting decorator. Paused time: the order of deadlines is the point, not their
//! real length.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use lock_core::backend::{AcquireRequest, Attempt, Capability, Grant, RenewItem};
use lock_core::backend::{Notify, WaitQueue};
use lock_core::{
    LeaseState, LockBackend, LockError, LockGuard, Locker, LostReason, MemoryBackend, MultiGuard, MultiLock,
    OwnerToken, Result, async_trait,
};
use tokio::time::Instant;

/// Memory backend whose renewals can be made to fail, and that counts renew calls.
#[derive(Debug, Default)]
struct Flaky {
    inner: MemoryBackend,
    fail_temporary: AtomicBool,
    fail_permanent: AtomicBool,
    renew_calls: AtomicUsize,
    /// Non-zero: grants answer this lease in ms (a hold granted in advance, shorter than asked).
    short_grant_ms: AtomicU64,
    /// Non-zero: each renew call keeps its thread busy this many ms, then answers at once (a
    /// backend that answers from memory, on a large table).
    renew_busy_ms: AtomicU64,
}

#[async_trait]
impl LockBackend for Flaky {
    fn name(&self) -> &'static str {
        "flaky"
    }
    fn capabilities(&self) -> Capability {
        // Grants in advance when told to answer short grants.
        let mut c = self.inner.capabilities();
        c.early_grants = self.short_grant_ms.load(Ordering::SeqCst) > 0;
        c
    }
    async fn try_acquire(&self, req: &AcquireRequest<'_>) -> Result<Attempt> {
        let short = self.short_grant_ms.load(Ordering::SeqCst);
        match self.inner.try_acquire(req).await? {
            Attempt::Acquired(g) if short > 0 => {
                Ok(Attempt::Acquired(Grant { lease: Some(Duration::from_millis(short)), ..g }))
            }
            a => Ok(a),
        }
    }
    async fn release(&self, key: &str, owner: OwnerToken) -> Result<bool> {
        self.inner.release(key, owner).await
    }
    async fn renew(&self, items: &[RenewItem<'_>]) -> Result<Vec<bool>> {
        self.renew_calls.fetch_add(1, Ordering::SeqCst);
        let busy = self.renew_busy_ms.load(Ordering::SeqCst);
        if busy > 0 {
            std::thread::sleep(Duration::from_millis(busy));
        }
        if self.fail_permanent.load(Ordering::SeqCst) {
            return Err(LockError::permanent("flaky", "WRONGTYPE"));
        }
        if self.fail_temporary.load(Ordering::SeqCst) {
            return Err(LockError::temporary("flaky", "connection reset"));
        }
        self.inner.renew(items).await
    }
    fn identity(&self) -> String {
        self.inner.identity()
    }
    async fn inspect(&self, key: &str) -> Result<lock_core::LockInfo> {
        self.inner.inspect(key).await
    }

    fn notify(&self) -> Option<&dyn Notify> {
        self.inner.notify()
    }

    fn queue(&self) -> Option<&dyn WaitQueue> {
        self.inner.queue()
    }
}

fn setup(lease_ms: u64) -> (Arc<Flaky>, Locker) {
    let b = Arc::new(Flaky::default());
    let l = Locker::new(b.clone()).with_watchdog_lease(Duration::from_millis(lease_ms)).expect("lease");
    (b, l)
}

/// A grant shorter than the lease asked for (Redis's hand-over taken without a round trip) is
/// topped up to that lease by one renewal a third into what is left of it, also for a fixed
/// lease, which is then never renewed again.
#[tokio::test(start_paused = true)]
async fn a_short_grant_is_topped_up_once_to_the_lease_asked_for() {
    let (b, l) = setup(6_000);
    b.short_grant_ms.store(1_500, Ordering::SeqCst);
    let lease = Duration::from_secs(20);
    let g = l.lock("k").lease(lease).try_acquire().await.expect("try").expect("free");
    let acquired = Instant::now();
    assert_eq!(b.renew_calls.load(Ordering::SeqCst), 0, "no round trip before the guard");
    let first = g.lease_deadline().expect("deadline");
    assert!(first <= acquired + Duration::from_millis(1_500), "the short grant's deadline");
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(b.renew_calls.load(Ordering::SeqCst), 1, "topped up within a third of it");
    let topped = g.lease_deadline().expect("deadline");
    assert!(topped >= acquired + Duration::from_secs(19), "extended to the lease asked for");
    assert_eq!(g.state(), LeaseState::Held);
    // A fixed lease: nothing more is renewed, and it ends at its deadline.
    tokio::time::timeout(Duration::from_secs(25), g.lost()).await.expect("lost at the fixed lease's end");
    assert_eq!(b.renew_calls.load(Ordering::SeqCst), 1);
    assert_eq!(g.state(), LeaseState::Lost(LostReason::DeadlinePassed));

    // Under the watchdog (6 s): topped up, then renewed every 2 s as usual.
    let g = l.lock("w").try_acquire().await.expect("try").expect("free");
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert_eq!(g.state(), LeaseState::Held, "renewed past the short grant");
    assert!(b.renew_calls.load(Ordering::SeqCst) > 1 + 4, "top-up and the watchdog's renewals");
    g.release().await.expect("release");
}

/// A grant so short that the drift margin would eat half of it, or leave under a second, is
/// topped up before the guard is returned.
#[tokio::test(start_paused = true)]
async fn a_grant_too_short_to_hold_on_is_topped_up_before_returning() {
    let (b, l) = setup(600);
    b.short_grant_ms.store(20, Ordering::SeqCst);
    let lease = Duration::from_secs(2);
    let g = l.lock("k").lease(lease).try_acquire().await.expect("try").expect("free");
    let returned = Instant::now();
    assert_eq!(b.renew_calls.load(Ordering::SeqCst), 1, "topped up before returning");
    assert!(g.lease_deadline().expect("deadline") >= returned + Duration::from_millis(1900));
    g.release().await.expect("release");
}

/// A short grant whose top-up fails before the guard exists is nobody's: it is released, not
/// left to block the key until it expires.
#[tokio::test(start_paused = true)]
async fn a_short_grant_whose_top_up_fails_is_released() {
    let (b, l) = setup(600);
    b.short_grant_ms.store(20, Ordering::SeqCst);
    b.fail_temporary.store(true, Ordering::SeqCst);
    let r = l.lock("k").lease(Duration::from_secs(2)).try_acquire().await;
    assert!(matches!(r, Err(ref e) if e.is_temporary()), "{r:?}");
    b.fail_temporary.store(false, Ordering::SeqCst);
    b.short_grant_ms.store(0, Ordering::SeqCst);
    // The release runs in the background; the memory backend holds the key until it does.
    eventually_free(&l, "k", Duration::from_millis(100)).await;
}

#[tokio::test(start_paused = true)]
async fn transient_renew_failures_are_uncertain_then_lost_at_the_deadline() {
    let (b, l) = setup(300);
    let g = l.try_lock("k").await.expect("try").expect("free");
    let acquired = Instant::now();
    b.fail_temporary.store(true, Ordering::SeqCst);
    let mut states = g.state_changes();
    tokio::time::timeout(Duration::from_secs(2), states.wait_for(|s| *s == LeaseState::Uncertain))
        .await
        .expect("uncertain within 2 s")
        .expect("state channel");
    assert!(!g.is_lost(), "a transient failure is not a loss before the deadline");
    tokio::time::timeout(Duration::from_secs(2), g.lost()).await.expect("lost by the deadline");
    let at = acquired.elapsed();
    assert_eq!(g.state(), LeaseState::Lost(LostReason::DeadlinePassed));
    // Deadline = acquire + lease (no renewal was ever confirmed), fired within scheduling slack.
    assert!(at >= Duration::from_millis(290), "lost too early: {at:?}");
    assert!(at < Duration::from_millis(300 + 150), "lost too late: {at:?}");
    assert!(matches!(g.release().await, Err(LockError::LeaseLost { .. })));
}

#[tokio::test(start_paused = true)]
async fn recovery_before_the_deadline_keeps_the_lease() {
    let (b, l) = setup(600);
    let g = l.try_lock("k").await.expect("try").expect("free");
    b.fail_temporary.store(true, Ordering::SeqCst);
    let mut states = g.state_changes();
    states.wait_for(|s| *s == LeaseState::Uncertain).await.expect("uncertain");
    b.fail_temporary.store(false, Ordering::SeqCst);
    tokio::time::timeout(Duration::from_secs(2), states.wait_for(|s| *s == LeaseState::Held))
        .await
        .expect("held again")
        .expect("state channel");
    tokio::time::sleep(Duration::from_millis(900)).await;
    assert_eq!(g.state(), LeaseState::Held);
    g.release().await.expect("release");
}

#[tokio::test(start_paused = true)]
async fn permanent_renew_error_is_a_loss() {
    let (b, l) = setup(300);
    let g = l.try_lock("k").await.expect("try").expect("free");
    b.fail_permanent.store(true, Ordering::SeqCst);
    tokio::time::timeout(Duration::from_secs(1), g.lost()).await.expect("lost");
    assert_eq!(g.state(), LeaseState::Lost(LostReason::BackendError));
}

#[tokio::test(start_paused = true)]
async fn renewals_are_batched() {
    let (b, l) = setup(600);
    let mut guards = Vec::new();
    for i in 0..250 {
        guards.push(l.try_lock(format!("k{i}")).await.expect("try").expect("free"));
    }
    let before = b.renew_calls.load(Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(600)).await; // about three periods
    let calls = b.renew_calls.load(Ordering::SeqCst) - before;
    // 250 leases in batches of 100 = 3 calls per period; allow for periods split by timing.
    assert!((3..=15).contains(&calls), "{calls} renew calls for 250 leases over ~3 periods");
    assert!(guards.iter().all(|g| g.state() == LeaseState::Held));
    for g in guards {
        g.release().await.expect("release");
    }
    assert_eq!(l.watched_leases(), 0);
}

#[tokio::test(start_paused = true)]
async fn max_hold_stops_renewal() {
    let (_b, l) = setup(200);
    let g = l.lock("k").max_hold(Duration::from_millis(300)).try_acquire().await.expect("try").expect("free");
    let t = Instant::now();
    tokio::time::timeout(Duration::from_secs(2), g.lost()).await.expect("lost after max hold");
    assert!(t.elapsed() >= Duration::from_millis(300), "renewal stopped before max_hold: {:?}", t.elapsed());
    eventually_free(&l, "k", Duration::from_millis(100)).await;
}

/// `key` becomes free on `l` within `limit` (polled every millisecond).
async fn eventually_free(l: &Locker, key: &str, limit: Duration) {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(g) = l.try_lock(key).await.expect("try") {
            g.release().await.expect("release");
            return;
        }
        assert!(Instant::now() < deadline, "{key} not free within {limit:?}");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// The holder is told its lease is over a clock-drift margin before anyone else can take it.
#[tokio::test(start_paused = true)]
async fn lost_fires_a_drift_margin_before_the_server_expiry() {
    let b = Arc::new(MemoryBackend::new());
    let margin = Duration::from_millis(120);
    let l = Locker::new(b.clone()).with_clock_drift(0.0, margin).expect("drift");
    assert_eq!(l.drift_margin(Duration::from_millis(300)), margin);
    let other = Locker::new(b);
    let g = l.lock("k").lease(Duration::from_millis(300)).try_acquire().await.expect("try").expect("free");
    tokio::time::timeout(Duration::from_secs(1), g.lost()).await.expect("lost at the local deadline");
    let lost_at = Instant::now();
    assert!(other.try_lock("k").await.expect("try").is_none(), "lost fired after the server expiry");
    loop {
        if let Some(g2) = other.try_lock("k").await.expect("try") {
            let gap = lost_at.elapsed();
            // The server expiry is counted from after the request was sent: at least the margin.
            assert!(gap + Duration::from_millis(20) >= margin, "told only {gap:?} before a successor");
            g2.release().await.expect("release");
            break;
        }
        assert!(lost_at.elapsed() < Duration::from_secs(1), "never freed");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    assert!(matches!(g.release().await, Err(LockError::LeaseLost { .. })));
}

#[tokio::test(start_paused = true)]
async fn fixed_lease_is_not_renewed_and_expires() {
    let (b, l) = setup(30_000);
    let g = l.lock("k").lease(Duration::from_millis(150)).try_acquire().await.expect("try").expect("free");
    tokio::time::timeout(Duration::from_secs(1), g.lost()).await.expect("lost at the lease deadline");
    assert_eq!(b.renew_calls.load(Ordering::SeqCst), 0);
    assert_eq!(g.state(), LeaseState::Lost(LostReason::DeadlinePassed));
    eventually_free(&l, "k", Duration::from_millis(100)).await;
}

#[test]
fn dropping_a_guard_after_its_runtime_is_gone_does_not_panic() {
    let backend = Arc::new(MemoryBackend::new());
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("rt");
    let g =
        rt.block_on(async { Locker::new(backend.clone()).try_lock("k").await.expect("try").expect("free") });
    drop(rt);
    drop(g); // spawns onto a shut-down runtime: must neither block nor panic
}

#[test]
fn public_types_are_send_and_sync() {
    fn check<T: Send + Sync>() {}
    check::<Locker>();
    check::<LockGuard>();
    check::<MultiGuard>();
    check::<LockError>();
    check::<MemoryBackend>();
    check::<Arc<dyn LockBackend>>();
}

/// A watchdog behind its schedule on a backend that answers at once never waits for anything:
/// it must still give its thread back between rounds, or the tasks queued on that thread (here
/// the application's own, on a single-threaded runtime) never run again.
#[test]
fn a_watchdog_behind_on_a_backend_that_answers_at_once_does_not_starve_its_thread() {
    let (b, l) = setup(150);
    // Every round takes longer than the 50 ms renewal period: the task is always behind.
    b.renew_busy_ms.store(60, Ordering::SeqCst);
    let (done, ran) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("rt");
        rt.block_on(async {
            let g = l.try_lock("busy").await.expect("try").expect("free");
            tokio::time::sleep(Duration::from_millis(200)).await;
            let _ = done.send(g.state());
            g.abandon();
        });
    });
    // On failure the runtime's thread stays stuck in the watchdog: it ends with the process.
    let state = ran.recv_timeout(Duration::from_secs(20)).expect("a 200 ms sleep never ended");
    assert_eq!(state, LeaseState::Held, "the lease, renewed all along");
}

/// A watchdog task that died with its runtime is started again on the next hold, on the
/// runtime that hold is taken on, and keeps renewing there.
#[test]
fn watchdog_restarts_on_a_second_runtime() {
    let backend = Arc::new(MemoryBackend::new());
    let l = Locker::new(backend.clone()).with_watchdog_lease(Duration::from_millis(150)).expect("lease");
    let rt1 = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().expect("rt");
    let first = rt1.block_on(async { l.try_lock("first").await.expect("try").expect("free") });
    assert!(l.watchdog_running());
    drop(rt1); // the task dies with its runtime while a lease is still watched
    first.abandon();
    let rt2 = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("rt");
    rt2.block_on(async {
        let g = l.try_lock("second").await.expect("try").expect("free");
        assert!(l.watchdog_running(), "no watchdog on the second runtime");
        tokio::time::sleep(Duration::from_millis(600)).await; // four leases
        assert_eq!(g.state(), LeaseState::Held, "lease not renewed on the second runtime");
        let other = Locker::new(backend.clone());
        assert!(other.try_lock("second").await.expect("try").is_none(), "lease expired");
        g.release().await.expect("release");
        // The task finds the table empty at its next alarm (here the released lease's next
        // renewal, 50 ms away) and exits.
        let t = Instant::now();
        while l.watchdog_running() {
            assert!(t.elapsed() < Duration::from_millis(500), "watchdog did not stop after the last release");
            tokio::task::yield_now().await;
        }
    });
}

/// Two processes (separate lockers over separate handles of the same two lock spaces) take the
/// same keys in opposite orders, many rounds: the canonical order (key, identity) means
/// neither ever waits for the other in a cycle.
#[tokio::test(start_paused = true)]
async fn multilock_order_is_the_same_in_every_process() {
    let (space1, space2) = (MemoryBackend::new(), MemoryBackend::new());
    let mut tasks = Vec::new();
    for p in 0..2 {
        let (s1, s2) = (space1.clone(), space2.clone());
        tasks.push(tokio::spawn(async move {
            for _ in 0..200 {
                // Fresh handles each round: their addresses differ from the other process's.
                let l1 = Locker::new(Arc::new(s1.clone()));
                let l2 = Locker::new(Arc::new(s2.clone()));
                let m = if p == 0 {
                    MultiLock::new().with(&l1, "a").with(&l2, "a").with(&l1, "b")
                } else {
                    MultiLock::new().with(&l1, "b").with(&l2, "a").with(&l1, "a")
                };
                let g = m
                    .acquire(Duration::from_secs(5), Some(Duration::from_secs(10)))
                    .await
                    .expect("no deadlock");
                tokio::task::yield_now().await;
                g.release().await.expect("release");
            }
        }));
    }
    for t in tasks {
        tokio::time::timeout(Duration::from_secs(60), t).await.expect("rounds finish").expect("task");
    }
}

/// Expired holds do not accumulate in the memory backend, and fences keep increasing.
#[tokio::test(start_paused = true)]
async fn memory_backend_sweeps_expired_holds() {
    let b = Arc::new(MemoryBackend::new());
    let l = Locker::new(b.clone());
    let mut last = None;
    for i in 0..3000 {
        let g = l.lock(format!("k{i}")).lease(Duration::from_millis(10)).try_acquire().await.expect("try");
        let g = g.expect("free");
        assert!(g.fence() > last, "fence went backwards");
        last = g.fence();
        g.abandon(); // never released: only expiry frees it
        if i % 1000 == 999 {
            tokio::time::sleep(Duration::from_millis(15)).await; // let every hold so far expire
        }
    }
    assert!(b.table_len() <= 1100, "{} entries for ~1000 live holds at most", b.table_len());
}
