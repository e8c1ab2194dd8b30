//! The storage [`Mode`] and the URL options of [`RedisLock::from_url`](crate::RedisLock::from_url).

use std::fmt;
use std::str::FromStr;

use lock_core::backend::UrlOptions;
use lock_core::{LockError, Result};

/// How locks are stored.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Mode {
    /// A string `owner token` set with `SET NX PX`; not reentrant. The fastest mode.
    #[default]
    Simple,
    /// A hash `{owner token -> hold count}` (Redisson's model): the same owner token nests.
    Reentrant,
    /// Reentrant plus a FIFO queue of waiters with per-waiter timeouts: waiters are served in
    /// arrival order, and a dead waiter blocks the queue for at most its timeout.
    Fair,
    /// Interop with redis-py's `redis.lock.Lock(r, name)`: the lock is the plain string key
    /// `<key_prefix><key>` (no prefix by default, no escaping, no hash tag) taken with
    /// `SET NX PX` and freed by compare-and-delete, as redis-py does. No hand-over to waiters;
    /// waiters poll for the other side's releases. See the README, "Sharing the lock with Python".
    RedisPy,
    /// Interop with python-redis-lock's `redis_lock.Lock(r, name)`: as [`Mode::RedisPy`] on the
    /// key `lock:<key_prefix><key>`, and a release pushes its signal list
    /// `lock-signal:<key_prefix><key>` exactly as python-redis-lock's own release does, so its
    /// waiters (blocked in `BLPOP`) wake at once.
    PythonRedisLock,
}

impl Mode {
    /// One of the modes that share the lock with another library's clients (a plain string
    /// key the other side also takes with `SET NX`).
    pub fn is_interop(self) -> bool {
        matches!(self, Mode::RedisPy | Mode::PythonRedisLock)
    }
}

impl FromStr for Mode {
    type Err = String;

    /// `simple`, `reentrant`, `fair`, `redis-py` or `python-redis-lock`, as in `?mode=`.
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "simple" => Ok(Mode::Simple),
            "reentrant" => Ok(Mode::Reentrant),
            "fair" => Ok(Mode::Fair),
            "redis-py" => Ok(Mode::RedisPy),
            "python-redis-lock" => Ok(Mode::PythonRedisLock),
            _ => Err("expected simple, reentrant, fair, redis-py or python-redis-lock".to_owned()),
        }
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Mode::Simple => "simple",
            Mode::Reentrant => "reentrant",
            Mode::Fair => "fair",
            Mode::RedisPy => "redis-py",
            Mode::PythonRedisLock => "python-redis-lock",
        })
    }
}

/// Query options redis-rs reads from the URL itself (`protocol=`; `db=`, `user=`, `pass=` for
/// `redis+unix://`): left in the URL for the driver. Any other option we do not know is an
/// error, so a typo is not silently ignored.
const DRIVER_OPTIONS: &[&str] = &["protocol", "db", "user", "pass"];

/// What a URL says beyond where to connect.
#[derive(Debug)]
pub(crate) struct UrlConfig {
    /// The URL for the driver: ours taken out, the driver's own kept.
    pub(crate) url: String,
    pub(crate) mode: Option<Mode>,
    pub(crate) key_prefix: Option<String>,
    pub(crate) replica_ack: Option<u32>,
    pub(crate) replica_ack_timeout: Option<std::time::Duration>,
}

/// Take `mode=` and `key_prefix=` (percent-decoded) out of `url`.
///
/// # Errors
/// [`LockError::InvalidConfig`] for a bad mode, an option given twice or an unknown option
/// (never showing the password).
pub(crate) fn parse(url: &str) -> Result<UrlConfig> {
    let mut o = UrlOptions::parse(url)?;
    let mode = o.take::<Mode>("mode")?;
    let key_prefix = o.take::<String>("key_prefix")?;
    let replica_ack = o.take::<u32>("replica_ack")?;
    let replica_ack_timeout = o.take_duration("replica_ack_timeout")?;
    if replica_ack.is_none() && replica_ack_timeout.is_some() {
        return Err(LockError::InvalidConfig {
            reason: "replica_ack_timeout needs replica_ack (how many replicas)".to_owned(),
        });
    }
    let unknown: Vec<&str> = o.remaining().filter(|n| !DRIVER_OPTIONS.contains(n)).collect();
    if !unknown.is_empty() {
        return Err(LockError::InvalidConfig {
            reason: format!(
                "unknown redis url option {} (known: mode, key_prefix, replica_ack, replica_ack_timeout, {})",
                unknown.join(", "),
                DRIVER_OPTIONS.join(", ")
            ),
        });
    }
    Ok(UrlConfig { url: o.into_url(), mode, key_prefix, replica_ack, replica_ack_timeout })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ours_are_taken_the_drivers_kept_and_typos_refused() {
        let c = parse("redis://:p%3Fw@h:1/0?mode=fair&key_prefix=a%3Ab&protocol=resp3").expect("parse");
        assert_eq!(c.mode, Some(Mode::Fair));
        assert_eq!(c.key_prefix.as_deref(), Some("a:b"));
        assert_eq!(c.url, "redis://:p%3Fw@h:1/0?protocol=resp3");

        let c = parse("redis://h:1/").expect("no options");
        assert_eq!((c.mode, c.key_prefix, c.url.as_str()), (None, None, "redis://h:1/"));
        // An `@` in an option is the option's, not the end of credentials.
        let c = parse("redis://h:1/0?key_prefix=ops@x").expect("an @ in an option");
        assert_eq!((c.key_prefix.as_deref(), c.url.as_str()), (Some("ops@x"), "redis://h:1/0"));
        let c = parse("redis://u:pw@h:1/0?key_prefix=ops@x").expect("and with credentials");
        assert_eq!((c.key_prefix.as_deref(), c.url.as_str()), (Some("ops@x"), "redis://u:pw@h:1/0"));
        assert_eq!((c.replica_ack, c.replica_ack_timeout), (None, None));
        let c = parse("redis://h:1/?replica_ack=2&replica_ack_timeout=250ms").expect("replica ack");
        assert_eq!(
            (c.replica_ack, c.replica_ack_timeout),
            (Some(2), Some(std::time::Duration::from_millis(250)))
        );
        assert_eq!(c.url, "redis://h:1/");

        for bad in [
            "redis://h/?mode=nope",
            "redis://h/?mode=",
            "redis://h/?mdoe=fair",
            "redis://h/?mode=fair&mode=simple",
            "redis://h/?replica_ack=-1",
            "redis://h/?replica_ack_timeout=1s",
        ] {
            assert!(matches!(parse(bad), Err(LockError::InvalidConfig { .. })), "{bad}");
        }
        let e = parse("redis://:s3cr3t@h/?prefix=x").expect_err("typo").to_string();
        assert!(e.contains("prefix") && !e.contains("s3cr3t"), "{e}");
        // A raw password with `?` is userinfo, not a query.
        let c = parse("redis://:a?mode=x@h:1/?mode=reentrant").expect("raw password");
        assert_eq!((c.mode, c.url.as_str()), (Some(Mode::Reentrant), "redis://:a?mode=x@h:1/"));
        let c = parse("redis://h:1/?mode=python-redis-lock").expect("interop mode");
        assert_eq!(c.mode, Some(Mode::PythonRedisLock));
        for m in [Mode::Simple, Mode::Reentrant, Mode::Fair, Mode::RedisPy, Mode::PythonRedisLock] {
            assert_eq!(m.to_string().parse::<Mode>(), Ok(m));
        }
    }
}
