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
use crate::server::{
    EtcdCluster, EtcdServer, FaultControl, MARIADB_USER, MariaDbServer, POSTGRES_USER, PgServer,
    RedisSentinelSet, RedisServer, ServerError, ZkEnsemble,
};

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
pub enum KillSessions<'a> {
    /// `CLIENT KILL TYPE normal` and `TYPE pubsub`.
    Redis(&'a RedisServer),
    /// `KILL CONNECTION` of every connection of the lock user.
    MariaDb(&'a MariaDbServer),
    /// `pg_terminate_backend` of every backend of the lock user.
    Postgres(&'a PgServer),
    /// Every lease revoked (their keys go with them).
    Etcd(&'a EtcdServer),
}

/// Every row of a PostgreSQL table locked by another transaction (`FOR UPDATE`) for a while:
/// a statement that writes one of them (a grant's fence write) waits past its bounds and is
/// cancelled, after the advisory lock was granted.
pub struct RowsLocked<'a> {
    server: &'a PgServer,
    table: &'static str,
    hold: Duration,
    open: lock_core::backend::Mutex<Option<std::process::Child>>,
}

impl<'a> RowsLocked<'a> {
    /// `table`'s rows locked for `hold` at each strike.
    pub fn new(server: &'a PgServer, table: &'static str, hold: Duration) -> Self {
        RowsLocked { server, table, hold, open: Default::default() }
    }
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

/// The Sentinel primary paused until the sentinels promote its replica (at most the given
/// time), resumed when healing, and healed once the sentinels have made it a replica in sync.
pub struct Failover<'a>(pub &'a RedisSentinelSet, pub Duration);

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

impl KillSessions<'_> {
    fn kill(&self) -> Result<(), ServerError> {
        match self {
            KillSessions::Redis(s) => {
                s.command(&["CLIENT", "KILL", "TYPE", "normal"])?;
                s.command(&["CLIENT", "KILL", "TYPE", "pubsub"]).map(drop)
            }
            KillSessions::MariaDb(s) => {
                let ids = s.exec_as_root(&format!(
                    "SELECT id FROM information_schema.processlist WHERE user = '{MARIADB_USER}'"
                ))?;
                for id in ids.split_whitespace() {
                    // a connection may end on its own before its turn: "Unknown thread id"
                    let _ = s.exec_as_root(&format!("KILL CONNECTION {id}"));
                }
                Ok(())
            }
            KillSessions::Postgres(s) => s
                .exec_as_admin(&[&format!(
                    "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE usename = '{POSTGRES_USER}'"
                )])
                .map(drop),
            KillSessions::Etcd(s) => {
                let leases = s.etcdctl(&["lease", "list"])?;
                // "found N leases", then one hexadecimal id per line
                for id in leases.lines().skip(1).map(str::trim).filter(|l| !l.is_empty()) {
                    // a lease may expire or be revoked by its holder before its turn
                    let _ = s.etcdctl(&["lease", "revoke", id]);
                }
                Ok(())
            }
        }
    }
}

#[async_trait]
impl Nemesis for KillSessions<'_> {
    fn name(&self) -> String {
        let how = match self {
            KillSessions::Redis(_) => "CLIENT KILL",
            KillSessions::MariaDb(_) => "KILL CONNECTION",
            KillSessions::Postgres(_) => "pg_terminate_backend",
            KillSessions::Etcd(_) => "leases revoked",
        };
        format!("sessions killed ({how})")
    }
    async fn strike(&self) {
        // The admin client connects afresh each time: under a soak's load its connect can time
        // out once, which says nothing about the lock.
        let mut tries = 0;
        while let Err(e) = tokio::task::block_in_place(|| self.kill()) {
            tries += 1;
            assert!(tries < KILL_TRIES, "kill the sessions ({tries} tries): {e}");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    async fn heal(&self) {}
}

#[async_trait]
impl Nemesis for RowsLocked<'_> {
    fn name(&self) -> String {
        format!("{} rows locked {:?}", self.table, self.hold)
    }
    async fn strike(&self) {
        let tx = format!(
            "BEGIN; SELECT count(*) FROM (SELECT 1 FROM {} FOR UPDATE) r; SELECT pg_sleep({}); COMMIT;",
            self.table,
            self.hold.as_secs_f64()
        );
        let child = self.server.spawn_as_admin(&[&tx]).expect("start the locking transaction");
        *self.open.lock() = Some(child);
    }
    async fn heal(&self) {
        let Some(child) = self.open.lock().take() else { return };
        let out = tokio::task::block_in_place(|| child.wait_with_output()).expect("the locking transaction");
        assert!(
            out.status.success(),
            "the locking transaction failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

impl Replicated for ZkEnsemble {
    fn leader(&self) -> Option<usize> {
        self.leader_index()
    }
    fn members(&self) -> Vec<&(dyn FaultControl + Sync)> {
        self.nodes().iter().map(|n| n as _).collect()
    }
}

impl Replicated for EtcdCluster {
    fn leader(&self) -> Option<usize> {
        self.leader_index()
    }
    fn members(&self) -> Vec<&(dyn FaultControl + Sync)> {
        self.nodes().iter().map(|n| n as _).collect()
    }
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

#[async_trait]
impl Nemesis for Failover<'_> {
    fn name(&self) -> String {
        "primary paused until its replica is promoted".into()
    }
    async fn strike(&self) {
        let Failover(set, limit) = *self;
        tokio::task::block_in_place(|| {
            let old = set.primary().expect("primary");
            set.servers()[old].pause().expect("pause primary");
            set.wait_for_failover(old, limit).expect("promotion");
        });
    }
    async fn heal(&self) {
        let Failover(set, limit) = *self;
        for s in set.servers().iter().filter(|s| s.process().is_paused()) {
            s.resume().expect("resume the old primary");
        }
        // Until the old primary is a replica in sync again, grants that ask for a replica's
        // acknowledgement are refused: the fault lasts until then.
        tokio::task::block_in_place(|| set.wait_for_replica(limit)).expect("the old primary rejoins");
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

debug_by_name!(Pause, KillRestart, Blackhole, Cut, Latency, KillSessions, KillLeader, Failover, RowsLocked);
