//! Notes on a hold (`set_note`/`note`): the value of the holder's own lock key. A holder's note
//! is read by other clients, a non-holder stores nothing, and a note ends with its hold (a
//! release, the lease revoked): readers then see no note or the next holder's, never the old.
//!
//! All share this binary's server.
use std::time::Duration;

use lock_core::{LeaseState, LockBackend, LockError, LockGuard, LostReason, OwnerToken};
use lock_etcd::EtcdLock;
use lock_etcd::etcd_client::{self as etcd, GetOptions, SortOrder, SortTarget};
use lock_testkit::{eventually, key, within};
use tokio::sync::mpsc;

use crate::common;

use common::{TTL, locker};
use lock_core::backend::Notes;

/// How long any answer may take on a loaded 2-core machine.
const ANSWER: Duration = Duration::from_secs(10);

async fn etcd_lock() -> EtcdLock {
    common::etcd_lock([lock_etcd_testing::shared_etcd().endpoint()], "/notes", TTL, Duration::from_secs(2))
        .await
}

/// Every key queued under `prefix` (first = holder) with its value and version.
async fn queue(client: &mut etcd::Client, prefix: &str) -> Vec<(Vec<u8>, i64)> {
    let opts = GetOptions::new().with_prefix().with_sort(SortTarget::Create, SortOrder::Ascend);
    let resp = client.get(prefix, Some(opts)).await.expect("get");
    resp.kvs().iter().map(|kv| (kv.value().to_vec(), kv.version())).collect()
}

/// A waiter on `key` through `e`, reporting its guard on the channel once granted; returns when
/// its key is queued (the queue has `ahead + 1` keys).
async fn queue_waiter(e: &EtcdLock, key: &str, ahead: usize) -> mpsc::UnboundedReceiver<LockGuard> {
    let (tx, rx) = mpsc::unbounded_channel();
    let (l, k) = (locker(e), key.to_owned());
    tokio::spawn(async move {
        let g = l.lock(&k).wait(ANSWER).acquire().await.expect("waiter acquires");
        let _ = tx.send(g);
    });
    let (observer, prefix) = (e.client(), e.lock_prefix(key));
    eventually(ANSWER, "waiter queued", || {
        let (mut c, prefix) = (observer.clone(), prefix.clone());
        async move { queue(&mut c, &prefix).await.len() == ahead + 1 }
    })
    .await;
    rx
}

/// A holder's note is read by another client, replaced by a later one, and an empty note reads
/// as `Some("")`; a free key, and a held one without a note, read as `None`. `inspect` and
/// `renew` are unchanged by the value.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holder_note_is_read_by_another_client() {
    let (holder, reader) = (etcd_lock().await, etcd_lock().await);
    assert!(holder.notes().is_some());
    let k = key("read");
    assert_eq!(reader.note(&k).await.expect("note"), None, "never locked");
    let g = locker(&holder).try_lock(&k).await.expect("try").expect("free");
    assert_eq!(reader.note(&k).await.expect("note"), None, "held, no note yet");

    assert!(holder.set_note(&k, g.owner(), "node-a:8080").await.expect("set_note"));
    assert_eq!(reader.note(&k).await.expect("note").as_deref(), Some("node-a:8080"));
    assert!(holder.set_note(&k, g.owner(), "node-a:9090 ünïcode").await.expect("set_note"));
    assert_eq!(reader.note(&k).await.expect("note").as_deref(), Some("node-a:9090 ünïcode"));
    assert!(holder.set_note(&k, g.owner(), "").await.expect("set_note"));
    assert_eq!(reader.note(&k).await.expect("note").as_deref(), Some(""));
    // A nested acquisition is the same hold: its note is the hold's.
    let nested = locker(&holder).lock(&k).owner(g.owner()).try_acquire().await.expect("try");
    let nested = nested.expect("nested");
    assert!(holder.set_note(&k, g.owner(), "nested").await.expect("set_note"));
    nested.release().await.expect("release nested");
    assert_eq!(reader.note(&k).await.expect("note").as_deref(), Some("nested"), "outer still holds");

    // The note is the key's value (still under the lease), readable with etcd's own tools.
    let mut c = reader.client();
    let prefix = holder.lock_prefix(&k);
    assert_eq!(queue(&mut c, &prefix).await, [(b"nested".to_vec(), 5)]);
    let opts = GetOptions::new().with_prefix();
    let lease = c.get(prefix.as_str(), Some(opts)).await.expect("get").kvs()[0].lease();
    assert_eq!(lease, holder.lease_id(), "the key keeps its lease");
    let info = reader.inspect(&k).await.expect("inspect");
    assert!(info.held);
    assert_eq!(info.fence, g.fence(), "the fence is the create revision, not the last put's");
    g.renew(Duration::from_secs(5)).await.expect("renew: still ours after the puts");
    g.release().await.expect("release");
    assert_eq!(reader.note(&k).await.expect("note"), None, "released");
    assert!(queue(&mut c, &prefix).await.is_empty(), "the release deleted the key");
}

/// A note longer than `MAX_NOTE_BYTES` or with a control character is refused with a typed
/// error, even called on the backend directly (the core checks it first).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_notes_are_refused() {
    let e = etcd_lock().await;
    let k = key("invalid");
    let g = locker(&e).try_lock(&k).await.expect("try").expect("free");
    let long = "x".repeat(lock_core::backend::MAX_NOTE_BYTES + 1);
    for bad in [long.as_str(), "line\nbreak"] {
        let err = e.set_note(&k, g.owner(), bad).await.expect_err("refused");
        assert!(matches!(err, LockError::InvalidConfig { .. }), "{err:?}");
    }
    assert!(e.set_note(&k, g.owner(), &"x".repeat(lock_core::backend::MAX_NOTE_BYTES)).await.expect("max"));
    g.release().await.expect("release");
}

/// A non-holder's `set_note` answers `false` and stores nothing: a foreign owner on the
/// holder's client, a queued waiter's client (its key exists, but is not the first), a released
/// owner. A note put while a waiter queues does not wake it (it watches deletes only).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn non_holder_set_note_stores_nothing() {
    let (holder, waiter) = (etcd_lock().await, etcd_lock().await);
    let k = key("nonholder");
    let g = locker(&holder).try_lock(&k).await.expect("try").expect("free");
    assert!(holder.set_note(&k, g.owner(), "holder").await.expect("set_note"));

    assert!(!holder.set_note(&k, OwnerToken::random(), "intruder").await.expect("foreign owner"));
    let mut granted = queue_waiter(&waiter, &k, 1).await;
    assert!(!waiter.set_note(&k, OwnerToken::random(), "waiter").await.expect("waiter's client"));
    for i in 0..5 {
        assert!(holder.set_note(&k, g.owner(), &format!("holder {i}")).await.expect("set_note"));
    }
    assert_eq!(waiter.note(&k).await.expect("note").as_deref(), Some("holder 4"));
    let mut c = holder.client();
    let prefix = holder.lock_prefix(&k);
    assert_eq!(
        queue(&mut c, &prefix).await,
        [(b"holder 4".to_vec(), 7), (Vec::new(), 1)],
        "the holder's key has the note, the waiter's its empty grant value"
    );
    assert!(granted.try_recv().is_err(), "the waiter is not granted while the holder holds");

    let owner = g.owner();
    g.release().await.expect("release");
    assert!(!holder.set_note(&k, owner, "after release").await.expect("released owner"));
    let next = within(ANSWER, "the waiter is granted", granted.recv()).await.expect("granted");
    // The release is the only delete it watched for: the puts woke nobody.
    assert!(waiter.watch_wakeups() <= 1, "woken {} times", waiter.watch_wakeups());
    assert_eq!(waiter.note(&k).await.expect("note"), None, "the new holder set none");
    assert!(!holder.set_note(&k, owner, "late").await.expect("old owner"));
    assert_eq!(holder.note(&k).await.expect("note"), None, "the old owner stored nothing");
    assert!(waiter.set_note(&k, next.owner(), "waiter").await.expect("set_note"));
    assert_eq!(holder.note(&k).await.expect("note").as_deref(), Some("waiter"));
    next.release().await.expect("release");
}

/// The holder's lease is revoked from another client: its key and note go with it, a waiter is
/// granted and reads no note, and the old owner's `set_note` stores nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn note_dies_with_the_lease() {
    let (holder, waiter, reader) = (etcd_lock().await, etcd_lock().await, etcd_lock().await);
    let k = key("lease");
    let g = locker(&holder).try_lock(&k).await.expect("try").expect("free");
    assert!(holder.set_note(&k, g.owner(), "doomed").await.expect("set_note"));
    let mut granted = queue_waiter(&waiter, &k, 1).await;

    let mut admin = reader.client();
    admin.lease_revoke(holder.lease_id()).await.expect("revoke");
    // Straight after the revoke, before the holder's client may have heard of it: the key is
    // gone, so the comparison fails.
    assert!(!holder.set_note(&k, g.owner(), "zombie").await.expect("old owner"));
    let next = within(ANSWER, "the waiter is granted", granted.recv()).await.expect("granted");
    assert_eq!(reader.note(&k).await.expect("note"), None, "never the revoked holder's note");
    within(ANSWER, "the old holder is told", g.lost()).await;
    assert!(matches!(g.state(), LeaseState::Lost(LostReason::SessionEnded | LostReason::NotOwner)));
    assert!(!holder.set_note(&k, g.owner(), "zombie").await.expect("old owner"));
    assert_eq!(reader.note(&k).await.expect("note"), None, "the old owner stored nothing");
    assert!(waiter.set_note(&k, next.owner(), "survivor").await.expect("set_note"));
    assert_eq!(reader.note(&k).await.expect("note").as_deref(), Some("survivor"));
    next.release().await.expect("release");
}
