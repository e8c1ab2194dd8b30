//! What the bench takes from lock-mysql: a private MariaDB, and the raw floor.

use lock_core::backend::Capability;
use lock_testkit::history::nemesis::EndSessions;
use lock_testkit::server::ServerError;
use lock_testkit::side::{Checked, CheckedServer, Faultable, FloorFuture, Revokes, Started, StoreSide};

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
    /// Every mode; the classic checker leaves `get_lock` (held by a session, as pessimistic).
    fn checked(&self) -> Vec<Checked> {
        ["pessimistic", "optimistic", "get_lock"]
            .into_iter()
            .map(|mode| {
                // Held by a session: a cut connection or a killed one frees the lock at once.
                let by_session = mode != "optimistic";
                let revokes = Revokes { on_cut: by_session, on_restart: false, on_session_kill: by_session };
                let c = Checked::new(format!("mysql/{mode}"), revokes, move || {
                    let s = MariaDbServer::start()?;
                    let (port, url) = (s.port(), format!("{}?mode={mode}", s.url()));
                    Ok(CheckedServer { server: Box::new(s), port, url })
                });
                if mode == "get_lock" { c.generative_only() } else { c }
            })
            .collect()
    }
}

impl Faultable for MariaDbServer {
    fn sessions(&self) -> Option<&dyn EndSessions> {
        Some(self)
    }
}
