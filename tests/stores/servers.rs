//! Smoke tests of the real-server kit: every server is started, used with its real client crate,
//! killed (clients must fail), restarted on the same port and data dir, and used again; plus
//! pause/resume, a ZooKeeper ensemble leader kill, and the no-orphans watchdog.
//!
//! A missing server package skips a test unless `LOCK_TEST_REQUIRE=1`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use lock_mysql_testing::MariaDbServer;
use lock_redis_testing::RedisServer;
use lock_testkit::server::{self, FaultControl, ServerError};
use lock_zk_testing::{ZkEnsemble, ZkServer};
use redis::AsyncConnectionConfig;
use redis::aio::MultiplexedConnection;
use sqlx::Connection;
use tokio::task::block_in_place;
use zookeeper_client as zk;

/// Start a server off the runtime's workers, printing how long it took; `None` (skip) when its
/// package is missing and servers are not required.
fn start<S: FaultControl>(what: &str, start: impl FnOnce() -> Result<S, ServerError>) -> Option<S> {
    let t = Instant::now();
    let srv = server::or_skip(what, block_in_place(start))?;
    eprintln!("{what}: started in {:?} (ready probe {:?})", t.elapsed(), srv.process().last_ready_after());
    Some(srv)
}

/// True if the process exists and is not a zombie.
fn pid_alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/status")) {
        Ok(status) => !status.lines().any(|l| l.starts_with("State:") && l.contains('Z')),
        Err(_) => false,
    }
}

/// Polls `cond` until it holds or `timeout` passes; returns whether it held.
fn eventually(timeout: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

// ----------------------------------------------------------------------------------- redis

async fn redis_conn(url: &str, response_timeout: Duration) -> redis::RedisResult<MultiplexedConnection> {
    let client = redis::Client::open(url)?;
    let cfg = AsyncConnectionConfig::new()
        .set_connection_timeout(Some(Duration::from_secs(1)))
        .set_response_timeout(Some(response_timeout));
    client.get_multiplexed_async_connection_with_config(&cfg).await
}

async fn redis_set(con: &mut MultiplexedConnection, k: &str, v: &str) -> redis::RedisResult<()> {
    redis::cmd("SET").arg(k).arg(v).query_async(con).await
}

async fn redis_get(con: &mut MultiplexedConnection, k: &str) -> redis::RedisResult<Option<String>> {
    redis::cmd("GET").arg(k).query_async(con).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_kill_and_restart() {
    let Some(srv) = start("redis-server", RedisServer::start) else { return };
    assert_eq!(srv.url(), format!("redis://127.0.0.1:{}/", srv.port()));

    let mut con = redis_conn(&srv.url(), Duration::from_secs(2)).await.expect("connect");
    redis_set(&mut con, "smoke", "v1").await.expect("SET");
    assert_eq!(redis_get(&mut con, "smoke").await.expect("GET").as_deref(), Some("v1"));

    let old_pid = srv.pid();
    block_in_place(|| srv.kill()).expect("kill");
    assert!(!srv.is_running());
    assert!(!pid_alive(old_pid), "redis pid {old_pid} still alive after kill");
    assert!(redis_get(&mut con, "smoke").await.is_err(), "old connection must fail after kill");
    assert!(redis_conn(&srv.url(), Duration::from_secs(2)).await.is_err(), "connect must fail after kill");

    let t = Instant::now();
    block_in_place(|| srv.restart()).expect("restart");
    eprintln!("redis: restarted in {:?}", t.elapsed());
    assert!(srv.is_running());
    assert_ne!(srv.pid(), old_pid);

    let mut con = redis_conn(&srv.url(), Duration::from_secs(2)).await.expect("reconnect");
    // no persistence: the restarted server is empty
    assert_eq!(redis_get(&mut con, "smoke").await.expect("GET"), None);
    redis_set(&mut con, "smoke", "v2").await.expect("SET");
    assert_eq!(redis_get(&mut con, "smoke").await.expect("GET").as_deref(), Some("v2"));

    // stop (SIGTERM) works as well and frees the port
    block_in_place(|| srv.stop()).expect("stop");
    assert!(!srv.is_running());
    assert!(redis_conn(&srv.url(), Duration::from_secs(2)).await.is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_requirepass_url_carries_password() {
    let Some(srv) = start("redis-server", || RedisServer::start_with(&["--requirepass", "s3cret"])) else {
        return;
    };
    let mut con = redis_conn(&srv.url(), Duration::from_secs(2)).await.expect("connect with password");
    redis_set(&mut con, "k", "v").await.expect("SET");
    let anonymous = format!("redis://127.0.0.1:{}/", srv.port());
    let mut anon = redis_conn(&anonymous, Duration::from_secs(2)).await.expect("connect");
    let err = redis_get(&mut anon, "k").await.expect_err("no auth must fail");
    assert!(err.to_string().contains("NOAUTH"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pause_makes_requests_time_out_and_resume_heals() {
    let Some(srv) = start("redis-server", RedisServer::start) else { return };
    let mut con = redis_conn(&srv.url(), Duration::from_millis(300)).await.expect("connect");
    redis_set(&mut con, "p", "before").await.expect("SET");

    srv.pause().expect("pause");
    assert!(srv.is_running(), "a paused server is still running");
    let t = Instant::now();
    let err = redis_get(&mut con, "p").await.expect_err("a request to a paused server must not succeed");
    assert!(err.is_timeout(), "expected a response timeout, got {err}");
    assert!(t.elapsed() < Duration::from_secs(2), "timed out only after {:?}", t.elapsed());

    srv.resume().expect("resume");
    let deadline = Instant::now() + Duration::from_secs(5);
    let value = loop {
        match redis_get(&mut con, "p").await {
            Ok(v) => break v,
            Err(e) if Instant::now() < deadline => {
                eprintln!("after resume: {e}; retrying");
                // the old multiplexed connection may be unusable; a fresh one must work
                if let Ok(c) = redis_conn(&srv.url(), Duration::from_millis(300)).await {
                    con = c;
                }
            }
            Err(e) => panic!("no answer within 5 s after resume: {e}"),
        }
    };
    assert_eq!(value.as_deref(), Some("before"), "data survives a pause");
}

// --------------------------------------------------------------------------------- mariadb

async fn mysql_connect(url: &str) -> Result<sqlx::MySqlConnection, String> {
    match tokio::time::timeout(Duration::from_secs(5), sqlx::MySqlConnection::connect(url)).await {
        Ok(Ok(c)) => Ok(c),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err("connect timed out".into()),
    }
}

async fn mysql_get(conn: &mut sqlx::MySqlConnection, k: &str) -> Option<String> {
    sqlx::query_scalar("SELECT v FROM smoke WHERE k = ?")
        .bind(k)
        .fetch_optional(&mut *conn)
        .await
        .expect("SELECT")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mariadb_kill_and_restart() {
    let Some(srv) = start("mariadbd", MariaDbServer::start) else { return };
    assert_eq!(srv.url(), format!("mysql://lock:lockpw@127.0.0.1:{}/locktest", srv.port()));

    let mut root = mysql_connect(&srv.root_url()).await.expect("root connect");
    let datadir: String = sqlx::query_scalar("SELECT @@datadir").fetch_one(&mut root).await.expect("datadir");
    assert_eq!(Path::new(&datadir), srv.datadir());
    root.close().await.expect("close");

    let mut conn = mysql_connect(&srv.url()).await.expect("connect as lock");
    sqlx::query("CREATE TABLE smoke (k VARCHAR(32) PRIMARY KEY, v VARCHAR(32)) ENGINE=InnoDB")
        .execute(&mut conn)
        .await
        .expect("CREATE TABLE");
    sqlx::query("INSERT INTO smoke (k, v) VALUES ('a', 'v1')").execute(&mut conn).await.expect("INSERT");
    assert_eq!(mysql_get(&mut conn, "a").await.as_deref(), Some("v1"));

    let old_pid = srv.pid();
    block_in_place(|| srv.kill()).expect("kill");
    assert!(!pid_alive(old_pid), "mariadbd pid {old_pid} still alive after kill");
    assert!(sqlx::query("SELECT 1").execute(&mut conn).await.is_err(), "old connection must fail");
    drop(conn);
    assert!(mysql_connect(&srv.url()).await.is_err(), "connect must fail after kill");

    let t = Instant::now();
    block_in_place(|| srv.restart()).expect("restart");
    eprintln!("mariadb: restarted in {:?}", t.elapsed());
    let mut conn = mysql_connect(&srv.url()).await.expect("reconnect");
    // committed before the SIGKILL: still there (innodb-flush-log-at-trx-commit=2)
    assert_eq!(mysql_get(&mut conn, "a").await.as_deref(), Some("v1"));
    sqlx::query("INSERT INTO smoke (k, v) VALUES ('b', 'v2')").execute(&mut conn).await.expect("INSERT");
    assert_eq!(mysql_get(&mut conn, "b").await.as_deref(), Some("v2"));
    assert_eq!(srv.exec_as_root("SELECT COUNT(*) FROM locktest.smoke").expect("CLI").trim(), "2");
}

// ------------------------------------------------------------------------------- zookeeper

async fn zk_connect(hosts: &str) -> Result<zk::Client, zk::Error> {
    let connect = zk::Client::connector()
        // outlasts an election on a loaded machine (10.8 s seen in CI)
        .with_session_timeout(Duration::from_secs(20))
        .with_connection_timeout(Duration::from_secs(1))
        .with_fail_eagerly()
        .connect(hosts);
    tokio::time::timeout(Duration::from_secs(10), connect).await.unwrap_or(Err(zk::Error::Timeout))
}

fn persistent() -> zk::CreateOptions<'static> {
    zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zk_kill_and_restart() {
    let Some(srv) = start("zookeeper", ZkServer::start) else { return };
    assert_eq!(srv.connect_string(), format!("127.0.0.1:{}", srv.port()));
    assert_eq!(srv.mode().as_deref(), Some("standalone"));
    let mntr = block_in_place(|| srv.four_letter("mntr")).expect("mntr");
    assert!(mntr.contains("zk_server_state\tstandalone"), "{mntr}");

    let client = zk_connect(&srv.connect_string()).await.expect("connect");
    client.create("/smoke", b"v1", &persistent()).await.expect("create");
    assert_eq!(client.get_data("/smoke").await.expect("get").0, b"v1");
    let wchc = block_in_place(|| srv.four_letter("wchc")).expect("wchc");
    assert!(!wchc.contains("not in the whitelist"), "{wchc}");
    drop(client);

    let old_pid = srv.pid();
    block_in_place(|| srv.kill()).expect("kill");
    assert!(!pid_alive(old_pid), "zookeeper pid {old_pid} still alive after kill");
    assert!(zk_connect(&srv.connect_string()).await.is_err(), "connect must fail after kill");

    let t = Instant::now();
    block_in_place(|| srv.restart()).expect("restart");
    eprintln!("zk: restarted in {:?}", t.elapsed());
    let client = zk_connect(&srv.connect_string()).await.expect("reconnect");
    // znodes are persisted in the data dir
    assert_eq!(client.get_data("/smoke").await.expect("get").0, b"v1");
    client.set_data("/smoke", b"v2", None).await.expect("set");
    assert_eq!(client.get_data("/smoke").await.expect("get").0, b"v2");
}

/// Retries `op` (on a client that must fail over) until it succeeds or `timeout` passes.
async fn zk_retry<T, F, Fut>(timeout: Duration, mut op: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, zk::Error>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        match op().await {
            Ok(v) => return v,
            Err(e) if Instant::now() < deadline => {
                eprintln!("zk op failed during failover ({e}); retrying");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => panic!("zk op still failing after {timeout:?}: {e}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zk_ensemble_survives_leader_kill() {
    let t = Instant::now();
    let Some(ens) = server::or_skip("zookeeper", block_in_place(ZkEnsemble::start)) else { return };
    eprintln!("zk ensemble: 3 nodes serving after {:?}", t.elapsed());
    assert_eq!(ens.len(), 3);
    let leader = block_in_place(|| ens.wait_for_quorum(Duration::from_secs(10))).expect("quorum");
    assert_eq!(ens.leader_index(), Some(leader));
    let modes: Vec<_> = ens.nodes().iter().map(|n| n.mode()).collect();
    assert_eq!(modes.iter().filter(|m| m.as_deref() == Some("follower")).count(), 2, "{modes:?}");

    let client = zk_connect(&ens.connect_string()).await.expect("connect");
    client.create("/ens", b"v1", &persistent()).await.expect("create");

    let t = Instant::now();
    block_in_place(|| ens.node(leader).kill()).expect("kill leader");
    assert!(!ens.node(leader).is_running());
    let new_leader = block_in_place(|| ens.wait_for_quorum(Duration::from_secs(30))).expect("new quorum");
    eprintln!("zk ensemble: new leader {new_leader} after {:?}", t.elapsed());
    assert_ne!(new_leader, leader);

    // the same client (same session) keeps working on the surviving nodes
    zk_retry(Duration::from_secs(20), || client.set_data("/ens", b"v2", None)).await;
    assert_eq!(client.get_data("/ens").await.expect("get").0, b"v2");

    let t = Instant::now();
    block_in_place(|| ens.node(leader).restart()).expect("restart old leader");
    eprintln!("zk ensemble: old leader rejoined after {:?}", t.elapsed());
    assert_eq!(ens.node(leader).mode().as_deref(), Some("follower"));

    // the rejoined node has caught up with the write made while it was down
    let only_old =
        zk_connect(&ens.node(leader).connect_string()).await.expect("connect to the restarted node");
    only_old.sync("/ens").await.expect("sync");
    assert_eq!(only_old.get_data("/ens").await.expect("get").0, b"v2");
}

// ----------------------------------------------------------------------------- no orphans

const HELPER_ENV: &str = "LKTK_ORPHAN_HELPER";

/// Not a test by itself: run by `watchdog_kills_servers_of_a_dead_test_process` in a child
/// process, it starts servers and exits without running any destructor.
#[test]
#[ignore = "helper process for watchdog_kills_servers_of_a_dead_test_process"]
fn orphan_helper() {
    if std::env::var_os(HELPER_ENV).is_none() {
        return;
    }
    let shared = lock_redis_testing::shared_redis(); // in a static: never dropped
    let own = RedisServer::start().expect("redis");
    let maria = MariaDbServer::start().expect("mariadb");
    println!("LKTK_SERVER {} {}", shared.pid(), shared.process().dir().display());
    println!("LKTK_SERVER {} {}", own.pid(), own.process().dir().display());
    println!("LKTK_SERVER {} {}", maria.pid(), maria.process().dir().display());
    if let Some(tpl) = lock_mysql_testing::mariadb_template_dir() {
        println!("LKTK_DIR {}", tpl.display());
    }
    // exit(0) skips every destructor, like a test process that is killed
    std::process::exit(0);
}

#[test]
fn watchdog_kills_servers_of_a_dead_test_process() {
    if !server::is_installed("redis-server") || !server::is_installed("mariadbd") {
        assert!(!server::require_servers(), "redis-server / mariadbd not installed");
        eprintln!("SKIPPED: redis-server or mariadbd not installed");
        return;
    }
    let exe = std::env::current_exe().expect("current exe");
    let out = Command::new(exe)
        .args(["servers::orphan_helper", "--exact", "--ignored", "--nocapture", "--test-threads=1"])
        .env(HELPER_ENV, "1")
        .output()
        .expect("run helper");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "helper failed: {stdout}\n{}", String::from_utf8_lossy(&out.stderr));

    let mut servers = Vec::new();
    let mut dirs = Vec::new();
    for line in stdout.lines() {
        // the first marker shares its line with libtest's "test orphan_helper ... "
        let Some(at) = line.find("LKTK_") else { continue };
        let mut parts = line[at..].split_whitespace();
        match parts.next() {
            Some("LKTK_SERVER") => {
                let pid: u32 = parts.next().and_then(|p| p.parse().ok()).expect("pid");
                let dir = PathBuf::from(parts.next().expect("dir"));
                servers.push(pid);
                dirs.push(dir);
            }
            Some("LKTK_DIR") => dirs.push(PathBuf::from(parts.next().expect("dir"))),
            _ => {}
        }
    }
    assert_eq!(servers.len(), 3, "helper output: {stdout}");
    assert_eq!(dirs.len(), 4, "helper output: {stdout}");
    for pid in &servers {
        assert!(
            eventually(Duration::from_secs(10), || !pid_alive(*pid)),
            "server pid {pid} outlived its test process"
        );
    }
    for dir in &dirs {
        assert!(eventually(Duration::from_secs(10), || !dir.exists()), "{} not removed", dir.display());
    }
}
