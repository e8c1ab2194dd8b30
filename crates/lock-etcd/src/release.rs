//! The store's side of a release (`lock_core::backend::queue::release`): the hold's key
//! deleted if it still has the hold's create revision.

use lock_core::async_trait;
use lock_core::backend::queue::{Ended, QueueEnd, QueueHold};

use crate::cleanup::{delete_if_ours, releasing};
use crate::error::{is_temporary, lock_error};
use crate::recipe::Queue;

#[async_trait]
impl QueueEnd for Queue<'_> {
    fn lives(&self, hold: &QueueHold) -> bool {
        let session = self.0.current();
        session.generation == hold.generation && !session.is_ended()
    }

    /// A delete compared with the hold's create revision, and a background delete armed before
    /// it is sent, so that a release whose answer is lost still frees the key.
    async fn end(&self, hold: &mut QueueHold) -> Ended {
        let (inner, session) = (self.0, self.0.current());
        let timeout = inner.cfg.conn.request_timeout;
        let pending = releasing(&inner.client, &hold.name, hold.fence, timeout, session.life());
        match delete_if_ours(&inner.client, &hold.name, hold.fence, timeout).await {
            Ok(true) => {
                pending.disarm();
                Ended::Deleted
            }
            Ok(false) => {
                pending.disarm();
                Ended::NotOurs
            }
            // Still ours: `pending` keeps deleting in the background until it is gone (or
            // the lease ends).
            Err(e) if is_temporary(&e) => Ended::Later(e.to_string()),
            // `pending` keeps trying while the lease lives: the key is ours either way.
            Err(e) => Ended::Failed(lock_error(e)),
        }
    }
}
