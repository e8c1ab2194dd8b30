//! What the bench takes from lock-zk: a private ZooKeeper, and the raw floor.

use lock_core::backend::Capability;
use lock_testkit::server::ServerError;
use lock_testkit::side::{FloorFuture, Started, StoreSide};

use crate::{ZkServer, floor};

/// lock-zk's testing side.
#[derive(Debug)]
pub struct Side;

impl StoreSide for Side {
    fn store(&self) -> &'static str {
        "zk"
    }
    fn schemes(&self) -> &'static [&'static str] {
        &["zk", "zookeeper"]
    }
    fn start(&self) -> Result<Started, ServerError> {
        // The default fsync setting: the figures compare with Curator's on a real disk write path.
        let s = ZkServer::start_with(&["forceSync=yes"])?;
        Ok(Started {
            url: format!("zk://{}/dlock-bench", s.connect_string()),
            variants: Vec::new(),
            keep: Box::new(s),
        })
    }
    fn floor<'a>(&'a self, url: &'a str, _: Capability, n: usize) -> FloorFuture<'a> {
        Box::pin(floor::zk(url, n))
    }
}
