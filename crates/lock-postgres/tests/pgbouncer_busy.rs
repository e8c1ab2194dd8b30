//! A transaction-pooling PgBouncer kept busy by other clients, so the server sessions a client
//! lands on rotate: building through it is refused every time, whatever sessions the probe's
//! statements get.
//!
//! Run: `cargo test -p lock-postgres --test pgbouncer_busy`.

use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use lock_core::LockError;
use lock_postgres::PgLock;
use lock_postgres::sqlx::postgres::{PgConnectOptions, PgConnection, PgPoolOptions};
use lock_postgres::sqlx::{Connection, raw_sql};
use lock_testkit::server::{PgBouncer, or_skip, try_shared_postgres};
use tokio::task::JoinSet;

/// Clients looping short transactions through the pooler until dropped: the server session a
/// transaction gets is whichever is free then.
struct Busy {
    stop: Arc<AtomicBool>,
    tasks: JoinSet<()>,
}

impl Busy {
    async fn start(url: &str, clients: usize) -> Busy {
        let stop = Arc::new(AtomicBool::new(false));
        let mut tasks = JoinSet::new();
        for _ in 0..clients {
            let mut conn = PgConnection::connect(url).await.expect("busy client");
            let stop = stop.clone();
            tasks.spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    // Simple protocol: nothing prepared that a pooler would lose.
                    let _ = raw_sql("SELECT pg_sleep(0.001)").execute(&mut conn).await;
                }
            });
        }
        Busy { stop, tasks }
    }

    async fn stop(mut self) {
        self.stop.store(true, Ordering::Relaxed);
        while self.tasks.join_next().await.is_some() {}
    }
}

/// Whether `built` is the refusal of a transaction pooler (else it got past it: built, or
/// failed later with something else).
fn refused_as_pooled(built: &Result<PgLock, LockError>) -> bool {
    matches!(built, Err(LockError::InvalidConfig { reason }) if reason.contains("transaction-pooling"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_transaction_pooler_is_refused_every_time() {
    let Some(pg) = or_skip("postgres", try_shared_postgres()) else { return };
    for (mode, builds) in [("transaction", 60), ("statement", 20)] {
        let Some(bouncer) = or_skip("pgbouncer", PgBouncer::start(pg, mode)) else { return };
        let busy = Busy::start(&bouncer.url(), 6).await;
        let opts = PgConnectOptions::from_str(&bouncer.url()).expect("url").statement_cache_capacity(0);
        let mut passed = Vec::new();
        // Twenty at a time: a refusal may wait for its probe's notification.
        for batch in 0..builds / 20 {
            let mut building = JoinSet::new();
            for i in 0..20 {
                let (url, opts) = (bouncer.url(), opts.clone());
                building.spawn(async move {
                    if (batch + i) % 2 == 0 {
                        PgLock::builder().url(url).build().await
                    } else {
                        let pool = PgPoolOptions::new().max_connections(4).connect_lazy_with(opts);
                        PgLock::builder().pool(pool).build().await
                    }
                });
            }
            while let Some(lock) = building.join_next().await {
                let lock = lock.expect("build task");
                if !refused_as_pooled(&lock) {
                    passed.push(lock.map(drop));
                }
            }
        }
        busy.stop().await;
        eprintln!("{mode} pooling, kept busy: {} of {builds} builds not refused", passed.len());
        assert!(passed.is_empty(), "{mode} pooling: {} of {builds} not refused: {passed:?}", passed.len());
    }
}
