//! What a session-bound store supplies: the requests the toolkit sends on a holding connection.

use std::fmt;
use std::future::Future;

use super::Link;
use crate::{LockError, Result};

/// Why a hold ends on the server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ending {
    /// Its owner released it: a clean connection may serve the next hold.
    Release,
    /// Its backend was dropped while it was held.
    Abandon,
}

/// What storing a note on a hold came to.
#[derive(Debug)]
pub enum Noted {
    /// The server answered the last request sent through the [`Link`]: `Ok(stored)`, or a
    /// refusal that left the hold as it was. Either answer confirms the session as of that
    /// request's send.
    Answered(Result<bool>),
    /// The connection died, went silent, or a request failed in a way that may have ended the
    /// hold: it is given up.
    Lost,
}

/// The driver side of a session-bound store (a hold lives exactly as long as one server
/// session): the few requests [`Sessions`](super::Sessions) sends on a holding connection.
/// Everything else (the keeper, its bounds and the lost signal, the hold table, nesting, the
/// anchor of a waited grant) is the toolkit's.
///
/// Each method counts the round trips it makes (a [`Trips`](super::Trips) of the backend's).
pub trait SessionDriver: Send + Sync + 'static {
    /// The holding connection and what its hold carries (a note's state, what the end of the
    /// hold restores). Dropped without [`end`](Self::end) succeeding, it must close the
    /// connection rather than pool it: the server then ends the session and frees the lock.
    type Held: Send + 'static;
    /// What a request fails with.
    type Error: fmt::Display + Send + 'static;

    /// The backend's name, for errors.
    fn name(&self) -> &'static str;

    /// One keep-alive request on the holding connection; its answer restarts the server's
    /// idle clock.
    fn ping(
        &self,
        held: &mut Self::Held,
    ) -> impl Future<Output = std::result::Result<(), Self::Error>> + Send;

    /// End `key`'s hold on the server. `Ok(true)` when it ended cleanly (the connection may be
    /// pooled or kept for the next hold), `Ok(false)` when the server says the session did not
    /// hold it. Dropped unfinished, `held` closes its connection.
    fn end(
        &self,
        key: &str,
        held: Self::Held,
        why: Ending,
    ) -> impl Future<Output = std::result::Result<bool, Self::Error>> + Send;

    /// Store `note` with `key`'s hold, every request sent through `link` (which bounds it as a
    /// ping is) and [`Link::confirm`]ed when its answer shows the session alive.
    fn note(
        &self,
        key: &str,
        held: &mut Self::Held,
        note: &str,
        link: &mut Link<'_>,
    ) -> impl Future<Output = Noted> + Send;

    /// `e` says the connection is gone (and the hold with its session), not that one request
    /// failed.
    fn connection_lost(&self, e: &Self::Error) -> bool;

    /// `e` as the caller's error (temporary, permanent, permission).
    fn classify(&self, e: Self::Error) -> LockError;
}
