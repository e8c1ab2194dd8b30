//! The conformance suite on the MySQL/MariaDB backend, all three modes, against the shared private
//! mariadbd of this test binary (or `LOCK_TEST_MYSQL_URL`).
//!
//! Run: `cargo test --all-features --test stores mysql::`.

use std::sync::{Arc, Weak};
use std::time::Duration;

use lock_mysql::sqlx::mysql::{MySqlPool, MySqlPoolOptions};
use lock_mysql::{Mode, MySqlLock};
use lock_mysql_testing::shared_mariadb;
use lock_testkit::{Client, ClientFaults, Factory, FaultResult, Unsupported};

/// Builds one `MySqlLock` (own pool) per client; its faults break leases behind the holder's
/// back: `KILL CONNECTION` of the holding connection (pessimistic, named) or expiring the row
/// (optimistic).
pub struct MySqlFactory {
    mode: Mode,
    url: String,
    admin: MySqlPool,
}

impl std::fmt::Debug for MySqlFactory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Not the URL: it carries the password.
        f.debug_struct("MySqlFactory").field("mode", &self.mode).finish()
    }
}

impl MySqlFactory {
    /// A factory on the shared mariadbd (or `LOCK_TEST_MYSQL_URL`).
    pub async fn new(mode: Mode) -> Self {
        let url = lock_mysql_testing::external_url().unwrap_or_else(|| shared_mariadb().url());
        let admin = MySqlPoolOptions::new().max_connections(2).connect(&url).await.expect("admin pool");
        MySqlFactory { mode, url, admin }
    }
}

#[lock_core::async_trait]
impl Factory for MySqlFactory {
    fn label(&self) -> String {
        format!("mysql/{:?}", self.mode).to_lowercase()
    }

    async fn client(&self) -> Client {
        let lock = MySqlLock::builder()
            .url(&self.url)
            .mode(self.mode)
            .max_connections(32)
            .keepalive(Duration::from_millis(100))
            .build()
            .await
            .expect("build MySqlLock");
        let lock = Arc::new(lock);
        // Weak: a client dropped by a case (a "crashed process") must really go away.
        let faults = Admin { mode: self.mode, admin: self.admin.clone(), holder: Arc::downgrade(&lock) };
        Client::with_faults(lock, faults)
    }
}

/// The administrator's pool, aimed at one client.
struct Admin {
    mode: Mode,
    admin: MySqlPool,
    holder: Weak<MySqlLock>,
}

impl Admin {
    fn holder(&self) -> Arc<MySqlLock> {
        self.holder.upgrade().expect("the holder is still alive")
    }
}

#[lock_core::async_trait]
impl ClientFaults for Admin {
    /// Pessimistic and named: a row lock goes only with its transaction, a `GET_LOCK` only with
    /// its session, so the holding connection is killed. Optimistic: the row's lease is moved into the past.
    async fn sever(&self, key: &str) -> FaultResult {
        if self.mode != Mode::Optimistic {
            return self.cut_connection(key).await;
        }
        let sql = format!(
            "UPDATE `{}` SET expires_at = NOW(6) - INTERVAL 1 SECOND WHERE name = ? AND expires_at > NOW(6)",
            self.holder().table()
        );
        let res = lock_mysql::sqlx::query(lock_mysql::sqlx::AssertSqlSafe(sql))
            .bind(key.as_bytes())
            .execute(&self.admin)
            .await
            .expect("expire row");
        assert_eq!(res.rows_affected(), 1, "sever: no live row for {key:?}");
        Ok(())
    }

    async fn cut_connection(&self, key: &str) -> FaultResult {
        if self.mode == Mode::Optimistic {
            return Err(Unsupported::new("cut_connection", "optimistic holds keep no connection"));
        }
        let id =
            self.holder().held_connection_id(key).expect("sever: the holder holds no connection for the key");
        lock_mysql::sqlx::query("KILL CONNECTION ?")
            .bind(id)
            .execute(&self.admin)
            .await
            .expect("kill connection");
        Ok(())
    }
}

mod pessimistic {
    lock_testkit::conformance_tests!(crate::mysql::MySqlFactory::new(lock_mysql::Mode::Pessimistic).await);
    lock_testkit::primitive_tests!(crate::mysql::MySqlFactory::new(lock_mysql::Mode::Pessimistic).await);
}

mod optimistic {
    lock_testkit::conformance_tests!(crate::mysql::MySqlFactory::new(lock_mysql::Mode::Optimistic).await);
    lock_testkit::primitive_tests!(crate::mysql::MySqlFactory::new(lock_mysql::Mode::Optimistic).await);
}

mod named_lock {
    lock_testkit::conformance_tests!(crate::mysql::MySqlFactory::new(lock_mysql::Mode::NamedLock).await);
    lock_testkit::primitive_tests!(crate::mysql::MySqlFactory::new(lock_mysql::Mode::NamedLock).await);
}

/// A latch whose store stops answering (its client's connections blackholed) answers by its
/// deadlines, not by the store's timeouts (`lock_testkit::stall`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn latch_on_an_unreachable_store_answers_by_its_deadline() {
    let s = shared_mariadb();
    let connect = |url: String| async move { dlock::from_url(&url).await.expect("backend") };
    lock_testkit::stall::unreachable_latch_answers_in_time(&s.url(), s.port(), connect).await;
}
