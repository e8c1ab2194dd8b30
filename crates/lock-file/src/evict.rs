//! Force-unlock: a `flock` belongs to its holder's open file, which no other process can
//! unlock, so a hold is taken away the only way there is: its lock file is removed. Whoever
//! opens the path next makes and locks a new file, and the evicted holder's next check (every
//! `check_every`, and each renewal) finds that the path no longer names the file it locked:
//! its lost signal fires.
//!
//! Done under the counter's lock (`<stem>.fence-guard`), which every grant holds while it
//! checks that the path still names the file it locked and draws its fence (`files::draw`).
//! So the hold found here, with the fence asked for, is still the current one when its file
//! goes; a grant on the removed file, between its lock and its draw, finds the file gone and
//! opens the path again; and every later grant draws from the same counter, above the evicted
//! fence.

use std::fs::{File, TryLockError};
use std::io;

use crate::files::{KeyFiles, lock_counter, read_fence, recorded_fence};

/// Take away the dlock hold of `files`' key whose fence is `fence`: `false` when the key is
/// not held with that fence (free, passed on, or held by a process that is not dlock, such as
/// `flock(1)`, which has no fence and no lost signal to tell it).
pub(crate) fn evict(files: &KeyFiles, fence: u64) -> io::Result<bool> {
    let _guard = lock_counter(&files.fence_lock)?;
    if read_fence(files)? != fence {
        return Ok(false);
    }
    let file = match File::open(&files.lock) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(e),
    };
    // The record names this file and fence: the last grant was this file's, with `fence`.
    if recorded_fence(files, &file)? != Some(fence) {
        return Ok(false);
    }
    // And it is still locked: a holder that ended (or died) left nothing to take.
    match file.try_lock_shared() {
        Ok(()) => return Ok(false),
        Err(TryLockError::WouldBlock) => {}
        Err(TryLockError::Error(e)) => return Err(e),
    }
    // What described the hold goes first, then the lock file, whose removal wakes the waiters.
    // `<stem>.lock` too: the evicted holder locked it as well where it exists, and would keep
    // the next holder out until it noticed.
    for path in [&files.note, &files.held, &files.legacy, &files.lock] {
        match std::fs::remove_file(path) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
            _ => {}
        }
    }
    File::open(&files.dir)?.sync_all()?;
    Ok(true)
}
