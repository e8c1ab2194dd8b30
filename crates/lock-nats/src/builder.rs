//! Configuration: `NatsLock::builder().servers(..).bucket(..).lease_ttl(..).build().await`.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use lock_core::backend::cluster::{ClusterSettings, Connection};
use lock_core::{LockError, Result};

use crate::NatsLock;
use crate::options::{NATS, parse};

pub use lock_core::backend::cluster::{DEFAULT_CONNECT_TIMEOUT, DEFAULT_REQUEST_TIMEOUT};

/// The bucket used when none is given.
pub const DEFAULT_BUCKET: &str = "dlock";
/// The TTL a bucket is created with when none is given: how long a crashed or partitioned
/// holder keeps its locks. An existing bucket keeps its own.
pub const DEFAULT_LEASE_TTL: Duration = Duration::from_secs(10);
/// The shortest TTL a bucket may have: JetStream refuses a max age under 100 ms, and a lease
/// needs a few round trips.
pub const MIN_LEASE_TTL: Duration = Duration::from_millis(100);

/// Builder of a [`NatsLock`]. `Debug` never prints the password.
#[derive(Clone, Default)]
#[must_use = "a builder does nothing until built"]
pub struct NatsLockBuilder {
    settings: ClusterSettings<Tls>,
    bucket: Option<String>,
}

/// How to connect over TLS.
#[derive(Clone, Debug, Default)]
pub(crate) struct Tls {
    /// The CA certificate (a PEM file) the server's must chain to; `None`: the platform's roots.
    pub ca: Option<PathBuf>,
}

impl fmt::Debug for NatsLockBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NatsLockBuilder")
            .field("settings", &self.settings)
            .field("bucket", &self.bucket)
            .finish_non_exhaustive()
    }
}

/// The validated configuration.
#[derive(Clone, Debug)]
pub(crate) struct Config {
    /// Servers, timeouts, auth and TLS.
    pub conn: Connection<Tls>,
    pub bucket: String,
    /// The TTL asked for (`None`: the bucket's, or [`DEFAULT_LEASE_TTL`] for a new bucket).
    pub lease_ttl: Option<Duration>,
}

fn invalid(reason: impl Into<String>) -> LockError {
    LockError::InvalidConfig { reason: reason.into() }
}

impl NatsLockBuilder {
    lock_core::backend::cluster::cluster_builder! {
        /// The servers, `host:port` each (the client connects to one and fails over to the others).
        hosts: servers;
        /// The bucket's TTL: every hold's lease, how long a crashed or partitioned holder keeps
        /// its locks. A new bucket is created with it (default [`DEFAULT_LEASE_TTL`]); an existing
        /// bucket with another TTL is refused, since its clients would not agree on their leases.
        lease_ttl;
        /// Timeout of connecting (default [`DEFAULT_CONNECT_TIMEOUT`]).
        connect_timeout;
        /// Timeout of each request (default [`DEFAULT_REQUEST_TIMEOUT`]).
        request_timeout;
        /// User and password authentication.
        auth;
        /// Connect over TLS (what `nats+tls://` asks), trusting the platform's roots unless
        /// [`tls_ca`](Self::tls_ca) names a CA. Building fails without this crate's `tls` feature.
        tls;
    }

    /// Configure from a URL: `nats://[user:password@]host:port[,host:port...][/bucket]`
    /// (`nats+tls://` for TLS, as [`tls`](Self::tls)) with the optional query options
    /// `lease_ttl=10s`, `connect_timeout=2s`, `request_timeout=5s` and `ca=/path/ca.pem`
    /// (durations with their unit). Unknown or repeated options are refused by `build`.
    pub fn url(mut self, url: &str) -> Self {
        if let Some(u) = self.settings.take_url(parse(url)) {
            self.bucket = u.path.or(self.bucket);
            if let Some(ca) = u.extra {
                self.settings.tls_mut().ca = Some(ca);
            }
        }
        self
    }

    /// The key-value bucket every lock lives in (default [`DEFAULT_BUCKET`]; letters, digits,
    /// `-` and `_`). Its TTL is every lease of every client of it (see the crate docs).
    pub fn bucket(mut self, bucket: impl Into<String>) -> Self {
        self.bucket = Some(bucket.into());
        self
    }

    /// Connect over TLS and trust this CA certificate (a PEM file) for the server's.
    pub fn tls_ca(mut self, pem_file: impl Into<PathBuf>) -> Self {
        self.settings.set_tls(Tls { ca: Some(pem_file.into()) });
        self
    }

    pub(crate) fn into_config(self) -> Result<Config> {
        let lease_ttl = self.settings.lease_ttl();
        let conn = self.settings.check(&NATS, true)?;
        let bucket = self.bucket.unwrap_or_else(|| DEFAULT_BUCKET.to_owned());
        if bucket.is_empty() || !bucket.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_') {
            return Err(invalid(format!("nats bucket {bucket:?} may hold only letters, digits, - and _")));
        }
        if let Some(ttl) = lease_ttl
            && !(MIN_LEASE_TTL..=Duration::from_secs(86_400 * 365)).contains(&ttl)
        {
            return Err(invalid(format!("lease ttl {ttl:?} is out of range (at least {MIN_LEASE_TTL:?})")));
        }
        Ok(Config { conn, bucket, lease_ttl })
    }

    /// Connect, open the bucket (creating it with the TTL if it does not exist) and return the
    /// client.
    ///
    /// # Errors
    /// [`LockError::InvalidConfig`] for a bad configuration, a bucket whose TTL differs from
    /// the one asked for, or outside a tokio runtime; a temporary error when no server answers;
    /// `PermissionDenied` for bad credentials.
    pub async fn build(self) -> Result<NatsLock> {
        NatsLock::connect(self.into_config()?).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn url_parses_servers_bucket_auth_and_options() {
        let c = NatsLockBuilder::default()
            .url("nats://al%40ice:p%3Aw@h1:4222,h2:4223/locks?lease_ttl=1500ms")
            .into_config()
            .expect("valid url");
        assert_eq!(c.conn.hosts, ["h1:4222", "h2:4223"]);
        assert_eq!(c.bucket, "locks");
        assert_eq!(c.lease_ttl, Some(Duration::from_millis(1500)));
        assert_eq!(c.conn.auth, Some(("al@ice".to_owned(), "p:w".to_owned())));
        for dbg in [format!("{c:?}"), format!("{:?}", NatsLockBuilder::default().auth("u", "p:w"))] {
            assert!(!dbg.contains("p:w"), "{dbg}");
        }
        let c = NatsLockBuilder::default().servers(["h:1"]).into_config().expect("defaults");
        assert_eq!((c.bucket.as_str(), c.lease_ttl), (DEFAULT_BUCKET, None));
    }

    #[test]
    fn bad_configs_are_refused() {
        for url in [
            "redis://h:1",
            "nats://",
            "nats://h:1?bogus=1",
            "nats://h/x",
            "nats://h:0/x",
            "nats://h:1/a.b",
            "nats://h:1/a/b",
            "nats://h:1/x?lease_ttl=10ms",
        ] {
            assert!(NatsLockBuilder::default().url(url).into_config().is_err(), "{url}");
        }
        assert!(NatsLockBuilder::default().into_config().is_err(), "no servers");
        assert!(NatsLockBuilder::default().url("nats://[::1]:4222").into_config().is_ok());
    }

    #[test]
    fn tls_is_asked_by_nats_tls_urls_and_needs_the_feature() {
        let tls = NatsLockBuilder::default().url("nats+tls://h:4222/x").into_config();
        if cfg!(feature = "tls") {
            assert!(tls.expect("with the feature").conn.tls.is_some_and(|t| t.ca.is_none()));
        } else {
            let e = tls.expect_err("refused without the feature").to_string();
            assert!(e.contains("`tls` feature"), "{e}");
        }
        let c = NatsLockBuilder::default().url("nats://h:4222/x").into_config().expect("plain");
        assert!(c.conn.tls.is_none());
    }
}
