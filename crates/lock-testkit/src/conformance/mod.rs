//! The conformance suite: one generic async function per guarantee, run against every backend
//! through `Arc<dyn LockBackend>`, on the clients of any [`Factory`] (whose fault hooks break
//! holds behind their backs; a case whose hook or capability is missing skips loudly).
//! [`conformance_tests!`](crate::conformance_tests) turns them into one named `#[tokio::test]`
//! each.

use std::time::Duration;

use lock_core::LockBackend;
use lock_core::Locker;

use crate::factory::{Client, Factory};
// Also reachable here, where backend fault tests have always found them.
pub use crate::factory::{key, skip};
pub use crate::poll::cut_after;

pub use cancellation::{
    CLEANUP_BOUND, cancel_on_free_key, cancelled_acquire_leaves_nothing, dropped_guard_releases,
    late_cleanup_spares_later_grant,
};
pub use capabilities::capabilities_are_honest;
pub use exclusion::{
    foreign_release_rejected, inspect_without_acquiring, keys_independent_multilock, mutual_exclusion,
    reentrant_nesting, round_trip, wait_times_out, waiter_wakes_on_release,
};
pub use fences::{fences_increase_under_contention, grant_order};
pub use herd::release_wakes_no_herd;
pub use holder::{evict_takes_the_lock_from_its_holder, holder_identity_noted, list_names_the_held_keys};
pub use input::{ODD_KEYS, bad_input};
pub use leases::{
    expired_lease_taken_over, fencing_tokens_increase, lost_before_successor, lost_reaches_nested_guards,
    lost_signal_fires, multilock_grants_only_live_parts, renew_extends_lease, renew_only_extends,
    watchdog_keeps_lock,
};

mod cancellation;
mod capabilities;
mod exclusion;
mod fences;
mod herd;
mod holder;
mod input;
mod leases;

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
    has: fn(&dyn LockBackend) -> bool,
    lacks: &str,
) -> Option<Client> {
    let c = f.client().await;
    if has(&*c.backend) {
        Some(c)
    } else {
        skip(&f.label(), case, lacks);
        None
    }
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
            inspect_without_acquiring, capabilities_are_honest, holder_identity_noted,
            evict_takes_the_lock_from_its_holder, list_names_the_held_keys, release_wakes_no_herd,
            fences_increase_under_contention, multilock_grants_only_live_parts);
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
