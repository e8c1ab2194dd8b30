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
/// | `redlock://[user:pw@]h1:p1,h2:p2,h3:p3[/db]` (`?mode=simple\|reentrant`, `prefix=`) | Redlock: a [`QuorumBackend`](crate::QuorumBackend) over one Redis client per independent master | `redis` |
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
        "redlock" => redlock(rest).await,
        "mysql" | "mariadb" => mysql(url).await,
        "zk" | "zookeeper" => zk(url).await,
        other => Err(LockError::InvalidConfig {
            reason: format!(
                "unknown scheme {other:?} (expected memory, redis, rediss, redlock, mysql, mariadb or zk)"
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

#[cfg(not(feature = "redis"))]
async fn redlock(_: &str) -> Result<DynBackend, LockError> {
    Err(LockError::FeatureNotEnabled { scheme: "redlock".into(), feature: "redis" })
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

/// The `redis://` URL of every master of `redlock://<rest>`, with the mode (simple or
/// reentrant) and the key prefix.
#[cfg(feature = "redis")]
fn redlock_urls(rest: &str) -> Result<(Vec<String>, lock_redis::Mode, Option<String>), LockError> {
    use lock_redis::Mode;
    let invalid = |reason: String| LockError::InvalidConfig { reason };
    let (rest, mode) = take_param(rest, "mode");
    let (rest, prefix) = take_param(&rest, "prefix");
    let mode = match mode.as_deref() {
        None | Some("simple") => Mode::Simple,
        Some("reentrant") => Mode::Reentrant,
        Some(other) => {
            return Err(invalid(format!("unknown redlock mode {other:?} (expected simple or reentrant)")));
        }
    };
    let (authority, tail) = rest.split_at(rest.find(['/', '?']).unwrap_or(rest.len()));
    let (userinfo, hosts) = match authority.rsplit_once('@') {
        Some((u, h)) => (format!("{u}@"), h),
        None => (String::new(), authority),
    };
    let urls: Vec<String> =
        hosts.split(',').filter(|h| !h.is_empty()).map(|h| format!("redis://{userinfo}{h}{tail}")).collect();
    if urls.is_empty() {
        return Err(invalid(format!(
            "redlock needs at least one host: {:?}",
            redact_url(&format!("redlock://{rest}"))
        )));
    }
    Ok((urls, mode, prefix))
}

#[cfg(feature = "redis")]
async fn redlock(rest: &str) -> Result<DynBackend, LockError> {
    use lock_redis::RedisLock;
    let (urls, mode, prefix) = redlock_urls(rest)?;
    let mut members: Vec<DynBackend> = Vec::with_capacity(urls.len());
    for url in urls {
        let mut b = RedisLock::builder().url(url).mode(mode);
        if let Some(p) = &prefix {
            b = b.key_prefix(p);
        }
        members.push(std::sync::Arc::new(b.build().await?));
    }
    Ok(std::sync::Arc::new(lock_core::QuorumBackend::new(members)?))
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

    #[cfg(feature = "redis")]
    #[test]
    fn redlock_urls_name_every_master() {
        let (urls, mode, prefix) =
            redlock_urls(":pw@127.0.0.1:1,127.0.0.1:2,h3:3/2?mode=reentrant&prefix=app:").expect("parsed");
        assert_eq!(urls, ["redis://:pw@127.0.0.1:1/2", "redis://:pw@127.0.0.1:2/2", "redis://:pw@h3:3/2"]);
        assert_eq!(mode, lock_redis::Mode::Reentrant);
        assert_eq!(prefix.as_deref(), Some("app:"));
        assert!(matches!(redlock_urls("/?mode=simple"), Err(LockError::InvalidConfig { .. })));
        assert!(matches!(redlock_urls("h:1,h:2/?mode=fair"), Err(LockError::InvalidConfig { .. })));
    }

    /// Three real masters: the quorum locks, and a second client through the same URL is
    /// excluded.
    #[cfg(feature = "redis")]
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn redlock_scheme_locks_on_three_masters() {
        use lock_testkit::server::{RedisServer, require_servers};
        let mut masters = Vec::new();
        for _ in 0..3 {
            match RedisServer::start() {
                Ok(s) => masters.push(s),
                Err(e) if e.is_missing_binary() && !require_servers() => return eprintln!("SKIPPED: {e}"),
                Err(e) => panic!("redis-server: {e}"),
            }
        }
        let hosts: Vec<String> = masters.iter().map(|m| format!("127.0.0.1:{}", m.port())).collect();
        let url = format!("redlock://{}/?mode=simple&prefix=url-test:", hosts.join(","));
        let a = from_url(&url).await.expect("redlock");
        assert_eq!(a.name(), "quorum");
        assert!(!a.capabilities().fencing);
        let (a, b) = (crate::Locker::new(a), crate::Locker::new(from_url(&url).await.expect("redlock")));
        let g = a.try_lock("k").await.expect("try").expect("free");
        assert!(b.try_lock("k").await.expect("try").is_none());
        masters[2].kill().expect("kill");
        g.release().await.expect("release on 2 of 3");
        b.try_lock("k").await.expect("2 of 3").expect("free").release().await.expect("release");
    }

    #[tokio::test]
    async fn unknown_and_malformed_urls_are_typed_errors() {
        assert!(matches!(from_url("ftp://x").await, Err(LockError::InvalidConfig { .. })));
        assert!(matches!(from_url("nonsense").await, Err(LockError::InvalidConfig { .. })));
        let err = from_url("mysql://u:topsecret@h/db").await.expect_err("error");
        assert!(!err.to_string().contains("topsecret"));
    }
}
