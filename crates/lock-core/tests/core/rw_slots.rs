//! A read-write lock stores its number of reader slots with it at its first acquisition, so
//! that the store tells a read-write lock by its name (`dlock status`), and a handle built with
//! another number, which would not exclude the readers of the first, is refused.

use std::sync::Arc;

use lock_core::backend::{RecordOp, Records};
use lock_core::{LockError, Locker, MemoryBackend, RwLock};

async fn stored(backend: &MemoryBackend, rw: &RwLock) -> Option<u64> {
    backend.record(&rw.slots_key(), RecordOp::Get).await.expect("record").value
}

#[tokio::test]
async fn the_reader_slots_are_stored_and_another_count_is_refused() {
    let backend = Arc::new(MemoryBackend::new());
    let locker = Locker::new(backend.clone());
    let four = RwLock::new(&locker, "cfg").expect("rwlock").with_reader_slots(4).expect("slots");
    assert_eq!(stored(&backend, &four).await, None, "nothing stored before a hold");
    assert_eq!(four.slots_key(), "cfg#rw-n");
    let r = four.read().try_acquire().await.expect("read").expect("free");
    assert_eq!(stored(&backend, &four).await, Some(4));
    let two = RwLock::new(&locker, "cfg").expect("rwlock").with_reader_slots(2).expect("slots");
    for side in ["read", "write"] {
        let refused = match side {
            "read" => two.read().try_acquire().await.map(|g| g.is_some()),
            _ => two.write().try_acquire().await.map(|g| g.is_some()),
        };
        match refused {
            Err(LockError::InvalidConfig { reason }) => {
                assert!(reason.contains("has 4 reader slots on the server, not 2"), "{side}: {reason}");
            }
            other => panic!("{side} with 2 slots of a lock stored with 4: {other:?}"),
        }
    }
    let again = RwLock::new(&locker, "cfg").expect("rwlock").with_reader_slots(4).expect("slots");
    let r2 = again.read().try_acquire().await.expect("read").expect("readers share");
    r.release().await.expect("release");
    r2.release().await.expect("release");
}
