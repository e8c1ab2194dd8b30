//! The blocking file operations of an acquisition and an inspection.

use std::fs::{File, OpenOptions, TryLockError};
use std::io::{self, Read};
use std::path::{Path, PathBuf};

use crate::driver::{Held, still_names};

/// A lock file removed between our open and our lock is retried on the new file this many
/// times before the attempt reports the key held.
const REOPENS: usize = 3;

/// The files of one key in one directory.
#[derive(Debug, Clone)]
pub(crate) struct KeyFiles {
    pub(crate) lock: PathBuf,
    pub(crate) fence: PathBuf,
    pub(crate) fence_tmp: PathBuf,
    pub(crate) note: PathBuf,
    pub(crate) dir: PathBuf,
}

impl KeyFiles {
    pub(crate) fn new(dir: &Path, stem: &str) -> Self {
        let at = |ext: &str| dir.join(format!("{stem}.{ext}"));
        KeyFiles {
            lock: at("lock"),
            fence: at("fence"),
            fence_tmp: at("fence.tmp"),
            note: at("note"),
            dir: dir.to_owned(),
        }
    }
}

/// Take the key's lock if it is free: the locked file and the next fencing token, or `None`
/// when another open file holds it.
pub(crate) fn grab(files: &KeyFiles) -> io::Result<Option<(Held, u64)>> {
    for _ in 0..REOPENS {
        let file = open_lock(&files.lock)?;
        match file.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => return Ok(None),
            Err(TryLockError::Error(e)) => return Err(e),
        }
        // Someone removed the file after our open: our lock is on a file nobody else will
        // open, so it excludes no one. Open the path again.
        if !still_names(&files.lock, &file)? {
            continue;
        }
        let fence = next_fence(files)?;
        // Open for writing by the holder alone: its close (at release, or when the process
        // exits) is what wakes the waiters. Without write permission they poll.
        let wakes = OpenOptions::new().write(true).open(&files.lock).ok();
        let held = Held { file, wakes, path: files.lock.clone(), note: files.note.clone() };
        return Ok(Some((held, fence)));
    }
    Ok(None)
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
/// never handed out again. Only the holder of the lock runs it.
fn next_fence(files: &KeyFiles) -> io::Result<u64> {
    let next = read_fence(files)? + 1;
    let mut tmp = File::create(&files.fence_tmp)?;
    io::Write::write_all(&mut tmp, format!("{next}\n").as_bytes())?;
    tmp.sync_all()?;
    std::fs::rename(&files.fence_tmp, &files.fence)?;
    File::open(&files.dir)?.sync_all()?;
    Ok(next)
}

/// Whether the key is held now (by any open file, ours included), with the last token drawn.
pub(crate) fn probe(files: &KeyFiles) -> io::Result<Option<u64>> {
    let file = match File::open(&files.lock) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    match file.try_lock_shared() {
        Ok(()) => {
            file.unlock()?;
            Ok(None)
        }
        Err(TryLockError::WouldBlock) => read_fence(files).map(Some),
        Err(TryLockError::Error(e)) => Err(e),
    }
}
