//! Interop with a Python service next door (issue 19): a real PyMySQL client taking
//! `GET_LOCK` on its own session (`tests/interop/get_lock_peer.py`, on the pinned venv of
//! `lock_testkit::interop::python`) and this library's `?mode=get_lock` exclude each other on
//! the same name, hand the lock over in both directions, and a killed Python holder's lock
//! goes with its session. The peer computes the lock name itself, the way .NET's
//! DistributedLock does for ASCII keys: a short key is its own name, a long, mixed-case or
//! non-ASCII one is hashed.
//!
//! Run: `cargo test -p lock-mysql --test mysql interop::`.

use std::sync::Arc;
use std::time::Duration;

use lock_core::{LockError, Locker, OwnerToken};
use lock_mysql::sqlx::mysql::{MySqlPool, MySqlPoolOptions};
use lock_mysql::{Mode, MySqlLock, lock_name};
use lock_testkit::interop::{Peer, python};
use lock_testkit::{eventually, within};
use tokio::process::Command;

use crate::common;

use common::{builder, hex, shared_url as url, statements_like};

/// Long enough for a loaded CI machine, far shorter than anything that would hide a hang.
const ANSWER: Duration = Duration::from_secs(10);

async fn backend(url: &str) -> Arc<MySqlLock> {
    Arc::new(builder(url, Mode::NamedLock).build().await.expect("build"))
}

/// A PyMySQL peer on `url`, connected (`READY`); `None` when Python is unavailable (skipped).
async fn peer(url: &str) -> Option<Peer> {
    let python = python()?;
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/mysql/interop/get_lock_peer.py");
    let mut cmd = Command::new(python);
    cmd.arg(script).arg(url);
    let mut p = Peer::spawn("pymysql GET_LOCK", cmd);
    p.expect("READY", ANSWER).await;
    Some(p)
}

/// Whether a statement matching `pattern` (LIKE) runs on the server now: a client waiting in
/// GET_LOCK for a name.
async fn waits(admin: &MySqlPool, pattern: &str) -> bool {
    statements_like(admin, pattern).await > 0
}

/// The four kinds of key: a name as it is, one over 64 characters (hashed), one with upper
/// case (hashed: lock names are documented as case-insensitive), one with a non-ASCII
/// character (hashed: no Unicode case table decides its name).
fn keys() -> [(&'static str, String); 4] {
    let t = OwnerToken::random();
    [
        ("short", format!("interop-{t}")),
        ("long", format!("interop-long-{t}-{}", "x".repeat(40))),
        ("mixed case", format!("Interop-Upper-{t}")),
        ("non-ascii", format!("interop-été-{t}")),
    ]
}

/// The Python side names every key as this library does (the .NET scheme for ASCII keys): short
/// lower-case ASCII keys as they are, the others hashed to 64 characters.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pymysql_peer_names_keys_as_this_library_does() {
    let url = url();
    let Some(mut py) = peer(&url).await else { return };
    for (what, key) in keys() {
        let line = py.call(&format!("name {}", hex(&key)), "NAME ", ANSWER).await;
        let name = line.strip_prefix("NAME ").expect("NAME");
        assert_eq!(name, lock_name(&key), "{what} key {key:?}");
        assert_eq!(name == key, what == "short", "{what} key {key:?} -> {name:?}");
        assert!(name.chars().count() <= 64, "{name:?}");
    }
    py.send("exit").await;
}

/// A PyMySQL holder excludes this library (try, and a wait that times out), hands the lock
/// over to a waiting acquire() on release; then this library's hold excludes PyMySQL's
/// GET_LOCK (IS_USED_LOCK names our session), and our release hands it to a waiting PyMySQL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pymysql_and_this_library_exclude_each_other_and_hand_over_both_ways() {
    let url = url();
    let Some(mut py) = peer(&url).await else { return };
    let lock = backend(&url).await;
    let us = Locker::new(lock.clone());
    let admin = MySqlPoolOptions::new().max_connections(1).connect(&url).await.expect("admin pool");
    for (what, key) in keys() {
        let k = hex(&key);
        // Python holds: we are refused, and a short wait times out.
        assert_eq!(py.call(&format!("acquire {k} 0"), "", ANSWER).await, "ACQUIRED", "{what}");
        assert!(us.try_lock(&key).await.expect("try").is_none(), "{what}: pymysql's hold did not exclude us");
        match us.lock(&key).wait(Duration::from_millis(300)).acquire().await {
            Err(LockError::Timeout { .. }) => {}
            other => panic!("{what}: expected a timeout behind pymysql, got {other:?}"),
        }
        // Python releases: our waiter (queued in GET_LOCK) gets it.
        let (us2, key2) = (us.clone(), key.clone());
        let waiter =
            tokio::spawn(async move { us2.lock(&key2).wait(Duration::from_secs(20)).acquire().await });
        // As text naming the key, or (on the connection kept from the refused attempts) the
        // prepared statement, shown with its placeholders.
        let ours = format!("%GET_LOCK(CONVERT(X'{}'%", hex(lock_name(&key)));
        eventually(ANSWER, "our acquire() waits in GET_LOCK", || async {
            waits(&admin, &ours).await || waits(&admin, "%GET_LOCK(?, ?)%").await
        })
        .await;
        assert_eq!(py.call(&format!("release {k}"), "RELEASED", ANSWER).await, "RELEASED 1", "{what}");
        let g = within(ANSWER, "our waiter after pymysql's release", waiter)
            .await
            .expect("join")
            .unwrap_or_else(|e| panic!("{what}: our waiter: {e}"));

        // We hold: pymysql is refused, and sees our session as the holder.
        assert_eq!(py.call(&format!("acquire {k} 0"), "", ANSWER).await, "TIMEOUT", "{what}");
        let holder = py.call(&format!("holder {k}"), "HOLDER", ANSWER).await;
        let ours = lock.held_connection_id(&key).expect("held here");
        assert_eq!(holder, format!("HOLDER {ours}"), "{what}");
        // pymysql waits in GET_LOCK; our release hands the lock over.
        py.send(&format!("acquire {k} 20")).await;
        let theirs = format!("%GET_LOCK('{}'%", lock_name(&key));
        eventually(ANSWER, "pymysql waits in GET_LOCK", || waits(&admin, &theirs)).await;
        g.release().await.expect("release");
        assert_eq!(py.expect("", ANSWER).await, "ACQUIRED", "{what}: pymysql after our release");
        assert!(us.try_lock(&key).await.expect("try").is_none(), "{what}: pymysql's new hold");
        assert_eq!(py.call(&format!("release {k}"), "RELEASED", ANSWER).await, "RELEASED 1", "{what}");
    }
    py.send("exit").await;
}

/// A Python holder killed mid-hold (SIGKILL): its session ends, the server frees the name, and
/// our waiter gets it, well before its deadline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_pymysql_holder_releases_the_lock() {
    let url = url();
    let us = Locker::new(backend(&url).await);
    for (what, key) in keys() {
        let Some(mut py) = peer(&url).await else { return };
        let k = hex(&key);
        assert_eq!(py.call(&format!("acquire {k} 0"), "", ANSWER).await, "ACQUIRED", "{what}");
        assert!(us.try_lock(&key).await.expect("try").is_none(), "{what}");
        let (us2, key2) = (us.clone(), key.clone());
        let waiter =
            tokio::spawn(async move { us2.lock(&key2).wait(Duration::from_secs(30)).acquire().await });
        py.kill().await;
        let g = within(ANSWER, "our waiter after the python holder was killed", waiter)
            .await
            .expect("join")
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        g.release().await.expect("release");
    }
}
