//! Requests to a stalled server answer in time: a session-bound backend's release, acquisition
//! with a deadline and try, against a server its test pauses (SIGSTOP), each answer with an
//! error by the deadline or the backend's response bound, never when the server wakes up; and
//! a count-down latch's calls against a store cut off behind a proxy, by their deadlines.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use lock_core::{CountDownLatch, LockBackend, LockError, Locker};
use tokio::time::Instant;

use crate::factory::key;
use crate::poll::within;
use crate::proxy::Proxy;

/// How long each request may take against the stalled server.
#[derive(Clone, Copy, Debug)]
pub struct Bounds {
    /// The bound of a release.
    pub release: Duration,
    /// The bound of a try (no deadline).
    pub attempt: Duration,
    /// How long after its deadline an acquisition may answer.
    pub wait_grace: Duration,
    /// What a loaded machine may add to a bound.
    pub slack: Duration,
}

/// `a` takes `key`; `b` takes two other keys and releases them (so its next requests reach the
/// server at once instead of waiting for a connection); `stall(true)` pauses the server. Then
/// `a`'s release, `b`'s `acquire()` with a 1 s deadline and `b`'s try each answer with an
/// error within their bound. After `stall(false)`, `b` takes `key`: nothing the abandoned
/// requests did survives. `stall` blocks (it is run on the blocking pool).
pub async fn paused_server_answers_in_time(
    a: &Locker,
    b: &Locker,
    key: &str,
    stall: Arc<dyn Fn(bool) + Send + Sync>,
    bounds: Bounds,
) {
    let Bounds { release, attempt, wait_grace, slack } = bounds;
    let g = a.try_lock(key).await.expect("try").expect("free");
    let (x, y) = (format!("{key}-warm-x"), format!("{key}-warm-y"));
    let (gx, gy) = (b.try_lock(&x).await.expect("try"), b.try_lock(&y).await.expect("try"));
    gx.expect("free").release().await.expect("release");
    gy.expect("free").release().await.expect("release");

    let s = stall.clone();
    tokio::task::spawn_blocking(move || s(true)).await.expect("join");

    let t = Instant::now();
    let released = within(release + slack * 2, "release", g.release()).await;
    let took = t.elapsed();
    println!("paused server: release answered after {took:?}");
    assert!(released.is_err(), "a release the server never answered: {released:?}");
    assert!(took < release + slack, "release answered after {took:?}");

    let wait = Duration::from_secs(1);
    let t = Instant::now();
    let waited = within(wait + wait_grace + slack * 2, "acquire with a 1 s deadline", async {
        b.lock(key).wait(wait).acquire().await
    })
    .await;
    let took = t.elapsed();
    println!("paused server: acquire().wait(1s) answered after {took:?}");
    assert!(waited.is_err(), "granted by a paused server: {waited:?}");
    assert!(took < wait + wait_grace + slack, "acquire().wait(1s) answered after {took:?}");

    let t = Instant::now();
    let tried = within(attempt + slack * 2, "try", b.try_lock(key)).await;
    let took = t.elapsed();
    println!("paused server: try answered after {took:?}");
    assert!(tried.is_err(), "a try the server never answered: {tried:?}");
    assert!(took < attempt + slack, "try answered after {took:?}");

    tokio::task::spawn_blocking(move || stall(false)).await.expect("join");
    let g =
        within(Duration::from_secs(10), "after resume", b.lock(key).wait(Duration::from_secs(8)).acquire())
            .await
            .expect("acquire after resume");
    g.release().await.expect("release");
}

/// How long after its deadline a latch call may answer whatever the store does (the latch's
/// last look at the count takes at most 100 ms past a wait's deadline).
pub const LATCH_GRACE: Duration = Duration::from_millis(250);
/// What a loaded machine may add to [`LATCH_GRACE`]. The bound of a 1.5 s wait, 2 s in all,
/// still fails the latch that waited for the store's own timeouts (2.7 s to 19 s).
const LATCH_SLACK: Duration = Duration::from_millis(250);
/// A latch's count-down sends its mark again for this long before it gives up.
const LATCH_RESEND: Duration = Duration::from_secs(2);

/// A count-down latch whose store stops answering (every connection of its client blackholed
/// by a proxy: open, silent) answers by its deadlines, never by the store's own timeouts:
/// `wait(1.5 s)` with [`LockError::Timeout`] within [`LATCH_GRACE`] of its deadline, and
/// `count_down` with an error within the same grace of its 2 s of resends (each plus the
/// slack of a loaded machine).
///
/// `url` reaches a server on `127.0.0.1:{port}` (shared by the test binary: only this
/// client's proxy is faulted); `connect` builds a backend from a URL, here one with the
/// proxy's address in its place.
pub async fn unreachable_latch_answers_in_time<F, Fut>(url: &str, port: u16, connect: F)
where
    F: Fn(String) -> Fut,
    Fut: Future<Output = Arc<dyn LockBackend>>,
{
    let server = format!("127.0.0.1:{port}");
    assert!(url.contains(&server), "the URL does not name {server}");
    let proxy = Proxy::start(server.parse().expect("host:port")).await.expect("proxy");
    let behind = connect(url.replacen(&server, &proxy.addr().to_string(), 1)).await;
    let name = key("latch_unreachable");
    let latch = CountDownLatch::new(&Locker::new(behind), &name).expect("latch");
    latch.set_count(2).await.expect("set");
    proxy.blackhole(true);

    let wait = Duration::from_millis(1500);
    let t = Instant::now();
    // A long outer bound: a late answer is measured, not cut off.
    let waited = within(Duration::from_secs(60), "wait on an unreachable store", latch.wait(wait)).await;
    let took = t.elapsed();
    let t = Instant::now();
    let counted =
        within(Duration::from_secs(60), "count_down on an unreachable store", latch.count_down()).await;
    let down_took = t.elapsed();
    println!("unreachable store: wait(1.5 s) answered after {took:?}, count_down after {down_took:?}");
    match &waited {
        Err(LockError::Timeout { key, .. }) => assert_eq!(key, &name),
        other => panic!("wait on an unreachable store answered {other:?} after {took:?}"),
    }
    assert!(took < wait + LATCH_GRACE + LATCH_SLACK, "wait(1.5 s) answered after {took:?}");
    assert!(counted.is_err(), "a count-down the store never answered: {counted:?}");
    assert!(down_took < LATCH_RESEND + LATCH_GRACE + LATCH_SLACK, "count_down answered after {down_took:?}");

    proxy.blackhole(false);
    let direct = CountDownLatch::new(&Locker::new(connect(url.to_owned()).await), &name).expect("latch");
    within(Duration::from_secs(10), "delete after the blackhole", direct.delete()).await.expect("delete");
}
