//! Fences of one key strictly increase in the order its holds are granted, under contention, in
//! every mode. In optimistic mode on MariaDB a new row's fence was drawn from the sequence when
//! the statement began, before it waited for the row: a statement that drew, stalled while
//! another client took, used and released the key (deleting its row), then created the row,
//! granted a fence below the one before it (a fenced resource would have refused the rightful
//! holder, and accepted the stale one).
//!
//! Run: `cargo test -p lock-mysql --test mysql fences::`.

use std::time::Duration;

use lock_core::{Locker, OwnerToken};
use lock_mysql::Mode;
use lock_testkit::conformance::grant_order;

use crate::common;

/// Backends (each its own pool), and clients on each: more than the conformance case's, so
/// that the old MariaDB statement failed every run.
const BACKENDS: usize = 4;
const CLIENTS: usize = 6;
const RUN: Duration = Duration::from_secs(4);

/// Every grant of one key, checked in the order granted: the grants, and those whose fence
/// was not above the grant before them.
async fn regressions(mode: Mode) -> (usize, usize) {
    let url = common::shared_url();
    let mut lockers = Vec::new();
    for _ in 0..BACKENDS {
        lockers.push(Locker::new(common::backend(&url, mode).await));
    }
    let key = format!("fences-{mode:?}-{}", OwnerToken::random());
    // Tries only: a waiting acquisition queues in its process first, so fewer statements race
    // for the row (with waits mixed in, the old statement passed 7,201 grants).
    let (grants, faults) = grant_order(&lockers, CLIENTS, 0, RUN, &key).await;
    for (before, granted) in &faults {
        eprintln!("{mode:?}: fence {granted} granted after {before}");
    }
    (grants, faults.len())
}
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn optimistic_fences_increase_in_grant_order() {
    let (grants, regressed) = regressions(Mode::Optimistic).await;
    eprintln!("optimistic: {grants} grants, {regressed} fences not above the one before");
    assert!(grants > 100, "too few grants to judge: {grants}");
    assert_eq!(regressed, 0, "of {grants} grants, {regressed} fences were not above the grant before");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pessimistic_and_get_lock_fences_increase_in_grant_order() {
    for mode in [Mode::Pessimistic, Mode::NamedLock] {
        let (grants, regressed) = regressions(mode).await;
        eprintln!("{mode:?}: {grants} grants, {regressed} fences not above the one before");
        assert!(grants > 100, "{mode:?}: too few grants to judge: {grants}");
        assert_eq!(
            regressed, 0,
            "{mode:?}: of {grants} grants, {regressed} fences were not above the grant before"
        );
    }
}
