//! The checks every checker makes of a run's holds alike: accepted writes of two holders at
//! once, and fences repeated or out of real-time order.

use std::collections::HashSet;

use tokio::time::Instant;

use super::WriteOutcome;

/// Pairs of holds of different clients whose writes were both accepted inside the time they
/// overlapped: two holders acting at once. `holds` sorted by acquisition; `view` gives a
/// hold's client, acquisition, release and write. Two holds overlap on [later acquisition,
/// earlier release].
pub(crate) fn overlapping_writes<H>(
    holds: &[H],
    view: impl Fn(&H) -> (usize, Instant, Instant, Option<(Instant, WriteOutcome)>),
) -> usize {
    let mut violations = 0;
    for (i, a) in holds.iter().enumerate() {
        let (ca, _, released_a, write_a) = view(a);
        let Some((wa, WriteOutcome::Accepted)) = write_a else { continue };
        for b in &holds[i + 1..] {
            let (cb, acquired_b, released_b, write_b) = view(b);
            if acquired_b >= released_a {
                break;
            }
            let Some((wb, WriteOutcome::Accepted)) = write_b else { continue };
            let (start, end) = (acquired_b, released_a.min(released_b));
            if cb != ca && (start..=end).contains(&wa) && (start..=end).contains(&wb) {
                violations += 1;
            }
        }
    }
    violations
}

/// The fence faults of one key's grants, each `(attempt began, attempt returned, fence)`:
/// how many fences an earlier grant already carried, and how many grants carried a fence not
/// above that of a grant returned before their attempt began (real-time order: the counter
/// must have been drawn later). Grants without a fence are left out.
pub(crate) fn fence_faults(grants: &[(Instant, Instant, Option<u64>)]) -> (usize, usize) {
    let mut seen = HashSet::new();
    let repeated = grants.iter().filter_map(|g| g.2).filter(|f| !seen.insert(*f)).count();
    let mut by_return: Vec<_> = grants.iter().filter_map(|&(_, ret, f)| Some((ret, f?))).collect();
    by_return.sort_unstable();
    let mut by_start: Vec<_> = grants.iter().filter_map(|&(start, _, f)| Some((start, f?))).collect();
    by_start.sort_unstable();
    // A sweep: every grant against the largest fence returned before it began.
    let (mut done, mut top, mut regressions) = (0, None, 0);
    for (start, fence) in by_start {
        while let Some(&(ret, f)) = by_return.get(done)
            && ret < start
        {
            top = top.max(Some(f));
            done += 1;
        }
        if top.is_some_and(|t| fence <= t) {
            regressions += 1;
        }
    }
    (repeated, regressions)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn fence_faults_count_repeats_and_regressions() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        // Overlapping attempts may return their fences in either order.
        let fine =
            [(at(0), at(5), Some(2)), (at(1), at(4), Some(1)), (at(6), at(7), Some(3)), (at(8), at(9), None)];
        assert_eq!(fence_faults(&fine), (0, 0));
        // 3 again: a repeat, and not above the 3 returned before it began.
        let repeat = [(at(0), at(1), Some(3)), (at(2), at(3), Some(3))];
        assert_eq!(fence_faults(&repeat), (1, 1));
        // 2 after 3 returned: a regression only.
        let back = [(at(0), at(1), Some(3)), (at(2), at(3), Some(2))];
        assert_eq!(fence_faults(&back), (0, 1));
        // A repeat between overlapping attempts is still a repeat.
        let overlap = [(at(0), at(3), Some(4)), (at(1), at(2), Some(4))];
        assert_eq!(fence_faults(&overlap), (1, 0));
    }
}
