//! An attempt's turn at the lock file: taken if no live waiter stands before it and the lock
//! is free, and nothing taken once its attempt is gone.

use std::fs::File;
use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::driver::Held;
use crate::files::{Grabbed, KeyFiles, grab};
use crate::queue::Ahead;

/// What an attempt in line found.
pub(crate) enum Turn {
    /// The lock, with its fence.
    Taken(Held, u64),
    /// First in line, the lock held; the lock file kept open for the next attempt.
    First(Option<File>),
    /// Behind the live waiter with this ticket; the lock file kept, if any.
    Behind(u64, Option<File>),
    /// The attempt was dropped before the grab: nothing taken.
    Abandoned,
}

/// Set once the attempt that started a grab is dropped. A grab runs to its end on a blocking
/// thread whatever becomes of its attempt; one that starts late (a loaded machine) would take
/// the lock for a waiter that is gone, its ticket too, out of turn and until its result is
/// dropped: the holder's release would find the next taker refused for that while.
#[derive(Debug, Clone, Default)]
pub(crate) struct Abandoned(Arc<AtomicBool>);

impl Abandoned {
    pub(crate) fn is_set(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }
}

/// Sets its [`Abandoned`] when dropped: with the attempt's future, at any await.
pub(crate) struct AbandonOnDrop(pub(crate) Abandoned);

impl Drop for AbandonOnDrop {
    fn drop(&mut self) {
        (self.0).0.store(true, Ordering::Release);
    }
}

/// Take the lock if no live waiter stands in line before `mine` (before anyone, for an attempt
/// that does not wait in line) and it is free, on `kept` (see `grab`).
pub(crate) fn turn(
    files: &KeyFiles,
    mine: Option<u64>,
    kept: Option<File>,
    abandoned: &Abandoned,
) -> io::Result<Turn> {
    if let Ahead::Behind(n) = files.line.ahead(mine)? {
        return Ok(Turn::Behind(n, kept));
    }
    if abandoned.is_set() {
        return Ok(Turn::Abandoned);
    }
    Ok(match grab(files, kept)? {
        Grabbed::Taken(held, fence) => Turn::Taken(held, fence),
        Grabbed::Held(file) => Turn::First(file),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_abandoned_turn_takes_a_free_lock_not() {
        let dir = tempfile::tempdir().expect("dir");
        let files = KeyFiles::new(dir.path(), "k");
        let gone = Abandoned::default();
        drop(AbandonOnDrop(gone.clone()));
        assert!(matches!(turn(&files, Some(1), None, &gone).expect("turn"), Turn::Abandoned));
        let live = Abandoned::default();
        assert!(matches!(turn(&files, Some(1), None, &live).expect("turn"), Turn::Taken(..)));
    }
}
