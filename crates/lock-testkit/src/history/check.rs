//! The check of a recorded history: each hold as its holder saw it, and the report of a run,
//! counted from the holds, the register and the crashes.

use std::fmt;
use std::sync::atomic::Ordering;
use std::time::Duration;

use lock_core::FencingToken;
use tokio::time::Instant;

use super::judge::{fence_faults, overlapping_writes};
use super::{Shared, WriteOutcome};

/// One hold as the holder saw it.
#[derive(Clone, Debug)]
pub struct HoldRecord {
    /// The client that held it.
    pub client: usize,
    /// Its fencing token.
    pub fence: Option<FencingToken>,
    /// When `acquire` was called.
    pub invoked: Instant,
    /// When `acquire` returned.
    pub acquired: Instant,
    /// When the write was sent, and what the register said; `None` when the holder knew the
    /// lock was lost before writing and did not write.
    pub write: Option<(Instant, WriteOutcome)>,
    /// The lost signal had fired before the write (so the holder skipped it).
    pub lost_before_write: bool,
    /// The hold turned out lost: the signal fired, or the release reported `LeaseLost`.
    pub lost: bool,
    /// When the release returned (or the holder crashed).
    pub released: Instant,
}

/// The result of one checked run.
#[derive(Clone, Debug, Default)]
pub struct Report {
    /// Backend and schedule.
    pub label: String,
    /// Acquisitions recorded.
    pub acquisitions: usize,
    /// Failed acquire calls (temporary errors while the nemesis struck, timeouts).
    pub acquire_errors: u64,
    /// Pairs of overlapping holds whose writes were both accepted (must be 0).
    pub violations: usize,
    /// Accepted writes whose token did not exceed another hold's (must be 0).
    pub non_increasing: u64,
    /// Accepted writes based on a stale read (must be 0).
    pub lost_updates: u64,
    /// Writes the register refused because of their token.
    pub fence_rejections: u64,
    /// Grants whose fence an earlier grant already carried (must be 0, whatever the fault).
    pub repeated_fences: usize,
    /// Grants whose fence was not above that of a grant returned before their `acquire` was
    /// called (must be 0, whatever the fault).
    pub fence_regressions: usize,
    /// Holds that turned out lost.
    pub lost_holds: usize,
    /// Of those, how many knew before their write (and skipped it).
    pub told_before_write: usize,
    /// Lost holds that wrote without knowing (the signal had not fired yet at the write).
    pub unknowing_writes: usize,
    /// Of those, how many the register refused by their token.
    pub unknowing_rejected: usize,
    /// Simulated holder crashes, and the longest time from a crash to the next acquisition.
    pub crashes: usize,
    /// Longest crash-to-next-acquisition time.
    pub max_recovery: Option<Duration>,
    /// Nemesis strikes during the run.
    pub strikes: usize,
    /// Wall time of the run.
    pub elapsed: Duration,
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "[{}] {} acquisitions in {:.1?} ({} strikes, {} acquire errors): violations {}, non-increasing {}, \
             lost updates {}, fence rejections {}, repeated fences {}, fence regressions {}, lost holds {} (told before write {}, wrote unknowing {} of which fenced off {}), \
             crashes {} (max recovery {:?})",
            self.label,
            self.acquisitions,
            self.elapsed,
            self.strikes,
            self.acquire_errors,
            self.violations,
            self.non_increasing,
            self.lost_updates,
            self.fence_rejections,
            self.repeated_fences,
            self.fence_regressions,
            self.lost_holds,
            self.told_before_write,
            self.unknowing_writes,
            self.unknowing_rejected,
            self.crashes,
            self.max_recovery,
        )
    }
}

impl Report {
    /// Panic unless exclusion held: no overlapping accepted writes, no lost updates, no
    /// non-increasing tokens, and at least one acquisition.
    pub fn assert_safe(&self) {
        self.assert_fenced_safe();
        assert_eq!(self.violations, 0, "{self}");
    }

    /// Panic unless the fenced register stayed consistent: no lost updates and no
    /// non-increasing tokens, with at least one acquisition. For faults in which the server
    /// takes a hold away at once and without notice (a killed connection under a
    /// connection-bound lock, a restart that forgets every lock): the old holder can still
    /// write before it learns of the loss, so holds may overlap, and only fencing keeps the
    /// resource consistent. Overlaps are still counted in [`violations`](Self::violations).
    pub fn assert_fenced_safe(&self) {
        assert!(self.acquisitions > 0, "{self}: nothing was acquired");
        assert_eq!(self.lost_updates, 0, "{self}");
        assert_eq!(self.non_increasing, 0, "{self}");
        assert_eq!(
            (self.repeated_fences, self.fence_regressions),
            (0, 0),
            "{self}: fences repeated or regressed"
        );
    }
}

pub(super) fn check(label: String, shared: &Shared, strikes: usize, elapsed: Duration) -> Report {
    let mut holds = shared.holds.lock().clone();
    holds.sort_by_key(|h| h.acquired);
    let reg = shared.register.state.lock();
    let violations = overlapping_writes(&holds, |h| (h.client, h.acquired, h.released, h.write));
    let grants: Vec<_> = holds.iter().map(|h| (h.invoked, h.acquired, h.fence.map(|f| f.0))).collect();
    let (repeated_fences, fence_regressions) = fence_faults(&grants);
    let crashes = shared.crashes.lock().clone();
    let max_recovery =
        crashes.iter().filter_map(|c| holds.iter().find(|h| h.acquired > *c).map(|h| h.acquired - *c)).max();
    Report {
        label,
        acquisitions: holds.len(),
        acquire_errors: shared.errors.load(Ordering::Relaxed),
        violations,
        non_increasing: reg.non_increasing,
        lost_updates: reg.lost_updates,
        fence_rejections: reg.rejected,
        repeated_fences,
        fence_regressions,
        lost_holds: holds.iter().filter(|h| h.lost).count(),
        told_before_write: holds.iter().filter(|h| h.lost && h.lost_before_write).count(),
        unknowing_writes: holds.iter().filter(|h| h.lost && h.write.is_some()).count(),
        unknowing_rejected: holds
            .iter()
            .filter(|h| h.lost && matches!(h.write, Some((_, WriteOutcome::Rejected))))
            .count(),
        crashes: crashes.len(),
        max_recovery,
        strikes,
        elapsed,
    }
}
