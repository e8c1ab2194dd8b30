//! Configuration: `EtcdLock::builder().endpoints(..).prefix(..).lease_ttl(..).build().await`.

use std::fmt;
use std::time::Duration;

use etcd_client::{Client, ConnectOptions};
use lock_core::{LockError, Result};

use crate::EtcdLock;
use crate::error::{bounded, lock_error};
use crate::options::EtcdUrl;

/// Key prefix used when none is given: lock keys are `<prefix>/<key>/<lease>_<n>`.
pub const DEFAULT_PREFIX: &str = "/dlock";
/// Lease TTL requested when none is given: how long a crashed or partitioned holder keeps its
/// locks. etcd counts leases in whole seconds and raises a TTL below its minimum (1.5 election
/// timeouts, rounded up to a second).
pub const DEFAULT_LEASE_TTL: Duration = Duration::from_secs(10);
/// Timeout of each unary request when none is given.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// Timeout of connecting to one endpoint when none is given.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// Builder of an [`EtcdLock`]. `Debug` never prints the password.
#[derive(Clone, Default)]
#[must_use = "a builder does nothing until built"]
pub struct EtcdLockBuilder {
    endpoints: Vec<String>,
    client: Option<Client>,
    prefix: Option<String>,
    lease_ttl: Option<Duration>,
    connect_timeout: Option<Duration>,
    request_timeout: Option<Duration>,
    auth: Option<(String, String)>,
    clock_drift: Option<(f64, Duration)>,
    tls: Option<Tls>,
    error: Option<String>,
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
            .field("endpoints", &self.endpoints)
            .field("own_client", &self.client.is_some())
            .field("prefix", &self.prefix)
            .field("lease_ttl", &self.lease_ttl)
            .field("auth_user", &self.auth.as_ref().map(|(u, _)| u))
            .field("tls", &self.tls.is_some())
            .finish_non_exhaustive()
    }
}

/// The validated configuration.
#[derive(Clone)]
pub(crate) struct Config {
    /// `host:port` of every endpoint (empty with the user's own client).
    pub endpoints: Vec<String>,
    /// Key prefix without a trailing slash (may be `""`).
    pub prefix: String,
    /// Requested lease TTL, whole seconds.
    pub lease_ttl: Duration,
    pub connect_timeout: Duration,
    pub request_timeout: Duration,
    pub auth: Option<(String, String)>,
    /// Clock-drift margin: holds are given up `ttl * rate + floor` before the lease can expire
    /// on the server.
    pub clock_drift: (f64, Duration),
    pub tls: Option<Tls>,
}

impl fmt::Debug for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Config")
            .field("endpoints", &self.endpoints)
            .field("prefix", &self.prefix)
            .field("lease_ttl", &self.lease_ttl)
            .field("auth_user", &self.auth.as_ref().map(|(u, _)| u))
            .field("tls", &self.tls.is_some())
            .finish_non_exhaustive()
    }
}

fn invalid(reason: impl Into<String>) -> LockError {
    LockError::InvalidConfig { reason: reason.into() }
}

impl EtcdLockBuilder {
    /// The cluster's client endpoints, `host:port` each (`http://` is added; several endpoints
    /// are balanced and failed over by the client).
    pub fn endpoints<S: Into<String>>(mut self, endpoints: impl IntoIterator<Item = S>) -> Self {
        self.endpoints = endpoints.into_iter().map(Into::into).collect();
        self
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
        match EtcdUrl::parse(url) {
            Ok(u) => {
                self.endpoints = u.endpoints;
                self.prefix = u.prefix.or(self.prefix);
                self.auth = u.auth.or(self.auth);
                self.lease_ttl = u.lease_ttl.or(self.lease_ttl);
                self.connect_timeout = u.connect_timeout.or(self.connect_timeout);
                self.request_timeout = u.request_timeout.or(self.request_timeout);
                if u.tls {
                    self.tls = Some(self.tls.unwrap_or_default());
                }
            }
            Err(LockError::InvalidConfig { reason }) => self.error = Some(reason),
            Err(e) => self.error = Some(e.to_string()),
        }
        self
    }

    /// The key prefix under which every lock lives (default [`DEFAULT_PREFIX`]); the role of
    /// the user needs read-write permission on `<prefix>/` only.
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = Some(prefix.into());
        self
    }

    /// The lease TTL (default [`DEFAULT_LEASE_TTL`], rounded up to whole seconds; the server
    /// may raise it to its minimum): how long a crashed or partitioned holder keeps its locks.
    pub fn lease_ttl(mut self, ttl: Duration) -> Self {
        self.lease_ttl = Some(ttl);
        self
    }

    /// Timeout of connecting to an endpoint (default [`DEFAULT_CONNECT_TIMEOUT`]).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = Some(timeout);
        self
    }

    /// Timeout of each request (default [`DEFAULT_REQUEST_TIMEOUT`]).
    pub fn request_timeout(mut self, timeout: Duration) -> Self {
        self.request_timeout = Some(timeout);
        self
    }

    /// etcd user authentication (the client refreshes its token when it expires).
    pub fn auth(mut self, user: impl Into<String>, password: impl Into<String>) -> Self {
        self.auth = Some((user.into(), password.into()));
        self
    }

    /// Connect over TLS (what `etcds://` asks): the server's certificate must chain to the
    /// platform's trusted roots (`SSL_CERT_FILE` names another bundle) unless
    /// [`tls_root_cert`](Self::tls_root_cert) gives the CA. Building fails with
    /// [`LockError::InvalidConfig`] without this crate's `tls` feature.
    pub fn tls(mut self) -> Self {
        self.tls = Some(self.tls.unwrap_or_default());
        self
    }

    /// Connect over TLS and trust only this CA certificate (PEM) for the server's.
    pub fn tls_root_cert(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.tls = Some(Tls { root_cert: Some(pem.into()) });
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
        if let Some(e) = self.error {
            return Err(invalid(e));
        }
        if self.tls.is_some() && !cfg!(feature = "tls") {
            return Err(invalid("etcd over TLS (etcds://) needs lock-etcd's `tls` feature (dlock's `tls`)"));
        }
        if self.client.is_none() {
            if self.endpoints.is_empty() {
                return Err(invalid("etcd endpoints are missing"));
            }
            for e in &self.endpoints {
                validate_endpoint(e).map_err(invalid)?;
            }
        }
        let prefix = normalize_prefix(self.prefix.as_deref().unwrap_or(DEFAULT_PREFIX)).map_err(invalid)?;
        if let Some((user, _)) = &self.auth
            && user.is_empty()
        {
            return Err(invalid("etcd user must be non-empty"));
        }
        let ttl = self.lease_ttl.unwrap_or(DEFAULT_LEASE_TTL);
        if ttl.is_zero() || ttl > Duration::from_secs(i64::MAX as u64 / 2) {
            return Err(invalid(format!("lease ttl {ttl:?} is out of range")));
        }
        let clock_drift =
            self.clock_drift.unwrap_or((lock_core::DRIFT_MARGIN_RATE, lock_core::DRIFT_MARGIN_FLOOR));
        if !(0.0..=0.5).contains(&clock_drift.0) {
            return Err(invalid(format!("clock drift rate {} is outside 0.0..=0.5", clock_drift.0)));
        }
        let config = Config {
            endpoints: self.endpoints,
            prefix,
            lease_ttl: Duration::from_secs(ttl.as_secs() + u64::from(ttl.subsec_nanos() > 0)),
            connect_timeout: self.connect_timeout.unwrap_or(DEFAULT_CONNECT_TIMEOUT),
            request_timeout: self.request_timeout.unwrap_or(DEFAULT_REQUEST_TIMEOUT),
            auth: self.auth,
            clock_drift,
            tls: self.tls,
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
            None => connect(&cfg).await?,
        };
        EtcdLock::start(cfg, client).await
    }
}

async fn connect(cfg: &Config) -> Result<Client> {
    // No client-side per-request timeout (it would end keep-alive and watch streams, see
    // `error::bounded`) and no HTTP/2 pings (etcd answers pings more often than every 5 s with
    // GOAWAY): requests are bounded one by one, and the keep-alive finds a dead connection.
    let mut opts =
        ConnectOptions::new().with_connect_timeout(cfg.connect_timeout).with_auto_token_refresh(true);
    if let Some((user, pw)) = &cfg.auth {
        opts = opts.with_user(user.clone(), pw.clone());
    }
    #[cfg(feature = "tls")]
    if let Some(tls) = &cfg.tls {
        use etcd_client::{Certificate, TlsOptions};
        opts = opts.with_tls(match &tls.root_cert {
            Some(pem) => TlsOptions::new().ca_certificate(Certificate::from_pem(pem)),
            None => TlsOptions::new().with_native_roots(),
        });
    }
    let scheme = if cfg.tls.is_some() { "https" } else { "http" };
    let urls: Vec<String> = cfg.endpoints.iter().map(|e| format!("{scheme}://{e}")).collect();
    // With a user, connecting authenticates: a request that waits for an endpoint to answer.
    let limit = cfg.connect_timeout + cfg.request_timeout;
    bounded(limit, Client::connect(urls, Some(opts))).await.map_err(lock_error)
}

/// `host:port` with a host and a valid port: a typo is a configuration error, not a server
/// that never answers.
fn validate_endpoint(e: &str) -> std::result::Result<(), String> {
    let (host, port) = e.rsplit_once(':').ok_or_else(|| format!("etcd endpoint {e:?} needs host:port"))?;
    if host.is_empty()
        || host == "[]"
        || (host.contains(':') && !(host.starts_with('[') && host.ends_with(']')))
    {
        return Err(format!("etcd endpoint {e:?} has no valid host (write IPv6 addresses as [addr]:port)"));
    }
    if !port.parse::<u16>().is_ok_and(|p| p > 0) {
        return Err(format!("etcd endpoint {e:?} has an invalid port {port:?}"));
    }
    Ok(())
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
        assert_eq!(c.endpoints, ["h1:2379", "h2:2380"]);
        assert_eq!(c.prefix, "/locks/app");
        assert_eq!(c.lease_ttl, Duration::from_secs(2), "rounded up to whole seconds");
        assert_eq!(c.auth, Some(("al@ice".to_owned(), "p:w".to_owned())));
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
            assert!(c.tls.is_some_and(|t| t.root_cert.is_none()), "the platform's roots");
            let (c, _) = with_ca.expect("a CA");
            assert_eq!(c.tls.and_then(|t| t.root_cert).as_deref(), Some(&b"pem"[..]));
        } else {
            let e = tls.err().expect("refused without the feature").to_string();
            assert!(e.contains("`tls` feature"), "{e}");
            assert!(with_ca.is_err());
        }
        let (c, _) = EtcdLockBuilder::default().url("etcd://h:2379/x").into_config().expect("plain");
        assert!(c.tls.is_none());
    }
}
