//! Case 21: what a backend hands out works, and what it does not answers as absent. The
//! optional capabilities are trait objects a backend hands out (`LockBackend::notes` and the
//! like), so no flag can promise one the backend lacks; this case checks that each one handed
//! out does its job on a real hold, and that one not handed out answers "unsupported" (notes,
//! the fence) or no subscription through the calls on `dyn LockBackend`.

use lock_core::{FencingToken, LockError};

use super::{Factory, key};

/// 21. Notes handed out store and show the holder's note; the fence counter handed out is
///     raised (and the next grant's token is above the floor); notifications handed out give a
///     subscription. Absent ones answer [`LockError::Unsupported`] (notes, the fence) or no
///     subscription.
pub async fn capabilities_are_honest<F: Factory + ?Sized>(f: &F) {
    let c = f.client().await;
    let b = &*c.backend;
    let name = f.label();
    let l = c.locker();
    let k = key("capabilities");
    let g = l.try_lock(&k).await.expect("try").expect("free");
    let noted = b.set_note(&k, g.owner(), "honest").await;
    match (b.notes(), noted) {
        (Some(_), Ok(stored)) => {
            assert!(stored, "{name}: the holder's note was not stored");
            assert_eq!(b.note(&k).await.expect("note").as_deref(), Some("honest"), "{name}");
        }
        (None, Err(LockError::Unsupported { .. })) => {
            assert!(matches!(b.note(&k).await, Err(LockError::Unsupported { .. })), "{name}: note()");
        }
        (_, other) => panic!("{name}: set_note with notes handed out: {}: {other:?}", b.notes().is_some()),
    }
    let floor = FencingToken(g.fence().map_or(0, |t| t.0) + 1_000);
    let raised = b.raise_fence(&k, g.owner(), floor).await;
    match (b.fences(), raised) {
        (Some(_), Ok(raised)) => assert!(raised, "{name}: the holder could not raise its key's fence"),
        (None, Err(LockError::Unsupported { .. })) => {}
        (_, other) => {
            panic!("{name}: raise_fence with fences handed out: {}: {other:?}", b.fences().is_some())
        }
    }
    let subscription = b.subscribe(&k).await.expect("subscribe");
    assert_eq!(
        subscription.is_some(),
        b.notify().is_some(),
        "{name}: notifications handed out, no subscription"
    );
    drop(subscription);
    g.release().await.expect("release");
    if b.fences().is_some() {
        let next = l.try_lock(&k).await.expect("try").expect("free again");
        assert!(
            next.fence() > Some(floor),
            "{name}: {:?} after the fence was raised to {floor:?}",
            next.fence()
        );
        next.release().await.expect("release");
    }
}
