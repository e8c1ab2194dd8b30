//! The multi-host URLs: `redis+cluster://` (a Redis Cluster's seed nodes) and
//! `redis+sentinel://` (the sentinels and the name of the primary they watch).

use lock_core::backend::redact::{redact_url, split_userinfo};
use lock_core::{LockError, Result};

/// Default port of a cluster node.
const REDIS_PORT: u16 = 6379;
/// Default port of a sentinel.
const SENTINEL_PORT: u16 = 26379;

/// What a multi-host URL names.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Topology {
    /// `redis+cluster://[user:pw@]h1:p1,h2:p2[/][?protocol=..]`: one `redis://` (or
    /// `rediss://`) URL per seed node, each with the credentials and the driver's options.
    Cluster { nodes: Vec<String> },
    /// `redis+sentinel://[user:pw@]s1:p1,s2:p2/master-name[/db][?protocol=..]`: the sentinels
    /// (`redis://host:port`, no credentials), the primary's name, and one URL carrying what the
    /// primary's connection needs (credentials, db, options) on a placeholder host.
    Sentinel { sentinels: Vec<String>, master: String, node: String },
}

/// The topology `url` names, or `None` for a single-server URL.
///
/// # Errors
/// [`LockError::InvalidConfig`] for a malformed multi-host URL (no host, a sentinel URL without
/// a master name, a bad db), [`LockError::FeatureNotEnabled`] for `rediss+cluster://` without
/// the `tls` feature; TLS to sentinels is not supported (`rediss+sentinel://` is refused).
pub(crate) fn parse(url: &str) -> Result<Option<Topology>> {
    let Some((scheme, rest)) = url.split_once("://") else { return Ok(None) };
    let scheme = scheme.to_ascii_lowercase();
    let (base, kind) = match scheme.split_once('+') {
        Some((base @ ("redis" | "rediss" | "valkey" | "valkeys"), kind @ ("cluster" | "sentinel"))) => {
            (base, kind)
        }
        _ => return Ok(None),
    };
    let invalid = |why: &str| LockError::InvalidConfig { reason: format!("{why}: {}", redact_url(url)) };
    let tls = matches!(base, "rediss" | "valkeys");
    if tls && kind == "sentinel" {
        return Err(invalid("TLS to sentinels is not supported"));
    }
    if tls && !cfg!(feature = "tls") {
        return Err(LockError::FeatureNotEnabled { scheme, feature: "tls" });
    }
    let node_scheme = if tls { "rediss" } else { "redis" };
    // The userinfo first: a raw password may contain `/`, `?` or `@`.
    let (userinfo, after) = split_userinfo(rest);
    let userinfo = userinfo.map_or(String::new(), |u| format!("{u}@"));
    let (authority, tail) = after.split_at(after.find(['/', '?']).unwrap_or(after.len()));
    let (path, query) = tail.split_once('?').map_or((tail, ""), |(p, q)| (p, q));
    let query = if query.is_empty() { String::new() } else { format!("?{query}") };
    let default_port = if kind == "cluster" { REDIS_PORT } else { SENTINEL_PORT };
    let mut hosts = Vec::new();
    for h in authority.split(',').filter(|h| !h.is_empty()) {
        // `[::1]:6379`, `host:6379`, `host`.
        let has_port = h.rsplit_once(':').is_some_and(|(_, p)| !p.contains(']'));
        hosts.push(if has_port { h.to_owned() } else { format!("{h}:{default_port}") });
    }
    if hosts.is_empty() {
        return Err(invalid("needs at least one host"));
    }
    if kind == "cluster" {
        if !path.trim_matches('/').is_empty() {
            return Err(invalid("a cluster has only database 0: no path after the hosts"));
        }
        let nodes = hosts.iter().map(|h| format!("{node_scheme}://{userinfo}{h}/{query}")).collect();
        return Ok(Some(Topology::Cluster { nodes }));
    }
    let mut parts = path.trim_start_matches('/').split('/').filter(|p| !p.is_empty());
    let Some(master) = parts.next() else {
        return Err(invalid("needs the primary's name: redis+sentinel://host:port/master-name"));
    };
    let db = parts.next().unwrap_or("0");
    if db.parse::<i64>().is_err() || parts.next().is_some() {
        return Err(invalid("expected /master-name[/db] after the sentinels"));
    }
    let sentinels = hosts.iter().map(|h| format!("redis://{h}")).collect();
    // The host is a placeholder: the sentinels name the primary's address.
    let node = format!("redis://{userinfo}sentinel-primary/{db}{query}");
    Ok(Some(Topology::Sentinel { sentinels, master: master.to_owned(), node }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cluster_and_sentinel_urls() {
        assert_eq!(parse("redis://h:1/").expect("single"), None);
        assert_eq!(
            parse("redis+cluster://u:p%40w@a:7000,b,[::1]:7002/?protocol=resp3").expect("cluster"),
            Some(Topology::Cluster {
                nodes: vec![
                    "redis://u:p%40w@a:7000/?protocol=resp3".to_owned(),
                    "redis://u:p%40w@b:6379/?protocol=resp3".to_owned(),
                    "redis://u:p%40w@[::1]:7002/?protocol=resp3".to_owned(),
                ]
            })
        );
        assert_eq!(
            parse("redis+sentinel://:pw@s1:5000,s2/mymaster/3").expect("sentinel"),
            Some(Topology::Sentinel {
                sentinels: vec!["redis://s1:5000".to_owned(), "redis://s2:26379".to_owned()],
                master: "mymaster".to_owned(),
                node: "redis://:pw@sentinel-primary/3".to_owned(),
            })
        );
        for bad in [
            "redis+cluster:///",
            "redis+cluster://a:1/3",
            "redis+sentinel://s1",
            "redis+sentinel://s1/m/x",
            "redis+sentinel://s1/m/1/2",
            "rediss+sentinel://s1/m",
        ] {
            assert!(matches!(parse(bad), Err(LockError::InvalidConfig { .. })), "{bad}");
        }
        let e = parse("redis+sentinel://:s3cr3t@s1").expect_err("no master").to_string();
        assert!(!e.contains("s3cr3t"), "{e}");
    }
}
