//! Records: `<stem>.rec` in the lock directory, the number on its first line (`-` for none)
//! and one count-down token per line after it, read, changed by `LocalRecord` (the rules of
//! every store) and replaced whole under an exclusive `flock` of `<stem>.rec-guard`: written to
//! a temporary file, synced, renamed over the record and the directory synced, so a crash
//! leaves the old or the new record, never a torn one.

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use lock_core::backend::{LocalRecord, Record, RecordOp};

/// An op that can cross into a blocking task.
#[derive(Debug, Clone)]
pub(crate) enum OwnedOp {
    Get,
    Init(u64),
    Set(u64),
    Mark(String),
    Delete,
}

impl OwnedOp {
    /// `None` for an op this store does not know, or a token that would break the file's lines.
    pub(crate) fn of(op: RecordOp<'_>) -> Option<OwnedOp> {
        Some(match op {
            RecordOp::Get => OwnedOp::Get,
            RecordOp::Init(v) => OwnedOp::Init(v),
            RecordOp::Set(v) => OwnedOp::Set(v),
            RecordOp::Mark(t) if LocalRecord::valid_mark(t) => OwnedOp::Mark(t.to_owned()),
            RecordOp::Delete => OwnedOp::Delete,
            _ => return None,
        })
    }

    fn as_op(&self) -> RecordOp<'_> {
        match self {
            OwnedOp::Get => RecordOp::Get,
            OwnedOp::Init(v) => RecordOp::Init(*v),
            OwnedOp::Set(v) => RecordOp::Set(*v),
            OwnedOp::Mark(t) => RecordOp::Mark(t),
            OwnedOp::Delete => RecordOp::Delete,
        }
    }
}

/// Apply `op` to the record of the file-name stem `stem` in `dir`.
pub(crate) fn apply(dir: &Path, stem: &str, op: &OwnedOp) -> io::Result<Record> {
    let at = |ext: &str| -> PathBuf { dir.join(format!("{stem}.{ext}")) };
    let (path, tmp) = (at("rec"), at("rec.tmp"));
    if matches!(op, OwnedOp::Get) && !path.exists() {
        // Nothing to read: a read makes no files.
        return Ok(Record::default());
    }
    let guard =
        OpenOptions::new().read(true).write(true).create(true).truncate(false).open(at("rec-guard"))?;
    crate::flock::lock_until(&guard, std::time::Instant::now() + LOCK_BOUND)?;
    let mut record = read(&path)?;
    let (answer, keep) = record.apply(op.as_op());
    if matches!(op, OwnedOp::Get) {
        return Ok(answer);
    }
    if keep {
        let mut f = File::create(&tmp)?;
        f.write_all(record.to_text().as_bytes())?;
        f.sync_all()?;
        std::fs::rename(&tmp, &path)?;
    } else {
        match std::fs::remove_file(&path) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
            _ => {}
        }
    }
    File::open(dir)?.sync_all()?;
    drop(guard);
    Ok(answer)
}

/// How long a record op waits for another process's op on the same record (each holds the
/// flock for one read and one synced write): a holder stopped meanwhile makes it a timeout,
/// not a wait without end.
const LOCK_BOUND: Duration = Duration::from_secs(5);

fn read(path: &Path) -> io::Result<LocalRecord> {
    let mut text = String::new();
    match File::open(path) {
        Ok(mut f) => f.read_to_string(&mut text)?,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(LocalRecord::default()),
        Err(e) => return Err(e),
    };
    LocalRecord::from_text(&text).ok_or_else(|| {
        io::Error::new(io::ErrorKind::InvalidData, format!("{} holds no record", path.display()))
    })
}
