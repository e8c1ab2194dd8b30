//! The shared holds of the in-process table (the read side of a read-write lock, or a
//! semaphore's permits), and the mark by which a waiting exclusive request keeps new ones out.

use std::collections::HashMap;
use std::time::Duration;

use tokio::time::Instant;

use crate::backend::{LockInfo, PermitInfo};
use crate::{FencingToken, OwnerToken};

/// How long a refused exclusive request keeps new shared holds out. The table has no queue,
/// so the waiting writer renews the mark with each attempt; it retries at least every half
/// of this (its `retry_after`), and a writer that gave up blocks readers for at most this.
pub(super) const WRITER_MARK: Duration = Duration::from_millis(500);

#[derive(Debug)]
struct Reader {
    count: u32,
    expires: Instant,
    /// A permit's slot and fence.
    permit: Option<(u32, u64)>,
    /// The identity a permit's holder noted (a reader takes none).
    note: Option<String>,
}

/// The shared holds of one key.
#[derive(Debug, Default)]
pub(super) struct Readers {
    holds: HashMap<OwnerToken, Reader>,
    /// An exclusive request was refused because of these holds and still waits until then.
    writer_waits_until: Option<Instant>,
    /// The exclusive request that set the mark: the last shared hold's release wakes it by
    /// name, since a wake-up given to any other waiter (a reader the mark refuses) is lost.
    writer: Option<OwnerToken>,
    /// A shared request was refused by the mark: once the writer has come and gone, every
    /// waiter is woken, as every waiting reader can enter.
    pub(super) refused: bool,
}

/// Whom a shared hold's release wakes.
pub(super) enum Wake {
    /// Nobody: holds of this key remain and no permit came free.
    Nobody,
    /// One waiter: a permit came free, or the last hold left with no writer waiting.
    One,
    /// The writer that set the mark: the last hold left.
    Writer(OwnerToken),
    /// Every waiter: an exclusive hold that readers waited for ended.
    All,
}

/// What a shared request found.
pub(super) enum Shared {
    /// Granted; a permit's slot and fence.
    Granted(Option<(u32, u64)>),
    /// A writer waits, or every permit is held: retry after this.
    Refused(Duration),
}

impl Readers {
    fn prune(&mut self, now: Instant) {
        self.holds.retain(|_, r| r.expires > now);
    }

    /// Whether nothing in here matters any more: no live hold, no waiting writer.
    pub(super) fn is_idle(&mut self, now: Instant) -> bool {
        self.prune(now);
        self.holds.is_empty() && self.writer_waits_until.is_none_or(|u| u <= now)
    }

    /// A shared hold for `owner` (nested when it has one), unless a writer waits or, for one
    /// of `permits` permits, all are held; `fence` draws a permit's fence.
    pub(super) fn share(
        &mut self,
        owner: OwnerToken,
        lease: Duration,
        now: Instant,
        permits: Option<u32>,
        fence: impl FnOnce() -> u64,
    ) -> Shared {
        self.prune(now);
        if let Some(r) = self.holds.get_mut(&owner) {
            r.count += 1;
            r.expires = r.expires.max(now + lease);
            return Shared::Granted(r.permit);
        }
        if let Some(until) = self.writer_waits_until.filter(|u| *u > now) {
            self.refused = true;
            return Shared::Refused(until - now);
        }
        let permit = match permits {
            Some(of) => {
                let Some(slot) =
                    (0..of).find(|s| !self.holds.values().any(|r| r.permit.is_some_and(|p| p.0 == *s)))
                else {
                    let first_end = self.holds.values().map(|r| r.expires).min().unwrap_or(now);
                    return Shared::Refused((first_end - now).min(WRITER_MARK));
                };
                Some((slot, fence()))
            }
            None => None,
        };
        self.holds.insert(owner, Reader { count: 1, expires: now + lease, permit, note: None });
        Shared::Granted(permit)
    }

    /// `writer`'s exclusive request: `None` when no shared hold but `except`'s (an upgrading
    /// reader) is live (the writer may go ahead), else the writer's mark is set and it should
    /// retry after the returned delay.
    pub(super) fn exclude(
        &mut self,
        now: Instant,
        writer: OwnerToken,
        except: Option<OwnerToken>,
    ) -> Option<Duration> {
        self.prune(now);
        let others = self.holds.iter().filter(|(o, _)| Some(**o) != except);
        let first_end = others.map(|(_, r)| r.expires).min()?;
        self.writer_waits_until = Some(now + WRITER_MARK);
        self.writer = Some(writer);
        Some((first_end - now).min(WRITER_MARK / 2))
    }

    /// `owner`'s release: `None` when it holds nothing here, else whom to wake.
    pub(super) fn release(&mut self, owner: OwnerToken, now: Instant) -> Option<Wake> {
        self.prune(now);
        let r = self.holds.get_mut(&owner)?;
        r.count -= 1;
        if r.count > 0 {
            return Some(Wake::Nobody);
        }
        let permit = r.permit.is_some();
        self.holds.remove(&owner);
        let writer = self.writer.filter(|_| self.writer_waits_until.is_some_and(|u| u > now));
        Some(match (self.holds.is_empty(), writer) {
            (true, Some(writer)) => Wake::Writer(writer),
            (true, None) => Wake::One,
            (false, _) if permit => Wake::One,
            (false, _) => Wake::Nobody,
        })
    }

    /// Extend `owner`'s shared hold (only ever extended); whether it held one.
    pub(super) fn renew(&mut self, owner: OwnerToken, lease: Duration, now: Instant) -> bool {
        self.prune(now);
        match self.holds.get_mut(&owner) {
            Some(r) => {
                r.expires = r.expires.max(now + lease);
                true
            }
            None => false,
        }
    }

    /// Note `note` on `owner`'s live permit; whether it holds one (a reader's hold takes none).
    pub(super) fn note(&mut self, owner: OwnerToken, note: &str, now: Instant) -> bool {
        self.prune(now);
        match self.holds.get_mut(&owner) {
            Some(r) if r.permit.is_some() => {
                r.note = Some(note.to_owned());
                true
            }
            _ => false,
        }
    }

    /// The live shared holds.
    pub(super) fn count(&mut self, now: Instant) -> usize {
        self.prune(now);
        self.holds.len()
    }

    /// The live permits, by slot.
    pub(super) fn permits(&self, now: Instant) -> Vec<PermitInfo> {
        let mut out: Vec<PermitInfo> = (self.holds.iter())
            .filter_map(|(o, r)| {
                let (slot, fence) = r.permit?;
                let owner = LockInfo::short_owner(&o.to_string());
                let info = PermitInfo::new(slot, FencingToken(fence), Some(r.expires - now), owner);
                Some(info.with_holder(r.note.clone()))
            })
            .collect();
        out.sort_by_key(|p| p.slot);
        out
    }
}
