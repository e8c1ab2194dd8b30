//! What the bench takes from lock-redis: a private Redis, and the raw floors of each topology.

use lock_core::backend::Capability;
use lock_testkit::server::ServerError;
use lock_testkit::side::{FloorFuture, Started, StoreSide};

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
}
