//! How the servers a process starts keep their data: fast for tests, as packaged for the bench.
//!
//! The test suites want servers that start fast and cost nothing per write: data on tmpfs,
//! fsync off where the server allows it. Figures measured on such servers hide every durable
//! write a lock makes (a fence's synchronous commit, a redo-log flush, a ZooKeeper or etcd log
//! sync), so the bench asks for [`Durability::Packaged`]: each server with its packaged
//! durability defaults and its data on a disk directory. The choice is one per process, made
//! before the first server starts, so one run never mixes the two.

use std::path::PathBuf;
use std::sync::OnceLock;

/// How this process's servers keep their data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Durability {
    /// Data on tmpfs (`/dev/shm`), fsync off where the server allows it: the test suites.
    Fast,
    /// Each server's packaged durability defaults (PostgreSQL `fsync`, `full_page_writes` and
    /// `synchronous_commit` on; MariaDB `innodb_flush_log_at_trx_commit=1` and the doublewrite
    /// buffer; ZooKeeper `forceSync=yes`; etcd's own fsyncs; Redis's default snapshots), the
    /// packaged connection limits, and the data on a disk directory ([`disk_base`]).
    Packaged,
}

static CHOSEN: OnceLock<Durability> = OnceLock::new();

/// Chooses the durability of every server this process starts from now on.
///
/// # Errors
/// The durability already in force, when another was chosen (or a server started) before.
pub fn set_durability(d: Durability) -> Result<(), Durability> {
    let chosen = *CHOSEN.get_or_init(|| d);
    if chosen == d { Ok(()) } else { Err(chosen) }
}

/// The durability in force; [`Durability::Fast`] unless [`set_durability`] chose otherwise. Once
/// read, it is fixed for the process.
pub fn durability() -> Durability {
    *CHOSEN.get_or_init(|| Durability::Fast)
}

/// True when servers run as packaged ([`Durability::Packaged`]).
pub fn durable() -> bool {
    durability() == Durability::Packaged
}

/// Where [`Durability::Packaged`] servers keep their data: `DLOCK_DISK_DIR` when set, else
/// `/var/tmp` (kept on disk by the filesystem hierarchy standard, where `/tmp` may be tmpfs).
pub fn disk_base() -> PathBuf {
    std::env::var_os("DLOCK_DISK_DIR").map_or_else(|| PathBuf::from("/var/tmp"), PathBuf::from)
}

/// The filesystem type of the mount holding `path` (`ext4`, `tmpfs`, ...), as `findmnt` names
/// it; for reports that must say where the data lived.
pub fn filesystem_of(path: &std::path::Path) -> Option<String> {
    let out =
        std::process::Command::new("findmnt").args(["-n", "-o", "FSTYPE", "-T"]).arg(path).output().ok()?;
    let fs = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    (out.status.success() && !fs.is_empty()).then_some(fs)
}
