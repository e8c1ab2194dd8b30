//! The conformance suite on the PostgreSQL backend, against the shared private postgres of
//! this test binary (or `LOCK_TEST_POSTGRES_URL`).
//!
//! Run: `cargo test --all-features --test stores postgres::`.

use std::sync::{Arc, Weak};
use std::time::Duration;

use lock_postgres::PgLock;
use lock_postgres::sqlx::postgres::{PgPool, PgPoolOptions};
use lock_postgres_testing::shared_postgres;
use lock_testkit::{Client, ClientFaults, Factory, FaultResult};

/// Builds one `PgLock` (own pool) per client; its faults end the holder's session behind its
/// back with `pg_terminate_backend` from an administrator's connection.
pub struct PgFactory {
    url: String,
    admin: PgPool,
    /// `?fencing=false` on every client (the `unfenced` module).
    unfenced: bool,
}

impl std::fmt::Debug for PgFactory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Not the URL: it carries the password.
        f.debug_struct("PgFactory").finish_non_exhaustive()
    }
}

impl PgFactory {
    /// A factory on the shared postgres (or `LOCK_TEST_POSTGRES_URL`, whose role terminates
    /// its own backends).
    pub async fn new() -> Self {
        let (url, admin_url) = match lock_postgres_testing::external_url() {
            Some(url) => (url.clone(), url),
            None => (shared_postgres().url(), shared_postgres().admin_url()),
        };
        let admin = PgPoolOptions::new().max_connections(2).connect(&admin_url).await.expect("admin pool");
        PgFactory { url, admin, unfenced: false }
    }

    /// The same, with clients built `?fencing=false`.
    pub async fn unfenced() -> Self {
        PgFactory { unfenced: true, ..Self::new().await }
    }
}

#[lock_core::async_trait]
impl Factory for PgFactory {
    fn label(&self) -> String {
        if self.unfenced { "postgres (unfenced)".into() } else { "postgres".into() }
    }

    async fn client(&self) -> Client {
        let lock = PgLock::builder()
            .url(&self.url)
            .fencing(!self.unfenced)
            .max_connections(32)
            .keepalive(Duration::from_millis(100))
            .build()
            .await
            .expect("build PgLock");
        let lock = Arc::new(lock);
        // Weak: a client dropped by a case (a "crashed process") must really go away.
        Client::with_faults(lock.clone(), Admin { admin: self.admin.clone(), holder: Arc::downgrade(&lock) })
    }
}

/// The administrator's pool, aimed at one client.
struct Admin {
    admin: PgPool,
    holder: Weak<PgLock>,
}

#[lock_core::async_trait]
impl ClientFaults for Admin {
    /// A session advisory lock goes only with its session: the holding backend is terminated.
    async fn sever(&self, key: &str) -> FaultResult {
        self.cut_connection(key).await
    }

    async fn cut_connection(&self, key: &str) -> FaultResult {
        let holder = self.holder.upgrade().expect("the holder is still alive");
        let pid = holder.held_backend_pid(key).expect("sever: the holder holds no connection for the key");
        let done: bool = lock_postgres::sqlx::query_scalar("SELECT pg_terminate_backend($1, 5000)")
            .bind(pid)
            .fetch_one(&self.admin)
            .await
            .expect("pg_terminate_backend");
        assert!(done, "backend {pid} was not terminated");
        Ok(())
    }
}

lock_testkit::conformance_tests!(crate::postgres::PgFactory::new().await);
lock_testkit::primitive_tests!(crate::postgres::PgFactory::new().await);

/// The conformance suite with grants that draw no fencing token.
mod unfenced {
    lock_testkit::conformance_tests!(crate::postgres::PgFactory::unfenced().await);
}

/// `postgres://` and `postgresql://` reach the same lock space through the facade's
/// `from_url`, and a typo'd option is a typed error naming it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_schemes_reach_one_lock_space_through_from_url() {
    let url = lock_postgres_testing::external_url().unwrap_or_else(|| shared_postgres().url());
    let rest = url.split_once("://").map_or(url.as_str(), |(_, r)| r);
    let a = dlock::from_url(&format!("postgres://{rest}")).await.expect("postgres://");
    let b = dlock::from_url(&format!("postgresql://{rest}")).await.expect("postgresql://");
    assert_eq!((a.name(), a.identity()), (b.name(), b.identity()));
    assert!(!a.identity().contains(lock_postgres_testing::POSTGRES_PASSWORD), "{}", a.identity());
    let (a, b) = (dlock::Locker::new(a), dlock::Locker::new(b));
    let k = format!("from-url-{}", dlock::OwnerToken::random());
    let g = a.try_lock(&k).await.expect("try").expect("free");
    assert!(b.try_lock(&k).await.expect("try").is_none(), "one lock space");
    g.release().await.expect("release");
    let sep = if rest.contains('?') { '&' } else { '?' };
    let e = dlock::from_url(&format!("postgres://{rest}{sep}tabel=x")).await.expect_err("typo");
    assert!(matches!(e, dlock::LockError::InvalidConfig { .. }) && e.to_string().contains("tabel"), "{e}");
}

/// A latch whose store stops answering (its client's connections blackholed) answers by its
/// deadlines, not by the store's timeouts (`lock_testkit::stall`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn latch_on_an_unreachable_store_answers_by_its_deadline() {
    let s = shared_postgres();
    let connect = |url: String| async move { dlock::from_url(&url).await.expect("backend") };
    lock_testkit::stall::unreachable_latch_answers_in_time(&s.url(), s.port(), connect).await;
}
