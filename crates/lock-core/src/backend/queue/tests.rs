//! The recipe and the hold table against a store that keeps its queue in memory.

use std::sync::atomic::{AtomicI64, AtomicU32, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::Notify;
use tokio::time::Instant;

use super::*;
use crate::backend::{AcquireRequest, Attempt, Mutex, Side};
use crate::{LeaseSignal, LostReason, OwnerToken, Result};

/// One lock's queue: entries are their sequence numbers.
#[derive(Default)]
struct Store {
    holds: QueueHolds,
    queue: Mutex<Vec<i64>>,
    next: AtomicI64,
    changed: Notify,
    left: AtomicU32,
    deleted_lost: AtomicU32,
}

impl Store {
    fn remove(&self, seq: i64) {
        self.queue.lock().retain(|s| *s != seq);
        self.changed.notify_waiters();
    }

    fn place(&self, seq: i64) -> Place<i64> {
        let queue = self.queue.lock();
        match queue.iter().position(|s| *s == seq) {
            Some(0) | None => Place::Head,
            Some(pos) => Place::Behind(queue[pos - 1]),
        }
    }
}

#[async_trait]
impl QueueStore for Store {
    type Entry = i64;
    type Predecessor = i64;
    type Watch = i64;

    fn holds(&self) -> &QueueHolds {
        &self.holds
    }

    fn delete_lost(&self, hold: QueueHold) {
        self.deleted_lost.fetch_add(1, Ordering::SeqCst);
        self.remove(hold.fence);
    }

    async fn enqueue(&self, _: &AcquireRequest<'_>) -> Result<(i64, Place<i64>)> {
        let seq = self.next.fetch_add(1, Ordering::SeqCst) + 1;
        self.queue.lock().push(seq);
        Ok((seq, self.place(seq)))
    }

    async fn watch(&self, entry: &mut i64, predecessor: i64) -> Result<Watched<i64, i64>> {
        if self.queue.lock().contains(&predecessor) {
            return Ok(Watched::Armed(predecessor));
        }
        Ok(Watched::Moved(self.place(*entry)))
    }

    async fn deleted(&self, _: &mut i64, predecessor: i64) -> Result<Option<Place<i64>>> {
        loop {
            let changed = self.changed.notified();
            if !self.queue.lock().contains(&predecessor) {
                return Ok(None);
            }
            changed.await;
        }
    }

    async fn look(&self, entry: &mut i64) -> Result<Place<i64>> {
        Ok(self.place(*entry))
    }

    async fn leave(&self, entry: i64) -> Result<Attempt> {
        self.left.fetch_add(1, Ordering::SeqCst);
        self.remove(entry);
        Ok(Attempt::Held { retry_after: None })
    }

    fn hold(&self, req: &AcquireRequest<'_>, entry: i64) -> Result<i64> {
        let hold = QueueHold::new(format!("e{entry}"), entry, 0, req.signal);
        if let Some(old) = self.holds.insert(req.key, req.owner, hold, || None) {
            self.delete_lost(old);
        }
        Ok(entry)
    }
}

fn req(owner: OwnerToken, signal: &LeaseSignal, wait: Option<Duration>) -> AcquireRequest<'_> {
    let wait_until = wait.map(|w| Instant::now() + w);
    AcquireRequest {
        key: "k",
        owner,
        lease: Duration::from_secs(10),
        wait_until,
        signal,
        side: Side::Exclusive,
    }
}

fn fence(a: &Attempt) -> Option<u64> {
    match a {
        Attempt::Acquired(g) => Some(g.fence.0),
        Attempt::Held { .. } => None,
    }
}

#[tokio::test(start_paused = true)]
async fn the_owner_nests_without_a_new_entry() {
    let (store, signal, owner) = (Store::default(), LeaseSignal::new(), OwnerToken::random());
    assert_eq!(
        fence(&acquire(&store, &req(owner, &signal, None)).await.expect("the fake store never fails")),
        Some(1)
    );
    assert_eq!(
        fence(&acquire(&store, &req(owner, &signal, None)).await.expect("the fake store never fails")),
        Some(1)
    );
    assert_eq!(store.queue.lock().len(), 1);
    assert_eq!(store.holds.get("k", owner, |h| Some(h.signals.len())), Some(1), "one signal per Locker");
    assert!(matches!(store.holds.release("k", owner), Released::Nested));
    assert!(matches!(store.holds.release("k", owner), Released::Ended(h) if h.name == "e1"));
    assert!(matches!(store.holds.release("k", owner), Released::NotHeld));
}

#[tokio::test(start_paused = true)]
async fn a_waiter_holds_once_its_predecessor_goes() {
    let store = Store::default();
    let (a, b) = (LeaseSignal::new(), LeaseSignal::new());
    acquire(&store, &req(OwnerToken::random(), &a, None)).await.expect("the fake store never fails");
    let waiter = req(OwnerToken::random(), &b, Some(Duration::from_secs(10)));
    let release = async {
        tokio::time::sleep(Duration::from_secs(1)).await;
        store.remove(1);
    };
    let (granted, ()) = tokio::join!(acquire(&store, &waiter), release);
    assert_eq!(fence(&granted.expect("the fake store never fails")), Some(2));
    assert_eq!(store.left.load(Ordering::SeqCst), 0);
}

#[tokio::test(start_paused = true)]
async fn a_waiter_leaves_the_queue_at_its_deadline_or_at_once_without_one() {
    let store = Store::default();
    let (a, b) = (LeaseSignal::new(), LeaseSignal::new());
    acquire(&store, &req(OwnerToken::random(), &a, None)).await.expect("the fake store never fails");
    let started = Instant::now();
    let waited = acquire(&store, &req(OwnerToken::random(), &b, Some(Duration::from_secs(2)))).await;
    assert_eq!(fence(&waited.expect("the fake store never fails")), None);
    assert_eq!(started.elapsed(), Duration::from_secs(2));
    assert_eq!(
        fence(
            &acquire(&store, &req(OwnerToken::random(), &b, None)).await.expect("the fake store never fails")
        ),
        None
    );
    assert_eq!(store.left.load(Ordering::SeqCst), 2);
    assert_eq!(*store.queue.lock(), [1]);
}

#[tokio::test(start_paused = true)]
async fn a_hold_told_lost_is_never_nested_into() {
    let (store, signal, owner) = (Store::default(), LeaseSignal::new(), OwnerToken::random());
    acquire(&store, &req(owner, &signal, None)).await.expect("the fake store never fails");
    signal.mark_lost(LostReason::DeadlinePassed);
    let fresh = LeaseSignal::new();
    assert_eq!(
        fence(&acquire(&store, &req(owner, &fresh, None)).await.expect("the fake store never fails")),
        Some(2)
    );
    assert_eq!(store.deleted_lost.load(Ordering::SeqCst), 1, "the lost hold's entry goes");
    assert_eq!(*store.queue.lock(), [2]);
}

#[test]
fn losses_reach_only_their_own_hold_and_session() {
    let holds = QueueHolds::default();
    let (a, b, c) = (LeaseSignal::new(), LeaseSignal::new(), LeaseSignal::new());
    let (x, y) = (OwnerToken::random(), OwnerToken::random());
    holds.insert("k", x, QueueHold::new("n1".into(), 1, 0, &a), || None);
    holds.insert("k", y, QueueHold::new("n2".into(), 2, 1, &b), || None);
    holds.insert("j", y, QueueHold::new("n3".into(), 3, 1, &c), || None);
    // A loss named by an older entry of the same owner leaves the current hold alone.
    holds.lose(&("k".into(), x), "n0", LostReason::NotOwner);
    assert!(!a.is_lost() && holds.holds_name(&("k".into(), x), "n1"));
    holds.lose(&("k".into(), x), "n1", LostReason::NotOwner);
    assert!(a.is_lost() && !holds.holds_name(&("k".into(), x), "n1"));
    assert!(holds.has(1) && !holds.has(0));
    let taken = holds.take(1, LostReason::SessionEnded);
    assert_eq!(taken.len(), 2);
    assert!(b.is_lost() && c.is_lost() && holds.is_empty());
}

#[tokio::test(start_paused = true)]
async fn the_deadline_gives_holds_up_a_ttl_after_the_last_confirmation() {
    struct Backend(QueueHolds, AtomicU32);
    impl Holder for Backend {
        fn holds(&self) -> &QueueHolds {
            &self.0
        }
        fn give_up(&self, generation: u64) -> bool {
            self.1.fetch_add(1, Ordering::SeqCst);
            self.0.take(generation, LostReason::DeadlinePassed);
            false
        }
    }
    let backend = std::sync::Arc::new(Backend(QueueHolds::default(), AtomicU32::new(0)));
    let signal = LeaseSignal::new();
    backend.0.insert("k", OwnerToken::random(), QueueHold::new("n".into(), 1, 0, &signal), || None);
    let confirmed = Confirmed::new(Instant::now());
    let keeper = DeadlineKeeper {
        backend: std::sync::Arc::downgrade(&backend),
        generation: 0,
        confirmed: confirmed.clone(),
        ttl: Duration::from_secs(10),
        clock_drift: (0.0, Duration::ZERO),
        idle: Idle::Every(Duration::from_secs(1)),
        what: "test session not confirmed",
    };
    let task = tokio::spawn(keeper.run());
    tokio::time::sleep(Duration::from_secs(5)).await;
    confirmed.confirm(Instant::now());
    tokio::time::sleep(Duration::from_secs(9)).await;
    assert!(!signal.is_lost(), "a confirmation moves the deadline");
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(signal.is_lost());
    assert_eq!(backend.1.load(Ordering::SeqCst), 1);
    task.await.expect("the keeper ends cleanly");
}

#[test]
fn readers_wait_only_for_a_writer_ahead() {
    // (sequence, is a reader)
    let ahead = [(1, true), (2, false), (3, true), (4, false)];
    let reader = |e: &(i32, bool)| e.1;
    let at = |p: Place<&(i32, bool)>| match p {
        Place::Head => None,
        Place::Behind(e) => Some(e.0),
    };
    assert_eq!(at(place_behind(&ahead, Side::Read, reader)), Some(2), "the first writer ahead");
    assert_eq!(at(place_behind(&ahead, Side::Write, reader)), Some(4), "the entry just before");
    assert_eq!(at(place_behind(&ahead, Side::Exclusive, reader)), Some(4));
    assert_eq!(at(place_behind(&ahead[..1], Side::Read, reader)), None, "readers share");
    assert_eq!(at(place_behind(&ahead[..1], Side::Write, reader)), Some(1), "a writer waits for readers");
    assert_eq!(at(place_behind(&[], Side::Write, reader)), None);
}

#[test]
fn a_shared_hold_takes_no_note() {
    let (holds, signal) = (QueueHolds::default(), LeaseSignal::new());
    let (reader, writer) = (OwnerToken::random(), OwnerToken::random());
    holds.insert("r", reader, QueueHold::new("n1".into(), 1, 0, &signal).of_side(Side::Read), || None);
    holds.insert("w", writer, QueueHold::new("n2".into(), 2, 0, &signal).of_side(Side::Write), || None);
    assert_eq!(holds.for_note("r", reader, |h| Some(h.fence)), None);
    assert_eq!(holds.for_note("w", writer, |h| Some(h.fence)), Some(2));
    signal.mark_lost(LostReason::NotOwner);
    assert_eq!(holds.for_note("w", writer, |h| Some(h.fence)), None, "nor a lost one");
}
