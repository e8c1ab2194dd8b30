//! The `zk://` URL: `zk://[user:password@]host:port[,host:port...][/root][?options]`, and
//! `zks://` for the same over TLS (`?ca=/path/ca.pem`: the CA the servers' certificates chain to).

use std::time::Duration;

use lock_core::backend::UrlOptions;
use lock_core::backend::redact::{HostList, split_host_list};
use lock_core::{LockError, Result};

/// What a `zk://` URL sets; `None` leaves the builder's value (or its default).
#[derive(Default)]
pub(crate) struct ZkUrl {
    /// `host:port[,host:port...][/chroot]`.
    pub connect: String,
    /// The lock root (`None` for no path or `/`: the default root).
    pub root: Option<String>,
    /// Digest credentials, percent-decoded.
    pub auth: Option<(String, String)>,
    pub session_timeout: Option<Duration>,
    pub connection_timeout: Option<Duration>,
    pub create_chroot: Option<bool>,
    /// `zks://`: connect over TLS.
    pub tls: bool,
    /// `ca=`: the PEM file of the CA that TLS servers' certificates must chain to.
    pub ca_file: Option<String>,
}

fn invalid(reason: &str) -> LockError {
    LockError::InvalidConfig { reason: reason.to_owned() }
}

/// A timeout given by its name (`2s`, `250ms`) or by its older `_ms` name (plain milliseconds).
fn take_timeout(o: &mut UrlOptions, name: &'static str, legacy: &'static str) -> Result<Option<Duration>> {
    match (o.take_duration(name)?, o.take_millis(legacy)?) {
        (Some(_), Some(_)) => Err(LockError::InvalidConfig {
            reason: format!("url options {name} and {legacy} set the same timeout: give one"),
        }),
        (a, b) => Ok(a.or(b)),
    }
}

impl ZkUrl {
    /// Parse a `zk://` (or `zookeeper://`, or `zks://` for TLS) URL. Options: `chroot=/path`,
    /// `ca=/path/ca.pem` (`zks://` only), `create_chroot=true`,
    /// `session_timeout=6s` and `connection_timeout=2s` (also as `session_timeout_ms=N` and
    /// `connection_timeout_ms=N`). Unknown and repeated options are errors.
    ///
    /// # Errors
    /// [`LockError::InvalidConfig`], never quoting the password.
    pub fn parse(url: &str) -> Result<ZkUrl> {
        let scheme = ["zk://", "zookeeper://", "zks://"].into_iter().find(|s| url.starts_with(s));
        let scheme =
            scheme.ok_or_else(|| invalid("zookeeper url must start with zk:// (or zks:// for TLS)"))?;
        let tls = scheme == "zks://";
        let mut o = UrlOptions::parse(url)?;
        let ca_file = o.take::<String>("ca")?;
        if ca_file.is_some() && !tls {
            return Err(invalid("url option ca is for TLS: use zks://"));
        }
        let chroot = o.take::<String>("chroot")?.unwrap_or_default();
        if !chroot.is_empty() && !chroot.starts_with('/') {
            return Err(LockError::InvalidConfig {
                reason: format!("url option chroot {chroot:?} must start with '/'"),
            });
        }
        let parsed = ZkUrl {
            create_chroot: o.take_flag("create_chroot")?,
            session_timeout: take_timeout(&mut o, "session_timeout", "session_timeout_ms")?,
            connection_timeout: take_timeout(&mut o, "connection_timeout", "connection_timeout_ms")?,
            tls,
            ca_file,
            ..ZkUrl::default()
        };
        let base = o.finish()?;
        let HostList { auth, hosts, path } = split_host_list(&base[scheme.len()..], "zookeeper")?;
        Ok(ZkUrl { connect: format!("{hosts}{chroot}"), root: path, auth, ..parsed })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_are_typed_and_checked() {
        let u = ZkUrl::parse("zk://h:1/r?session_timeout=2s&connection_timeout_ms=500&create_chroot=1")
            .expect("valid");
        assert_eq!(u.session_timeout, Some(Duration::from_secs(2)));
        assert_eq!(u.connection_timeout, Some(Duration::from_millis(500)));
        assert_eq!(u.create_chroot, Some(true));
        assert_eq!((u.connect.as_str(), u.root.as_deref()), ("h:1", Some("/r")));
        for bad in [
            "zk://h:1/r?session_timeout_ms=abc",
            "zk://h:1/r?session_timeout=1500",
            "zk://h:1/r?session_timeout_ms=1&session_timeout_ms=2",
            "zk://h:1/r?session_timeout=1s&session_timeout_ms=2",
            "zk://h:1/r?create_chroot=maybe",
            "zk://h:1/r?chroot=app",
            "zk://h:1/r?sesion_timeout_ms=1",
            "zk://u@h:1/r",
        ] {
            assert!(ZkUrl::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn zks_asks_for_tls_with_its_ca() {
        let u = ZkUrl::parse("zks://h:1/r?ca=/etc/zk/ca.pem").expect("valid");
        assert!(u.tls);
        assert_eq!((u.ca_file.as_deref(), u.connect.as_str()), (Some("/etc/zk/ca.pem"), "h:1"));
        assert!(!ZkUrl::parse("zk://h:1/r").expect("valid").tls);
        for bad in ["zk://h:1/r?ca=/ca.pem", "zkss://h:1/r", "zks://h:1/r?ca=/a&ca=/b"] {
            assert!(ZkUrl::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn tls_needs_its_ca_and_the_feature() {
        use crate::ZkLockBuilder;
        let ca = |b: ZkLockBuilder| b.into_config().map(|c| c.0.tls_ca);
        assert!(ca(ZkLockBuilder::default().url("zks://h:1/r")).is_err(), "no CA");
        assert!(ca(ZkLockBuilder::default().url("zks://h:1/r?ca=/nonexistent/ca.pem")).is_err());
        assert!(ca(ZkLockBuilder::default().tls_ca("PEM").url("zk://h:1/r")).is_err(), "zk:// after tls_ca");
        assert_eq!(ca(ZkLockBuilder::default().url("zk://h:1/r")).expect("plaintext"), None);
        let tls = ca(ZkLockBuilder::default().url("zk://h:1/r").tls_ca("PEM"));
        if cfg!(feature = "tls") {
            assert_eq!(tls.expect("tls"), Some("PEM".to_owned()));
        } else {
            let e = tls.expect_err("refused without the feature").to_string();
            assert!(e.contains("`tls` feature"), "{e}");
        }
    }

    #[test]
    fn errors_never_quote_the_password() {
        for url in ["zk://u:s3cr?t@h:1/r?bogus=1", "zk://u:s3cr/t@/r", "zk://u:s3cr?t@h:1/r?chroot=x"] {
            let e = ZkUrl::parse(url).err().expect("refused").to_string();
            assert!(!e.contains("s3cr"), "{url}: {e}");
        }
        let u = ZkUrl::parse("zk://u:p%3Fw/x?y@h:1/r").expect("raw password with / and ?");
        assert_eq!(u.auth, Some(("u".to_owned(), "p?w/x?y".to_owned())));
        assert_eq!(u.connect, "h:1");
    }
}
