//! Which caller holds which side of a read-write lock, so that a caller asking for a side its
//! own hold blocks is told at once instead of waiting for itself.

use std::collections::HashMap;
use std::sync::Arc;

use crate::backend::Mutex;

/// Who asks: the tokio task running the request, or the thread for code outside any task
/// (`block_on`, where the future never leaves its thread).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
enum Caller {
    Task(tokio::task::Id),
    Thread(std::thread::ThreadId),
}

fn current() -> Caller {
    tokio::task::try_id().map_or_else(|| Caller::Thread(std::thread::current().id()), Caller::Task)
}

/// The read and write holds of one read-write lock (and its clones), by caller.
#[derive(Debug, Default)]
pub(crate) struct Holders {
    held: Mutex<HashMap<Caller, Counts>>,
}

#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Counts {
    pub(crate) reads: u32,
    pub(crate) writes: u32,
}

impl Holders {
    /// What the current caller holds.
    pub(crate) fn of_caller(&self) -> Counts {
        self.held.lock().get(&current()).copied().unwrap_or_default()
    }

    /// Notes a hold of the current caller until the mark is dropped (with the guard, wherever
    /// the guard has moved by then).
    pub(crate) fn mark(self: &Arc<Self>, write: bool) -> HolderMark {
        let caller = current();
        let mut held = self.held.lock();
        let c = held.entry(caller).or_default();
        if write {
            c.writes += 1;
        } else {
            c.reads += 1;
        }
        HolderMark { holders: self.clone(), caller, write }
    }
}

/// One hold noted in [`Holders`].
#[derive(Debug)]
pub(crate) struct HolderMark {
    holders: Arc<Holders>,
    caller: Caller,
    write: bool,
}

impl Drop for HolderMark {
    fn drop(&mut self) {
        let mut held = self.holders.held.lock();
        if let Some(c) = held.get_mut(&self.caller) {
            let n = if self.write { &mut c.writes } else { &mut c.reads };
            *n = n.saturating_sub(1);
            if c.reads == 0 && c.writes == 0 {
                held.remove(&self.caller);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn marks_count_per_caller_until_dropped() {
        let h = Arc::new(Holders::default());
        let r = h.mark(false);
        assert_eq!(h.of_caller().reads, 1);
        let other = {
            let h = h.clone();
            tokio::spawn(async move { h.of_caller().reads }).await.expect("task")
        };
        assert_eq!(other, 0, "another task holds nothing");
        drop(r);
        assert_eq!(h.of_caller().reads, 0);
        assert!(h.held.lock().is_empty());
    }
}
