//! What the bench takes from lock-etcd: a private etcd, and the raw floor.

use lock_core::backend::Capability;
use lock_testkit::server::ServerError;
use lock_testkit::side::{FloorFuture, Started, StoreSide};

use crate::{EtcdServer, floor};

/// lock-etcd's testing side.
#[derive(Debug)]
pub struct Side;

impl StoreSide for Side {
    fn store(&self) -> &'static str {
        "etcd"
    }
    fn schemes(&self) -> &'static [&'static str] {
        &["etcd"]
    }
    fn start(&self) -> Result<Started, ServerError> {
        let s = EtcdServer::start()?;
        Ok(Started { url: s.url("dlock-bench"), variants: Vec::new(), keep: Box::new(s) })
    }
    fn floor<'a>(&'a self, url: &'a str, _: Capability, n: usize) -> FloorFuture<'a> {
        Box::pin(floor::etcd(url, n))
    }
}
