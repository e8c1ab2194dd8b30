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

    #[test]
    fn jitter_stays_in_its_range() {
        let (lo, hi) = (Duration::from_millis(3), Duration::from_millis(7));
        assert!((0..100).map(|_| jitter(lo, hi)).all(|d| lo <= d && d <= hi));
        assert_eq!(jitter(hi, lo), hi);
    }
}
