//! Helpers of the test binaries that run `dlock` as a real process against a real Redis
//! (`mod common;` in each; cargo builds only the files directly under `tests/`).

// Each test binary uses its own subset.
#![allow(dead_code)]

use std::path::Path;
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::time::{Duration, Instant};

use lock_etcd_testing::shared_etcd;
use lock_mysql_testing::shared_mariadb;
use lock_postgres_testing::shared_postgres;
use lock_redis_testing::shared_redis;
use lock_zk_testing::shared_zk;
use nix::unistd::Pid;

pub mod words;

/// `LOCK_TEST_REDIS_URL`, else the private redis-server this test process shares.
pub fn redis_url() -> String {
    lock_redis_testing::external_url().unwrap_or_else(|| shared_redis().url())
}

pub fn key(case: &str) -> String {
    lock_testkit::conformance::key(case)
}

/// `dlock <args>`, its output collected.
pub fn dlock(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_dlock")).args(args).stdin(Stdio::null()).output().expect("run dlock")
}

/// `dlock <args> -- flock -n -E 99 $D/mutex sh -c <body>` with `D` = `dir`: the command holds the
/// shared file `$D/mutex` while it runs, and exits 99 when another command holds it.
pub fn spawn_flocked(dir: &Path, args: &[&str], body: &str) -> Child {
    Command::new(env!("CARGO_BIN_EXE_dlock"))
        .args(args)
        .args(["--", "flock", "-n", "-E", "99"])
        .arg(dir.join("mutex"))
        .args(["sh", "-c", body])
        .env("D", dir)
        .stdin(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("spawn dlock {}: {e}", args[0]))
}

pub fn wait_for(what: &str, limit: Duration, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !cond() {
        assert!(Instant::now() < deadline, "{what}: not within {limit:?}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// The pid a command wrote to `$D/pid.<tag>`, once it has.
pub fn pid_of(dir: &Path, tag: &str) -> Option<i32> {
    std::fs::read_to_string(dir.join(format!("pid.{tag}"))).ok()?.trim().parse().ok()
}

pub fn wait_exit(child: &mut Child, limit: Duration) -> ExitStatus {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(s) = child.try_wait().expect("try_wait") {
            return s;
        }
        assert!(Instant::now() < deadline, "dlock did not exit within {limit:?}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

pub fn pid(c: &Child) -> Pid {
    Pid::from_raw(i32::try_from(c.id()).expect("pid"))
}

/// Delete `key`'s lock behind its holder's back, as an operator or a failover would: at once
/// (`appear` zero: the lock must be there already), or once the holder has it, within `appear`.
pub fn delete_lock_behind_the_holder(url: &str, key: &str, appear: Duration) {
    use dlock::lock_redis::{RedisLock, redis};
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("rt");
    rt.block_on(async {
        let lock = RedisLock::from_url(url).await.expect("redis").key_names(key).lock().to_owned();
        let client = redis::Client::open(url).expect("client");
        let mut con = client.get_multiplexed_async_connection().await.expect("admin");
        let deadline = Instant::now() + appear;
        loop {
            let n: i64 = redis::cmd("DEL").arg(&lock).query_async(&mut con).await.expect("DEL");
            if n == 1 {
                break;
            }
            assert!(Instant::now() < deadline, "the lock key {lock} is not there (waited {appear:?})");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    });
}

/// Every store with a server shared by this test process, as (name, URL): Redis, PostgreSQL,
/// MariaDB in `GET_LOCK` mode, ZooKeeper and etcd (their locks under `root`).
pub fn store_urls(root: &str) -> Vec<(&'static str, String)> {
    vec![
        ("redis", redis_url()),
        ("postgres", shared_postgres().url()),
        ("mysql", format!("{}?mode=get_lock", shared_mariadb().url())),
        ("zk", format!("zk://{}/{root}", shared_zk().connect_string())),
        ("etcd", shared_etcd().url(root)),
    ]
}

/// How a test command runs until it is stopped: the shell becomes the `sleep`, which a signal
/// to the group ends (dlock reports SIGTERM as 143). A shell waiting on a background `sleep`
/// could take the signal while forking it; the `sleep` then missed it and kept `dlock`, which
/// waits for every process the command started, for its 30 s.
pub const UNTIL_STOPPED: &str = "exec sleep 30";

/// `dlock run <args> -- sh -c '<body>; exec sleep 30'` with `D` = `dir`: a holder whose command
/// runs `body` once it holds, then sleeps until stopped (143 on SIGTERM).
pub fn spawn_holder(dir: &Path, args: &[&str], body: &str) -> Child {
    Command::new(env!("CARGO_BIN_EXE_dlock"))
        .arg("run")
        .args(args)
        .args(["--", "sh", "-c", &format!("{body}; {UNTIL_STOPPED}")])
        .env("D", dir)
        .stdin(Stdio::null())
        .spawn()
        .expect("spawn dlock run")
}
