//! `dlock run` exports `DLOCK_FENCING_TOKEN` only when the backend has real fencing tokens (a
//! number that looks like a fence would protect nothing), replacing any inherited value: a
//! single Redis and a Redlock quorum (whose grants write their token back to their majority,
//! see `lock_core::QuorumBackend`) both have them.

use std::process::Command;

use lock_redis_testing::RedisServer;
use lock_testkit::server::require_servers;

fn run(url: &str) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_dlock"))
        .args(["run", "--url", url, "--key", "fence-env", "--wait", "5s", "--", "sh", "-c"])
        .arg("echo \"fence=${DLOCK_FENCING_TOKEN-unset}\"")
        .env("DLOCK_FENCING_TOKEN", "inherited-from-the-caller")
        .output()
        .expect("run dlock");
    assert!(out.status.success(), "dlock run failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).expect("utf-8").trim().to_owned()
}

#[test]
fn fencing_token_is_exported_only_when_real() {
    let servers: Vec<RedisServer> = match (0..3).map(|_| RedisServer::start()).collect() {
        Ok(s) => s,
        Err(e) if e.is_missing_binary() && !require_servers() => {
            eprintln!("SKIPPED fencing_token_is_exported_only_when_real: {e}");
            return;
        }
        Err(e) => panic!("redis-server: {e}"),
    };
    let single = run(&servers[0].url());
    let fence = single.strip_prefix("fence=").expect("output");
    assert!(fence.parse::<u64>().is_ok(), "single redis must export a numeric fence, got {single:?}");
    let hosts: Vec<String> = servers
        .iter()
        .map(|s| s.url().trim_start_matches("redis://").trim_end_matches('/').to_owned())
        .collect();
    let quorum = run(&format!("redlock://{}/?mode=simple", hosts.join(",")));
    let fence = quorum.strip_prefix("fence=").expect("output");
    assert!(fence.parse::<u64>().is_ok(), "a fencing quorum must export its numeric token, got {quorum:?}");
    eprintln!("single redis: {single}; redlock: {quorum}");
}
