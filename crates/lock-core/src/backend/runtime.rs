//! Values whose drop needs a Tokio context.

use std::fmt;
use std::ops::{Deref, DerefMut};

/// A value whose `Drop` spawns a task (a pooled database connection goes back to its pool, or
/// is closed, in a task of the driver's), kept so that dropping it never panics: a backend
/// handle can outlive the runtime it was built on, and the last one may then be dropped on a
/// thread with no runtime at all.
///
/// Dropped inside a runtime, the value drops as usual. Dropped outside one, it drops inside a
/// bare current-thread runtime made for the purpose and dropped at once: whatever the value
/// spawns is dropped without running (a connection is then closed without its goodbye, which
/// is what ends a server session), and nothing panics.
pub struct DropInRuntime<T>(Option<T>);

impl<T> DropInRuntime<T> {
    /// Wrap `value`.
    pub fn new(value: T) -> Self {
        DropInRuntime(Some(value))
    }
}

impl<T> Deref for DropInRuntime<T> {
    type Target = T;

    fn deref(&self) -> &T {
        match &self.0 {
            Some(v) => v,
            // Taken only in `drop`.
            None => unreachable!("DropInRuntime used after drop"),
        }
    }
}

impl<T> DerefMut for DropInRuntime<T> {
    fn deref_mut(&mut self) -> &mut T {
        match &mut self.0 {
            Some(v) => v,
            None => unreachable!("DropInRuntime used after drop"),
        }
    }
}

impl<T> Drop for DropInRuntime<T> {
    fn drop(&mut self) {
        let Some(value) = self.0.take() else { return };
        if tokio::runtime::Handle::try_current().is_ok() {
            return drop(value);
        }
        // No timer or I/O driver: nothing spawned here is ever run, only dropped.
        match tokio::runtime::Builder::new_current_thread().build() {
            Ok(rt) => {
                let entered = rt.enter();
                drop(value);
                drop(entered);
                drop(rt);
            }
            Err(e) => {
                // Leaking is the one way left that cannot panic.
                tracing::warn!(error = %e, "no runtime to drop a connection in; it is leaked");
                std::mem::forget(value);
            }
        }
    }
}

impl<T: fmt::Debug> fmt::Debug for DropInRuntime<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("DropInRuntime").field(&self.0).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Spawns on drop, as a pooled connection does.
    struct SpawnsOnDrop(std::sync::Arc<std::sync::atomic::AtomicBool>);

    impl Drop for SpawnsOnDrop {
        fn drop(&mut self) {
            let flag = self.0.clone();
            drop(tokio::spawn(async move { flag.store(true, std::sync::atomic::Ordering::SeqCst) }));
        }
    }

    #[test]
    fn drops_without_a_runtime_without_panicking() {
        let ran = std::sync::Arc::default();
        drop(DropInRuntime::new(SpawnsOnDrop(std::sync::Arc::clone(&ran))));
        assert!(!ran.load(std::sync::atomic::Ordering::SeqCst));
    }

    #[tokio::test]
    async fn drops_on_the_current_runtime_inside_one() {
        let ran = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        drop(DropInRuntime::new(SpawnsOnDrop(ran.clone())));
        tokio::task::yield_now().await;
        assert!(ran.load(std::sync::atomic::Ordering::SeqCst));
    }
}
