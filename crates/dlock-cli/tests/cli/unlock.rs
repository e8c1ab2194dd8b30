//! `dlock unlock --force` against a running `dlock run` holder, through the real binary, on
//! every store (Redis, ZooKeeper, etcd, PostgreSQL and MySQL `GET_LOCK` by ending the holder's
//! session, MySQL optimistic): it evicts exactly the inspected hold, the holder's command is
//! stopped (`--on-lost`, exit 76), and the next holder's fencing token is larger.

use std::path::Path;
use std::process::Child;
use std::time::Duration;

use crate::common;

use common::{dlock, key, redis_url, spawn_holder, store_urls, wait_exit, wait_for};

/// `dlock run` with a 1 s lease of a command that writes its fencing token to `$D/fence`.
fn holder(dir: &Path, url: &str, key: &str) -> Child {
    let args = ["--url", url, "--key", key, "--lease", "1s", "--on-lost", "TERM:500ms"];
    let args = [&args[..], &["--holder-label", "stuck-job"]].concat();
    spawn_holder(dir, &args, "echo $DLOCK_FENCING_TOKEN > \"$D/fence\"")
}

fn text(out: &std::process::Output) -> (String, String) {
    (String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
}

#[test]
fn unlock_evicts_a_running_holder_on_every_store() {
    // Every shared store (GET_LOCK for MySQL), and MySQL optimistic mode.
    let mut stores: Vec<(&str, String)> = store_urls("dlock-unlock");
    let optimistic = format!("{}?mode=optimistic", lock_mysql_testing::shared_mariadb().url());
    stores.push(("mysql optimistic", optimistic));
    for (store, url) in stores {
        let dir = tempfile::tempdir().expect("tmp");
        let k = key(&format!("unlock-{}", store.replace(' ', "-")));
        let fence_file = dir.path().join("fence");
        let mut child = holder(dir.path(), &url, &k);
        wait_for("the command runs", Duration::from_secs(30), || {
            std::fs::read_to_string(&fence_file).is_ok_and(|f| f.ends_with('\n'))
        });
        let fence: u64 =
            std::fs::read_to_string(&fence_file).expect("fence").trim().parse().expect("a fence");
        let out = dlock(&["unlock", "--url", &url, "--key", &k, "--force", "--json"]);
        let (stdout, stderr) = text(&out);
        assert_eq!(out.status.code(), Some(0), "{store}: {stdout}{stderr}");
        assert!(stdout.contains("\"evicted\":true"), "{store}: {stdout}");
        assert!(stdout.contains(&format!("\"fence\":{fence}")), "{store}: the inspected hold: {stdout}");
        assert!(stdout.contains(&format!(":{} cmd=sh label=stuck-job", child.id())), "{store}: {stdout}");
        // Told at its next renewal (a third of the 1 s lease): the command is stopped.
        assert_eq!(wait_exit(&mut child, Duration::from_secs(15)).code(), Some(76), "{store}: lost");
        let next = dlock(&[
            "run",
            "--url",
            &url,
            "--key",
            &k,
            "--wait",
            "10s",
            "--",
            "sh",
            "-c",
            "echo $DLOCK_FENCING_TOKEN",
        ]);
        let (stdout, stderr) = text(&next);
        assert_eq!(next.status.code(), Some(0), "{store}: {stderr}");
        let after: u64 = stdout.trim().parse().expect("the next holder's fence");
        assert!(after > fence, "{store}: {after} after evicting {fence}");
        let free = dlock(&["unlock", "--url", &url, "--key", &k, "--force"]);
        let (stdout, stderr) = text(&free);
        assert_eq!(free.status.code(), Some(0), "{store}: {stderr}");
        assert!(stdout.contains("free, nothing to evict"), "{store}: {stdout}");
    }
}

#[test]
fn unlock_needs_force() {
    let out = dlock(&["unlock", "--url", &redis_url(), "--key", &key("no-force")]);
    assert_eq!(out.status.code(), Some(64), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--force"));
}
