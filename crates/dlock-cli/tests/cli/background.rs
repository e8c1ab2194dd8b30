//! What a user of flock(1) expects of `dlock run`: the lock lasts while anything the command
//! started still runs (in its process group or not), `--ignore-background` releases it when the
//! command itself exits, and every signal `--on-lost` accepts reaches the command with the
//! grace period asked for.
//!
//! Background processes here wait for a file the test creates (`$D/go`), so "still running"
//! is a state the test controls, not a race against a sleep.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::common;

use common::{delete_lock_behind_the_holder, dlock, key, redis_url, wait_exit, wait_for};

/// `dlock run --url <url> --key <key> <extra> -- sh -c <body>` with `D` = `dir`.
fn run(dir: &Path, url: &str, key: &str, extra: &[&str], body: &str) -> Child {
    Command::new(env!("CARGO_BIN_EXE_dlock"))
        .args(["run", "--url", url, "--key", key])
        .args(extra)
        .args(["--", "sh", "-c", body])
        .env("D", dir)
        .stdin(Stdio::null())
        .spawn()
        .expect("spawn dlock run")
}

/// A loop that ends once `$D/go` exists, written to `$D/<tag>` when it starts and removed when
/// it ends (a test waits for that before its directory goes, or the loop would run for good).
fn waits_for_go(tag: &str) -> String {
    format!(
        "sh -c 'echo $$ > \"$D/{tag}\"; while [ ! -e \"$D/go\" ]; do sleep 0.02; done; rm -f \"$D/{tag}\"'"
    )
}

/// `dlock status` of the mutex `key`: true when held (exit 1), false when free (exit 0).
fn held(url: &str, key: &str) -> bool {
    let out = dlock(&["status", "--url", url, "--key", key]);
    match out.status.code() {
        Some(1) => true,
        Some(0) => false,
        other => panic!("status: {other:?} {}", String::from_utf8_lossy(&out.stderr)),
    }
}

fn file_url(dir: &Path) -> String {
    let locks = dir.join("locks");
    std::fs::create_dir_all(&locks).expect("locks dir");
    format!("file://{}", locks.display())
}

#[test]
fn the_lock_lasts_until_background_processes_exit_in_the_group_or_not() {
    for (case, spawn) in [("group", ""), ("session", "setsid ")] {
        let dir = tempfile::tempdir().expect("tmp");
        let url = file_url(dir.path());
        let k = key(&format!("bg-{case}"));
        // The command starts a background process and exits 3 at once.
        let body = format!("{spawn}{} & exit 3", waits_for_go("bg"));
        let mut a = run(dir.path(), &url, &k, &[], &body);
        wait_for("background process starts", Duration::from_secs(10), || dir.path().join("bg").exists());
        // The command itself has exited; its background process keeps the lock held.
        std::thread::sleep(Duration::from_millis(100));
        assert!(
            a.try_wait().expect("try_wait").is_none(),
            "{case}: dlock exited with a background process alive"
        );
        assert!(held(&url, &k), "{case}: the lock is free while a background process runs");
        std::fs::write(dir.path().join("go"), "").expect("go");
        let s = wait_exit(&mut a, Duration::from_secs(10));
        assert_eq!(s.code(), Some(3), "{case}: dlock exits with the command's own status");
        assert!(!held(&url, &k), "{case}: released once everything exited");
    }
}

#[test]
fn ignore_background_releases_when_the_command_exits() {
    let dir = tempfile::tempdir().expect("tmp");
    let url = file_url(dir.path());
    let k = key("bg-ignore");
    let body = format!("{} & exit 0", waits_for_go("bg"));
    let mut a = run(dir.path(), &url, &k, &["--ignore-background"], &body);
    let s = wait_exit(&mut a, Duration::from_secs(10));
    assert_eq!(s.code(), Some(0));
    wait_for("background process starts", Duration::from_secs(10), || dir.path().join("bg").exists());
    assert!(!held(&url, &k), "--ignore-background: released at the command's exit");
    std::fs::write(dir.path().join("go"), "").expect("go");
    wait_for("the background loop ends", Duration::from_secs(10), || !dir.path().join("bg").exists());
}

/// `--on-lost SIG:3s` for every catchable signal the grammar accepts: the command gets SIG,
/// may finish what it was doing within the grace (here 1 s), and `dlock` exits 76.
#[test]
fn every_on_lost_signal_is_delivered_and_the_grace_honoured() {
    let url = redis_url();
    for sig in ["USR1", "USR2", "HUP", "INT", "TERM"] {
        let dir = tempfile::tempdir().expect("tmp");
        let k = key(&format!("on-lost-{sig}"));
        let body = format!(
            "trap 'echo > \"$D/got\"' {sig}; echo > \"$D/ready\"; \
             while [ ! -e \"$D/got\" ]; do sleep 0.02; done; sleep 1; echo > \"$D/done\""
        );
        let on_lost = format!("{sig}:3s");
        let mut a = run(dir.path(), &url, &k, &["--lease", "4s", "--on-lost", &on_lost], &body);
        wait_for("command starts", Duration::from_secs(10), || dir.path().join("ready").exists());
        let lost = Instant::now();
        delete_lock_behind_the_holder(&url, &k, Duration::ZERO);
        let s = wait_exit(&mut a, Duration::from_secs(15));
        let took = lost.elapsed();
        assert!(dir.path().join("got").exists(), "{sig}: the command never got {sig}");
        assert!(dir.path().join("done").exists(), "{sig}: stopped before its 3 s grace ended ({took:?})");
        assert_eq!(s.code(), Some(76), "{sig}: a lost lock is exit 76 ({took:?})");
    }
}

/// A lost lock reaches a background process that left the group (`setsid`) as well: it would
/// otherwise keep the lock held, as far as dlock is concerned, after the group was stopped.
#[test]
fn a_lost_lock_stops_background_processes_outside_the_group() {
    let url = redis_url();
    let dir = tempfile::tempdir().expect("tmp");
    let k = key("on-lost-session");
    let body = "setsid sh -c 'trap \"echo > $D/term; exit 0\" TERM; echo > $D/bg; \
                while true; do sleep 0.02; done' & exit 0";
    let mut a = run(dir.path(), &url, &k, &["--lease", "2s", "--on-lost", "TERM:1s"], body);
    wait_for("background process starts", Duration::from_secs(10), || dir.path().join("bg").exists());
    delete_lock_behind_the_holder(&url, &k, Duration::ZERO);
    let s = wait_exit(&mut a, Duration::from_secs(15));
    assert_eq!(s.code(), Some(76));
    assert!(dir.path().join("term").exists(), "the background process never got SIGTERM");
}
