//! Force-unlock of a quorum's hold: the grant's token shows as its fence, and an eviction by
//! it takes the owner's hold from every member by each member's own fence; a majority of
//! members evicted is the hold evicted.

use super::*;

/// Members whose counters drift apart, so each member's hold shows a fence of its own.
async fn drifted(n: usize) -> Vec<Faulty> {
    let ms = members(n);
    for (j, m) in ms.iter().enumerate() {
        m.bump(2 * j + 1).await;
    }
    ms
}

#[tokio::test(start_paused = true)]
async fn the_grants_token_names_the_hold_on_every_member() {
    let ms = drifted(3).await;
    let q = quorum(&ms);
    let owner = OwnerToken::random();
    let g = grant(attempt(&q, "ev", owner, LEASE).await.expect("attempt"));
    let mut shown = Vec::new();
    for m in &ms {
        shown.push(m.mem.inspect("ev").await.expect("inspect").fence);
    }
    assert!(shown.iter().any(|f| *f != Some(g.fence)), "the members' fences must differ: {shown:?}");
    let info = q.inspect("ev").await.expect("inspect");
    assert_eq!(info.fence, Some(g.fence), "the quorum shows the grant's token");
    assert!(!q.evict("ev", FencingToken(g.fence.0 + 1)).await.expect("evict"), "another fence");
    assert_eq!(held_on(&ms, "ev"), 3, "left alone");
    assert!(q.evict("ev", g.fence).await.expect("evict"));
    assert_eq!(held_on(&ms, "ev"), 0, "evicted on every member");
    let renewed = q.renew(&[RenewItem { key: "ev", owner, lease: LEASE }]).await.expect("renew");
    assert_eq!(renewed, [false], "the evicted holder's renewal is refused");
    assert!(!q.evict("ev", g.fence).await.expect("evict"), "a resent eviction does nothing");
    let next = grant(attempt(&q, "ev", OwnerToken::random(), LEASE).await.expect("attempt"));
    assert!(next.fence > g.fence, "{:?} after {:?}", next.fence, g.fence);
    assert!(!q.evict("ev", g.fence).await.expect("evict"), "the next holder stays");
    assert_eq!(held_on(&ms, "ev"), 3);
}

#[tokio::test(start_paused = true)]
async fn a_majority_evicted_is_evicted_and_fewer_answers_are_unknown() {
    let ms = drifted(3).await;
    let q = quorum(&ms);
    let owner = OwnerToken::random();
    let g = grant(attempt(&q, "maj", owner, LEASE).await.expect("attempt"));
    // One member down: the two that answer are a majority; the holder keeps one member at most.
    // The fence is what the quorum shows now (the member down may be the one that drew the
    // token: the others then show their own, smaller, fences).
    ms[2].set(Fault::Down);
    let shown = q.inspect("maj").await.expect("inspect").fence.expect("a fence");
    assert!(shown <= g.fence);
    assert!(q.evict("maj", shown).await.expect("evict with one member down"));
    let renewed = q.renew(&[RenewItem { key: "maj", owner, lease: LEASE }]).await.expect("renew");
    assert_eq!(renewed, [false], "one member of three is no quorum");
    ms[2].set(Fault::None);
    assert_eq!(held_on(&ms, "maj"), 1, "the member that was down keeps its hold until its lease ends");

    // Two members down: nobody can tell which hold the fence names on a majority.
    let owner = OwnerToken::random();
    let g = grant(attempt(&q, "min", owner, LEASE).await.expect("attempt"));
    ms[0].set(Fault::Down);
    ms[1].set(Fault::Down);
    let e = q.evict("min", g.fence).await.expect_err("one answer of three");
    assert!(e.is_temporary(), "{e:?}");
    assert_eq!(held_on(&ms, "min"), 3, "nothing evicted");
}

#[tokio::test(start_paused = true)]
async fn a_minoritys_leftover_with_the_fence_is_no_quorum_hold() {
    let ms = drifted(3).await;
    let q = quorum(&ms);
    // Another owner holds one member (not the probe); the quorum's holder the other two.
    occupy(&ms[2..], "left", LEASE).await;
    let leftover = ms[2].mem.inspect("left").await.expect("inspect").fence.expect("a fence");
    let g = grant(attempt(&q, "left", OwnerToken::random(), LEASE).await.expect("attempt"));
    assert!(!q.evict("left", leftover).await.expect("evict"), "a minority's hold is not the quorum's");
    assert_eq!(held_on(&ms, "left"), 3, "left alone");
    assert_eq!(q.inspect("left").await.expect("inspect").fence, Some(g.fence));
}

#[tokio::test(start_paused = true)]
async fn without_fencing_members_no_fence_names_a_hold() {
    let mut ms = members(3);
    ms[0].can_raise = false;
    let q = quorum(&ms);
    let g = grant(attempt(&q, "nf", OwnerToken::random(), LEASE).await.expect("attempt"));
    let info = q.inspect("nf").await.expect("inspect");
    assert!(info.held && info.fence.is_none(), "a grant number is no fence: {info:?}");
    let e = q.evict("nf", g.fence).await.expect_err("unsupported");
    assert!(matches!(e, LockError::Unsupported { .. }), "{e:?}");
    assert_eq!(held_on(&ms, "nf"), 3);
}
