//! The history checker (`lock_testkit::history`) on every backend under fault schedules: the
//! server paused past the lease, killed and restarted, the network blackholed and cut by a
//! proxy, a Redlock minority killed, holders crashing. Every run must show no overlapping
//! accepted writes, no lost update and no non-increasing token; its figures are printed.
//!
//! CI runs the short schedules (a few thousand acquisitions each); the soak is
//! `DLOCK_SOAK_ACQUISITIONS=100000 cargo test --release --all-features --test history -- --nocapture --test-threads 1`.

use std::io::Write;
use std::net::SocketAddr;
use std::time::Duration;

use lock_core::{Locker, async_trait};
use lock_mysql_testing::MariaDbServer;
use lock_redis_testing::RedisServer;
use lock_testkit::Factory;
use lock_testkit::history::nemesis::{Blackhole, Cut, KillLeader, KillRestart, KillSessions, Pause};
use lock_testkit::history::{Nemesis, Report, Workload, run};
use lock_testkit::proxy::Proxy;
use lock_testkit::server::{FaultControl, or_skip};
use lock_zk_testing::{ZkEnsemble, ZkServer};
use nix::sys::signal::{Signal, kill};

// Not `tests/processes.rs`: cargo would take that for a test binary of its own.
#[path = "history/processes.rs"]
mod processes;
mod support;

use lock_testkit::side::Revokes;
use processes::{Holder, LEASE, holder_processes};
use support::sides;
use support::url::{UrlFactory, through};
use tokio::time::Instant;

fn workload() -> Workload {
    let w = Workload { crash_every: Some(150), max_time: Duration::from_secs(5), ..Workload::default() }
        .from_env();
    // A soak crashes holders less often: each crash stalls everyone for a lease.
    if soak() { Workload { crash_every: Some(2_000), ..w } } else { w }
}

fn soak() -> bool {
    std::env::var_os("DLOCK_SOAK_ACQUISITIONS").is_some()
}

/// Faults last a bit longer than a lease (300 ms), so holders really lose their locks.
const FAULT: (Duration, Duration) = (Duration::from_millis(1500), Duration::from_millis(900));

fn addr(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

/// Print the figures, and keep them in `target/tmp/history.txt` (`.ci/run` shows that file:
/// the test harness hides the output of passing tests).
fn record(r: &Report) {
    eprintln!("{r}");
    let path = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("history.txt");
    if let Ok(mut f) = std::fs::OpenOptions::new().create(true).append(true).open(path) {
        let _ = writeln!(f, "{r}");
    }
    // Without faults, a crashed holder is replaced within a lease (or session) plus 1 s (the
    // target; typically one lease, 0.3 s). Asserted with room for a loaded 2-core CI machine,
    // where one run saw 2.0 s in fair mode while a soak ran beside it.
    if r.strikes == 0
        && r.max_recovery.is_some_and(|d| d > Duration::from_millis(600) + Duration::from_secs(3))
    {
        panic!("{r}: recovery after a crash far above lease + 1 s");
    }
}

fn report(r: &Report) {
    record(r);
    r.assert_safe();
}

/// For faults in which the server takes holds away at once, without notice: only the fence
/// keeps the resource consistent (see `Report::assert_fenced_safe`).
fn report_fenced(r: &Report) {
    record(r);
    r.assert_fenced_safe();
}

/// Run the workload with no faults, then under each schedule, on clients made by `url_of`
/// (given the proxy's port).
async fn schedules(
    label: &str,
    server: &(dyn FaultControl + Sync),
    port: u16,
    revokes: Revokes,
    url_of: impl Fn(u16) -> String,
) {
    let proxy = Proxy::start(addr(port)).await.expect("proxy");
    let f = UrlFactory { label: label.to_owned(), url: url_of(proxy.port()) };
    let mut w = Workload { fault_period: FAULT, ..workload() };
    if soak() {
        w.acquisitions = w.acquisitions.div_ceil(5); // the soak's total, over the five schedules
    }
    let pick = |instant: bool| if instant { report_fenced } else { report };
    report(&run(&f, &w, None).await);
    report(&run(&f, &w, Some(&Pause(server, FAULT.1))).await);
    report(&run(&f, &w, Some(&Blackhole(&proxy))).await);
    pick(revokes.on_cut)(&run(&f, &w, Some(&Cut(&proxy))).await);
    pick(revokes.on_restart || revokes.on_cut)(&run(&f, &w, Some(&KillRestart(server))).await);
}

/// Every registered store that needs no server (the in-process table, a lock directory):
/// holders crash through the run.
async fn local_stores_history() {
    for store in dlock::stores() {
        let Some(make) = store.local else { continue };
        let local = make().expect("a local store");
        let f = UrlFactory { label: store.name.into(), url: local.url.clone() };
        report(&run(&f, &workload(), None).await);
    }
}

/// The tests: every checked target of every store with a server (`stores::redis/fair`: no
/// faults, then the server paused, the network blackholed and cut, the server killed and
/// restarted; the targets and what each fault revokes come from the stores' testing sides,
/// `StoreSide::checked`), then the schedules of one topology or fault each.
fn main() -> std::process::ExitCode {
    let args = libtest_mimic::Arguments::from_args();
    let mut tests = sides::trials(
        |c| c.history,
        |c, s| Box::pin(schedules(&c.label, &*s.server, s.port, c.revokes, |p| through(&s.url, s.port, p))),
    );
    tests.extend(sides::tests![
        local_stores_history,
        redlock_minority_killed_history,
        redlock_majority_killed_history,
        history_child,
        redis_holder_processes,
        local_stores_killed_holder_process,
        mysql_holder_processes,
        zk_holder_processes,
        zk_ensemble_leader_killed_history,
        mysql_kill_connection_history,
    ]);
    libtest_mimic::run(&args, tests).exit_code()
}

/// Redlock masters killed together (SIGKILL), all restarted (empty) when healing.
struct KillRestartMasters<'a>(Vec<&'a (dyn FaultControl + Sync)>);

#[async_trait]
impl Nemesis for KillRestartMasters<'_> {
    fn name(&self) -> String {
        format!("{} masters killed and restarted", self.0.len())
    }
    async fn strike(&self) {
        for m in &self.0 {
            m.kill().expect("kill");
        }
    }
    async fn heal(&self) {
        let masters = &self.0;
        tokio::task::block_in_place(|| masters.iter().for_each(|m| m.restart().expect("restart")));
    }
}

/// Clients over three Redis masters, whose grants carry fencing tokens (the register checks
/// them: a lower token than one it has seen is refused, a repeated one counted).
async fn redlock_factory(masters: [&RedisServer; 3]) -> UrlFactory {
    let hosts = masters.map(|s| format!("127.0.0.1:{}", s.port())).join(",");
    let f = UrlFactory { label: "redlock/3 masters".into(), url: format!("redlock://{hosts}/?mode=simple") };
    assert!(
        f.client().await.backend.capabilities().fencing,
        "redlock must fence: the checks would be vacuous"
    );
    f
}

/// Redlock over three masters, one of them killed and restarted: a majority stays.
async fn redlock_minority_killed_history() {
    let Some(a) = or_skip("redis", RedisServer::start()) else { return };
    let (b, c) = (RedisServer::start().expect("redis"), RedisServer::start().expect("redis"));
    let f = redlock_factory([&a, &b, &c]).await;
    let w = Workload { fault_period: FAULT, ..workload() };
    report(&run(&f, &w, Some(&KillRestart(&c))).await);
}

/// Redlock over three masters, two of them killed and restarted empty: no quorum during the
/// fault, then a majority that forgot every grant and counter. Their counters restart from the
/// clock, above every earlier token, so the register stays consistent (fenced-safe: a holder
/// told of its loss only at its next renewal may overlap the next one, as Redlock allows).
async fn redlock_majority_killed_history() {
    let Some(a) = or_skip("redis", RedisServer::start()) else { return };
    let (b, c) = (RedisServer::start().expect("redis"), RedisServer::start().expect("redis"));
    let f = redlock_factory([&a, &b, &c]).await;
    let w = Workload { fault_period: FAULT, ..workload() };
    report_fenced(&run(&f, &w, Some(&KillRestartMasters(vec![&b, &c]))).await);
}

// ---------------------------------------------------------------------------------------------
// Holder processes: paused past their lease, and SIGKILLed.

/// Not a check of its own: the body of the holder process that the process schedules spawn
/// (this test binary re-run with only this test); see `processes::child`.
async fn history_child() {
    processes::child().await;
}

async fn redis_holder_processes() {
    let Some(srv) = or_skip("redis", RedisServer::start()) else { return };
    holder_processes("redis/simple", &format!("{}?mode=simple", srv.url()), LEASE + Duration::from_secs(1))
        .await;
}

/// A lock of a registered store without a server, whose holder process is SIGKILLed, is free
/// at once (the kernel closes the process's files). A paused holder keeps it, as `flock(1)`'s
/// would: nothing times out, so the paused half of [`holder_processes`] does not apply. The
/// in-process table is left out: another process never shares it.
async fn local_stores_killed_holder_process() {
    for store in dlock::stores().iter().filter(|d| d.name != "memory") {
        let Some(make) = store.local else { continue };
        let local = make().expect("a local store");
        let key = lock_testkit::conformance::key("process");
        let other = Locker::new(dlock::from_url(&local.url).await.expect("client"));
        let mut h = Holder::spawn(&local.url, &key);
        h.expect("ACQUIRED", Duration::from_secs(20));
        assert!(other.try_lock(&key).await.expect("try").is_none(), "the holder process holds it");
        kill(h.pid(), Signal::SIGKILL).expect("SIGKILL holder");
        let killed = Instant::now();
        let g = other
            .lock(&key)
            .wait(Duration::from_secs(5))
            .acquire()
            .await
            .expect("taken from the killed holder");
        let recovery = killed.elapsed();
        g.release().await.expect("release");
        eprintln!("[{} / holder processes] SIGKILLed holder: lock taken after {recovery:?}", store.name);
        assert!(recovery < Duration::from_secs(1), "{}: recovery {recovery:?}", store.name);
    }
}

async fn mysql_holder_processes() {
    let Some(srv) = or_skip("mariadb", MariaDbServer::start()) else { return };
    let limit = LEASE + Duration::from_secs(1);
    holder_processes("mysql/optimistic", &format!("{}?mode=optimistic", srv.url()), limit).await;
    holder_processes("mysql/pessimistic", &format!("{}?mode=pessimistic", srv.url()), limit).await;
}

async fn zk_holder_processes() {
    let Some(srv) = or_skip("zookeeper", ZkServer::start()) else { return };
    let session = Duration::from_millis(600);
    let url = format!("zk://{}/history?session_timeout_ms={}", srv.connect_string(), session.as_millis());
    holder_processes("zk", &url, session + Duration::from_secs(1)).await;
}

// ---------------------------------------------------------------------------------------------
// Backend-specific faults: a ZooKeeper leader killed in an ensemble, MySQL `KILL CONNECTION`.

async fn zk_ensemble_leader_killed_history() {
    let Some(e) = or_skip("zookeeper ensemble", ZkEnsemble::start()) else { return };
    e.wait_for_quorum(Duration::from_secs(30)).expect("quorum");
    // Sessions outlive a leader election (a few hundred ms here).
    let url = format!("zk://{}/history?session_timeout_ms=4000", e.connect_string());
    let f = UrlFactory { label: "zk/3-node ensemble".into(), url };
    let w =
        Workload { fault_period: (Duration::from_millis(1500), Duration::from_millis(1500)), ..workload() };
    report(&run(&f, &w, Some(&KillLeader(&e))).await);
}

async fn mysql_kill_connection_history() {
    let Some(srv) = or_skip("mariadb", MariaDbServer::start()) else { return };
    for mode in ["pessimistic", "optimistic"] {
        let url = format!("{}?mode={mode}", srv.url());
        let f = UrlFactory { label: format!("mysql/{mode}"), url };
        let w =
            Workload { fault_period: (Duration::from_millis(700), Duration::from_millis(100)), ..workload() };
        report(&run(&f, &w, Some(&KillSessions(&srv))).await);
    }
}
