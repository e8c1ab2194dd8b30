//! `dlock` and `etcdctl lock` on the same name exclude each other both ways, and `dlock status`
//! shows an `etcdctl` holder: both take etcd's own `concurrency.Mutex` layout (a key per
//! attempt under `<prefix>/<name>/`, the lowest create revision holds), so `etcdctl lock
//! /locks/job` and `dlock run --url etcd://host/locks --key job` are one lock.
//!
//! Every holder here waits for a file the test creates (`$D/go`), so "still holding" is a
//! state the test controls.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use lock_etcd_testing::shared_etcd;

use crate::common;

use common::{dlock, key, wait_exit, wait_for};

const HOLD: &str = "touch \"$D/held\"; while [ ! -e \"$D/go\" ]; do sleep 0.02; done";

fn etcdctl_lock(dir: &Path, name: &str, body: &str) -> Child {
    Command::new("etcdctl")
        .args(["--endpoints", &shared_etcd().endpoint(), "lock", name, "--", "sh", "-c", body])
        .env("ETCDCTL_API", "3")
        .env("D", dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
        .expect("etcdctl (Debian's etcd-client, installed by scripts/install-servers.sh)")
}

fn dlock_run(dir: &Path, url: &str, k: &str, wait: &str, body: &str) -> Child {
    Command::new(env!("CARGO_BIN_EXE_dlock"))
        .args(["run", "--url", url, "--key", k, "--wait", wait, "--", "sh", "-c", body])
        .env("D", dir)
        .stdin(Stdio::null())
        .spawn()
        .expect("dlock run")
}

#[test]
fn etcdctl_waits_for_a_dlock_holder() {
    let dir = tempfile::tempdir().expect("tmp");
    let k = key("etcdctl-after-dlock");
    let url = shared_etcd().url("interop");
    let mut holder = dlock_run(dir.path(), &url, &k, "10s", &format!("{HOLD}; touch \"$D/released\""));
    wait_for("dlock holds", Duration::from_secs(20), || dir.path().join("held").exists());
    let mut other =
        etcdctl_lock(dir.path(), &format!("/interop/{k}"), "test -e \"$D/released\" && touch \"$D/second\"");
    std::thread::sleep(Duration::from_millis(500)); // etcdctl's chance to get in, if it could
    assert!(!dir.path().join("second").exists(), "etcdctl got the lock while dlock held it");
    std::fs::write(dir.path().join("go"), "").expect("go");
    assert_eq!(wait_exit(&mut holder, Duration::from_secs(10)).code(), Some(0));
    assert_eq!(wait_exit(&mut other, Duration::from_secs(10)).code(), Some(0));
    assert!(dir.path().join("second").exists(), "etcdctl ran only after dlock's command ended");
}

#[test]
fn dlock_waits_for_an_etcdctl_holder_and_status_shows_it() {
    let dir = tempfile::tempdir().expect("tmp");
    let k = key("dlock-after-etcdctl");
    let url = shared_etcd().url("interop");
    let mut holder = etcdctl_lock(dir.path(), &format!("/interop/{k}"), HOLD);
    wait_for("etcdctl holds", Duration::from_secs(20), || dir.path().join("held").exists());
    let status = dlock(&["status", "--url", &url, "--key", &k, "--json"]);
    assert_eq!(status.status.code(), Some(1), "{}", String::from_utf8_lossy(&status.stderr));
    let v: serde_json::Value = serde_json::from_slice(&status.stdout).expect("json");
    assert_eq!(v["held"], true, "{v}");
    assert!(v["owner"].as_str().is_some_and(|o| !o.is_empty()), "the etcdctl holder's lease: {v}");
    let tried = dlock(&["run", "--url", &url, "--key", &k, "--wait", "0", "-q", "--", "true"]);
    assert_eq!(tried.status.code(), Some(75), "dlock got the lock while etcdctl held it");
    let mut waiter = dlock_run(dir.path(), &url, &k, "20s", "test -e \"$D/go\"");
    std::fs::write(dir.path().join("go"), "").expect("go");
    assert_eq!(wait_exit(&mut holder, Duration::from_secs(10)).code(), Some(0));
    assert_eq!(
        wait_exit(&mut waiter, Duration::from_secs(20)).code(),
        Some(0),
        "dlock ran after etcdctl released"
    );
}
