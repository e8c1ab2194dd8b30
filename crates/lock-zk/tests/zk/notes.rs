//! Notes on a hold (`set_note`/`note`): the data of the holder's own lock node. A holder's note
//! is read by other clients, a non-holder stores nothing, and a note ends with its hold (a
//! release, the session closed): readers then see no note or the next holder's, never the old.
//!
//! All share this binary's server.
use std::time::Duration;

use lock_core::{LeaseState, LockBackend, LockError, OwnerToken};
use lock_testkit::proxy::Proxy;
use lock_testkit::{eventually, within};
use lock_zk::ZkLock;
use tokio::sync::mpsc;

use crate::common;

use common::{children, close_session, locker, run_id};
use lock_core::backend::Notes;

const SESSION: Duration = Duration::from_millis(1000);
/// How long any answer may take on a loaded 2-core machine.
const ANSWER: Duration = Duration::from_secs(10);

async fn zk_lock(connect: &str) -> ZkLock {
    common::zk_lock(connect, "/notes", SESSION).await
}

async fn shared_lock() -> ZkLock {
    zk_lock(&lock_zk_testing::shared_zk().connect_string()).await
}

/// A waiter on `key` through `z`, reporting its guard on the channel once granted; returns when
/// its node is queued (the queue has `ahead + 1` nodes).
async fn queue_waiter(z: &ZkLock, key: &str, ahead: usize) -> mpsc::UnboundedReceiver<lock_core::LockGuard> {
    let (tx, rx) = mpsc::unbounded_channel();
    let (l, k) = (locker(z), key.to_owned());
    tokio::spawn(async move {
        let g = l.lock(&k).wait(ANSWER).acquire().await.expect("waiter acquires");
        let _ = tx.send(g);
    });
    let (observer, dir) = (z.client(), z.lock_dir(key));
    eventually(ANSWER, "waiter queued", || async { children(&observer, &dir).await == ahead + 1 }).await;
    rx
}

/// A holder's note is read by another client, replaced by a later one, and an empty note reads
/// as `Some("")`; a free key, and a held one without a note, read as `None`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holder_note_is_read_by_another_client() {
    let (holder, reader) = (shared_lock().await, shared_lock().await);
    assert!(holder.notes().is_some());
    let key = format!("read-{}", run_id());
    assert_eq!(reader.note(&key).await.expect("note"), None, "never locked");
    let g = locker(&holder).try_lock(&key).await.expect("try").expect("free");
    assert_eq!(reader.note(&key).await.expect("note"), None, "held, no note yet");

    assert!(holder.set_note(&key, g.owner(), "node-a:8080").await.expect("set_note"));
    assert_eq!(reader.note(&key).await.expect("note").as_deref(), Some("node-a:8080"));
    assert!(holder.set_note(&key, g.owner(), "node-a:9090 ünïcode").await.expect("set_note"));
    assert_eq!(reader.note(&key).await.expect("note").as_deref(), Some("node-a:9090 ünïcode"));
    assert!(holder.set_note(&key, g.owner(), "").await.expect("set_note"));
    assert_eq!(reader.note(&key).await.expect("note").as_deref(), Some(""));
    // A nested acquisition is the same hold: its note is the hold's.
    let nested = locker(&holder).lock(&key).owner(g.owner()).try_acquire().await.expect("try");
    let nested = nested.expect("nested");
    assert!(holder.set_note(&key, g.owner(), "nested").await.expect("set_note"));
    assert_eq!(reader.note(&key).await.expect("note").as_deref(), Some("nested"));
    nested.release().await.expect("release nested");
    assert_eq!(reader.note(&key).await.expect("note").as_deref(), Some("nested"), "outer still holds");

    // The note is the node's data, readable by any client with the server's own tools.
    let dir = holder.lock_dir(&key);
    let names = reader.client().list_children(&dir).await.expect("list");
    let [name] = names.as_slice() else { panic!("one node while held: {names:?}") };
    let (data, stat) = reader.client().get_data(&format!("{dir}/{name}")).await.expect("get");
    assert_eq!((data.as_slice(), stat.version), (&b"nested"[..], 4));
    g.release().await.expect("release");
    assert_eq!(reader.note(&key).await.expect("note"), None, "released");
}

/// A note longer than `MAX_NOTE_BYTES` or with a control character is refused with a typed
/// error, even called on the backend directly (the core checks it first).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_notes_are_refused() {
    let z = shared_lock().await;
    let key = format!("invalid-{}", run_id());
    let g = locker(&z).try_lock(&key).await.expect("try").expect("free");
    let long = "x".repeat(lock_core::backend::MAX_NOTE_BYTES + 1);
    for bad in [long.as_str(), "line\nbreak"] {
        let e = z.set_note(&key, g.owner(), bad).await.expect_err("refused");
        assert!(matches!(e, LockError::InvalidConfig { .. }), "{e:?}");
    }
    assert!(z.set_note(&key, g.owner(), &"x".repeat(lock_core::backend::MAX_NOTE_BYTES)).await.expect("max"));
    g.release().await.expect("release");
}

/// A non-holder's `set_note` answers `false` and stores nothing: a foreign owner on the
/// holder's client, a queued waiter (its node exists, but is not the head), a released owner.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn non_holder_set_note_stores_nothing() {
    let (holder, waiter) = (shared_lock().await, shared_lock().await);
    let key = format!("nonholder-{}", run_id());
    let g = locker(&holder).try_lock(&key).await.expect("try").expect("free");
    assert!(holder.set_note(&key, g.owner(), "holder").await.expect("set_note"));

    assert!(!holder.set_note(&key, OwnerToken::random(), "intruder").await.expect("foreign owner"));
    // The waiter's owner token is unknown here, but no owner of its client holds the key.
    let mut granted = queue_waiter(&waiter, &key, 1).await;
    assert!(!waiter.set_note(&key, OwnerToken::random(), "waiter").await.expect("waiter's client"));
    assert_eq!(waiter.note(&key).await.expect("note").as_deref(), Some("holder"));
    let dir = holder.lock_dir(&key);
    for name in holder.client().list_children(&dir).await.expect("list") {
        let (data, stat) = holder.client().get_data(&format!("{dir}/{name}")).await.expect("get");
        let mine = data == b"holder";
        // The waiter's node: as created, or marked by its heartbeats (never a note).
        let waiting = (data.is_empty() && stat.version == 0) || data == lock_zk::WAITING_DATA;
        assert!(mine || waiting, "{name}: {data:?} v{}", stat.version);
    }

    let owner = g.owner();
    g.release().await.expect("release");
    assert!(!holder.set_note(&key, owner, "after release").await.expect("released owner"));
    let next = within(ANSWER, "the waiter is granted", granted.recv()).await.expect("granted");
    assert_eq!(waiter.note(&key).await.expect("note"), None, "the new holder set none");
    assert!(!holder.set_note(&key, owner, "late").await.expect("old owner"));
    assert_eq!(holder.note(&key).await.expect("note"), None, "the old owner stored nothing");
    next.release().await.expect("release");
}

/// A release hands the lock over: the next holder's readers see no note until it sets its own,
/// then its own; the old holder's note is gone with its node. A note changed while a waiter
/// queues (its predecessor watch fires on data changes too) leaves it waiting in its place.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn note_ends_with_the_hold() {
    let (first, second, reader) = (shared_lock().await, shared_lock().await, shared_lock().await);
    let key = format!("handover-{}", run_id());
    let g = locker(&first).try_lock(&key).await.expect("try").expect("free");
    assert!(first.set_note(&key, g.owner(), "first").await.expect("set_note"));
    let mut granted = queue_waiter(&second, &key, 1).await;
    for i in 0..5 {
        assert!(first.set_note(&key, g.owner(), &format!("first {i}")).await.expect("set_note"));
    }
    assert_eq!(reader.note(&key).await.expect("note").as_deref(), Some("first 4"));
    assert!(granted.try_recv().is_err(), "the waiter is not granted while the first holds");
    assert_eq!(children(&reader.client(), &first.lock_dir(&key)).await, 2, "the waiter still queued");

    g.release().await.expect("release");
    let next = within(ANSWER, "the waiter is granted", granted.recv()).await.expect("granted");
    assert_eq!(reader.note(&key).await.expect("note"), None, "never the first holder's note");
    assert!(second.set_note(&key, next.owner(), "second").await.expect("set_note"));
    assert_eq!(reader.note(&key).await.expect("note").as_deref(), Some("second"));
    next.release().await.expect("release");
    assert_eq!(reader.note(&key).await.expect("note"), None, "free");
}

/// The holder's session is closed behind its back (taken over from another connection while
/// its own is held up, then closed): its node and note go with it, a waiter is granted and
/// reads no note, and the old owner's `set_note` stores nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn note_dies_with_the_session() {
    let connect = lock_zk_testing::shared_zk().connect_string();
    let port = lock_zk_testing::shared_zk().port();
    let proxy = Proxy::start(format!("127.0.0.1:{port}").parse().expect("addr")).await.expect("proxy");
    let key = format!("session-{}", run_id());
    let holder = zk_lock(&format!("127.0.0.1:{}", proxy.port())).await;
    let (waiter, reader) = (zk_lock(&connect).await, zk_lock(&connect).await);
    let g = locker(&holder).try_lock(&key).await.expect("try").expect("free");
    assert!(holder.set_note(&key, g.owner(), "doomed").await.expect("set_note"));
    let mut granted = queue_waiter(&waiter, &key, 1).await;

    proxy.blackhole(true);
    close_session(&connect, holder.client().session(), SESSION).await;
    let next = within(ANSWER, "the waiter is granted", granted.recv()).await.expect("granted");
    assert_eq!(reader.note(&key).await.expect("note"), None, "never the dead holder's note");
    proxy.blackhole(false);
    within(ANSWER, "the old holder is told", g.lost()).await;
    assert!(matches!(g.state(), LeaseState::Lost(_)));
    assert!(!holder.set_note(&key, g.owner(), "zombie").await.expect("old owner"));
    assert_eq!(reader.note(&key).await.expect("note"), None, "the old owner stored nothing");
    assert!(waiter.set_note(&key, next.owner(), "survivor").await.expect("set_note"));
    assert_eq!(reader.note(&key).await.expect("note").as_deref(), Some("survivor"));
    next.release().await.expect("release");
}
