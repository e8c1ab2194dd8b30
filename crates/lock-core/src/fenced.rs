//! Fencing that reaches the protected data: the rule a resource applies to a writer's
//! [`FencingToken`], and an in-process resource that applies it.
//!
//! A lease can run out while its holder is paused (a GC pause, a stalled link, a suspended VM);
//! the next holder then writes, and the paused one wakes believing it still holds the lock. No
//! lock can stop that late write: only the resource can, by remembering the highest fence it
//! has admitted for a resource and refusing any lower one. The stores' helpers keep that
//! watermark beside the user's data, in the same transaction or script as the write
//! (`lock_postgres::fenced`, `lock_mysql::fenced`, `lock_redis::fenced`); [`Fenced`] keeps it
//! in memory, for a resource inside one process.
//!
//! A fence equal to the watermark is admitted: one hold may write many times.

use std::fmt;

use crate::FencingToken;
use crate::backend::Mutex;

/// A write refused because a newer holder's fence was admitted for the resource first.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StaleFence {
    resource: String,
    fence: FencingToken,
    seen: FencingToken,
}

impl StaleFence {
    /// The refusal of `fence` for `resource`, where `seen` was admitted before.
    pub fn new(resource: impl Into<String>, fence: FencingToken, seen: FencingToken) -> Self {
        Self { resource: resource.into(), fence, seen }
    }

    /// The resource the write was for.
    pub fn resource(&self) -> &str {
        &self.resource
    }

    /// The refused writer's fence.
    pub fn fence(&self) -> FencingToken {
        self.fence
    }

    /// The highest fence admitted for the resource, above [`fence`](Self::fence).
    pub fn seen(&self) -> FencingToken {
        self.seen
    }
}

impl fmt::Display for StaleFence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "stale fence for {:?}: {} was refused, {} was admitted before (the lock was lost and taken again)",
            self.resource, self.fence, self.seen
        )
    }
}

impl std::error::Error for StaleFence {}

/// Why a fenced write did not happen: refused as stale, or the store failed.
#[derive(Debug)]
pub enum FenceError<E> {
    /// A newer fence was admitted for the resource: the writer's lock was lost.
    Stale(StaleFence),
    /// The store failed; whether the watermark moved is decided by the caller's transaction.
    Store(E),
    /// The input cannot be fenced: a fence the store's column cannot hold, a resource name too
    /// long for it, or a key whose watermark cannot sit beside it. Nothing was sent.
    Invalid {
        /// What is wrong, naming the input.
        reason: String,
    },
}

impl<E> FenceError<E> {
    /// The refusal, when the write was refused as stale.
    pub fn stale(&self) -> Option<&StaleFence> {
        match self {
            Self::Stale(s) => Some(s),
            Self::Store(_) | Self::Invalid { .. } => None,
        }
    }
}

impl<E: fmt::Display> fmt::Display for FenceError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Stale(s) => s.fmt(f),
            Self::Store(e) => write!(f, "fenced write failed: {e}"),
            Self::Invalid { reason } => write!(f, "cannot fence this write: {reason}"),
        }
    }
}

impl<E: std::error::Error + 'static> std::error::Error for FenceError<E> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Stale(s) => Some(s),
            Self::Store(e) => Some(e),
            Self::Invalid { .. } => None,
        }
    }
}

impl<E> From<StaleFence> for FenceError<E> {
    fn from(s: StaleFence) -> Self {
        Self::Stale(s)
    }
}

/// `fence` as the signed 64-bit integer SQL columns and Redis counters hold (every store's
/// fences fit; a larger one is refused before anything is sent).
pub fn as_i64<E>(fence: FencingToken) -> Result<i64, FenceError<E>> {
    i64::try_from(fence.0)
        .map_err(|_| FenceError::Invalid { reason: format!("fence {fence} is above 2^63 - 1") })
}

/// The rule every fenced store applies: `fence` is admitted unless the resource's watermark,
/// as stored after this writer raised it (`max(watermark, fence)`), is above it.
pub fn judge(resource: &str, fence: FencingToken, stored: FencingToken) -> Result<(), StaleFence> {
    if stored > fence { Err(StaleFence::new(resource, fence, stored)) } else { Ok(()) }
}

/// The highest fence admitted so far for one resource.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Watermark(Option<FencingToken>);

impl Watermark {
    /// The highest fence admitted, if any.
    pub fn top(&self) -> Option<FencingToken> {
        self.0
    }

    /// Admits `fence` (raising the watermark to it) or refuses it as older than the top.
    pub fn admit(&mut self, resource: &str, fence: FencingToken) -> Result<(), StaleFence> {
        let stored = self.0.map_or(fence, |top| top.max(fence));
        judge(resource, fence, stored)?;
        self.0 = Some(stored);
        Ok(())
    }
}

/// A value inside this process that only a holder with a current fence may change.
///
/// ```
/// use lock_core::FencingToken;
/// use lock_core::fenced::Fenced;
///
/// let balance = Fenced::new("balance", 100_u64);
/// balance.write(FencingToken(7), |b| *b -= 30).unwrap();
/// // A holder paused past its lease wakes with the older fence 6: refused.
/// let late = balance.write(FencingToken(6), |b| *b -= 30).unwrap_err();
/// assert_eq!(late.seen(), FencingToken(7));
/// assert_eq!(balance.read(|b| *b), 70);
/// ```
#[derive(Debug)]
pub struct Fenced<T> {
    resource: String,
    inner: Mutex<(Watermark, T)>,
}

impl<T> Fenced<T> {
    /// `value` under the name `resource` (named in refusals), no fence admitted yet.
    pub fn new(resource: impl Into<String>, value: T) -> Self {
        Self { resource: resource.into(), inner: Mutex::new((Watermark::default(), value)) }
    }

    /// Runs `f` on the value if `fence` is not older than the highest admitted; the check and
    /// the change are one step, so no newer holder's write can come between them.
    pub fn write<R>(&self, fence: FencingToken, f: impl FnOnce(&mut T) -> R) -> Result<R, StaleFence> {
        let mut inner = self.inner.lock();
        let (mark, value) = &mut *inner;
        mark.admit(&self.resource, fence)?;
        Ok(f(value))
    }

    /// Reads the value (no fence needed).
    pub fn read<R>(&self, f: impl FnOnce(&T) -> R) -> R {
        f(&self.inner.lock().1)
    }

    /// The highest fence admitted so far.
    pub fn watermark(&self) -> Option<FencingToken> {
        self.inner.lock().0.top()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_fences_are_admitted_and_older_ones_refused() {
        let mut m = Watermark::default();
        assert_eq!(m.admit("r", FencingToken(5)), Ok(()));
        assert_eq!(m.admit("r", FencingToken(5)), Ok(()), "one hold writes twice");
        let e = m.admit("r", FencingToken(4)).expect_err("older");
        assert_eq!((e.fence(), e.seen(), e.resource()), (FencingToken(4), FencingToken(5), "r"));
        assert_eq!(m.top(), Some(FencingToken(5)), "a refusal leaves the watermark");
        assert_eq!(m.admit("r", FencingToken(9)), Ok(()));
        assert_eq!(m.top(), Some(FencingToken(9)));
    }

    #[test]
    fn a_refused_write_does_not_run() {
        let v = Fenced::new("v", 0);
        v.write(FencingToken(2), |x| *x += 1).expect("admitted");
        let mut ran = false;
        assert!(v.write(FencingToken(1), |_| ran = true).is_err());
        assert!(!ran);
        assert_eq!((v.read(|x| *x), v.watermark()), (1, Some(FencingToken(2))));
    }

    #[test]
    fn the_refusal_names_both_fences() {
        let e: FenceError<std::io::Error> = StaleFence::new("acct", FencingToken(3), FencingToken(8)).into();
        let s = e.to_string();
        assert!(s.contains("\"acct\"") && s.contains(" 3 ") && s.contains(" 8 "), "{s}");
        assert!(e.stale().is_some());
    }
}
