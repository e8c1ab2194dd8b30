//! `dlock unlock --force` on Redis beyond the native modes, through the real binary: the
//! interop modes (`mode=redis-py`, `mode=python-redis-lock`: a hold of ours, named by its
//! fence) and Redlock over three servers (the grant's token names the owner's hold on every
//! master). The `dlock run` holder is evicted, told at its next renewal (exit 76), and the next
//! holder's fence is larger.

use std::path::Path;
use std::process::{Child, Output};
use std::time::Duration;

use crate::common;

use common::{dlock, key, redis_url, spawn_holder, wait_exit, wait_for};
use lock_redis_testing::RedisServer;
use lock_testkit::server::require_servers;

/// `dlock run` with a 1 s lease of a command that writes its fencing token to `$D/fence`.
fn holder(dir: &Path, url: &str, key: &str) -> Child {
    let args = ["--url", url, "--key", key, "--lease", "1s", "--on-lost", "TERM:500ms"];
    spawn_holder(dir, &args, "echo $DLOCK_FENCING_TOKEN > \"$D/fence\"")
}

fn text(out: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

/// A running holder on `url` is evicted by the fence it was granted, exits 76, and the next
/// holder's fence is larger; a second unlock finds the key free.
fn evicts_a_running_holder(store: &str, url: &str) {
    let dir = tempfile::tempdir().expect("tmp");
    let k = key(&format!("force-{store}"));
    let fence_file = dir.path().join("fence");
    let mut child = holder(dir.path(), url, &k);
    wait_for("the command runs", Duration::from_secs(30), || {
        std::fs::read_to_string(&fence_file).is_ok_and(|f| f.ends_with('\n'))
    });
    let fence: u64 = std::fs::read_to_string(&fence_file).expect("fence").trim().parse().expect("a fence");
    let out = dlock(&["unlock", "--url", url, "--key", &k, "--force", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{store}: {}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("\"evicted\":true"), "{store}: {stdout}");
    assert!(stdout.contains(&format!("\"fence\":{fence}")), "{store}: the inspected hold: {stdout}");
    // Told at its next renewal (a third of the 1 s lease): the command is stopped.
    assert_eq!(wait_exit(&mut child, Duration::from_secs(15)).code(), Some(76), "{store}: lost");
    let next = dlock(&[
        "run",
        "--url",
        url,
        "--key",
        &k,
        "--wait",
        "10s",
        "--",
        "sh",
        "-c",
        "echo $DLOCK_FENCING_TOKEN",
    ]);
    assert_eq!(next.status.code(), Some(0), "{store}: {}", text(&next));
    let after: u64 = String::from_utf8_lossy(&next.stdout).trim().parse().expect("the next holder's fence");
    assert!(after > fence, "{store}: {after} after evicting {fence}");
    let free = dlock(&["unlock", "--url", url, "--key", &k, "--force"]);
    assert_eq!(free.status.code(), Some(0), "{store}: {}", text(&free));
    assert!(text(&free).contains("free, nothing to evict"), "{store}: {}", text(&free));
}

#[test]
fn unlock_evicts_our_holder_in_the_interop_modes() {
    let base = redis_url();
    let join = if base.contains('?') { '&' } else { '?' };
    for mode in ["redis-py", "python-redis-lock"] {
        evicts_a_running_holder(mode, &format!("{base}{join}mode={mode}"));
    }
}

#[test]
fn unlock_evicts_a_redlock_holder_on_every_master() {
    let servers: Vec<RedisServer> = match (0..3).map(|_| RedisServer::start()).collect() {
        Ok(s) => s,
        Err(e) if e.is_missing_binary() && !require_servers() => {
            eprintln!("SKIPPED unlock_evicts_a_redlock_holder_on_every_master: {e}");
            return;
        }
        Err(e) => panic!("redis-server: {e}"),
    };
    let hosts: Vec<String> = servers
        .iter()
        .map(|s| s.url().trim_start_matches("redis://").trim_end_matches('/').to_owned())
        .collect();
    for mode in ["simple", "reentrant"] {
        evicts_a_running_holder(
            &format!("redlock-{mode}"),
            &format!("redlock://{}/?mode={mode}", hosts.join(",")),
        );
    }
    // A master down from the start (a port nobody listens on): the two others are a majority,
    // the grants are still fenced, and evicting the hold from both is evicting it.
    let dead = std::net::TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr");
    let url = format!("redlock://{},{},{dead}/?mode=simple", hosts[0], hosts[1]);
    evicts_a_running_holder("redlock-one-down", &url);
}
