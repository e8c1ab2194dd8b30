//! The settings a cluster store's builder keeps for its connection: one value, so that which
//! setting wins, the defaults and the checks are decided once for every such store.

use std::fmt;
use std::time::Duration;

use super::{Cluster, ClusterUrl, Connection, DEFAULT_CONNECT_TIMEOUT, DEFAULT_REQUEST_TIMEOUT};
use crate::{LockError, Result};

/// Endpoints, user and password, TLS (`T`, the store's), lease TTL and timeouts as a builder
/// was told them, and the error of a URL it could not take; its public setters delegate here.
/// `Debug` never prints the password.
#[derive(Clone)]
pub struct ClusterSettings<T> {
    hosts: Vec<String>,
    auth: Option<(String, String)>,
    lease_ttl: Option<Duration>,
    connect_timeout: Option<Duration>,
    request_timeout: Option<Duration>,
    tls: Option<T>,
    error: Option<String>,
}

impl<T> Default for ClusterSettings<T> {
    fn default() -> Self {
        ClusterSettings {
            hosts: Vec::new(),
            auth: None,
            lease_ttl: None,
            connect_timeout: None,
            request_timeout: None,
            tls: None,
            error: None,
        }
    }
}

impl<T> fmt::Debug for ClusterSettings<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClusterSettings")
            .field("hosts", &self.hosts)
            .field("lease_ttl", &self.lease_ttl)
            .field("auth_user", &self.auth.as_ref().map(|(u, _)| u))
            .field("tls", &self.tls.is_some())
            .finish_non_exhaustive()
    }
}

impl<T: Default> ClusterSettings<T> {
    /// Take what a parsed URL sets: its hosts replace the builder's, each other setting it
    /// gives replaces an earlier one, and its TLS scheme asks for TLS. A URL that did not parse
    /// is kept as the error `check` answers. Returns the URL for the store's own parts.
    pub fn take_url<X>(&mut self, parsed: Result<ClusterUrl<X>>) -> Option<ClusterUrl<X>> {
        match parsed {
            Ok(mut u) => {
                self.hosts = std::mem::take(&mut u.hosts);
                self.auth = u.auth.take().or(self.auth.take());
                self.lease_ttl = u.lease_ttl.or(self.lease_ttl);
                self.connect_timeout = u.connect_timeout.or(self.connect_timeout);
                self.request_timeout = u.request_timeout.or(self.request_timeout);
                if u.tls {
                    self.tls_mut();
                }
                Some(u)
            }
            Err(LockError::InvalidConfig { reason }) => {
                self.error = Some(reason);
                None
            }
            Err(e) => {
                self.error = Some(e.to_string());
                None
            }
        }
    }

    /// The TLS settings, asking for TLS (with the defaults of `T`) if it was not asked yet.
    pub fn tls_mut(&mut self) -> &mut T {
        self.tls.get_or_insert_with(T::default)
    }
}

impl<T> ClusterSettings<T> {
    /// Set the endpoints.
    pub fn set_hosts<S: Into<String>>(&mut self, hosts: impl IntoIterator<Item = S>) {
        self.hosts = hosts.into_iter().map(Into::into).collect();
    }

    /// Set user and password.
    pub fn set_auth(&mut self, user: String, password: String) {
        self.auth = Some((user, password));
    }

    /// Set the lease TTL, unchecked (its bounds are the store's).
    pub fn set_lease_ttl(&mut self, ttl: Duration) {
        self.lease_ttl = Some(ttl);
    }

    /// Set the connect timeout.
    pub fn set_connect_timeout(&mut self, timeout: Duration) {
        self.connect_timeout = Some(timeout);
    }

    /// Set the request timeout.
    pub fn set_request_timeout(&mut self, timeout: Duration) {
        self.request_timeout = Some(timeout);
    }

    /// Set the TLS settings (asking for TLS).
    pub fn set_tls(&mut self, tls: T) {
        self.tls = Some(tls);
    }

    /// The lease TTL set, if any, for the store to check and default.
    pub fn lease_ttl(&self) -> Option<Duration> {
        self.lease_ttl
    }

    /// The connection, checked, with the defaults applied: the URL's error if any, TLS only
    /// with the store's `tls` feature, at least one endpoint (when `need_hosts`: not when the
    /// user gave the store a client), every endpoint `host:port`, a non-empty user.
    ///
    /// # Errors
    /// [`LockError::InvalidConfig`] naming what is wrong.
    pub fn check(self, cluster: &Cluster, need_hosts: bool) -> Result<Connection<T>> {
        let invalid = |reason: String| LockError::InvalidConfig { reason };
        if let Some(e) = self.error {
            return Err(invalid(e));
        }
        let Cluster { name, title, krate, tls, .. } = *cluster;
        if self.tls.is_some() && !cluster.tls_built {
            return Err(invalid(format!(
                "{title} over TLS ({tls}) needs {krate}'s `tls` feature (dlock's `tls`)"
            )));
        }
        if need_hosts {
            if self.hosts.is_empty() {
                return Err(invalid(format!("{name} {}s are missing", cluster.host)));
            }
            for h in &self.hosts {
                cluster.check_host(h).map_err(invalid)?;
            }
        }
        if let Some((user, _)) = &self.auth
            && user.is_empty()
        {
            return Err(invalid(format!("{name} user must be non-empty")));
        }
        Ok(Connection {
            hosts: self.hosts,
            connect_timeout: self.connect_timeout.unwrap_or(DEFAULT_CONNECT_TIMEOUT),
            request_timeout: self.request_timeout.unwrap_or(DEFAULT_REQUEST_TIMEOUT),
            auth: self.auth,
            tls: self.tls,
        })
    }
}

/// The public setters every cluster store's builder has, inside `impl MyBuilder` for a builder
/// whose field `settings` is a [`ClusterSettings`]: the endpoints (under the store's name for
/// them), `lease_ttl`, `connect_timeout`, `request_timeout`, `auth` and `tls`. The store writes
/// the docs of each, which say what its defaults and its TLS are.
///
/// ```ignore
/// impl EtcdLockBuilder {
///     lock_core::backend::cluster::cluster_builder! {
///         /// The cluster's client endpoints, ...
///         hosts: endpoints;
///         /// The lease TTL ...
///         lease_ttl;
///         /// Timeout of connecting ...
///         connect_timeout;
///         /// Timeout of each request ...
///         request_timeout;
///         /// etcd user authentication ...
///         auth;
///         /// Connect over TLS ...
///         tls;
///     }
/// }
/// ```
#[macro_export]
macro_rules! cluster_builder {
    (
        $(#[$hosts_doc:meta])* hosts: $hosts:ident;
        $(#[$ttl_doc:meta])* lease_ttl;
        $(#[$connect_doc:meta])* connect_timeout;
        $(#[$request_doc:meta])* request_timeout;
        $(#[$auth_doc:meta])* auth;
        $(#[$tls_doc:meta])* tls;
    ) => {
        $(#[$hosts_doc])*
        pub fn $hosts<S: Into<String>>(mut self, $hosts: impl IntoIterator<Item = S>) -> Self {
            self.settings.set_hosts($hosts);
            self
        }

        $(#[$ttl_doc])*
        pub fn lease_ttl(mut self, ttl: ::std::time::Duration) -> Self {
            self.settings.set_lease_ttl(ttl);
            self
        }

        $(#[$connect_doc])*
        pub fn connect_timeout(mut self, timeout: ::std::time::Duration) -> Self {
            self.settings.set_connect_timeout(timeout);
            self
        }

        $(#[$request_doc])*
        pub fn request_timeout(mut self, timeout: ::std::time::Duration) -> Self {
            self.settings.set_request_timeout(timeout);
            self
        }

        $(#[$auth_doc])*
        pub fn auth(mut self, user: impl Into<String>, password: impl Into<String>) -> Self {
            self.settings.set_auth(user.into(), password.into());
            self
        }

        $(#[$tls_doc])*
        pub fn tls(mut self) -> Self {
            self.settings.tls_mut();
            self
        }
    };
}

#[cfg(test)]
mod tests {
    use super::super::tests::TEST;
    use super::*;

    type Settings = ClusterSettings<Option<&'static str>>;

    #[test]
    fn a_url_sets_what_it_gives_and_later_calls_win() {
        let mut s = Settings::default();
        s.set_hosts(["a:1"]);
        s.set_auth("u".into(), "pw".into());
        s.set_request_timeout(Duration::from_secs(9));
        let u = s.take_url(TEST.parse_url("etcds://h:1/p?lease_ttl=2s", |_| Ok(()))).expect("taken");
        assert_eq!(u.path.as_deref(), Some("/p"));
        s.set_connect_timeout(Duration::from_secs(1));
        assert_eq!(s.lease_ttl(), Some(Duration::from_secs(2)));
        let c = s.check(&TEST, true).expect("valid");
        assert_eq!(c.hosts, ["h:1"], "the URL's hosts replace the builder's");
        assert_eq!(c.auth, Some(("u".to_owned(), "pw".to_owned())), "kept: the URL gave none");
        assert_eq!((c.connect_timeout, c.request_timeout), (Duration::from_secs(1), Duration::from_secs(9)));
        assert_eq!(c.tls, Some(None), "the TLS scheme asks for TLS with the defaults");
        let c = Settings::default().check(&TEST, false).expect("no hosts needed with a client");
        assert_eq!(
            (c.connect_timeout, c.request_timeout),
            (DEFAULT_CONNECT_TIMEOUT, DEFAULT_REQUEST_TIMEOUT)
        );
    }

    #[test]
    fn checks_name_the_store() {
        let reason = |s: Settings, cluster: &Cluster| match s.check(cluster, true) {
            Err(LockError::InvalidConfig { reason }) => reason,
            other => panic!("{other:?}"),
        };
        let mut bad_url = Settings::default();
        assert!(bad_url.take_url(TEST.parse_url("etcd://u:s3cr@h:1?x=1", |_| Ok(()))).is_none());
        assert!(!reason(bad_url, &TEST).contains("s3cr"));
        assert_eq!(reason(Settings::default(), &TEST), "etcd endpoints are missing");
        let mut tls = Settings::default();
        tls.set_hosts(["h:1"]);
        tls.set_tls(Some("ca"));
        let no_tls = Cluster { tls_built: false, title: "Etcd", ..TEST };
        assert_eq!(
            reason(tls, &no_tls),
            "Etcd over TLS (etcds://) needs lock-etcd's `tls` feature (dlock's `tls`)"
        );
        let mut user = Settings::default();
        user.set_hosts(["h:1"]);
        user.set_auth(String::new(), "pw".into());
        assert_eq!(reason(user, &TEST), "etcd user must be non-empty");
        let mut port = Settings::default();
        port.set_hosts(["h:1", "h:0"]);
        assert!(reason(port, &TEST).contains("invalid port"));
    }
}
