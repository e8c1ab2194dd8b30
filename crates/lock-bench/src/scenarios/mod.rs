//! The scenarios: one table of what each measures and the function that measures it, run on
//! every target through the same `dyn LockBackend` path. A scenario adapts to a target by its
//! [`Capability`] flags, never by its name or URL scheme.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use dlock::backend::Capability;
use dlock::{Locker, OwnerToken};

use crate::error::Result;
use crate::floor::Floor;
use crate::row::Row;
use crate::targets::Target;

mod client;
mod counting;
mod crash;
#[cfg(feature = "zk")]
mod curator;
#[cfg(feature = "zk")]
mod kazoo;
#[cfg(feature = "peers")]
mod peer_primitives;
mod primitives;
mod scale;
mod seeds;
mod throughput;
mod waiters;
mod watchdog;

pub use crash::hold;
pub use scale::{ClientsArgs, clients};

/// Sizes of one run.
#[derive(Debug, Clone, Copy)]
pub struct Sizes {
    uncontended_ops: usize,
    contended_for: Duration,
    handoffs: usize,
    scale_clients: &'static [usize],
    scale_for: Duration,
    watchdog_locks: &'static [usize],
    waiters: &'static [usize],
    watchdog_periods: u32,
    increments: u64,
    stock: (u64, u64),
    /// Samples of each floor measurement.
    pub floor_samples: usize,
    /// The crash scenario's holder session, where the store's session ends it (ZooKeeper's
    /// session, etcd's lease): `None` keeps the store's default, whose recovery time a full
    /// run reports.
    crash_session: Option<&'static str>,
}

impl Sizes {
    /// `--quick`: a run of a few minutes, a smoke run; otherwise the full comparison.
    pub fn new(quick: bool) -> Self {
        if quick {
            // Every row once, with samples enough to read a median: CI runs it on every
            // change, so each size is the least that still exercises its scenario.
            Sizes {
                uncontended_ops: 200,
                contended_for: Duration::from_millis(100),
                handoffs: 15,
                scale_clients: &[1, 8, 32],
                scale_for: Duration::from_millis(100),
                watchdog_locks: &[200],
                waiters: &[10],
                watchdog_periods: 1,
                increments: 50,
                stock: (500, 1_000),
                floor_samples: 100,
                crash_session: Some("2s"),
            }
        } else {
            Sizes {
                uncontended_ops: 5_000,
                contended_for: Duration::from_secs(3),
                handoffs: 200,
                scale_clients: &[1, 8, 32, 128, 512],
                scale_for: Duration::from_secs(2),
                watchdog_locks: &[1_000, 10_000, 100_000],
                waiters: &[10, 100, 1_000],
                watchdog_periods: 3,
                increments: 1_000,
                stock: (100_000, 200_000),
                floor_samples: 3_000,
                crash_session: None,
            }
        }
    }
}

/// What a scenario gets: the target, its capabilities, its floor and the run's sizes.
#[derive(Debug)]
pub struct Ctx<'a> {
    /// The backend and mode under test.
    pub target: &'a Target,
    /// What the target's backend declares it can do.
    pub caps: Capability,
    /// The target's floor, measured in the same run.
    pub floor: &'a Floor,
    /// The run's sizes.
    pub sizes: &'a Sizes,
}

impl Ctx<'_> {
    /// A key no other run or scenario uses.
    fn key(&self, scenario: &str) -> String {
        let nonce = OwnerToken::random().as_u128() & 0xffff_ffff;
        format!("bench-{}-{scenario}-{nonce}", std::process::id())
    }

    /// A `Locker` over a new independent client of the target.
    async fn locker(&self) -> Result<Locker> {
        Ok(Locker::new(self.target.client().await?))
    }

    /// A new independent client as the latency scenarios call it: this library behind the
    /// counting decorator, or the target's peer crate.
    async fn client(&self) -> Result<client::Client> {
        match self.target.peer {
            None => {
                let counting = counting::Counting::new(self.target.client().await?);
                Ok(client::Client::Dlock { locker: Locker::new(counting.backend()), counting })
            }
            #[cfg(feature = "peers")]
            Some(p) => Ok(client::Client::Peer(p.connect(&self.target.url).await?)),
            #[cfg(not(feature = "peers"))]
            Some(_) => Err(crate::error::BenchError::NoPeers),
        }
    }
}

/// The non-atomic increment a client makes while it holds: two holders at once lose an
/// increment, which the scenario's count of acquisitions then shows.
async fn increment(counter: &std::sync::atomic::AtomicU64) {
    use std::sync::atomic::Ordering;
    let v = counter.load(Ordering::SeqCst);
    tokio::task::yield_now().await;
    counter.store(v + 1, Ordering::SeqCst);
}

type Rows<'a> = Pin<Box<dyn Future<Output = Result<Vec<Row>>> + Send + 'a>>;

/// One scenario of the table.
#[derive(Debug)]
pub struct Scenario {
    /// Its `--scenario` name.
    pub name: &'static str,
    /// What it measures (the `--scenario` help).
    pub measures: &'static str,
    /// It also runs on the peer crates' targets.
    pub peers: bool,
    run: for<'a> fn(&'a Ctx<'a>) -> Rows<'a>,
}

impl Scenario {
    /// Run it on one target.
    pub async fn run(&self, cx: &Ctx<'_>) -> Result<Vec<Row>> {
        // Curator is a JVM: it runs its own version of a scenario, timed inside the JVM.
        #[cfg(feature = "zk")]
        if cx.target.peer == Some(crate::peers::Peer::Curator) {
            return curator::run(cx, self.name).await;
        }
        // kazoo is Python: the same, in its own process.
        #[cfg(feature = "zk")]
        if cx.target.peer == Some(crate::peers::Peer::Kazoo) {
            return kazoo::run(cx, self.name).await;
        }
        #[cfg(feature = "peers")]
        if matches!(
            cx.target.peer,
            Some(crate::peers::Peer::DistributedLockRedis | crate::peers::Peer::DistributedLockPostgres)
        ) {
            match self.name {
                "rwlock" => return peer_primitives::rwlock(cx).await,
                "semaphore" => return peer_primitives::semaphore(cx).await,
                _ => {}
            }
        }
        (self.run)(cx).await
    }

    /// Whether it runs on `target`: every scenario on this library's targets; on a peer's, those
    /// that measure a user's acquire (`peers`), and Curator's, kazoo's and distributed-lock's
    /// read-write lock and semaphore, which they have natively.
    pub fn runs_on(&self, target: &crate::targets::Target) -> bool {
        match target.peer {
            None => true,
            Some(
                crate::peers::Peer::Curator
                | crate::peers::Peer::DistributedLockRedis
                | crate::peers::Peer::DistributedLockPostgres,
            ) => self.peers || matches!(self.name, "rwlock" | "semaphore"),
            Some(crate::peers::Peer::Kazoo) => matches!(self.name, "rwlock" | "semaphore"),
            Some(_) => self.peers,
        }
    }

    /// The scenario called `name`.
    pub fn by_name(name: &str) -> Option<&'static Scenario> {
        SCENARIOS.iter().find(|s| s.name == name)
    }
}

/// Every scenario, in the order a full run takes them.
pub static SCENARIOS: &[Scenario] = &[
    Scenario {
        name: "uncontended",
        measures: "one client, acquire + release: try_acquire with a fixed lease, and acquire() with a wait and the watchdog",
        peers: true,
        run: |cx| Box::pin(throughput::uncontended(cx)),
    },
    Scenario {
        name: "contended",
        measures: "N clients on one key (1, 8, 32)",
        peers: true,
        run: |cx| Box::pin(throughput::contended(cx)),
    },
    Scenario {
        name: "many-keys",
        measures: "N clients on distinct keys",
        peers: false,
        run: |cx| Box::pin(throughput::many_keys(cx)),
    },
    Scenario {
        name: "scale",
        measures: "curves: 1 to 512 clients over 4 processes, on one key and on a key each",
        peers: false,
        run: |cx| Box::pin(scale::scale(cx)),
    },
    Scenario {
        name: "handoff",
        measures: "release -> blocked waiter holds",
        peers: true,
        run: |cx| Box::pin(throughput::handoff(cx)),
    },
    Scenario {
        name: "watchdog",
        measures: "K held locks renewed by the watchdog",
        peers: false,
        run: |cx| Box::pin(watchdog::watchdog(cx)),
    },
    Scenario {
        name: "waiters",
        measures: "curve: 10, 100, 1000 waiters on one key released in a chain; calls per acquisition",
        peers: false,
        run: |cx| Box::pin(waiters::waiters(cx)),
    },
    Scenario {
        name: "crash",
        measures: "a holder process killed; time until another client holds the lock",
        peers: false,
        run: |cx| Box::pin(crash::crash(cx)),
    },
    Scenario {
        name: "rwlock",
        measures: "8 clients on one read-write lock, 1 write in 10: reads and writes per second",
        peers: false,
        run: |cx| Box::pin(primitives::rwlock(cx)),
    },
    Scenario {
        name: "semaphore",
        measures: "8 clients on one semaphore of 3 permits: acquisitions per second",
        peers: false,
        run: |cx| Box::pin(primitives::semaphore(cx)),
    },
    Scenario {
        name: "seeds",
        measures: "the seeds: 10 tasks x 1000 increments, and the flash sale",
        peers: false,
        run: |cx| Box::pin(seeds::seeds(cx)),
    },
];

#[cfg(test)]
mod tests {
    use super::{SCENARIOS, Scenario};

    #[test]
    fn every_scenario_is_found_by_its_name_once() {
        for s in SCENARIOS {
            assert!(Scenario::by_name(s.name).is_some_and(|found| std::ptr::eq(found, s)), "{}", s.name);
        }
        assert!(Scenario::by_name("nosuch").is_none());
    }
}
