//! The `etcd://` URL: `etcd://[user:password@]host:port[,host:port...][/prefix][?options]`, and
//! `etcds://` for the same over TLS.

use std::time::Duration;

use lock_core::backend::UrlOptions;
use lock_core::backend::redact::{HostList, split_host_list};
use lock_core::{LockError, Result};

/// What an `etcd://` URL sets; `None` leaves the builder's value (or its default).
#[derive(Default)]
pub(crate) struct EtcdUrl {
    /// `host:port` of every endpoint, in the URL's order.
    pub endpoints: Vec<String>,
    /// The key prefix (`None` for no path or `/`: the default prefix).
    pub prefix: Option<String>,
    /// User and password, percent-decoded.
    pub auth: Option<(String, String)>,
    pub lease_ttl: Option<Duration>,
    pub connect_timeout: Option<Duration>,
    pub request_timeout: Option<Duration>,
    /// `etcds://`: connect over TLS.
    pub tls: bool,
}

const PLAIN: &str = "etcd://";
const TLS: &str = "etcds://";

fn invalid(reason: &str) -> LockError {
    LockError::InvalidConfig { reason: reason.to_owned() }
}

impl EtcdUrl {
    /// Parse an `etcd://` or `etcds://` URL. Options: `lease_ttl=2s`, `connect_timeout=1s`,
    /// `request_timeout=5s` (durations with their unit, `2s`, `250ms`; a bare number is refused). Unknown and
    /// repeated options are errors.
    ///
    /// # Errors
    /// [`LockError::InvalidConfig`], never quoting the password.
    pub fn parse(url: &str) -> Result<EtcdUrl> {
        let scheme = |s: &str| url.get(..s.len()).is_some_and(|p| p.eq_ignore_ascii_case(s));
        let (scheme_len, tls) = if scheme(PLAIN) {
            (PLAIN.len(), false)
        } else if scheme(TLS) {
            (TLS.len(), true)
        } else {
            return Err(invalid("etcd url must start with etcd:// (or etcds:// for TLS)"));
        };
        let mut o = UrlOptions::parse(url)?;
        let parsed = EtcdUrl {
            lease_ttl: o.take_duration("lease_ttl")?,
            connect_timeout: o.take_duration("connect_timeout")?,
            request_timeout: o.take_duration("request_timeout")?,
            tls,
            ..EtcdUrl::default()
        };
        let base = o.finish()?;
        let HostList { auth, hosts, path } = split_host_list(&base[scheme_len..], "etcd")?;
        Ok(EtcdUrl { endpoints: hosts.split(',').map(str::to_owned).collect(), prefix: path, auth, ..parsed })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_are_typed_and_checked() {
        let u = EtcdUrl::parse("etcd://h1:2379,h2:2380/locks/app?lease_ttl=3s&request_timeout=500ms")
            .expect("valid");
        assert_eq!(u.endpoints, ["h1:2379", "h2:2380"]);
        assert_eq!(u.prefix.as_deref(), Some("/locks/app"));
        assert_eq!(u.lease_ttl, Some(Duration::from_secs(3)));
        assert_eq!(u.request_timeout, Some(Duration::from_millis(500)));
        assert!(!u.tls);
        let u = EtcdUrl::parse("ETCDS://h1:2379/locks").expect("TLS");
        assert!(u.tls && u.endpoints == ["h1:2379"]);
        for bad in [
            "etcd://h:1/r?lease_ttl=abc",
            "etcd://h:1/r?lease_ttl=1500",
            "etcd://h:1/r?lease_ttl=1s&lease_ttl=2s",
            "etcd://h:1/r?lease=1s",
            "etcd:///r",
            "etcdss://h:1/r",
            "etcd://u@h:1/r",
            "zk://h:1",
        ] {
            assert!(EtcdUrl::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn errors_never_quote_the_password() {
        for url in ["etcd://u:s3cr?t@h:1/r?bogus=1", "etcd://u:s3cr/t@/r"] {
            let e = EtcdUrl::parse(url).err().expect("refused").to_string();
            assert!(!e.contains("s3cr"), "{url}: {e}");
        }
        let u = EtcdUrl::parse("etcd://u:p%3Fw/x?y@h:1/r").expect("raw password with / and ?");
        assert_eq!(u.auth, Some(("u".to_owned(), "p?w/x?y".to_owned())));
        assert_eq!(u.endpoints, ["h:1"]);
    }
}
