//! Case 21: the capability flags and the trait's methods agree. The optional methods of
//! `LockBackend` default to "not supported"; a backend that sets a flag and leaves the method
//! at its default (or the reverse) fails here instead of in a caller that trusted the flag.

use lock_core::{FencingToken, LockError};

use super::{Factory, key};

/// 21. Notes work exactly when `notes` is set, the fence can be raised exactly when
///     `raise_fence` is set (and the next grant's token is above the floor), and `subscribe`
///     gives a subscription exactly when `notify` is set; what is not supported answers
///     [`LockError::Unsupported`] (notes, the fence) or no subscription.
pub async fn capabilities_are_honest<F: Factory + ?Sized>(f: &F) {
    let c = f.client().await;
    let (b, caps) = (&c.backend, c.backend.capabilities());
    let name = f.label();
    let l = c.locker();
    let k = key("capabilities");
    let g = l.try_lock(&k).await.expect("try").expect("free");
    match b.set_note(&k, g.owner(), "honest").await {
        Ok(stored) => {
            assert!(caps.notes, "{name}: set_note works, but the capabilities say no notes");
            assert!(stored, "{name}: the holder's note was not stored");
            assert_eq!(b.note(&k).await.expect("note").as_deref(), Some("honest"), "{name}");
        }
        Err(LockError::Unsupported { .. }) => {
            assert!(!caps.notes, "{name}: notes promised, set_note unsupported");
            assert!(matches!(b.note(&k).await, Err(LockError::Unsupported { .. })), "{name}: note()");
        }
        Err(e) => panic!("{name}: set_note: {e}"),
    }
    let floor = FencingToken(g.fence().map_or(0, |t| t.0) + 1_000);
    match b.raise_fence(&k, g.owner(), floor).await {
        Ok(raised) => {
            assert!(caps.raise_fence, "{name}: raise_fence works, but the capabilities say no");
            assert!(raised, "{name}: the holder could not raise its key's fence");
        }
        Err(LockError::Unsupported { .. }) => {
            assert!(!caps.raise_fence, "{name}: raise_fence promised, but unsupported")
        }
        Err(e) => panic!("{name}: raise_fence: {e}"),
    }
    let subscription = b.subscribe(&k).await.expect("subscribe");
    assert_eq!(subscription.is_some(), caps.notify, "{name}: subscribe() and the notify flag disagree");
    drop(subscription);
    g.release().await.expect("release");
    if caps.raise_fence {
        let next = l.try_lock(&k).await.expect("try").expect("free again");
        assert!(
            next.fence() > Some(floor),
            "{name}: {:?} after the fence was raised to {floor:?}",
            next.fence()
        );
        next.release().await.expect("release");
    }
}
