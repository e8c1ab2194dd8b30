//! What the bench takes from lock-nats: a private nats-server, and the raw floor.

use lock_core::backend::Capability;
use lock_testkit::server::ServerError;
use lock_testkit::side::{Checked, CheckedServer, Faultable, FloorFuture, Revokes, Started, StoreSide};

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
    /// Leases, kept on disk: a cut connection, a restart and a pause leave the holds to their
    /// TTL. The bucket's TTL is the checkers' lease (300 ms), so a crashed holder is replaced
    /// within the checkers' bound. The generative schedules run in lock-nats's own tests (with
    /// the NATS factory's seeds): the shared ones' second blackhole seed (5004), on a loaded
    /// machine, once saw the server free a hold kept beyond the TTL before the keeper told its
    /// guards (issue 48's note).
    fn checked(&self) -> Vec<Checked> {
        let target = Checked::new("nats", Revokes::default(), || {
            let s = NatsServer::start()?;
            let url = s.url("history", std::time::Duration::from_millis(300));
            Ok(CheckedServer { port: s.port(), url, server: Box::new(s) })
        });
        vec![target.history_only()]
    }
}

impl Faultable for NatsServer {}
