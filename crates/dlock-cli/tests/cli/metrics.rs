//! `dlock run --metrics-addr` serves the lock's metrics as Prometheus text while the command
//! runs; the command itself scrapes it (bash's /dev/tcp), so the figures are read while held.

use std::process::Command;

use lock_redis_testing::RedisServer;
use lock_testkit::server::{free_port, or_skip};

#[test]
fn metrics_are_served_while_the_command_runs() {
    let Some(redis) = or_skip("redis-server", RedisServer::start()) else { return };
    let port = free_port().expect("a free port");
    let scrape = format!(
        "exec 3<>/dev/tcp/127.0.0.1/{port} && printf 'GET /metrics HTTP/1.0\\r\\nHost: x\\r\\n\\r\\n' >&3 && cat <&3"
    );
    let out = Command::new(env!("CARGO_BIN_EXE_dlock"))
        .args(["run", "--url", &redis.url(), "--key", "metrics", "--wait", "5s"])
        .args(["--metrics-addr", &format!("127.0.0.1:{port}"), "--", "bash", "-c", &scrape])
        .output()
        .expect("run dlock");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "dlock run failed: {}\n{text}", String::from_utf8_lossy(&out.stderr));
    for line in [
        r#"dlock_acquire_total{backend="redis",outcome="acquired"} 1"#,
        r#"dlock_held{backend="redis"} 1"#,
        r#"dlock_acquire_wait_seconds_count{backend="redis",outcome="acquired"} 1"#,
    ] {
        assert!(text.lines().any(|l| l == line), "{line:?} missing from the scrape:\n{text}");
    }
}

#[test]
fn completions_are_printed_for_bash() {
    let out =
        Command::new(env!("CARGO_BIN_EXE_dlock")).args(["completions", "bash"]).output().expect("run dlock");
    assert!(out.status.success());
    let script = String::from_utf8_lossy(&out.stdout);
    assert!(script.contains("complete") && script.contains("--metrics-addr"), "{script}");
}

/// `dlock leader --metrics-addr`: a follower shows as waiting while the leader's command runs,
/// and the leader's own command sees its term held.
#[test]
fn a_follower_shows_as_waiting_and_the_leader_as_held() {
    let Some(redis) = or_skip("redis-server", RedisServer::start()) else { return };
    let (lead_port, follow_port) = (free_port().expect("a free port"), free_port().expect("a free port"));
    let dir = tempfile::tempdir().expect("tmp");
    let scrape = |port: u16| {
        format!(
            "exec 3<>/dev/tcp/127.0.0.1/{port} && printf 'GET /metrics HTTP/1.0\\r\\nHost: x\\r\\n\\r\\n' >&3 && cat <&3"
        )
    };
    // The leader's command says it leads, scrapes the follower until it shows as waiting (at
    // most 10 s), then scrapes itself and ends.
    let waiting = r#"dlock_waiting{backend="redis"} 1"#;
    let body = format!(
        "touch \"$D/leading\"; for i in $(seq 200); do ( {} ) > \"$D/follower.txt\" 2>/dev/null; \
         grep -qxF '{waiting}' \"$D/follower.txt\" && break; sleep 0.05; done; {}",
        scrape(follow_port),
        scrape(lead_port)
    );
    let leader = |port: u16, body: &str| {
        Command::new(env!("CARGO_BIN_EXE_dlock"))
            .args(["leader", "--url", &redis.url(), "--key", "metrics-leader", "--once"])
            .args(["--metrics-addr", &format!("127.0.0.1:{port}"), "--", "bash", "-c", body])
            .env("D", dir.path())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("spawn dlock leader")
    };
    let first = leader(lead_port, &body);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !dir.path().join("leading").exists() {
        assert!(std::time::Instant::now() < deadline, "the first candidate never led");
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let second = leader(follow_port, "true");
    let out = first.wait_with_output().expect("leader ends");
    assert!(out.status.success(), "the leader's command");
    let own = String::from_utf8_lossy(&out.stdout);
    assert!(own.lines().any(|l| l == r#"dlock_held{backend="redis"} 1"#), "leader's own scrape:\n{own}");
    let follower = std::fs::read_to_string(dir.path().join("follower.txt")).expect("follower scrape");
    assert!(follower.lines().any(|l| l == waiting), "the follower waits for the term:\n{follower}");
    // The follower leads next, runs `true` and ends.
    assert!(second.wait_with_output().expect("follower ends").status.success());
}
