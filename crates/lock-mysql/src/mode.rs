//! What [`MySqlLock`](crate::MySqlLock) asks of its mode besides the [`LockBackend`] the mode
//! is: each mode is a backend of its own (the session-bound modes through
//! [`SessionMode`](crate::session_mode::SessionMode), the optimistic mode as
//! [`Optimistic`](crate::optimistic::Optimistic)), and the handle forwards to it.

use std::sync::Arc;

use async_trait::async_trait;
use lock_core::Result;
use lock_core::backend::LockBackend;

/// One mode of [`MySqlLock`](crate::MySqlLock).
#[async_trait]
pub(crate) trait ModeBackend: LockBackend {
    /// The mode's tables and fence object (`sql/*_schema.sql`).
    fn schema(&self) -> Arc<str>;

    /// The notes table (`sql/notes_schema.sql`).
    fn notes_schema(&self) -> Arc<str>;

    /// Refuse (or, with `upgrade`, upgrade) a lock table of an older version, where the mode
    /// has had one.
    async fn check_shape(&self, table: &str, upgrade: bool) -> Result<()>;

    /// The server's id of the connection holding `key` here, in a session-bound mode.
    #[cfg(feature = "testing")]
    fn held_connection_id(&self, key: &str) -> Option<u64>;

    /// Round trips so far, background tasks included.
    #[cfg(feature = "testing")]
    fn round_trips(&self) -> u64;
}
