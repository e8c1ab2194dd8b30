//! The holding connection of a session-bound store: taken out of the pool for one hold's life,
//! and closed rather than pooled unless its end was clean.

use tokio::time::Instant;

use super::warm::{Kept, Warm};
use crate::backend::DropInRuntime;

/// A pooled connection carrying (or about to carry) a session-bound lock, with the server's id
/// of its session once an answer told it. Unless the hold was ended cleanly ([`clean`]), the
/// connection is closed on drop instead of going back to the pool: the server then ends the
/// session and frees what it held, a lock or a wait.
///
/// Not a [`Cleanup`](crate::backend::Cleanup): nothing is sent on drop (closing the socket is
/// the undo, and it needs no runtime), and the connection is in use until then, so no undo
/// closure could own it.
///
/// [`clean`]: Pinned::clean
pub struct Pinned<C, Id> {
    /// The connection, dropped in a runtime even after the caller's is gone.
    pub conn: DropInRuntime<C>,
    /// The server's id of the session (MySQL's connection id, a PostgreSQL backend pid), once
    /// an answer told it: a connection kept for the next hold ([`Warm`]) keeps it, so a later
    /// wait can be cancelled from elsewhere without a statement to learn it first.
    pub session: Option<Id>,
    /// How the driver marks a pooled connection to be closed on drop.
    close: fn(&mut C),
    dirty: bool,
    /// When the statement after which nothing of ours was left on the session was sent.
    ended: Instant,
}

impl<C, Id> Pinned<C, Id> {
    /// `conn`, not clean until [`clean`](Self::clean) says so; `close` marks it to be closed
    /// when dropped (sqlx's `PoolConnection::close_on_drop`).
    pub fn new(conn: C, close: fn(&mut C)) -> Self {
        Pinned { conn: DropInRuntime::new(conn), session: None, close, dirty: true, ended: Instant::now() }
    }

    /// Nothing of ours is left on the session since the statement sent at `sent`: the
    /// connection may go back to the pool, or be kept for the next hold.
    pub fn clean(&mut self, sent: Instant) {
        self.dirty = false;
        self.ended = sent;
    }

    /// Keep this connection in `warm` when it is clean; else (or without one) drop it: back to
    /// the pool when clean, closed when not.
    pub fn keep(self, warm: Option<&Warm<Self>>)
    where
        C: Send + 'static,
        Id: Send + 'static,
    {
        if let Some(warm) = warm {
            warm.put(self);
        }
    }
}

impl<C, Id: std::fmt::Debug> std::fmt::Debug for Pinned<C, Id> {
    // Hand-written: the driver's connection need not be `Debug`, and shows nothing useful.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pinned")
            .field("session", &self.session)
            .field("dirty", &self.dirty)
            .finish_non_exhaustive()
    }
}

impl<C, Id> Kept for Pinned<C, Id> {
    fn clean_since(&self) -> Option<Instant> {
        (!self.dirty).then_some(self.ended)
    }

    fn reuse(&mut self) {
        self.dirty = true;
    }
}

impl<C, Id> Drop for Pinned<C, Id> {
    fn drop(&mut self) {
        if self.dirty {
            (self.close)(&mut self.conn);
        }
    }
}
