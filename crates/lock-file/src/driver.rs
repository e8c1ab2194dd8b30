//! The holds as the session toolkit keeps them: a hold is an open, locked lock file; its
//! "ping" checks that the path still names that file.

use std::fmt;
use std::fs::File;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use lock_core::LockError;
use lock_core::backend::session::{Ending, Link, Noted, SessionDriver};

use crate::NAME;

/// The lock file of a hold, locked (`flock`) through this open file description.
#[derive(Debug)]
pub(crate) struct Held {
    pub(crate) file: File,
    /// `<stem>.lock`, locked too where it exists (dlocks of earlier versions lock it).
    pub(crate) legacy: Option<File>,
    /// The same file open for writing, closed after the lock is released: the waiters' wake-up.
    pub(crate) wakes: Option<File>,
    pub(crate) path: PathBuf,
    pub(crate) note: PathBuf,
    /// `<stem>.held`, the hold's fence and inode (`files::draw`), kept locked while it holds.
    pub(crate) record: (PathBuf, File),
}

/// What a hold's check or end fails with.
#[derive(Debug)]
pub(crate) enum FileError {
    /// The lock file was removed or replaced: whoever opens the path now locks another file,
    /// so this hold excludes no one any more.
    Replaced,
    /// A file operation failed.
    Io(io::Error),
}

impl fmt::Display for FileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FileError::Replaced => f.write_str("the lock file was removed or replaced"),
            FileError::Io(e) => write!(f, "{e}"),
        }
    }
}

/// Whether `path` names the file `file` is open on (the same device and inode).
pub(crate) fn still_names(path: &Path, file: &File) -> Result<bool, io::Error> {
    let open = file.metadata()?;
    match std::fs::metadata(path) {
        Ok(now) => Ok(now.dev() == open.dev() && now.ino() == open.ino()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(e),
    }
}

/// The toolkit's driver for lock files.
#[derive(Debug, Default)]
pub(crate) struct Files;

impl SessionDriver for Files {
    type Held = Held;
    type Error = FileError;

    fn name(&self) -> &'static str {
        NAME
    }

    async fn ping(&self, held: &mut Held) -> Result<(), FileError> {
        match still_names(&held.path, &held.file) {
            Ok(true) => Ok(()),
            Ok(false) => Err(FileError::Replaced),
            Err(e) => Err(FileError::Io(e)),
        }
    }

    async fn end(&self, _key: &str, held: Held, _why: Ending) -> Result<bool, FileError> {
        let ours = still_names(&held.path, &held.file).map_err(FileError::Io)?;
        // The note and the record go first, while the lock still keeps every other holder
        // out (a lock file held by `flock(1)` next must not look like this hold).
        if ours {
            for path in [&held.note, &held.record.0] {
                match std::fs::remove_file(path) {
                    Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(FileError::Io(e)),
                    _ => {}
                }
            }
        }
        // Closing the file releases the lock too; unlocking first makes the release not wait
        // for a duplicate of the descriptor (a forked child) to close.
        held.file.unlock().map_err(FileError::Io)?;
        if let Some(legacy) = &held.legacy {
            legacy.unlock().map_err(FileError::Io)?;
        }
        // Then the waiters are woken, by the close of the file the holder opened for writing.
        drop(held.wakes);
        Ok(ours)
    }

    async fn note(&self, _key: &str, held: &mut Held, note: &str, link: &mut Link<'_>) -> Noted {
        match still_names(&held.path, &held.file) {
            Ok(true) => {}
            Ok(false) => return Noted::Lost,
            Err(e) => return Noted::Answered(Err(LockError::temporary(NAME, e))),
        }
        match std::fs::write(&held.note, note) {
            Ok(()) => {
                link.confirm();
                Noted::Answered(Ok(true))
            }
            Err(e) => Noted::Answered(Err(LockError::temporary(NAME, e))),
        }
    }

    fn connection_lost(&self, e: &FileError) -> bool {
        matches!(e, FileError::Replaced)
    }

    fn classify(&self, e: FileError) -> LockError {
        match e {
            FileError::Replaced => LockError::temporary(NAME, "the lock file was removed or replaced"),
            FileError::Io(e) if e.kind() == io::ErrorKind::PermissionDenied => LockError::permanent(NAME, e),
            FileError::Io(e) => LockError::temporary(NAME, e),
        }
    }
}
