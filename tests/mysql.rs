//! The conformance suite on the MySQL/MariaDB backend, both modes, against the shared private
//! mariadbd of this test binary (or `LOCK_TEST_MYSQL_URL`).
//!
//! Run: `cargo test --features mysql --test mysql`.

use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use lock_core::LockBackend;
use lock_mysql::sqlx::mysql::{MySqlPool, MySqlPoolOptions};
use lock_mysql::{Mode, MySqlLock};
use lock_testkit::Factory;
use lock_testkit::server::{external_url, shared_mariadb};

/// Builds one `MySqlLock` (own pool) per client and breaks leases behind the holder's back:
/// `KILL CONNECTION` of the holding connection (pessimistic) or expiring the row (optimistic).
pub struct MySqlFactory {
    mode: Mode,
    url: String,
    admin: MySqlPool,
    // Weak: a client dropped by a case (a "crashed process") must really go away.
    clients: Mutex<Vec<Weak<MySqlLock>>>,
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
        let url = external_url("mysql").unwrap_or_else(|| shared_mariadb().url());
        let admin = MySqlPoolOptions::new().max_connections(2).connect(&url).await.expect("admin pool");
        MySqlFactory { mode, url, admin, clients: Mutex::default() }
    }

    fn clients(&self) -> std::sync::MutexGuard<'_, Vec<Weak<MySqlLock>>> {
        self.clients.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[lock_core::async_trait]
impl Factory for MySqlFactory {
    fn label(&self) -> String {
        format!("mysql/{:?}", self.mode).to_lowercase()
    }

    async fn client(&self) -> Arc<dyn LockBackend> {
        let lock = MySqlLock::builder()
            .url(&self.url)
            .mode(self.mode)
            .max_connections(32)
            .keepalive(Duration::from_millis(100))
            .build()
            .await
            .expect("build MySqlLock");
        let lock = Arc::new(lock);
        self.clients().push(Arc::downgrade(&lock));
        lock
    }

    async fn sever(&self, holder: &Arc<dyn LockBackend>, key: &str) -> bool {
        let holder_addr = Arc::as_ptr(holder) as *const () as usize;
        let found = self
            .clients()
            .iter()
            .filter_map(Weak::upgrade)
            .find(|c| Arc::as_ptr(c) as *const () as usize == holder_addr);
        let Some(lock) = found else {
            return false;
        };
        match self.mode {
            Mode::Pessimistic => {
                let Some(id) = lock.held_connection_id(key) else { return false };
                lock_mysql::sqlx::query("KILL CONNECTION ?").bind(id).execute(&self.admin).await.is_ok()
            }
            _ => {
                let sql = format!(
                    "UPDATE `{}` SET expires_at = NOW(6) - INTERVAL 1 SECOND WHERE name = ? AND expires_at > NOW(6)",
                    lock.table()
                );
                let res = lock_mysql::sqlx::query(lock_mysql::sqlx::AssertSqlSafe(sql))
                    .bind(key.as_bytes())
                    .execute(&self.admin)
                    .await
                    .expect("expire row");
                res.rows_affected() == 1
            }
        }
    }
}

mod pessimistic {
    lock_testkit::conformance_tests!(crate::MySqlFactory::new(lock_mysql::Mode::Pessimistic).await);
}

mod optimistic {
    lock_testkit::conformance_tests!(crate::MySqlFactory::new(lock_mysql::Mode::Optimistic).await);
}
