//! Bounds on the requests of a session-bound store: every request is answered by an instant or
//! is a temporary error, the server's idle bound follows from the keep-alive period, and a wait
//! in the server's queue is cancelled from another connection when its caller gives up.

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

use crate::backend::Cleanup;
use crate::{LockError, Result};

/// Shortest server-side idle bound: below it a scheduling stall of a loaded client (its task
/// inside the critical section, its keeper not yet run) lets the server end a hold that the
/// client still uses.
pub const MIN_SERVER_IDLE: Duration = Duration::from_secs(2);

/// The server-side idle bound for a keep-alive period: three periods, at least
/// [`MIN_SERVER_IDLE`]. A holder that cannot reach the server for that long has its session
/// ended by the server; the client gives the hold up a drift margin earlier.
pub fn server_idle(keepalive: Duration) -> Duration {
    (keepalive * 3).max(MIN_SERVER_IDLE)
}

/// `what` (a request to `backend`'s server) went unanswered within its bound.
pub fn no_answer(backend: &'static str, what: &str) -> LockError {
    LockError::temporary(backend, format!("no answer from the server in time ({what})"))
}

/// `fut`, a request to the server, answered by `bound`, its errors classified by `classify`: a
/// server that has not answered by then (paused, partitioned) is a temporary error, and the
/// request's connection is dropped with the future (closed, unless it was clean).
///
/// # Errors
/// [`no_answer`] past `bound`; what `classify` makes of the driver's error.
pub async fn answered_by<T, E>(
    (backend, what): (&'static str, &str),
    bound: Instant,
    fut: impl Future<Output = std::result::Result<T, E>>,
    classify: impl FnOnce(E) -> LockError,
) -> Result<T> {
    match tokio::time::timeout_at(bound, fut).await {
        Ok(r) => r.map_err(classify),
        Err(_) => Err(no_answer(backend, what)),
    }
}

/// How a wait in the server's queue ended ([`cancellable_wait`]).
#[derive(Debug)]
pub struct Waited<T> {
    /// The wait's answer; `None` when the server answered neither by the deadline plus the
    /// grace nor within a grace after the cancel (the caller closes the waiting connection,
    /// and a grant that raced goes with the session).
    pub answer: Option<T>,
    /// A cancel was sent to the server: it may still be in flight to this session, so the
    /// waiting connection must not be reused for anything that a late cancel could end.
    pub cancelled: bool,
}

/// Run `wait`, a lock wait that the server ends by itself at `deadline` (a `lock_timeout`, a
/// `GET_LOCK` timeout). If this future is dropped mid-wait, `cancel` ends the wait from another
/// connection (`pg_cancel_backend`, `KILL QUERY`) in a [`Cleanup`], so the wait neither lingers
/// in the server's queue nor is granted to nobody: closing the waiting connection would not end
/// it, since the server does not read a socket while it waits. If the server has not answered
/// `grace` after the deadline, the wait is cancelled and its answer awaited for one more grace,
/// each step bounded, so a server that answers neither still leaves the caller its deadline.
pub async fn cancellable_wait<T, F>(
    what: &'static str,
    (deadline, grace): (Instant, Duration),
    cancel: impl Fn() -> F + Send + Sync + 'static,
    wait: impl Future<Output = T>,
) -> Waited<T>
where
    F: Future<Output = Result<()>> + Send + 'static,
{
    let late = std::sync::Arc::new(cancel);
    let armed = late.clone();
    let canceller = Cleanup::arm(what, move || armed());
    tokio::pin!(wait);
    let waited = tokio::select! {
        r = &mut wait => Waited { answer: Some(r), cancelled: false },
        _ = tokio::time::sleep_until(deadline + grace) => {
            tracing::debug!(what, "server did not end the lock wait at the deadline; cancelling it");
            match tokio::time::timeout(grace, late()).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => tracing::debug!(what, error = %e, "cancelling a lock wait failed"),
                Err(_) => tracing::debug!(what, "no answer to the cancel of a lock wait"),
            }
            Waited { answer: tokio::time::timeout(grace, wait).await.ok(), cancelled: true }
        }
    };
    canceller.disarm();
    waited
}
