//! Round trips to the server, counted for tests (the `testing` feature): how many statements
//! (or batches sent as one) an acquisition and a release cost is a count, so it can be asserted
//! where durations cannot. Without the feature the counter is nothing and costs nothing.

#[cfg(feature = "testing")]
use std::sync::Arc;
#[cfg(feature = "testing")]
use std::sync::atomic::{AtomicU64, Ordering};

/// A count of requests that waited for the server's answer, shared by a backend and the tasks
/// it spawns (keepers, cleanups). Each driver counts what it sends.
#[derive(Clone, Debug, Default)]
pub struct Trips {
    #[cfg(feature = "testing")]
    sent: Arc<AtomicU64>,
}

impl Trips {
    /// One more request that waits for the server's answer.
    #[inline]
    pub fn add(&self) {
        #[cfg(feature = "testing")]
        self.sent.fetch_add(1, Ordering::Relaxed);
    }

    /// Round trips so far.
    #[cfg(feature = "testing")]
    pub fn get(&self) -> u64 {
        self.sent.load(Ordering::Relaxed)
    }
}
