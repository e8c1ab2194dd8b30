//! What the bench takes from lock-etcd: a private etcd, and the raw floor.

use lock_core::backend::Capability;
use lock_testkit::history::nemesis::EndSessions;
use lock_testkit::server::ServerError;
use lock_testkit::side::{Checked, CheckedServer, Faultable, FloorFuture, Revokes, Started, StoreSide};

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
    /// The lease outlives a cut connection and a restart (the server keeps its keys); a
    /// revoked lease deletes its keys at once, and the holder hears of it at its next
    /// keep-alive.
    fn checked(&self) -> Vec<Checked> {
        let revokes = Revokes { on_cut: false, on_restart: false, on_session_kill: true };
        vec![Checked::new("etcd", revokes, || {
            let s = EtcdServer::start()?;
            let (port, url) = (s.port(), format!("etcd://127.0.0.1:{}/history?lease_ttl=1s", s.port()));
            Ok(CheckedServer { server: Box::new(s), port, url })
        })]
    }
}

impl Faultable for EtcdServer {
    fn sessions(&self) -> Option<&dyn EndSessions> {
        Some(self)
    }
}
