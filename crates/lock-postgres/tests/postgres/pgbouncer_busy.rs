//! A transaction-pooling PgBouncer kept busy by other clients, so the server sessions a client
//! lands on rotate: building through it is refused every time, whatever sessions the probe's
//! statements get; and two clients whose connections reach it only after building never both
//! hold a key.
//!
//! Run: `cargo test -p lock-postgres --test postgres pgbouncer_busy::`.

use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU16, Ordering};

use lock_core::{LockError, Locker};
use lock_postgres::PgLock;
use lock_postgres::sqlx::postgres::{PgConnectOptions, PgConnection, PgPoolOptions};
use lock_postgres::sqlx::{Connection, raw_sql};
use lock_postgres_testing::{PgBouncer, try_shared_postgres};
use lock_testkit::server::or_skip;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;

use crate::common;
use common::key;

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
    // Builds at once: each has up to three client connections to PgBouncer (200 allowed).
    const BATCH: usize = 30;
    for (mode, builds) in [("transaction", 60), ("statement", 30)] {
        let Some(bouncer) = or_skip("pgbouncer", PgBouncer::start(pg, mode)) else { return };
        let busy = Busy::start(&bouncer.url(), 6).await;
        let opts = PgConnectOptions::from_str(&bouncer.url()).expect("url").statement_cache_capacity(0);
        let mut passed = Vec::new();
        // Many at a time: a refusal may wait 2 s for its probe's notification.
        for batch in 0..builds / BATCH {
            let mut building = JoinSet::new();
            for i in 0..BATCH {
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
/// A TCP forwarder to `127.0.0.1:<target>`, the target changeable between connections: a
/// client built on a direct connection whose new connections then reach a pooler.
async fn switch(target: Arc<AtomicU16>) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let port = listener.local_addr().expect("addr").port();
    tokio::spawn(async move {
        while let Ok((mut client, _)) = listener.accept().await {
            let to = target.load(Ordering::SeqCst);
            tokio::spawn(async move {
                if let Ok(mut server) = TcpStream::connect(("127.0.0.1", to)).await {
                    let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                }
            });
        }
    });
    port
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_clients_through_a_busy_pooler_never_both_hold_a_key() {
    let Some(pg) = or_skip("postgres", try_shared_postgres()) else { return };
    let Some(bouncer) = or_skip("pgbouncer", PgBouncer::start(pg, "transaction")) else { return };
    let target = Arc::new(AtomicU16::new(pg.port()));
    let port = switch(target.clone()).await;
    // No prepared statements (as a pool through a transaction pooler is configured): the
    // statements run wherever the pooler puts them, not failing on a missing one.
    let opts = PgConnectOptions::from_str(&pg.url()).expect("url").port(port).statement_cache_capacity(0);
    let build = || PgLock::builder().connect_options(opts.clone()).max_connections(4).build();
    // Built through the forwarder to PostgreSQL itself: a direct link, accepted.
    let (a, b) = (Arc::new(build().await.expect("direct")), Arc::new(build().await.expect("direct")));
    // From now on every new connection of theirs reaches the pooler; none made before is kept.
    target.store(bouncer.port(), Ordering::SeqCst);
    for pool in [a.pool(), b.pool()] {
        while pool.num_idle() > 0 {
            pool.acquire().await.expect("idle connection").detach().close().await.expect("close");
        }
    }
    let (a, b) = (Locker::new(a), Locker::new(b));
    let busy = Busy::start(&bouncer.url(), 6).await;
    let (mut both, mut granted, mut refused, mut other) = (0, 0, 0, Vec::new());
    let k = key("bouncer-busy");
    for _ in 0..200 {
        let first = a.try_lock(&k).await;
        let second = b.try_lock(&k).await;
        for answer in [&first, &second] {
            match answer {
                Ok(Some(_)) => granted += 1,
                Ok(None) => {}
                Err(LockError::InvalidConfig { reason }) if reason.contains("transaction-pooling") => {
                    refused += 1
                }
                Err(e) => other.push(e.to_string()),
            }
        }
        both += usize::from(matches!((&first, &second), (Ok(Some(_)), Ok(Some(_)))));
        for guard in [first, second].into_iter().flatten().flatten() {
            let _ = guard.release().await;
        }
    }
    busy.stop().await;
    eprintln!(
        "200 rounds: both held {both} times; {granted} grants, {refused} refused as pooled, {} other \
         errors (first: {:?})",
        other.len(),
        other.first()
    );
    assert_eq!(both, 0, "two clients held one key {both} times in 200 rounds");
    assert!(other.is_empty(), "a pooler's trouble answered as something else: {other:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_marked_by_another_hold_is_refused_and_a_release_clears_the_mark() {
    let Some(pg) = or_skip("postgres", try_shared_postgres()) else { return };
    let k = key("bouncer-mark");
    // One connection, so every statement runs on one session: a release clears its mark.
    let one = PgPoolOptions::new()
        .max_connections(1)
        .connect_lazy_with(PgConnectOptions::from_str(&pg.url()).expect("url"));
    let lock = Locker::new(Arc::new(PgLock::builder().pool(one).build().await.expect("direct")));
    for _ in 0..3 {
        lock.try_lock(&k).await.expect("try").expect("free").release().await.expect("release");
    }
    // A session where another client's hold ran, as a transaction pooler hands it out: the
    // mark a grant leaves (here set by hand) makes every attempt there a typed refusal.
    let marked = PgPoolOptions::new()
        .max_connections(1)
        .after_connect(|conn, _| {
            Box::pin(async move {
                raw_sql("SELECT set_config('dlock.held', '42', false)").execute(conn).await.map(drop)
            })
        })
        .connect_lazy_with(PgConnectOptions::from_str(&pg.url()).expect("url"));
    let lock = Locker::new(Arc::new(PgLock::builder().pool(marked).build().await.expect("direct")));
    let tried = lock.try_lock(&k).await.map(|g| g.is_some());
    assert!(
        matches!(&tried, Err(LockError::InvalidConfig { reason }) if reason.contains("advisory key 42")),
        "{tried:?}"
    );
    let waited = lock.lock(&k).wait(std::time::Duration::from_secs(2)).acquire().await.map(drop);
    assert!(matches!(&waited, Err(LockError::InvalidConfig { .. })), "{waited:?}");
}
