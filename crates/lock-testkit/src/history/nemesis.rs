//! The faults the history checkers inject, each a [`Nemesis`]: a server paused or killed and
//! restarted, the network through a [`Proxy`] blackholed or cut.

use std::time::Duration;

use async_trait::async_trait;

use super::Nemesis;
use crate::proxy::Proxy;
use crate::server::FaultControl;

/// The server process paused (SIGSTOP) for a while: requests hang, connections stay open.
pub struct Pause<'a>(pub &'a (dyn FaultControl + Sync), pub Duration);
/// The server SIGKILLed, restarted when healing.
pub struct KillRestart<'a>(pub &'a (dyn FaultControl + Sync));
/// Bytes stop flowing through the proxy (a partition), connections stay open.
pub struct Blackhole<'a>(pub &'a Proxy);
/// Every connection through the proxy closed at once.
pub struct Cut<'a>(pub &'a Proxy);

#[async_trait]
impl Nemesis for Pause<'_> {
    fn name(&self) -> String {
        format!("server paused {:?}", self.1)
    }
    async fn strike(&self) {
        self.0.pause().expect("pause");
    }
    async fn heal(&self) {
        self.0.resume().expect("resume");
    }
}

#[async_trait]
impl Nemesis for KillRestart<'_> {
    fn name(&self) -> String {
        "server killed and restarted".into()
    }
    async fn strike(&self) {
        self.0.kill().expect("kill");
    }
    async fn heal(&self) {
        let s = self.0;
        // Restarting waits for readiness: off the runtime's worker threads.
        tokio::task::block_in_place(|| s.restart().expect("restart"));
    }
}

#[async_trait]
impl Nemesis for Blackhole<'_> {
    fn name(&self) -> String {
        "network blackholed".into()
    }
    async fn strike(&self) {
        self.0.blackhole(true);
    }
    async fn heal(&self) {
        self.0.blackhole(false);
    }
}

#[async_trait]
impl Nemesis for Cut<'_> {
    fn name(&self) -> String {
        "connections cut".into()
    }
    async fn strike(&self) {
        self.0.cut();
    }
    async fn heal(&self) {}
}

macro_rules! debug_by_name {
    ($($t:ident),*) => {
        $(impl std::fmt::Debug for $t<'_> {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(&self.name())
            }
        })*
    };
}

debug_by_name!(Pause, KillRestart, Blackhole, Cut);
