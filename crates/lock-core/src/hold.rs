//! The holds a [`Locker`](crate::Locker) has handed out, so that a nested acquisition (same key,
//! same owner token) joins the outer hold's lost signal: a loss seen by any guard of a hold, or
//! by the backend on any acquisition of it, reaches every guard of that hold.

use std::collections::HashMap;
use std::sync::{Arc, MutexGuard};

use crate::backend::Mutex;

use crate::{LeaseSignal, OwnerToken};

#[derive(Debug)]
struct Entry {
    key: Arc<str>,
    id: u64,
    signal: LeaseSignal,
    guards: usize,
}

/// Keyed by owner first: owner tokens are random per hold, so a lookup hashes 16 bytes and
/// allocates nothing, and the (rare) same owner on several keys is a short list.
#[derive(Debug, Default)]
struct State {
    map: HashMap<OwnerToken, Vec<Entry>>,
    next_id: u64,
}

/// Registry of live holds, shared by a `Locker` and its clones.
#[derive(Debug, Default, Clone)]
pub(crate) struct Holds {
    state: Arc<Mutex<State>>,
}

/// The signal an acquisition should carry, and which hold it belongs to.
#[derive(Debug)]
pub(crate) struct Joined {
    pub signal: LeaseSignal,
    id: Option<u64>,
}

impl Holds {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock()
    }

    /// The signal for an acquisition of `key` by `owner`: the live hold's when this owner
    /// already holds the key through this locker, a fresh one otherwise (also when the earlier
    /// hold is known lost: a new grant is a new hold). A fresh random owner (`chosen` false)
    /// cannot hold anything yet, so the registry is not even looked at.
    pub fn join(&self, key: &Arc<str>, backend: &'static str, owner: OwnerToken, chosen: bool) -> Joined {
        if chosen {
            let st = self.lock();
            let live =
                st.map.get(&owner).and_then(|v| v.iter().find(|e| e.key == *key && !e.signal.is_lost()));
            if let Some(e) = live {
                return Joined { signal: e.signal.clone(), id: Some(e.id) };
            }
        }
        Joined { signal: LeaseSignal::for_hold(key, backend), id: None }
    }

    /// Record a granted acquisition; the returned handle keeps it registered until dropped.
    pub fn granted(&self, key: &Arc<str>, owner: OwnerToken, joined: &Joined) -> HoldRef {
        let mut st = self.lock();
        let next = st.next_id;
        let list = st.map.entry(owner).or_default();
        let id = match joined.id.and_then(|id| list.iter_mut().find(|e| e.id == id)) {
            Some(e) => {
                e.guards += 1;
                e.id
            }
            None => {
                list.retain(|e| e.key != *key); // a lost hold of this key is replaced
                list.push(Entry { key: key.clone(), id: next, signal: joined.signal.clone(), guards: 1 });
                next
            }
        };
        if id == next {
            st.next_id += 1;
        }
        HoldRef { holds: self.clone(), owner, id }
    }

    /// Number of live holds (for tests).
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.lock().map.values().map(Vec::len).sum()
    }
}

/// One guard's membership in a hold.
#[derive(Debug)]
pub(crate) struct HoldRef {
    holds: Holds,
    owner: OwnerToken,
    id: u64,
}

impl Drop for HoldRef {
    fn drop(&mut self) {
        let mut st = self.holds.lock();
        if let Some(list) = st.map.get_mut(&self.owner) {
            if let Some(i) = list.iter().position(|e| e.id == self.id) {
                list[i].guards -= 1;
                if list[i].guards == 0 {
                    list.swap_remove(i);
                }
            }
            if list.is_empty() {
                st.map.remove(&self.owner);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::LostReason;

    #[test]
    fn nested_holds_share_a_signal_until_lost() {
        let holds = Holds::default();
        let owner = OwnerToken::random();
        let k: Arc<str> = Arc::from("k");
        let outer = holds.join(&k, "test", owner, false);
        let r1 = holds.granted(&k, owner, &outer);
        let inner = holds.join(&k, "test", owner, true);
        let r2 = holds.granted(&k, owner, &inner);
        inner.signal.mark_lost(LostReason::NotOwner);
        assert!(outer.signal.is_lost(), "a loss seen by the nested guard reaches the outer one");
        // A lost hold is not joined again: a new grant is a new hold.
        let again = holds.join(&k, "test", owner, true);
        assert!(!again.signal.is_lost());
        let r3 = holds.granted(&k, owner, &again);
        drop((r1, r2));
        assert_eq!(holds.len(), 1, "the old hold's guards must not unregister the new hold");
        drop(r3);
        assert_eq!(holds.len(), 0);
    }
}
