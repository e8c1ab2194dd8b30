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
        let half = base / 2;
        let extra = u64::try_from(half.as_nanos()).unwrap_or(u64::MAX);
        half + Duration::from_nanos(if extra == 0 { 0 } else { fastrand::u64(0..=extra) })
    }
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
}
