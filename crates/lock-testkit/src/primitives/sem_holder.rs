//! Who holds each permit: the holder identity of a semaphore's permits, where the store keeps
//! notes (`dlock status --permits` shows it).

use std::time::Duration;

use lock_core::{Locker, Semaphore};

use crate::factory::{Factory, key, skip};
use crate::poll::within;

/// The identities of the permits of `s`, by slot (`None`: held, no note): where the store
/// keeps the permits, every one `inspect` lists; elsewhere the notes of the `held` slots' keys
/// (a pessimistic SQL store cannot inspect a row without taking it).
async fn holders(s: &Semaphore, held: &[u32]) -> Vec<(u32, Option<String>)> {
    let backend = s.locker().backend();
    if s.is_native() {
        let info = backend.inspect(&s.pool_key()).await.expect("inspect the pool");
        return info.permits.into_iter().map(|p| (p.slot, p.holder)).collect();
    }
    let mut out = Vec::new();
    for slot in held {
        out.push((*slot, backend.note(&s.slot_key(*slot)).await.expect("note")));
    }
    out.sort();
    out
}

/// Each permit carries the identity of the `Locker` that took it (`with_holder`), kept by the
/// store with that permit: two holders, two identities, by slot; a permit granted to a waiter
/// after a release carries the waiter's; a permit taken without an identity shows none, never
/// the earlier holder's of its slot.
pub async fn sem_permit_holders_noted<F: Factory + ?Sized>(f: &F) {
    let case = "sem_permit_holders_noted";
    let (ca, cb) = (f.client().await, f.client().await);
    if ca.backend.notes().is_none() {
        return skip(&f.label(), case, "the store keeps no notes on a hold");
    }
    let name = key("sem_holder");
    let with = |l: Locker, who: &str| Semaphore::new(&l.with_holder(who).expect("holder"), &name, 2);
    let a = with(ca.locker(), "host=a pid=1").expect("semaphore");
    let b = with(cb.locker(), "host=b pid=2").expect("semaphore");
    let lease = Duration::from_secs(30);
    let pa = a.acquire().lease(lease).try_acquire().await.expect("try").expect("free");
    let pb = b.acquire().lease(lease).try_acquire().await.expect("try").expect("free");
    let mut want =
        vec![(pa.slot(), Some("host=a pid=1".to_owned())), (pb.slot(), Some("host=b pid=2".to_owned()))];
    want.sort();
    assert_eq!(holders(&a, &[pa.slot(), pb.slot()]).await, want, "each permit shows its own holder");

    // A waiter, granted the permit `pa` frees (handed over, or by its next attempt).
    let c = with(f.client().await.locker(), "host=c pid=3").expect("semaphore");
    let waiter = tokio::spawn(async move {
        let p = c.acquire().wait(Duration::from_secs(20)).acquire().await;
        (c, p)
    });
    let freed = pa.slot();
    pa.release().await.expect("release");
    let (c, pc) = within(Duration::from_secs(10), "the waiter's permit", waiter).await.expect("task");
    let pc = pc.expect("permit");
    assert_eq!(pc.slot(), freed);
    let mut want =
        vec![(freed, Some("host=c pid=3".to_owned())), (pb.slot(), Some("host=b pid=2".to_owned()))];
    want.sort();
    assert_eq!(
        holders(&c, &[freed, pb.slot()]).await,
        want,
        "the waiter's identity on the permit it was granted"
    );

    // Released, the slot's next holder without an identity shows none.
    pc.release().await.expect("release");
    let plain = Semaphore::new(&ca.locker(), &name, 2).expect("semaphore");
    let pp = plain.try_acquire().await.expect("try").expect("the freed permit");
    assert_eq!(pp.slot(), freed);
    let mut want = vec![(freed, None), (pb.slot(), Some("host=b pid=2".to_owned()))];
    want.sort();
    assert_eq!(
        holders(&plain, &[freed, pb.slot()]).await,
        want,
        "no earlier holder's identity on a later permit"
    );
    pp.release().await.expect("release");
    pb.release().await.expect("release");
    assert_eq!(holders(&plain, &[]).await, Vec::new(), "nothing held");
}
