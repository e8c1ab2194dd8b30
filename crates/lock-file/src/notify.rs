//! Waiters woken by the kernel instead of by polling: an inotify watch on the lock directory
//! reports a lock file closed after writing, or removed, and wakes that key's waiters; a watch
//! on the queue directory (`queue`) reports a ticket removed or its owner gone, and wakes the
//! waiter behind it.
//!
//! Only a holder keeps a lock file open for writing (attempts open it read-only, see
//! `files::open_lock`), so "closed after writing" means a release or a holder's exit, and a
//! waiter's failed attempt wakes no subscriber (no herd of waiters waking each other). A release
//! wakes one subscriber of the key in this process (the one that waited longest), not all of
//! them. Another program's `flock` (flock(1)) opens the lock file read-only, so its release is a
//! close without writing: that wakes only the first waiter in line, which keeps its own
//! attempt's file open between looks (closing it would wake itself), so an inspection or a
//! single attempt elsewhere costs it one look, never a loop.
//!
//! A waiter in line is woken only for what it waits for: the first in line for a release, any
//! other for the end of the ticket just before its own (as ZooKeeper's waiters watch their
//! predecessor), which is what can make it first. So a release or a grant wakes one waiter,
//! not one per process. While a waiter looks at the line it is woken by anything, so that what
//! happens during its look is not missed.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use lock_core::backend::{Mutex, NotifyHub, Subscription};
use tokio::sync::{Notify, oneshot};

/// The watch of one directory, started by the first waiter and stopped when the backend goes.
pub(crate) struct Wakeups {
    dir: PathBuf,
    hub: NotifyHub,
    line: Arc<InLine>,
    /// Dropping it ends the watching task; `None` until the first waiter, or after a failure.
    watching: Mutex<Option<oneshot::Sender<()>>>,
}

impl fmt::Debug for Wakeups {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let watching = self.watching.lock().as_ref().is_some_and(|tx| !tx.is_closed());
        f.debug_struct("Wakeups").field("watching", &watching).finish()
    }
}

/// The waiters in line of this backend, by key stem and ticket number.
#[derive(Default)]
struct InLine {
    waiters: Mutex<HashMap<String, BTreeMap<u64, Arc<Sleeper>>>>,
}

/// One waiter in line: how it is woken, and for what.
struct Sleeper {
    woken: Notify,
    /// [`ANYTHING`] (it is looking, or has not looked yet), [`RELEASE`] (it is first in line)
    /// or the number of the ticket just before its own.
    waits_for: AtomicU64,
}

/// What a waiter waits for: any change (set while it looks, so that nothing that happens
/// during the look is missed).
const ANYTHING: u64 = u64::MAX;
/// What a waiter waits for: the lock's release (it is first in line). No ticket is numbered 0.
const RELEASE: u64 = 0;

/// What the watch saw happen to a key.
#[derive(Clone, Copy)]
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
enum Change {
    /// Its lock file was closed after writing, or removed.
    Released,
    /// This ticket of its line was removed, or closed by its owner's exit.
    Ticket(u64),
}

impl InLine {
    /// Wake the waiters of `stem` in line here that wait for `change` (one that is not waiting
    /// right now finds the wake-up when it next waits). Not only the first here: a waiter
    /// behind another of this backend still watches its own predecessor, which may be another
    /// process's waiter that gives up.
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    fn wake(&self, stem: &str, change: Change) {
        let waiters = self.waiters.lock();
        for s in waiters.get(stem).into_iter().flat_map(BTreeMap::values) {
            let waits_for = s.waits_for.load(Ordering::SeqCst);
            let wake = match change {
                _ if waits_for == ANYTHING => true,
                Change::Released => waits_for == RELEASE,
                Change::Ticket(n) => waits_for == n,
            };
            if wake {
                s.woken.notify_one();
            }
        }
    }

    /// Wake every waiter in line here: the watch ended, they look and poll.
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    fn wake_all(&self) {
        for s in self.waiters.lock().values().flat_map(BTreeMap::values) {
            s.woken.notify_one();
        }
    }
}

/// A waiter's place among this backend's waiters in line, gone when dropped (before its
/// ticket is removed, so the wake-up of that removal reaches the next).
pub(crate) struct Place {
    line: Arc<InLine>,
    stem: String,
    number: u64,
    sleeper: Arc<Sleeper>,
}

impl Place {
    /// The waiter is about to look at the line: any change wakes it until it has looked.
    pub(crate) fn looking(&self) {
        self.sleeper.waits_for.store(ANYTHING, Ordering::SeqCst);
    }

    /// Sleep until a wake-up for what the look found: `before`, the ticket just before this
    /// one, or `None` (first in line: the release).
    pub(crate) async fn woken(&self, before: Option<u64>) {
        self.sleeper.waits_for.store(before.unwrap_or(RELEASE), Ordering::SeqCst);
        self.sleeper.woken.notified().await;
    }
}

impl fmt::Debug for Place {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Place").field("stem", &self.stem).field("number", &self.number).finish()
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        let mut waiters = self.line.waiters.lock();
        if let Some(m) = waiters.get_mut(&self.stem) {
            m.remove(&self.number);
            if m.is_empty() {
                waiters.remove(&self.stem);
            }
        }
    }
}

impl Wakeups {
    pub(crate) fn new(dir: PathBuf) -> Self {
        Wakeups { dir, hub: NotifyHub::new(), line: Arc::default(), watching: Mutex::default() }
    }

    /// Whether this platform can wake waiters (the backend then hands out notifications).
    pub(crate) const SUPPORTED: bool = cfg!(target_os = "linux");

    /// Whether the directories are watched, starting the watch if it is not running.
    pub(crate) fn watching(&self) -> bool {
        let mut watching = self.watching.lock();
        if watching.as_ref().is_none_or(|tx| tx.is_closed()) {
            match watch(&self.dir, self.hub.clone(), self.line.clone()) {
                Ok(stop) => *watching = Some(stop),
                Err(e) => {
                    tracing::debug!(dir = %self.dir.display(), error = %e, "cannot watch the lock directory; waiters poll");
                    return false;
                }
            }
        }
        true
    }

    /// A subscription to the releases of the key whose files are named `stem`, or `None` when
    /// the directory cannot be watched (the core then polls).
    pub(crate) fn subscribe(&self, stem: &str) -> Option<Subscription> {
        self.watching().then(|| self.hub.subscribe(stem).0)
    }

    /// The place of the waiter with ticket `number` in `stem`'s line.
    pub(crate) fn join(&self, stem: &str, number: u64) -> Place {
        let sleeper = Arc::new(Sleeper { woken: Notify::new(), waits_for: AtomicU64::new(ANYTHING) });
        self.line.waiters.lock().entry(stem.to_owned()).or_default().insert(number, sleeper.clone());
        Place { line: self.line.clone(), stem: stem.to_owned(), number, sleeper }
    }
}

#[cfg(target_os = "linux")]
fn watch(dir: &std::path::Path, hub: NotifyHub, line: Arc<InLine>) -> std::io::Result<oneshot::Sender<()>> {
    use futures_util::StreamExt;
    use inotify::{EventMask, Inotify, WatchMask};

    let inotify = Inotify::init()?;
    let changes = WatchMask::CLOSE_WRITE | WatchMask::DELETE | WatchMask::MOVED_FROM;
    // And any close of a lock file: flock(1) opens it read-only, so its release is a
    // close without writing (handled apart below).
    inotify.watches().add(dir, changes | WatchMask::CLOSE_NOWRITE)?;
    let queue = dir.join(crate::queue::QUEUE_DIR);
    crate::queue::make_dir(&queue)?;
    let tickets = inotify.watches().add(&queue, changes)?;
    let mut events = inotify.into_event_stream([0u8; 4096])?;
    let (stop_tx, mut stop) = oneshot::channel::<()>();
    tokio::spawn(async move {
        // However the watch ends, the waiters in line look again (and start a new one).
        struct Ended(Arc<InLine>);
        impl Drop for Ended {
            fn drop(&mut self) {
                self.0.wake_all();
            }
        }
        let ended = Ended(line);
        let line = &ended.0;
        loop {
            let event = tokio::select! {
                _ = &mut stop => return,
                event = events.next() => event,
            };
            match event {
                Some(Ok(e)) if e.mask.contains(EventMask::Q_OVERFLOW) => {
                    // Events were dropped: every waiter in line looks again, and the
                    // subscribers' fallback poll finds the releases.
                    tracing::debug!("inotify queue overflowed");
                    line.wake_all();
                }
                Some(Ok(e)) if e.wd == tickets => {
                    if e.mask.contains(EventMask::IGNORED) {
                        // The queue directory was removed: the next waiter watches the new one.
                        tracing::debug!("the queue directory went; the watch ends");
                        return;
                    }
                    // A ticket removed, or closed by its owner's exit: the one behind it looks.
                    let name = e.name.as_deref().and_then(|n| n.to_str());
                    let ticket = name.and_then(|n| n.rsplit_once('.'));
                    if let Some((stem, Ok(n))) = ticket.map(|(s, n)| (s, n.parse::<u64>())) {
                        line.wake(stem, Change::Ticket(n));
                    }
                }
                Some(Ok(e)) if e.mask.contains(EventMask::CLOSE_NOWRITE) => {
                    // A lock file closed by a process that did not open it for writing: the
                    // release of another program's flock (flock(1)), or just an attempt or an
                    // inspection. Only the first waiter in line looks again (it keeps its own
                    // attempt's file open, so its look wakes nobody); the subscribers, whose
                    // attempts do close the file, would wake each other without end.
                    let name = e.name.as_deref().and_then(|n| n.to_str());
                    if let Some(stem) = name.filter(|n| !n.contains('.')) {
                        line.wake(stem, Change::Released);
                    }
                }
                Some(Ok(e)) => {
                    let stem = e.name.as_deref().and_then(|n| n.to_str()).and_then(lock_stem);
                    if let Some(stem) = stem {
                        // One waiter per process and release, not every waiter of the key.
                        hub.notify_one(stem);
                        line.wake(stem, Change::Released);
                    }
                }
                Some(Err(e)) => {
                    // The next waiter starts a new watch.
                    tracing::debug!(error = %e, "inotify watch ended");
                    return;
                }
                None => return,
            }
        }
    });
    Ok(stop_tx)
}

/// The key stem whose lock file is named `name`: a stem has no `.`, the key's other files do
/// (`<stem>.fence`, ...), but for `<stem>.lock`, which dlocks of earlier versions lock.
#[cfg(target_os = "linux")]
fn lock_stem(name: &str) -> Option<&str> {
    match name.split_once('.') {
        None => Some(name),
        Some((stem, "lock")) => Some(stem),
        Some(_) => None,
    }
}

#[cfg(not(target_os = "linux"))]
fn watch(
    _dir: &std::path::Path,
    _hub: NotifyHub,
    _line: Arc<InLine>,
) -> std::io::Result<oneshot::Sender<()>> {
    Err(std::io::Error::new(std::io::ErrorKind::Unsupported, "no inotify on this platform"))
}
