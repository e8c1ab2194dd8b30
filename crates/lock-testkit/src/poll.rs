//! Waiting in tests without sleeps standing in for synchronisation: bound a future, poll a
//! condition until a deadline, cut a future off at any microsecond.

use std::future::Future;
use std::time::Duration;

use tokio::time::{Instant, timeout};

/// Wait for `fut` at most `limit`, failing the test with `what` otherwise.
pub async fn within<T>(limit: Duration, what: &str, fut: impl Future<Output = T>) -> T {
    match timeout(limit, fut).await {
        Ok(v) => v,
        Err(_) => panic!("{what}: not done within {limit:?}"),
    }
}

/// Poll `cond` every few milliseconds until it holds, failing the test after `limit`.
pub async fn eventually<Fut: Future<Output = bool>>(
    limit: Duration,
    what: &str,
    mut cond: impl FnMut() -> Fut,
) {
    let deadline = Instant::now() + limit;
    while !cond().await {
        assert!(Instant::now() < deadline, "{what}: not true within {limit:?}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Poll `fut` until it completes or `after` has passed on a busy-waited clock, then drop it.
/// Tokio timers have a 1 ms resolution; this cuts a future off at any microsecond offset,
/// whichever await point it happens to be in.
pub async fn cut_after<T>(fut: impl Future<Output = T>, after: Duration) -> Option<T> {
    let deadline = std::time::Instant::now() + after;
    let mut fut = std::pin::pin!(fut);
    loop {
        if let std::task::Poll::Ready(v) =
            std::future::poll_fn(|cx| std::task::Poll::Ready(fut.as_mut().poll(cx))).await
        {
            return Some(v);
        }
        if std::time::Instant::now() >= deadline {
            return None;
        }
        tokio::task::yield_now().await;
    }
}

/// The middle of the `*_grants_only_live_*` cases: once `gathered` holds (the waiting request
/// `waiter` holds what it could get and waits for the rest), its fixed `lease` runs out twice
/// over, which is the case's point (time passing, not a stand-in for synchronisation); then
/// `release_held` frees what it waits for, and the request's grant is returned.
pub(crate) async fn outlasting_its_lease<T, C, F>(
    what: &str,
    lease: Duration,
    waiter: tokio::task::JoinHandle<lock_core::Result<T>>,
    gathered: C,
    release_held: impl Future<Output = lock_core::Result<()>>,
) -> T
where
    C: FnMut() -> F,
    F: Future<Output = bool>,
{
    eventually(Duration::from_secs(10), &format!("{what}: gathers what it can and waits"), gathered).await;
    tokio::time::sleep(lease * 2).await;
    release_held.await.expect("release what the request waits for");
    within(Duration::from_secs(20), what, waiter)
        .await
        .expect("task")
        .unwrap_or_else(|e| panic!("{what}: not granted once the holder left: {e}"))
}
