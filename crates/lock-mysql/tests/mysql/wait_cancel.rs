//! A named-mode acquisition that waits sends one batch (`CONNECTION_ID()`, `GET_LOCK(name,
//! wait)`), or `GET_LOCK` alone on a kept connection whose id is known: cut off at any point of
//! it, before or after the connection id came back, its wait does not stay in the server's
//! queue, and nobody is granted the lock for it.

use std::time::{Duration, Instant};

use lock_core::{Locker, OwnerToken};
use lock_mysql::Mode;
use lock_testkit::{cut_after, eventually};

use crate::common;

use common::{admin, backend, hex, lock_waits_like};
use lock_mysql_testing::MariaDbServer;

/// Cut-off points spread over this many steps of twice an uncontended try's median: from
/// before the batch leaves to after the server answered the connection id.
const STEPS: u32 = 24;

/// How long the server may take to end a session its client closed (far below the 30 s wait a
/// lingering `GET_LOCK` would keep): what a grant to a late batch lasts at most.
const SESSION_END: Duration = Duration::from_secs(2);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_get_lock_cut_off_anywhere_leaves_no_wait_and_no_grant() {
    cut_waits(false).await;
}

/// The same on a connection kept from the waiter's previous hold, whose id is known: the wait
/// is the prepared `GET_LOCK` alone, and a cut before it started is found by its session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_get_lock_on_a_kept_connection_cut_off_anywhere_leaves_no_wait_and_no_grant() {
    cut_waits(true).await;
}

/// `kept`: the waiter holds and releases the key first, so its wait runs on the kept connection.
async fn cut_waits(kept: bool) {
    // A private server: a kept connection's wait is the prepared `GET_LOCK(?, ?)`, which the
    // shared server's other tests wait in too.
    let server = MariaDbServer::start().expect("start private mariadbd");
    let url = server.url();
    let admin = admin(&url).await;
    let (a, b, c) = (
        Locker::new(backend(&url, Mode::NamedLock).await),
        Locker::new(backend(&url, Mode::NamedLock).await),
        Locker::new(backend(&url, Mode::NamedLock).await),
    );
    let k = format!("wait-cancel-{}", OwnerToken::random());
    // A wait on a new connection is text naming the key by the hex of its lock name; one on a
    // kept connection is the prepared statement (the process list shows its placeholders).
    let waits = match kept {
        false => format!("%GET_LOCK(%{}%", hex(lock_mysql::lock_name(&k))),
        true => "%GET_LOCK(?, ?)%".to_owned(),
    };
    let mut times = Vec::new();
    for _ in 0..20 {
        let t = Instant::now();
        c.try_lock(&k).await.expect("try").expect("free").release().await.expect("release");
        times.push(t.elapsed());
    }
    times.sort();
    let median = times[times.len() / 2];
    let (mut cut, mut slowest) = (0, Duration::ZERO);
    for i in 0..STEPS {
        if kept {
            b.lock(&k).wait(SESSION_END).acquire().await.expect("free").release().await.expect("release");
        }
        let held = a.lock(&k).wait(SESSION_END).acquire().await.expect("free");
        let offset = median * 2 * i / STEPS;
        let waited = cut_after(b.lock(&k).wait(Duration::from_secs(30)).acquire(), offset).await;
        assert!(waited.is_none(), "step {i}: a wait behind a holder ended ({waited:?})");
        cut += 1;
        // Killed, whether its connection id had come back or not: no wait stays queued.
        eventually(Duration::from_secs(5), "the cut-off wait is gone from the server", || {
            let (admin, waits) = (admin.clone(), waits.clone());
            async move { lock_waits_like(&admin, &waits).await == 0 }
        })
        .await;
        held.release().await.expect("release");
        // Nobody keeps the lock for the cut-off waiter: the next client gets it at once, or,
        // when the cut batch was still on its way (the process list showed no wait because
        // none had arrived yet), as soon as the server has ended the session the dropped
        // attempt closed, which a late `GET_LOCK` may have been granted first.
        let t = Instant::now();
        let next = c.lock(&k).wait(SESSION_END).acquire().await;
        let next =
            next.unwrap_or_else(|e| panic!("step {i} (cut at {offset:?}): granted to a dropped wait: {e}"));
        slowest = slowest.max(t.elapsed());
        next.release().await.expect("release");
    }
    assert_eq!(cut, STEPS);
    eprintln!("the next client got the key within {slowest:?} of the release at worst");
}
