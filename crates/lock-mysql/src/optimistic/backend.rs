//! The optimistic mode as a backend: its steps are in `acquire.rs` and `hold.rs`, its waiters
//! in this process's queue (`notify.rs`).

use std::sync::Arc;

use async_trait::async_trait;
use lock_core::backend::{
    AcquireRequest, Attempt, Capability, LockBackend, LockInfo, RenewItem, Subscription,
};
use lock_core::{FencingToken, OwnerToken, Result};

use super::Optimistic;
use crate::error::NAME;
use crate::mode::ModeBackend;
use lock_core::backend::{Admin, Notes, Notify, WaitQueue};

#[async_trait]
impl LockBackend for Optimistic {
    fn name(&self) -> &'static str {
        NAME
    }

    fn identity(&self) -> String {
        self.identity.clone()
    }

    fn capabilities(&self) -> Capability {
        let mut c = Capability::NONE;
        c.renew = true;
        c.fencing = true;
        c.reentrant = true;
        c
    }

    async fn try_acquire(&self, req: &AcquireRequest<'_>) -> Result<Attempt> {
        self.acquire_lease(req).await
    }

    async fn release(&self, key: &str, owner: OwnerToken) -> Result<bool> {
        self.release_lease(key, owner).await
    }

    async fn renew(&self, items: &[RenewItem<'_>]) -> Result<Vec<bool>> {
        self.renew_leases(items).await
    }

    async fn inspect(&self, key: &str) -> Result<LockInfo> {
        self.inspect_lease(key).await
    }

    // Releases in this process wake the head of this process's queue for the key (the queue
    // is kept here, not on the server: see `notify.rs`).
    lock_core::backend::hand_out!(notify, queue, notes, admin);
}

#[async_trait]
impl Notify for Optimistic {
    async fn subscribe(&self, key: &str) -> Result<Option<Subscription>> {
        // Fed by every release in this process.
        Ok(Some(self.waiters.subscribe(key)))
    }
}

#[async_trait]
impl WaitQueue for Optimistic {
    async fn leave_queue(&self, key: &str, owner: OwnerToken) -> Result<()> {
        self.waiters.leave(key, owner);
        Ok(())
    }
}

#[async_trait]
impl Notes for Optimistic {
    async fn set_note(&self, key: &str, owner: OwnerToken, note: &str) -> Result<bool> {
        self.set_lease_note(key, owner, note).await
    }

    async fn note(&self, key: &str) -> Result<Option<String>> {
        self.lease_note(key).await
    }
}

#[async_trait]
impl Admin for Optimistic {
    async fn list(&self, _prefix: &str, _limit: usize) -> Result<Vec<String>> {
        Err(lock_core::backend::unsupported(NAME, "listing the locks held"))
    }

    async fn evict(&self, key: &str, fence: FencingToken) -> Result<bool> {
        self.evict_lease(key, fence).await
    }
}

#[async_trait]
impl ModeBackend for Optimistic {
    fn schema(&self) -> Arc<str> {
        self.sql.schema.clone()
    }

    fn notes_schema(&self) -> Arc<str> {
        self.sql.notes.schema.clone()
    }

    async fn check_shape(&self, table: &str, upgrade: bool) -> Result<()> {
        self.check_table(table, upgrade).await
    }

    #[cfg(feature = "testing")]
    fn held_connection_id(&self, _key: &str) -> Option<u64> {
        None
    }

    #[cfg(feature = "testing")]
    fn round_trips(&self) -> u64 {
        self.trips.get()
    }
}
