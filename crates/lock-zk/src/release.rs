//! The store's side of a release (`lock_core::backend::queue::release`): the hold's node
//! deleted by its exact path.

use lock_core::async_trait;
use lock_core::backend::queue::{Ended, QueueEnd, QueueHold};
use zookeeper_client as zk;

use crate::cleanup::spawn_delete;
use crate::error::{is_temporary, lock_error, session_ended};
use crate::queue::Queue;

#[async_trait]
impl QueueEnd for Queue<'_> {
    fn lives(&self, hold: &QueueHold) -> bool {
        let session = self.0.current();
        session.generation == hold.generation && !session.client.state().is_terminated()
    }

    /// The watch stops only once the delete is answered: the delete's own event (which the
    /// server sends ahead of the answer) consumes the watch, where stopping it first would make
    /// the client send a request to remove it; and out of the table, the hold is not taken for
    /// lost by its watch.
    async fn end(&self, hold: &mut QueueHold) -> Ended {
        let (inner, session) = (self.0, self.0.current());
        let deleted = session.client.delete(&hold.name, None).await;
        hold.stop_watch();
        match deleted {
            Ok(()) => Ended::Deleted,
            Err(zk::Error::NoNode) => Ended::NotOurs,
            Err(e) if session_ended(&e) => Ended::SessionEnded,
            Err(e) if is_temporary(&e) => {
                // Still ours: deleted in the background until it is gone or the session ends.
                spawn_delete(&inner.runtime, session.client.clone(), hold.name.clone());
                Ended::Later(e.to_string())
            }
            Err(e) => Ended::Failed(lock_error(e)),
        }
    }
}
