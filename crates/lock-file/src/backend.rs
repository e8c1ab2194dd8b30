//! [`FileLock`]: the `LockBackend` over a directory of lock files.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

use async_trait::async_trait;
use lock_core::backend::session::{self, Granted, Sessions};
use lock_core::backend::{
    AcquireRequest, Attempt, Backoff, Capability, LockBackend, LockInfo, Record, RecordOp, RenewItem,
    Subscription, UrlOptions,
};
use lock_core::{FencingToken, LockError, OwnerToken, Result};
use tokio::time::Instant;

use crate::NAME;
use crate::driver::{Files, Held};
use crate::files::{KeyFiles, Probed, probe};
use crate::keys::stem;
use crate::notify::{Place, Wakeups};
use crate::queue::Ticket;
use crate::records::{OwnedOp, apply};
use crate::turn::{AbandonOnDrop, Abandoned, Turn, turn};
use lock_core::backend::{Admin, Notes, Notify, Records};

/// How often a hold checks that its lock file is still the one at its path: how soon a holder
/// learns that someone removed or replaced it.
pub const DEFAULT_CHECK_EVERY: Duration = Duration::from_millis(250);

/// A lock file has no idle bound: it is held until released, or until its process exits (the
/// kernel closes the file). The toolkit's give-up clock is set past any lease.
const NO_IDLE_BOUND: Duration = Duration::from_secs(365 * 24 * 3600);

/// How long a waiter in line sleeps without a wake-up while the directories are watched: the
/// most a lost inotify event can cost it.
const WATCHED_FALLBACK: Duration = Duration::from_millis(500);
/// The polling of a waiter in line where nothing wakes it (no inotify).
const POLL: (Duration, Duration) = (Duration::from_millis(2), Duration::from_millis(100));

/// Locks as advisory file locks (`flock`) in one directory of one host.
///
/// A key's lock is an exclusive `flock` on `<dir>/<key>` (the file `flock(1)` locks for that
/// path, so the two exclude each other), held by an open file until
/// release; the kernel drops it when the process exits, however it exits. Fencing tokens come
/// from `<dir>/<key>.fence`, raised and synced to disk under the lock before each grant. The
/// lost signal fires when the lock file is removed or replaced behind the holder. Waiters are
/// served first come, first served: each waits in line with a ticket in `<dir>/.queue` (see
/// the `queue` module), and is woken when a holder closes its lock file or a waiter before it
/// leaves (inotify on Linux; elsewhere, or where the directory cannot be watched, they poll).
/// Holds are session-bound: the lease asked for is not a timeout, the process is. Not for
/// network file systems: NFS does not keep `flock`s exclusive across hosts.
pub struct FileLock {
    dir: PathBuf,
    sessions: Sessions<Files>,
    wakeups: Wakeups,
}

impl fmt::Debug for FileLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FileLock")
            .field("dir", &self.dir)
            .field("holds", &self.sessions)
            .field("wakeups", &self.wakeups)
            .finish()
    }
}

impl FileLock {
    /// Locks in `dir`, created if missing (a URL asks for that with `?create=true`).
    ///
    /// # Errors
    /// [`LockError::InvalidConfig`] when `dir` is not absolute; backend errors when it cannot
    /// be created or is not a directory.
    pub fn new(dir: impl Into<PathBuf>) -> Result<Self> {
        Self::with_check_every(dir, DEFAULT_CHECK_EVERY)
    }

    /// [`new`](Self::new), each hold checking its lock file every `every`.
    ///
    /// # Errors
    /// As [`new`](Self::new); [`LockError::InvalidConfig`] for a zero period.
    pub fn with_check_every(dir: impl Into<PathBuf>, every: Duration) -> Result<Self> {
        Self::open(dir.into(), every, true)
    }

    fn open(dir: PathBuf, every: Duration, create: bool) -> Result<Self> {
        if !dir.is_absolute() {
            return Err(LockError::InvalidConfig {
                reason: format!("the lock directory must be an absolute path, not {:?}", dir.display()),
            });
        }
        if every.is_zero() {
            return Err(LockError::InvalidConfig { reason: "check_every must be above zero".into() });
        }
        if create {
            std::fs::create_dir_all(&dir).map_err(|e| io_error(e, &dir))?;
        } else if let Err(e) = std::fs::metadata(&dir) {
            // A mistyped directory is a mistake to report, not one to make on disk: two
            // spellings of one directory would be two sets of locks that exclude nobody.
            if e.kind() == io::ErrorKind::NotFound {
                return Err(LockError::InvalidConfig {
                    reason: format!(
                        "the lock directory {} does not exist (make it, or add ?create=true to the url)",
                        dir.display()
                    ),
                });
            }
            return Err(io_error(e, &dir));
        }
        if !dir.is_dir() {
            return Err(LockError::permanent(NAME, format!("{} is not a directory", dir.display())));
        }
        let wakeups = Wakeups::new(dir.clone());
        Ok(FileLock { dir, sessions: Sessions::new(Files, every, NO_IDLE_BOUND), wakeups })
    }

    /// From `file:///absolute/dir[?check_every=250ms][&create=true]`: the directory must exist
    /// unless `create=true` asks for it (and its parents) to be made.
    ///
    /// # Errors
    /// [`LockError::InvalidConfig`] for another scheme, a host, a relative path, an unknown
    /// option, or a directory that does not exist without `create=true`; as [`new`](Self::new).
    pub fn from_url(url: &str) -> Result<Self> {
        let mut o = UrlOptions::parse(url)?;
        let every = o.take_duration("check_every")?.unwrap_or(DEFAULT_CHECK_EVERY);
        let create = o.take_flag("create")?.unwrap_or(false);
        let base = o.finish()?;
        let Some(path) = base.strip_prefix("file://") else {
            return Err(LockError::InvalidConfig { reason: format!("not a file:// url: {base:?}") });
        };
        if !path.starts_with('/') {
            return Err(LockError::InvalidConfig {
                reason: format!(
                    "file:// urls name an absolute directory and no host: file:///var/lock/app, not {base:?}"
                ),
            });
        }
        Self::open(PathBuf::from(percent_decoded(path)), every, create)
    }

    /// The lock directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn files(&self, key: &str) -> KeyFiles {
        KeyFiles::new(&self.dir, &stem(key))
    }
}

/// `%XX` escapes of a URL path decoded (a directory with a space is `%20` in a URL).
fn percent_decoded(path: &str) -> String {
    let mut o = UrlOptions::parse(&format!("x://?p={path}")).expect("one option");
    o.take::<String>("p").ok().flatten().unwrap_or_else(|| path.to_owned())
}

fn io_error(e: io::Error, path: &Path) -> LockError {
    let what = format!("{}: {e}", path.display());
    match e.kind() {
        io::ErrorKind::PermissionDenied | io::ErrorKind::ReadOnlyFilesystem => {
            LockError::permission_denied(NAME, what)
        }
        io::ErrorKind::InvalidData | io::ErrorKind::NotADirectory => LockError::permanent(NAME, what),
        _ => LockError::temporary(NAME, what),
    }
}

/// A waiter in line: its place among this backend's waiters first, so that it is gone before
/// the ticket's removal wakes the next one (fields drop in order).
struct Waiting {
    place: Place,
    ticket: Ticket,
}

impl FileLock {
    /// Wait in `files`' line until this waiter is first and the lock is free (the lock file
    /// taken), or until `until` (then `None`). Dropped at any await, the ticket goes with it.
    async fn wait_in_line(
        &self,
        files: &KeyFiles,
        until: Instant,
        abandoned: &Abandoned,
    ) -> Result<Option<Granted<Held>>> {
        let ticket = blocking(files, |f| f.line.enqueue()).await?;
        let waiting = Waiting { place: self.wakeups.join(&files.line.stem, ticket.number()), ticket };
        let mine = Some(waiting.ticket.number());
        let mut backoff = Backoff::new(POLL.0, POLL.1);
        // The lock file of the last attempt, kept open: its close would wake this waiter
        // (`wakeups` wakes the first in line when any process closes the lock file, so that
        // the release of a `flock(1)`, which never opens it for writing, is seen at once).
        let mut kept = None;
        loop {
            // Watched before the look (the first wait of this backend starts the watch), so
            // that whatever happens after the look wakes this waiter.
            let watched = self.wakeups.watching();
            let sent = Instant::now();
            waiting.place.looking();
            let flag = abandoned.clone();
            let before = match blocking(files, move |f| turn(f, mine, kept, &flag)).await? {
                Turn::Taken(held, fence) => {
                    return Ok(Some(Granted { held, session: 0, fence, sent, answered: None }));
                }
                Turn::First(file) => {
                    kept = file;
                    None
                }
                Turn::Behind(n, file) => {
                    kept = file;
                    Some(n)
                }
                // Not seen: only a dropped attempt abandons its grabs.
                Turn::Abandoned => return Ok(None),
            };
            let now = Instant::now();
            if now >= until {
                return Ok(None);
            }
            let nap = if watched { WATCHED_FALLBACK } else { backoff.next_delay() };
            tokio::select! {
                () = waiting.place.woken(before) => {}
                () = tokio::time::sleep_until(until.min(now + nap)) => {}
            }
        }
    }
}

/// Runs a blocking file operation off the runtime's workers.
async fn blocking<T: Send + 'static>(
    files: &KeyFiles,
    op: impl FnOnce(&KeyFiles) -> io::Result<T> + Send + 'static,
) -> Result<T> {
    let owned = files.clone();
    match tokio::task::spawn_blocking(move || op(&owned)).await {
        Ok(r) => r.map_err(|e| io_error(e, &files.lock)),
        Err(e) => Err(LockError::temporary(NAME, e)),
    }
}

#[async_trait]
impl LockBackend for FileLock {
    fn name(&self) -> &'static str {
        NAME
    }

    fn capabilities(&self) -> Capability {
        let mut c = session::capabilities();
        // An attempt with a wait waits in the key's line (`wait_in_line`), served in order.
        c.native_wait = true;
        c.fair = true;
        c
    }

    fn identity(&self) -> String {
        format!("file://{}", self.dir.display())
    }

    async fn try_acquire(&self, req: &AcquireRequest<'_>) -> Result<Attempt> {
        let attempt = || async {
            let files = self.files(req.key);
            let sent = Instant::now();
            // A cancelled attempt leaves nothing behind: a blocking grab that has not started
            // takes nothing (`Abandoned`), and one that has finishes on its own and its
            // result, the locked file, is dropped (closed, so unlocked) with the handle.
            let abandon = AbandonOnDrop(Abandoned::default());
            let flag = abandon.0.clone();
            if let Turn::Taken(held, fence) = blocking(&files, move |f| turn(f, None, None, &flag)).await? {
                return Ok(Some(Granted { held, session: 0, fence, sent, answered: None }));
            }
            match req.wait_until.filter(|&until| until > Instant::now()) {
                Some(until) => self.wait_in_line(&files, until, &abandon.0).await,
                None => Ok(None),
            }
        };
        self.sessions.acquire(req, attempt).await
    }

    async fn release(&self, key: &str, owner: OwnerToken) -> Result<bool> {
        self.sessions.release(key, owner).await
    }

    async fn renew(&self, items: &[RenewItem<'_>]) -> Result<Vec<bool>> {
        self.sessions.renew(items).await
    }

    async fn inspect(&self, key: &str) -> Result<LockInfo> {
        let look = |f: &KeyFiles| -> io::Result<_> { Ok((probe(f)?, f.line.live()?)) };
        let (fence, waiters) = blocking(&self.files(key), look).await?;
        let mut info = match fence {
            Probed::Free => LockInfo::free(),
            Probed::Held(fence) => {
                let mut held = LockInfo::held();
                held.fence = fence.map(FencingToken);
                held
            }
        };
        // The waiters in line: a reader of the composite read-write lock steps aside for a
        // writer waiting at the gate even while the gate is between holders.
        info.waiters = Some(waiters);
        Ok(info)
    }

    /// Woken by inotify where the kernel has it; polled elsewhere.
    fn notify(&self) -> Option<&dyn Notify> {
        Wakeups::SUPPORTED.then_some(self as &dyn Notify)
    }

    // `<stem>.rec` files, replaced whole under a flock (records.rs).
    lock_core::backend::hand_out!(notes, records, admin);
}

#[async_trait]
impl Notify for FileLock {
    async fn subscribe(&self, key: &str) -> Result<Option<Subscription>> {
        Ok(self.wakeups.subscribe(&stem(key)))
    }
}

#[async_trait]
impl Notes for FileLock {
    async fn set_note(&self, key: &str, owner: OwnerToken, note: &str) -> Result<bool> {
        self.sessions.set_note(key, owner, note).await
    }

    async fn note(&self, key: &str) -> Result<Option<String>> {
        let read = |f: &KeyFiles| -> io::Result<Option<String>> {
            // Only a live dlock hold's: a note a killed holder left is not a flock(1)'s.
            if !matches!(probe(f)?, Probed::Held(Some(_))) {
                return Ok(None);
            }
            match std::fs::read_to_string(&f.note) {
                Ok(s) => Ok(Some(s)),
                Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
                Err(e) => Err(e),
            }
        };
        blocking(&self.files(key), read).await
    }
}

#[async_trait]
impl Records for FileLock {
    async fn record(&self, key: &str, op: RecordOp<'_>) -> Result<Record> {
        let Some(op) = OwnedOp::of(op) else {
            return Err(LockError::InvalidConfig { reason: "a record op this store cannot keep".into() });
        };
        let (dir, stem) = (self.dir.clone(), stem(key));
        let path = self.dir.join(format!("{stem}.rec"));
        match tokio::task::spawn_blocking(move || apply(&dir, &stem, &op)).await {
            Ok(r) => r.map_err(|e| io_error(e, &path)),
            Err(e) => Err(LockError::temporary(NAME, e)),
        }
    }
}

#[async_trait]
impl Admin for FileLock {
    async fn list(&self, _prefix: &str, _limit: usize) -> Result<Vec<String>> {
        Err(lock_core::backend::unsupported(NAME, "listing the locks held"))
    }

    async fn evict(&self, key: &str, fence: FencingToken) -> Result<bool> {
        blocking(&self.files(key), move |f| crate::evict::evict(f, fence.0)).await
    }
}
