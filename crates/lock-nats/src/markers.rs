//! The revisions of the delete markers this client saw (its own releases, and every release
//! its watch delivered), so that taking a released key again is one publish instead of three
//! (a create naming 0, refused by the marker; a read; a create naming the marker).
//!
//! Only a hint: a revision that is no longer the key's last is refused like any stale
//! expectation, and the attempt reads the key as it would have.

use std::collections::HashMap;

use lock_core::backend::Mutex;

/// At most this many keys remembered; past it the table starts again (a hint, not a cache
/// that must be complete).
const MAX: usize = 4096;

#[derive(Debug, Default)]
pub(crate) struct Markers(Mutex<HashMap<String, u64>>);

impl Markers {
    /// `key` (a bucket key) got a delete marker at `revision`.
    pub fn put(&self, key: &str, revision: u64) {
        let mut m = self.0.lock();
        if m.len() >= MAX && !m.contains_key(key) {
            m.clear();
        }
        let r = m.entry(key.to_owned()).or_insert(revision);
        *r = (*r).max(revision);
    }

    /// The revision a create of `key` should name first (taken: used once).
    pub fn take(&self, key: &str) -> u64 {
        self.0.lock().remove(key).unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_marker_is_used_once_and_the_latest_wins() {
        let m = Markers::default();
        assert_eq!(m.take("l.a"), 0, "none seen: a create names 0");
        m.put("l.a", 7);
        m.put("l.a", 5);
        assert_eq!(m.take("l.a"), 7);
        assert_eq!(m.take("l.a"), 0, "taken");
    }
}
