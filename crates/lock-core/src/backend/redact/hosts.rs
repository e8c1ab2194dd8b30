//! A host-list URL (`scheme://[user:password@]host:port[,host:port...][/path]`) taken apart:
//! its credentials, its hosts and its path, for the stores that take a list of endpoints and a
//! key space rather than a driver URL (ZooKeeper, etcd).

use super::{percent_decode, split_userinfo};
use crate::{LockError, Result};

/// The parts of a host-list URL.
#[derive(Debug, PartialEq, Eq)]
pub struct HostList<'a> {
    /// User and password, percent-decoded.
    pub auth: Option<(String, String)>,
    /// The comma-separated `host:port` list, as written (never empty).
    pub hosts: &'a str,
    /// The path, percent-decoded; `None` for no path or `/`.
    pub path: Option<String>,
}

/// Take `rest`, the URL after `scheme://` with its query already taken off, apart. The
/// userinfo goes first: a raw password may hold `/` and must never be taken for the path.
///
/// # Errors
/// [`LockError::InvalidConfig`] for no host (named `store` in the message), or credentials
/// without a `:`; never quoting the password.
pub fn split_host_list<'a>(rest: &'a str, store: &str) -> Result<HostList<'a>> {
    let invalid = |reason: String| LockError::InvalidConfig { reason };
    let (userinfo, rest) = split_userinfo(rest);
    let (hosts, path) = rest.find('/').map_or((rest, ""), |i| rest.split_at(i));
    if hosts.is_empty() {
        return Err(invalid(format!("{store} url has no host")));
    }
    let auth = match userinfo {
        Some(u) => {
            let (user, pw) =
                u.split_once(':').ok_or_else(|| invalid("url credentials need user:password".to_owned()))?;
            Some((percent_decode(user), percent_decode(pw)))
        }
        None => None,
    };
    Ok(HostList { auth, hosts, path: (!path.is_empty() && path != "/").then(|| percent_decode(path)) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_come_off_before_the_path() {
        let parts = split_host_list("u:p%2F/@w@h1:1,h2:2/a%20b", "etcd").expect("valid");
        assert_eq!(parts.auth, Some(("u".to_owned(), "p//@w".to_owned())));
        assert_eq!((parts.hosts, parts.path.as_deref()), ("h1:1,h2:2", Some("/a b")));
        let bare = split_host_list("h:1/", "etcd").expect("valid");
        assert_eq!((bare.auth, bare.hosts, bare.path), (None, "h:1", None));
        let no_host = split_host_list("/p", "zookeeper").expect_err("no host");
        assert_eq!(
            no_host.to_string(),
            LockError::InvalidConfig { reason: "zookeeper url has no host".into() }.to_string()
        );
        assert!(split_host_list("user@h:1", "etcd").is_err(), "credentials need user:password");
    }
}
