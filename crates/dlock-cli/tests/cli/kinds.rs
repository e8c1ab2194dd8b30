//! Semaphores and read-write locks as an operator sees them, through the real binary, on every
//! store (Redis, PostgreSQL, MariaDB `GET_LOCK`, ZooKeeper, etcd, lock files): `status`, `list`
//! and `unlock` know a key's kind from the store, by the user's name and without a flag; they
//! show permits, readers and a waiting writer with their holders, check a permit count given
//! against the stored one, and refuse what they cannot do with the reason. `list` says when
//! `--limit` cut it short, and a name too long for a primitive is refused before connecting.

use std::path::Path;
use std::process::{Child, Output};
use std::time::Duration;

use nix::sys::signal::{Signal, kill};
use serde_json::Value;

use crate::common;

use common::{dlock, key, pid, redis_url, spawn_holder, store_urls, wait_exit, wait_for};

/// Every store, the lock files under `dir`.
fn stores(dir: &Path) -> Vec<(&'static str, String)> {
    let mut s = store_urls("dlock-kinds");
    s.push(("file", format!("file://{}", dir.display())));
    s
}

/// The stores that can enumerate their locks.
fn lists(store: &str) -> bool {
    matches!(store, "redis" | "zk" | "etcd")
}

/// The stores whose read-write lock is built from a gate and reader slots.
fn composite_rw(store: &str) -> bool {
    matches!(store, "mysql" | "file")
}

/// The stores that keep a semaphore's permits in one key.
fn native_permits(store: &str) -> bool {
    matches!(store, "redis" | "zk")
}

/// `dlock run <args>` of a command that touches `$D/up.<tag>` once it holds, then sleeps.
fn holder(dir: &Path, url: &str, key: &str, tag: &str, side: &[&str]) -> Child {
    let args = [&["--url", url, "--key", key, "--lease", "2s", "--wait", "60s"][..], side].concat();
    spawn_holder(dir, &args, &format!("touch \"$D/up.{tag}\""))
}

fn up(dir: &Path, tag: &str) -> bool {
    dir.join(format!("up.{tag}")).exists()
}

fn out(o: &Output) -> (Option<i32>, String, String) {
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (o.status.code(), text(&o.stdout), text(&o.stderr))
}

fn status_json(url: &str, k: &str) -> Value {
    let (_, stdout, stderr) = out(&dlock(&["status", "--url", url, "--key", k, "--json"]));
    serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("status --json: {e}: {stdout}{stderr}"))
}

/// SIGTERM a holder that still runs, and reap it.
fn stop(c: &mut Child) {
    if c.try_wait().expect("try_wait").is_some() {
        return;
    }
    kill(pid(c), Signal::SIGTERM).expect("SIGTERM");
    wait_exit(c, Duration::from_secs(15));
}

#[test]
fn a_semaphore_is_known_by_its_name_with_its_permits_and_holders() {
    let dir = tempfile::tempdir().expect("tmp");
    for (store, url) in stores(dir.path()) {
        let k = key(&format!("kinds-sem-{store}"));
        let mut a = holder(dir.path(), &url, &k, &format!("{store}-a"), &["--permits", "2"]);
        let mut b = holder(dir.path(), &url, &k, &format!("{store}-b"), &["--permits", "2"]);
        wait_for("both permits held", Duration::from_secs(30), || {
            up(dir.path(), &format!("{store}-a")) && up(dir.path(), &format!("{store}-b"))
        });
        let (code, stdout, stderr) = out(&dlock(&["status", "--url", &url, "--key", &k]));
        assert_eq!(code, Some(1), "{store}: every permit held: {stdout}{stderr}");
        assert!(stdout.contains("semaphore, 2 of 2 permits held"), "{store}: {stdout}");
        for c in [&a, &b] {
            assert!(stdout.contains(&format!(":{} cmd=sh", c.id())), "{store}: each holder named: {stdout}");
        }
        // The count given is checked against the one stored with the semaphore.
        let (code, stdout, stderr) = out(&dlock(&["status", "--url", &url, "--key", &k, "--permits", "3"]));
        assert_eq!(code, Some(64), "{store}: --permits 3 of a semaphore of 2: {stdout}{stderr}");
        assert!(stderr.contains("semaphore of 2 permits"), "{store}: {stderr}");
        if lists(store) {
            let (code, stdout, stderr) = out(&dlock(&["list", "--url", &url, "--prefix", &k]));
            assert_eq!(code, Some(0), "{store}: {stderr}");
            assert_eq!(stdout.lines().count(), 1, "{store}: one entry, by the user's name: {stdout}");
            assert!(stdout.starts_with(&format!("{k}: semaphore, 2 of 2 permits held")), "{store}: {stdout}");
        }
        // Two permits held: unlock names neither by itself, and says which there are (with
        // --json, as a JSON error on stdout too).
        let (code, stdout, stderr) =
            out(&dlock(&["unlock", "--url", &url, "--key", &k, "--force", "--json"]));
        assert!(!stdout.contains("free"), "{store}: {stdout}");
        let error: Value = serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{store}: {e}: {stdout}"));
        assert_eq!(error["error"]["status"].as_i64().map(|s| s as i32), code, "{store}: {stdout}");
        if native_permits(store) {
            assert_eq!(code, Some(78), "{store}: {stdout}{stderr}");
            assert!(stderr.contains("keeps itself"), "{store}: the reason: {stderr}");
        } else {
            assert_eq!(code, Some(64), "{store}: {stdout}{stderr}");
            assert!(
                stderr.contains("2 permits hold it; name the one to take with --fence"),
                "{store}: {stderr}"
            );
            // Named by its fence, one permit is taken where the store can take a hold.
            let slot0 = status_json(&url, &k)["slots"][0].clone();
            let evicts = matches!(store, "postgres" | "etcd");
            match slot0["fence"].as_u64() {
                Some(fence) => {
                    // Fences repeat across slots where each slot key counts its own: the slot names it.
                    let (fence, slot) = (fence.to_string(), slot0["slot"].to_string());
                    let args = [
                        "unlock", "--url", &url, "--key", &k, "--force", "--fence", &fence, "--slot", &slot,
                        "--json",
                    ];
                    let (code, stdout, stderr) = out(&dlock(&args));
                    match code {
                        Some(0) => {
                            assert!(stdout.contains("\"evicted\":true"), "{store}: {stdout}");
                            let holder = slot0["holder"].as_str().expect("holder");
                            let evicted =
                                if holder.contains(&format!(":{} ", a.id())) { &mut a } else { &mut b };
                            let code = wait_exit(evicted, Duration::from_secs(20)).code();
                            assert_eq!(code, Some(76), "{store}: the evicted permit's command is stopped");
                        }
                        Some(78) if !evicts => assert!(stderr.contains("force-unlock"), "{store}: {stderr}"),
                        other => panic!("{store}: unlock --fence {fence}: {other:?}: {stdout}{stderr}"),
                    }
                }
                // MySQL `GET_LOCK` fences nothing.
                None => assert!(!evicts && store == "mysql", "{store}: a permit's fence: {slot0}"),
            }
        }
        stop(&mut a);
        stop(&mut b);
        // Free, and still known as a semaphore by its stored count.
        wait_for("the permits are free", Duration::from_secs(30), || {
            dlock(&["status", "--url", &url, "--key", &k]).status.code() == Some(0)
        });
        let (_, stdout, _) = out(&dlock(&["status", "--url", &url, "--key", &k]));
        assert!(stdout.contains("semaphore, 0 of 2 permits held"), "{store}: {stdout}");
    }
}

#[test]
fn a_read_write_lock_is_known_by_its_name_with_readers_and_writer() {
    let dir = tempfile::tempdir().expect("tmp");
    for (store, url) in stores(dir.path()) {
        let k = key(&format!("kinds-rw-{store}"));
        let tag = |t: &str| format!("{store}-{t}");
        let mut r1 = holder(dir.path(), &url, &k, &tag("r1"), &["--read"]);
        let mut r2 = holder(dir.path(), &url, &k, &tag("r2"), &["--read"]);
        wait_for("both readers hold", Duration::from_secs(30), || {
            up(dir.path(), &tag("r1")) && up(dir.path(), &tag("r2"))
        });
        let (code, stdout, stderr) = out(&dlock(&["status", "--url", &url, "--key", &k]));
        assert_eq!(code, Some(1), "{store}: {stdout}{stderr}");
        assert!(stdout.contains("read-write lock held by 2 readers"), "{store}: {stdout}");
        if lists(store) {
            let (_, stdout, _) = out(&dlock(&["list", "--url", &url, "--prefix", &k]));
            assert_eq!(stdout.trim(), format!("{k}: read-write lock held by 2 readers"), "{store}");
        }
        let mut w = holder(dir.path(), &url, &k, &tag("w"), &["--write"]);
        if composite_rw(store) {
            // The writer holds the gate and the free slots while it waits: not the holder.
            wait_for("the writer queues", Duration::from_secs(30), || {
                status_json(&url, &k)["writer_waiting"] == Value::Bool(true)
            });
            let v = status_json(&url, &k);
            assert_eq!((&v["readers"], &v["writer"]), (&2.into(), &false.into()), "{store}: {v}");
            let readers: Vec<&str> = v["reader_holds"]
                .as_array()
                .expect("reader holds")
                .iter()
                .map(|r| r["holder"].as_str().unwrap_or(""))
                .collect();
            for c in [&r1, &r2] {
                assert!(readers.iter().any(|h| h.contains(&format!(":{} ", c.id()))), "{store}: {v}");
            }
        }
        let (code, stdout, stderr) = out(&dlock(&["unlock", "--url", &url, "--key", &k, "--force"]));
        assert!(!stdout.contains("free"), "{store}: {stdout}");
        if composite_rw(store) {
            assert_eq!(code, Some(64), "{store}: {stdout}{stderr}");
            assert!(stderr.contains("2 readers hold it"), "{store}: {stderr}");
            // One reader, named by its slot and fence, is taken where the store can take a hold.
            let reader = status_json(&url, &k)["reader_holds"][0].clone();
            let (slot, fence) = (reader["slot"].to_string(), reader["fence"].to_string());
            let args = ["unlock", "--url", &url, "--key", &k, "--force", "--slot", &slot, "--fence", &fence];
            let (code, stdout, stderr) = out(&dlock(&args));
            match code {
                Some(0) => {
                    assert!(stdout.contains(&format!("evicted reader slot {slot}")), "{store}: {stdout}");
                    let holder = reader["holder"].as_str().expect("holder");
                    let evicted = if holder.contains(&format!(":{} ", r1.id())) { &mut r1 } else { &mut r2 };
                    let code = wait_exit(evicted, Duration::from_secs(20)).code();
                    assert_eq!(code, Some(76), "{store}: the evicted reader's command is stopped");
                }
                Some(78) => assert!(stderr.contains("force-unlock"), "{store}: {stderr}"),
                other => panic!("{store}: unlock of one reader: {other:?}: {stdout}{stderr}"),
            }
        } else {
            assert_eq!(code, Some(78), "{store}: {stdout}{stderr}");
            assert!(stderr.contains("none can be named"), "{store}: the reason: {stderr}");
        }
        assert!(!up(dir.path(), &tag("w")), "{store}: the writer runs while readers hold");
        stop(&mut r1);
        stop(&mut r2);
        wait_for("the writer holds", Duration::from_secs(30), || up(dir.path(), &tag("w")));
        let (code, stdout, _) = out(&dlock(&["status", "--url", &url, "--key", &k]));
        assert_eq!(code, Some(1), "{store}: {stdout}");
        assert!(stdout.contains("read-write lock held by a writer"), "{store}: {stdout}");
        assert!(stdout.contains(&format!(":{} cmd=sh", w.id())), "{store}: the writer named: {stdout}");
        let (code, stdout, stderr) = out(&dlock(&["unlock", "--url", &url, "--key", &k, "--force"]));
        match code {
            Some(0) => {
                assert!(stdout.contains("evicted writer"), "{store}: {stdout}");
                assert_eq!(wait_exit(&mut w, Duration::from_secs(20)).code(), Some(76), "{store}: lost");
            }
            Some(78) if matches!(store, "mysql" | "file") => {
                assert!(stderr.contains("force-unlock") || stderr.contains("no fence"), "{store}: {stderr}");
                stop(&mut w);
            }
            other => panic!("{store}: unlock of the writer: {other:?}: {stdout}{stderr}"),
        }
        // Free, and still known as a read-write lock by the reader slots stored with it.
        wait_for("the lock is free", Duration::from_secs(30), || {
            dlock(&["status", "--url", &url, "--key", &k]).status.code() == Some(0)
        });
        let (_, stdout, _) = out(&dlock(&["status", "--url", &url, "--key", &k]));
        assert_eq!(
            stdout.trim(),
            format!(
                "{k}: read-write lock free ({})",
                status_json(&url, &k)["backend"].as_str().unwrap_or("?")
            ),
            "{store}"
        );
        let args = ["status", "--url", &url, "--key", &k, "--read-write", "--reader-slots", "4"];
        let (code, _, stderr) = out(&dlock(&args));
        assert_eq!(code, Some(64), "{store}: 4 reader slots of a lock stored with 16: {stderr}");
        assert!(stderr.contains("16 reader slots"), "{store}: {stderr}");
    }
}

#[test]
fn list_says_when_its_limit_cut_it_short_and_refuses_zero() {
    let dir = tempfile::tempdir().expect("tmp");
    let url = redis_url();
    let prefix = key("kinds-limit-");
    let mut held: Vec<Child> = Vec::new();
    for i in 0..3 {
        held.push(holder(dir.path(), &url, &format!("{prefix}{i}"), &i.to_string(), &[]));
    }
    wait_for("three locks held", Duration::from_secs(30), || (0..3).all(|i| up(dir.path(), &i.to_string())));
    let (code, stdout, stderr) = out(&dlock(&["list", "--url", &url, "--prefix", &prefix, "--limit", "2"]));
    assert_eq!((code, stdout.lines().count()), (Some(0), 2), "{stdout}{stderr}");
    assert!(stderr.contains("stopped at --limit 2"), "{stderr}");
    let args = ["list", "--url", &url, "--prefix", &prefix, "--limit", "2", "--json"];
    let v: Value = serde_json::from_slice(&dlock(&args).stdout).expect("json");
    assert_eq!(v["truncated"], Value::Bool(true), "{v}");
    let args = ["list", "--url", &url, "--prefix", &prefix, "--limit", "3", "--json"];
    let v: Value = serde_json::from_slice(&dlock(&args).stdout).expect("json");
    assert_eq!((v["truncated"].clone(), v["locks"].as_array().map(Vec::len)), (false.into(), Some(3)), "{v}");
    for c in &mut held {
        stop(c);
    }
    // Refused before connecting: nothing listens on port 1.
    let (code, stdout, stderr) =
        out(&dlock(&["list", "--url", "redis://127.0.0.1:1", "--limit", "0", "--json"]));
    assert_eq!(code, Some(64), "{stderr}");
    assert!(stdout.contains("\"status\":64") && stderr.contains("--limit 0"), "{stdout}{stderr}");
}

#[test]
fn a_name_too_long_for_a_primitive_is_refused_with_its_real_maximum() {
    let down = "redis://127.0.0.1:1";
    let rw_max = "r".repeat(247);
    let long = "r".repeat(250);
    // Before connecting: nothing listens on port 1, and the answer is 64, not 69.
    let (code, _, stderr) = out(&dlock(&["status", "--url", down, "--key", &long, "--read-write"]));
    assert_eq!(code, Some(64), "{stderr}");
    assert!(stderr.contains("longer than 247 bytes"), "{stderr}");
    let (code, _, stderr) =
        out(&dlock(&["status", "--url", down, "--key", &"s".repeat(251), "--permits", "2"]));
    assert_eq!(code, Some(64), "{stderr}");
    assert!(stderr.contains("longer than 250 bytes"), "{stderr}");
    let (code, _, stderr) =
        out(&dlock(&["run", "--url", &redis_url(), "--key", &long, "--write", "--", "true"]));
    assert_eq!(code, Some(64), "{stderr}");
    assert!(stderr.contains("longer than 247 bytes"), "{stderr}");
    let (code, _, stderr) =
        out(&dlock(&["run", "--url", &redis_url(), "--key", &rw_max, "--write", "--", "true"]));
    assert_eq!(code, Some(0), "the longest name works: {stderr}");
}
