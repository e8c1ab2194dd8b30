//! For operators: who holds (a holder identity noted on the hold), which locks are held
//! (listing), and taking a lock from its holder (force-unlock).

use std::time::Duration;

use lock_core::backend::MAX_NOTE_BYTES;
use lock_core::{FencingToken, LeaseState, LockError};

use super::{Factory, assert_free, client_with, key, skip};
use crate::poll::within;

/// Case 23: a holder identity set with `Locker::with_holder` (or one request's `holder`,
/// which replaces it) is noted on the hold where the store keeps notes: anyone reads it while
/// the hold lasts, and it goes with the hold. A bad identity is refused before anything is
/// sent.
pub async fn holder_identity_noted<F: Factory + ?Sized>(f: &F) {
    let case = "holder_identity_noted";
    let Some(c) = client_with(f, case, |b| b.notes().is_some(), "the store keeps no notes on a hold").await
    else {
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

/// Case 24: `evict` takes a lock from its holder, named by the fence `inspect` showed: a
/// wrong fence evicts nothing, the right one frees the key for another client at once, whose
/// grant draws a larger fence, and the evicted holder is told it lost the lock. A second copy
/// of the eviction does nothing to the new holder.
pub async fn evict_takes_the_lock_from_its_holder<F: Factory + ?Sized>(f: &F) {
    let case = "evict_takes_the_lock_from_its_holder";
    let (ca, cb) = (f.client().await, f.client().await);
    let lease = f.lease();
    let (a, b) = (ca.locker().with_watchdog_lease(lease).expect("lease"), cb.locker());
    let k = key("evict");
    let g = a.lock(&k).try_acquire().await.expect("try").expect("free");
    let fence = match cb.backend.inspect(&k).await {
        Ok(info) => info.fence,
        Err(LockError::Unsupported { what, .. }) => {
            g.release().await.expect("release");
            return skip(&f.label(), case, what);
        }
        Err(e) => panic!("inspect: {e}"),
    };
    let Some(fence) = fence else {
        g.release().await.expect("release");
        return skip(&f.label(), case, "inspect shows no fence to name the hold by");
    };
    match cb.backend.evict(&k, FencingToken(fence.0 + 1)).await {
        Err(LockError::Unsupported { what, .. }) => {
            g.release().await.expect("release");
            return skip(&f.label(), case, what);
        }
        other => assert!(!other.expect("evict"), "a hold with another fence was evicted"),
    }
    assert!(b.try_lock(&k).await.expect("try").is_none(), "still held after a wrong fence");
    assert!(cb.backend.evict(&k, fence).await.expect("evict"), "the inspected hold is evicted");
    let g2 = b.try_lock(&k).await.expect("try").expect("the evicted key is free at once");
    assert!(g2.fence().is_none_or(|f2| f2 > fence), "{:?} after evicting {fence:?}", g2.fence());
    within(lease * 10 + Duration::from_secs(5), "the evicted holder's lost signal", g.lost()).await;
    assert!(matches!(g.state(), LeaseState::Lost(_)), "state {:?}", g.state());
    assert!(!cb.backend.evict(&k, fence).await.expect("evict again"), "a second copy evicted the new holder");
    assert!(a.try_lock(&k).await.expect("try").is_none(), "the new holder keeps the key");
    g2.release().await.expect("release");
}

/// Case 25: `list` names the keys held under a prefix, where the store can enumerate its
/// locks: both held keys under it, not a held key outside it, at most `limit` keys; a key
/// released since is listed free or not at all.
pub async fn list_names_the_held_keys<F: Factory + ?Sized>(f: &F) {
    let case = "list_names_the_held_keys";
    let c = f.client().await;
    let l = c.locker();
    let base = key("list");
    let (a, b, outside) = (format!("{base}/a"), format!("{base}/b"), key("list-outside"));
    let mut guards = Vec::new();
    for k in [&a, &b, &outside] {
        guards.push(l.try_lock(k).await.expect("try").expect("free"));
    }
    let listed = match c.backend.list(&base, 100).await {
        Err(LockError::Unsupported { what, .. }) => {
            for g in guards {
                g.release().await.expect("release");
            }
            return skip(&f.label(), case, what);
        }
        other => other.expect("list"),
    };
    assert!(listed.contains(&a) && listed.contains(&b), "{listed:?} misses {a:?} or {b:?}");
    assert!(!listed.contains(&outside), "{listed:?} lists a key outside {base:?}");
    assert!(c.backend.list(&base, 1).await.expect("list").len() <= 1, "the limit");
    let gb = guards.remove(1);
    gb.release().await.expect("release");
    if c.backend.list(&base, 100).await.expect("list").contains(&b) {
        assert!(!c.backend.inspect(&b).await.expect("inspect").held, "a released key listed held");
    }
    for g in guards {
        g.release().await.expect("release");
    }
}
