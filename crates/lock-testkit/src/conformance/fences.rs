//! Fences under contention: every grant of a key carries a fence above the grant before it.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use lock_core::Locker;
use tokio::time::Instant;

use super::locker;
use crate::factory::{Factory, key, skip};

/// Clients and tasks on each, and how long they contend.
const CLIENTS: usize = 4;
const TASKS: usize = 4;
const RUN: Duration = Duration::from_secs(2);
/// Every fourth attempt of a task waits; the others only try.
const WAIT_EVERY: usize = 4;
/// Far longer than a hold here: no lease runs out between a grant and its check.
const LEASE: Duration = Duration::from_secs(10);

/// 22. Fences increase in grant order under contention: tasks on several clients take one key
///     by turns (tries and waiting acquisitions mixed), and each grant, checked while it is
///     held, carries a fence above every grant before it. A fence drawn before the grant's
///     statement waited for the key (a MariaDB optimistic row created by a statement that drew
///     its fence when it began) repeats or regresses here; the sequential
///     `fencing_tokens_increase` never lets two statements wait at once.
pub async fn fences_increase_under_contention<F: Factory + ?Sized>(f: &F) {
    let first = locker(f).await;
    if !first.backend().capabilities().fencing {
        return skip(&f.label(), "fences_increase_under_contention", "backend declares no fencing tokens");
    }
    let mut lockers = vec![first];
    for _ in 1..CLIENTS {
        lockers.push(locker(f).await);
    }
    let (grants, faults) = grant_order(&lockers, TASKS, WAIT_EVERY, RUN, &key("fences-contended")).await;
    eprintln!(
        "[{}] fences_increase_under_contention: {grants} grants, {} not above the one before",
        f.label(),
        faults.len()
    );
    assert!(grants >= 20, "too few grants to judge: {grants}");
    assert!(
        faults.is_empty(),
        "of {grants} grants, these (before, granted) fences did not increase: {faults:?}"
    );
}

/// `tasks` tasks on each of `lockers` take `key` by turns for `run`: tries, which race each
/// other into the store, and every `wait_every`th attempt (never for 0) a waiting acquisition,
/// so both kinds of grant meet. Each grant, checked while it is held, is compared with every
/// grant before it. Answers the grants, and the `(highest before, granted)` fences of those not
/// above it.
pub async fn grant_order(
    lockers: &[Locker],
    tasks: usize,
    wait_every: usize,
    run: Duration,
    key: &str,
) -> (usize, Vec<(u64, u64)>) {
    // The highest fence granted so far, grants, and the grants not above it.
    let last = Arc::new(Mutex::new((0u64, 0usize, Vec::new())));
    let mut handles = Vec::new();
    for l in lockers {
        for t in 0..tasks {
            let (l, k, last) = (l.clone(), key.to_owned(), last.clone());
            handles.push(tokio::spawn(async move {
                let end = Instant::now() + run;
                let mut n = 0usize;
                while Instant::now() < end {
                    n += 1;
                    let req = l.lock(&k).lease(LEASE);
                    let g = if wait_every == 0 || !(t + n).is_multiple_of(wait_every) {
                        req.try_acquire().await.expect("try")
                    } else {
                        Some(req.wait(Duration::from_secs(5)).acquire().await.expect("acquire"))
                    };
                    let Some(g) = g else { continue };
                    let fence = g.fence().expect("a backend with fencing hands out a fence").0;
                    {
                        let mut last = last.lock().expect("tally");
                        if fence <= last.0 {
                            let before = last.0;
                            last.2.push((before, fence));
                        }
                        last.0 = last.0.max(fence);
                        last.1 += 1;
                    }
                    g.release().await.expect("release");
                }
            }));
        }
    }
    for h in handles {
        h.await.expect("a contending task");
    }
    let (_, grants, faults) = std::mem::take(&mut *last.lock().expect("tally"));
    (grants, faults)
}
