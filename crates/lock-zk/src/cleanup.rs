//! Deleting our own lock nodes: the cancel guard of an attempt, and the background delete of a
//! released or lost hold's node.
//!
//! A node is named by its exact path or by its attempt's unique `_c_<uuid>-` prefix, never by
//! owner token or `ephemeralOwner`: a nested acquisition reuses the token and every lock of the
//! client shares the session, so a late cleanup can only remove its own attempt's node.

use std::time::Duration;

use lock_core::backend::{Backoff, Cleanup};
use tokio::runtime::Handle;
use tokio::time::Instant;
use zookeeper_client as zk;

use crate::error::session_ended;

/// First and longest pause between retries of a delete that failed on a connection error. The
/// node blocks the key's queue until it goes or the session ends, so the delete is retried
/// until one of them happens (the core retries acquisitions, not cleanups), without hammering
/// a server that is coming back.
const RETRY_MIN: Duration = Duration::from_millis(20);
const RETRY_MAX: Duration = Duration::from_secs(1);

/// Which node to delete.
pub(crate) enum Node {
    /// The create answered: its exact path.
    Path(String),
    /// The create's answer is not known yet: the one child of `dir` starting with `unique`.
    Prefix { dir: String, unique: String },
}

/// The cancel guard of an acquisition attempt: armed before the create is sent, so a dropped
/// (cancelled) attempt, a `Held` answer or an error never leaves a node in the queue.
pub(crate) fn guard(client: &zk::Client, node: Node) -> Cleanup {
    let client = client.clone();
    Cleanup::arm("zookeeper lock attempt", move || delete_until_gone(client, node))
}

/// The attempt's node is known by its exact path now: `cleanup` deletes it with one request
/// instead of a listing and a delete.
pub(crate) fn found(cleanup: &mut Cleanup, client: &zk::Client, path: String) {
    std::mem::replace(cleanup, guard(client, Node::Path(path))).disarm();
}

/// Delete the node at `path` in the background until it is gone or the session ends. The first
/// delete is sent before this returns (the client sends a request when it is called), so it
/// goes ahead of any later request of this session.
pub(crate) fn spawn_delete(runtime: &Handle, client: zk::Client, path: String) {
    let first = client.delete(&path, None);
    runtime.spawn(async move {
        if !gone(first.await) {
            let _ = delete_until_gone(client, Node::Path(path)).await;
        }
    });
}

/// Whether a delete's outcome leaves the node gone (deleted, already gone, or its session over).
fn gone(result: Result<(), zk::Error>) -> bool {
    match result {
        Ok(()) | Err(zk::Error::NoNode) => true,
        Err(e) if session_ended(&e) => true,
        Err(e) => {
            tracing::debug!(error = %e, "lock node delete failed; retrying");
            false
        }
    }
}

/// Delete `node` until it is gone or its session ends (either frees the lock).
async fn delete_until_gone(client: zk::Client, node: Node) -> lock_core::Result<()> {
    let mut backoff = Backoff::new(RETRY_MIN, RETRY_MAX);
    let mut disconnected_since: Option<Instant> = None;
    loop {
        let result = match &node {
            Node::Path(p) => client.delete(p, None).await,
            Node::Prefix { dir, unique } => find_and_delete(&client, dir, unique).await,
        };
        if gone(result) {
            return Ok(());
        }
        tokio::time::sleep(backoff.next_delay()).await;
        match client.state() {
            s if s.is_terminated() => return Ok(()),
            // Disconnected for a whole session timeout: the server has expired the session
            // (and the node with it); stop holding the client open.
            zk::SessionState::Disconnected => {
                let since = *disconnected_since.get_or_insert_with(Instant::now);
                if since.elapsed() > client.session_timeout() {
                    return Ok(());
                }
            }
            _ => disconnected_since = None,
        }
    }
}

/// Find our node by its unique prefix (the create's reply was lost) and delete it.
async fn find_and_delete(client: &zk::Client, dir: &str, unique: &str) -> Result<(), zk::Error> {
    let children = client.list_children(dir).await?;
    match children.iter().find(|c| c.starts_with(unique)) {
        Some(name) => client.delete(&format!("{dir}/{name}"), None).await,
        None => Ok(()),
    }
}
