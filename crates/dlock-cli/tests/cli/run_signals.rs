//! `dlock run` as cron jobs and deploy scripts use it, against a real Redis: signals are
//! forwarded, the lock is released only after the command exits, a dying `dlock` takes its
//! command with it, a lost lock stops the command, and at no instant do two commands run.
//!
//! Every command holds `flock -n` on a shared file while it runs (exit 99 when it cannot): a
//! second command running while the first is still alive, or a leftover process of the first
//! (its background `sleep`), shows up as status 99.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};

use crate::common;

use common::{
    delete_lock_behind_the_holder, dlock, key, pid, pid_of, redis_url, spawn_flocked, wait_exit, wait_for,
};

/// `dlock run` of a shell command that holds `$D/mutex` while it sleeps `secs`, recording its
/// pid in `$D/pid.<tag>` (the shell becomes the `sleep`: see [`common::UNTIL_STOPPED`]).
fn dlock_run(dir: &Path, key: &str, tag: &str, secs: f64, extra: &[&str]) -> Child {
    let body = format!("echo $$ > \"$D/pid.{tag}\"; exec sleep {secs}");
    let url = redis_url();
    let mut args = vec!["run", "--url", &url, "--key", key];
    args.extend(extra);
    spawn_flocked(dir, &args, &body)
}

/// A first `dlock run` (tag `a`) holding `key` while its command sleeps 30 s, returned once
/// the command runs: the `dlock` process and the command's pid.
fn start_holder(dir: &Path, key: &str, extra: &[&str]) -> (Child, i32) {
    let a = dlock_run(dir, key, "a", 30.0, extra);
    wait_for("first command starts", Duration::from_secs(20), || pid_of(dir, "a").is_some());
    (a, pid_of(dir, "a").expect("pid"))
}

/// Alive and not a zombie.
fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .is_ok_and(|s| s.rsplit(')').next().and_then(|r| r.split_whitespace().next()) != Some("Z"))
}

#[test]
fn sigterm_is_forwarded_and_the_lock_released_only_after_the_command_exits() {
    let dir = tempfile::tempdir().expect("tmp");
    let k = key("sigterm");
    let (mut a, cmd) = start_holder(dir.path(), &k, &["--lease", "2s", "--on-lost", "TERM:500ms"]);
    let mut b = dlock_run(dir.path(), &k, "b", 0.1, &["--wait", "20s"]);
    std::thread::sleep(Duration::from_millis(200)); // give B the chance to overlap, if it could
    assert!(pid_of(dir.path(), "b").is_none(), "second command started while the first held the lock");
    kill(pid(&a), Signal::SIGTERM).expect("SIGTERM dlock");
    let sa = wait_exit(&mut a, Duration::from_secs(10));
    assert_eq!(sa.code(), Some(143), "dlock exits with the command's status after SIGTERM");
    assert!(!alive(cmd), "command still running after dlock exited");
    let sb = wait_exit(&mut b, Duration::from_secs(20));
    assert_eq!(sb.code(), Some(0), "second command overlapped (99) or failed");
}

#[test]
fn a_killed_dlock_takes_its_command_down_before_the_lease_frees_the_lock() {
    let dir = tempfile::tempdir().expect("tmp");
    let k = key("sigkill");
    let (mut a, cmd) = start_holder(dir.path(), &k, &["--lease", "1s", "--on-lost", "TERM:200ms"]);
    let mut b = dlock_run(dir.path(), &k, "b", 0.1, &["--wait", "20s"]);
    kill(pid(&a), Signal::SIGKILL).expect("SIGKILL dlock");
    let killed = Instant::now();
    let _ = wait_exit(&mut a, Duration::from_secs(5));
    wait_for("orphaned command stopped", Duration::from_secs(2), || !alive(cmd));
    let stopped = killed.elapsed();
    let sb = wait_exit(&mut b, Duration::from_secs(20));
    eprintln!("command stopped {stopped:?} after dlock was SIGKILLed; the waiter ran after the 1 s lease");
    assert_eq!(sb.code(), Some(0), "second command overlapped (99) or failed");
    assert!(stopped < Duration::from_secs(1), "the command outlived the lease: {stopped:?}");
}

#[test]
fn a_lost_lock_stops_the_command_with_status_76() {
    let dir = tempfile::tempdir().expect("tmp");
    let k = key("lost");
    let (mut a, cmd) = start_holder(dir.path(), &k, &["--lease", "600ms", "--on-lost", "TERM:200ms"]);
    delete_lock_behind_the_holder(&redis_url(), &k, Duration::from_secs(10));
    let s = wait_exit(&mut a, Duration::from_secs(10));
    assert_eq!(s.code(), Some(76), "a lost lock exits 76");
    assert!(!alive(cmd), "command still running after the lock was lost");
}

#[test]
fn exit_statuses_pass_through_and_memory_urls_are_refused() {
    let run = |url: &str, script: &str| {
        dlock(&["run", "--url", url, "--key", &key("status"), "--", "sh", "-c", script])
    };
    let url = redis_url();
    assert_eq!(run(&url, "exit 7").status.code(), Some(7));
    assert_eq!(run(&url, "kill -9 $$").status.code(), Some(137), "128 + SIGKILL");
    assert_eq!(run(&url, "exit 0").status.code(), Some(0));
    let missing = dlock(&["run", "--url", &url, "--key", &key("status"), "--", "/nonexistent/command"]);
    assert_eq!(missing.status.code(), Some(127), "command not found");
    // A file that exists but may not be executed (the shell's 126). Root may run any file with an
    // execute bit, so the file has none.
    let dir = tempfile::tempdir().expect("tempdir");
    let plain = dir.path().join("not-executable");
    std::fs::write(&plain, "#!/bin/sh\nexit 0\n").expect("write");
    let not_runnable =
        dlock(&["run", "--url", &url, "--key", &key("status"), "--", plain.to_str().expect("utf-8")]);
    assert_eq!(not_runnable.status.code(), Some(126), "command not runnable");
    let mem = run("memory://x", "exit 0");
    assert_eq!(mem.status.code(), Some(64));
    let err = String::from_utf8_lossy(&mem.stderr);
    assert!(err.contains("memory://") && err.contains("one process"), "{err}");
    let bad =
        dlock(&["run", "--url", &url, "--key", "k", "--lease", "1s", "--on-lost", "TERM:5s", "--", "true"]);
    assert_eq!(bad.status.code(), Some(64), "a grace period longer than the lease is refused");
    // Without a grace period given, it follows the lease: a short lease alone is accepted.
    let short = dlock(&["run", "--url", &url, "--key", &key("status"), "--lease", "3s", "--", "true"]);
    assert_eq!(short.status.code(), Some(0), "{}", String::from_utf8_lossy(&short.stderr));
    // One duration grammar: a bare number is refused with the fix (a usage error, as clap's).
    let bare = dlock(&["run", "--url", &url, "--key", &key("status"), "--wait", "3", "--", "true"]);
    let err = String::from_utf8_lossy(&bare.stderr);
    assert_eq!(bare.status.code(), Some(64), "{err}");
    assert!(err.contains("3ms or 3s"), "{err}");
}

/// `--wait` bounds connecting too: a server that accepts the TCP connection and never answers
/// gives exit 69 within the wait, with a message naming the endpoint and the cause.
#[test]
fn an_unresponsive_server_fails_within_the_wait_naming_it() {
    let silent = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = silent.local_addr().expect("addr").port();
    for url in [format!("redis://127.0.0.1:{port}/"), format!("mysql://u:pw@127.0.0.1:{port}/db")] {
        let t = Instant::now();
        let out = dlock(&["run", "--url", &url, "--key", "k", "--wait", "700ms", "--", "true"]);
        let took = t.elapsed();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(69), "{url}: {err}");
        assert!(took < Duration::from_secs(3), "{url}: took {took:?} for --wait 700ms");
        assert!(err.contains(&format!("127.0.0.1:{port}")) && err.contains("within --wait"), "{err}");
        assert!(!err.contains("pw@"), "{err}");
    }
    drop(silent);
}

/// `dlock status` looks without acquiring: free (0), held (1) with lease, fence and holder,
/// `--json` for scripts; `dlock run` on a held key gives up with 75 after `--wait`.
#[test]
fn status_inspects_without_acquiring_and_run_times_out_with_75() {
    let dir = tempfile::tempdir().expect("tmp");
    let k = key("status");
    let status = |json: bool| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_dlock"));
        c.args(["status", "--url", &redis_url(), "--key", &k]);
        if json {
            c.arg("--json");
        }
        c.output().expect("dlock status")
    };
    let free = status(false);
    assert_eq!(free.status.code(), Some(0), "{}", String::from_utf8_lossy(&free.stderr));
    assert!(String::from_utf8_lossy(&free.stdout).contains("free"));
    let (mut a, cmd) = start_holder(dir.path(), &k, &["--lease", "2s", "--on-lost", "TERM:500ms"]);
    let held = status(true);
    assert_eq!(held.status.code(), Some(1));
    let v: serde_json::Value = serde_json::from_slice(&held.stdout).expect("json");
    assert_eq!(v["held"], true, "{v}");
    assert!(v["fence"].as_u64().is_some_and(|f| f > 0) && v["remaining_ms"].as_u64().is_some(), "{v}");
    assert!(alive(cmd), "status disturbed the holder");
    let busy = dlock(&["run", "--url", &redis_url(), "--key", &k, "--wait", "200ms", "--", "true"]);
    assert_eq!(busy.status.code(), Some(75), "not acquired within --wait");
    // flock's -E, and --wait 0: one try.
    let args =
        ["run", "--url", &redis_url(), "--key", &k, "--wait", "0", "--conflict-exit-code", "9", "--", "true"];
    let t = Instant::now();
    assert_eq!(dlock(&args).status.code(), Some(9), "the conflict's own status");
    assert!(t.elapsed() < Duration::from_secs(5), "--wait 0 tries once");
    kill(pid(&a), Signal::SIGTERM).expect("SIGTERM");
    wait_exit(&mut a, Duration::from_secs(10));
    assert_eq!(status(false).status.code(), Some(0), "free after the holder ended");
}

/// Wrong credentials are a permission problem, not an outage: exit 77, in the server's words.
#[test]
fn refused_credentials_exit_77() {
    let srv = lock_redis_testing::RedisServer::start_with(&["--requirepass", "right-pw"]).expect("redis");
    let out = dlock(&[
        "run",
        "--url",
        &format!("redis://:wrong-pw@127.0.0.1:{}/", srv.port()),
        "--key",
        "k",
        "--",
        "true",
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(77), "{err}");
    assert!(err.contains("refused the credentials") && !err.contains("wrong-pw"), "{err}");
}

/// A server that refuses connections is reported at once, with the cause, for every scheme.
#[test]
fn a_refused_connection_is_reported_at_once_with_its_cause() {
    let closed = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = closed.local_addr().expect("addr").port();
    drop(closed); // nothing listens there now
    for url in [format!("redis://127.0.0.1:{port}/"), format!("mysql://u:pw@127.0.0.1:{port}/db")] {
        let t = Instant::now();
        let out = dlock(&["status", "--url", &url, "--key", "k"]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(69), "{url}: {err}");
        assert!(err.to_ascii_lowercase().contains("refused"), "{url}: the cause is missing: {err}");
        assert!(t.elapsed() < Duration::from_secs(2), "{url}: took {:?}", t.elapsed());
    }
}

/// `dlock status` of a MySQL pessimistic lock tells a free key (it used to answer 78); the
/// held case, with the holder's fence and session, is `force_mysql.rs`.
#[test]
fn status_of_a_free_pessimistic_mysql_lock_is_free() {
    let url =
        lock_mysql_testing::external_url().unwrap_or_else(|| lock_mysql_testing::shared_mariadb().url());
    for mode in ["pessimistic", "optimistic"] {
        let out = dlock(&["status", "--url", &format!("{url}?mode={mode}"), "--key", &key("free-status")]);
        assert_eq!(out.status.code(), Some(0), "{mode}: {}", String::from_utf8_lossy(&out.stderr));
    }
}

/// Warnings go to stderr as plain text when it is not a terminal (cron mail, log files).
#[test]
fn logs_carry_no_colour_codes_off_a_terminal() {
    let k = key("ansi");
    let url = redis_url();
    let child = Command::new(env!("CARGO_BIN_EXE_dlock"))
        .args([
            "run",
            "--url",
            &url,
            "--key",
            &k,
            "--lease",
            "600ms",
            "--on-lost",
            "TERM:100ms",
            "--",
            "sleep",
            "30",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("dlock run");
    delete_lock_behind_the_holder(&url, &k, Duration::from_secs(10));
    let out = child.wait_with_output().expect("wait");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(76), "{err}");
    assert!(err.contains("lost"), "{err}");
    assert!(!err.contains('\u{1b}'), "colour codes in non-terminal logs: {err:?}");
}

/// The installed `dlock` (default features) speaks TLS: `rediss://` to a closed port is an
/// unreachable server (69), not a missing cargo feature (64).
#[test]
fn the_default_build_reaches_tls_stores() {
    let closed = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = closed.local_addr().expect("addr").port();
    drop(closed);
    let out = dlock(&["status", "--url", &format!("rediss://127.0.0.1:{port}/"), "--key", "k"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(69), "{err}");
    assert!(!err.contains("cargo feature"), "{err}");
}
