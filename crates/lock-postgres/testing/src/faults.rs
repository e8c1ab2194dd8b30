//! PostgreSQL's own faults, beyond the process hooks every server has: rows held locked by
//! another transaction, and every session of the lock user terminated.

use std::time::Duration;

use async_trait::async_trait;
use lock_testkit::history::Nemesis;
use lock_testkit::history::nemesis::EndSessions;
use lock_testkit::server::ServerError;

use crate::postgres::{PgServer, USER};

/// Every row of a PostgreSQL table locked by another transaction (`FOR UPDATE`) for a while:
/// a statement that writes one of them (a grant's fence write) waits past its bounds and is
/// cancelled, after the advisory lock was granted.
pub struct RowsLocked<'a> {
    server: &'a PgServer,
    table: &'static str,
    hold: Duration,
    open: lock_core::backend::Mutex<Option<std::process::Child>>,
}

impl<'a> RowsLocked<'a> {
    /// `table`'s rows locked for `hold` at each strike.
    pub fn new(server: &'a PgServer, table: &'static str, hold: Duration) -> Self {
        RowsLocked { server, table, hold, open: Default::default() }
    }
}
#[async_trait]
impl Nemesis for RowsLocked<'_> {
    fn name(&self) -> String {
        format!("{} rows locked {:?}", self.table, self.hold)
    }
    async fn strike(&self) {
        let tx = format!(
            "BEGIN; SELECT count(*) FROM (SELECT 1 FROM {} FOR UPDATE) r; SELECT pg_sleep({}); COMMIT;",
            self.table,
            self.hold.as_secs_f64()
        );
        let child = self.server.spawn_as_admin(&[&tx]).expect("start the locking transaction");
        *self.open.lock() = Some(child);
    }
    async fn heal(&self) {
        let Some(child) = self.open.lock().take() else { return };
        let out = tokio::task::block_in_place(|| child.wait_with_output()).expect("the locking transaction");
        assert!(
            out.status.success(),
            "the locking transaction failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

impl std::fmt::Debug for RowsLocked<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.name())
    }
}

impl EndSessions for PgServer {
    fn how(&self) -> &'static str {
        "pg_terminate_backend"
    }
    fn end_sessions(&self) -> Result<(), ServerError> {
        self.exec_as_admin(&[&format!(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE usename = '{USER}'"
        )])
        .map(drop)
    }
}
