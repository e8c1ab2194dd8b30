//! The holds a [`Locker`](crate::Locker) has handed out, so that a nested acquisition (same key,
//! same owner token) joins the outer hold's lost signal: a loss seen by any guard of a hold, or
//! by the backend on any acquisition of it, reaches every guard of that hold.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use crate::{LeaseSignal, OwnerToken};

#[derive(Debug)]
struct Entry {
    id: u64,
    signal: LeaseSignal,
    guards: usize,
}

#[derive(Debug, Default)]
struct State {
    map: HashMap<(String, OwnerToken), Entry>,
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
        // Every critical section is a single map update, so a poisoned map is still consistent.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The signal for an acquisition of `key` by `owner`: the live hold's when this owner
    /// already holds the key through this locker, a fresh one otherwise (also when the earlier
    /// hold is known lost: a new grant is a new hold).
    pub fn join(&self, key: &str, owner: OwnerToken) -> Joined {
        let st = self.lock();
        match st.map.get(&(key.to_owned(), owner)) {
            Some(e) if !e.signal.is_lost() => Joined { signal: e.signal.clone(), id: Some(e.id) },
            _ => Joined { signal: LeaseSignal::new(), id: None },
        }
    }

    /// Record a granted acquisition; the returned handle keeps it registered until dropped.
    pub fn granted(&self, key: &str, owner: OwnerToken, joined: &Joined) -> HoldRef {
        let mut st = self.lock();
        let k = (key.to_owned(), owner);
        let id = match (joined.id, st.map.get_mut(&k)) {
            (Some(id), Some(e)) if e.id == id => {
                e.guards += 1;
                id
            }
            _ => {
                let id = st.next_id;
                st.next_id += 1;
                st.map.insert(k.clone(), Entry { id, signal: joined.signal.clone(), guards: 1 });
                id
            }
        };
        HoldRef { holds: self.clone(), key: k, id }
    }

    /// Number of live holds (for tests).
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.lock().map.len()
    }
}

/// One guard's membership in a hold.
#[derive(Debug)]
pub(crate) struct HoldRef {
    holds: Holds,
    key: (String, OwnerToken),
    id: u64,
}

impl Drop for HoldRef {
    fn drop(&mut self) {
        let mut st = self.holds.lock();
        if let Some(e) = st.map.get_mut(&self.key)
            && e.id == self.id
        {
            e.guards -= 1;
            if e.guards == 0 {
                st.map.remove(&self.key);
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
        let outer = holds.join("k", owner);
        let r1 = holds.granted("k", owner, &outer);
        let inner = holds.join("k", owner);
        let r2 = holds.granted("k", owner, &inner);
        inner.signal.mark_lost(LostReason::NotOwner);
        assert!(outer.signal.is_lost(), "a loss seen by the nested guard reaches the outer one");
        // A lost hold is not joined again: a new grant is a new hold.
        let again = holds.join("k", owner);
        assert!(!again.signal.is_lost());
        let r3 = holds.granted("k", owner, &again);
        drop((r1, r2));
        assert_eq!(holds.len(), 1, "the old hold's guards must not unregister the new hold");
        drop(r3);
        assert_eq!(holds.len(), 0);
    }
}
