//! Requests to a stalled server answer in time: a session-bound backend's release, acquisition
//! with a deadline and try, against a server its test pauses (SIGSTOP), each answer with an
//! error by the deadline or the backend's response bound, never when the server wakes up.

use std::sync::Arc;
use std::time::Duration;

use lock_core::Locker;
use tokio::time::Instant;

use crate::poll::within;

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
    assert!(released.is_err(), "a release the server never answered: {released:?}");
    assert!(took < release + slack, "release answered after {took:?}");

    let wait = Duration::from_secs(1);
    let t = Instant::now();
    let waited = within(wait + wait_grace + slack * 2, "acquire with a 1 s deadline", async {
        b.lock(key).wait(wait).acquire().await
    })
    .await;
    let took = t.elapsed();
    assert!(waited.is_err(), "granted by a paused server: {waited:?}");
    assert!(took < wait + wait_grace + slack, "acquire().wait(1s) answered after {took:?}");

    let t = Instant::now();
    let tried = within(attempt + slack * 2, "try", b.try_lock(key)).await;
    let took = t.elapsed();
    assert!(tried.is_err(), "a try the server never answered: {tried:?}");
    assert!(took < attempt + slack, "try answered after {took:?}");

    tokio::task::spawn_blocking(move || stall(false)).await.expect("join");
    let g =
        within(Duration::from_secs(10), "after resume", b.lock(key).wait(Duration::from_secs(8)).acquire())
            .await
            .expect("acquire after resume");
    g.release().await.expect("release");
}
