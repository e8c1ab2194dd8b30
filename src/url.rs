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

#[cfg(feature = "redis")]
async fn redis(url: &str) -> Result<DynBackend, LockError> {
    Err(LockError::InvalidConfig { reason: format!("redis facade pending: {}", redact_url(url)) })
}

#[cfg(feature = "mysql")]
async fn mysql(url: &str) -> Result<DynBackend, LockError> {
    Err(LockError::InvalidConfig { reason: format!("mysql facade pending: {}", redact_url(url)) })
}

#[cfg(feature = "zk")]
async fn zk(url: &str) -> Result<DynBackend, LockError> {
    Err(LockError::InvalidConfig { reason: format!("zk facade pending: {}", redact_url(url)) })
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

    #[tokio::test]
    async fn unknown_and_malformed_urls_are_typed_errors() {
        assert!(matches!(from_url("ftp://x").await, Err(LockError::InvalidConfig { .. })));
        assert!(matches!(from_url("nonsense").await, Err(LockError::InvalidConfig { .. })));
        let err = from_url("mysql://u:topsecret@h/db").await.err().expect("error");
        assert!(!err.to_string().contains("topsecret"));
    }
}
