//! Acquisition by majority: grants and exclusion, minorities and split votes undone, failing and
//! hanging members, the validity time less the drift.

use super::*;

#[tokio::test(start_paused = true)]
async fn empty_quorum_is_refused_and_capabilities_are_honest() {
    assert!(matches!(QuorumBackend::new(Vec::new()), Err(LockError::InvalidConfig { .. })));
    let q = quorum(&members(5));
    assert_eq!(q.quorum(), 3);
    assert_eq!(quorum(&members(4)).quorum(), 3);
    let c = q.capabilities();
    assert!(
        c.renew && q.notify().is_some() && c.fencing,
        "members that fence and raise their counters: fencing"
    );
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
