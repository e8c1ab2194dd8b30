//! Backend selection by URL scheme.

use crate::{DynBackend, LockError};

/// Replace the password of a URL by `***` (for messages and logs).
pub fn redact_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else { return url.to_owned() };
    let (auth, tail) = match rest.find(['/', '?']) {
        Some(i) => rest.split_at(i),
        None => (rest, ""),
    };
    match auth.rsplit_once('@') {
        Some((userinfo, host)) => {
            let user = userinfo.split_once(':').map_or(userinfo, |(u, _)| u);
            let masked = if userinfo.contains(':') { format!("{user}:***") } else { user.to_owned() };
            format!("{scheme}://{masked}@{host}{tail}")
        }
        None => url.to_owned(),
    }
}

/// Connect to the backend a URL names:
///
/// | scheme | backend | feature |
/// |---|---|---|
/// | `memory://<table>` | in-process table, shared by every `from_url` with the same name | `memory` |
/// | `redis://`, `rediss://` (`?mode=simple\|reentrant\|fair`) | Redis | `redis` |
/// | `mysql://`, `mariadb://` (`?mode=pessimistic\|optimistic`) | MySQL / MariaDB | `mysql` |
/// | `zk://host:port[,host:port]/root` | ZooKeeper | `zk` |
///
/// # Errors
/// [`LockError::FeatureNotEnabled`] for a known scheme compiled out, [`LockError::InvalidConfig`]
/// for an unknown scheme or a malformed URL, backend errors when the server is unreachable.
pub async fn from_url(url: &str) -> Result<DynBackend, LockError> {
    let Some((scheme, rest)) = url.split_once("://") else {
        return Err(LockError::InvalidConfig { reason: format!("not a URL: {:?}", redact_url(url)) });
    };
    let scheme = scheme.to_ascii_lowercase();
    match scheme.as_str() {
        "memory" => memory(rest),
        "redis" | "rediss" => redis(url).await,
        "mysql" | "mariadb" => mysql(url).await,
        "zk" | "zookeeper" => zk(url).await,
        other => Err(LockError::InvalidConfig {
            reason: format!(
                "unknown scheme {other:?} (expected memory, redis, rediss, mysql, mariadb or zk)"
            ),
        }),
    }
}

#[cfg(feature = "memory")]
fn memory(name: &str) -> Result<DynBackend, LockError> {
    use std::collections::HashMap;
    use std::sync::{LazyLock, Mutex};

    use lock_core::MemoryBackend;
    // One table per name, so every "client" of memory://x shares the locks of x.
    static TABLES: LazyLock<Mutex<HashMap<String, MemoryBackend>>> = LazyLock::new(Mutex::default);
    let mut tables = TABLES.lock().unwrap_or_else(|e| e.into_inner());
    Ok(std::sync::Arc::new(tables.entry(name.trim_end_matches('/').to_owned()).or_default().clone()))
}

#[cfg(not(feature = "memory"))]
fn memory(_: &str) -> Result<DynBackend, LockError> {
    Err(LockError::FeatureNotEnabled { scheme: "memory".into(), feature: "memory" })
}

#[cfg(not(feature = "redis"))]
async fn redis(url: &str) -> Result<DynBackend, LockError> {
    Err(LockError::FeatureNotEnabled { scheme: scheme_of(url), feature: "redis" })
}

#[cfg(not(feature = "mysql"))]
async fn mysql(url: &str) -> Result<DynBackend, LockError> {
    Err(LockError::FeatureNotEnabled { scheme: scheme_of(url), feature: "mysql" })
}

#[cfg(not(feature = "zk"))]
async fn zk(url: &str) -> Result<DynBackend, LockError> {
    Err(LockError::FeatureNotEnabled { scheme: scheme_of(url), feature: "zk" })
}

#[cfg(not(all(feature = "redis", feature = "mysql", feature = "zk")))]
fn scheme_of(url: &str) -> String {
    url.split_once("://").map_or("", |(s, _)| s).to_owned()
}

/// Take `name=value` out of a URL's query string.
#[cfg(feature = "redis")]
fn take_param(url: &str, name: &str) -> (String, Option<String>) {
    let Some((base, query)) = url.split_once('?') else { return (url.to_owned(), None) };
    let mut found = None;
    let rest: Vec<&str> = query
        .split('&')
        .filter(|p| match p.split_once('=') {
            Some((k, v)) if k == name => {
                found = Some(v.to_owned());
                false
            }
            _ => !p.is_empty(),
        })
        .collect();
    let url = if rest.is_empty() { base.to_owned() } else { format!("{base}?{}", rest.join("&")) };
    (url, found)
}

#[cfg(feature = "redis")]
async fn redis(url: &str) -> Result<DynBackend, LockError> {
    use lock_redis::{Mode, RedisLock};
    let (url, mode) = take_param(url, "mode");
    let (url, prefix) = take_param(&url, "prefix");
    let mode = match mode.as_deref() {
        None | Some("simple") => Mode::Simple,
        Some("reentrant") => Mode::Reentrant,
        Some("fair") => Mode::Fair,
        Some(other) => {
            return Err(LockError::InvalidConfig {
                reason: format!("unknown redis mode {other:?} (expected simple, reentrant or fair)"),
            });
        }
    };
    let mut b = RedisLock::builder().url(url).mode(mode);
    if let Some(p) = prefix {
        b = b.key_prefix(p);
    }
    Ok(std::sync::Arc::new(b.build().await?))
}

#[cfg(feature = "mysql")]
async fn mysql(url: &str) -> Result<DynBackend, LockError> {
    Ok(std::sync::Arc::new(lock_mysql::MySqlLock::builder().url(url).build().await?))
}

#[cfg(feature = "zk")]
async fn zk(url: &str) -> Result<DynBackend, LockError> {
    Ok(std::sync::Arc::new(lock_zk::ZkLock::builder().url(url).build().await?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redacts_passwords() {
        assert_eq!(redact_url("redis://user:s3cret@h:1/0"), "redis://user:***@h:1/0");
        assert_eq!(
            redact_url("mysql://root:pw@127.0.0.1:3306/db?x=1"),
            "mysql://root:***@127.0.0.1:3306/db?x=1"
        );
        assert_eq!(redact_url("redis://:pw@h"), "redis://:***@h");
        assert_eq!(redact_url("zk://h:2181/r"), "zk://h:2181/r");
    }

    #[tokio::test]
    async fn memory_tables_are_shared_by_name() {
        let a = crate::Locker::new(from_url("memory://t1").await.expect("memory"));
        let b = crate::Locker::new(from_url("memory://t1").await.expect("memory"));
        let c = crate::Locker::new(from_url("memory://t2").await.expect("memory"));
        let g = a.try_lock("k").await.expect("try").expect("free");
        assert!(b.try_lock("k").await.expect("try").is_none());
        c.try_lock("k").await.expect("try").expect("other table").release().await.expect("release");
        g.release().await.expect("release");
    }

    #[cfg(feature = "redis")]
    #[test]
    fn params_are_taken_out_of_the_query() {
        assert_eq!(take_param("redis://h/?mode=fair", "mode"), ("redis://h/".into(), Some("fair".into())));
        assert_eq!(
            take_param("redis://h/?protocol=resp3&mode=fair", "mode"),
            ("redis://h/?protocol=resp3".into(), Some("fair".into()))
        );
        assert_eq!(take_param("redis://h/", "mode"), ("redis://h/".into(), None));
    }

    #[tokio::test]
    async fn unknown_and_malformed_urls_are_typed_errors() {
        assert!(matches!(from_url("ftp://x").await, Err(LockError::InvalidConfig { .. })));
        assert!(matches!(from_url("nonsense").await, Err(LockError::InvalidConfig { .. })));
        let err = from_url("mysql://u:topsecret@h/db").await.expect_err("error");
        assert!(!err.to_string().contains("topsecret"));
    }
}
