//! What the bench takes from lock-postgres: a private PostgreSQL, and the raw floor.

use lock_core::backend::Capability;
use lock_testkit::history::nemesis::EndSessions;
use lock_testkit::server::ServerError;
use lock_testkit::side::{Checked, CheckedServer, Faultable, FloorFuture, Revokes, Started, StoreSide};

use crate::{PgServer, floor};

/// lock-postgres's testing side.
#[derive(Debug)]
pub struct Side;

impl StoreSide for Side {
    fn store(&self) -> &'static str {
        "postgres"
    }
    fn schemes(&self) -> &'static [&'static str] {
        &["postgres", "postgresql"]
    }
    fn start(&self) -> Result<Started, ServerError> {
        let s = PgServer::start()?;
        // Without fencing tokens (`fencing=false`) a grant writes nothing, as the peers' do.
        let unfenced = ("postgres/unfenced".to_owned(), format!("{}?fencing=false", s.url()));
        Ok(Started { url: s.url(), variants: vec![unfenced], keep: Box::new(s) })
    }
    fn floor<'a>(&'a self, url: &'a str, _: Capability, n: usize) -> FloorFuture<'a> {
        Box::pin(floor::postgres(url, n))
    }
    /// A cut connection ends the session and its advisory locks at once.
    fn checked(&self) -> Vec<Checked> {
        let revokes = Revokes { on_cut: true, on_restart: false, on_session_kill: true };
        vec![Checked::new("postgres", revokes, || {
            let s = PgServer::start()?;
            Ok(CheckedServer { port: s.port(), url: s.url(), server: Box::new(s) })
        })]
    }
}

impl Faultable for PgServer {
    fn sessions(&self) -> Option<&dyn EndSessions> {
        Some(self)
    }
}
