//! After the grant: release and renew decided by a quorum, a dropped attempt, and waiters woken
//! by any member's notification.

use super::*;

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
