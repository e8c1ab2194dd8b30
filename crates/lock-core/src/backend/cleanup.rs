//! The one cleanup-on-drop guard for cancelled attempts.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::Notify;

use crate::Result;

type Running = Pin<Box<dyn Future<Output = Result<()>> + Send>>;
type Undo = Box<dyn FnOnce() -> Running + Send>;

/// Undoes an attempt whose future was dropped midway.
///
/// Arm it before the request is sent; disarm it once the outcome is known. If it is dropped
/// while armed (the caller's future was cancelled at an `.await`), the undo is spawned on the
/// current tokio runtime, so it runs after whatever the cancelled request left buffered. The
/// undo must be idempotent and harmless when the request never reached the server. Without a
/// runtime nothing can be sent: the lease or session frees the key, and a warning says so.
/// [`run_now`](Cleanup::run_now) keeps the same promise while it runs.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> lock_core::Result<()> {
/// use lock_core::backend::Cleanup;
///
/// let cleanup = Cleanup::arm("example attempt", || async { Ok(()) });
/// // ... send the request; on success:
/// cleanup.disarm();
/// # Ok(()) }
/// ```
#[must_use = "a cleanup guard undoes the attempt when dropped; disarm it once the outcome is known"]
pub struct Cleanup {
    what: &'static str,
    undo: Option<Undo>,
}

impl fmt::Debug for Cleanup {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Cleanup").field("what", &self.what).field("armed", &self.undo.is_some()).finish()
    }
}

impl Cleanup {
    /// Arm `undo` for the attempt named `what` (used in log lines).
    pub fn arm<F, Fut>(what: &'static str, undo: F) -> Self
    where
        F: FnOnce() -> Fut + Send + 'static,
        Fut: Future<Output = Result<()>> + Send + 'static,
    {
        Cleanup { what, undo: Some(Box::new(move || Box::pin(undo()))) }
    }

    /// The attempt's outcome is known: nothing to undo.
    pub fn disarm(mut self) {
        self.undo = None;
    }

    /// Whether the undo is still pending.
    pub fn is_armed(&self) -> bool {
        self.undo.is_some()
    }

    /// Run the undo now and disarm. If this future is dropped before the undo finished (the
    /// caller was cancelled, or bounded the wait with a timeout), the undo goes on where it
    /// stopped in a task spawned on the current runtime, exactly as a dropped armed guard's
    /// would: taking the undo out of the guard must not turn a cancellation into a key that
    /// only the lease or session can free. So a caller may bound how long it waits for the
    /// undo without giving it up.
    ///
    /// # Errors
    /// The undo's error.
    pub async fn run_now(mut self) -> Result<()> {
        let Some(undo) = self.undo.take() else { return Ok(()) };
        let mut running = Unfinished { what: self.what, undo: Some(undo()) };
        let Some(undo) = running.undo.as_mut() else { return Ok(()) };
        let done = undo.as_mut().await;
        running.undo = None;
        done
    }
}

/// An undo started by [`Cleanup::run_now`]: finished in the background if dropped before it
/// completed.
struct Unfinished {
    what: &'static str,
    undo: Option<Running>,
}

impl Drop for Unfinished {
    fn drop(&mut self) {
        if let Some(undo) = self.undo.take() {
            spawn_undo(self.what, undo);
        }
    }
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        if let Some(undo) = self.undo.take() {
            spawn_undo(self.what, undo());
        }
    }
}

/// Finish `undo` in a task of the current runtime; without one, nothing can be sent.
fn spawn_undo(what: &'static str, undo: Running) {
    let Ok(rt) = tokio::runtime::Handle::try_current() else {
        tracing::warn!(what, "abandoned lock attempt without a runtime; its lease or session frees the key");
        return;
    };
    spawn_cleanup(&rt, async move {
        if let Err(e) = undo.await {
            tracing::debug!(what, error = %e, "cleanup of an abandoned lock attempt failed; the lease frees it");
        }
    });
}

/// Spawns `task`, a clean-up a backend finishes in the background (deleting a released hold's
/// key, revoking the lease of a closed session), on `runtime`, counted by [`settle_cleanups`]
/// until it ends, as the undos of dropped [`Cleanup`] guards are: a program that settles the
/// clean-ups before it exits does not cut it off.
pub fn spawn_cleanup<F>(runtime: &tokio::runtime::Handle, task: F) -> tokio::task::JoinHandle<F::Output>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    let running = InFlight::start();
    runtime.spawn(async move {
        let _running = running;
        task.await
    })
}

/// The undos spawned by dropped guards (and the tasks of [`spawn_cleanup`]) that have not ended
/// yet, in this process, and the wake-up of [`settle_cleanups`] when one ends.
static PENDING: AtomicUsize = AtomicUsize::new(0);
static ENDED: Notify = Notify::const_new();

/// Counts one spawned undo as pending until dropped: when its task ends, or when the runtime
/// shuts down and drops it unfinished (it will never end then).
struct InFlight;

impl InFlight {
    fn start() -> Self {
        PENDING.fetch_add(1, Ordering::SeqCst);
        InFlight
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        PENDING.fetch_sub(1, Ordering::SeqCst);
        ENDED.notify_waiters();
    }
}

/// Waits until every clean-up of a cancelled acquisition that this process runs in the
/// background has ended, or `within` has passed; returns whether none is left.
///
/// A dropped acquisition future (a cancelled wait: a signal, a `select!`, a timeout) undoes what
/// it did on the store, its place in the queue included, in a task of the runtime (see
/// [`Cleanup`]). Those tasks die with the runtime: a program about to exit calls this first, or
/// the place it held stays in the store until its lease or session runs out, and every waiter
/// behind it waits that long. `within` bounds the exit when the store does not answer.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// // ... an acquisition was cancelled; before returning from main:
/// let settled = lock_core::settle_cleanups(std::time::Duration::from_secs(1)).await;
/// assert!(settled);
/// # }
/// ```
pub async fn settle_cleanups(within: Duration) -> bool {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        // Registered before the count is read, so an undo ending in between still wakes us.
        let ended = ENDED.notified();
        tokio::pin!(ended);
        ended.as_mut().enable();
        if PENDING.load(Ordering::SeqCst) == 0 {
            return true;
        }
        if tokio::time::timeout_at(deadline, ended).await.is_err() {
            return PENDING.load(Ordering::SeqCst) == 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    fn counting(n: &Arc<AtomicUsize>) -> Cleanup {
        let n = n.clone();
        Cleanup::arm("test", move || async move {
            n.fetch_add(1, Ordering::SeqCst);
            Ok(())
        })
    }

    #[tokio::test]
    async fn runs_once_when_dropped_armed_and_never_when_disarmed() {
        let n = Arc::new(AtomicUsize::new(0));
        counting(&n).disarm();
        counting(&n).run_now().await.expect("undo");
        assert_eq!(n.load(Ordering::SeqCst), 1);
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let guard = {
            let n = n.clone();
            Cleanup::arm("test", move || async move {
                n.fetch_add(1, Ordering::SeqCst);
                let _ = tx.send(());
                Ok(())
            })
        };
        drop(guard);
        rx.await.expect("the dropped guard's undo ran");
        assert_eq!(n.load(Ordering::SeqCst), 2);
    }

    /// A `run_now` dropped while its undo awaits lets the undo finish in the background.
    #[tokio::test]
    async fn run_now_dropped_midway_finishes_in_the_background() {
        let (started_tx, started_rx) = tokio::sync::oneshot::channel::<()>();
        let (go_tx, go_rx) = tokio::sync::oneshot::channel::<()>();
        let (done_tx, done_rx) = tokio::sync::oneshot::channel::<()>();
        let guard = Cleanup::arm("test", move || async move {
            let _ = started_tx.send(());
            let _ = go_rx.await;
            let _ = done_tx.send(());
            Ok(())
        });
        let mut run = Box::pin(guard.run_now());
        tokio::select! {
            _ = &mut run => panic!("the undo cannot finish before it is let go"),
            r = started_rx => r.expect("the undo started"),
        }
        drop(run);
        go_tx.send(()).expect("the dropped undo is still alive");
        done_rx.await.expect("the dropped undo finished");
    }

    /// `settle_cleanups` waits for a dropped guard's undo to end, and gives up on one that does
    /// not end within its bound. (The count is the process's: other tests' undos may be
    /// pending too, so the bounds leave them time.)
    #[tokio::test]
    async fn settle_waits_for_background_undos_within_its_bound() {
        let (go_tx, go_rx) = tokio::sync::oneshot::channel::<()>();
        let (done_tx, mut done_rx) = tokio::sync::oneshot::channel::<()>();
        drop(Cleanup::arm("test", move || async move {
            let _ = go_rx.await;
            let _ = done_tx.send(());
            Ok(())
        }));
        assert!(!settle_cleanups(Duration::from_millis(50)).await, "an undo still runs");
        go_tx.send(()).expect("the undo waits");
        assert!(settle_cleanups(Duration::from_secs(10)).await, "every undo ended");
        assert_eq!(done_rx.try_recv(), Ok(()), "settled only once the undo had ended");
    }

    #[test]
    fn without_a_runtime_drop_does_not_panic() {
        let n = Arc::new(AtomicUsize::new(0));
        drop(counting(&n));
        assert_eq!(n.load(Ordering::SeqCst), 0);
    }
}
