//! A store's testing side as the workspace's bench and history checkers see it: a private
//! server started for a run, the targets the checkers fault ([`Checked`]), and the store's raw
//! floor (its own client doing the bare round trip and the bare commands of one acquire +
//! release, without the lock library).
//!
//! Each store with a server implements [`StoreSide`] in its testing crate
//! (`crates/lock-<store>/testing`); the bench and the history checkers loop over them, so a new
//! store brings its bench rows, its floor and its fault schedules with it instead of a branch
//! in each.

use std::any::Any;
use std::future::Future;
use std::pin::Pin;
use std::time::{Duration, Instant};

use lock_core::backend::Capability;

use crate::server::ServerError;

mod checked;

pub use checked::{Checked, CheckedServer, Faultable, Revokes};

/// A raw client's failure: whatever its driver says.
pub type DriverError = Box<dyn std::error::Error + Send + Sync>;

/// A floor being measured.
pub type FloorFuture<'a> = Pin<Box<dyn Future<Output = Result<RawFloor, DriverError>> + Send + 'a>>;

/// What a store's own client took for the bare round trip and for one acquire + release.
#[derive(Debug, Clone)]
pub struct RawFloor {
    /// What the round trip is (`PING`, `SELECT 1`, `exists`).
    pub rtt_label: &'static str,
    /// What the acquire + release pair is.
    pub pair_label: &'static str,
    /// Each round trip's time.
    pub rtt: Vec<Duration>,
    /// Each acquire + release pair's time.
    pub pair: Vec<Duration>,
}

/// The private server(s) started for a bench run, and this library's URLs on them.
pub struct Started {
    /// The store's URL: the bench runs a target per registered mode on it (`redis/fair`), and
    /// the peers of the store (other libraries' locks) on the same server.
    pub url: String,
    /// More targets of this library, `(name, url)`, each per mode as well: the same server
    /// with other options (`postgres/unfenced`).
    pub variants: Vec<(String, String)>,
    /// What must stay alive while the targets run (the server: dropping it kills it).
    pub keep: Box<dyn Any + Send>,
}

impl RawFloor {
    /// The samples `rtt` of `rtt_label` and `pair` of `pair_label`.
    pub fn new(
        rtt_label: &'static str,
        pair_label: &'static str,
        rtt: Vec<Duration>,
        pair: Vec<Duration>,
    ) -> Self {
        RawFloor { rtt_label, pair_label, rtt, pair }
    }
}

impl std::fmt::Debug for Started {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Started")
            .field("url", &self.url)
            .field("variants", &self.variants)
            .finish_non_exhaustive()
    }
}

/// What a store with a server offers the bench.
pub trait StoreSide: Sync {
    /// The store's registered name (its descriptor's, as `dlock::stores()` lists it).
    fn store(&self) -> &'static str;
    /// The URL schemes whose floor [`floor`](Self::floor) measures.
    fn schemes(&self) -> &'static [&'static str];
    /// Starts a private server for a bench run.
    ///
    /// # Errors
    /// When the server cannot be started (its package missing, a start that fails).
    fn start(&self) -> Result<Started, ServerError>;
    /// The raw floor at `url` (one of [`schemes`](Self::schemes)) for a target whose backend
    /// declares `caps`, `n` samples each.
    fn floor<'a>(&'a self, url: &'a str, caps: Capability, n: usize) -> FloorFuture<'a>;
    /// The history checkers' targets, each on a private server; none by default (a store
    /// whose checks run in its own crate's tests).
    fn checked(&self) -> Vec<Checked> {
        Vec::new()
    }
}

impl std::fmt::Debug for dyn StoreSide {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreSide").field("store", &self.store()).finish_non_exhaustive()
    }
}

/// `f(0)`, `f(1)`, ... `f(n - 1)`, one after the other, each timed; the first failure ends it.
///
/// # Errors
/// The first call's error.
pub async fn time<F, Fut, E>(n: usize, mut f: F) -> Result<Vec<Duration>, DriverError>
where
    F: FnMut(usize) -> Fut,
    Fut: Future<Output = Result<(), E>>,
    E: Into<DriverError>,
{
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        let t0 = Instant::now();
        f(i).await.map_err(Into::into)?;
        out.push(t0.elapsed());
    }
    Ok(out)
}

/// The URL without its query: a floor's raw client takes none of the backend's options.
pub fn strip_query(url: &str) -> &str {
    url.split_once('?').map_or(url, |(u, _)| u)
}
