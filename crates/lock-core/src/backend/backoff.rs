//! Capped exponential backoff with jitter.

use std::time::Duration;

/// Capped exponential backoff with "equal jitter": each delay is uniform in
/// `[base/2, base]`, and `base` doubles up to the cap.
#[derive(Debug, Clone)]
pub struct Backoff {
    base: Duration,
    cap: Duration,
}

impl Backoff {
    /// Start at `min`, never exceed `max`.
    pub fn new(min: Duration, max: Duration) -> Self {
        Backoff { base: min.min(max), cap: max }
    }

    /// The next delay.
    pub fn next_delay(&mut self) -> Duration {
        let base = self.base;
        self.base = self.base.saturating_mul(2).min(self.cap);
        jitter(base / 2, base)
    }
}

/// Runs `op`, the clean-up of an attempt or a hold, until it succeeds, fails for good
/// (`retry` says no), or `until` completes; between tries it pauses 20 ms doubling to 1 s.
///
/// A clean-up usually fails for the fault that lost the attempt's answer (a paused server, a
/// failover, a cut connection), which outlasts one try, while what it would undo blocks the
/// key meanwhile. `until` is when that has gone by itself (a lease's end, a session's end).
/// Returns `op`'s last result, or `None` when `until` came before any.
pub async fn retry_cleanup<T, E, F, Fut>(
    mut op: F,
    retry: impl Fn(&E) -> bool,
    until: impl Future<Output = ()>,
) -> Option<Result<T, E>>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, E>>,
{
    let mut until = std::pin::pin!(until);
    let mut backoff = Backoff::new(Duration::from_millis(20), Duration::from_secs(1));
    let mut last = None;
    loop {
        let r = tokio::select! {
            biased;
            () = &mut until => return last,
            r = op() => r,
        };
        match r {
            Err(e) if retry(&e) => last = Some(Err(e)),
            r => return Some(r),
        }
        tokio::select! {
            biased;
            () = &mut until => return last,
            () = tokio::time::sleep(backoff.next_delay()) => {}
        }
    }
}

/// A uniformly random duration in `[lo, hi]` (`lo` when `hi <= lo`): spreads waiters that
/// would otherwise ask at the same instant.
pub fn jitter(lo: Duration, hi: Duration) -> Duration {
    let span = u64::try_from(hi.saturating_sub(lo).as_nanos()).unwrap_or(u64::MAX);
    lo + Duration::from_nanos(if span == 0 { 0 } else { fastrand::u64(0..=span) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grows_to_cap_with_jitter() {
        let mut b = Backoff::new(Duration::from_millis(2), Duration::from_millis(50));
        let first = b.next_delay();
        assert!(first >= Duration::from_millis(1) && first <= Duration::from_millis(2));
        for _ in 0..20 {
            let d = b.next_delay();
            assert!(d <= Duration::from_millis(50));
        }
        assert!(b.next_delay() >= Duration::from_millis(25));
    }

    #[tokio::test(start_paused = true)]
    async fn cleanup_retries_until_it_succeeds_fails_for_good_or_its_end() {
        let tries = std::cell::Cell::new(0);
        let flaky = || {
            tries.set(tries.get() + 1);
            let n = tries.get();
            async move { if n < 3 { Err("temporary") } else { Ok(n) } }
        };
        let never = std::future::pending::<()>();
        assert_eq!(retry_cleanup(flaky, |_| true, never).await, Some(Ok(3)));

        tries.set(0);
        let permanent = retry_cleanup(flaky, |e: &&str| *e != "temporary", std::future::pending()).await;
        assert_eq!((permanent, tries.get()), (Some(Err("temporary")), 1));

        let failing = || async { Err::<(), _>("down") };
        let end = tokio::time::sleep(Duration::from_millis(500));
        let started = tokio::time::Instant::now();
        assert_eq!(retry_cleanup(failing, |_| true, end).await, Some(Err("down")));
        assert_eq!(started.elapsed(), Duration::from_millis(500));

        let over = retry_cleanup(failing, |_| true, std::future::ready(())).await;
        assert_eq!(over, None, "an end already reached runs nothing");
    }

    #[test]
    fn jitter_stays_in_its_range() {
        let (lo, hi) = (Duration::from_millis(3), Duration::from_millis(7));
        assert!((0..100).map(|_| jitter(lo, hi)).all(|d| lo <= d && d <= hi));
        assert_eq!(jitter(hi, lo), hi);
    }
}
