//! Force-unlock across the members: which hold a quorum's fence names on each member, and its
//! eviction there.
//!
//! A quorum's hold is one owner's hold on a majority of members, each with the member's own
//! fence: the member that drew the grant's token shows it, and the others show it too where the
//! write-back raised their counter (a Redis member in simple mode shows its counter) or their
//! own smaller one (a member showing the fence it drew, a write-back that failed). So the
//! quorum shows as the fence the largest fence of the owner that holds a majority, which is the
//! grant's token, and an eviction by that fence finds the owner on the member that shows it,
//! then evicts that owner's hold on every member by the member's own fence: each member's
//! eviction is conditional on that fence, so a hold that changed since it was looked at stays.

use futures_util::future::join_all;
use tokio::time::timeout;

use super::failure::{Failure, member_result};
use super::{NAME, QuorumBackend};
use crate::backend::{LockInfo, unsupported};
use crate::{FencingToken, LockError, Result};

/// The owner holding on at least `quorum` of `held` (what each member shows of its holder),
/// and the largest fence its holds show: the grant's token.
pub(super) fn holder(held: &[&LockInfo], quorum: usize) -> Option<(String, Option<FencingToken>)> {
    let owners = held.iter().filter_map(|i| i.owner.as_ref());
    let owner = owners.clone().find(|o| owners.clone().filter(|p| p == o).count() >= quorum)?;
    let fence = held.iter().filter(|i| i.owner.as_ref() == Some(owner)).filter_map(|i| i.fence).max();
    Some((owner.clone(), fence))
}

impl QuorumBackend {
    /// [`Admin::evict`](crate::backend::Admin::evict) over the members (module docs above).
    ///
    /// Evicted when, afterwards, fewer than a quorum of members may still hold it for its
    /// owner (counting members that did not answer): its next renewal cannot reach a quorum,
    /// so it is refused. `Ok(false)` when no member shows `fence`, or its owner holds on fewer
    /// than a quorum of the members that answered (the quorum shows the key free or held by
    /// another), or every member's hold changed since it was looked at; a temporary error when
    /// failed members leave the outcome open.
    pub(super) async fn evict_hold(&self, key: &str, fence: FencingToken) -> Result<bool> {
        if !self.fencing() {
            // Without every member's fence and write-back the grant's number names no hold.
            return Err(unsupported(NAME, "force-unlock where a member has no fence or cannot raise it"));
        }
        let (n, t) = (self.members.len(), self.other_timeout());
        let answers = join_all(self.members.iter().map(|m| timeout(t, m.inspect(key)))).await;
        let infos: Vec<Option<LockInfo>> = answers.into_iter().map(|a| a.ok()?.ok()).collect();
        let answered = infos.iter().flatten().count();
        if answered < self.quorum {
            return Err(LockError::temporary(NAME, format!("only {answered} of {n} members answered")));
        }
        let named = infos.iter().flatten().find(|i| i.held && i.fence == Some(fence));
        let Some(owner) = named.and_then(|i| i.owner.clone()) else { return Ok(false) };
        // The owner's holds on each member, by the member's fence; a larger one is a later hold.
        let targets: Vec<(usize, FencingToken)> = infos
            .iter()
            .enumerate()
            .filter_map(|(i, info)| {
                let info = info.as_ref().filter(|x| x.held && x.owner.as_ref() == Some(&owner))?;
                Some((i, info.fence.filter(|f| *f <= fence)?))
            })
            .collect();
        if targets.len() < self.quorum {
            return Ok(false);
        }
        let calls = targets.iter().map(|&(i, f)| timeout(t, self.members[i].evict(key, f)));
        let (mut evicted, mut failures) = (0, Vec::new());
        for r in join_all(calls).await {
            match member_result(r, t) {
                Ok(true) => evicted += 1,
                // Released, expired or raised since it was looked at: counted as still held.
                Ok(false) => {}
                Err(f) => failures.push(f),
            }
        }
        let still = targets.len() - evicted + (n - answered);
        if evicted == 0 && failures.is_empty() {
            Ok(false)
        } else if still < self.quorum {
            Ok(true)
        } else {
            Err(self.no_quorum("evict", evicted, failures_or_unanswered(failures, n - answered)))
        }
    }
}

/// The failures to report: the members' own, or, when every target answered, the members that
/// did not answer the inspection (which may still hold).
fn failures_or_unanswered(failures: Vec<Failure>, unanswered: usize) -> Vec<Failure> {
    if failures.is_empty() && unanswered > 0 {
        let e = LockError::temporary(NAME, format!("{unanswered} members did not answer the inspection"));
        return vec![Failure::Error(e)];
    }
    failures
}
