//! `QuorumBackend` over in-memory members, some of them made to fail, hang or lag by a small
//! decorator: majority rules for acquire, release and renew, undo of partial grants, the
//! validity time and drift allowance, cancellation and merged notifications. Paused time: the
//! hangs and lags are virtual, so the suite takes no real time.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use lock_core::backend::{AcquireRequest, Attempt, Capability, Grant, RenewItem, Side, Subscription};
use lock_core::{
    FencingToken, LeaseSignal, LockBackend, LockError, Locker, MemoryBackend, OwnerToken, QuorumBackend,
    Result, async_trait, drift_allowance,
};
use tokio::time::{Instant, timeout};

/// What a [`Faulty`] member does with every call.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Fault {
    None,
    /// Answer a temporary error.
    Down,
    /// Answer a permanent error.
    Broken,
    /// Never answer.
    Hang,
    /// Answer after this delay.
    Lag(Duration),
}

/// A member backend: a `MemoryBackend` behind a switchable fault, and a second one for
/// `raise_fence` alone (the fencing write-back).
#[derive(Debug, Clone)]
struct Faulty {
    mem: MemoryBackend,
    fault: Arc<Mutex<Fault>>,
    raise_fault: Arc<Mutex<Fault>>,
    /// Declares `raise_fence` (a member without it makes the quorum unfenced).
    can_raise: bool,
}

impl Faulty {
    fn new() -> Self {
        Faulty {
            mem: MemoryBackend::new(),
            fault: Arc::new(Mutex::new(Fault::None)),
            raise_fault: Arc::new(Mutex::new(Fault::None)),
            can_raise: true,
        }
    }

    fn set(&self, f: Fault) {
        *self.fault.lock().expect("fault") = f;
    }

    fn set_raise(&self, f: Fault) {
        *self.raise_fault.lock().expect("fault") = f;
    }

    /// Advance this member's fence counter by `n` grants (on another key), so the members'
    /// counters drift apart.
    async fn bump(&self, n: usize) {
        let signal = LeaseSignal::new();
        for _ in 0..n {
            let owner = OwnerToken::random();
            let req = AcquireRequest {
                key: "bump",
                owner,
                lease: LEASE,
                wait_until: None,
                signal: &signal,
                side: Side::Exclusive,
            };
            grant(self.mem.try_acquire(&req).await.expect("bump"));
            assert!(self.mem.release("bump", owner).await.expect("release"));
        }
    }

    async fn gate(&self) -> Result<()> {
        let f = *self.fault.lock().expect("fault");
        Self::apply(f).await
    }

    async fn apply(f: Fault) -> Result<()> {
        match f {
            Fault::None => Ok(()),
            Fault::Down => Err(LockError::temporary("faulty", "member down")),
            Fault::Broken => Err(LockError::permanent("faulty", "member misconfigured")),
            Fault::Hang => std::future::pending().await,
            Fault::Lag(d) => {
                tokio::time::sleep(d).await;
                Ok(())
            }
        }
    }
}

#[async_trait]
impl LockBackend for Faulty {
    fn name(&self) -> &'static str {
        "faulty"
    }
    fn capabilities(&self) -> Capability {
        let mut c = self.mem.capabilities();
        c.raise_fence = self.can_raise;
        c
    }
    async fn raise_fence(&self, key: &str, owner: OwnerToken, floor: FencingToken) -> Result<bool> {
        self.gate().await?;
        let f = *self.raise_fault.lock().expect("fault");
        Self::apply(f).await?;
        self.mem.raise_fence(key, owner, floor).await
    }
    async fn try_acquire(&self, req: &AcquireRequest<'_>) -> Result<Attempt> {
        self.gate().await?;
        self.mem.try_acquire(req).await
    }
    async fn release(&self, key: &str, owner: OwnerToken) -> Result<bool> {
        self.gate().await?;
        self.mem.release(key, owner).await
    }
    async fn renew(&self, items: &[RenewItem<'_>]) -> Result<Vec<bool>> {
        self.gate().await?;
        self.mem.renew(items).await
    }
    fn identity(&self) -> String {
        self.mem.identity()
    }
    async fn inspect(&self, key: &str) -> Result<lock_core::LockInfo> {
        self.gate().await?;
        self.mem.inspect(key).await
    }

    async fn leave_queue(&self, key: &str, owner: OwnerToken) -> Result<()> {
        self.mem.leave_queue(key, owner).await
    }
    async fn subscribe(&self, key: &str) -> Result<Option<Subscription>> {
        self.gate().await?;
        self.mem.subscribe(key).await
    }
}

fn members(n: usize) -> Vec<Faulty> {
    (0..n).map(|_| Faulty::new()).collect()
}

fn quorum(ms: &[Faulty]) -> QuorumBackend {
    QuorumBackend::new(ms.iter().map(|m| Arc::new(m.clone()) as Arc<dyn LockBackend>).collect())
        .expect("quorum")
}

fn held_on(ms: &[Faulty], key: &str) -> usize {
    ms.iter().filter(|m| m.mem.remaining(key).is_some()).count()
}

async fn attempt(q: &QuorumBackend, key: &str, owner: OwnerToken, lease: Duration) -> Result<Attempt> {
    let signal = LeaseSignal::new();
    q.try_acquire(&AcquireRequest {
        key,
        owner,
        lease,
        wait_until: None,
        signal: &signal,
        side: Side::Exclusive,
    })
    .await
}

fn grant(a: Attempt) -> Grant {
    match a {
        Attempt::Acquired(g) => g,
        other => panic!("expected a grant, got {other:?}"),
    }
}

/// Take `key` on the given members directly, as another owner would.
async fn occupy(ms: &[Faulty], key: &str, lease: Duration) {
    let signal = LeaseSignal::new();
    let owner = OwnerToken::random();
    for m in ms {
        let req =
            AcquireRequest { key, owner, lease, wait_until: None, signal: &signal, side: Side::Exclusive };
        grant(m.mem.try_acquire(&req).await.expect("occupy"));
    }
}

const LEASE: Duration = Duration::from_millis(400);

#[tokio::test(start_paused = true)]
async fn empty_quorum_is_refused_and_capabilities_are_honest() {
    assert!(matches!(QuorumBackend::new(Vec::new()), Err(LockError::InvalidConfig { .. })));
    let q = quorum(&members(5));
    assert_eq!(q.quorum(), 3);
    assert_eq!(quorum(&members(4)).quorum(), 3);
    let c = q.capabilities();
    assert!(c.renew && c.notify && c.fencing, "members that fence and raise their counters: fencing");
    assert!(!c.reentrant && !c.fair && !c.session_bound && !c.native_wait && !c.failover_safe);
    let mut ms = members(3);
    ms[1].can_raise = false;
    assert!(!quorum(&ms).capabilities().fencing, "a member that cannot raise its counter: no fencing");
}

#[tokio::test(start_paused = true)]
async fn majority_of_three_and_five_grants_and_excludes() {
    for n in [3, 5] {
        let ms = members(n);
        let (a, b) = (Locker::new(Arc::new(quorum(&ms))), Locker::new(Arc::new(quorum(&ms))));
        let g = a.lock("k").lease(LEASE).try_acquire().await.expect("try").expect("free");
        assert_eq!(held_on(&ms, "k"), n, "all healthy members hold it");
        assert!(b.lock("k").lease(LEASE).try_acquire().await.expect("try").is_none(), "n={n}: not exclusive");
        g.release().await.expect("release");
        assert_eq!(held_on(&ms, "k"), 0, "release frees every member");
        let g = b.lock("k").lease(LEASE).try_acquire().await.expect("try").expect("free after release");
        g.release().await.expect("release");
    }
}

#[tokio::test(start_paused = true)]
async fn a_bare_majority_is_enough_and_a_minority_is_undone() {
    let ms = members(5);
    let q = quorum(&ms);
    // Two members taken by someone else: three remain, a quorum.
    occupy(&ms[3..], "bare", Duration::from_secs(10)).await;
    let g = grant(attempt(&q, "bare", OwnerToken::random(), LEASE).await.expect("attempt"));
    assert!(g.lease.is_some());
    assert_eq!(held_on(&ms, "bare"), 5);

    // Three members taken (not the probe, member 0): the two that grant must be freed again.
    let other = Duration::from_secs(10);
    occupy(&ms[1..4], "minority", other).await;
    let t = Instant::now();
    match attempt(&q, "minority", OwnerToken::random(), LEASE).await.expect("attempt") {
        Attempt::Held { retry_after: Some(h) } => assert!(h <= other, "hint {h:?}"),
        a => panic!("expected held with a hint, got {a:?}"),
    }
    assert!(t.elapsed() < Duration::from_millis(200));
    assert_eq!(
        held_on(&ms[..1], "minority") + held_on(&ms[4..], "minority"),
        0,
        "granted members keep the key"
    );
    assert_eq!(held_on(&ms[1..4], "minority"), 3, "the other owner's holds are untouched");

    // The probe member refuses: the attempt ends there, nobody else is asked.
    occupy(&ms[..1], "probe", other).await;
    let a = attempt(&q, "probe", OwnerToken::random(), LEASE).await.expect("attempt");
    assert!(matches!(a, Attempt::Held { retry_after: Some(_) }), "{a:?}");
    assert_eq!(held_on(&ms, "probe"), 1);
}

#[tokio::test(start_paused = true)]
async fn split_vote_answers_held_with_a_short_hint_and_undoes() {
    let ms = members(4);
    let q = quorum(&ms);
    occupy(&ms[2..], "split", Duration::from_secs(10)).await;
    match attempt(&q, "split", OwnerToken::random(), LEASE).await.expect("attempt") {
        Attempt::Held { retry_after: Some(h) } => {
            assert!(h <= lock_core::default_member_timeout(LEASE), "split-vote hint must be short: {h:?}")
        }
        a => panic!("expected held, got {a:?}"),
    }
    assert_eq!(held_on(&ms[..2], "split"), 0);
}

#[tokio::test(start_paused = true)]
async fn failing_members_are_tolerated_up_to_a_minority() {
    let ms = members(5);
    let q = quorum(&ms);
    ms[0].set(Fault::Down);
    ms[1].set(Fault::Broken);
    let g = grant(attempt(&q, "two-down", OwnerToken::random(), LEASE).await.expect("two failing of five"));
    assert!(g.lease.is_some());
    assert_eq!(held_on(&ms[2..], "two-down"), 3);

    ms[2].set(Fault::Down);
    let owner = OwnerToken::random();
    let e = attempt(&q, "three-down", owner, LEASE).await.expect_err("no quorum");
    assert!(e.is_temporary(), "{e:?}");
    let chain = format!("{e} / {}", std::error::Error::source(&e).map(|s| s.to_string()).unwrap_or_default());
    assert!(chain.contains("no quorum for acquire: 2 of 5 reachable"), "{chain}");
    assert_eq!(held_on(&ms, "three-down"), 0, "the two healthy grants must be undone");

    // Permanent failures alone ruling out a quorum: retrying cannot help.
    for m in &ms[..3] {
        m.set(Fault::Broken);
    }
    let e = attempt(&q, "broken", OwnerToken::random(), LEASE).await.expect_err("no quorum");
    assert!(!e.is_temporary(), "{e:?}");
}

#[tokio::test(start_paused = true)]
async fn a_hanging_member_costs_at_most_its_timeout() {
    let ms = members(3);
    let lease = Duration::from_secs(1);
    let per = lock_core::default_member_timeout(lease);
    let q = quorum(&ms);
    ms[2].set(Fault::Hang);
    let t = Instant::now();
    let g = grant(attempt(&q, "hang", OwnerToken::random(), lease).await.expect("one hanging of three"));
    let took = t.elapsed();
    assert!(took >= per && took < per + Duration::from_millis(300), "took {took:?}, member timeout {per:?}");
    assert_eq!(g.lease, Some(lease - drift_allowance(lease)));

    ms[1].set(Fault::Hang);
    let t = Instant::now();
    let e = attempt(&q, "hang2", OwnerToken::random(), lease).await.expect_err("two hanging of three");
    assert!(e.is_temporary());
    // The attempt itself is bounded by the member timeout; the undo of the unknown members by
    // the release bound.
    assert!(t.elapsed() < per + lock_core::MEMBER_TIMEOUT_MAX + Duration::from_millis(300));
    assert_eq!(held_on(&ms, "hang2"), 0);
}

#[tokio::test(start_paused = true)]
async fn grants_count_drift_and_late_majorities_are_undone() {
    let ms = members(3);
    let lease = Duration::from_millis(500);
    let q = quorum(&ms).with_member_timeout(Duration::from_secs(2));
    let g = grant(attempt(&q, "drift", OwnerToken::random(), lease).await.expect("attempt"));
    assert_eq!(g.lease, Some(lease - Duration::from_millis(7)), "lease minus 1 % minus 2 ms");

    // Every member grants, but only after the validity time has passed.
    for m in &ms {
        m.set(Fault::Lag(lease - drift_allowance(lease) + Duration::from_millis(20)));
    }
    let a = attempt(&q, "late", OwnerToken::random(), lease).await.expect("attempt");
    assert!(matches!(a, Attempt::Held { .. }), "a late majority must not count: {a:?}");
    for m in &ms {
        m.set(Fault::None);
    }
    assert_eq!(held_on(&ms, "late"), 0, "late grants must be undone");
}

#[tokio::test(start_paused = true)]
async fn release_needs_a_quorum_and_reports_unknown_outcomes() {
    let ms = members(3);
    let q = quorum(&ms);
    let owner = OwnerToken::random();
    grant(attempt(&q, "rel", owner, LEASE).await.expect("attempt"));
    assert!(!q.release("rel", OwnerToken::random()).await.expect("foreign"), "foreign token released");
    assert_eq!(held_on(&ms, "rel"), 3);
    // One member down: two of three still release.
    ms[0].set(Fault::Down);
    assert!(q.release("rel", owner).await.expect("release with one member down"));
    assert!(!q.release("rel", owner).await.expect("second release"), "double release must be false");

    ms[0].set(Fault::None);
    let owner = OwnerToken::random();
    grant(attempt(&q, "rel2", owner, LEASE).await.expect("attempt"));
    ms[0].set(Fault::Down);
    ms[1].set(Fault::Down);
    let e = q.release("rel2", owner).await.expect_err("one release of three is not a quorum");
    assert!(e.is_temporary(), "{e:?}");

    // A lock that only a minority still holds is not released by the quorum.
    ms[0].set(Fault::None);
    ms[1].set(Fault::None);
    let owner = OwnerToken::random();
    grant(attempt(&q, "rel3", owner, LEASE).await.expect("attempt"));
    ms[0].mem.sever("rel3");
    ms[1].mem.sever("rel3");
    assert!(!q.release("rel3", owner).await.expect("release"), "a minority hold is not the lock");
}

#[tokio::test(start_paused = true)]
async fn renew_is_decided_by_a_quorum_and_unknown_is_an_error() {
    let ms = members(5);
    let q = quorum(&ms);
    let (o1, o2) = (OwnerToken::random(), OwnerToken::random());
    grant(attempt(&q, "r1", o1, LEASE).await.expect("attempt"));
    grant(attempt(&q, "r2", o2, LEASE).await.expect("attempt"));
    let long = Duration::from_secs(5);
    let items =
        [RenewItem { key: "r1", owner: o1, lease: long }, RenewItem { key: "r2", owner: o2, lease: long }];
    assert_eq!(q.renew(&items).await.expect("renew"), vec![true, true]);
    assert!(ms[0].mem.remaining("r1").expect("held") > long, "members renew with the drift allowance on top");

    // r2 severed on three members: lost. Two members down: r1 still renewed by three.
    for m in &ms[..3] {
        m.mem.sever("r2");
    }
    ms[3].set(Fault::Down);
    ms[4].set(Fault::Hang);
    assert_eq!(q.renew(&items).await.expect("renew"), vec![true, false]);

    // r1 confirmed by two members while two are down: unknown, not lost.
    ms[0].mem.sever("r1");
    let e = q.renew(&items[..1]).await.expect_err("undecided renew");
    assert!(e.is_temporary(), "{e:?}");
    // Three members down: nothing can be decided.
    ms[2].set(Fault::Down);
    assert!(q.renew(&items).await.expect_err("no quorum").is_temporary());
}

#[tokio::test(start_paused = true)]
async fn a_dropped_attempt_leaves_nothing_behind() {
    let ms = members(3);
    let q = Arc::new(quorum(&ms).with_member_timeout(Duration::from_secs(2)));
    ms[2].set(Fault::Lag(Duration::from_millis(300)));
    // The fast members grant; the attempt is dropped while the slow one is still pending.
    let r =
        timeout(Duration::from_millis(100), attempt(&q, "cancel", OwnerToken::random(), LEASE * 10)).await;
    assert!(r.is_err(), "the attempt must still be pending");
    let deadline = Instant::now() + Duration::from_secs(2);
    while held_on(&ms, "cancel") > 0 {
        assert!(Instant::now() < deadline, "a dropped attempt left {} member holds", held_on(&ms, "cancel"));
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    ms[2].set(Fault::None);
    let g = Locker::new(q).lock("cancel").lease(LEASE).try_acquire().await.expect("try");
    g.expect("free after the dropped attempt").release().await.expect("release");
}

#[tokio::test(start_paused = true)]
async fn waiters_wake_on_any_members_notification() {
    let ms = members(3);
    ms[0].set(Fault::Down); // cannot subscribe; the other two still notify
    let (a, b) = (Locker::new(Arc::new(quorum(&ms))), Locker::new(Arc::new(quorum(&ms))));
    let g = a.lock("wake").lease(Duration::from_secs(30)).try_acquire().await.expect("try").expect("free");
    let waiter = tokio::spawn(async move {
        let g = b.lock("wake").lease(LEASE).wait(Duration::from_secs(10)).acquire().await;
        (Instant::now(), g)
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!waiter.is_finished(), "the waiter must block while the key is held");
    let released = Instant::now();
    g.release().await.expect("release");
    let (got, g2) = timeout(Duration::from_secs(5), waiter).await.expect("waiter").expect("task");
    assert!(got - released < Duration::from_millis(400), "hand-off took {:?}", got - released);
    g2.expect("waiter acquires").release().await.expect("release");
}

#[tokio::test(start_paused = true)]
async fn without_raise_fence_grant_numbers_are_unique_but_not_fencing_tokens() {
    let mut ms = members(3);
    ms[0].can_raise = false;
    let q = quorum(&ms);
    let mut seen = std::collections::HashSet::new();
    let mut decreased = false;
    let mut last = 0;
    for i in 0..30 {
        // Rotate one member out, and push the counter of the next one out ahead, so the
        // members' counters drift apart.
        for (j, m) in ms.iter().enumerate() {
            m.set(if i % 3 == j { Fault::Down } else { Fault::None });
        }
        ms[(i + 1) % 3].bump(i % 4).await;
        let owner = OwnerToken::random();
        let g = grant(attempt(&q, "fence", owner, LEASE).await.expect("attempt"));
        assert!(seen.insert(g.fence), "grant number {:?} repeated", g.fence);
        decreased |= g.fence.0 < last;
        last = g.fence.0;
        for m in &ms {
            m.set(Fault::None);
        }
        assert!(q.release("fence", owner).await.expect("release"));
    }
    assert!(decreased, "the schedule never made the unfenced numbers go down: it proves nothing below");
}

/// Every subset of failed members of 3 and of 5, in turn, with the counters of the members
/// about to fail pushed far ahead of the others: a minority failed still grants, with a token
/// above every earlier one (the member that drew the last maximum is often among the failed
/// ones next time, so without the write-back the token would go down); a majority failed
/// grants nothing.
#[tokio::test(start_paused = true)]
async fn fences_strictly_increase_across_every_subset_of_failed_members() {
    for n in [3usize, 5] {
        let ms = members(n);
        let q = quorum(&ms);
        let locker = Locker::new(Arc::new(quorum(&ms)));
        let mut last = 0;
        let mut grants = 0;
        for round in 0..2 {
            for failed in 0u32..(1 << n) {
                let down = |j: usize| failed & (1 << j) != 0;
                for (j, m) in ms.iter().enumerate() {
                    if down(j) {
                        // Far ahead of the rest: this member drew (or will draw) the maximum.
                        m.bump(3 + j + round).await;
                    }
                    m.set(if down(j) { Fault::Down } else { Fault::None });
                }
                let owner = OwnerToken::random();
                let r = attempt(&q, "fenced", owner, LEASE).await;
                if (failed.count_ones() as usize) < n - q.quorum() + 1 {
                    let g = grant(r.unwrap_or_else(|e| panic!("n={n} failed={failed:b}: {e}")));
                    assert!(g.fence.0 > last, "n={n} failed={failed:b}: token {} after {last}", g.fence.0);
                    last = g.fence.0;
                    grants += 1;
                    assert!(q.release("fenced", owner).await.expect("release"));
                } else {
                    let e = r.expect_err("a failed majority grants nothing");
                    assert!(e.is_temporary(), "{e:?}");
                }
                // Grants through the Locker carry the same tokens.
                for m in &ms {
                    m.set(Fault::None);
                }
                let g = locker.lock("fenced").lease(LEASE).try_acquire().await.expect("try").expect("free");
                let f = g.fence().expect("a fencing quorum's guard carries its token").0;
                assert!(f > last, "n={n} failed={failed:b}: token {f} after {last}");
                last = f;
                g.release().await.expect("release");
            }
        }
        assert!(grants > 0);
    }
}

#[tokio::test(start_paused = true)]
async fn a_write_back_short_of_a_majority_undoes_the_grant() {
    let ms = members(3);
    let q = quorum(&ms);
    // Members 0 and 1 grant; 1 drew the largest fence, so only 0 needs the write-back, and
    // it fails: one confirmed counter of three.
    ms[1].bump(5).await;
    ms[2].set(Fault::Down);
    ms[0].set_raise(Fault::Down);
    let e = attempt(&q, "wb", OwnerToken::random(), LEASE).await.expect_err("write-back short");
    assert!(e.is_temporary(), "{e:?}");
    let chain = format!("{e} / {}", std::error::Error::source(&e).map(|s| s.to_string()).unwrap_or_default());
    assert!(chain.contains("fence write-back"), "{chain}");
    assert_eq!(held_on(&ms, "wb"), 0, "both grants must be undone");

    // With the third member back, the other majority confirms: granted despite member 0.
    ms[2].set(Fault::None);
    ms[2].bump(10).await;
    let owner = OwnerToken::random();
    let g = grant(attempt(&q, "wb", owner, LEASE).await.expect("two confirmed of three"));
    assert!(q.release("wb", owner).await.expect("release"));
    // Member 0's counter was never raised; the next grant is still above: 1 and 2 hold it.
    ms[0].set_raise(Fault::None);
    ms[2].set(Fault::Down);
    let owner = OwnerToken::random();
    let next = grant(attempt(&q, "wb", owner, LEASE).await.expect("attempt"));
    assert!(next.fence > g.fence, "{:?} after {:?}", next.fence, g.fence);
}

#[tokio::test(start_paused = true)]
async fn a_hanging_write_back_costs_its_timeout_and_a_dropped_one_leaves_nothing() {
    let ms = members(3);
    let lease = Duration::from_secs(1);
    let per = lock_core::default_member_timeout(lease);
    let q = Arc::new(quorum(&ms));
    // Member 2 draws the maximum; member 1's write-back hangs, member 0's confirms.
    ms[2].bump(5).await;
    ms[1].set_raise(Fault::Hang);
    let t = Instant::now();
    let owner = OwnerToken::random();
    grant(attempt(&q, "hang-wb", owner, lease).await.expect("0 and 2 confirm"));
    assert!(t.elapsed() >= per && t.elapsed() < 2 * per + Duration::from_millis(300), "{:?}", t.elapsed());
    assert!(q.release("hang-wb", owner).await.expect("release"));

    // Both write-backs hang; the attempt is dropped during the write-back: every member freed.
    ms[0].set_raise(Fault::Hang);
    let q = Arc::new(quorum(&ms).with_member_timeout(Duration::from_secs(2)));
    let r =
        timeout(Duration::from_millis(100), attempt(&q, "drop-wb", OwnerToken::random(), lease * 10)).await;
    assert!(r.is_err(), "the attempt must still be in its write-back");
    assert_eq!(held_on(&ms, "drop-wb"), 3, "every member granted before the write-back");
    let deadline = Instant::now() + Duration::from_secs(2);
    while held_on(&ms, "drop-wb") > 0 {
        assert!(
            Instant::now() < deadline,
            "a dropped write-back left {} member holds",
            held_on(&ms, "drop-wb")
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}
