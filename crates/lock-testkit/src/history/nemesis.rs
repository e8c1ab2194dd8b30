//! The faults the history checkers inject, each a [`Nemesis`]: a server paused or killed and
//! restarted, the network through a [`Proxy`] blackholed, cut or slowed down, the clients'
//! sessions ended by the server, an operator's force-unlock.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use lock_core::LockBackend;
use lock_core::backend::Mutex;

use super::Nemesis;
use crate::proxy::Proxy;
use crate::server::{FaultControl, ServerError};

/// The server process paused (SIGSTOP) for a while: requests hang, connections stay open.
pub struct Pause<'a>(pub &'a (dyn FaultControl + Sync), pub Duration);
/// The server SIGKILLed, restarted when healing.
pub struct KillRestart<'a>(pub &'a (dyn FaultControl + Sync));
/// Bytes stop flowing through the proxy (a partition), connections stay open.
pub struct Blackhole<'a>(pub &'a Proxy);
/// Every connection through the proxy closed at once.
pub struct Cut<'a>(pub &'a Proxy);
/// Every byte through the proxy delivered this much later, both ways.
pub struct Latency<'a>(pub &'a Proxy, pub Duration);

/// The server ends its clients' sessions from its side: what an operator or a server-side
/// timeout does, unlike [`Cut`], which the client's own network does.
pub struct KillSessions<'a>(pub &'a dyn EndSessions);

/// A server that can end its clients' sessions ([`KillSessions`]), implemented by each store's
/// test server.
pub trait EndSessions: Sync {
    /// How, for the schedule's name: `CLIENT KILL`, `pg_terminate_backend`, ...
    fn how(&self) -> &'static str;
    /// Ends every session of the lock user (an admin's own session may stay).
    ///
    /// # Errors
    /// When the admin client cannot reach the server; the nemesis tries again.
    fn end_sessions(&self) -> Result<(), ServerError>;
}

/// A replicated store whose leader [`KillLeader`] kills.
pub trait Replicated: Sync {
    /// The member leading now, if one answers so.
    fn leader(&self) -> Option<usize>;
    /// Every member.
    fn members(&self) -> Vec<&(dyn FaultControl + Sync)>;
}

/// The leader SIGKILLed (the others elect a new one), restarted when healing.
pub struct KillLeader<'a>(pub &'a dyn Replicated);

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

#[async_trait]
impl Nemesis for Latency<'_> {
    fn name(&self) -> String {
        format!("{:?} latency each way", self.1)
    }
    async fn strike(&self) {
        self.0.delay(self.1, self.1);
    }
    async fn heal(&self) {
        self.0.delay(Duration::ZERO, Duration::ZERO);
    }
}

/// How many times a session kill is tried before the run fails.
const KILL_TRIES: u32 = 5;

#[async_trait]
impl Nemesis for KillSessions<'_> {
    fn name(&self) -> String {
        format!("sessions killed ({})", self.0.how())
    }
    async fn strike(&self) {
        // The admin client connects afresh each time: under a soak's load its connect can time
        // out once, which says nothing about the lock.
        let mut tries = 0;
        while let Err(e) = tokio::task::block_in_place(|| self.0.end_sessions()) {
            tries += 1;
            assert!(tries < KILL_TRIES, "kill the sessions ({tries} tries): {e}");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    async fn heal(&self) {}
}

#[async_trait]
impl Nemesis for KillLeader<'_> {
    fn name(&self) -> String {
        "leader killed".into()
    }
    async fn strike(&self) {
        let r = self.0;
        tokio::task::block_in_place(|| {
            if let Some(i) = r.leader() {
                r.members()[i].kill().expect("kill leader");
            }
        });
    }
    async fn heal(&self) {
        let r = self.0;
        tokio::task::block_in_place(|| {
            for m in r.members().into_iter().filter(|m| !m.is_running()) {
                m.restart().expect("restart member");
            }
        });
    }
}

/// An operator's force-unlock through the fence, as `dlock unlock --force` does it: the key
/// inspected and the hold with the fence shown evicted, over and over from the strike to the
/// heal (one round every `gap`). Takes holds away without notice until each holder's next
/// renewal: only the fence protects then, and every later grant must draw a larger one.
pub struct ForceUnlock {
    backend: Arc<dyn LockBackend>,
    gap: Duration,
    keys: Mutex<Vec<Arc<str>>>,
    evicted: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    task: Mutex<Option<tokio::task::JoinHandle<Vec<String>>>>,
}

impl ForceUnlock {
    /// Evictions through `backend` (a client of its own: the operator's), a round every `gap`.
    pub fn new(backend: Arc<dyn LockBackend>, gap: Duration) -> Self {
        ForceUnlock {
            backend,
            gap,
            keys: Mutex::default(),
            evicted: Arc::default(),
            stop: Arc::default(),
            task: Mutex::default(),
        }
    }

    /// Holds evicted so far.
    pub fn evicted(&self) -> u64 {
        self.evicted.load(Ordering::Relaxed)
    }
}

#[async_trait]
impl Nemesis for ForceUnlock {
    fn name(&self) -> String {
        format!("force-unlock through the fence ({} evicted)", self.evicted())
    }
    fn aim(&self, keys: &[Arc<str>]) {
        *self.keys.lock() = keys.to_vec();
    }
    async fn strike(&self) {
        self.stop.store(false, Ordering::Relaxed);
        let (backend, gap, keys) = (self.backend.clone(), self.gap, self.keys.lock().clone());
        let (stop, evicted) = (self.stop.clone(), self.evicted.clone());
        *self.task.lock() = Some(tokio::spawn(async move {
            let mut refused = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                for key in &keys {
                    let fence = match backend.inspect(key).await {
                        Ok(info) if info.held => info.fence,
                        Ok(_) => None,
                        Err(e) if e.is_temporary() => None,
                        Err(e) => {
                            refused.push(format!("inspect: {e}"));
                            None
                        }
                    };
                    // Inspected, then evicted by that fence: a holder that took the key in
                    // between is left alone, as with `dlock unlock --force`.
                    let Some(fence) = fence else { continue };
                    match backend.evict(key, fence).await {
                        Ok(true) => drop(evicted.fetch_add(1, Ordering::Relaxed)),
                        Ok(false) => {}
                        Err(e) if e.is_temporary() => {}
                        Err(e) => refused.push(format!("evict: {e}")),
                    }
                }
                tokio::time::sleep(gap).await;
            }
            refused
        }));
    }
    async fn heal(&self) {
        self.stop.store(true, Ordering::Relaxed);
        let task = self.task.lock().take();
        if let Some(t) = task {
            let refused = t.await.expect("the force-unlock task");
            // A store that cannot evict is the schedule's mistake, not a finding.
            assert!(refused.is_empty(), "force-unlock refused: {refused:?}");
        }
    }
}

impl std::fmt::Debug for ForceUnlock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.name())
    }
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

debug_by_name!(Pause, KillRestart, Blackhole, Cut, Latency, KillSessions, KillLeader);
