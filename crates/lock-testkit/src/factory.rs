//! The plug-in point of the shared suites: a [`Factory`] builds [`Client`]s of one backend, each
//! carrying the fault hooks ([`ClientFaults`]) that break its holds behind its back.
//!
//! A backend's test fixture implements [`Factory`] (and [`ClientFaults`] for the hooks it can
//! offer); the conformance cases and the history checker take any factory. A hook a fixture
//! cannot offer answers [`Unsupported`] (the default), and a case that needs it prints
//! `SKIPPED [label] case: why` on stderr instead of passing silently.
//!
//! Server-level faults (kill, restart, pause) are not factory hooks: they live on the server
//! fixtures ([`FaultControl`](crate::server::FaultControl)), which the history checker's
//! nemeses and the backends' fault tests take; the conformance suite runs on servers shared by
//! every case of a test binary, which must never be faulted.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use lock_core::Locker;
use lock_core::backend::LockBackend;

/// Builds clients of one backend (each client is a separate connection or session, standing in
/// for a separate process).
#[async_trait]
pub trait Factory: Send + Sync {
    /// Label for messages, e.g. `"redis/simple"`.
    fn label(&self) -> String;

    /// A new independent client. Neither the factory nor the client's fault hooks may keep the
    /// backend alive (hold at most a `Weak`, or plain ids): dropping the last `Arc` is how the
    /// suite simulates a crashed session-bound holder.
    async fn client(&self) -> Client;

    /// A short lease for tests: long enough for a few round trips, short enough to wait out.
    fn lease(&self) -> Duration {
        Duration::from_millis(300)
    }
}

/// One client of the backend under test: what the core sees, and the hooks aimed at it.
#[derive(Clone)]
pub struct Client {
    /// The backend, as `Locker` uses it.
    pub backend: Arc<dyn LockBackend>,
    /// Faults that strike this client's holds from outside.
    pub faults: Arc<dyn ClientFaults>,
}

impl Client {
    /// A client without fault hooks (every hook answers [`Unsupported`]).
    pub fn new(backend: Arc<dyn LockBackend>) -> Self {
        Client { backend, faults: Arc::new(NoFaults) }
    }

    /// A client with `faults` aimed at it.
    pub fn with_faults(backend: Arc<dyn LockBackend>, faults: impl ClientFaults + 'static) -> Self {
        Client { backend, faults: Arc::new(faults) }
    }

    /// A `Locker` over this client's backend.
    pub fn locker(&self) -> Locker {
        Locker::new(self.backend.clone())
    }
}

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Client").field("backend", &self.backend.name()).finish_non_exhaustive()
    }
}

/// Faults aimed at one client, struck from outside it (another connection, an operator). Each
/// hook panics when it finds nothing to break (the fixture is wrong, the test must fail), and
/// answers [`Unsupported`] when the fixture cannot do it at all (the default).
#[async_trait]
pub trait ClientFaults: Send + Sync {
    /// Remove this client's lock on `key` behind its back, as an operator would (delete the key
    /// or node, expire the row), leaving its connection and session alone.
    async fn sever(&self, key: &str) -> FaultResult {
        let _ = key;
        Err(Unsupported::new("sever", "the fixture cannot remove a lock behind its holder"))
    }

    /// Kill the connection that carries this client's hold on `key` (the client's only
    /// connection, where it has one). Whether the hold survives is the backend's business.
    async fn cut_connection(&self, key: &str) -> FaultResult {
        let _ = key;
        Err(Unsupported::new("cut_connection", "the fixture cannot kill the holder's connection"))
    }

    /// Make the server end this client's session: every hold it has is gone.
    async fn expire_session(&self) -> FaultResult {
        Err(Unsupported::new("expire_session", "the backend has no sessions, or the fixture cannot end one"))
    }
}

/// The faults of a client without hooks.
#[derive(Debug, Clone, Copy, Default)]
struct NoFaults;

impl ClientFaults for NoFaults {}

/// What a fault hook answers: done, or [`Unsupported`].
pub type FaultResult = Result<(), Unsupported>;

/// A fault hook this fixture does not offer, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unsupported {
    /// The hook (`"sever"`, `"cut_connection"`, `"expire_session"`).
    pub hook: &'static str,
    /// Why not.
    pub why: String,
}

impl Unsupported {
    /// `hook` is not offered, because `why`.
    pub fn new(hook: &'static str, why: impl Into<String>) -> Self {
        Unsupported { hook, why: why.into() }
    }
}

impl fmt::Display for Unsupported {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "no `{}` hook: {}", self.hook, self.why)
    }
}

impl std::error::Error for Unsupported {}

/// How a [`LoseBy`] factory's clients lose a hold when a case asks to sever it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Loss {
    /// Kill the holder's connection first, then remove the lock: the loss is discovered across
    /// a reconnect.
    CutThenSever,
    /// End the holder's session (every hold it has).
    ExpireSession,
}

/// Runs the suite's "lose this hold" step (`sever`) through other faults of the same fixture:
/// `LoseBy::new(factory, Loss::ExpireSession)` makes every case that severs a hold end the
/// holder's session instead. One fixture, several ways to lose a lock.
#[derive(Debug)]
pub struct LoseBy<F> {
    inner: F,
    loss: Loss,
}

impl<F> LoseBy<F> {
    /// `inner`'s clients, losing holds by `loss`.
    pub fn new(inner: F, loss: Loss) -> Self {
        LoseBy { inner, loss }
    }
}

#[async_trait]
impl<F: Factory> Factory for LoseBy<F> {
    fn label(&self) -> String {
        let how = match self.loss {
            Loss::CutThenSever => "cut+sever",
            Loss::ExpireSession => "session-expired",
        };
        format!("{}+{how}", self.inner.label())
    }

    async fn client(&self) -> Client {
        let c = self.inner.client().await;
        Client::with_faults(c.backend, Lossy { inner: c.faults, loss: self.loss })
    }

    fn lease(&self) -> Duration {
        self.inner.lease()
    }
}

struct Lossy {
    inner: Arc<dyn ClientFaults>,
    loss: Loss,
}

#[async_trait]
impl ClientFaults for Lossy {
    async fn sever(&self, key: &str) -> FaultResult {
        match self.loss {
            Loss::CutThenSever => {
                self.inner.cut_connection(key).await?;
                self.inner.sever(key).await
            }
            Loss::ExpireSession => self.inner.expire_session().await,
        }
    }

    async fn cut_connection(&self, key: &str) -> FaultResult {
        self.inner.cut_connection(key).await
    }

    async fn expire_session(&self) -> FaultResult {
        self.inner.expire_session().await
    }
}

static RUN: std::sync::LazyLock<String> =
    std::sync::LazyLock::new(|| uuid::Uuid::new_v4().simple().to_string()[..8].to_owned());
static SEQ: AtomicUsize = AtomicUsize::new(0);

/// A key unique to this run and call: `t<run>-<case>-<n>`.
pub fn key(case: &str) -> String {
    format!("t{}-{case}-{}", *RUN, SEQ.fetch_add(1, Ordering::Relaxed))
}

/// Print a loud skip line (cases that a backend's capabilities or its fixture rule out).
pub fn skip(label: &str, case: &str, why: impl fmt::Display) {
    eprintln!("SKIPPED [{label}] {case}: {why}");
}

#[cfg(test)]
mod tests {
    use lock_core::MemoryBackend;
    use lock_core::backend::Mutex;

    use super::*;

    /// Records the hooks called; `cut_connection` is unsupported when `cut` is false.
    #[derive(Clone, Default)]
    struct Recorder {
        calls: Arc<Mutex<Vec<String>>>,
        cut: bool,
    }

    #[async_trait]
    impl ClientFaults for Recorder {
        async fn sever(&self, key: &str) -> FaultResult {
            self.calls.lock().push(format!("sever {key}"));
            Ok(())
        }
        async fn cut_connection(&self, key: &str) -> FaultResult {
            if !self.cut {
                return Err(Unsupported::new("cut_connection", "test"));
            }
            self.calls.lock().push(format!("cut {key}"));
            Ok(())
        }
    }

    struct Fixture(Recorder);

    #[async_trait]
    impl Factory for Fixture {
        fn label(&self) -> String {
            "fixture".into()
        }
        async fn client(&self) -> Client {
            Client::with_faults(Arc::new(MemoryBackend::new()), self.0.clone())
        }
    }

    #[tokio::test]
    async fn hooks_are_unsupported_by_default() {
        let c = Client::new(Arc::new(MemoryBackend::new()));
        assert_eq!(c.faults.sever("k").await.map_err(|u| u.hook), Err("sever"));
        assert_eq!(c.faults.cut_connection("k").await.map_err(|u| u.hook), Err("cut_connection"));
        let u = c.faults.expire_session().await.expect_err("no sessions");
        assert!(u.to_string().starts_with("no `expire_session` hook: "), "{u}");
    }

    #[tokio::test]
    async fn lose_by_cuts_before_it_severs_and_stops_at_an_unsupported_hook() {
        let rec = Recorder { cut: true, ..Recorder::default() };
        let f = LoseBy::new(Fixture(rec.clone()), Loss::CutThenSever);
        assert_eq!(f.label(), "fixture+cut+sever");
        f.client().await.faults.sever("k").await.expect("both hooks");
        assert_eq!(*rec.calls.lock(), ["cut k", "sever k"]);

        let rec = Recorder::default();
        let f = LoseBy::new(Fixture(rec.clone()), Loss::CutThenSever);
        let u = f.client().await.faults.sever("k").await.expect_err("no cut hook");
        assert_eq!(u.hook, "cut_connection");
        assert!(rec.calls.lock().is_empty(), "nothing severed when the cut is unsupported");

        let f = LoseBy::new(Fixture(Recorder::default()), Loss::ExpireSession);
        assert_eq!(f.client().await.faults.sever("k").await.map_err(|u| u.hook), Err("expire_session"));
    }
}
