//! For stores reached through one long-lived client of a cluster (etcd, NATS): a list of
//! `host:port` endpoints, user and password, TLS, a lease TTL and the connect and request
//! timeouts, each taken from the builder or from a host-list URL
//! (`scheme://[user:password@]host:port[,host:port...][/path][?options]`). Written once so
//! that the URL, the defaults, the checks and their messages are the same in every such store.
//!
//! - [`Cluster`]: what a store tells about itself (its name, schemes, crate), from which every
//!   message is made.
//! - [`ClusterUrl`]: what a URL sets, from [`Cluster::parse_url`].
//! - [`ClusterSettings`] and [`cluster_builder!`]: the builder's settings and their setters;
//!   [`ClusterSettings::check`] turns them into a [`Connection`].
//!
//! The store keeps what is its own: the URL's path (a key prefix, a bucket), the TTL's bounds
//! and its TLS settings (the type `T`).

mod settings;
mod url;

use std::fmt;
use std::time::Duration;

pub use crate::cluster_builder;
pub use settings::ClusterSettings;
pub use url::ClusterUrl;

/// Timeout of each request when none is given.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// Timeout of connecting when none is given.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// A cluster store as its messages name it.
#[derive(Clone, Copy, Debug)]
pub struct Cluster {
    /// The store's name in lower case, as its URL's messages say it (`etcd`, `nats`).
    pub name: &'static str,
    /// The store's name as prose writes it (`etcd`, `NATS`).
    pub title: &'static str,
    /// The store's crate, whose `tls` feature TLS needs.
    pub krate: &'static str,
    /// Whether that crate was built with its `tls` feature: `cfg!(feature = "tls")` there.
    pub tls_built: bool,
    /// The plain scheme with its `://` (`etcd://`).
    pub plain: &'static str,
    /// The TLS scheme with its `://` (`etcds://`).
    pub tls: &'static str,
    /// What one `host:port` is called (`endpoint`, `server`).
    pub host: &'static str,
}

impl Cluster {
    /// `host:port` with a host and a valid port: a typo is a configuration error, not a server
    /// that never answers.
    ///
    /// # Errors
    /// The reason, naming the host.
    pub fn check_host(&self, e: &str) -> std::result::Result<(), String> {
        let what = format!("{} {} {e:?}", self.name, self.host);
        let (host, port) = e.rsplit_once(':').ok_or_else(|| format!("{what} needs host:port"))?;
        if host.is_empty()
            || host == "[]"
            || (host.contains(':') && !(host.starts_with('[') && host.ends_with(']')))
        {
            return Err(format!("{what} has no valid host (write IPv6 addresses as [addr]:port)"));
        }
        if !port.parse::<u16>().is_ok_and(|p| p > 0) {
            return Err(format!("{what} has an invalid port {port:?}"));
        }
        Ok(())
    }
}

/// The checked connection settings of a cluster store, with their defaults applied; `T` is the
/// store's TLS settings. `Debug` never prints the password.
#[derive(Clone)]
pub struct Connection<T> {
    /// `host:port` of every endpoint (empty when the user gave the store a client).
    pub hosts: Vec<String>,
    /// Timeout of connecting to an endpoint.
    pub connect_timeout: Duration,
    /// Timeout of each request.
    pub request_timeout: Duration,
    /// User and password.
    pub auth: Option<(String, String)>,
    /// `None`: in the clear.
    pub tls: Option<T>,
}

impl<T> fmt::Debug for Connection<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Connection")
            .field("hosts", &self.hosts)
            .field("auth_user", &self.auth.as_ref().map(|(u, _)| u))
            .field("tls", &self.tls.is_some())
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(super) const TEST: Cluster = Cluster {
        name: "etcd",
        title: "etcd",
        krate: "lock-etcd",
        tls_built: true,
        plain: "etcd://",
        tls: "etcds://",
        host: "endpoint",
    };

    #[test]
    fn hosts_need_a_host_and_a_port() {
        for ok in ["h:1", "[::1]:2379", "10.0.0.1:65535"] {
            assert_eq!(TEST.check_host(ok), Ok(()), "{ok}");
        }
        let e = |h: &str| TEST.check_host(h).expect_err(h);
        assert_eq!(e("h"), "etcd endpoint \"h\" needs host:port");
        assert!(e(":1").contains("has no valid host"));
        assert!(e("[]:1").contains("has no valid host"));
        assert!(e("::1:2").contains("write IPv6 addresses as [addr]:port"));
        assert_eq!(e("h:0"), "etcd endpoint \"h:0\" has an invalid port \"0\"");
        assert!(e("h:x").contains("invalid port"));
    }

    #[test]
    fn debug_never_shows_the_password() {
        let c = Connection::<()> {
            hosts: vec!["h:1".into()],
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
            auth: Some(("u".into(), "s3cret".into())),
            tls: None,
        };
        let shown = format!("{c:?}");
        assert!(shown.contains("\"u\"") && !shown.contains("s3cret"), "{shown}");
    }
}
