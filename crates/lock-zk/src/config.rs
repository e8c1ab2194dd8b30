//! The validated configuration a backend runs on, and the parts of a connect string
//! (`host:port[,host:port...][/chroot]`) that the builder checks and the connection reads.

use std::fmt;
use std::time::Duration;

/// The validated configuration.
#[derive(Clone)]
pub(crate) struct Config {
    /// `host:port[,host:port...][/chroot]`.
    pub connect: String,
    /// Absolute lock root inside the chroot, without a trailing slash; `""` for `/`.
    pub root: String,
    pub session_timeout: Duration,
    pub connection_timeout: Option<Duration>,
    pub auth: Option<(String, String)>,
    /// Create a missing chroot instead of refusing it.
    pub create_chroot: bool,
    /// Clock-drift margin: holds are given up `session_timeout * rate + floor` before the
    /// server may expire the session.
    pub clock_drift: (f64, Duration),
    /// Over TLS: the CA (PEM) the servers' certificates must chain to.
    #[cfg_attr(not(feature = "tls"), allow(dead_code))]
    pub tls_ca: Option<String>,
    /// The chroot of the caller's own client (`"/"` for none) when the locks ride on it
    /// (`connect` is then empty): its session cannot be re-opened by us.
    pub user_client: Option<String>,
}

impl fmt::Debug for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Config")
            .field("connect", &self.connect)
            .field("root", &self.root)
            .field("session_timeout", &self.session_timeout)
            .field("auth_user", &self.auth.as_ref().map(|(u, _)| u))
            .field("user_client_chroot", &self.user_client)
            .finish_non_exhaustive()
    }
}

impl Config {
    /// The chroot part of the connect string, if any.
    pub fn chroot(&self) -> Option<(&str, &str)> {
        self.connect.find('/').map(|i| (&self.connect[..i], &self.connect[i..])).filter(|(_, c)| *c != "/")
    }

    /// The lock space, the same in every process configured for it however its connect string
    /// is spelled: `zk://` + the hosts lower-cased, with the default port made explicit, sorted
    /// and deduplicated, + chroot and root as one path. No credentials (they are not part of
    /// `connect`).
    ///
    /// On a caller's client the hosts are not known (the client does not tell them):
    /// `zk://user-client/` + its chroot and the root. Such a name cannot be a URL's (those
    /// always carry a port), and `MultiLock` orders by key first, so it only breaks ties.
    pub fn identity(&self) -> String {
        if let Some(chroot) = &self.user_client {
            let path = format!("{}{}", chroot.trim_end_matches('/'), self.root);
            return format!("zk://user-client/{}", path.trim_start_matches('/'));
        }
        let (hosts, chroot) =
            self.connect.split_once('/').map_or((self.connect.as_str(), ""), |(h, c)| (h, c));
        let mut hosts: Vec<String> = hosts
            .split(',')
            .map(|h| {
                let h = h.trim().to_ascii_lowercase();
                // `host:port`, `[v6]:port`; without a port the client uses 2181.
                let has_port =
                    h.rsplit_once(':').is_some_and(|(host, _)| !host.contains(':') || host.ends_with(']'));
                if has_port { h } else { format!("{h}:2181") }
            })
            .collect();
        hosts.sort_unstable();
        hosts.dedup();
        let path = format!("{}{}", chroot.trim_end_matches('/').trim_start_matches('/'), self.root);
        let path = path.trim_start_matches('/');
        format!("zk://{}/{path}", hosts.join(","))
    }
}

/// The `host[:port]` entries of a connect string (before any `/chroot`).
pub(crate) fn hosts(connect: &str) -> impl Iterator<Item = &str> {
    connect.split('/').next().unwrap_or("").split(',')
}

/// `host:2181`, `[::1]:2181` or `host` as host and port; `None` for a bare IPv6 address
/// without brackets (ambiguous).
pub(crate) fn split_host(h: &str) -> Option<(&str, Option<&str>)> {
    match h.rsplit_once(':') {
        Some((host, port)) if !host.contains(':') || (host.starts_with('[') && host.ends_with(']')) => {
            Some((host, Some(port)))
        }
        Some(_) => None,
        None => Some((h, None)),
    }
}

/// Every `host:port` of a connect string (before any `/chroot`) has a host and, if it has a
/// port, a valid one: a typo is a configuration error, not a server that never answers.
pub(crate) fn validate_hosts(connect: &str) -> std::result::Result<(), String> {
    for h in hosts(connect) {
        let Some((host, port)) = split_host(h) else {
            return Err(format!("zookeeper host {h:?}: write IPv6 addresses as [addr]:port"));
        };
        if host.is_empty() || host == "[]" {
            return Err(format!("zookeeper host {h:?} has no host name"));
        }
        if let Some(p) = port
            && !p.parse::<u16>().is_ok_and(|p| p > 0)
        {
            return Err(format!("zookeeper host {h:?} has an invalid port {p:?}"));
        }
    }
    Ok(())
}

pub(crate) fn normalize_root(root: &str) -> std::result::Result<String, String> {
    if !root.starts_with('/') {
        return Err(format!("lock root {root:?} must start with '/'"));
    }
    let trimmed = root.trim_end_matches('/');
    if trimmed.is_empty() {
        return Ok(String::new());
    }
    for seg in trimmed[1..].split('/') {
        if seg.is_empty() || seg == "." || seg == ".." || seg.chars().any(char::is_control) {
            return Err(format!("lock root {root:?} has an invalid segment {seg:?}"));
        }
    }
    if trimmed == "/zookeeper" || trimmed.starts_with("/zookeeper/") {
        return Err("lock root must not be under /zookeeper".to_owned());
    }
    Ok(trimmed.to_owned())
}
