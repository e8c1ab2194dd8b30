//! Configuration: `ZkLock::builder().connect_string(..).root(..).auth(..).build().await`.

use std::fmt;
use std::time::Duration;

use lock_core::{LockError, Result};
use zookeeper_client as zk;

use crate::ZkLock;
use crate::config::{Config, normalize_root, validate_hosts};
use crate::options::ZkUrl;

/// Lock root used when none is given.
pub const DEFAULT_ROOT: &str = "/dlock";
/// Session timeout requested when none is given (the server clamps it to
/// `[minSessionTimeout, maxSessionTimeout]`, by default 2..20 ticks).
pub const DEFAULT_SESSION_TIMEOUT: Duration = Duration::from_secs(6);

/// Builder of a [`ZkLock`]. `Debug` never prints the password.
#[derive(Clone, Default)]
#[must_use = "a builder does nothing until built"]
pub struct ZkLockBuilder {
    connect: Option<String>,
    root: Option<String>,
    session_timeout: Option<Duration>,
    connection_timeout: Option<Duration>,
    auth: Option<(String, String)>,
    create_chroot: bool,
    clock_drift: Option<(f64, Duration)>,
    /// `zks://` or [`tls_ca`](Self::tls_ca): connect over TLS, trusting `tls_ca` (PEM).
    tls: bool,
    tls_ca: Option<String>,
    /// The caller's own client: its session carries the locks, no other is opened.
    client: Option<zk::Client>,
    error: Option<String>,
}

impl fmt::Debug for ZkLockBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ZkLockBuilder")
            .field("connect", &self.connect)
            .field("root", &self.root)
            .field("session_timeout", &self.session_timeout)
            .field("connection_timeout", &self.connection_timeout)
            .field("auth_user", &self.auth.as_ref().map(|(u, _)| u))
            .field("tls", &self.tls)
            // The session id and chroot only: never the client's own Debug, nor the session password.
            .field(
                "client",
                &self
                    .client
                    .as_ref()
                    .map(|c| format!("session {:#x}, chroot {}", c.session_id().0, c.path())),
            )
            .finish_non_exhaustive()
    }
}

fn invalid(reason: impl Into<String>) -> LockError {
    LockError::InvalidConfig { reason: reason.into() }
}

impl ZkLockBuilder {
    /// ZooKeeper hosts: `host:port[,host:port...][/chroot]` (an ensemble connect string with an
    /// optional chroot, created on `build` if missing).
    pub fn connect_string(mut self, connect: impl Into<String>) -> Self {
        self.connect = Some(connect.into());
        self
    }

    /// Configure from a URL: `zk://[user:password@]host:port[,host:port...][/root]` with the
    /// optional query options `chroot=/path`, `create_chroot=true`, `session_timeout=6s` and
    /// `connection_timeout=2s` (durations with their unit, `250ms`, `2s`, `1m`: a bare number is refused; also
    /// accepted as `session_timeout_ms=N`, `connection_timeout_ms=N`). Unknown or repeated
    /// options are refused by `build`. User and password (percent-encoded) select digest
    /// authentication with creator-only ACLs. Settings given here replace earlier ones, and
    /// later builder calls replace these.
    pub fn url(mut self, url: &str) -> Self {
        match ZkUrl::parse(url) {
            Ok(u) => {
                self.connect = Some(u.connect);
                self.root = u.root.or(self.root);
                self.auth = u.auth.or(self.auth);
                self.session_timeout = u.session_timeout.or(self.session_timeout);
                self.connection_timeout = u.connection_timeout.or(self.connection_timeout);
                self.create_chroot = u.create_chroot.unwrap_or(self.create_chroot);
                self.tls = u.tls;
                match u.ca_file.map(|path| std::fs::read_to_string(&path).map_err(|e| (path, e))) {
                    Some(Ok(pem)) => self.tls_ca = Some(pem),
                    Some(Err((path, e))) => self.error = Some(format!("url option ca {path:?}: {e}")),
                    None => {}
                }
            }
            Err(LockError::InvalidConfig { reason }) => self.error = Some(reason),
            Err(e) => self.error = Some(e.to_string()),
        }
        self
    }

    /// Connect over TLS (what `zks://` asks), trusting the CA `pem` (PEM certificates) for the
    /// servers' certificates, which must name the hosts of the connect string. Needs the `tls`
    /// feature (`build` refuses it otherwise); URL: `zks://host:port/root?ca=/path/ca.pem`.
    pub fn tls_ca(mut self, pem: impl Into<String>) -> Self {
        self.tls = true;
        self.tls_ca = Some(pem.into());
        self
    }

    /// The znode under which every lock directory lives (default [`DEFAULT_ROOT`]); created
    /// as a persistent node if missing.
    pub fn root(mut self, root: impl Into<String>) -> Self {
        self.root = Some(root.into());
        self
    }

    /// Create the chroot of the connect string (`host:port/chroot`) if it does not exist
    /// (default `false`: a missing chroot is refused, since it is usually a typo that would
    /// otherwise split the lock space silently). URL: `?create_chroot=true`.
    pub fn create_chroot(mut self, create: bool) -> Self {
        self.create_chroot = create;
        self
    }

    /// Requested session timeout (default [`DEFAULT_SESSION_TIMEOUT`]; the server may clamp
    /// it): how long a crashed or partitioned holder keeps its locks.
    pub fn session_timeout(mut self, timeout: Duration) -> Self {
        self.session_timeout = Some(timeout);
        self
    }

    /// Connection timeout per server (default: the client's, 2/5 of the session timeout).
    pub fn connection_timeout(mut self, timeout: Duration) -> Self {
        self.connection_timeout = Some(timeout);
        self
    }

    /// How much earlier than the server this client gives its holds up when it cannot confirm
    /// its session: `session_timeout * rate + floor` (defaults: the core's
    /// [`DRIFT_MARGIN_RATE`](lock_core::DRIFT_MARGIN_RATE) and
    /// [`DRIFT_MARGIN_FLOOR`](lock_core::DRIFT_MARGIN_FLOOR), as
    /// [`Locker::with_clock_drift`](lock_core::Locker::with_clock_drift); at most half the
    /// timeout). Raise it when clocks may drift apart faster or the client may be starved of CPU.
    pub fn clock_drift(mut self, rate: f64, floor: Duration) -> Self {
        self.clock_drift = Some((rate, floor));
        self
    }

    /// Digest authentication. Lock nodes then get the ACL `auth::cdrwa` (only sessions
    /// authenticated as this user may create or delete them) plus `world:anyone:r`.
    pub fn auth(mut self, user: impl Into<String>, password: impl Into<String>) -> Self {
        self.auth = Some((user.into(), password.into()));
        self
    }

    /// Lock through your own client instead of connecting: its session carries the locks (no
    /// second session is opened) and its state drives the lost signal as for a session of our
    /// own. The lock root is inside the client's chroot, if it has one (which must exist).
    /// Connection settings are the client's: `connect_string`, `url`, `session_timeout`,
    /// `connection_timeout`, `create_chroot` and `auth` are refused with it by `build`. Nodes
    /// get creator-only ACLs (`auth::cdrwa` + `world:anyone:r`) if the client's session is
    /// authenticated (digest or SASL), else `world:anyone:cdrwa`.
    ///
    /// Once its session ends (expired, closed, auth failed) the client is dead and cannot be
    /// re-opened from here: every lock it held is reported lost, and every later acquisition
    /// fails with a permanent [`LockError::Backend`] whose source is
    /// [`SessionEnded`](crate::SessionEnded). Build a new lock on a new client then.
    pub fn client(mut self, client: zk::Client) -> Self {
        self.client = Some(client);
        self
    }

    pub(crate) fn into_config(self) -> Result<(Config, Option<zk::Client>)> {
        if let Some(e) = self.error {
            return Err(invalid(e));
        }
        if let Some(client) = self.client {
            let own = [
                ("connect_string/url", self.connect.is_some()),
                ("session_timeout", self.session_timeout.is_some()),
                ("connection_timeout", self.connection_timeout.is_some()),
                ("create_chroot", self.create_chroot),
                ("auth", self.auth.is_some()),
                ("tls_ca/zks://", self.tls),
            ];
            if let Some((name, _)) = own.iter().find(|(_, set)| *set) {
                return Err(invalid(format!(
                    "{name} is a setting of the zookeeper client given with client(): set it on its Connector"
                )));
            }
            let cfg = ZkLockBuilder { connect: Some("user-client".to_owned()), client: None, ..self };
            let mut cfg = cfg.into_config()?.0;
            cfg.connect = String::new();
            cfg.session_timeout = client.session_timeout();
            cfg.user_client = Some(client.path().to_owned());
            return Ok((cfg, Some(client)));
        }
        let connect = self.connect.ok_or_else(|| invalid("zookeeper connect string is missing"))?;
        if connect.trim().is_empty() {
            return Err(invalid("zookeeper connect string is empty"));
        }
        validate_hosts(&connect).map_err(invalid)?;
        let tls_ca = match (self.tls, self.tls_ca) {
            (false, None) => None,
            (false, Some(_)) => return Err(invalid("tls_ca asks for TLS, but the url is zk://: use zks://")),
            (true, None) => {
                return Err(invalid("zookeeper over TLS needs its CA: zks://...?ca=/path/ca.pem"));
            }
            (true, Some(_)) if !cfg!(feature = "tls") => {
                return Err(invalid(
                    "zookeeper over TLS (zks://) needs lock-zk's `tls` feature (dlock's `zk-tls`)",
                ));
            }
            (true, ca) => ca,
        };
        let root = self.root.unwrap_or_else(|| DEFAULT_ROOT.to_owned());
        let root = normalize_root(&root).map_err(invalid)?;
        if let Some((user, _)) = &self.auth
            && (user.is_empty() || user.contains(':'))
        {
            return Err(invalid("digest user must be non-empty and contain no ':'"));
        }
        let clock_drift =
            self.clock_drift.unwrap_or((lock_core::DRIFT_MARGIN_RATE, lock_core::DRIFT_MARGIN_FLOOR));
        if !(0.0..=0.5).contains(&clock_drift.0) {
            return Err(invalid(format!("clock drift rate {} is outside 0.0..=0.5", clock_drift.0)));
        }
        let cfg = Config {
            clock_drift,
            connect,
            root,
            session_timeout: self.session_timeout.unwrap_or(DEFAULT_SESSION_TIMEOUT),
            connection_timeout: self.connection_timeout,
            auth: self.auth,
            create_chroot: self.create_chroot,
            tls_ca,
            user_client: None,
        };
        Ok((cfg, None))
    }

    /// Connect (one session, shared by every lock of the returned [`ZkLock`] and its clones)
    /// and create the root if missing.
    ///
    /// # Errors
    /// [`LockError::InvalidConfig`] for a bad configuration or outside a tokio runtime;
    /// a temporary backend error when no server answers; a permanent one for auth or ACL
    /// failures.
    pub async fn build(self) -> Result<ZkLock> {
        let (cfg, client) = self.into_config()?;
        ZkLock::connect(cfg, client).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn url_parses_hosts_root_auth_and_options() {
        let c = ZkLockBuilder::default()
            .url("zk://al%40ice:p%3Aw@h1:2181,h2:2182/locks/app?chroot=/tenant&session_timeout_ms=1500")
            .into_config()
            .expect("valid url")
            .0;
        assert_eq!(c.connect, "h1:2181,h2:2182/tenant");
        assert_eq!(c.root, "/locks/app");
        assert_eq!(c.session_timeout, Duration::from_millis(1500));
        assert_eq!(c.auth, Some(("al@ice".to_owned(), "p:w".to_owned())));
        assert_eq!(c.chroot(), Some(("h1:2181,h2:2182", "/tenant")));
        let dbg = format!("{c:?}");
        assert!(!dbg.contains("p:w"), "{dbg}");
    }

    #[test]
    fn identity_is_canonical_and_has_no_credentials() {
        let id =
            |url: &str| ZkLockBuilder::default().url(url).into_config().map(|c| c.0).expect(url).identity();
        let canonical = "zk://10.0.0.1:2181,10.0.0.2:2182,[::1]:2181/app/locks";
        for url in [
            "zk://10.0.0.2:2182,10.0.0.1:2181,[::1]:2181/locks?chroot=/app",
            "zk://u:secret@10.0.0.1,[::1]:2181,10.0.0.2:2182,10.0.0.1:2181/locks/?chroot=/app",
        ] {
            assert_eq!(id(url), canonical, "{url}");
        }
        let c = ZkLockBuilder::default().connect_string("ZK1.example:2181,zk0.example/app").root("/locks");
        assert_eq!(
            c.into_config().map(|c| c.0).expect("valid").identity(),
            "zk://zk0.example:2181,zk1.example:2181/app/locks"
        );
        let root = ZkLockBuilder::default()
            .connect_string("h:1")
            .root("/")
            .into_config()
            .map(|c| c.0)
            .expect("valid");
        assert_eq!(root.identity(), "zk://h:1/");
        assert_ne!(id("zk://h:1/a?chroot=/b"), id("zk://h:1/b?chroot=/c"), "different lock spaces");
    }

    #[test]
    fn bad_configs_are_refused() {
        for url in ["redis://h:1", "zk://", "zk://h:1?bogus=1", "zk://h:1/a/../b"] {
            assert!(ZkLockBuilder::default().url(url).into_config().is_err(), "{url}");
        }
        let c = ZkLockBuilder::default()
            .connect_string("h:1")
            .root("/")
            .into_config()
            .map(|c| c.0)
            .expect("root /");
        assert_eq!(c.root, "");
        assert!(ZkLockBuilder::default().connect_string("h:1").root("x").into_config().is_err());
    }
}
