//! What a generative run found, and the checks of its history.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use super::Shared;
use crate::history::WriteOutcome;
use crate::history::judge::{fence_faults, overlapping_writes};

/// The result of one generative run.
#[derive(Clone, Debug, Default)]
pub struct GenReport {
    /// Backend and fault.
    pub label: String,
    /// The seed to rerun it with.
    pub seed: u64,
    /// Operations run, and the acquisitions (outer holds) among them.
    pub operations: u64,
    /// Outer holds.
    pub acquisitions: usize,
    /// `waits/tries/cut-offs/nested/nested through another client/renewals/drops/errors`.
    pub mix: [u64; 8],
    /// Overlapping holds whose writes were both accepted (must be 0).
    pub violations: usize,
    /// Holds refused by the register while they believed they held (0 unless the fault
    /// revokes holds without notice).
    pub untold: usize,
    /// Holds the server freed while the holder still had every reason to believe it held them
    /// (found at the release; 0 unless the fault revokes holds without notice).
    pub unseen: usize,
    /// Lost updates and non-increasing accepted tokens (must be 0).
    pub lost_updates: u64,
    /// Accepted tokens that did not increase (must be 0).
    pub non_increasing: u64,
    /// Grants whose fence an earlier grant of the key already carried, whatever the fault
    /// (must be 0): the register sees a repeat only when both holders write.
    pub repeated_fences: usize,
    /// Grants whose fence was not above that of a grant returned before their attempt began
    /// (must be 0).
    pub fence_regressions: usize,
    /// Holds that turned out lost.
    pub lost_holds: usize,
    /// Permanent errors (must be none).
    pub permanent: Vec<String>,
    /// How long a fresh client took to get the key after the run (`None`: it never did).
    pub liveness: Option<Duration>,
    /// Nemesis strikes.
    pub strikes: usize,
    /// Wall time.
    pub elapsed: Duration,
}

impl fmt::Display for GenReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "[{} seed={}] {} operations, {} holds in {:.1?} ({} strikes; mix {}): violations {}, untold {}, \
             unseen {}, lost updates {}, non-increasing {}, repeated fences {}, fence regressions {}, lost holds {}, \
             permanent errors {}, key free again after {:?}",
            self.label,
            self.seed,
            self.operations,
            self.acquisitions,
            self.elapsed,
            self.strikes,
            self.mix.map(|n| n.to_string()).join("/"),
            self.violations,
            self.untold,
            self.unseen,
            self.lost_updates,
            self.non_increasing,
            self.repeated_fences,
            self.fence_regressions,
            self.lost_holds,
            self.permanent.len(),
            self.liveness,
        )
    }
}

impl GenReport {
    /// One report for the keys of one run (the lanes of a soak): counts added up, the slowest
    /// liveness (none if any key stayed blocked); label, seed, strikes and time from the first.
    pub fn merge(reports: Vec<GenReport>) -> GenReport {
        let mut it = reports.into_iter();
        let mut all = it.next().unwrap_or_default();
        for r in it {
            all.operations += r.operations;
            all.acquisitions += r.acquisitions;
            all.mix.iter_mut().zip(r.mix).for_each(|(a, b)| *a += b);
            all.violations += r.violations;
            all.untold += r.untold;
            all.unseen += r.unseen;
            all.lost_updates += r.lost_updates;
            all.non_increasing += r.non_increasing;
            all.repeated_fences += r.repeated_fences;
            all.fence_regressions += r.fence_regressions;
            all.lost_holds += r.lost_holds;
            all.permanent.extend(r.permanent);
            all.liveness = all.liveness.zip(r.liveness).map(|(a, b)| a.max(b));
        }
        all
    }

    /// Panic unless the history is safe and live. `revokes`: the fault takes holds away without
    /// notice, so a holder may be refused by the fence before it learns of the loss.
    pub fn assert_ok(&self, revokes: bool) {
        let rerun = format!("{self}\nrerun with DLOCK_HISTORY_SEED={}", self.seed);
        assert!(self.acquisitions > 0, "nothing acquired: {rerun}");
        assert!(self.permanent.is_empty(), "permanent errors {:?}: {rerun}", self.permanent);
        assert_eq!((self.lost_updates, self.non_increasing), (0, 0), "{rerun}");
        assert_eq!(self.violations, 0, "two holders wrote: {rerun}");
        // Even a fault that takes holds away keeps every grant's fence new and larger: the
        // fence is what protects the resource then.
        assert_eq!(self.repeated_fences, 0, "a fence was handed out twice: {rerun}");
        assert_eq!(self.fence_regressions, 0, "a later grant's fence did not increase: {rerun}");
        if !revokes {
            assert_eq!(self.untold, 0, "a holder was overtaken before it was told: {rerun}");
            assert_eq!(self.unseen, 0, "a hold was freed behind its holder's back: {rerun}");
        }
        assert!(self.liveness.is_some(), "the key stayed blocked after the run: {rerun}");
    }
}

pub(super) fn check(
    label: String,
    seed: u64,
    shared: &Shared,
    strikes: usize,
    elapsed: Duration,
    liveness: Option<Duration>,
) -> GenReport {
    let mut holds = shared.holds.lock().clone();
    holds.sort_by_key(|h| h.acquired);
    let violations = overlapping_writes(&holds, |h| (h.client, h.acquired, h.released, h.write));
    let fences: Vec<_> = holds.iter().map(|h| (h.invoked, h.acquired, h.fence)).collect();
    let (repeated_fences, fence_regressions) = fence_faults(&fences);
    let reg = shared.register.state.lock();
    let c = &shared.counts;
    let n = |a: &AtomicU64| a.load(Ordering::Relaxed);
    GenReport {
        label,
        seed,
        operations: n(&shared.ops),
        acquisitions: holds.len(),
        mix: [&c.waits, &c.tries, &c.cut_offs, &c.nested, &c.nested_other, &c.renewals, &c.drops, &c.errors]
            .map(n),
        violations,
        untold: holds
            .iter()
            .filter(|h| h.believed && matches!(h.write, Some((_, WriteOutcome::Rejected))))
            .count(),
        unseen: holds.iter().filter(|h| h.unseen).count(),
        lost_updates: reg.lost_updates,
        non_increasing: reg.non_increasing,
        repeated_fences,
        fence_regressions,
        lost_holds: holds.iter().filter(|h| h.lost).count(),
        permanent: shared.permanent.lock().clone(),
        liveness,
        strikes,
        elapsed,
    }
}
