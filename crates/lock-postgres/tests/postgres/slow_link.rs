//! A lock granted after a wait, over a slow link: the holder is told it lost the lock before
//! the server can free it (the server's idle clock starts when it sends the grant, before the
//! grant arrives).
//!
//! Run: `cargo test -p lock-postgres --test postgres slow_link::`.

use std::time::Duration;

use lock_core::Locker;
use lock_testkit::slow_link::{proxied, waited_grant_over_a_slow_link};

use crate::common;
use common::{admin, advisory_locks, backend, key, lockers, shared};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waited_grant_over_a_slow_link_is_never_held_past_the_session() {
    let Some((url, admin_url)) = shared() else { return };
    let (proxy, slow_url) = proxied(&url).await;
    let [first, observer] = lockers(&url).await;
    let slow = Locker::new(backend(&slow_url).await);
    let admin = admin(&admin_url).await;
    let k = key("slow-link");
    let queued = || {
        let (admin, k) = (admin.clone(), k.clone());
        async move { usize::try_from(advisory_locks(&admin, &k).await.1).unwrap_or(0) }
    };
    // The tests' 100 ms keep-alive: the server's idle bound is its floor, 2 s.
    let server_idle = Duration::from_secs(2);
    waited_grant_over_a_slow_link(&first, &slow, &observer, &proxy, &k, queued, server_idle).await;
}
