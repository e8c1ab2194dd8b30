//! The `etcd://` URL: `etcd://[user:password@]host:port[,host:port...][/prefix][?options]`, and
//! `etcds://` for the same over TLS.

use lock_core::Result;
use lock_core::backend::cluster::{Cluster, ClusterUrl};

/// etcd as the messages name it.
pub(crate) const ETCD: Cluster = Cluster {
    name: "etcd",
    title: "etcd",
    krate: "lock-etcd",
    tls_built: cfg!(feature = "tls"),
    plain: "etcd://",
    tls: "etcds://",
    host: "endpoint",
};

/// Parse an `etcd://` or `etcds://` URL: its path is the key prefix (`None` for no path or `/`:
/// the default prefix). Options: `lease_ttl=2s`, `connect_timeout=1s`, `request_timeout=5s`
/// (durations with their unit, `2s`, `250ms`; a bare number is refused). Unknown and repeated
/// options are errors.
///
/// # Errors
/// [`LockError::InvalidConfig`](lock_core::LockError::InvalidConfig), never quoting the
/// password.
pub(crate) fn parse(url: &str) -> Result<ClusterUrl> {
    ETCD.parse_url(url, |_| Ok(()))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn options_are_typed_and_checked() {
        let u = parse("etcd://h1:2379,h2:2380/locks/app?lease_ttl=3s&request_timeout=500ms").expect("valid");
        assert_eq!(u.hosts, ["h1:2379", "h2:2380"]);
        assert_eq!(u.path.as_deref(), Some("/locks/app"));
        assert_eq!(u.lease_ttl, Some(Duration::from_secs(3)));
        assert_eq!(u.request_timeout, Some(Duration::from_millis(500)));
        assert!(!u.tls);
        let u = parse("ETCDS://h1:2379/locks").expect("TLS");
        assert!(u.tls && u.hosts == ["h1:2379"]);
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
            assert!(parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn errors_never_quote_the_password() {
        for url in ["etcd://u:s3cr?t@h:1/r?bogus=1", "etcd://u:s3cr/t@/r"] {
            let e = parse(url).expect_err("refused").to_string();
            assert!(!e.contains("s3cr"), "{url}: {e}");
        }
        let u = parse("etcd://u:p%3Fw/x?y@h:1/r").expect("raw password with / and ?");
        assert_eq!(u.auth, Some(("u".to_owned(), "p?w/x?y".to_owned())));
        assert_eq!(u.hosts, ["h:1"]);
    }
}
