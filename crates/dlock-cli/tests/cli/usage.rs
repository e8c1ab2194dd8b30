//! `dlock` as a user of flock(1) and `etcdctl lock` types it: input is checked before anything
//! connects, one status for every usage error, what was typed is what is printed, errors are
//! JSON under `--json`, a permanent refusal is not "try again", a store that is restarting is
//! waited for within `--wait`, and the flock habits (`-c`, `--quiet`, `--wait forever`, holding
//! without a command) work.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use lock_postgres_testing::shared_postgres;
use lock_redis_testing::RedisServer;

use crate::common;

use common::{dlock, key, redis_url, wait_exit};

fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

/// A URL nothing listens on: a store that is down.
const DOWN: &str = "redis://127.0.0.1:1";

#[test]
fn input_is_checked_before_connecting() {
    let long = "k".repeat(250);
    let cases: [&[&str]; 6] = [
        &["run", "--url", DOWN, "--key", "", "--", "true"],
        &["run", "--url", DOWN, "--key", "k", "--lease", "31d", "--", "true"],
        &["run", "--url", DOWN, "--key", &long, "--write", "--", "true"],
        &["run", "--url", DOWN, "--key", "k", "--permits", "0", "--", "true"],
        &["leader", "--url", DOWN, "--key", "", "--", "true"],
        &["status", "--url", DOWN, "--key", ""],
    ];
    for args in cases {
        let o = dlock(args);
        assert_eq!(o.status.code(), Some(64), "{args:?}: {}", text(&o));
    }
}

#[test]
fn every_usage_error_is_64() {
    for args in [
        &["run", "--url", DOWN, "--key", "k", "--bogus"][..],
        &["run", "--url", DOWN, "--key", "k", "--read", "--write", "--", "true"],
        &["status"],
        &["run", "--url", DOWN, "--key", "k", "--wait", "soon", "--", "true"],
    ] {
        let o = dlock(args);
        assert_eq!(o.status.code(), Some(64), "{args:?}: {}", text(&o));
    }
    assert_eq!(dlock(&["--help"]).status.code(), Some(0));
}

#[test]
fn what_was_typed_is_what_is_printed() {
    let o = dlock(&["run", "--url", DOWN, "--key", "k", "--wait", "400d", "--", "true"]);
    assert_eq!(o.status.code(), Some(64));
    let t = text(&o);
    assert!(t.contains("400d") && t.contains("forever") && !t.contains("34559999"), "{t}");
    let o = dlock(&["run", "--url", DOWN, "--key", "k", "--wait", "300ms", "--", "true"]);
    assert_eq!(o.status.code(), Some(69), "{}", text(&o));
    assert!(text(&o).contains("--wait 300ms"), "{}", text(&o));
}

#[test]
fn errors_are_json_on_stdout_under_json() {
    let o = dlock(&["status", "--url", DOWN, "--key", "k", "--json"]);
    assert_eq!(o.status.code(), Some(69), "{}", text(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("JSON on stdout");
    assert_eq!(v["error"]["status"], 69, "{v}");
    assert_eq!(v["error"]["kind"], "unavailable", "{v}");
    assert!(!o.stderr.is_empty(), "the message stays on stderr too");
    let o = dlock(&["list", "--url", DOWN, "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("JSON on stdout");
    assert_eq!(v["error"]["status"], 69, "{v}");
}

/// A database that does not exist is not a server that is away: 78, at once, not 69 after
/// retrying for the whole wait.
#[test]
fn a_permanent_refusal_is_78() {
    let redis = format!("{}/99", redis_url().trim_end_matches('/'));
    let pg = shared_postgres().url().replace("/locktest", "/no_such_database");
    // TLS asked of servers that have none (the test kit's shared servers are plaintext).
    let pg_tls = format!("{}?sslmode=require", shared_postgres().url());
    let my_tls = format!("{}?ssl-mode=required", lock_mysql_testing::shared_mariadb().url());
    for url in [redis, pg, pg_tls, my_tls] {
        let o = dlock(&["run", "--url", &url, "--key", "k", "--wait", "20s", "--", "true"]);
        assert_eq!(o.status.code(), Some(78), "{url}: {}", text(&o));
    }
}

/// A store that is down when the job starts, and up within `--wait`, is waited for.
#[test]
fn a_store_restarting_is_waited_for_within_wait() {
    let server = RedisServer::start().expect("redis-server");
    server.stop().expect("stop");
    let mut job = Command::new(env!("CARGO_BIN_EXE_dlock"))
        .args(["run", "--url", &server.url(), "--key", "restarting", "--wait", "30s", "--", "true"])
        .stdin(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    // Once dlock says it retries, the store comes back.
    let mut err = BufReader::new(job.stderr.take().expect("stderr"));
    let mut line = String::new();
    err.read_line(&mut line).expect("stderr line");
    assert!(line.contains("retrying within --wait 30s"), "{line}");
    server.restart().expect("restart");
    let s = wait_exit(&mut job, Duration::from_secs(30));
    assert_eq!(s.code(), Some(0), "acquired once the store was back");
}

#[test]
fn quiet_and_dash_c_and_forever() {
    let url = redis_url();
    let k = key("quiet");
    let mut holder = Command::new(env!("CARGO_BIN_EXE_dlock"))
        .args(["run", "--url", &url, "--key", &k])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn holder");
    let mut out = BufReader::new(holder.stdout.take().expect("stdout"));
    let mut line = String::new();
    out.read_line(&mut line).expect("holder prints key and fence");
    let fence = line.trim().strip_prefix(&format!("{k} ")).expect("key first");
    assert!(fence.parse::<u64>().is_ok(), "{line}");
    // Held: a try is 75, silent with --quiet.
    let o = dlock(&["run", "--url", &url, "--key", &k, "--wait", "0", "-q", "--", "true"]);
    assert_eq!(o.status.code(), Some(75));
    assert!(o.stderr.is_empty() && o.stdout.is_empty(), "{}", text(&o));
    let o = dlock(&["run", "--url", &url, "--key", &k, "--wait", "0", "--", "true"]);
    assert!(text(&o).contains("--wait 0"), "{}", text(&o));
    // A waiter without a bound gets it once stdin of the holder closes.
    let waiter = Command::new(env!("CARGO_BIN_EXE_dlock"))
        .args(["run", "--url", &url, "--key", &k, "--wait", "forever", "-c", "echo ran $DLOCK_FENCING_TOKEN"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn waiter");
    holder.stdin.take().expect("stdin").write_all(b"").expect("write");
    let s = wait_exit(&mut holder, Duration::from_secs(10));
    assert_eq!(s.code(), Some(0), "the holder releases at the end of stdin");
    let o = waiter.wait_with_output().expect("waiter");
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let ran = String::from_utf8_lossy(&o.stdout);
    let next: u64 = ran.trim().strip_prefix("ran ").and_then(|f| f.parse().ok()).expect("ran with a fence");
    assert!(next > fence.parse::<u64>().expect("fence"), "{ran} after {line}");
}
