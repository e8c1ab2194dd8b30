//! A cluster store's URL: `scheme://[user:password@]host:port[,host:port...][/path][?options]`,
//! its TLS scheme for the same over TLS.

use std::time::Duration;

use super::Cluster;
use crate::backend::UrlOptions;
use crate::backend::redact::{HostList, split_host_list};
use crate::{LockError, Result};

/// What a cluster store's URL sets; `None` leaves the builder's value (or its default). `X` is
/// what the store's own query options set.
#[derive(Debug, Default)]
pub struct ClusterUrl<X = ()> {
    /// `host:port` of every endpoint, in the URL's order.
    pub hosts: Vec<String>,
    /// The path, percent-decoded (`None` for no path or `/`).
    pub path: Option<String>,
    /// User and password, percent-decoded.
    pub auth: Option<(String, String)>,
    /// `lease_ttl=`.
    pub lease_ttl: Option<Duration>,
    /// `connect_timeout=`.
    pub connect_timeout: Option<Duration>,
    /// `request_timeout=`.
    pub request_timeout: Option<Duration>,
    /// The TLS scheme: connect over TLS.
    pub tls: bool,
    /// The store's own options.
    pub extra: X,
}

impl Cluster {
    /// Parse a URL of this store. Options: `lease_ttl=2s`, `connect_timeout=1s`,
    /// `request_timeout=5s` (durations with their unit, `2s`, `250ms`; a bare number is
    /// refused), then those `extra` takes. Unknown and repeated options are errors.
    ///
    /// # Errors
    /// [`LockError::InvalidConfig`], never quoting the password.
    pub fn parse_url<X>(
        &self,
        url: &str,
        extra: impl FnOnce(&mut UrlOptions) -> Result<X>,
    ) -> Result<ClusterUrl<X>> {
        let scheme = |s: &str| url.get(..s.len()).is_some_and(|p| p.eq_ignore_ascii_case(s));
        let (scheme_len, tls) = if scheme(self.plain) {
            (self.plain.len(), false)
        } else if scheme(self.tls) {
            (self.tls.len(), true)
        } else {
            let (name, plain, tls) = (self.name, self.plain, self.tls);
            let reason = format!("{name} url must start with {plain} (or {tls} for TLS)");
            return Err(LockError::InvalidConfig { reason });
        };
        let mut o = UrlOptions::parse(url)?;
        let lease_ttl = o.take_duration("lease_ttl")?;
        let connect_timeout = o.take_duration("connect_timeout")?;
        let request_timeout = o.take_duration("request_timeout")?;
        let extra = extra(&mut o)?;
        let base = o.finish()?;
        let HostList { auth, hosts, path } = split_host_list(&base[scheme_len..], self.name)?;
        Ok(ClusterUrl {
            hosts: hosts.split(',').map(str::to_owned).collect(),
            path,
            auth,
            lease_ttl,
            connect_timeout,
            request_timeout,
            tls,
            extra,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::TEST;
    use super::*;

    fn parse(url: &str) -> Result<ClusterUrl<Option<u32>>> {
        TEST.parse_url(url, |o| o.take("n"))
    }

    #[test]
    fn schemes_options_and_the_stores_own() {
        let u = parse("etcd://h1:2379,h2:2380/a%20b?lease_ttl=3s&n=7&connect_timeout=1s").expect("valid");
        assert_eq!(u.hosts, ["h1:2379", "h2:2380"]);
        assert_eq!(u.path.as_deref(), Some("/a b"));
        assert_eq!(
            (u.lease_ttl, u.connect_timeout),
            (Some(Duration::from_secs(3)), Some(Duration::from_secs(1)))
        );
        assert_eq!((u.request_timeout, u.extra, u.tls), (None, Some(7), false));
        assert!(parse("ETCDS://h:1").expect("TLS").tls);
        let e = parse("nats://h:1").expect_err("another store's").to_string();
        assert!(e.contains("etcd url must start with etcd:// (or etcds:// for TLS)"), "{e}");
        for bad in ["etcd://h:1?n=x", "etcd://h:1?n=1&n=2", "etcd://h:1?m=1", "etcd://", "etcd://u@h:1"] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }
}
