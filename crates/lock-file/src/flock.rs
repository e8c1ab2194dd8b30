//! Taking a file's exclusive lock with a deadline, for the short locks that guard a key's
//! counter, its record and its queue's line (a hold's own lock is the session driver's).

use std::fs::{File, TryLockError};
use std::io;
use std::time::{Duration, Instant};

/// `file`'s exclusive lock, polled until `until` (std's blocking lock has no timeout).
pub(crate) fn lock_until(file: &File, until: Instant) -> io::Result<()> {
    loop {
        match file.try_lock() {
            Ok(()) => return Ok(()),
            Err(TryLockError::WouldBlock) if Instant::now() < until => {
                std::thread::sleep(Duration::from_micros(200));
            }
            Err(TryLockError::WouldBlock) => {
                return Err(io::Error::new(io::ErrorKind::TimedOut, "another process keeps the file locked"));
            }
            Err(TryLockError::Error(e)) => return Err(e),
        }
    }
}
