//! The semaphore kept by ZooKeeper ([`Side::Permit`]), in the node layout of Curator's
//! `InterProcessSemaphoreV2` so that its clients and ours share one count of permits: under
//! the semaphore's directory, `locks/` is a mutex (the gate: `_c_<uuid>-lock-<seq>` nodes, the
//! mutex recipe) and `leases/` holds one `EPHEMERAL_SEQUENTIAL` node per permit held.
//!
//! Only the gate's holder adds a lease, and only while fewer than the count exist, so the count
//! is never passed whoever holds the leases (Curator adds its lease first and then counts; both
//! agree since no one else adds while either holds the gate). A holder that finds the permits
//! all taken waits at the gate, watching the leases, while everyone else waits in the gate's
//! queue (each behind its predecessor): a release wakes one waiter, never the herd. A permit is
//! one lease node: its release is one delete, its loss the node's (or the session's) end, and
//! its fence the node's czxid.
//!
//! Our lease names carry the permit's slot, `_c_<uuid>-s<slot>-lease-<seq>`: Curator reads no
//! lease names, and the gate's holder picks the lowest slot no lease names. Curator's leases
//! name none; they count against the permits all the same.

use std::sync::Arc;

use lock_core::backend::queue as lock_queue;
use lock_core::backend::{AcquireRequest, Attempt, Grant, PermitInfo};
use lock_core::{FencingToken, Result};
use tokio::time::Instant;
use zookeeper_client as zk;

use crate::cleanup::{self, Node};
use crate::error::{lock_error, temporary};
use crate::keys::leases_dir;
use crate::queue::{Entry, Queue};
use crate::session::Inner;

/// What follows the slot in the name of our lease nodes, before the sequence (Curator's
/// lease name).
const LEASE_NAME: &str = "-lease-";

/// The slot our lease node `name` names (`_c_<uuid>-s<slot>-lease-<seq>`); `None` for a
/// Curator lease.
fn slot_of(name: &str) -> Option<u32> {
    let rest = name.strip_prefix("_c_")?.get(36..)?.strip_prefix("-s")?;
    let (slot, tail) = rest.split_once(LEASE_NAME)?;
    (!tail.is_empty() && tail.bytes().all(|b| b.is_ascii_digit())).then(|| slot.parse().ok())?
}

/// The lowest slot below `of` that none of `leases` names.
fn free_slot(leases: &[String], of: u32) -> u32 {
    let taken: Vec<u32> = leases.iter().filter_map(|l| slot_of(l)).collect();
    (0..of).find(|s| !taken.contains(s)).unwrap_or(of.saturating_sub(1))
}

/// A listing of the leases' directory, where a missing directory has no leases.
fn leases_of(listed: std::result::Result<Vec<String>, zk::Error>) -> Result<Vec<String>> {
    match listed {
        Ok(leases) => Ok(leases),
        Err(zk::Error::NoNode) => Ok(Vec::new()),
        Err(e) => Err(lock_error(e)),
    }
}

impl Inner {
    /// One permit of `of`: nest, or hold the gate until fewer than `of` leases exist (until
    /// `req.wait_until`), add ours with the lowest free slot and leave the gate.
    pub async fn acquire_permit(self: &Arc<Self>, req: &AcquireRequest<'_>, of: u32) -> Result<Attempt> {
        // A permit's grant names its slot, which a nested acquisition does not know: the core
        // gives a grant without one back, so nesting only ever releases what it took.
        let queue = Queue(self);
        if let Some(nested) = lock_queue::nested(&queue, req) {
            return Ok(nested);
        }
        let mut gate = match lock_queue::first(&queue, req).await? {
            Ok(gate) => gate,
            Err(left) => return Ok(left),
        };
        let client = gate.session.client.clone();
        let dir = leases_dir(&self.dir(req.key));
        let listed = match gate.leases.take() {
            Some(listed) => listed,
            None => client.list_children(&dir).await,
        };
        let missing = matches!(listed, Err(zk::Error::NoNode));
        let mut leases = leases_of(listed)?;
        while leases.len() >= of as usize {
            let Some(deadline) = req.wait_until.filter(|d| Instant::now() < *d) else {
                return lock_queue::QueueStore::leave(&queue, gate).await;
            };
            // Full: wait at the gate for a release, watching the leases (only the gate's holder
            // watches them; everyone else waits in the gate's queue).
            let sent = Instant::now();
            let (listed, watch) = client.list_and_watch_children(&dir).await.map_err(lock_error)?;
            gate.session.confirm(sent);
            leases = listed;
            if leases.len() < of as usize {
                break;
            }
            // Woken by a change: the next turn lists the leases again with a new watch, one
            // request per wake-up.
            tokio::select! {
                _ = watch.changed() => {}
                () = tokio::time::sleep_until(deadline) => {
                    return lock_queue::QueueStore::leave(&queue, gate).await;
                }
            }
        }
        if missing {
            self.ensure_dir(&client, &dir).await.map_err(lock_error)?;
        }
        let slot = free_slot(&leases, of);
        self.add_lease(req, gate, &dir, slot).await
    }

    /// Add our lease with `slot` while holding `gate`, and leave the gate behind it (one write:
    /// the next holder of the gate lists the leases after our delete, so it counts ours).
    ///
    /// The create is never sent twice: a lost answer fails the attempt (its cleanup deletes
    /// the node if it was made) rather than create again once the gate is gone.
    async fn add_lease(
        self: &Arc<Self>,
        req: &AcquireRequest<'_>,
        gate: Entry,
        dir: &str,
        slot: u32,
    ) -> Result<Attempt> {
        let session = gate.session.clone();
        let client = &session.client;
        let unique = format!("_c_{}-s{slot}", uuid::Uuid::new_v4());
        let mut cleanup =
            cleanup::guard(client, Node::Prefix { dir: dir.to_owned(), unique: unique.clone() });
        let options = zk::CreateMode::EphemeralSequential.with_acls(self.acls());
        let sent = Instant::now();
        let prefix = format!("{dir}/{unique}{LEASE_NAME}");
        let created = client.create(&prefix, &[], &options);
        // A child watch on the leases: a holder's first watch of its own node, as a mutex
        // holder's is its directory's (see `watch_own_node`).
        let listed = client.list_and_watch_children(dir);
        gate.leave_behind(&self.runtime);
        let (stat, seq) = created.await.map_err(|e| match e {
            // Reaped as an empty container since we listed it: the next attempt makes it again.
            zk::Error::NoNode => temporary("the semaphore's leases directory vanished"),
            e => lock_error(e),
        })?;
        session.confirm(sent);
        let path = format!("{dir}/{unique}{LEASE_NAME}{seq}");
        cleanup::found(&mut cleanup, client, path.clone());
        let dir_watch = listed.await.ok().map(|(_, watch)| watch);
        cleanup.disarm();
        self.record_hold(req, &session, path, stat.czxid, dir_watch);
        // A created node's czxid is a zxid: never negative.
        let fence = FencingToken(u64::try_from(stat.czxid).unwrap_or(0));
        Ok(Attempt::Acquired(Grant { fence, lease: None, slot: Some(slot) }))
    }

    /// The permits held in the semaphore at `dir`: how many (Curator's among them), and ours
    /// by slot with their fences.
    pub(crate) async fn inspect_permits(
        &self,
        client: &zk::Client,
        dir: &str,
    ) -> Result<(usize, Vec<PermitInfo>)> {
        let dir = leases_dir(dir);
        let leases = leases_of(client.list_children(&dir).await)?;
        // Ours only: Curator's leases name no slot, and their data is the client's address.
        let ours: Vec<(u32, &String)> = leases.iter().filter_map(|l| Some((slot_of(l)?, l))).collect();
        let reads: Vec<_> = ours.iter().map(|(_, l)| client.get_data(&format!("{dir}/{l}"))).collect();
        let mut permits = Vec::new();
        for ((slot, lease), read) in ours.into_iter().zip(reads) {
            // Released since the listing: no longer held.
            let Ok((data, stat)) = read.await else { continue };
            let fence = FencingToken(u64::try_from(stat.czxid).unwrap_or(0));
            let holder = crate::note::decode(data, stat.version);
            permits.push(PermitInfo::new(slot, fence, None, lease.clone()).with_holder(holder));
        }
        permits.sort_by_key(|p| p.slot);
        Ok((leases.len(), permits))
    }
}

#[cfg(test)]
mod tests {
    use super::{free_slot, slot_of};

    #[test]
    fn our_lease_names_carry_their_slot_and_curators_none() {
        let ours = "_c_0f2c0a57-5fd4-4d6b-9a38-3b3c4f5e6a7b-s2-lease-0000000003";
        assert_eq!(slot_of(ours), Some(2));
        assert_eq!(slot_of("_c_0f2c0a57-5fd4-4d6b-9a38-3b3c4f5e6a7b-s17-lease-0000000010"), Some(17));
        for other in [
            "_c_0f2c0a57-5fd4-4d6b-9a38-3b3c4f5e6a7b-lease-0000000003",
            "_c_0f2c0a57-5fd4-4d6b-9a38-3b3c4f5e6a7b-s2-lease-",
            "_c_0f2c0a57-5fd4-4d6b-9a38-3b3c4f5e6a7b-sx-lease-0000000001",
            "lease-0000000001",
        ] {
            assert_eq!(slot_of(other), None, "{other}");
        }
        let leases = [ours.to_owned(), "_c_0f2c0a57-5fd4-4d6b-9a38-3b3c4f5e6a7b-lease-0000000004".to_owned()];
        assert_eq!(free_slot(&leases, 3), 0);
        let leases =
            ["_c_0f2c0a57-5fd4-4d6b-9a38-3b3c4f5e6a7b-s0-lease-0000000001".to_owned(), ours.to_owned()];
        assert_eq!(free_slot(&leases, 3), 1);
    }
}
