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
