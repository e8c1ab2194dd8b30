//! Connecting for a command that takes a lock: the URL with the chosen lease where the store's
//! lease is its session's, and a server that refuses or drops the connection retried with
//! backoff within `--wait`, as a waiting acquisition retries the store once connected (a job
//! started while the store restarts waits for it, as it would wait for the lock).

use std::time::Duration;

use dlock::backend::Backoff;
use dlock::{DynBackend, LockError};
use tokio::time::Instant;

use crate::duration::Wait;
use crate::report::unreachable;

/// How long one connection attempt may take, and `--wait 0` (one try) in all.
const ONE_ATTEMPT: Duration = Duration::from_secs(5);
/// The first and the longest pause between connection attempts.
const RETRY_MIN: Duration = Duration::from_millis(100);
const RETRY_MAX: Duration = Duration::from_secs(2);

/// `url` with `lease` as the session's lease where the store's holds live as long as a client
/// session (ZooKeeper, etcd): the lease is then what frees a dead holder's lock, and a
/// `--lease` left out of the session would be silently ignored.
pub fn with_lease(url: &str, lease: Duration) -> String {
    let Some((scheme, _)) = url.split_once("://") else { return url.to_owned() };
    dlock::stores()
        .iter()
        .find(|d| d.answers(scheme))
        .and_then(|d| d.session_lease)
        .map_or_else(|| url.to_owned(), |s| s.apply(url, lease))
}

/// Connect to `url`, retrying a temporary failure until `wait` runs out (`--wait 0`: one
/// attempt). A permanent failure (bad URL, missing database, credentials) is not retried.
///
/// # Errors
/// The last failure, or [`unreachable()`] when the attempts ran out of time.
pub async fn connect(url: &str, wait: &Wait, quiet: bool) -> Result<DynBackend, LockError> {
    let deadline = wait.bound.map(|b| Instant::now() + if b.is_zero() { ONE_ATTEMPT } else { b });
    let mut backoff = Backoff::new(RETRY_MIN, RETRY_MAX);
    let mut told = false;
    let mut last: Option<LockError> = None;
    loop {
        let attempt_until =
            deadline.map_or(Instant::now() + ONE_ATTEMPT, |d| d.min(Instant::now() + ONE_ATTEMPT));
        let e = match tokio::time::timeout_at(attempt_until, dlock::from_url(url)).await {
            Ok(Ok(b)) => return Ok(b),
            Ok(Err(e)) if !e.is_temporary() => return Err(e),
            Ok(Err(e)) => e,
            // Cut short by the deadline: the attempt before it says why better.
            Err(_) => last.take().unwrap_or_else(|| unreachable(&format!("{}ms", ONE_ATTEMPT.as_millis()))),
        };
        if wait.once() {
            return Err(e);
        }
        if deadline.is_some_and(|d| Instant::now() >= d) {
            return Err(unreachable(&format!("--wait {wait} ({e})")));
        }
        if !told && !quiet {
            eprintln!("dlock: cannot reach the store yet ({e}); retrying within --wait {wait}");
            told = true;
        }
        last = Some(e);
        let nap = Instant::now() + backoff.next_delay();
        tokio::time::sleep_until(deadline.map_or(nap, |d| d.min(nap))).await;
    }
}

#[cfg(test)]
mod tests {
    use super::with_lease;
    use std::time::Duration;

    #[test]
    fn the_lease_reaches_session_bound_stores_only() {
        let l = Duration::from_secs(3);
        if cfg!(feature = "full") {
            assert_eq!(with_lease("zk://h:2181/r", l), "zk://h:2181/r?session_timeout=3000ms");
            assert_eq!(with_lease("etcd://h:1/r?x=1", l), "etcd://h:1/r?x=1&lease_ttl=3000ms");
            assert_eq!(with_lease("zk://h/r?session_timeout_ms=900", l), "zk://h/r?session_timeout_ms=900");
            assert_eq!(with_lease("redis://h:6379", l), "redis://h:6379");
        }
        assert_eq!(with_lease("no scheme", l), "no scheme");
    }
}
