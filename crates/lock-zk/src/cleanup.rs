//! Deleting our own lock nodes: the cancel guard of an attempt, and the background delete of a
//! released or lost hold's node.
//!
//! A node is named by its exact path or by its attempt's unique `_c_<uuid>-` prefix, never by
//! owner token or `ephemeralOwner`: a nested acquisition reuses the token and every lock of the
//! client shares the session, so a late cleanup can only remove its own attempt's node.

use std::time::Duration;

use lock_core::backend::{Cleanup, retry_cleanup, spawn_cleanup};
use tokio::runtime::Handle;
use tokio::time::Instant;
use zookeeper_client as zk;

use crate::error::session_ended;

/// How often a retried delete looks at its session's state.
const SESSION_CHECK: Duration = Duration::from_millis(50);

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
    spawn_cleanup(runtime, async move {
        if settled(first.await).is_err() {
            let _ = delete_until_gone(client, Node::Path(path)).await;
        }
    });
}

/// A delete's outcome with "the node is gone" as `Ok`: deleted, already gone, or its session
/// over (the node went with it).
fn settled(result: Result<(), zk::Error>) -> Result<(), zk::Error> {
    match result {
        Err(zk::Error::NoNode) => Ok(()),
        Err(e) if session_ended(&e) => Ok(()),
        r => r,
    }
}

/// Delete `node` until it is gone or its session ends (either frees the lock).
async fn delete_until_gone(client: zk::Client, node: Node) -> lock_core::Result<()> {
    let delete = || async {
        let result = match &node {
            Node::Path(p) => client.delete(p, None).await,
            Node::Prefix { dir, unique } => find_and_delete(&client, dir, unique).await,
        };
        settled(result)
    };
    let failing = |e: &zk::Error| {
        tracing::debug!(error = %e, "lock node delete failed; retrying");
        true
    };
    let _ = retry_cleanup(delete, failing, session_over(&client)).await;
    Ok(())
}

/// Returns once the session is over: closed or expired, or disconnected for a whole session
/// timeout (the server has expired it, and the node with it; no need to keep the client open).
async fn session_over(client: &zk::Client) {
    let mut disconnected_since: Option<Instant> = None;
    loop {
        match client.state() {
            s if s.is_terminated() => return,
            zk::SessionState::Disconnected => {
                let since = *disconnected_since.get_or_insert_with(Instant::now);
                if since.elapsed() > client.session_timeout() {
                    return;
                }
            }
            _ => disconnected_since = None,
        }
        tokio::time::sleep(SESSION_CHECK).await;
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
