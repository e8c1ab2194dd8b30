//! Fault tests against real postgres processes: a terminated holder backend, a paused
//! (SIGSTOPped) server, a dropped waiter, keys one character apart, a killed and restarted
//! server, the user's own pool and a least-privileged role.
//!
//! Run: `cargo test -p lock-postgres --test postgres faults::`.

use std::sync::Arc;
use std::time::Duration;

use lock_core::{LeaseState, LockError, Locker, LostReason, OwnerToken};
use lock_postgres::sqlx::postgres::PgPoolOptions;
use lock_postgres::{PgLock, advisory_key};
use lock_postgres_testing::PgServer;
use lock_testkit::server::or_skip;
use lock_testkit::{eventually, within};
use tokio::time::Instant;

use crate::common;
use common::{KEEPALIVE, admin, advisory_locks, backend, key, lockers, shared};
use lock_core::backend::Notes;

/// Terminating the holder's backend fires its lost signal, and a waiter queued in the server
/// gets the lock at once, with a larger fence.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn terminated_holder_backend_fires_lost_and_waiter_acquires() {
    let Some((url, admin_url)) = shared() else { return };
    let (ba, bb) = (backend(&url).await, backend(&url).await);
    let (a, b) = (Locker::new(ba.clone()), Locker::new(bb));
    let k = key("terminate");
    let g = a.lock(&k).lease(Duration::from_secs(30)).try_acquire().await.expect("try").expect("free");
    let k2 = k.clone();
    let waiter = tokio::spawn(async move {
        let g = b.lock(&k2).wait(Duration::from_secs(20)).acquire().await;
        (Instant::now(), g)
    });
    let admin = admin(&admin_url).await;
    eventually(Duration::from_secs(5), "the waiter queues in the server", || {
        let admin = admin.clone();
        let k = k.clone();
        async move { advisory_locks(&admin, &k).await == (1, 1) }
    })
    .await;

    let pid = ba.held_backend_pid(&k).expect("held here");
    let killed_at = Instant::now();
    let done: bool = lock_postgres::sqlx::query_scalar("SELECT pg_terminate_backend($1, 5000)")
        .bind(pid)
        .fetch_one(&admin)
        .await
        .expect("terminate");
    assert!(done);

    let (got_at, gb) = within(Duration::from_secs(5), "waiter", waiter).await.expect("task");
    let gb = gb.expect("waiter acquires after the termination");
    assert!(got_at - killed_at < Duration::from_secs(1), "waiter took {:?}", got_at - killed_at);
    within(KEEPALIVE * 10 + Duration::from_secs(1), "lost signal", g.lost()).await;
    assert_eq!(g.state(), LeaseState::Lost(LostReason::SessionEnded));
    assert!(gb.fence() > g.fence());
    assert!(matches!(g.release().await, Err(LockError::LeaseLost { .. })));
    gb.release().await.expect("release");
}

/// A SIGSTOPped server: the hold turns `Uncertain` after one unanswered keep-alive and `Lost`
/// before the server's idle bound ends the session; only after that can another client hold.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paused_server_makes_the_hold_uncertain_then_lost_before_anyone_else_holds() {
    let Some(server) = or_skip("postgres", PgServer::start()) else { return };
    let server = Arc::new(server);
    let url = server.url();
    let [a, b] = lockers(&url).await;
    let k = key("pause");
    let g = a.lock(&k).lease(Duration::from_secs(30)).try_acquire().await.expect("try").expect("free");
    let mut states = g.state_changes();
    let s = server.clone();
    tokio::task::spawn_blocking(move || s.pause()).await.expect("join").expect("SIGSTOP");
    let paused_at = Instant::now();
    within(KEEPALIVE * 5, "uncertain", states.wait_for(|s| *s == LeaseState::Uncertain))
        .await
        .expect("watch");
    within(Duration::from_secs(5), "lost", g.lost()).await;
    let lost_at = Instant::now();
    assert!(lost_at - paused_at < Duration::from_secs(3), "lost after {:?}", lost_at - paused_at);
    let s = server.clone();
    tokio::task::spawn_blocking(move || s.resume()).await.expect("join").expect("SIGCONT");
    let n = b.lock(&k).wait(Duration::from_secs(10)).acquire().await.expect("acquire after resume");
    assert!(n.fence() > g.fence());
    assert!(matches!(g.release().await, Err(LockError::LeaseLost { .. })));
    n.release().await.expect("release");
}

/// An acquire future dropped while it waits in the server's queue leaves neither a waiter nor
/// a grant behind (`pg_locks`), and the key is free once the holder releases.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_waiter_leaves_no_grant() {
    let Some((url, admin_url)) = shared() else { return };
    let admin = admin(&admin_url).await;
    let [a, b, c] = lockers(&url).await;
    let k = key("dropped");
    let g = a.lock(&k).lease(Duration::from_secs(30)).try_acquire().await.expect("try").expect("free");
    let k2 = k.clone();
    let waiter = tokio::spawn(async move { b.lock(&k2).wait(Duration::from_secs(30)).acquire().await });
    eventually(Duration::from_secs(5), "the waiter queues in the server", || {
        let (admin, k) = (admin.clone(), k.clone());
        async move { advisory_locks(&admin, &k).await == (1, 1) }
    })
    .await;
    waiter.abort();
    assert!(waiter.await.expect_err("aborted").is_cancelled());
    eventually(Duration::from_secs(5), "the dropped wait is gone from the server", || {
        let (admin, k) = (admin.clone(), k.clone());
        async move { advisory_locks(&admin, &k).await == (1, 0) }
    })
    .await;
    g.release().await.expect("release");
    assert_eq!(advisory_locks(&admin, &k).await, (0, 0), "no grant survives the dropped waiter");
    c.try_lock(&k).await.expect("try").expect("free after release").release().await.expect("release");
}

/// Keys one character apart map to different advisory keys and lock independently.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_one_character_apart_do_not_collide() {
    let Some((url, _)) = shared() else { return };
    let [a, b] = lockers(&url).await;
    let base = key("near");
    let names: Vec<String> = ["a", "b", "A", "aa", "a ", "é"].iter().map(|s| format!("{base}{s}")).collect();
    let mut keys: Vec<i64> = names.iter().map(|n| advisory_key(n)).collect();
    keys.sort_unstable();
    keys.dedup();
    assert_eq!(keys.len(), names.len(), "advisory keys collide");
    let held: Vec<_> = {
        let mut v = Vec::new();
        for n in &names[..3] {
            v.push(a.try_lock(n).await.expect("try").expect("free"));
        }
        v
    };
    for n in &names[3..] {
        b.try_lock(n)
            .await
            .expect("try")
            .expect("a neighbour's name is free")
            .release()
            .await
            .expect("release");
    }
    for n in &names[..3] {
        assert!(b.try_lock(n).await.expect("try").is_none(), "{n} is held");
    }
    for g in held {
        g.release().await.expect("release");
    }
}

/// postgres SIGKILLed while a lock is held: the holder sees the loss, acquisitions fail with
/// temporary errors; after a restart they work and fences keep increasing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_killed_and_restarted() {
    let Some(server) = or_skip("postgres", PgServer::start()) else { return };
    let server = Arc::new(server);
    let url = server.url();
    let be = backend(&url).await;
    let l = Locker::new(be.clone());
    let k = key("restart");
    let g = l.lock(&k).lease(Duration::from_secs(60)).try_acquire().await.expect("try").expect("free");
    let s = server.clone();
    tokio::task::spawn_blocking(move || s.kill()).await.expect("join").expect("SIGKILL postgres");
    within(Duration::from_secs(3), "lost after the kill", g.lost()).await;
    match l.try_lock(&key("down")).await {
        Err(e) => assert!(e.is_temporary(), "{e:?}"),
        Ok(_) => panic!("acquired on a dead server"),
    }
    let s = server.clone();
    tokio::task::spawn_blocking(move || s.restart()).await.expect("join").expect("restart postgres");
    let n = l.lock(&k).wait(Duration::from_secs(15)).acquire().await.expect("acquire after restart");
    assert!(n.fence() > g.fence(), "fence after restart {:?} !> {:?}", n.fence(), g.fence());
    n.release().await.expect("release");
    assert!(matches!(g.release().await, Err(LockError::LeaseLost { .. })));
}

/// Grants commit their fences without a flush (the fence epoch): postgres SIGKILLed right after
/// a burst of grants loses the last of them, yet the first fence after the restart is above
/// every fence handed out before the kill, for the waiting grant and the trying one, round
/// after round. Without the epoch's bump after a crash, the first round gave 58 after 100.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fences_never_repeat_after_a_crash() {
    let Some(server) = or_skip("postgres", PgServer::start()) else { return };
    let server = Arc::new(server);
    let be = backend(&server.url()).await;
    let l = Locker::new(be.clone());
    let k = key("crash-fence");
    let mut before = 0;
    for round in 0..3 {
        for _ in 0..100 {
            let g =
                l.lock(&k).lease(Duration::from_secs(10)).try_acquire().await.expect("try").expect("free");
            before = before.max(g.fence().expect("fenced").0);
            g.release().await.expect("release");
        }
        let s = server.clone();
        tokio::task::spawn_blocking(move || s.kill()).await.expect("join").expect("SIGKILL postgres");
        let s = server.clone();
        tokio::task::spawn_blocking(move || s.restart()).await.expect("join").expect("restart postgres");
        let after = match round {
            0 => l.lock(&k).wait(Duration::from_secs(15)).acquire().await.expect("acquire after restart"),
            _ => {
                within(Duration::from_secs(15), "a try after restart", async {
                    loop {
                        match l.lock(&k).lease(Duration::from_secs(10)).try_acquire().await {
                            Ok(Some(g)) => break g,
                            Ok(None) => panic!("nobody holds it"),
                            Err(e) => assert!(e.is_temporary(), "{e:?}"),
                        }
                    }
                })
                .await
            }
        };
        let fence = after.fence().expect("fenced").0;
        assert!(fence > before, "round {round}: fence {fence} after the crash, {before} handed out before");
        before = fence;
        after.release().await.expect("release");
    }
}

/// The user's own `PgPool` works, and a held lock keeps exactly one of its connections.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn accepts_the_users_own_pool() {
    let Some((url, _)) = shared() else { return };
    let pool = PgPoolOptions::new().max_connections(3).connect(&url).await.expect("pool");
    let lock = PgLock::builder().pool(pool.clone()).keepalive(KEEPALIVE).build().await.expect("build");
    let (a, b) = (Locker::new(Arc::new(lock)), Locker::new(backend(&url).await));
    let k = key("own-pool");
    let g = a.lock(&k).lease(Duration::from_secs(10)).try_acquire().await.expect("try").expect("free");
    assert!(b.try_lock(&k).await.expect("try").is_none());
    // The pool still serves its owner while the lock pins one connection.
    let one: i32 = lock_postgres::sqlx::query_scalar("SELECT 1").fetch_one(&pool).await.expect("query");
    assert_eq!(one, 1);
    g.release().await.expect("release");
    b.try_lock(&k).await.expect("try").expect("free").release().await.expect("release");
}

/// A role without CREATE and without superuser locks with a table made for it; without the
/// table, `build` fails with `PermissionDenied`, never a panic.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn least_privileged_role() {
    let Some(server) = or_skip("postgres", PgServer::start()) else { return };
    let role = format!("app_{}", &OwnerToken::random().to_string()[..8]).to_lowercase();
    server
        .exec_as_admin(&[
            &format!("CREATE ROLE {role} LOGIN PASSWORD 'apppw'"),
            "REVOKE CREATE ON SCHEMA public FROM PUBLIC",
            &format!("GRANT CONNECT ON DATABASE locktest TO {role}"),
        ])
        .expect("role");
    let url = format!("postgres://{role}:apppw@127.0.0.1:{}/locktest", server.port());
    let err = PgLock::builder().url(&url).table("app_fence").build().await.expect_err("no CREATE");
    assert!(matches!(err, LockError::PermissionDenied { .. }), "{err:?}");
    server
        .exec_as_admin(&[
            "CREATE TABLE app_fence (name bytea NOT NULL PRIMARY KEY, fence bigint NOT NULL)",
            &format!("GRANT SELECT, INSERT, UPDATE ON app_fence TO {role}"),
        ])
        .expect("table");
    let lock =
        PgLock::builder().url(&url).table("app_fence").create_schema(false).build().await.expect("build");
    let lock = Arc::new(lock);
    let l = Locker::new(lock.clone());
    let g = l.lock("job").wait(Duration::from_secs(1)).acquire().await.expect("acquire");
    // No epoch tables: the counter alone, flushed at each grant.
    assert_eq!(g.fence().map(|f| f.0), Some(1));
    // A table of an older version has no note columns: a note is a permanent error, the hold
    // goes on, and building with create_schema(true) (which may not add them) still works.
    let e = lock.set_note("job", g.owner(), "leader").await.expect_err("no note columns");
    assert!(!e.is_temporary(), "{e:?}");
    g.renew(Duration::from_secs(30)).await.expect("the hold goes on");
    g.release().await.expect("release");
    PgLock::builder().url(&url).table("app_fence").build().await.expect("build without ALTER");
    // Once the owner adds them (sql/notes_schema.sql), notes need no privilege beyond the lock's.
    server
        .exec_as_admin(&[
            "ALTER TABLE app_fence ADD COLUMN note_fence bigint, ADD COLUMN note_pid integer, ADD COLUMN note text",
        ])
        .expect("note columns");
    let g = l.lock("job").try_acquire().await.expect("try").expect("free");
    assert!(lock.set_note("job", g.owner(), "leader").await.expect("set"));
    assert_eq!(lock.note("job").await.expect("read").as_deref(), Some("leader"));
    g.release().await.expect("release");
    assert_eq!(lock.note("job").await.expect("read"), None);
}

/// Connections the builder opens have the server watch their socket during a statement, so
/// the lock wait of a client that died leaves the queue within a second.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn builder_connections_have_the_server_watch_the_client_socket() {
    let Some((url, _)) = shared() else { return };
    let lock = backend(&url).await;
    let v: String = lock_postgres::sqlx::query_scalar("SHOW client_connection_check_interval")
        .fetch_one(lock.pool())
        .await
        .expect("show");
    assert_eq!(v, "1s");
}

/// Locks built at the same moment on a new fence table all succeed: two concurrent
/// `CREATE TABLE IF NOT EXISTS` once failed on pg_type's unique index (seen in CI).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_builds_create_the_table_once() {
    let Some((url, _)) = shared() else { return };
    let table = format!("dlock_race_{}", OwnerToken::random());
    let builds = (0..8).map(|_| PgLock::builder().url(&url).table(&table).keepalive(KEEPALIVE).build());
    for built in futures_util::future::join_all(builds).await {
        let lock = Locker::new(Arc::new(built.expect("every concurrent build succeeds")));
        lock.try_lock(key("race")).await.expect("try").expect("free").release().await.expect("release");
    }
}
