//! Notes on holds (`set_note` / `note`) against a real postgres: a holder's note is read by
//! another client, a non-holder stores nothing, and after a release or a terminated backend
//! readers see no note or the new holder's, never the old one.
//!
//! Run: `cargo test -p lock-postgres --test postgres notes::`.

use std::sync::Arc;
use std::time::Duration;

use lock_core::backend::LockBackend;
use lock_core::{LockError, Locker, OwnerToken};
use lock_postgres::PgLock;
use lock_postgres::sqlx::postgres::PgPoolOptions;
use lock_postgres_testing::try_shared_postgres;
use lock_testkit::server::or_skip;
use lock_testkit::within;

use crate::common;
use common::{KEEPALIVE, backend};
use lock_core::backend::Notes;

/// The shared server's (lock role URL, administrator URL), or `None` after printing why not.
fn shared() -> Option<(String, String)> {
    if let Some(url) = lock_postgres_testing::external_url() {
        return Some((url.clone(), url));
    }
    or_skip("postgres", try_shared_postgres()).map(|s| (s.url(), s.admin_url()))
}

fn key(case: &str) -> String {
    format!("notes-{case}-{}", OwnerToken::random())
}

/// A holder's note is read by another client, replaced by a later note of the same hold and
/// kept across a nested acquisition's release; a non-holder stores nothing; after the release
/// the note is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holder_note_is_read_by_others_and_ends_with_the_hold() {
    let Some((url, _)) = shared() else { return };
    let (ba, bb) = (backend(&url).await, backend(&url).await);
    assert!(ba.notes().is_some());
    let a = Locker::new(ba.clone());
    let k = key("read");
    assert_eq!(bb.note(&k).await.expect("note of a free key"), None);
    let g = a.lock(&k).try_acquire().await.expect("try").expect("free");
    assert_eq!(bb.note(&k).await.expect("note"), None, "held, no note yet");
    assert!(ba.set_note(&k, g.owner(), "leader a:1 ✓ 'quoted'").await.expect("set"));
    assert_eq!(bb.note(&k).await.expect("note").as_deref(), Some("leader a:1 ✓ 'quoted'"));
    assert!(ba.set_note(&k, g.owner(), "leader a:2").await.expect("set again"));
    assert_eq!(bb.note(&k).await.expect("note").as_deref(), Some("leader a:2"));

    assert!(!bb.set_note(&k, OwnerToken::random(), "intruder").await.expect("foreign"));
    assert!(!ba.set_note(&k, OwnerToken::random(), "intruder").await.expect("foreign"));
    assert!(!bb.set_note(&k, g.owner(), "other client").await.expect("not held by that client"));
    assert_eq!(bb.note(&k).await.expect("note").as_deref(), Some("leader a:2"));

    let inner = a.lock(&k).owner(g.owner()).try_acquire().await.expect("nest").expect("nested");
    inner.release().await.expect("release nested");
    assert_eq!(bb.note(&k).await.expect("note").as_deref(), Some("leader a:2"), "still held");

    let owner = g.owner();
    g.release().await.expect("release");
    assert_eq!(bb.note(&k).await.expect("note"), None, "released");
    assert!(!ba.set_note(&k, owner, "late").await.expect("after release"));
    assert_eq!(bb.note(&k).await.expect("note"), None);
}

/// The next holder, on the same client (likely the very same pooled connection, so the same
/// backend pid) or another, starts without a note: readers never see the earlier one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn next_holder_never_shows_the_earlier_note() {
    let Some((url, _)) = shared() else { return };
    let (ba, bb) = (backend(&url).await, backend(&url).await);
    let (a, b) = (Locker::new(ba.clone()), Locker::new(bb.clone()));
    let k = key("next");
    for round in 0..3 {
        let g = a.lock(&k).try_acquire().await.expect("try").expect("free");
        assert_eq!(bb.note(&k).await.expect("note"), None, "round {round}");
        assert!(ba.set_note(&k, g.owner(), &format!("a{round}")).await.expect("set"));
        assert_eq!(bb.note(&k).await.expect("note"), Some(format!("a{round}")));
        g.release().await.expect("release");
    }
    let g = b.lock(&k).try_acquire().await.expect("try").expect("free");
    assert_eq!(ba.note(&k).await.expect("note"), None, "b holds, no note");
    assert!(bb.set_note(&k, g.owner(), "b").await.expect("set"));
    assert_eq!(ba.note(&k).await.expect("note").as_deref(), Some("b"));
    g.release().await.expect("release");
}

/// A holder whose backend is terminated: its note row stays behind, yet is never shown, not
/// while the key is free and not under the waiter that takes over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn terminated_holder_note_is_never_the_successors() {
    let Some((url, admin_url)) = shared() else { return };
    let admin = PgPoolOptions::new().max_connections(2).connect(&admin_url).await.expect("admin pool");
    let (ba, bb) = (backend(&url).await, backend(&url).await);
    let (a, b) = (Locker::new(ba.clone()), Locker::new(bb.clone()));
    let k = key("kill");
    let g = a.lock(&k).try_acquire().await.expect("try").expect("free");
    assert!(ba.set_note(&k, g.owner(), "old leader").await.expect("set"));
    let pid = ba.held_backend_pid(&k).expect("held here");
    let terminated: bool = lock_postgres::sqlx::query_scalar("SELECT pg_terminate_backend($1, 5000)")
        .bind(pid)
        .fetch_one(&admin)
        .await
        .expect("terminate");
    assert!(terminated);
    assert_eq!(bb.note(&k).await.expect("note"), None, "the dead holder's note");
    within(Duration::from_secs(3), "lost signal", g.lost()).await;
    assert!(!ba.set_note(&k, g.owner(), "zombie").await.expect("lost hold"));
    let gb = b.lock(&k).wait(Duration::from_secs(5)).acquire().await.expect("acquire");
    assert_eq!(ba.note(&k).await.expect("note"), None, "the new holder has no note yet");
    assert!(bb.set_note(&k, gb.owner(), "new leader").await.expect("set"));
    assert_eq!(ba.note(&k).await.expect("note").as_deref(), Some("new leader"));
    gb.release().await.expect("release");
    assert_eq!(ba.note(&k).await.expect("note"), None);
}

/// A note that is too long or has a control character is a typed error from the backend too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_notes_are_typed_errors() {
    let Some((url, _)) = shared() else { return };
    let b = backend(&url).await;
    let long = "x".repeat(lock_core::backend::MAX_NOTE_BYTES + 1);
    for bad in [long.as_str(), "a\u{7}b"] {
        let e = b.set_note("k", OwnerToken::random(), bad).await.expect_err("refused");
        assert!(matches!(e, LockError::InvalidConfig { .. }), "{e:?}");
    }
}

/// A fence table of an older version (no note columns) gets them when its owner builds: notes
/// then work on it, and its fences go on increasing from where they were.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn building_adds_the_note_columns_to_an_older_table() {
    let Some((url, _)) = shared() else { return };
    let table = format!("dlock_old_{}", OwnerToken::random());
    let pool = PgPoolOptions::new().max_connections(1).connect(&url).await.expect("pool");
    lock_postgres::sqlx::raw_sql(lock_postgres::sqlx::AssertSqlSafe(format!(
        "CREATE TABLE {table} (name bytea NOT NULL PRIMARY KEY, fence bigint NOT NULL); \
         INSERT INTO {table} VALUES ('old-key', 41)"
    )))
    .execute(&pool)
    .await
    .expect("older table");
    let lock = Arc::new(
        PgLock::builder().url(&url).table(&table).keepalive(KEEPALIVE).build().await.expect("build"),
    );
    let g = Locker::new(lock.clone()).lock("old-key").try_acquire().await.expect("try").expect("free");
    // Above the old counter: the first grant on the new fence epoch starts at its floor.
    assert!(g.fence().is_some_and(|f| f.0 > 41), "{:?}", g.fence());
    assert!(lock.set_note("old-key", g.owner(), "upgraded").await.expect("set"));
    assert_eq!(lock.note("old-key").await.expect("read").as_deref(), Some("upgraded"));
    g.release().await.expect("release");
}

/// `set_note` futures cut off at any point leave the hold working and never a note that
/// outlives it: afterwards a note is stored and read as usual, and after the release neither
/// the next holder nor anyone else sees any of them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cut_off_set_note_leaves_nothing_behind() {
    let Some((url, _)) = shared() else { return };
    let (ba, bb) = (backend(&url).await, backend(&url).await);
    let (a, b) = (Locker::new(ba.clone()), Locker::new(bb.clone()));
    let k = key("cut");
    let g = a.lock(&k).try_acquire().await.expect("try").expect("free");
    for i in 0..20u64 {
        let note = format!("cut{i}");
        let cut = lock_testkit::cut_after(ba.set_note(&k, g.owner(), &note), Duration::from_micros(i * 40));
        if let Some(done) = cut.await {
            assert!(done.expect("set"));
        }
        let seen = bb.note(&k).await.expect("note");
        assert!(seen.as_deref().is_none_or(|n| n.starts_with("cut")), "{seen:?}");
    }
    g.renew(Duration::from_secs(30)).await.expect("the hold goes on");
    assert!(ba.set_note(&k, g.owner(), "final").await.expect("set"));
    assert_eq!(bb.note(&k).await.expect("note").as_deref(), Some("final"));
    g.release().await.expect("release");
    assert_eq!(bb.note(&k).await.expect("note"), None);
    let gb = b.lock(&k).try_acquire().await.expect("try").expect("free");
    assert_eq!(ba.note(&k).await.expect("note"), None);
    gb.release().await.expect("release");
}
