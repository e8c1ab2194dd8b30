//! One acquisition attempt's bookkeeping: the members' answers and the undo of its grants.

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::join_all;
use tokio::time::timeout;

use super::Members;
use super::failure::{Failure, member_result};
use crate::OwnerToken;
use crate::backend::{Attempt, Cleanup, Mutex};

/// Answers of the members to one attempt.
#[derive(Default)]
pub(super) struct Tally {
    pub(super) granted: usize,
    pub(super) refused: usize,
    /// Largest member fence and the first member that drew it.
    pub(super) top: Option<(u64, usize)>,
    /// Each granting member and its fence.
    pub(super) grants: Vec<(usize, u64)>,
    pub(super) min_lease: Option<Duration>,
    pub(super) hint: Option<Duration>,
    pub(super) failures: Vec<Failure>,
}

impl Tally {
    pub(super) fn record(&mut self, i: usize, r: Result<Attempt, Failure>, undo: &Undo) {
        match r {
            Ok(Attempt::Acquired(g)) => {
                undo.set(i, true);
                self.granted += 1;
                self.grants.push((i, g.fence.0));
                if self.top.is_none_or(|(f, j)| g.fence.0 > f || (g.fence.0 == f && i < j)) {
                    self.top = Some((g.fence.0, i));
                }
                if let Some(l) = g.lease {
                    self.min_lease = Some(self.min_lease.map_or(l, |m| m.min(l)));
                }
            }
            Ok(Attempt::Held { retry_after }) => {
                self.refused += 1;
                if let Some(h) = retry_after {
                    self.hint = Some(self.hint.map_or(h, |m| m.min(h)));
                }
            }
            Err(f) => self.failures.push(f),
        }
    }
}

/// Releases the members that granted an unfinished attempt. Armed before the attempt is sent;
/// if the attempt's future is dropped, the releases run in the background. Members whose
/// answer never came undo their own attempts (every backend cleans up an attempt cut off at
/// any `.await`, by that attempt's nonce).
pub(super) struct Undo {
    /// Members that answered a grant.
    pending: Arc<Mutex<Vec<bool>>>,
    /// `None` once disarmed or run.
    cleanup: Option<Cleanup>,
}

impl Undo {
    pub(super) fn arm(members: &Members, key: &str, owner: OwnerToken, t: Duration) -> Self {
        let pending = Arc::new(Mutex::new(vec![false; members.len()]));
        let (members, key, shared) = (members.clone(), key.to_owned(), pending.clone());
        let cleanup = Cleanup::arm("quorum lock attempt", move || async move {
            let pending = shared.lock().clone();
            let calls = members
                .iter()
                .zip(pending)
                .filter(|(_, p)| *p)
                .map(|(m, _)| async { (m.name(), timeout(t, m.release(&key, owner)).await) });
            for (name, r) in join_all(calls).await {
                if let Err(e) = member_result(r, t) {
                    tracing::debug!(member = name, error = %e, "undo of a quorum attempt failed; the lease frees it");
                }
            }
            Ok(())
        });
        Undo { pending, cleanup: Some(cleanup) }
    }

    pub(super) fn set(&self, member: usize, pending: bool) {
        self.pending.lock()[member] = pending;
    }

    pub(super) fn disarm(mut self) {
        if let Some(c) = self.cleanup.take() {
            c.disarm();
        }
    }

    /// Undo now; a drop midway leaves the rest to the background.
    pub(super) async fn run(mut self) {
        if let Some(c) = self.cleanup.take() {
            let _ = c.run_now().await; // failures are logged per member above
        }
    }
}

impl Drop for Undo {
    fn drop(&mut self) {
        // Every member refused (the common "held" answer): no background task to spawn.
        if !self.pending.lock().contains(&true)
            && let Some(c) = self.cleanup.take()
        {
            c.disarm();
        }
    }
}
