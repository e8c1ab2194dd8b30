//! Notes on holds (`set_note` / `note`) in every mode, against a real mariadbd: a holder's note
//! is read by another client, a non-holder stores nothing, and after a release, a killed
//! session or an expired lease readers see no note or the new holder's, never the old one.
//!
//! Run: `cargo test -p lock-mysql --test mysql notes::`.

use std::sync::Arc;
use std::time::Duration;

use lock_core::backend::LockBackend;
use lock_core::{LockError, Locker, OwnerToken};
use lock_mysql::Mode;
use lock_mysql_testing::try_shared_mariadb;
use lock_testkit::server::or_skip;
use lock_testkit::within;

use crate::common;

use common::{IDLE_BOUNDS_ARE_GLOBAL, admin, backend, builder};
use lock_core::backend::Notes;

const MODES: [Mode; 3] = [Mode::Pessimistic, Mode::NamedLock, Mode::Optimistic];

fn shared_url() -> Option<String> {
    lock_mysql_testing::external_url().or_else(|| or_skip("mariadb", try_shared_mariadb()).map(|s| s.url()))
}

fn key(case: &str) -> String {
    format!("notes-{case}-{}", OwnerToken::random())
}

/// Every mode says it keeps notes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_mode_has_notes() {
    let Some(url) = shared_url() else { return };
    for mode in MODES {
        assert!(backend(&url, mode).await.notes().is_some(), "{mode:?}");
    }
}

/// A holder's note is read by another client, replaced by a later note of the same hold, and
/// kept across a nested acquisition's release; a non-holder (another client, a foreign token)
/// stores nothing; after the release the note is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holder_note_is_read_by_others_and_ends_with_the_hold() {
    let Some(url) = shared_url() else { return };
    for mode in MODES {
        let (ba, bb) = (backend(&url, mode).await, backend(&url, mode).await);
        let a = Locker::new(ba.clone());
        let k = key("read");
        assert_eq!(bb.note(&k).await.expect("note of a free key"), None, "{mode:?}");
        let g = a.lock(&k).lease(Duration::from_secs(30)).try_acquire().await.expect("try").expect("free");
        assert_eq!(bb.note(&k).await.expect("note"), None, "{mode:?}: held, no note yet");
        assert!(ba.set_note(&k, g.owner(), "leader a:1 ✓").await.expect("set"), "{mode:?}");
        assert_eq!(bb.note(&k).await.expect("note").as_deref(), Some("leader a:1 ✓"), "{mode:?}");
        assert!(ba.set_note(&k, g.owner(), "leader a:2").await.expect("set again"), "{mode:?}");
        assert_eq!(bb.note(&k).await.expect("note").as_deref(), Some("leader a:2"), "{mode:?}");

        assert!(!bb.set_note(&k, OwnerToken::random(), "intruder").await.expect("foreign"), "{mode:?}");
        assert!(!ba.set_note(&k, OwnerToken::random(), "intruder").await.expect("foreign"), "{mode:?}");
        assert_eq!(bb.note(&k).await.expect("note").as_deref(), Some("leader a:2"), "{mode:?}");

        let inner = a.lock(&k).owner(g.owner()).try_acquire().await.expect("nest").expect("nested");
        inner.release().await.expect("release nested");
        assert_eq!(bb.note(&k).await.expect("note").as_deref(), Some("leader a:2"), "{mode:?}: still held");

        let owner = g.owner();
        g.release().await.expect("release");
        assert_eq!(bb.note(&k).await.expect("note"), None, "{mode:?}: released");
        assert!(!ba.set_note(&k, owner, "late").await.expect("after release"), "{mode:?}");
        assert_eq!(bb.note(&k).await.expect("note"), None, "{mode:?}");
    }
}

/// The next holder, on the same client (a session mode may get the very same pooled
/// connection) or another, starts without a note: readers never see the earlier one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn next_holder_never_shows_the_earlier_note() {
    let Some(url) = shared_url() else { return };
    for mode in MODES {
        let (ba, bb) = (backend(&url, mode).await, backend(&url, mode).await);
        let (a, b) = (Locker::new(ba.clone()), Locker::new(bb.clone()));
        let k = key("next");
        for round in 0..3 {
            let g =
                a.lock(&k).lease(Duration::from_secs(30)).try_acquire().await.expect("try").expect("free");
            assert_eq!(bb.note(&k).await.expect("note"), None, "{mode:?} round {round}");
            assert!(ba.set_note(&k, g.owner(), &format!("a{round}")).await.expect("set"));
            assert_eq!(bb.note(&k).await.expect("note"), Some(format!("a{round}")), "{mode:?}");
            g.release().await.expect("release");
        }
        let g = b.lock(&k).lease(Duration::from_secs(30)).try_acquire().await.expect("try").expect("free");
        assert_eq!(ba.note(&k).await.expect("note"), None, "{mode:?}: b holds, no note");
        assert!(bb.set_note(&k, g.owner(), "b").await.expect("set"));
        assert_eq!(ba.note(&k).await.expect("note").as_deref(), Some("b"), "{mode:?}");
        g.release().await.expect("release");
    }
}

/// A session mode's holder whose connection is killed: its note goes with the session, and the
/// waiter that takes over is never shown it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_holder_note_is_never_the_successors() {
    let Some(url) = shared_url() else { return };
    let admin = admin(&url).await;
    for mode in [Mode::Pessimistic, Mode::NamedLock] {
        let (ba, bb) = (backend(&url, mode).await, backend(&url, mode).await);
        let (a, b) = (Locker::new(ba.clone()), Locker::new(bb.clone()));
        let k = key("kill");
        let g = a.lock(&k).lease(Duration::from_secs(30)).try_acquire().await.expect("try").expect("free");
        assert!(ba.set_note(&k, g.owner(), "old leader").await.expect("set"));
        let k2 = k.clone();
        let waiter = tokio::spawn(async move { b.lock(&k2).wait(Duration::from_secs(20)).acquire().await });
        let id = ba.held_connection_id(&k).expect("held here");
        lock_mysql::sqlx::query("KILL CONNECTION ?").bind(id).execute(&admin).await.expect("kill");
        let gb = within(Duration::from_secs(5), "waiter", waiter).await.expect("task").expect("acquire");
        assert_eq!(ba.note(&k).await.expect("note"), None, "{mode:?}: the old note is gone");
        within(Duration::from_secs(3), "lost signal", g.lost()).await;
        assert!(!ba.set_note(&k, g.owner(), "zombie").await.expect("lost hold"), "{mode:?}");
        assert!(bb.set_note(&k, gb.owner(), "new leader").await.expect("set"));
        assert_eq!(ba.note(&k).await.expect("note").as_deref(), Some("new leader"), "{mode:?}");
        gb.release().await.expect("release");
        assert_eq!(ba.note(&k).await.expect("note"), None, "{mode:?}");
    }
}

/// An optimistic note lives no longer than its lease: once the lease ran out (by the database
/// clock) the note is not shown, and the next holder starts without one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_optimistic_lease_takes_its_note_along() {
    let Some(url) = shared_url() else { return };
    let (ba, bb) = (backend(&url, Mode::Optimistic).await, backend(&url, Mode::Optimistic).await);
    let (a, b) = (Locker::new(ba.clone()), Locker::new(bb.clone()));
    let k = key("expire");
    let g = a.lock(&k).lease(Duration::from_millis(300)).try_acquire().await.expect("try").expect("free");
    let owner = g.owner();
    assert!(ba.set_note(&k, owner, "short").await.expect("set"));
    assert_eq!(bb.note(&k).await.expect("note").as_deref(), Some("short"));
    std::mem::forget(g); // no release, no watchdog: the lease runs out
    let gb = b.lock(&k).wait(Duration::from_secs(5)).acquire().await.expect("taken over after expiry");
    assert_eq!(bb.note(&k).await.expect("note"), None, "the expired hold's note is not the new one's");
    assert!(!ba.set_note(&k, owner, "zombie").await.expect("expired"));
    assert_eq!(ba.note(&k).await.expect("note"), None);
    gb.release().await.expect("release");
}

/// A note that is too long or has a control character is a typed error from the backend too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_notes_are_typed_errors() {
    let Some(url) = shared_url() else { return };
    let b = backend(&url, Mode::Pessimistic).await;
    let long = "x".repeat(lock_core::backend::MAX_NOTE_BYTES + 1);
    for bad in [long.as_str(), "a\nb"] {
        let e = b.set_note("k", OwnerToken::random(), bad).await.expect_err("refused");
        assert!(matches!(e, LockError::InvalidConfig { .. }), "{e:?}");
    }
}

/// A session mode's note is never committed, and a noted hold gives its connection back to the
/// pool as it came: no transaction open, the server-wide timeouts restored (the named mode
/// opens a transaction for its notes and sets its idle bounds on it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn noted_session_holds_commit_nothing_and_pool_their_connection_clean() {
    let Some(url) = shared_url() else { return };
    for mode in [Mode::Pessimistic, Mode::NamedLock] {
        let b = builder(&url, mode).max_connections(1).build().await.expect("build");
        let l = Locker::new(Arc::new(b.clone()));
        let k = key("clean");
        let g = l.lock(&k).try_acquire().await.expect("try").expect("free");
        assert!(b.set_note(&k, g.owner(), "n1").await.expect("set"));
        assert!(b.set_note(&k, g.owner(), "n2").await.expect("set again"));
        g.release().await.expect("release");
        // One connection in the pool: the one that held the lock.
        let mut conn = b.pool().acquire().await.expect("pooled");
        let clean: i64 = lock_mysql::sqlx::query_scalar(lock_mysql::sqlx::AssertSqlSafe(format!(
            "SELECT @@in_transaction = 0 AND {IDLE_BOUNDS_ARE_GLOBAL}"
        )))
        .fetch_one(&mut *conn)
        .await
        .expect("query");
        assert_eq!(clean, 1, "{mode:?}: a pooled connection kept the holder's transaction or timeouts");
        let committed: i64 = lock_mysql::sqlx::query_scalar(lock_mysql::sqlx::AssertSqlSafe(format!(
            "SELECT COUNT(*) FROM `{}_notes` WHERE name = ?",
            b.table()
        )))
        .bind(k.as_bytes())
        .fetch_one(&mut *conn)
        .await
        .expect("count");
        assert_eq!(committed, 0, "{mode:?}: a note row was committed");
    }
}

/// `set_note` futures cut off at any point leave the hold working and never a note that
/// outlives it: afterwards a note is stored and read as usual, and after the release neither
/// the next holder nor anyone else sees any of them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cut_off_set_note_leaves_nothing_behind() {
    let Some(url) = shared_url() else { return };
    for mode in MODES {
        let (ba, bb) = (backend(&url, mode).await, backend(&url, mode).await);
        let (a, b) = (Locker::new(ba.clone()), Locker::new(bb.clone()));
        let k = key("cut");
        let g = a.lock(&k).lease(Duration::from_secs(30)).try_acquire().await.expect("try").expect("free");
        for i in 0..20u64 {
            let note = format!("cut{i}");
            let cut =
                lock_testkit::cut_after(ba.set_note(&k, g.owner(), &note), Duration::from_micros(i * 40));
            if let Some(done) = cut.await {
                assert!(done.expect("set"), "{mode:?}");
            }
            let seen = bb.note(&k).await.expect("note");
            assert!(seen.as_deref().is_none_or(|n| n.starts_with("cut")), "{mode:?}: {seen:?}");
        }
        // An optimistic statement cut off after it was written runs when its connection goes
        // back to the pool (sqlx pings it there): wait until every connection is back, so none
        // can land after the next note (it would be this hold's note, but not "final").
        // (The session modes' holds pin a connection each; their notes never use the pool.)
        if mode == Mode::Optimistic {
            let pool = ba.pool().clone();
            lock_testkit::eventually(Duration::from_secs(5), "connections back in the pool", || {
                let pool = pool.clone();
                async move { pool.num_idle() == pool.size() as usize }
            })
            .await;
        }
        g.renew(Duration::from_secs(30)).await.expect("the hold goes on");
        assert!(ba.set_note(&k, g.owner(), "final").await.expect("set"), "{mode:?}");
        assert_eq!(bb.note(&k).await.expect("note").as_deref(), Some("final"), "{mode:?}");
        g.release().await.expect("release");
        assert_eq!(bb.note(&k).await.expect("note"), None, "{mode:?}");
        let gb = b.lock(&k).lease(Duration::from_secs(30)).try_acquire().await.expect("try").expect("free");
        assert_eq!(ba.note(&k).await.expect("note"), None, "{mode:?}");
        gb.release().await.expect("release");
    }
}
