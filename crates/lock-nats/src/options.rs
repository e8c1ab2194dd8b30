//! The `nats://` URL: `nats://[user:password@]host:port[,host:port...][/bucket][?options]`, and
//! `nats+tls://` for the same over TLS.

use std::path::PathBuf;
use std::time::Duration;

use lock_core::backend::UrlOptions;
use lock_core::backend::redact::{HostList, split_host_list};
use lock_core::{LockError, Result};

/// What a `nats://` URL sets; `None` leaves the builder's value (or its default).
#[derive(Default)]
pub(crate) struct NatsUrl {
    /// `host:port` of every server, in the URL's order.
    pub servers: Vec<String>,
    /// The bucket (`None` for no path or `/`: the default bucket).
    pub bucket: Option<String>,
    /// User and password, percent-decoded.
    pub auth: Option<(String, String)>,
    pub lease_ttl: Option<Duration>,
    pub connect_timeout: Option<Duration>,
    pub request_timeout: Option<Duration>,
    /// `ca=`: the CA (PEM file) the server's certificate must chain to.
    pub ca: Option<PathBuf>,
    /// `nats+tls://`: connect over TLS.
    pub tls: bool,
}

const PLAIN: &str = "nats://";
const TLS: &str = "nats+tls://";

fn invalid(reason: &str) -> LockError {
    LockError::InvalidConfig { reason: reason.to_owned() }
}

impl NatsUrl {
    /// Parse a `nats://` or `nats+tls://` URL. Options: `lease_ttl=2s` (the bucket's TTL),
    /// `connect_timeout=2s`, `request_timeout=5s`, `ca=/path/ca.pem`. Unknown and repeated
    /// options are errors.
    ///
    /// # Errors
    /// [`LockError::InvalidConfig`], never quoting the password.
    pub fn parse(url: &str) -> Result<NatsUrl> {
        let scheme = |s: &str| url.get(..s.len()).is_some_and(|p| p.eq_ignore_ascii_case(s));
        let (scheme_len, tls) = if scheme(PLAIN) {
            (PLAIN.len(), false)
        } else if scheme(TLS) {
            (TLS.len(), true)
        } else {
            return Err(invalid("nats url must start with nats:// (or nats+tls:// for TLS)"));
        };
        let mut o = UrlOptions::parse(url)?;
        let parsed = NatsUrl {
            lease_ttl: o.take_duration("lease_ttl")?,
            connect_timeout: o.take_duration("connect_timeout")?,
            request_timeout: o.take_duration("request_timeout")?,
            ca: o.take::<String>("ca")?.map(PathBuf::from),
            tls,
            ..NatsUrl::default()
        };
        let base = o.finish()?;
        let HostList { auth, hosts, path } = split_host_list(&base[scheme_len..], "nats")?;
        let bucket = path.map(|p| p.trim_matches('/').to_owned()).filter(|p| !p.is_empty());
        Ok(NatsUrl { servers: hosts.split(',').map(str::to_owned).collect(), bucket, auth, ..parsed })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_are_typed_and_checked() {
        let u =
            NatsUrl::parse("nats://h1:4222,h2:4223/locks?lease_ttl=3s&request_timeout=500ms").expect("valid");
        assert_eq!(u.servers, ["h1:4222", "h2:4223"]);
        assert_eq!(u.bucket.as_deref(), Some("locks"));
        assert_eq!(u.lease_ttl, Some(Duration::from_secs(3)));
        assert_eq!(u.request_timeout, Some(Duration::from_millis(500)));
        assert!(!u.tls);
        let u = NatsUrl::parse("NATS+TLS://h1:4222/?ca=/etc/ca.pem").expect("TLS");
        assert!(u.tls && u.bucket.is_none() && u.ca.is_some());
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
            assert!(NatsUrl::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn errors_never_quote_the_password() {
        for url in ["nats://u:s3cr?t@h:1/r?bogus=1", "nats://u:s3cr/t@/r"] {
            let e = NatsUrl::parse(url).err().expect("refused").to_string();
            assert!(!e.contains("s3cr"), "{url}: {e}");
        }
        let u = NatsUrl::parse("nats://u:p%3Fw/x?y@h:1/r").expect("raw password with / and ?");
        assert_eq!(u.auth, Some(("u".to_owned(), "p?w/x?y".to_owned())));
        assert_eq!(u.servers, ["h:1"]);
    }
}
