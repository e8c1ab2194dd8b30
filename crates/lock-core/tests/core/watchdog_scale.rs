//! The watchdog at scale, in real time: 100,000 holds of one `Locker` are all kept. Each
//! renewal chunk used to look for the earliest deadline among every registered lease, so a
//! round cost chunks x leases (100k holds on Redis: 91,170 lost in the bench's watchdog curve).

use std::time::Duration;

use lock_core::{Locker, MemoryBackend};
use std::sync::Arc;
use tokio::time::Instant;

const HOLDS: usize = 100_000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_thousand_watchdog_holds_are_all_kept() {
    let lease = Duration::from_secs(3);
    let l = Locker::new(Arc::new(MemoryBackend::new())).with_watchdog_lease(lease).expect("lease");
    let mut guards = Vec::with_capacity(HOLDS);
    for i in 0..HOLDS {
        guards.push(l.try_lock(format!("scale-{i}")).await.expect("try_lock").expect("a fresh key is free"));
    }
    // Two renewal periods after the last grant: every lease has been renewed at least once.
    let until = Instant::now() + lease / 3 * 2;
    while Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let lost = guards.iter().filter(|g| g.is_lost()).count();
        assert_eq!(lost, 0, "holds lost of {HOLDS}");
    }
    for g in guards {
        g.release().await.expect("release");
    }
}
