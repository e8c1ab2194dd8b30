//! The deadline promise on every store and mode: each public operation, with its client cut
//! off from the store (connections blackholed: open, silent), answers by its deadline or the
//! store's response bound (`lock_testkit::deadlines`, one table of operations for all).
//!
//! Run: `cargo test --all-features --test stores deadlines:: -- --nocapture` (prints every figure).

use std::time::Duration;

use lock_testkit::deadlines::every_operation_answers_in_time;

/// Builds a backend from a URL naming the test's proxy.
async fn connect(url: String) -> std::sync::Arc<dyn lock_core::LockBackend> {
    dlock::from_url(&url).await.expect("backend")
}

/// What a call without a deadline may take against a silent store, per store: its client's
/// own bound (Redis's response timeout, 2 s; etcd's request timeout, 5 s; the SQL stores' pool
/// acquire timeout, 5 s, and a release's keep-alive check after it; ZooKeeper's requests,
/// and a try within half its session timeout of 6 s).
const REDIS: Duration = Duration::from_secs(2);
const SQL: Duration = Duration::from_secs(6);
const ETCD: Duration = Duration::from_secs(5);
const ZK: Duration = Duration::from_secs(3);

/// Longer bounds stated on Redis: an upgradeable read's release frees its read (and write)
/// parts, then the upgrade gate, so that the next upgradeable reader finds the lock as plain
/// readers do: two response bounds.
const REDIS_LONGER: &[(&str, Duration, &str)] = &[(
    "UpgradeableReadGuard::release",
    Duration::from_secs(4),
    "the parts, then the upgrade gate: two response bounds",
)];

/// Longer bounds stated on PostgreSQL: an eviction ends the holder's session and waits up to
/// 5 s for it to go, each of its statements bounded by two server idle bounds (6 s each).
const PG_LONGER: &[(&str, Duration, &str)] =
    &[("LockBackend::evict", Duration::from_secs(17), "two idle bounds and the termination's 5 s")];

async fn redis(mode: &str, longer: &[(&str, Duration, &str)]) {
    let s = lock_redis_testing::shared_redis();
    let url = format!("{}?mode={mode}", s.url());
    every_operation_answers_in_time(&format!("redis {mode}"), &url, s.port(), connect, REDIS, longer).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_simple() {
    redis("simple", REDIS_LONGER).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_reentrant() {
    redis("reentrant", REDIS_LONGER).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_fair() {
    redis("fair", REDIS_LONGER).await;
}

async fn mysql(mode: &str, longer: &[(&str, Duration, &str)]) {
    let s = lock_mysql_testing::shared_mariadb();
    let base = s.url();
    let sep = if base.contains('?') { '&' } else { '?' };
    let url = format!("{base}{sep}mode={mode}");
    every_operation_answers_in_time(&format!("mysql {mode}"), &url, s.port(), connect, SQL, longer).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_pessimistic() {
    mysql("pessimistic", &[]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_optimistic() {
    mysql("optimistic", &[]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_get_lock() {
    mysql("get_lock", &[]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres() {
    let s = lock_postgres_testing::shared_postgres();
    every_operation_answers_in_time("postgres", &s.url(), s.port(), connect, SQL, PG_LONGER).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zookeeper() {
    let s = lock_zk_testing::shared_zk();
    let url = format!("zk://{}/", s.connect_string());
    every_operation_answers_in_time("zookeeper", &url, s.port(), connect, ZK, &[]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd() {
    let s = lock_etcd_testing::shared_etcd();
    every_operation_answers_in_time("etcd", &s.url("deadlines"), s.port(), connect, ETCD, &[]).await;
}
