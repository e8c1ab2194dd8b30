//! What can go wrong in a run: a failed scenario is reported and the run goes on.

use std::path::PathBuf;
use std::time::Duration;

use dlock::LockError;

/// An error of the drivers the floors use (redis, sqlx, zookeeper-client), kept as the source.
pub type DriverError = Box<dyn std::error::Error + Send + Sync>;

/// Why a floor, a scenario or the report failed. Field names and messages say what each holds.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// The lock library refused or failed.
    #[error(transparent)]
    Lock(#[from] LockError),
    /// A raw client (the floor's) failed.
    #[error("{what}")]
    Driver {
        /// What was being done, such as `redis floor`.
        what: &'static str,
        #[source]
        source: DriverError,
    },
    /// A peer's acquire did not hold the lock within the wait.
    #[cfg_attr(not(feature = "peers"), allow(dead_code))]
    #[error("{peer} did not acquire within {wait:?}")]
    PeerTimeout { peer: &'static str, wait: Duration },
    /// A peer target in a build without the `peers` feature.
    #[cfg_attr(feature = "peers", allow(dead_code))]
    #[error("built without the peers feature")]
    NoPeers,
    /// A peer run in a child process (Curator's JVM, kazoo's Python) answered something
    /// unexpected.
    #[cfg_attr(not(feature = "zk"), allow(dead_code))]
    #[error("peer process: {0}")]
    Peer(String),
    /// The build has no raw client for this URL's scheme.
    #[error("no floor for scheme {scheme:?} in this build")]
    NoFloor { scheme: String },
    /// A key that nobody else uses was held.
    #[error("{what} was held")]
    UnexpectedlyHeld { what: &'static str },
    /// The non-atomic counter under the lock counted fewer increments than acquisitions.
    #[error("exclusion broken: counter {counter} != {acquisitions} acquisitions")]
    Exclusion { counter: u64, acquisitions: u64 },
    /// The seed's 10 tasks x N increments did not end exact.
    #[error("10 x {per_task} increments ended at {got}")]
    Increments { per_task: u64, got: u64 },
    /// The flash sale oversold or left stock.
    #[error("flash sale ended with sku1={sku1} sku2={sku2} after {orders} orders")]
    FlashSale { sku1: u64, sku2: u64, orders: u64 },
    /// The watchdog scenario needs `Capability::renew`.
    #[error("backend has no renew")]
    NoRenew,
    /// Locks held under the watchdog were lost.
    #[error("{lost} of {held} watchdog-held locks were lost")]
    WatchdogLost { lost: usize, held: usize },
    /// The crash scenario's holder process did not report a hold in time.
    #[error("holder did not acquire within {0:?}")]
    HolderSilent(Duration),
    /// The crash scenario's holder process answered something else than `held`.
    #[error("holder said {0:?}")]
    HolderAnswer(String),
    /// A local I/O operation failed (spawning the holder, reading its output).
    #[error("{what}")]
    Io {
        what: &'static str,
        #[source]
        source: std::io::Error,
    },
    /// A scale run's client process failed or answered something unexpected.
    #[error("client process: {0}")]
    Worker(String),
    /// A client task panicked or was cancelled.
    #[error("client task failed")]
    Task(#[from] tokio::task::JoinError),
    /// A latency histogram could not be made.
    #[error("cannot make a latency histogram")]
    HistogramBounds(#[from] hdrhistogram::CreationError),
    /// Two latency histograms could not be merged.
    #[error("cannot merge latency histograms")]
    Histogram(#[from] hdrhistogram::AdditionError),
    /// The report folder could not be written.
    #[error("cannot write the report to {}", path.display())]
    Report {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

impl BenchError {
    /// A raw client's error, for `map_err`.
    #[cfg_attr(not(any(feature = "zk", feature = "peers")), allow(dead_code))]
    pub fn driver<E>(what: &'static str) -> impl FnOnce(E) -> BenchError
    where
        E: Into<DriverError>,
    {
        move |e| BenchError::Driver { what, source: e.into() }
    }

    /// An I/O error, for `map_err`.
    pub fn io(what: &'static str) -> impl FnOnce(std::io::Error) -> BenchError {
        move |source| BenchError::Io { what, source }
    }

    /// The message with its sources, each once (drivers often repeat their source's text).
    pub fn chain(&self) -> String {
        let mut msg = self.to_string();
        let mut src = std::error::Error::source(self);
        while let Some(s) = src {
            let text = s.to_string();
            if !msg.contains(&text) {
                msg.push_str(": ");
                msg.push_str(&text);
            }
            src = s.source();
        }
        msg
    }
}

/// The result of a floor or a scenario.
pub type Result<T, E = BenchError> = std::result::Result<T, E>;
