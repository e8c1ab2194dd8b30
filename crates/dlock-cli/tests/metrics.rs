//! `dlock run --metrics-addr` serves the lock's metrics as Prometheus text while the command
//! runs; the command itself scrapes it (bash's /dev/tcp), so the figures are read while held.

use std::process::Command;

use lock_testkit::server::{RedisServer, free_port, or_skip};

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
