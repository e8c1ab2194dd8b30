//! Redlock: the `redlock://` scheme, a quorum over independent Redis masters.

use std::sync::Arc;

use lock_core::backend::redact::redact_url;
use lock_core::backend::registry::Connected;
use lock_core::{LockError, QuorumBackend};

use crate::RedisLock;

mod lazy;
#[cfg(test)]
mod tests;

/// The `redis://` URL of every master of `redlock://<rest>`; each carries the query
/// (`mode=simple|reentrant`, `key_prefix=`) for `RedisLock::from_url`.
fn redlock_urls(rest: &str) -> Result<Vec<String>, LockError> {
    use lock_core::backend::{UrlOptions, redact::split_userinfo};
    let invalid = |reason: String| LockError::InvalidConfig { reason };
    // Fair mode waits in one master's queue, which a quorum cannot combine; the interop modes
    // share a key with a Python client that locks one server, not a majority.
    let mut options = UrlOptions::parse(&format!("redlock://{rest}"))?;
    if let Some(mode) = options.take::<String>("mode")?.filter(|m| m != "simple" && m != "reentrant") {
        return Err(invalid(format!("redlock supports mode=simple or mode=reentrant, not {mode}")));
    }
    // The userinfo first: a raw password may contain `/`, `?` or `@`.
    let (userinfo, after) = split_userinfo(rest);
    let userinfo = userinfo.map_or(String::new(), |u| format!("{u}@"));
    let (hosts, tail) = after.split_at(after.find(['/', '?']).unwrap_or(after.len()));
    let urls: Vec<String> =
        hosts.split(',').filter(|h| !h.is_empty()).map(|h| format!("redis://{userinfo}{h}{tail}")).collect();
    if urls.is_empty() {
        return Err(invalid(format!(
            "redlock needs at least one host: {:?}",
            redact_url(&format!("redlock://{rest}"))
        )));
    }
    Ok(urls)
}

/// Connect to `redlock://h1:p1,h2:p2,h3:p3[/db]`: a [`QuorumBackend`] over one [`RedisLock`] per
/// independent master.
///
/// Redlock starts while a minority of its masters is unreachable: those members connect on
/// first use, and again after every failure, so they join the quorum when they come back.
pub async fn connect(url: &str) -> Result<QuorumBackend, LockError> {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    let urls = redlock_urls(rest)?;
    let connects = urls.iter().map(|u| RedisLock::from_url(u));
    let results = futures_util::future::join_all(connects).await;
    let quorum = urls.len() / 2 + 1;
    let up = results.iter().filter(|r| r.is_ok()).count();
    let mut members: Vec<Connected> = Vec::new();
    let mut first_err = None;
    for (url, r) in urls.into_iter().zip(results) {
        match r {
            Ok(m) => members.push(Arc::new(m)),
            Err(e) if e.is_temporary() => {
                tracing::warn!(url = %redact_url(&url), error = %e, "redlock master unreachable; it joins when it answers");
                first_err.get_or_insert(e);
                members.push(Arc::new(lazy::LazyRedis::new(url)));
            }
            // A permanent error (bad config, auth) will not heal by waiting.
            Err(e) => return Err(e),
        }
    }
    if up < quorum {
        return Err(first_err.unwrap_or_else(|| LockError::temporary("quorum", "no master reachable")));
    }
    QuorumBackend::new(members)
}
