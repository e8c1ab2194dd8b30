//! Several permits in one request, all or none.
//!
//! A request for `n` permits that has to wait holds some while it waits for the rest. Two such
//! requests could then hold every slot between them and each wait for the other until their
//! deadlines, so a waiting multi-permit request first takes the semaphore's **many gate**
//! (`{name}#s-m`, a mutex): one of them gathers at a time, and single permits, which never
//! hold while they wait, cannot close such a circle. A single pass (`try_acquire_many`) holds
//! nothing while it waits, so it needs no gate.

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

use super::{PermitRequest, Semaphore};
use crate::parts::{any_lost, release_all, release_quietly};
use crate::{LockError, Permit, Result};

/// Suffix of the many gate's key: `{name}#s-m`, no longer than the longest slot suffix
/// (`#s255`), so every name the semaphore accepts has a valid gate key.
const MANY_GATE_SUFFIX: &str = "#s-m";

/// Permits held together by one request. Dropping them releases each in the background.
#[derive(Debug)]
#[must_use = "dropping the permits releases them in the background"]
pub struct Permits {
    permits: Vec<Permit>,
}

impl Permits {
    /// The permits, by slot number.
    pub fn permits(&self) -> &[Permit] {
        &self.permits
    }

    /// How many permits are held.
    pub fn len(&self) -> usize {
        self.permits.len()
    }

    /// Whether none are (never for a granted request: `n` is at least 1).
    pub fn is_empty(&self) -> bool {
        self.permits.is_empty()
    }

    /// Resolves when any permit's lease is known lost.
    pub fn lost(&self) -> impl Future<Output = ()> + Send + 'static {
        let tokens: Vec<_> = self.permits.iter().map(Permit::lost_token).collect();
        any_lost(tokens)
    }

    /// Whether any permit is known lost.
    pub fn is_lost(&self) -> bool {
        self.permits.iter().any(Permit::is_lost)
    }

    /// Give every permit back.
    ///
    /// # Errors
    /// The first error among the permits ([`LockError::LeaseLost`] when one had been lost);
    /// every permit is still released.
    pub async fn release(self) -> Result<()> {
        release_all(self.permits.into_iter().map(Permit::release)).await
    }

    /// Forget the permits without releasing them, as a crashed process would.
    pub fn abandon(self) {
        self.permits.into_iter().for_each(Permit::abandon);
    }
}

/// Give back what a request gathered before it failed.
async fn give_back(permits: Vec<Permit>) {
    release_quietly("a multi-permit request", release_all(permits.into_iter().map(Permit::release))).await;
}

impl PermitRequest<'_> {
    /// Take `n` permits, all or none, waiting up to the request's wait.
    ///
    /// The permits granted are live: one the request gathered and lost while it waited for the
    /// rest (its fixed lease ran out, its session ended) is dropped and its place gathered
    /// again. A fixed lease shorter than that wait can therefore end in a timeout.
    ///
    /// # Errors
    /// [`LockError::InvalidConfig`] when `n` is 0 or more than the semaphore's permits;
    /// [`LockError::Timeout`] (naming the semaphore) at the deadline, with nothing held;
    /// backend errors.
    pub async fn acquire_many(self, n: u32) -> Result<Permits> {
        let (started, deadline) = (Instant::now(), self.deadline()?);
        self.sem.check_many(n)?;
        let take = async {
            self.sem.check_count_by(false, deadline).await?;
            self.sem.take_many(n, deadline, self.lease).await
        };
        crate::deadline::by_deadline(deadline, self.sem.name(), started, take).await
    }

    /// One pass over the slots for `n` permits, all or none: `Ok(None)` (nothing held) when
    /// fewer than `n` are free.
    ///
    /// # Errors
    /// As [`acquire_many`](Self::acquire_many), without the timeout.
    pub async fn try_acquire_many(self, n: u32) -> Result<Option<Permits>> {
        self.sem.check_many(n)?;
        self.sem.check_count().await?;
        let mut got = Vec::new();
        match self.sem.gather(&mut got, n, self.lease).await {
            Ok(()) if got.len() == n as usize => Ok(Some(sorted(got))),
            Ok(()) => {
                give_back(got).await;
                Ok(None)
            }
            Err(e) => {
                give_back(got).await;
                Err(e)
            }
        }
    }
}

fn sorted(mut permits: Vec<Permit>) -> Permits {
    permits.sort_by_key(Permit::slot);
    Permits { permits }
}

impl Semaphore {
    fn check_many(&self, n: u32) -> Result<()> {
        if n == 0 || n > self.permits {
            return Err(LockError::InvalidConfig {
                reason: format!("asked for {n} permits of a semaphore of {}", self.permits),
            });
        }
        Ok(())
    }

    /// Add single-pass grants to `got` until it holds `n` or no slot is left to try; on an
    /// error `got` keeps what it had, for the caller to give back.
    async fn gather(&self, got: &mut Vec<Permit>, n: u32, lease: Option<Duration>) -> Result<()> {
        if self.native {
            return self.gather_pooled(got, n, lease).await;
        }
        let untried: Vec<u32> = (0..self.permits).filter(|s| !got.iter().any(|p| p.slot() == *s)).collect();
        for slot in self.maybe_free(untried).await {
            if got.len() == n as usize {
                break;
            }
            if let Some(guard) = self.slot_request(slot, lease).try_acquire().await? {
                got.push(Permit::new(slot, guard));
            }
        }
        Ok(())
    }

    /// Behind the many gate: gather, then wait for one permit at a time until `n` are held.
    async fn take_many(&self, n: u32, deadline: Option<Instant>, lease: Option<Duration>) -> Result<Permits> {
        let started = Instant::now();
        let timeout = || LockError::Timeout { key: self.name.to_string(), waited: started.elapsed() };
        let mut gate = self.locker.lock(format!("{}{MANY_GATE_SUFFIX}", self.name));
        if let Some(l) = lease {
            gate = gate.lease(l);
        }
        if let Some(d) = deadline {
            gate = gate.wait(d.saturating_duration_since(Instant::now()));
        }
        let gate = match gate.acquire().await {
            Ok(g) => g,
            Err(LockError::Timeout { .. }) => return Err(timeout()),
            Err(e) => return Err(e),
        };
        let mut got: Vec<Permit> = Vec::new();
        let result = loop {
            // A gathered permit can be lost while the request waits for the rest (a fixed
            // lease running out, a session ending); its slot may then be taken again, even by
            // this request. Granting it would hand out a dead permit beside a live one on the
            // same slot, so it is dropped and its place gathered again.
            got.retain(|p| !p.is_lost());
            if let Err(e) = self.gather(&mut got, n, lease).await {
                break Err(e);
            }
            if got.len() == n as usize {
                if !got.iter().any(Permit::is_lost) {
                    break Ok(());
                }
                continue;
            }
            // One more, waiting: a slot this request holds is simply found held again.
            match self.take(false, deadline, lease).await {
                Ok(Some(p)) => got.push(p),
                Ok(None) => unreachable!("take(false) returns a permit or an error"),
                Err(LockError::Timeout { .. }) => break Err(timeout()),
                Err(e) => break Err(e),
            }
        };
        if let Err(e) = gate.release().await {
            tracing::debug!(error = %e, "releasing a semaphore's many gate failed; its lease frees it");
        }
        match result {
            Ok(()) => Ok(sorted(got)),
            Err(e) => {
                give_back(got).await;
                Err(e)
            }
        }
    }
}
