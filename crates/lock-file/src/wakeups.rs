//! Waiters woken by the kernel instead of by polling: an inotify watch on the lock directory
//! reports a lock file closed after writing, or removed, and wakes that key's waiters.
//!
//! Only a holder keeps a lock file open for writing (attempts open it read-only, see
//! `files::open_lock`), so "closed after writing" means a release or a holder's exit, and a
//! waiter's failed attempt wakes nobody (no herd of waiters waking each other). A release wakes
//! one waiter of the key in this process (the one that waited longest), not all of them.

use std::fmt;
use std::path::PathBuf;

use lock_core::backend::{Mutex, NotifyHub, Subscription};
use tokio::sync::oneshot;

/// The watch of one directory, started by the first waiter and stopped when the backend goes.
pub(crate) struct Wakeups {
    dir: PathBuf,
    hub: NotifyHub,
    /// Dropping it ends the watching task; `None` until the first waiter, or after a failure.
    watching: Mutex<Option<oneshot::Sender<()>>>,
}

impl fmt::Debug for Wakeups {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let watching = self.watching.lock().as_ref().is_some_and(|tx| !tx.is_closed());
        f.debug_struct("Wakeups").field("watching", &watching).finish()
    }
}

impl Wakeups {
    pub(crate) fn new(dir: PathBuf) -> Self {
        Wakeups { dir, hub: NotifyHub::new(), watching: Mutex::default() }
    }

    /// Whether this platform can wake waiters (the capability `notify`).
    pub(crate) const SUPPORTED: bool = cfg!(target_os = "linux");

    /// A subscription to the releases of the key whose files are named `stem`, or `None` when
    /// the directory cannot be watched (the core then polls).
    pub(crate) fn subscribe(&self, stem: &str) -> Option<Subscription> {
        let mut watching = self.watching.lock();
        if watching.as_ref().is_none_or(|tx| tx.is_closed()) {
            match watch(&self.dir, self.hub.clone()) {
                Ok(stop) => *watching = Some(stop),
                Err(e) => {
                    tracing::debug!(dir = %self.dir.display(), error = %e, "cannot watch the lock directory; waiters poll");
                    return None;
                }
            }
        }
        Some(self.hub.subscribe(stem).0)
    }
}

#[cfg(target_os = "linux")]
fn watch(dir: &std::path::Path, hub: NotifyHub) -> std::io::Result<oneshot::Sender<()>> {
    use futures_util::StreamExt;
    use inotify::{EventMask, Inotify, WatchMask};

    let inotify = Inotify::init()?;
    inotify.watches().add(dir, WatchMask::CLOSE_WRITE | WatchMask::DELETE | WatchMask::MOVED_FROM)?;
    let mut events = inotify.into_event_stream([0u8; 4096])?;
    let (stop_tx, mut stop) = oneshot::channel::<()>();
    tokio::spawn(async move {
        loop {
            let event = tokio::select! {
                _ = &mut stop => return,
                event = events.next() => event,
            };
            match event {
                Some(Ok(e)) if e.mask.contains(EventMask::Q_OVERFLOW) => {
                    // Events were dropped: the waiters' fallback poll finds the releases.
                    tracing::debug!("inotify queue overflowed");
                }
                Some(Ok(e)) => {
                    let stem =
                        e.name.as_deref().and_then(|n| n.to_str()).and_then(|n| n.strip_suffix(".lock"));
                    if let Some(stem) = stem {
                        // One waiter per process and release, not every waiter of the key.
                        hub.notify_one(stem);
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

#[cfg(not(target_os = "linux"))]
fn watch(_dir: &std::path::Path, _hub: NotifyHub) -> std::io::Result<oneshot::Sender<()>> {
    Err(std::io::Error::new(std::io::ErrorKind::Unsupported, "no inotify on this platform"))
}
