//! What the bench takes from lock-redis: a private Redis, and the raw floors of each topology.

use lock_core::backend::Capability;
use lock_testkit::history::nemesis::EndSessions;
use lock_testkit::server::ServerError;
use lock_testkit::side::{Checked, CheckedServer, Faultable, FloorFuture, Revokes, Started, StoreSide};

use crate::{RedisServer, floor};

/// lock-redis's testing side.
#[derive(Debug)]
pub struct Side;

impl StoreSide for Side {
    fn store(&self) -> &'static str {
        "redis"
    }
    fn schemes(&self) -> &'static [&'static str] {
        &["redis", "rediss", "redis+cluster", "redis+sentinel", "redlock"]
    }
    fn start(&self) -> Result<Started, ServerError> {
        let s = RedisServer::start()?;
        Ok(Started { url: s.url(), variants: Vec::new(), keep: Box::new(s) })
    }
    fn floor<'a>(&'a self, url: &'a str, _: Capability, n: usize) -> FloorFuture<'a> {
        match url.split_once("://").map_or("", |(s, _)| s) {
            "redis+cluster" => Box::pin(floor::redis_cluster(url, n)),
            "redis+sentinel" => Box::pin(floor::redis_sentinel(url, n)),
            "redlock" => Box::pin(floor::redlock(url, n)),
            _ => Box::pin(floor::redis(url, n)),
        }
    }
    /// Every mode; the classic checker runs one per way of holding (simple, fair).
    fn checked(&self) -> Vec<Checked> {
        // Holds are leases, not sessions: killing the connections only drops requests in
        // flight; a restarted server has forgotten them (no persistence).
        let revokes = Revokes { on_cut: false, on_restart: true, on_session_kill: false };
        ["simple", "fair", "reentrant", "redis-py"]
            .into_iter()
            .map(|mode| {
                let c = Checked::new(format!("redis/{mode}"), revokes, move || {
                    let s = RedisServer::start()?;
                    let (port, url) = (s.port(), format!("redis://127.0.0.1:{}/?mode={mode}", s.port()));
                    Ok(CheckedServer { server: Box::new(s), port, url })
                });
                if matches!(mode, "simple" | "fair") { c } else { c.generative_only() }
            })
            .collect()
    }
}

impl Faultable for RedisServer {
    fn sessions(&self) -> Option<&dyn EndSessions> {
        Some(self)
    }
}
