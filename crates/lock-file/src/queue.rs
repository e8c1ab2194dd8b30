//! First come, first served: the waiting acquisitions of a key stand in line, and only the
//! first live one in line takes the lock when it comes free.
//!
//! A lock file alone serves nobody in order: every waiter woken by a release races for the
//! `flock`. So a waiting acquisition first takes a **ticket**, `<dir>/.queue/<stem>.<n>` (`n` in
//! 20 digits), and keeps an exclusive `flock` on it for as long as it waits. A waiter attempts
//! the lock file only when no live ticket of its key has a lower number; an attempt without a
//! wait (`try_acquire`) only when no live ticket of its key exists at all. A try never jumps a
//! line of live waiters, as on the other stores that keep one: Redis's fair mode refuses a try
//! that is not first in its queue, and ZooKeeper's try creates a node at the end of the queue
//! and holds only if that node is first.
//!
//! - **Numbers**: a ticket is one above the highest ticket of its key in the directory, drawn
//!   and created under an exclusive `flock` of the directory itself, so every new ticket is
//!   behind every waiter already in line. Like the fence counter's guard, the guard is nothing
//!   an operator's removal of a lock file (`rm dir/<key>`) takes, and a guard whose directory was removed meanwhile is
//!   taken again on the new one. Numbers start again at 1 once a key's line is empty: only
//!   their order among the waiters of the moment matters. The fence counter stays apart: a
//!   grant still draws its fence under `<stem>.fence-guard` (issue 46 point 1), whatever the
//!   line does.
//! - **One directory for every key**: one inotify watch sees every ticket come and go, and
//!   since it holds only the tickets of live waits, listing it costs what the waiters of the
//!   moment cost (a directory per key would leave one behind for every key that ever waited,
//!   and need a watch each).
//! - **Liveness**: a waiter's ticket is locked by its open file, which the kernel closes when the
//!   waiter's process exits, however it exits. A ticket anyone can lock is dead: it is skipped
//!   and removed (under the guard, and only if the path still names the file found dead, so a
//!   newer ticket of the same number is never taken for it). Probes take a shared lock, so two
//!   waiters probing one dead ticket both see it dead.
//! - **Wake-ups**: the owner opens its ticket for writing, so its exit closes it for writing and
//!   the inotify watch (`wakeups`) sees that, as it sees a ticket removed: the waiter behind a
//!   dead or departed one looks again at once, not at its fallback poll.
//! - **Cancelled waits** (deadline passed, future dropped) remove their ticket on the way out:
//!   one `unlink`, no blocking and nothing that can panic.
//! - **Bounded**: the directory holds one ticket per live waiter; tickets of finished waits are
//!   removed by their owner, those of killed waiters by the next waiter that looks. (One that
//!   cannot be removed, in a sticky directory of another user's, is skipped all the same.)
//! - **Permissions**: `.queue` is made with the lock directory's own mode, so that every user
//!   who can lock in a shared directory can queue there too.
//!
//! An acquisition on an idle key checks the line once (one listing of `.queue`, which holds
//! only the tickets of the moment) before it attempts the lock file.

use std::fs::{File, OpenOptions, TryLockError};
use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::driver::still_names;
use crate::flock::lock_until;

/// The directory of every key's tickets, in the lock directory. No key's file is named so (a
/// key's file names start with its stem, which is never empty and has no `.`).
pub(crate) const QUEUE_DIR: &str = ".queue";

/// How long a ticket draw waits for another process's draw (one listing and one create): a
/// process stopped inside one makes it an error, not a wait without end.
const GUARD_BOUND: Duration = Duration::from_secs(5);

/// The line of one key.
#[derive(Debug, Clone)]
pub(crate) struct Line {
    /// The queue directory.
    pub(crate) dir: PathBuf,
    /// The key's file-name stem.
    pub(crate) stem: String,
}

/// A ticket in a key's line, held (locked and open for writing) until dropped, which removes it.
#[derive(Debug)]
pub(crate) struct Ticket {
    path: PathBuf,
    number: u64,
    /// Closed after the ticket is removed (see `Drop`).
    file: File,
}

impl Ticket {
    /// The ticket's place in line: lower numbers are served first.
    pub(crate) fn number(&self) -> u64 {
        self.number
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        // Removed before the file closes, so that nobody sees it unlocked and takes it for the
        // ticket of a dead waiter. Not found: someone else removed it (an operator), which is
        // the same outcome.
        if let Err(e) = std::fs::remove_file(&self.path)
            && e.kind() != io::ErrorKind::NotFound
        {
            tracing::debug!(ticket = %self.path.display(), error = %e, "cannot remove a queue ticket");
        }
    }
}

/// What stands before a place in line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ahead {
    /// No live waiter.
    Clear,
    /// The live waiter with this ticket, the last before the place.
    Behind(u64),
}

/// What a probe found of a ticket.
enum Found {
    Live,
    Dead(File),
    Gone,
}

impl Line {
    pub(crate) fn new(lock_dir: &Path, stem: &str) -> Self {
        Line { dir: lock_dir.join(QUEUE_DIR), stem: stem.to_owned() }
    }

    fn path(&self, number: u64) -> PathBuf {
        self.dir.join(format!("{}.{number:020}", self.stem))
    }

    /// The ticket numbers of this key in the directory, lowest first (live or not).
    fn numbers(&self) -> io::Result<Vec<u64>> {
        let entries = match std::fs::read_dir(&self.dir) {
            Ok(e) => e,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(e),
        };
        let mut numbers = Vec::new();
        for e in entries {
            let name = e?.file_name();
            let Some((stem, n)) = name.to_str().and_then(|n| n.rsplit_once('.')) else { continue };
            if stem == self.stem
                && n.len() == 20
                && let Ok(n) = n.parse::<u64>()
            {
                numbers.push(n);
            }
        }
        numbers.sort_unstable();
        Ok(numbers)
    }

    /// Whether no live ticket stands before `mine` (before any, for an attempt without a
    /// ticket): then this attempt may take the lock; else the live ticket just before it (the
    /// one whose end it waits for). Looked at from `mine` down, so a waiter in a long line
    /// probes one ticket; dead tickets are removed once they are all that stands ahead.
    pub(crate) fn ahead(&self, mine: Option<u64>) -> io::Result<Ahead> {
        let mut dead = Vec::new();
        for n in self.numbers()?.into_iter().rev() {
            if mine.is_some_and(|m| n >= m) {
                continue;
            }
            match probe(&self.path(n))? {
                Found::Live => return Ok(Ahead::Behind(n)),
                Found::Dead(file) => dead.push((n, file)),
                Found::Gone => {}
            }
        }
        if dead.is_empty() {
            return Ok(Ahead::Clear);
        }
        self.reap(dead)
    }

    /// How many live waiters stand in line (what an inspection reports).
    pub(crate) fn live(&self) -> io::Result<usize> {
        let mut live = 0;
        for n in self.numbers()? {
            if matches!(probe(&self.path(n))?, Found::Live) {
                live += 1;
            }
        }
        Ok(live)
    }

    /// Remove the tickets found dead (highest first), under the guard: no ticket is being
    /// created meanwhile, so one that is still unlocked and still at its path is dead. One
    /// that turned out live after all (probed between its creation and its lock) stands ahead.
    fn reap(&self, dead: Vec<(u64, File)>) -> io::Result<Ahead> {
        let _guard = self.guard()?;
        let mut clear = Ahead::Clear;
        for (n, file) in dead {
            let path = self.path(n);
            match file.try_lock_shared() {
                Ok(()) => {}
                Err(TryLockError::WouldBlock) => {
                    if clear == Ahead::Clear {
                        clear = Ahead::Behind(n);
                    }
                    continue;
                }
                Err(TryLockError::Error(e)) => return Err(e),
            }
            if !still_names(&path, &file)? {
                continue;
            }
            tracing::debug!(ticket = %path.display(), "removing the queue ticket of a dead waiter");
            match std::fs::remove_file(&path) {
                Err(e) if e.kind() != io::ErrorKind::NotFound => {
                    // Dead all the same: skipped by every look, at the cost of one probe.
                    tracing::debug!(ticket = %path.display(), error = %e, "cannot remove a dead waiter's ticket");
                }
                _ => {}
            }
        }
        Ok(clear)
    }

    /// Take a ticket at the end of the line.
    pub(crate) fn enqueue(&self) -> io::Result<Ticket> {
        let _guard = self.guard()?;
        let number = self.numbers()?.last().map_or(1, |n| n + 1);
        let path = self.path(number);
        let file = OpenOptions::new().write(true).create_new(true).open(&path)?;
        // Dropped on failure: the ticket goes again.
        let ticket = Ticket { path, number, file };
        // Only a probe can hold it now, for one system call.
        lock_until(&ticket.file, Instant::now() + GUARD_BOUND)?;
        Ok(ticket)
    }

    /// The exclusive lock of the queue directory, under which tickets are drawn and reaped.
    fn guard(&self) -> io::Result<File> {
        let until = Instant::now() + GUARD_BOUND;
        loop {
            let dir = match File::open(&self.dir) {
                Ok(d) => d,
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    make_dir(&self.dir)?;
                    continue;
                }
                Err(e) => return Err(e),
            };
            lock_until(&dir, until)?;
            // Removed and made again meanwhile: a lock on the old one excludes no one.
            if still_names(&self.dir, &dir)? {
                return Ok(dir);
            }
        }
    }
}

/// Make the queue directory `dir` (if missing) with the mode of the lock directory it is in:
/// a directory shared by several users' processes is shared for queueing as well.
pub(crate) fn make_dir(dir: &Path) -> io::Result<()> {
    match std::fs::create_dir(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => return Ok(()),
        Err(e) => return Err(e),
    }
    if let Some(parent) = dir.parent() {
        // Not under the umask, as the creation was.
        std::fs::set_permissions(dir, std::fs::metadata(parent)?.permissions())?;
    }
    Ok(())
}

/// Whether the waiter of the ticket at `path` lives: its lock refuses a shared one.
fn probe(path: &Path) -> io::Result<Found> {
    let file = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Found::Gone),
        Err(e) => return Err(e),
    };
    match file.try_lock_shared() {
        Ok(()) => {
            file.unlock()?;
            Ok(Found::Dead(file))
        }
        Err(TryLockError::WouldBlock) => Ok(Found::Live),
        Err(TryLockError::Error(e)) => Err(e),
    }
}
