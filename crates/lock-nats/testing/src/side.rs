//! What the bench takes from lock-nats: a private nats-server, and the raw floor.

use lock_core::backend::Capability;
use lock_testkit::server::ServerError;
use lock_testkit::side::{FloorFuture, Started, StoreSide};

use crate::{NatsServer, floor};

/// lock-nats's testing side.
#[derive(Debug)]
pub struct Side;

impl StoreSide for Side {
    fn store(&self) -> &'static str {
        "nats"
    }
    fn schemes(&self) -> &'static [&'static str] {
        &["nats"]
    }
    fn start(&self) -> Result<Started, ServerError> {
        let s = NatsServer::start()?;
        // The bucket with the library's default lease, as a user who names only the bucket.
        Ok(Started {
            url: format!("nats://{}/dlock-bench", s.endpoint()),
            variants: Vec::new(),
            keep: Box::new(s),
        })
    }
    fn floor<'a>(&'a self, url: &'a str, _: Capability, n: usize) -> FloorFuture<'a> {
        Box::pin(floor::nats(url, n))
    }
}
