//! Fencing tokens of a quorum: grant numbers without the write-back, strictly increasing tokens
//! across failed members, and a write-back short of a majority or hanging.

use super::*;

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
