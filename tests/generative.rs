//! The generative history checker (`lock_testkit::history::generative`) on every backend and
//! mode: random mixes of waits, single attempts, nested acquisitions (through the same and
//! another client), renewals, releases, dropped guards and cut-off futures, under a fault per
//! seed (none, the server paused past the lease, the network blackholed, every connection
//! cut, the server killed and restarted, latency added, the sessions killed by the server);
//! leader failover on the replicated topologies; an operator's force-unlock through the fence
//! on the in-process table, Redis and PostgreSQL. Every run checks that no fence is handed out
//! twice for a key and that fences grow in real-time order, whatever the fault. Each run prints its seed and figures (kept
//! in `target/tmp/generative.txt`, which `.ci/run` prints).
//!
//! CI runs a fixed set of seeds (one per fault); `DLOCK_HISTORY_SEED=<seed>` reruns one (its
//! fault and its operations), and the soak is `DLOCK_SOAK_OPERATIONS=1000000 cargo test
//! --release --all-features --test generative -- --nocapture --test-threads 1` (that many
//! operations per backend and mode, over every fault, on `DLOCK_SOAK_LANES` keys at once (8
//! unless given), random seeds unless one is given).

use std::io::Write as _;
use std::net::SocketAddr;
use std::time::Duration;

use lock_core::async_trait;
use lock_testkit::Factory;
use lock_testkit::history::Nemesis;
use lock_testkit::history::generative::{GenReport, Mix, Primitive, run, run_primitive, seed};
use lock_testkit::history::nemesis::{
    Blackhole, Cut, Failover, ForceUnlock, KillLeader, KillRestart, KillSessions, Latency, Pause, RowsLocked,
};
use lock_testkit::proxy::Proxy;
use lock_testkit::server::{
    EtcdCluster, EtcdServer, FaultControl, MariaDbServer, PgServer, RedisCluster, RedisSentinelSet,
    RedisServer, ZkEnsemble, ZkServer, or_skip,
};

mod support;

use support::url::{UrlFactory, through};

/// The faults, in the order a seed picks them (`seed % 7`).
const FAULTS: [&str; 7] = ["none", "pause", "blackhole", "cut", "kill", "latency", "session"];
/// CI's seeds: one per fault.
const CI_SEEDS: [u64; 7] = [5_000, 5_001, 5_002, 5_003, 5_004, 5_005, 5_006];
/// The latency fault: a third of the mix's lease each way, so a renewal's round trip eats most
/// of the lease's safety margin.
const LATENCY: Duration = Duration::from_millis(50);

/// Which faults make the server drop holds at once, without notice to the holder.
#[derive(Clone, Copy)]
struct Revokes {
    on_cut: bool,
    on_restart: bool,
    on_session_kill: bool,
}

/// The mix of one run; in a soak, `DLOCK_SOAK_OPERATIONS` is the total per backend and mode,
/// spread over the five faults.
fn mix() -> Mix {
    let m = Mix { max_time: Duration::from_secs(3), operations: 1_500, ..Mix::default() }.from_env();
    if std::env::var_os("DLOCK_SOAK_OPERATIONS").is_some() {
        Mix { operations: m.operations.div_ceil(FAULTS.len() as u64), ..m }
    } else {
        m
    }
}

/// Whether `seed` picks a fault (schedules with one fault of their own strike it then).
fn faulted(seed: u64) -> bool {
    FAULTS[(seed % FAULTS.len() as u64) as usize] != "none"
}

/// The seeds to run: the one given, random ones in a soak, else CI's.
fn seeds() -> Vec<u64> {
    if std::env::var_os("DLOCK_HISTORY_SEED").is_some() {
        return vec![seed()];
    }
    if std::env::var_os("DLOCK_SOAK_OPERATIONS").is_some() {
        let n = FAULTS.len() as u64;
        return (0..n).map(|i| seed() / n * n + i).collect();
    }
    CI_SEEDS.to_vec()
}

fn record(r: &GenReport) {
    eprintln!("{r}");
    record_line(&r.to_string());
}

fn record_line(line: &str) {
    let path = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("generative.txt");
    if let Ok(mut f) = std::fs::OpenOptions::new().create(true).append(true).open(path) {
        let _ = writeln!(f, "{line}");
    }
}

/// Runs every seed on clients made by `url_of` (given the proxy's port), each under the fault
/// its seed picks; `session` ends the clients' sessions from the server (`None`: the store
/// has no such command, and the network is blackholed instead).
async fn generative(
    label: &str,
    server: &(dyn FaultControl + Sync),
    port: u16,
    revokes: Revokes,
    session: Option<KillSessions<'_>>,
    url_of: impl Fn(u16) -> String,
) {
    let proxy = Proxy::start(SocketAddr::from(([127, 0, 0, 1], port))).await.expect("proxy");
    let f = UrlFactory { label: label.to_owned(), url: url_of(proxy.port()) };
    let m = mix();
    for seed in seeds() {
        let pause = Pause(server, m.fault_period.1);
        let (blackhole, cut, kill) = (Blackhole(&proxy), Cut(&proxy), KillRestart(server));
        let latency = Latency(&proxy, LATENCY);
        let (nemesis, revoked): (Option<&dyn Nemesis>, bool) =
            match FAULTS[(seed % FAULTS.len() as u64) as usize] {
                "none" => (None, false),
                "pause" => (Some(&pause), false),
                "blackhole" => (Some(&blackhole), false),
                "cut" => (Some(&cut), revokes.on_cut),
                "kill" => (Some(&kill), revokes.on_restart || revokes.on_cut),
                "latency" => (Some(&latency), false),
                _ => match &session {
                    Some(s) => (Some(s), revokes.on_session_kill),
                    None => (Some(&blackhole), false),
                },
            };
        let r = run(&f, &m, nemesis, seed).await;
        record(&r);
        r.assert_ok(revoked);
    }
    primitives(&f, &proxy).await;
}

/// The semaphore (3 permits) and read-write lock (4 reader slots, unless native) schedules, without faults
/// and with the network blackholed (CI's two seeds, or the seed given).
async fn primitives(f: &UrlFactory, proxy: &Proxy) {
    let m = Mix { max_time: Duration::from_secs(2), ..mix() };
    let seeds = if std::env::var_os("DLOCK_HISTORY_SEED").is_some() { seeds() } else { vec![5_005, 5_000] };
    for seed in seeds {
        let blackhole = Blackhole(proxy);
        let nemesis: Option<&dyn Nemesis> = faulted(seed).then_some(&blackhole);
        for (p, limit) in [(Primitive::Semaphore, 3), (Primitive::RwLock, 4)] {
            let r = run_primitive(f, p, &m, nemesis, seed).await;
            eprintln!("{r}");
            record_line(&r.to_string());
            r.assert_ok(limit);
        }
    }
}

/// Every registered store that needs no server (the in-process table, a lock directory):
/// every seed's operations, without faults (no server to fault; a store's own faults, such as
/// lock files removed, are its crate's tests).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_stores_generative() {
    for store in dlock::stores() {
        let Some(make) = store.local else { continue };
        let local = make().expect("a local store");
        let f = UrlFactory { label: store.name.into(), url: local.url.clone() };
        for seed in seeds() {
            let r = run(&f, &mix(), None, seed).await;
            record(&r);
            r.assert_ok(false);
        }
    }
}

/// The semaphore and read-write lock schedules on every registered server-less store, without
/// faults: one seed (CI's, or the one given).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_stores_primitives_generative() {
    let m = Mix { max_time: Duration::from_secs(2), ..mix() };
    let seed = if std::env::var_os("DLOCK_HISTORY_SEED").is_some() { seed() } else { 5_000 };
    for store in dlock::stores() {
        let Some(make) = store.local else { continue };
        let local = make().expect("a local store");
        let f = UrlFactory { label: store.name.into(), url: local.url.clone() };
        for (p, limit) in [(Primitive::Semaphore, 3), (Primitive::RwLock, 4)] {
            let r = run_primitive(&f, p, &m, None, seed).await;
            eprintln!("{r}");
            record_line(&r.to_string());
            r.assert_ok(limit);
        }
    }
}

/// An operator's force-unlock through the fence (`dlock unlock --force`: inspect, then evict
/// the hold with the fence shown) every 5 ms for 700 ms after each 300 ms of quiet: holds are
/// taken away without notice (only the fence protects), and every grant's fence must still be
/// new and larger than those granted before. CI's seed, or the seed given.
async fn force_unlock(f: &UrlFactory) {
    let operator = ForceUnlock::new(f.client().await.backend, Duration::from_millis(5));
    let m = Mix { fault_period: (Duration::from_millis(300), Duration::from_millis(700)), ..mix() };
    let seeds = if std::env::var_os("DLOCK_HISTORY_SEED").is_some() { seeds() } else { vec![5_046] };
    for seed in seeds {
        let before = operator.evicted();
        let r = run(f, &m, Some(&operator), seed).await;
        record(&r);
        assert!(operator.evicted() > before, "{r}: the operator evicted no hold");
        r.assert_ok(true);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_force_unlock_generative() {
    let store = dlock::stores().iter().find(|s| s.name == "memory").expect("the memory store");
    let local = (store.local.expect("memory is local"))().expect("a memory store");
    force_unlock(&UrlFactory { label: "memory".into(), url: local.url.clone() }).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_force_unlock_generative() {
    let Some(srv) = or_skip("redis", RedisServer::start()) else { return };
    let url = format!("redis://127.0.0.1:{}/?mode=fair", srv.port());
    force_unlock(&UrlFactory { label: "redis/fair".into(), url }).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_force_unlock_generative() {
    let Some(srv) = or_skip("postgres", PgServer::start()) else { return };
    force_unlock(&UrlFactory { label: "postgres".into(), url: srv.url() }).await;
}

async fn redis(mode: &str) {
    let Some(srv) = or_skip("redis", RedisServer::start()) else { return };
    let url = move |p: u16| format!("redis://127.0.0.1:{p}/?mode={mode}");
    // Holds are leases, not sessions: killing the connections only drops requests in flight.
    let revokes = Revokes { on_cut: false, on_restart: true, on_session_kill: false };
    let session = KillSessions::Redis(&srv);
    generative(&format!("redis/{mode}"), &srv, srv.port(), revokes, Some(session), url).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_simple_generative() {
    redis("simple").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_reentrant_generative() {
    redis("reentrant").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_fair_generative() {
    redis("fair").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_py_interop_generative() {
    redis("redis-py").await;
}

async fn mysql(mode: &str) {
    let Some(srv) = or_skip("mariadb", MariaDbServer::start()) else { return };
    let (base, port) = (srv.url(), srv.port());
    let url = move |p: u16| format!("{}?mode={mode}", through(&base, port, p));
    let held_by_session = mode != "optimistic";
    let revokes = Revokes { on_cut: held_by_session, on_restart: false, on_session_kill: held_by_session };
    let session = KillSessions::MariaDb(&srv);
    generative(&format!("mysql/{mode}"), &srv, port, revokes, Some(session), url).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_pessimistic_generative() {
    mysql("pessimistic").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_optimistic_generative() {
    mysql("optimistic").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_get_lock_generative() {
    mysql("get_lock").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_generative() {
    let Some(srv) = or_skip("postgres", PgServer::start()) else { return };
    let (base, port) = (srv.url(), srv.port());
    let url = move |p: u16| through(&base, port, p);
    let revokes = Revokes { on_cut: true, on_restart: false, on_session_kill: true };
    let session = KillSessions::Postgres(&srv);
    generative("postgres", &srv, port, revokes, Some(session), url).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zk_generative() {
    let Some(srv) = or_skip("zookeeper", ZkServer::start()) else { return };
    let url = |p: u16| format!("zk://127.0.0.1:{p}/generative?session_timeout_ms=600");
    // No command ends a session from the server side: the blackhole outlasts the session
    // timeout (700 ms against 600 ms), so the sessions expire under it.
    let revokes = Revokes { on_cut: false, on_restart: false, on_session_kill: false };
    generative("zk", &srv, srv.port(), revokes, None, url).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_generative() {
    let Some(srv) = or_skip("etcd", EtcdServer::start()) else { return };
    let url = |p: u16| format!("etcd://127.0.0.1:{p}/generative?lease_ttl=1s");
    // A revoked lease deletes its keys at once; the holder hears of it at its next keep-alive.
    let revokes = Revokes { on_cut: false, on_restart: false, on_session_kill: true };
    let session = KillSessions::Etcd(&srv);
    generative("etcd", &srv, srv.port(), revokes, Some(session), url).await;
}

/// PostgreSQL with every fence row locked by another transaction 700 ms at a time: grants
/// whose fence write waits past the wait's deadline or a cut-off, after the advisory lock was
/// granted. Nothing may stay locked on a pooled connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_fence_rows_locked_generative() {
    let Some(srv) = or_skip("postgres", PgServer::start()) else { return };
    let f = UrlFactory { label: "postgres".into(), url: srv.url() };
    let m = Mix { max_time: Duration::from_secs(6), ..mix() };
    let seeds = if std::env::var_os("DLOCK_HISTORY_SEED").is_some() { seeds() } else { vec![5_013, 5_020] };
    let nemesis = RowsLocked::new(&srv, "dlock_fence", m.fault_period.1);
    for seed in seeds {
        let r = run(&f, &m, Some(&nemesis), seed).await;
        record(&r);
        r.assert_ok(false);
    }
}

/// Topologies without a proxy in front (several servers): two seeds of CI's, one without faults
/// and under `fault`; `revokes`: the fault takes holds away without notice.
async fn without_proxy(f: &UrlFactory, fault: &dyn Nemesis, revokes: bool) {
    without_proxy_mix(f, &mix(), fault, revokes).await;
}

/// [`without_proxy`] with a mix of its own.
async fn without_proxy_mix(f: &UrlFactory, m: &Mix, fault: &dyn Nemesis, revokes: bool) {
    let seeds = if std::env::var_os("DLOCK_HISTORY_SEED").is_some() { seeds() } else { vec![5_005, 5_006] };
    for seed in seeds {
        let nemesis = faulted(seed).then_some(fault);
        let r = run(f, m, nemesis, seed).await;
        record(&r);
        r.assert_ok(revokes && nemesis.is_some());
    }
}

/// Several servers paused and resumed together.
struct PauseAll<'a>(Vec<&'a (dyn FaultControl + Sync)>, Duration);

#[async_trait]
impl Nemesis for PauseAll<'_> {
    fn name(&self) -> String {
        format!("{} servers paused {:?}", self.0.len(), self.1)
    }
    async fn strike(&self) {
        self.0.iter().for_each(|s| s.pause().expect("pause"));
    }
    async fn heal(&self) {
        self.0.iter().for_each(|s| s.resume().expect("resume"));
    }
}

/// Redis Cluster (3 masters), reentrant: every master paused past the lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_cluster_generative() {
    let Some(cluster) = or_skip("redis cluster", RedisCluster::start(3, 0)) else { return };
    let f = UrlFactory {
        label: "redis-cluster/reentrant".into(),
        url: format!("{}?mode=reentrant", cluster.url()),
    };
    let nodes: Vec<&(dyn FaultControl + Sync)> = cluster.nodes().iter().map(|n| n as _).collect();
    without_proxy(&f, &PauseAll(nodes, mix().fault_period.1), false).await;
}

/// Redis through Sentinel (a primary and a replica), fair mode: the primary paused past the
/// lease (shorter than the sentinels' failover).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_sentinel_generative() {
    let Some(set) = or_skip("redis sentinel", RedisSentinelSet::start()) else { return };
    let primary = &set.servers()[set.primary().expect("primary")];
    let f = UrlFactory { label: "redis-sentinel/fair".into(), url: format!("{}?mode=fair", set.url()) };
    without_proxy(&f, &Pause(primary, mix().fault_period.1), false).await;
}

/// Redlock over three masters: one of them killed and restarted empty. A hold granted by a
/// bare majority that included it is then held by one master only: lost without notice until
/// the next renewal or the release (Redlock's documented limit without delayed restarts), so
/// only the fence protects the resource.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock_generative() {
    let Some(a) = or_skip("redis", RedisServer::start()) else { return };
    let (b, c) = (RedisServer::start().expect("redis"), RedisServer::start().expect("redis"));
    let hosts = [&a, &b, &c].map(|s| format!("127.0.0.1:{}", s.port())).join(",");
    let f = UrlFactory { label: "redlock/3 masters".into(), url: format!("redlock://{hosts}/?mode=simple") };
    without_proxy(&f, &KillRestart(&c), true).await;
}

/// Redis through Sentinel, fair mode, each grant acknowledged by the replica: the primary
/// paused until the sentinels promote the replica. Renewals and releases are not acknowledged,
/// so the promoted replica may expire a hold sooner than its holder believes (only the fence
/// protects then), but no grant and no fence is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_sentinel_failover_generative() {
    let Some(set) = or_skip("redis sentinel", RedisSentinelSet::start()) else { return };
    let f = UrlFactory {
        label: "redis-sentinel/fair, replica_ack=1".into(),
        url: format!("{}?mode=fair&replica_ack=1&replica_ack_timeout=500ms", set.url()),
    };
    let m = Mix { max_time: Duration::from_secs(6), ..mix() };
    without_proxy_mix(&f, &m, &Failover(&set, Duration::from_secs(20)), true).await;
}

/// ZooKeeper, a 3-node ensemble: the leader killed, restarted when healing. Sessions outlive
/// the election, so no hold is taken away.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zk_ensemble_failover_generative() {
    let Some(e) = or_skip("zookeeper ensemble", ZkEnsemble::start()) else { return };
    e.wait_for_quorum(Duration::from_secs(30)).expect("quorum");
    let url = format!("zk://{}/generative?session_timeout_ms=4000", e.connect_string());
    let f = UrlFactory { label: "zk/3-node ensemble".into(), url };
    let m = Mix { max_time: Duration::from_secs(5), ..mix() };
    without_proxy_mix(&f, &m, &KillLeader(&e), false).await;
}

/// etcd, a 3-member cluster: the leader killed, restarted when healing. The new leader
/// extends every lease, so no hold is taken away.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_cluster_failover_generative() {
    let Some(c) = or_skip("etcd cluster", EtcdCluster::start()) else { return };
    let f = UrlFactory {
        label: "etcd/3-member cluster".into(),
        url: format!("{}?lease_ttl=2s", c.url("generative")),
    };
    let m = Mix { max_time: Duration::from_secs(5), ..mix() };
    without_proxy_mix(&f, &m, &KillLeader(&c), false).await;
}
