//! What the bench takes from lock-zk: a private ZooKeeper, and the raw floor.

use lock_core::backend::Capability;
use lock_testkit::server::ServerError;
use lock_testkit::side::{Checked, CheckedServer, Faultable, FloorFuture, Revokes, Started, StoreSide};

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
    /// The session (the lease) expires during a 900 ms fault. No command ends a session from
    /// the server side: the checkers blackhole the network instead, and the blackhole outlasts
    /// the session timeout.
    fn checked(&self) -> Vec<Checked> {
        vec![Checked::new("zk", Revokes::default(), || {
            let s = ZkServer::start()?;
            let (port, url) =
                (s.port(), format!("zk://127.0.0.1:{}/history?session_timeout_ms=600", s.port()));
            Ok(CheckedServer { server: Box::new(s), port, url })
        })]
    }
}

impl Faultable for ZkServer {}
