//! The `nats://` URL: `nats://[user:password@]host:port[,host:port...][/bucket][?options]`, and
//! `nats+tls://` for the same over TLS.

use std::path::PathBuf;

use lock_core::Result;
use lock_core::backend::cluster::{Cluster, ClusterUrl};

/// NATS as the messages name it.
pub(crate) const NATS: Cluster = Cluster {
    name: "nats",
    title: "NATS",
    krate: "lock-nats",
    tls_built: cfg!(feature = "tls"),
    plain: "nats://",
    tls: "nats+tls://",
    host: "server",
};

/// Parse a `nats://` or `nats+tls://` URL: its path is the bucket (`None` for no path or `/`:
/// the default bucket), its `extra` the `ca=` option, the CA (PEM file) the server's
/// certificate must chain to. Options: `lease_ttl=2s` (the bucket's TTL),
/// `connect_timeout=2s`, `request_timeout=5s`, `ca=/path/ca.pem`. Unknown and repeated
/// options are errors.
///
/// # Errors
/// [`LockError::InvalidConfig`](lock_core::LockError::InvalidConfig), never quoting the
/// password.
pub fn parse(url: &str) -> Result<ClusterUrl<Option<PathBuf>>> {
    let mut u = NATS.parse_url(url, |o| Ok(o.take::<String>("ca")?.map(PathBuf::from)))?;
    u.path = u.path.map(|p| p.trim_matches('/').to_owned()).filter(|p| !p.is_empty());
    Ok(u)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn options_are_typed_and_checked() {
        let u = parse("nats://h1:4222,h2:4223/locks?lease_ttl=3s&request_timeout=500ms").expect("valid");
        assert_eq!(u.hosts, ["h1:4222", "h2:4223"]);
        assert_eq!(u.path.as_deref(), Some("locks"));
        assert_eq!(u.lease_ttl, Some(Duration::from_secs(3)));
        assert_eq!(u.request_timeout, Some(Duration::from_millis(500)));
        assert!(!u.tls);
        let u = parse("NATS+TLS://h1:4222/?ca=/etc/ca.pem").expect("TLS");
        assert!(u.tls && u.path.is_none() && u.extra.is_some());
        for bad in [
            "nats://h:1/r?lease_ttl=abc",
            "nats://h:1/r?lease_ttl=1500",
            "nats://h:1/r?lease_ttl=1s&lease_ttl=2s",
            "nats://h:1/r?lease=1s",
            "nats:///r",
            "tls://h:1/r",
            "nats://u@h:1/r",
            "etcd://h:1",
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn errors_never_quote_the_password() {
        for url in ["nats://u:s3cr?t@h:1/r?bogus=1", "nats://u:s3cr/t@/r"] {
            let e = parse(url).expect_err("refused").to_string();
            assert!(!e.contains("s3cr"), "{url}: {e}");
        }
        let u = parse("nats://u:p%3Fw/x?y@h:1/r").expect("raw password with / and ?");
        assert_eq!(u.auth, Some(("u".to_owned(), "p?w/x?y".to_owned())));
        assert_eq!(u.hosts, ["h:1"]);
    }
}
