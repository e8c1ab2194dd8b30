//! Configuration: `EtcdLock::builder().endpoints(..).prefix(..).lease_ttl(..).build().await`.

use std::fmt;
use std::time::Duration;

use etcd_client::{Client, ConnectOptions};
use lock_core::backend::cluster::{ClusterSettings, Connection};
use lock_core::{LockError, Result};

use crate::EtcdLock;
use crate::error::{bounded, lock_error};
use crate::options::{ETCD, parse};

pub use lock_core::backend::cluster::{DEFAULT_CONNECT_TIMEOUT, DEFAULT_REQUEST_TIMEOUT};

/// Key prefix used when none is given: lock keys are `<prefix>/<key>/<lease>_<n>`.
pub const DEFAULT_PREFIX: &str = "/dlock";
/// Lease TTL requested when none is given: how long a crashed or partitioned holder keeps its
/// locks. etcd counts leases in whole seconds and raises a TTL below its minimum (1.5 election
/// timeouts, rounded up to a second).
pub const DEFAULT_LEASE_TTL: Duration = Duration::from_secs(10);

/// Builder of an [`EtcdLock`]. `Debug` never prints the password.
#[derive(Clone, Default)]
#[must_use = "a builder does nothing until built"]
pub struct EtcdLockBuilder {
    settings: ClusterSettings<Tls>,
    client: Option<Client>,
    prefix: Option<String>,
    clock_drift: Option<(f64, Duration)>,
}

/// How to connect over TLS.
#[derive(Clone, Debug, Default)]
pub(crate) struct Tls {
    /// The CA certificate (PEM) the server's must chain to; `None`: the platform's roots.
    // Read only where TLS is built in; elsewhere building refuses any TLS setting.
    #[cfg_attr(not(feature = "tls"), allow(dead_code))]
    pub root_cert: Option<Vec<u8>>,
}

impl fmt::Debug for EtcdLockBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EtcdLockBuilder")
            .field("settings", &self.settings)
            .field("own_client", &self.client.is_some())
            .field("prefix", &self.prefix)
            .finish_non_exhaustive()
    }
}

/// The validated configuration.
#[derive(Clone, Debug)]
pub(crate) struct Config {
    /// Endpoints (empty with the user's own client), timeouts, auth and TLS.
    pub conn: Connection<Tls>,
    /// Key prefix without a trailing slash (may be `""`).
    pub prefix: String,
    /// Requested lease TTL, whole seconds.
    pub lease_ttl: Duration,
    /// Clock-drift margin: holds are given up `ttl * rate + floor` before the lease can expire
    /// on the server.
    pub clock_drift: (f64, Duration),
}

fn invalid(reason: impl Into<String>) -> LockError {
    LockError::InvalidConfig { reason: reason.into() }
}

impl EtcdLockBuilder {
    lock_core::backend::cluster::cluster_builder! {
        /// The cluster's client endpoints, `host:port` each (`http://` is added; several endpoints
        /// are balanced and failed over by the client).
        hosts: endpoints;
        /// The lease TTL (default [`DEFAULT_LEASE_TTL`], rounded up to whole seconds; the server
        /// may raise it to its minimum): how long a crashed or partitioned holder keeps its locks.
        lease_ttl;
        /// Timeout of connecting to an endpoint (default [`DEFAULT_CONNECT_TIMEOUT`]).
        connect_timeout;
        /// Timeout of each request (default [`DEFAULT_REQUEST_TIMEOUT`]).
        request_timeout;
        /// etcd user authentication (the client refreshes its token when it expires).
        auth;
        /// Connect over TLS (what `etcds://` asks): the server's certificate must chain to the
        /// platform's trusted roots (`SSL_CERT_FILE` names another bundle) unless
        /// [`tls_root_cert`](Self::tls_root_cert) gives the CA. Building fails with
        /// [`LockError::InvalidConfig`] without this crate's `tls` feature.
        tls;
    }

    /// Use this client instead of connecting (its endpoints, auth and timeouts are the
    /// caller's; `endpoints`, `auth` and the timeouts of this builder are then ignored).
    pub fn client(mut self, client: Client) -> Self {
        self.client = Some(client);
        self
    }

    /// Configure from a URL: `etcd://[user:password@]host:port[,host:port...][/prefix]`
    /// (`etcds://` for TLS, as [`tls`](Self::tls)) with the optional query options `lease_ttl=10s`, `connect_timeout=2s` and
    /// `request_timeout=5s` (durations with their unit: `250ms`, `2s`, `1m`; a bare number is refused). Unknown
    /// or repeated options are refused by `build`. User and password are percent-encoded.
    /// Settings given here replace earlier ones, and later builder calls replace these.
    pub fn url(mut self, url: &str) -> Self {
        if let Some(u) = self.settings.take_url(parse(url)) {
            self.prefix = u.path.or(self.prefix);
        }
        self
    }

    /// The key prefix under which every lock lives (default [`DEFAULT_PREFIX`]); the role of
    /// the user needs read-write permission on `<prefix>/` only.
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = Some(prefix.into());
        self
    }

    /// Connect over TLS and trust only this CA certificate (PEM) for the server's.
    pub fn tls_root_cert(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.settings.set_tls(Tls { root_cert: Some(pem.into()) });
        self
    }

    /// How much earlier than the server this client gives its holds up when it cannot confirm
    /// its lease: `ttl * rate + floor` (defaults: the core's
    /// [`DRIFT_MARGIN_RATE`](lock_core::DRIFT_MARGIN_RATE) and
    /// [`DRIFT_MARGIN_FLOOR`](lock_core::DRIFT_MARGIN_FLOOR); at most half the TTL).
    pub fn clock_drift(mut self, rate: f64, floor: Duration) -> Self {
        self.clock_drift = Some((rate, floor));
        self
    }

    pub(crate) fn into_config(self) -> Result<(Config, Option<Client>)> {
        let ttl = self.settings.lease_ttl().unwrap_or(DEFAULT_LEASE_TTL);
        let conn = self.settings.check(&ETCD, self.client.is_none())?;
        let prefix = normalize_prefix(self.prefix.as_deref().unwrap_or(DEFAULT_PREFIX)).map_err(invalid)?;
        if ttl.is_zero() || ttl > Duration::from_secs(i64::MAX as u64 / 2) {
            return Err(invalid(format!("lease ttl {ttl:?} is out of range")));
        }
        let clock_drift =
            self.clock_drift.unwrap_or((lock_core::DRIFT_MARGIN_RATE, lock_core::DRIFT_MARGIN_FLOOR));
        if !(0.0..=0.5).contains(&clock_drift.0) {
            return Err(invalid(format!("clock drift rate {} is outside 0.0..=0.5", clock_drift.0)));
        }
        let config = Config {
            conn,
            prefix,
            lease_ttl: Duration::from_secs(ttl.as_secs() + u64::from(ttl.subsec_nanos() > 0)),
            clock_drift,
        };
        Ok((config, self.client))
    }

    /// Connect (or take the given client), grant the lease every lock of the returned
    /// [`EtcdLock`] and its clones is put under, and start keeping it alive.
    ///
    /// # Errors
    /// [`LockError::InvalidConfig`] for a bad configuration or outside a tokio runtime;
    /// a temporary backend error when no endpoint answers; `PermissionDenied` for bad
    /// credentials.
    pub async fn build(self) -> Result<EtcdLock> {
        let (cfg, client) = self.into_config()?;
        let client = match client {
            Some(c) => c,
            None => connect(&cfg.conn).await?,
        };
        EtcdLock::start(cfg, client).await
    }
}

async fn connect(conn: &Connection<Tls>) -> Result<Client> {
    // No client-side per-request timeout (it would end keep-alive and watch streams, see
    // `error::bounded`) and no HTTP/2 pings (etcd answers pings more often than every 5 s with
    // GOAWAY): requests are bounded one by one, and the keep-alive finds a dead connection.
    let mut opts =
        ConnectOptions::new().with_connect_timeout(conn.connect_timeout).with_auto_token_refresh(true);
    if let Some((user, pw)) = &conn.auth {
        opts = opts.with_user(user.clone(), pw.clone());
    }
    #[cfg(feature = "tls")]
    if let Some(tls) = &conn.tls {
        use etcd_client::{Certificate, TlsOptions};
        opts = opts.with_tls(match &tls.root_cert {
            Some(pem) => TlsOptions::new().ca_certificate(Certificate::from_pem(pem)),
            None => TlsOptions::new().with_native_roots(),
        });
    }
    let scheme = if conn.tls.is_some() { "https" } else { "http" };
    let urls: Vec<String> = conn.hosts.iter().map(|e| format!("{scheme}://{e}")).collect();
    // With a user, connecting authenticates: a request that waits for an endpoint to answer.
    let limit = conn.connect_timeout + conn.request_timeout;
    bounded(limit, Client::connect(urls, Some(opts))).await.map_err(lock_error)
}

fn normalize_prefix(prefix: &str) -> std::result::Result<String, String> {
    if prefix.chars().any(char::is_control) {
        return Err(format!("key prefix {prefix:?} has control characters"));
    }
    Ok(prefix.trim_end_matches('/').to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn url_parses_endpoints_prefix_auth_and_options() {
        let (c, _) = EtcdLockBuilder::default()
            .url("etcd://al%40ice:p%3Aw@h1:2379,h2:2380/locks/app/?lease_ttl=1500ms")
            .into_config()
            .expect("valid url");
        assert_eq!(c.conn.hosts, ["h1:2379", "h2:2380"]);
        assert_eq!(c.prefix, "/locks/app");
        assert_eq!(c.lease_ttl, Duration::from_secs(2), "rounded up to whole seconds");
        assert_eq!(c.conn.auth, Some(("al@ice".to_owned(), "p:w".to_owned())));
        for dbg in [format!("{c:?}"), format!("{:?}", EtcdLockBuilder::default().auth("u", "p:w"))] {
            assert!(!dbg.contains("p:w"), "{dbg}");
        }
        let (c, _) = EtcdLockBuilder::default().endpoints(["h:1"]).into_config().expect("defaults");
        assert_eq!((c.prefix.as_str(), c.lease_ttl), (DEFAULT_PREFIX, DEFAULT_LEASE_TTL));
    }

    #[test]
    fn bad_configs_are_refused() {
        for url in
            ["redis://h:1", "etcd://", "etcd://h:1?bogus=1", "etcd://h/x", "etcd://h:0/x", "etcd://::1:2/x"]
        {
            assert!(EtcdLockBuilder::default().url(url).into_config().is_err(), "{url}");
        }
        assert!(EtcdLockBuilder::default().into_config().is_err(), "no endpoints");
        let zero = EtcdLockBuilder::default().endpoints(["h:1"]).lease_ttl(Duration::ZERO);
        assert!(zero.into_config().is_err());
        assert!(EtcdLockBuilder::default().url("etcd://[::1]:2379").into_config().is_ok());
    }

    #[test]
    fn tls_is_asked_by_etcds_urls_and_needs_the_feature() {
        let tls = EtcdLockBuilder::default().url("etcds://h:2379/x").into_config();
        let with_ca =
            EtcdLockBuilder::default().endpoints(["h:1"]).tls_root_cert(b"pem".to_vec()).into_config();
        if cfg!(feature = "tls") {
            let (c, _) = tls.expect("etcds:// with the tls feature");
            assert!(c.conn.tls.is_some_and(|t| t.root_cert.is_none()), "the platform's roots");
            let (c, _) = with_ca.expect("a CA");
            assert_eq!(c.conn.tls.and_then(|t| t.root_cert).as_deref(), Some(&b"pem"[..]));
        } else {
            let e = tls.err().expect("refused without the feature").to_string();
            assert!(e.contains("`tls` feature"), "{e}");
            assert!(with_ca.is_err());
        }
        let (c, _) = EtcdLockBuilder::default().url("etcd://h:2379/x").into_config().expect("plain");
        assert!(c.conn.tls.is_none());
    }
}
