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
//! `simulated_generative` runs the mix on a paused clock against the in-process table with
//! simulated faults (`lock_testkit::history::sim`, `docs/PROOF.md`).
//!
//! CI runs a fixed set of seeds (one per fault); `DLOCK_HISTORY_SEED=<seed>` reruns one (its
//! fault and its operations), and the soak is `DLOCK_SOAK_OPERATIONS=1000000 cargo test
//! --release --all-features --test generative -- --nocapture --test-threads 1` (that many
//! operations per backend and mode, over every fault, on `DLOCK_SOAK_LANES` keys at once (8
//! unless given), random seeds unless one is given).

use std::time::Duration;

use lock_etcd_testing::EtcdCluster;
use lock_postgres_testing::PgServer;
use lock_postgres_testing::RowsLocked;
use lock_redis_testing::Failover;
use lock_redis_testing::{RedisCluster, RedisSentinelSet, RedisServer};
use lock_testkit::history::generative::{Mix, Primitive, run, run_primitive, seed};
use lock_testkit::history::nemesis::{KillLeader, KillRestart, KillSessions, Pause};
use lock_testkit::history::sim::{sim_seed, simulate, simulate_primitive};
use lock_testkit::server::{FaultControl, or_skip};
use lock_zk_testing::ZkEnsemble;

// Not `tests/runs.rs`: cargo would take that for a test binary of its own.
#[path = "generative/runs.rs"]
mod runs;
mod support;

use runs::{
    PauseAll, force_unlock, generative, mix, record, record_line, seeds, without_proxy, without_proxy_mix,
};
use support::sides;
use support::url::{UrlFactory, through};

/// Every registered store that needs no server (the in-process table, a lock directory):
/// every seed's operations, without faults (no server to fault; a store's own faults, such as
/// lock files removed, are its crate's tests).
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

async fn memory_force_unlock_generative() {
    let store = dlock::stores().iter().find(|s| s.name == "memory").expect("the memory store");
    let local = (store.local.expect("memory is local"))().expect("a memory store");
    force_unlock(&UrlFactory { label: "memory".into(), url: local.url.clone() }).await;
}

async fn redis_force_unlock_generative() {
    let Some(srv) = or_skip("redis", RedisServer::start()) else { return };
    let url = format!("redis://127.0.0.1:{}/?mode=fair", srv.port());
    force_unlock(&UrlFactory { label: "redis/fair".into(), url }).await;
}

async fn postgres_force_unlock_generative() {
    let Some(srv) = or_skip("postgres", PgServer::start()) else { return };
    force_unlock(&UrlFactory { label: "postgres".into(), url: srv.url() }).await;
}

/// The tests: every checked target of every store with a server (`stores::mysql/get_lock`:
/// every seed under the fault it picks, then the primitives' schedules; the targets, what each
/// fault revokes and how the server ends sessions come from the stores' testing sides,
/// `StoreSide::checked`), then the schedules of one topology or fault each.
fn main() -> std::process::ExitCode {
    let args = libtest_mimic::Arguments::from_args();
    let mut tests = sides::trials(
        |c| c.generative,
        |c, s| {
            let session = s.server.sessions().map(KillSessions);
            Box::pin(generative(&c.label, &*s.server, s.port, c.revokes, session, |p| {
                through(&s.url, s.port, p)
            }))
        },
    );
    tests.extend(sides::tests![
        local_stores_generative,
        local_stores_primitives_generative,
        memory_force_unlock_generative,
        redis_force_unlock_generative,
        postgres_force_unlock_generative,
        postgres_fence_rows_locked_generative,
        redis_cluster_generative,
        redis_sentinel_generative,
        redlock_generative,
        redis_sentinel_failover_generative,
        zk_ensemble_failover_generative,
        etcd_cluster_failover_generative,
    ]);
    // Not through `tests!`: the simulation runs on a runtime of its own, with a paused clock.
    tests.push(libtest_mimic::Trial::test("simulated_generative", || {
        simulated_generative();
        Ok(())
    }));
    libtest_mimic::run(&args, tests).exit_code()
}

/// The client logic simulated (`lock_testkit::history::sim`): the mix against the in-process
/// table, every client behind the fault wrapper, on a paused clock. CI runs fixed seeds;
/// `DLOCK_SIM_SEED=<seed>` runs one, `DLOCK_SIM_OPERATIONS` sets the operations per seed.
fn simulated_generative() {
    let operations =
        std::env::var("DLOCK_SIM_OPERATIONS").ok().and_then(|v| v.parse().ok()).unwrap_or(20_000);
    let m = Mix { operations, max_time: Duration::from_secs(24 * 3600), ..mix() };
    let seeds = if std::env::var_os("DLOCK_SIM_SEED").is_some() {
        vec![sim_seed()]
    } else {
        vec![7_001, 7_002, 7_003]
    };
    let (first, _) = simulate(&m, seeds[0]);
    for &seed in &seeds {
        let (r, took) = simulate(&m, seed);
        if seed == seeds[0] {
            assert_eq!(r.to_string(), first.to_string(), "seed {seed} ran twice, two histories");
        }
        record(&r);
        let rate = r.operations as f64 / took.as_secs_f64();
        record_line(&format!(
            "[simulated seed={seed}] {} operations in {took:.2?} real time: {rate:.0} per second",
            r.operations
        ));
        r.assert_ok(false);
    }
    let m = Mix { operations: operations / 4, ..m };
    for (p, limit) in [(Primitive::Semaphore, 3), (Primitive::RwLock, 4)] {
        let (first, _) = simulate_primitive(p, &m, seeds[0]);
        let (r, took) = simulate_primitive(p, &m, seeds[0]);
        assert_eq!(r.to_string(), first.to_string(), "{p:?} seed {} ran twice, two histories", seeds[0]);
        record_line(&format!("{r} (simulated, {took:.2?} real time)"));
        r.assert_ok(limit);
    }
}

/// PostgreSQL with every fence row locked by another transaction 700 ms at a time: grants
/// whose fence write waits past the wait's deadline or a cut-off, after the advisory lock was
/// granted. Nothing may stay locked on a pooled connection.
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

/// Redis Cluster (3 masters), reentrant: every master paused past the lease.
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
async fn etcd_cluster_failover_generative() {
    let Some(c) = or_skip("etcd cluster", EtcdCluster::start()) else { return };
    let f = UrlFactory {
        label: "etcd/3-member cluster".into(),
        url: format!("{}?lease_ttl=2s", c.url("generative")),
    };
    let m = Mix { max_time: Duration::from_secs(5), ..mix() };
    without_proxy_mix(&f, &m, &KillLeader(&c), false).await;
}
