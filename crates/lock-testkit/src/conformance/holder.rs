//! Who holds: a holder identity set on the locker or on one request is noted on the hold.

use lock_core::LockError;
use lock_core::backend::MAX_NOTE_BYTES;

use super::{Factory, assert_free, client_with, key};

/// Case 23: a holder identity set with `Locker::with_holder` (or one request's `holder`,
/// which replaces it) is noted on the hold where the store keeps notes: anyone reads it while
/// the hold lasts, and it goes with the hold. A bad identity is refused before anything is
/// sent.
pub async fn holder_identity_noted<F: Factory + ?Sized>(f: &F) {
    let case = "holder_identity_noted";
    let Some(c) = client_with(f, case, |c| c.notes, "the store keeps no notes on a hold").await else {
        return;
    };
    let (backend, plain) = (c.backend.clone(), c.locker());
    let who = "host=a pid=1 program=suite";
    let l = plain.clone().with_holder(who).expect("holder");
    let k = key("holder");
    let note = || async { backend.note(&k).await.expect("note") };
    let g = l.try_lock(&k).await.expect("try").expect("free");
    assert_eq!(note().await.as_deref(), Some(who), "the locker's identity is on the hold");
    g.release().await.expect("release");
    assert_eq!(note().await, None, "the note goes with the hold");
    let g = l.lock(&k).holder("label=one-request").try_acquire().await.expect("try").expect("free");
    assert_eq!(note().await.as_deref(), Some("label=one-request"), "a request's identity replaces it");
    g.release().await.expect("release");
    let g = plain.try_lock(&k).await.expect("try").expect("free");
    assert_eq!(note().await, None, "a locker without an identity notes nothing");
    g.release().await.expect("release");
    assert!(matches!(plain.clone().with_holder("line\nbreak"), Err(LockError::InvalidConfig { .. })));
    let long = "x".repeat(MAX_NOTE_BYTES + 1);
    let refused = l.lock(&k).holder(long).try_acquire().await;
    assert!(matches!(refused, Err(LockError::InvalidConfig { .. })), "{refused:?}");
    assert_free(&l, &k, "a refused identity sends nothing").await;
}
