//! A caller's deadline kept through every await of a call that takes one: pool checkouts,
//! subscriptions, count checks, slot scans and attempts alike, so that a store that stops
//! answering costs the caller its deadline plus [`GRACE`], never the store client's own timeout.

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

use crate::{LockError, Result};

/// How long past the caller's deadline a call may still answer. A store's own wait (a native
/// wait or a queue's, given the deadline) ends at the deadline and answers a round trip later;
/// a store that does not answer at all (paused, cut off, a connection pool exhausted) is given
/// up here. What is dropped then is cleaned up as every cancelled call is (acquisitions are
/// cancellation-safe: a dropped attempt's cleanup undoes what it may have done).
pub const GRACE: Duration = Duration::from_millis(250);

/// `fut`, given up at `bound` (`Err(())`) when there is one.
pub(crate) async fn within<T>(
    bound: Option<Instant>,
    fut: impl Future<Output = T>,
) -> std::result::Result<T, ()> {
    match bound {
        Some(b) => tokio::time::timeout_at(b, fut).await.map_err(drop),
        None => Ok(fut.await),
    }
}

/// `fut`, a waiting call on `name` started at `started`, answered by `deadline` plus
/// [`GRACE`]: past it, [`LockError::Timeout`] naming `name`.
pub(crate) async fn by_deadline<T>(
    deadline: Option<Instant>,
    name: &str,
    started: Instant,
    fut: impl Future<Output = Result<T>>,
) -> Result<T> {
    match within(deadline.map(|d| d + GRACE), fut).await {
        Ok(r) => r,
        Err(()) => Err(LockError::Timeout { key: name.to_owned(), waited: started.elapsed() }),
    }
}
