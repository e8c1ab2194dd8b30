//! Who holds: `dlock run` notes its identity (`host:pid cmd=PROGRAM label=LABEL`) on its hold,
//! and `dlock status` shows it while the command runs, as text and as JSON, on every store,
//! for the mutex, the write side of a read-write lock and a semaphore (in slot keys, or kept by
//! the store, where each permit carries its holder's note);
//! `dlock list` shows it for every lock held under a prefix where the store can enumerate.

use std::process::Child;
use std::time::Duration;

use nix::sys::signal::{Signal, kill};

use crate::common;

use common::{dlock, key, pid, redis_url, spawn_holder, store_urls, wait_exit, wait_for};

/// `dlock run <args> --holder-label nightly` of a command that touches `$D/held` once it holds.
fn holder(dir: &std::path::Path, url: &str, key: &str, args: &[&str]) -> Child {
    let mut all = vec!["--url", url, "--key", key, "--holder-label", "nightly"];
    all.extend(args);
    spawn_holder(dir, &all, "touch \"$D/held\"")
}

/// `dlock status` of `key` (with `args`) as text and as JSON, expecting exit `code` (1: held;
/// 0 for a semaphore with a permit left).
fn status(url: &str, key: &str, args: &[&str], code: i32) -> (String, String) {
    let run = |json: bool| {
        let mut a = vec!["status", "--url", url, "--key", key];
        a.extend(args);
        if json {
            a.push("--json");
        }
        let out = dlock(&a);
        assert_eq!(out.status.code(), Some(code), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    (run(false), run(true))
}

#[test]
fn status_shows_who_holds_on_every_store() {
    for (store, url) in store_urls("dlock-holder") {
        for (what, run_args, status_args) in [
            ("mutex", &[][..], &[][..]),
            ("write side", &["--write"][..], &["--read-write"][..]),
            ("permit", &["--permits", "2"][..], &["--permits", "2"][..]),
        ] {
            let dir = tempfile::tempdir().expect("tmp");
            let k = key(&format!("holder-{store}"));
            let mut child = holder(dir.path(), &url, &k, run_args);
            wait_for("the command runs", Duration::from_secs(30), || dir.path().join("held").exists());
            let who = format!(":{} cmd=sh label=nightly", child.id());
            let code = if what == "permit" { 0 } else { 1 };
            let (text, json) = status(&url, &k, status_args, code);
            assert!(text.contains(", by ") && text.contains(&who), "{store} {what}: {text}");
            assert!(json.contains("\"holder\":\"") && json.contains(&who), "{store} {what}: {json}");
            kill(pid(&child), Signal::SIGTERM).expect("SIGTERM");
            assert_eq!(wait_exit(&mut child, Duration::from_secs(10)).code(), Some(143), "{store} {what}");
        }
    }
}

#[test]
fn a_label_with_a_control_character_is_refused() {
    let out = dlock(&[
        "run",
        "--url",
        &redis_url(),
        "--key",
        &key("bad-label"),
        "--holder-label",
        "a\tb",
        "--",
        "true",
    ]);
    assert_eq!(out.status.code(), Some(64), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stderr).contains("control character"));
}

#[test]
fn list_shows_the_held_locks_where_the_store_can_enumerate() {
    for (store, url) in store_urls("dlock-holder") {
        let dir = tempfile::tempdir().expect("tmp");
        let k = key(&format!("list-{store}"));
        let mut child = holder(dir.path(), &url, &k, &[]);
        wait_for("the command runs", Duration::from_secs(30), || dir.path().join("held").exists());
        let out = dlock(&["list", "--url", &url, "--prefix", &k]);
        let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        match store {
            "redis" | "zk" | "etcd" => {
                assert_eq!(out.status.code(), Some(0), "{store}: {stderr}");
                let who = format!(":{} cmd=sh label=nightly", child.id());
                let line =
                    stdout.lines().find(|l| l.starts_with(&format!("{k}: held"))).unwrap_or_else(|| {
                        panic!("{store}: {k} not listed: {stdout}");
                    });
                assert!(line.contains(&who) && line.contains("fence"), "{store}: {line}");
            }
            _ => {
                assert_eq!(out.status.code(), Some(78), "{store}: {stdout}{stderr}");
                assert!(stderr.contains("listing the locks held"), "{store}: {stderr}");
            }
        }
        kill(pid(&child), Signal::SIGTERM).expect("SIGTERM");
        assert_eq!(wait_exit(&mut child, Duration::from_secs(10)).code(), Some(143), "{store}");
        if matches!(store, "redis" | "zk" | "etcd") {
            let out = dlock(&["list", "--url", &url, "--prefix", &k, "--json"]);
            let stdout = String::from_utf8_lossy(&out.stdout);
            assert!(stdout.contains("\"locks\":[]"), "{store}: released, nothing held: {stdout}");
        }
    }
}
