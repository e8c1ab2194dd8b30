//! The history checker (`lock_testkit::history`) on every backend under fault schedules: the
//! server paused past the lease, killed and restarted, the network blackholed and cut by a
//! proxy, a Redlock minority killed, holders crashing. Every run must show no overlapping
//! accepted writes, no lost update and no non-increasing token; its figures are printed.
//!
//! CI runs the short schedules (a few thousand acquisitions each); the soak is
//! `DLOCK_SOAK_ACQUISITIONS=100000 cargo test --release --all-features --test history -- --nocapture --test-threads 1`.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use lock_core::{LockBackend, async_trait};
use lock_testkit::Factory;
use lock_testkit::history::{Nemesis, Report, Workload, run};
use lock_testkit::proxy::Proxy;
use lock_testkit::server::{FaultControl, MariaDbServer, RedisServer, ZkServer, require_servers};

/// Clients built from a URL (each a separate connection or session).
struct UrlFactory {
    label: String,
    url: String,
}

#[async_trait]
impl Factory for UrlFactory {
    fn label(&self) -> String {
        self.label.clone()
    }
    async fn client(&self) -> Arc<dyn LockBackend> {
        dlock::from_url(&self.url).await.expect("client")
    }
    async fn sever(&self, _holder: &Arc<dyn LockBackend>, _key: &str) -> bool {
        false
    }
}

/// The server process paused (SIGSTOP) for a while: requests hang, connections stay open.
struct Pause<'a>(&'a (dyn FaultControl + Sync), Duration);
/// The server SIGKILLed, restarted when healing.
struct KillRestart<'a>(&'a (dyn FaultControl + Sync));
/// Bytes stop flowing through the proxy (a partition), connections stay open.
struct Blackhole<'a>(&'a Proxy);
/// Every connection through the proxy closed at once.
struct Cut<'a>(&'a Proxy);

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

fn workload() -> Workload {
    Workload { crash_every: Some(150), max_time: Duration::from_secs(5), ..Workload::default() }.from_env()
}

/// Faults last a bit longer than a lease (300 ms), so holders really lose their locks.
const FAULT: (Duration, Duration) = (Duration::from_millis(1500), Duration::from_millis(900));

fn started<T>(r: Result<T, lock_testkit::server::ServerError>, what: &str) -> Option<T> {
    match r {
        Ok(s) => Some(s),
        Err(e) if e.is_missing_binary() && !require_servers() => {
            eprintln!("SKIPPED history/{what}: {e}");
            None
        }
        Err(e) => panic!("{what}: {e}"),
    }
}

fn addr(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

fn report(r: &Report) {
    eprintln!("{r}");
    r.assert_safe();
}

/// Run the workload with no faults, then under each schedule, on clients made by `url_of`
/// (given the proxy's port).
async fn schedules(
    label: &str,
    server: &(dyn FaultControl + Sync),
    port: u16,
    url_of: impl Fn(u16) -> String,
) {
    let proxy = Proxy::start(addr(port)).await.expect("proxy");
    let f = UrlFactory { label: label.to_owned(), url: url_of(proxy.port()) };
    let w = Workload { fault_period: FAULT, ..workload() };
    report(&run(&f, &w, None).await);
    report(&run(&f, &w, Some(&Pause(server, FAULT.1))).await);
    report(&run(&f, &w, Some(&Blackhole(&proxy))).await);
    report(&run(&f, &w, Some(&Cut(&proxy))).await);
    report(&run(&f, &w, Some(&KillRestart(server))).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_history() {
    let f = lock_testkit::MemoryFactory::new();
    report(&run(&f, &workload(), None).await);
}

async fn redis_history(mode: &str) {
    let Some(srv) = started(RedisServer::start(), "redis") else { return };
    let url = move |p: u16| format!("redis://127.0.0.1:{p}/?mode={mode}");
    schedules(&format!("redis/{mode}"), &srv, srv.port(), url).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_simple_history() {
    redis_history("simple").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_fair_history() {
    redis_history("fair").await;
}

async fn mysql_history(mode: &str) {
    let Some(srv) = started(MariaDbServer::start(), "mariadb") else { return };
    let (base, port) = (srv.url(), srv.port());
    let url =
        move |p: u16| format!("{}?mode={mode}", base.replacen(&format!(":{port}/"), &format!(":{p}/"), 1));
    schedules(&format!("mysql/{mode}"), &srv, srv.port(), url).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_pessimistic_history() {
    mysql_history("pessimistic").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_optimistic_history() {
    mysql_history("optimistic").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zk_history() {
    let Some(srv) = started(ZkServer::start(), "zookeeper") else { return };
    // The session (the lease) expires during a 900 ms fault.
    let url = |p: u16| format!("zk://127.0.0.1:{p}/history?session_timeout_ms=600");
    schedules("zk", &srv, srv.port(), url).await;
}

/// Redlock over three masters, one of them killed and restarted: a majority stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock_minority_killed_history() {
    let Some(a) = started(RedisServer::start(), "redis") else { return };
    let (b, c) = (RedisServer::start().expect("redis"), RedisServer::start().expect("redis"));
    let hosts = [&a, &b, &c].map(|s| format!("127.0.0.1:{}", s.port())).join(",");
    let f = UrlFactory { label: "redlock/3 masters".into(), url: format!("redlock://{hosts}/?mode=simple") };
    let w = Workload { fault_period: FAULT, ..workload() };
    report(&run(&f, &w, Some(&KillRestart(&c))).await);
}
