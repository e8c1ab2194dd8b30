//! A holder whose runtime is starved (a blocked worker thread, a long synchronous stretch in the
//! application) is told its lease is lost as soon as it looks past the local deadline, not when
//! the watchdog task that marks the loss gets to run again. Real time: the starvation is the
//! fault, a blocked thread.

use std::sync::Arc;
use std::time::Duration;

use lock_core::{LeaseState, Locker, LostReason, MemoryBackend};

/// The lease; the thread is blocked for twice as long.
const LEASE: Duration = Duration::from_millis(150);

/// One worker thread, blocked: no other task (the watchdog's) runs until the test yields.
#[tokio::test(flavor = "current_thread")]
async fn a_starved_holder_past_its_deadline_is_told_lost_at_once() {
    let l = Locker::new(Arc::new(MemoryBackend::new()));
    // A fixed lease: the watchdog does not renew it, only marks it lost at its deadline.
    let g = l.lock("starved").lease(LEASE).try_acquire().await.expect("try").expect("free");
    let other = g.lost_token();
    assert!(!g.is_lost());
    std::thread::sleep(LEASE * 2);
    // No await since the sleep: the watchdog task has not run.
    assert!(g.is_lost(), "a guard past its local deadline still believed it held");
    assert_eq!(g.state(), LeaseState::Lost(LostReason::DeadlinePassed));
    // The token is cancelled too, for whoever selects on it.
    assert!(other.is_cancelled(), "the lost token was not cancelled with the flag");
    assert!(g.release().await.is_err(), "the release of a lost lease reports the loss");
}

/// A renewed lease moves the deadline the clock check uses: a starved stretch shorter than the
/// renewed lease is not a loss.
#[tokio::test(flavor = "current_thread")]
async fn a_renewed_lease_moves_the_deadline_the_clock_check_uses() {
    let l = Locker::new(Arc::new(MemoryBackend::new()));
    let g = l.lock("renewed").lease(LEASE).try_acquire().await.expect("try").expect("free");
    g.renew(LEASE * 10).await.expect("renew");
    std::thread::sleep(LEASE * 2);
    assert!(!g.is_lost(), "a renewed lease was judged by its first deadline");
    assert_eq!(g.state(), LeaseState::Held);
    g.release().await.expect("release");
}
