//! `--lease` on the stores whose holds live as long as a client session (ZooKeeper's session
//! timeout, etcd's session lease): it sets that session's lease, so a holder that dies frees
//! the lock about one lease later, not after the store's default (6 s and 10 s). It used to be
//! silently ignored there.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use lock_etcd_testing::shared_etcd;
use lock_zk_testing::shared_zk;
use nix::sys::signal::{Signal, kill};

use crate::common;

use common::{key, pid, wait_exit, wait_for};

/// A holder with `lease` is SIGKILLed; how long until a waiter runs.
fn succession_after_a_crash(url: &str, lease: &str) -> Duration {
    let dir = tempfile::tempdir().expect("tmp");
    let k = key("session-lease");
    let mut holder = Command::new(env!("CARGO_BIN_EXE_dlock"))
        .args(["run", "--url", url, "--key", &k, "--lease", lease, "--on-lost", "KILL"])
        .args(["--", "sh", "-c", "touch \"$D/held\"; sleep 60"])
        .env("D", dir.path())
        .stdin(Stdio::null())
        .spawn()
        .expect("spawn holder");
    wait_for("holder runs", Duration::from_secs(20), || dir.path().join("held").exists());
    let mut waiter = Command::new(env!("CARGO_BIN_EXE_dlock"))
        .args(["run", "--url", url, "--key", &k, "--wait", "60s", "--", "true"])
        .stdin(Stdio::null())
        .spawn()
        .expect("spawn waiter");
    kill(pid(&holder), Signal::SIGKILL).expect("SIGKILL holder");
    let crashed = Instant::now();
    let _ = wait_exit(&mut holder, Duration::from_secs(5));
    let s = wait_exit(&mut waiter, Duration::from_secs(60));
    assert_eq!(s.code(), Some(0), "the waiter ran");
    crashed.elapsed()
}

#[test]
fn zookeeper_session_timeout_follows_lease() {
    let url = format!("zk://{}/session-lease", shared_zk().connect_string());
    let took = succession_after_a_crash(&url, "1500ms");
    eprintln!("zk: a waiter ran {took:?} after the holder with --lease 1500ms died (default session 6 s)");
    assert!(took < Duration::from_millis(4500), "the 6 s default session timeout, not --lease: {took:?}");
}

#[test]
fn etcd_session_lease_follows_lease() {
    let url = shared_etcd().url("session-lease");
    let took = succession_after_a_crash(&url, "2s");
    eprintln!("etcd: a waiter ran {took:?} after the holder with --lease 2s died (default lease 10 s)");
    assert!(took < Duration::from_secs(7), "the 10 s default session lease, not --lease: {took:?}");
}
