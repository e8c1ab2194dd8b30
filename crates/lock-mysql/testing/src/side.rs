//! What the bench takes from lock-mysql: a private MariaDB, and the raw floor.

use lock_core::backend::Capability;
use lock_testkit::server::ServerError;
use lock_testkit::side::{FloorFuture, Started, StoreSide};

use crate::{MariaDbServer, floor};

/// lock-mysql's testing side.
#[derive(Debug)]
pub struct Side;

impl StoreSide for Side {
    fn store(&self) -> &'static str {
        "mysql"
    }
    fn schemes(&self) -> &'static [&'static str] {
        &["mysql", "mariadb"]
    }
    fn start(&self) -> Result<Started, ServerError> {
        let s = MariaDbServer::start()?;
        Ok(Started { url: s.url(), variants: Vec::new(), keep: Box::new(s) })
    }
    fn floor<'a>(&'a self, url: &'a str, caps: Capability, n: usize) -> FloorFuture<'a> {
        Box::pin(floor::mysql(url, caps, n))
    }
}
