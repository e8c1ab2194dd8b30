//! The fenced register: the resource the workload protects. It refuses a stale token by the
//! public rule (`lock_core::fenced::Watermark`, what users' resources apply) and counts what
//! it saw (lost updates, tokens that did not increase).

use lock_core::FencingToken;
use lock_core::backend::Mutex;
use lock_core::fenced::Watermark;

/// What the register answered to a write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WriteOutcome {
    /// Stored.
    Accepted,
    /// Refused: a higher fencing token was seen before.
    Rejected,
}

#[derive(Debug, Default)]
pub(super) struct RegisterState {
    pub(super) value: u64,
    /// Highest admitted token.
    mark: Watermark,
    /// The hold that last raised or wrote with the top token.
    by: Option<u64>,
    pub(super) accepted: u64,
    pub(super) rejected: u64,
    pub(super) lost_updates: u64,
    pub(super) non_increasing: u64,
}

/// The name refusals give the register.
const RESOURCE: &str = "register";

/// A fenced read-modify-write register: the protected resource of the workload.
#[derive(Debug, Default)]
pub struct Register {
    pub(super) state: Mutex<RegisterState>,
}

impl Register {
    /// The current value, without a token (for observers).
    pub fn peek(&self) -> u64 {
        self.state.lock().value
    }

    /// Read for hold `hold`: the register remembers `fence` as the highest seen when it is, so a
    /// stale holder's later write is refused even if it comes before this holder's write.
    /// `None` when `fence` is below the highest seen.
    pub fn read(&self, hold: u64, fence: Option<FencingToken>) -> Option<u64> {
        let mut st = self.state.lock();
        if let Some(f) = fence {
            let before = st.mark.top();
            if st.mark.admit(RESOURCE, f).is_err() {
                st.rejected += 1;
                return None;
            }
            if before.is_none_or(|top| f > top) {
                st.by = Some(hold);
            }
        }
        Some(st.value)
    }

    /// Write `read + 1` for hold `hold`, as read before; refused if `fence` is below the highest
    /// seen. An accepted write whose `read` is stale is a lost update; one whose token equals
    /// the top token of another hold did not increase.
    pub fn increment(&self, hold: u64, fence: Option<FencingToken>, read: u64) -> WriteOutcome {
        let mut st = self.state.lock();
        if let Some(f) = fence {
            let before = st.mark.top();
            if st.mark.admit(RESOURCE, f).is_err() {
                st.rejected += 1;
                return WriteOutcome::Rejected;
            }
            if before == Some(f) && st.by != Some(hold) {
                st.non_increasing += 1;
            }
            st.by = Some(hold);
        }
        if st.value != read {
            st.lost_updates += 1;
        }
        st.value = read + 1;
        st.accepted += 1;
        WriteOutcome::Accepted
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn register_remembers_tokens_seen_on_reads() {
        let r = Register::default();
        assert_eq!(r.read(1, Some(FencingToken(3))), Some(0));
        assert_eq!(r.read(2, Some(FencingToken(4))), Some(0));
        assert_eq!(r.increment(1, Some(FencingToken(3)), 0), WriteOutcome::Rejected, "older than a read");
        assert_eq!(r.increment(2, Some(FencingToken(4)), 0), WriteOutcome::Accepted);
        assert_eq!(r.read(1, Some(FencingToken(3))), None);
        assert_eq!(r.peek(), 1);
    }

    #[test]
    fn register_rejects_older_tokens_and_counts_lost_updates() {
        let r = Register::default();
        assert_eq!(r.increment(1, Some(FencingToken(5)), 0), WriteOutcome::Accepted);
        assert_eq!(r.increment(2, Some(FencingToken(4)), 1), WriteOutcome::Rejected);
        assert_eq!(r.increment(3, Some(FencingToken(5)), 1), WriteOutcome::Accepted);
        assert_eq!(r.increment(4, None, 0), WriteOutcome::Accepted);
        let st = r.state.lock();
        assert_eq!((st.value, st.accepted, st.rejected), (1, 3, 1));
        assert_eq!(st.non_increasing, 1, "token 5 accepted for two holds");
        assert_eq!(st.lost_updates, 1, "hold 4 wrote on a stale read");
    }
}
