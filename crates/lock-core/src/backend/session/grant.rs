//! A lock the server just granted on a pinned connection, and what its hold counts from.

use std::time::Duration;

use tokio::time::Instant;

use super::bound::no_answer;
use super::driver::SessionDriver;
use crate::Result;
use crate::backend::{session_give_up, waited_grant_anchor};

/// A granted session lock, ready to be recorded as a hold ([`Sessions::hold`](super::Sessions::hold)).
#[derive(Debug)]
pub struct Granted<H> {
    /// The holding connection and what its hold carries.
    pub held: H,
    /// The server's id of the holding session (MySQL's `CONNECTION_ID()`, a PostgreSQL backend
    /// pid), for tests that cut it.
    pub session: u64,
    /// The grant's fencing token.
    pub fence: u64,
    /// Send time of the request whose answer granted the lock: the server's idle clock
    /// started no earlier. After a wait in the server's queue too: the grant is the waiting
    /// request's answer.
    pub sent: Instant,
    /// After a wait in the server's queue: when the granting answer arrived. `None` for a grant
    /// answered at once.
    pub answered: Option<Instant>,
}

/// What the hold of `g` counts from: its granting request's send, also after a wait answered
/// within a keep-alive period (no extra ping, so a release right after the grant is not queued
/// behind one); after a longer wait, the send of a ping that confirms the session, bounded by
/// the server's idle bound (no answer: an error, and the connection closes with `g.held`,
/// taking the lock with the session). See [`waited_grant_anchor`].
pub(crate) async fn anchor<D: SessionDriver>(
    driver: &D,
    g: &mut Granted<D::Held>,
    keepalive: Duration,
    server_idle: Duration,
) -> Result<Instant> {
    let anchor = g.answered.map_or(Some(g.sent), |arrived| waited_grant_anchor(g.sent, arrived, keepalive));
    if let Some(sent) = anchor {
        return Ok(sent);
    }
    let sent = Instant::now();
    match tokio::time::timeout_at(session_give_up(sent, server_idle), driver.ping(&mut g.held)).await {
        Ok(Ok(())) => Ok(sent),
        Ok(Err(e)) => Err(driver.classify(e)),
        Err(_) => Err(no_answer(driver.name(), "the ping confirming a grant")),
    }
}
