//! A lock configuration read from the application's config file (feature `serde`).
//!
//! Every backend setting is an option of its URL (see [`from_url`](crate::from_url)), so one
//! struct configures any backend; the locker's own settings sit beside it. Durations are
//! written the human way (`"30s"`, `"250ms"`, `"5m"`).
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let config: dlock::LockConfig = serde_json::from_str(
//!     r#"{ "url": "memory://config-doc", "watchdog_lease": "10s", "clock_drift": { "rate": 0.02, "floor": "10ms" } }"#,
//! )?;
//! let locker = config.connect().await?;
//! let guard = locker.try_lock("job").await?.expect("free");
//! guard.release().await?;
//! # Ok(()) }
//! ```

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::{Locker, Result, redact_url};

/// Where the locks live and how the locker keeps them.
#[derive(Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LockConfig {
    /// The backend URL with its options, such as `redis://host:6379/?mode=fair`. May carry a
    /// password: it is never printed by `Debug`.
    pub url: String,
    /// The lease the watchdog keeps renewing (default 30 s).
    #[serde(default, with = "humantime_serde", skip_serializing_if = "Option::is_none")]
    pub watchdog_lease: Option<Duration>,
    /// The clock-drift margin (default 1 % of the lease + 5 ms).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clock_drift: Option<ClockDrift>,
    /// Polling bounds for backends without notifications.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub poll: Option<PollBounds>,
}

/// See [`Locker::with_clock_drift`].
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClockDrift {
    /// The share of the lease taken off the local deadline (0.0 to 0.5).
    pub rate: f64,
    /// Taken off on top of `rate`.
    #[serde(with = "humantime_serde")]
    pub floor: Duration,
}

/// See [`Locker::with_poll_backoff`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PollBounds {
    /// The first delay.
    #[serde(with = "humantime_serde")]
    pub min: Duration,
    /// The longest delay.
    #[serde(with = "humantime_serde")]
    pub max: Duration,
}

impl fmt::Debug for LockConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockConfig")
            .field("url", &redact_url(&self.url))
            .field("watchdog_lease", &self.watchdog_lease)
            .field("clock_drift", &self.clock_drift)
            .field("poll", &self.poll)
            .finish()
    }
}

impl LockConfig {
    /// Connects to the backend and builds the locker.
    ///
    /// # Errors
    /// As [`from_url`](crate::from_url); [`LockError::InvalidLease`](crate::LockError) and
    /// [`LockError::InvalidConfig`](crate::LockError) for settings out of range.
    pub async fn connect(&self) -> Result<Locker> {
        let mut locker = Locker::new(crate::from_url(&self.url).await?);
        if let Some(lease) = self.watchdog_lease {
            locker = locker.with_watchdog_lease(lease)?;
        }
        if let Some(d) = self.clock_drift {
            locker = locker.with_clock_drift(d.rate, d.floor)?;
        }
        if let Some(p) = self.poll {
            locker = locker.with_poll_backoff(p.min, p.max);
        }
        Ok(locker)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_never_shows_the_password() {
        let c: LockConfig = serde_json::from_str(r#"{"url":"redis://app:hunter2@db:6379/"}"#).expect("parse");
        assert!(!format!("{c:?}").contains("hunter2"), "{c:?}");
    }

    #[test]
    fn unknown_fields_and_bad_durations_are_refused() {
        assert!(serde_json::from_str::<LockConfig>(r#"{"url":"memory://x","leese":"1s"}"#).is_err());
        assert!(
            serde_json::from_str::<LockConfig>(r#"{"url":"memory://x","watchdog_lease":"soon"}"#).is_err()
        );
        let c: LockConfig =
            serde_json::from_str(r#"{"url":"memory://x","watchdog_lease":"250ms"}"#).expect("parse");
        assert_eq!(c.watchdog_lease, Some(Duration::from_millis(250)));
        let back: LockConfig =
            serde_json::from_str(&serde_json::to_string(&c).expect("ser")).expect("round trip");
        assert_eq!(back, c);
    }

    #[tokio::test]
    async fn out_of_range_settings_are_typed_errors() {
        let c: LockConfig =
            serde_json::from_str(r#"{"url":"memory://x","clock_drift":{"rate":0.9,"floor":"1ms"}}"#)
                .expect("parse");
        assert!(matches!(c.connect().await, Err(crate::LockError::InvalidConfig { .. })));
        let c: LockConfig =
            serde_json::from_str(r#"{"url":"memory://x","watchdog_lease":"0s"}"#).expect("parse");
        assert!(matches!(c.connect().await, Err(crate::LockError::InvalidLease { .. })));
    }
}
