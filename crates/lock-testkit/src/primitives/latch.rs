//! The count-down latch suite (cases named `latch_*`), on a backend with records; elsewhere
//! each case says loudly that it is skipped and why.

/// Expand the latch suite into one `#[tokio::test]` per case (see
/// [`primitive_tests!`](crate::primitive_tests)).
#[macro_export]
macro_rules! latch_tests {
    ($factory:expr) => {
        $crate::latch_tests!(@cases $factory;
            latch_counts_down_and_lets_waiters_through,
            latch_is_shared_by_clients_and_a_finished_round_restarts,
            latch_marks_count_once,
            latch_count_down_whose_answer_is_lost_counts_once,
            latch_racing_restarts_start_one_round,
            latch_wait_times_out_typed,
            latch_bad_input,
        );
    };
    (@cases $factory:expr; $($case:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() {
                let factory = $factory;
                $crate::primitives::latch::$case(&factory).await;
            }
        )*
    };
}

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use lock_core::backend::RecordOp;
use lock_core::{CountDownLatch, LockError, Locker};

use crate::factory::{Factory, key, skip};
use crate::hooked::answers_hooked;
use crate::poll::within;
use lock_core::faults::Op;

/// How long a waiter that must be let through may take.
const THROUGH: Duration = Duration::from_secs(5);
/// A wait that must not end: long enough for a wrongly opened latch to let it through.
const HELD: Duration = Duration::from_millis(300);

/// The latch `name` of a new client, or `None` (said loudly) where the store keeps no records.
async fn latch<F: Factory + ?Sized>(f: &F, name: &str, case: &str) -> Option<CountDownLatch> {
    match CountDownLatch::new(&f.client().await.locker(), name) {
        Ok(l) => Some(l),
        Err(e @ LockError::Unsupported { .. }) => {
            skip(&f.label(), case, e);
            None
        }
        Err(e) => panic!("latch: {e}"),
    }
}

/// A waiter stays while the count is above zero and is let through by the last count-down.
pub async fn latch_counts_down_and_lets_waiters_through<F: Factory + ?Sized>(f: &F) {
    let case = "latch_counts_down_and_lets_waiters_through";
    let Some(l) = latch(f, &key("latch_wait"), case).await else { return };
    assert_eq!(l.set_count(3).await.expect("set"), 3);
    let waiter = l.clone();
    let mut waiting = tokio::spawn(async move { waiter.wait(THROUGH * 2).await });
    assert_eq!(l.count_down().await.expect("down"), 2);
    assert_eq!(l.count_down().await.expect("down"), 1);
    assert!(tokio::time::timeout(HELD, &mut waiting).await.is_err(), "let through with 1 left");
    assert_eq!(l.count().await.expect("count"), 1);
    assert_eq!(l.count_down().await.expect("down"), 0);
    within(THROUGH, "the waiter after the last count-down", waiting).await.expect("task").expect("through");
    assert_eq!(l.count_down().await.expect("down"), 0, "an open latch stays at zero");
    l.wait(Duration::from_millis(1)).await.expect("an open latch lets everyone through");
    l.delete().await.expect("delete");
}

/// Two clients see one latch; a finished round is replaced by the next `set_count`, and a
/// running one is not.
pub async fn latch_is_shared_by_clients_and_a_finished_round_restarts<F: Factory + ?Sized>(f: &F) {
    let case = "latch_is_shared_by_clients_and_a_finished_round_restarts";
    let name = key("latch_shared");
    let (Some(a), Some(b)) = (latch(f, &name, case).await, latch(f, &name, case).await) else { return };
    assert_eq!(a.set_count(2).await.expect("set"), 2);
    assert_eq!(b.set_count(5).await.expect("set"), 2, "a running round keeps its count");
    b.count_down().await.expect("down");
    assert_eq!(a.count().await.expect("count"), 1);
    a.count_down().await.expect("down");
    b.wait(THROUGH).await.expect("open for the other client");
    assert_eq!(b.set_count(4).await.expect("set"), 4, "a finished round is replaced");
    assert_eq!(a.count().await.expect("count"), 4);
    a.delete().await.expect("delete");
    assert_eq!(b.count().await.expect("count"), 0, "deleted: open");
}

/// A count-down the driver sends twice (the same token) counts once.
pub async fn latch_marks_count_once<F: Factory + ?Sized>(f: &F) {
    let case = "latch_marks_count_once";
    let Some(l) = latch(f, &key("latch_marks"), case).await else { return };
    let backend = f.client().await.locker().backend().clone();
    let before = backend.record(l.key(), RecordOp::Mark("t1")).await.expect("mark");
    assert_eq!((before.value, before.marks), (None, 0), "no count set: nothing marked");
    l.set_count(3).await.expect("set");
    for _ in 0..2 {
        let r = backend.record(l.key(), RecordOp::Mark("t1")).await.expect("mark");
        assert_eq!((r.value, r.marks), (Some(3), 1), "the same token counts once");
    }
    assert_eq!(l.count().await.expect("count"), 2);
    l.delete().await.expect("delete");
    let gone = backend.record(l.key(), RecordOp::Get).await.expect("get");
    assert_eq!((gone.value, gone.marks), (None, 0));
}

/// A count-down applied by the store whose answer is lost (a temporary error) is sent again with
/// its mark and counts once: not an error for the caller to retry into a second count-down.
pub async fn latch_count_down_whose_answer_is_lost_counts_once<F: Factory + ?Sized>(f: &F) {
    let case = "latch_count_down_whose_answer_is_lost_counts_once";
    let name = key("latch_lost_answer");
    let Some(l) = latch(f, &name, case).await else { return };
    l.set_count(3).await.expect("set");
    let lose = Arc::new(AtomicBool::new(true));
    let losing = lose.clone();
    let backend = f.client().await.locker().backend().clone();
    let hooked = answers_hooked(backend, move |call| {
        if call == Op::Record && losing.swap(false, Ordering::SeqCst) {
            return Err(LockError::temporary("test", "the answer was lost"));
        }
        Ok(())
    });
    let flaky = CountDownLatch::new(&Locker::new(Arc::new(hooked)), &name).expect("latch");
    assert_eq!(flaky.count_down().await.expect("a lost answer is sent again"), 2, "counted once");
    assert!(!lose.load(Ordering::SeqCst), "the first answer was lost");
    assert_eq!(l.count().await.expect("count"), 2);
    l.delete().await.expect("delete");
}

/// Callers racing to replace a finished round start one round between them: each is answered
/// its count, and a count-down made right after counts against it.
pub async fn latch_racing_restarts_start_one_round<F: Factory + ?Sized>(f: &F) {
    let case = "latch_racing_restarts_start_one_round";
    let name = key("latch_restart");
    let Some(l) = latch(f, &name, case).await else { return };
    for round in 0..3 {
        l.set_count(1).await.expect("set");
        l.count_down().await.expect("down: the round is finished");
        let mut clients = Vec::new();
        for _ in 0..6 {
            let Some(racer) = latch(f, &name, case).await else { return };
            clients.push(racer);
        }
        // Counts above the number of racers: their count-downs never finish the new round
        // (a finished one may be replaced again).
        let start = Arc::new(tokio::sync::Barrier::new(clients.len()));
        let racers: Vec<_> = (10u64..)
            .zip(clients)
            .map(|(n, racer)| {
                let start = start.clone();
                tokio::spawn(async move {
                    start.wait().await;
                    let set = racer.set_count(n).await.expect("set");
                    (set, racer.count_down().await.expect("down"))
                })
            })
            .collect();
        let mut answers = Vec::new();
        for r in racers {
            answers.push(within(THROUGH, "a racing set_count", r).await.expect("task"));
        }
        let count = answers[0].0;
        assert!(
            answers.iter().all(|(set, _)| *set == count),
            "round {round}: one count for all: {answers:?}"
        );
        let left = count - answers.len() as u64;
        assert_eq!(
            l.count().await.expect("count"),
            left,
            "round {round}: every count-down counted: {answers:?}"
        );
        l.delete().await.expect("delete");
    }
}

/// A wait that ends before the count reaches zero is a typed timeout naming the latch.
pub async fn latch_wait_times_out_typed<F: Factory + ?Sized>(f: &F) {
    let name = key("latch_timeout");
    let Some(l) = latch(f, &name, "latch_wait_times_out_typed").await else { return };
    l.set_count(1).await.expect("set");
    match l.wait(Duration::from_millis(150)).await {
        Err(LockError::Timeout { key, waited }) => {
            assert_eq!(key, name);
            assert!(waited >= Duration::from_millis(150), "{waited:?}");
        }
        other => panic!("expected a timeout, got {other:?}"),
    }
    l.delete().await.expect("delete");
}

/// A count of zero and an empty name are typed errors.
pub async fn latch_bad_input<F: Factory + ?Sized>(f: &F) {
    let Some(l) = latch(f, &key("latch_bad"), "latch_bad_input").await else { return };
    assert!(matches!(l.set_count(0).await, Err(LockError::InvalidConfig { .. })));
    let empty = CountDownLatch::new(&f.client().await.locker(), "");
    assert!(matches!(empty, Err(LockError::InvalidKey { .. })), "{empty:?}");
}
