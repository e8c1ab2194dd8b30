//! The blocking file operations of an acquisition and an inspection.

use std::fs::{File, OpenOptions, TryLockError};
use std::io::{self, Read};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::driver::{Held, still_names};
use crate::flock::lock_until;
use crate::queue::Line;

/// A lock file removed between our open and our lock is retried on the new file this many
/// times before the attempt reports the key held.
const REOPENS: usize = 3;

/// The files of one key in one directory.
#[derive(Debug, Clone)]
pub(crate) struct KeyFiles {
    /// `<dir>/<stem>`: the file `flock(1)` takes for the same path, so they exclude each other.
    pub(crate) lock: PathBuf,
    /// `<dir>/<stem>.lock`, the lock file of earlier versions (see `grab`).
    pub(crate) legacy: PathBuf,
    /// `<dir>/<stem>.held`: the fence of the dlock hold and the inode it locked (see `draw`).
    pub(crate) held: PathBuf,
    pub(crate) fence: PathBuf,
    pub(crate) fence_tmp: PathBuf,
    /// The counter's own lock: see `next_fence`.
    pub(crate) fence_lock: PathBuf,
    pub(crate) note: PathBuf,
    pub(crate) dir: PathBuf,
    /// The key's waiters in line (`queue`).
    pub(crate) line: Line,
}

impl KeyFiles {
    pub(crate) fn new(dir: &Path, stem: &str) -> Self {
        let at = |ext: &str| dir.join(format!("{stem}.{ext}"));
        KeyFiles {
            lock: dir.join(stem),
            legacy: at("lock"),
            held: at("held"),
            fence: at("fence"),
            fence_tmp: at("fence.tmp"),
            fence_lock: at("fence-guard"),
            note: at("note"),
            dir: dir.to_owned(),
            line: Line::new(dir, stem),
        }
    }
}

/// What an attempt on the lock file found.
pub(crate) enum Grabbed {
    /// The lock, with its fence.
    Taken(Held, u64),
    /// Another open file holds it (a dlock holder, or any other process's `flock`, such as
    /// `flock(1)` on the same path). The lock file, still open when the path names it: a
    /// waiter keeps it for its next attempt (see `wakeups`: closing it would wake the waiter).
    Held(Option<File>),
}

/// Take the key's lock if it is free, on `kept` (the file of this waiter's last attempt) while
/// the path still names it.
pub(crate) fn grab(files: &KeyFiles, kept: Option<File>) -> io::Result<Grabbed> {
    let mut kept = kept;
    for _ in 0..REOPENS {
        let file = match kept.take() {
            Some(f) if still_names(&files.lock, &f)? => f,
            _ => open_lock(&files.lock)?,
        };
        if !try_exclusive(&file)? {
            return Ok(Grabbed::Held(Some(file)));
        }
        // A dlock of an earlier version locks `<stem>.lock` instead: while that file exists,
        // a grant takes it too, so the two versions exclude each other during an upgrade.
        // Nothing makes it any more; an operator removes it once no earlier dlock runs.
        let legacy = match File::open(&files.legacy) {
            Ok(f) if try_exclusive(&f)? => Some(f),
            Ok(_) => return Ok(Grabbed::Held(None)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => None,
            Err(e) => return Err(e),
        };
        // `None`: someone removed the file after our open (an operator, or a force-unlock):
        // our lock is on a file nobody else will open, so it excludes no one. Open it again.
        let Some((fence, record)) = draw(files, &file)? else { continue };
        // Open for writing by the holder alone: its close (at release, or when the process
        // exits) is what wakes the waiters. Without write permission they poll.
        let wakes = OpenOptions::new().write(true).open(&files.lock).ok();
        let held = Held {
            file,
            legacy,
            wakes,
            path: files.lock.clone(),
            note: files.note.clone(),
            record: (files.held.clone(), record),
        };
        return Ok(Grabbed::Taken(held, fence));
    }
    Ok(Grabbed::Held(None))
}

/// How long an attempt keeps trying past inspections' shared probes of a free lock file (each
/// holds its shared lock for one system call).
const PAST_PROBES: Duration = Duration::from_millis(20);

/// Take `file`'s exclusive lock if no holder has it: `false` when one does. An inspection's
/// shared probe (`probe`) also blocks an exclusive lock for a moment; it must not make an
/// attempt on a free key answer "held", so a refusal is told apart by asking for a shared lock,
/// which only a holder's exclusive lock refuses, and the attempt is retried.
fn try_exclusive(file: &File) -> io::Result<bool> {
    let until = Instant::now() + PAST_PROBES;
    loop {
        match file.try_lock() {
            Ok(()) => return Ok(true),
            Err(TryLockError::WouldBlock) => {}
            Err(TryLockError::Error(e)) => return Err(e),
        }
        match file.try_lock_shared() {
            Err(TryLockError::WouldBlock) => return Ok(false),
            Err(TryLockError::Error(e)) => return Err(e),
            // Only probes share it. Past the bound, a stream of them counts as held: an
            // attempt answers in bounded time whatever inspects the key.
            Ok(()) if Instant::now() >= until => {
                file.unlock()?;
                return Ok(false);
            }
            Ok(()) => std::thread::yield_now(),
        }
    }
}

/// The lock file, opened read-only when it exists: closing a file opened for writing is a
/// holder's signal to the waiters (`wakeups`), which an attempt must not send.
fn open_lock(path: &Path) -> io::Result<File> {
    match File::open(path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            OpenOptions::new().read(true).write(true).create(true).truncate(false).open(path)
        }
        opened => opened,
    }
}

/// The counter after the last grant (0 before the first).
pub(crate) fn read_fence(files: &KeyFiles) -> io::Result<u64> {
    let mut text = String::new();
    match File::open(&files.fence) {
        Ok(mut f) => f.read_to_string(&mut text)?,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(e),
    };
    text.trim().parse().map_err(|_| {
        io::Error::new(io::ErrorKind::InvalidData, format!("{} holds no counter", files.fence.display()))
    })
}

/// Raise the counter by one and make it durable before the grant is answered: written to a
/// temporary file, synced, renamed over the counter and the directory synced, so a crash at any
/// point leaves the old or the new value, never a torn one, and a token once handed out is
/// never handed out again. `None` (nothing drawn) when the path no longer names `locked`.
///
/// The lock on the lock file does not serialise it: removing the lock file (an operator's way
/// to take a lock away) lets a second process lock the new file while the first still draws
/// its fence, and both would read the same value. So the counter has a lock of its own,
/// `<stem>.fence-guard`: named apart from the lock file, so that removing one (`rm dir/job`)
/// never takes it, and belonging with the counter, whose removal would restart the count
/// anyway. A force-unlock (`evict`) removes the lock file under that lock too, so the check
/// that the path still names `locked`, made under it, holds until the fence is drawn and
/// recorded: a hold is never granted on a file a force-unlock took away.
///
/// The hold's record, `<stem>.held` (its fence and the inode it locked), tells a dlock holder
/// from another process's `flock` (`flock(1)`, which draws no fence): `inspect` shows a
/// fence, and `evict` takes a hold away, only where the record names the file at the path and
/// is locked. The holder keeps it locked (the returned file) for as long as it holds, so a
/// record left by a holder that was killed is dead with it: a `flock(1)` that locks the same
/// file next is never taken for that holder.
fn draw(files: &KeyFiles, locked: &File) -> io::Result<Option<(u64, File)>> {
    let _guard = lock_counter(&files.fence_lock)?;
    if !still_names(&files.lock, locked)? {
        return Ok(None);
    }
    let next = read_fence(files)? + 1;
    let mut tmp = File::create(&files.fence_tmp)?;
    io::Write::write_all(&mut tmp, format!("{next}\n").as_bytes())?;
    tmp.sync_all()?;
    std::fs::rename(&files.fence_tmp, &files.fence)?;
    File::open(&files.dir)?.sync_all()?;
    // Not synced: a crash ends the hold it describes. The file is new unless a holder
    // that ended (or died) left it, unlocked, so only an inspection's probe can hold it.
    let mut record =
        OpenOptions::new().read(true).write(true).create(true).truncate(false).open(&files.held)?;
    lock_until(&record, Instant::now() + COUNTER_BOUND)?;
    record.set_len(0)?;
    io::Write::write_all(&mut record, format!("{next} {}\n", locked.metadata()?.ino()).as_bytes())?;
    Ok(Some((next, record)))
}

/// The fence of the live dlock hold recorded for the lock file `file` (open on the key's
/// path), or `None` when the record names another file, its holder is gone (the record is
/// unlocked), or there is none.
pub(crate) fn recorded_fence(files: &KeyFiles, file: &File) -> io::Result<Option<u64>> {
    let mut record = match File::open(&files.held) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    match record.try_lock_shared() {
        Ok(()) => return Ok(None),
        Err(TryLockError::WouldBlock) => {}
        Err(TryLockError::Error(e)) => return Err(e),
    }
    let mut text = String::new();
    record.read_to_string(&mut text)?;
    let ino = file.metadata()?.ino();
    let mut parts = text.split_whitespace().map(str::parse::<u64>);
    Ok(match (parts.next(), parts.next()) {
        (Some(Ok(fence)), Some(Ok(i))) if i == ino => Some(fence),
        _ => None,
    })
}

/// How long a grant waits for another process's draw of the same counter (one read and one
/// synced write): a process stopped inside one makes it an error, not a wait without end.
const COUNTER_BOUND: Duration = Duration::from_secs(5);

/// The counter's lock, held until the returned file is dropped. Should the guard file be removed
/// anyway, a lock on a file the path no longer names excludes no one, so it is taken again.
pub(crate) fn lock_counter(path: &Path) -> io::Result<File> {
    let until = Instant::now() + COUNTER_BOUND;
    loop {
        let file = OpenOptions::new().read(true).write(true).create(true).truncate(false).open(path)?;
        lock_until(&file, until)?;
        if still_names(path, &file)? {
            return Ok(file);
        }
    }
}

/// What an inspection found of a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Probed {
    Free,
    /// Held, with the fence of the dlock hold, or `None` for a lock file held by a process
    /// that is not dlock (`flock(1)`), or by a dlock of an earlier version (`<stem>.lock`).
    Held(Option<u64>),
}

/// Whether the key is held now (by any open file, ours included). Shared `flock`s of the
/// lock file, which are what probes take, read as free: `flock -s` on the path is not seen.
pub(crate) fn probe(files: &KeyFiles) -> io::Result<Probed> {
    let file = match File::open(&files.lock) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return probe_legacy(files),
        Err(e) => return Err(e),
    };
    match file.try_lock_shared() {
        Ok(()) => {
            file.unlock()?;
            probe_legacy(files)
        }
        Err(TryLockError::WouldBlock) => recorded_fence(files, &file).map(Probed::Held),
        Err(TryLockError::Error(e)) => Err(e),
    }
}

/// Whether a dlock of an earlier version holds the key's `<stem>.lock`.
fn probe_legacy(files: &KeyFiles) -> io::Result<Probed> {
    let file = match File::open(&files.legacy) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Probed::Free),
        Err(e) => return Err(e),
    };
    match file.try_lock_shared() {
        Ok(()) => {
            file.unlock()?;
            Ok(Probed::Free)
        }
        Err(TryLockError::WouldBlock) => Ok(Probed::Held(None)),
        Err(TryLockError::Error(e)) => Err(e),
    }
}
