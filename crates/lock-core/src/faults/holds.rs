//! The holds granted through the wrapper, and the ones the store was made to forget.

use super::Faults;
use crate::{OwnerToken, Result};

/// Most releases [`Faults::lose`] sends for one holder: a reentrant store counts nested holds,
/// and each release takes one off.
const MAX_NESTING: usize = 64;

/// How many keys the table of holds keeps an empty entry for.
const KEPT_KEYS: usize = 1024;

impl Faults {
    /// Whether a hold of `key` granted through the wrapper is still known to the wrapper (not
    /// released, refused a renewal, or forgotten).
    pub fn is_held(&self, key: &str) -> bool {
        self.shared.state.lock().holds.get(key).is_some_and(|o| !o.is_empty())
    }

    /// Waits until `key` is held through the wrapper: the point from which
    /// [`lose`](Self::lose) has a hold to forget, without polling or sleeping in a test.
    pub async fn until_held(&self, key: &str) {
        let mut granted = self.shared.granted.subscribe();
        // The sender lives as long as `self`, so this only ends with the predicate true.
        let _ = granted.wait_for(|_| self.is_held(key)).await;
    }

    /// The store forgets every hold of `key` granted through the wrapper, as a store does
    /// whose lease expired behind a paused holder, whose key was deleted, or that restarted
    /// without its data: the holds are released in the store (waiters are woken and another
    /// client may take the key), and each holder's next renewal, release, note or fence raise
    /// through the wrapper answers "not held", so its watchdog marks it lost and `lost()`
    /// fires at the next renewal (a third of the lease after the last one). Readers and
    /// permits of the key are forgotten alike. Answers how many holders the store still had.
    ///
    /// # Errors
    /// The wrapped store's error from a release (faults armed on the wrapper do not apply);
    /// the holds are then still marked lost, and any left in the store end with their lease.
    pub async fn lose(&self, key: &str) -> Result<usize> {
        let owners: Vec<OwnerToken> = {
            let mut s = self.shared.state.lock();
            let owners: Vec<_> = s.holds.remove(key).unwrap_or_default().into_keys().collect();
            for &owner in &owners {
                s.lost.insert((key.to_owned(), owner));
            }
            owners
        };
        let mut had = 0;
        for owner in owners {
            for nested in 0..MAX_NESTING {
                if !self.inner.release(key, owner).await? {
                    break;
                }
                if nested == 0 {
                    had += 1;
                }
            }
        }
        Ok(had)
    }

    /// The keys held through the wrapper, as the backend sees them: a semaphore, a read-write
    /// lock or a latch hold parts under keys derived from its name (what `dlock list` shows).
    pub fn held_keys(&self) -> Vec<String> {
        let s = self.shared.state.lock();
        s.holds.iter().filter(|(_, owners)| !owners.is_empty()).map(|(k, _)| k.clone()).collect()
    }

    /// The store forgets every hold granted through the wrapper, as one that restarted without
    /// its data: [`lose`](Self::lose) for each of [`held_keys`](Self::held_keys). Answers how
    /// many holders the store still had.
    ///
    /// # Errors
    /// As [`lose`](Self::lose); the keys after the failing one are not forgotten.
    pub async fn lose_all(&self) -> Result<usize> {
        let mut had = 0;
        for key in self.held_keys() {
            had += self.lose(&key).await?;
        }
        Ok(had)
    }

    pub(super) fn granted(&self, key: &str, owner: OwnerToken) {
        {
            let mut s = self.shared.state.lock();
            // The wrapper sits on measured paths (the bench counts through it): a grant of a key
            // seen before allocates nothing.
            if !s.lost.is_empty() {
                s.lost.remove(&(key.to_owned(), owner));
            }
            match s.holds.get_mut(key) {
                Some(owners) => *owners.entry(owner).or_default() += 1,
                None => {
                    s.holds.insert(key.to_owned(), [(owner, 1)].into());
                }
            }
        }
        self.shared.granted.send_modify(|n| *n += 1);
    }

    /// The store answered whether `owner` held `key` (a release, a renewal): a hold it no
    /// longer has is forgotten here too.
    pub(super) fn answered(&self, key: &str, owner: OwnerToken, held: bool, release: bool) {
        let mut s = self.shared.state.lock();
        let Some(owners) = s.holds.get_mut(key) else { return };
        match owners.get_mut(&owner) {
            // A release of a nested hold, or a confirmed renewal: the hold stays.
            Some(n) if held && release && *n > 1 => *n -= 1,
            Some(_) if held && !release => {}
            Some(_) => {
                owners.remove(&owner);
                // A key's entry outlives its last hold, so that holding it again allocates
                // nothing; past `KEPT_KEYS` keys the empty entries go.
                if owners.is_empty() && s.holds.len() > KEPT_KEYS {
                    s.holds.retain(|_, owners| !owners.is_empty());
                }
            }
            None => {}
        }
    }

    /// Whether the store forgot `owner`'s hold of `key`; `forget` clears the mark (a release).
    pub(super) fn is_lost(&self, key: &str, owner: OwnerToken, forget: bool) -> bool {
        let mut s = self.shared.state.lock();
        if s.lost.is_empty() {
            return false;
        }
        let id = (key.to_owned(), owner);
        match forget {
            true => s.lost.remove(&id),
            false => s.lost.contains(&id),
        }
    }
}
