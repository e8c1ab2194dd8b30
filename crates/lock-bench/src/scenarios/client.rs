//! One client as a latency scenario calls it: this library (through the counting decorator,
//! so attempts per acquisition can be read), or a peer crate through its own acquire.

use std::sync::Arc;
use std::time::Duration;

use dlock::{LockGuard, Locker};

use super::counting::Counting;
use crate::error::Result;

/// A client of the target: its own connection, session or pool.
#[derive(Debug, Clone)]
pub enum Client {
    /// This library: a `Locker` over the target's backend behind [`Counting`].
    Dlock { locker: Locker, counting: Arc<Counting> },
    /// A peer crate.
    #[cfg(feature = "peers")]
    Peer(crate::peers::Client),
}

/// A lock a [`Client`] holds.
#[derive(Debug)]
pub enum Held {
    Dlock(LockGuard),
    #[cfg(feature = "peers")]
    Peer(crate::peers::Held),
}

impl Client {
    /// Acquire `key`, waiting at most `wait`, with the fixed `lease` (this library: `None` is
    /// the default watchdog lease; a peer keeps its own where it takes none).
    pub async fn acquire(&self, key: &str, lease: Option<Duration>, wait: Duration) -> Result<Held> {
        match self {
            Client::Dlock { locker, .. } => {
                let r = locker.lock(key).wait(wait);
                let r = match lease {
                    Some(l) => r.lease(l),
                    None => r,
                };
                Ok(Held::Dlock(r.acquire().await?))
            }
            #[cfg(feature = "peers")]
            Client::Peer(p) => Ok(Held::Peer(p.acquire(key, lease.unwrap_or(PEER_TTL), wait).await?)),
        }
    }

    /// `try_acquire` calls that reached the backend so far (`None` for a peer: its attempts are
    /// inside its own crate).
    pub fn attempts(&self) -> Option<u64> {
        match self {
            Client::Dlock { counting, .. } => Some(counting.attempts()),
            #[cfg(feature = "peers")]
            Client::Peer(_) => None,
        }
    }

    /// `subscribe` calls that reached the backend so far (`None` for a peer).
    pub fn subscribes(&self) -> Option<u64> {
        match self {
            Client::Dlock { counting, .. } => Some(counting.subscribes()),
            #[cfg(feature = "peers")]
            Client::Peer(_) => None,
        }
    }
}

/// A peer's TTL where it needs one and the scenario asks for the watchdog's: this library's
/// default watchdog lease.
#[cfg(feature = "peers")]
const PEER_TTL: Duration = dlock::DEFAULT_WATCHDOG_LEASE;

impl Held {
    /// Release through the client's own call.
    pub async fn release(self) -> Result<()> {
        match self {
            Held::Dlock(g) => {
                g.release().await?;
                Ok(())
            }
            #[cfg(feature = "peers")]
            Held::Peer(h) => h.release().await,
        }
    }
}
