use std::sync::atomic::{AtomicUsize, Ordering};

use super::*;

#[tokio::test]
async fn notify_wakes_and_idle_hook_runs_once() {
    let idle = Arc::new(AtomicUsize::new(0));
    let hub = {
        let idle = idle.clone();
        NotifyHub::with_idle_hook(move |_| {
            idle.fetch_add(1, Ordering::SeqCst);
        })
    };
    let (mut a, first_a) = hub.subscribe("k");
    let (b, first_b) = hub.subscribe("k");
    assert!(first_a && !first_b);
    hub.notify("k");
    assert!(a.notified().await);
    drop(b);
    assert_eq!(idle.load(Ordering::SeqCst), 0);
    drop(a);
    assert_eq!(idle.load(Ordering::SeqCst), 1);
    assert!(hub.keys().is_empty());
}

#[tokio::test]
async fn a_named_release_wakes_only_the_named_waiter() {
    use futures_util::FutureExt;
    let hub = NotifyHub::new();
    let (mut me, _) = hub.subscribe("k");
    let (mut other, _) = hub.subscribe("k");
    // Both wait (registering their names), then one release names "me".
    assert!(me.notified_for("me").now_or_never().is_none());
    assert!(other.notified_for("other").now_or_never().is_none());
    hub.notify_next("k", Some("me"));
    assert_eq!(me.notified_for("me").now_or_never(), Some(true), "the named waiter wakes");
    assert!(other.notified_for("other").now_or_never().is_none(), "the other sleeps on");
    // A release naming nobody wakes everyone.
    hub.notify("k");
    assert_eq!(other.notified_for("other").now_or_never(), Some(true));
    // A wake-up for a waiter that is not waiting yet is kept for it.
    let (mut late, _) = hub.subscribe("k");
    hub.notify_next("k", Some("late"));
    assert_eq!(late.notified_for("late").now_or_never(), Some(true));
}

#[tokio::test]
async fn a_single_wake_up_wakes_one_waiter_and_a_waiter_that_gives_up_passes_it_on() {
    use futures_util::FutureExt;
    let hub = NotifyHub::new();
    let (mut a, _) = hub.subscribe("k");
    let (mut b, _) = hub.subscribe("k");
    // Nobody waits yet: the wake-up is kept for the first to wait, and only for it.
    hub.notify_one("k");
    assert_eq!(a.notified().now_or_never(), Some(true));
    assert!(b.notified().now_or_never().is_none(), "one release, one waiter woken");
    // a gives up without taking the lock: b is woken in its place.
    drop(a);
    assert_eq!(b.notified().now_or_never(), Some(true), "the wake-up was passed on");
    // b takes the lock: its own release will wake the next, so nothing is passed on.
    b.granted();
    let (mut c, _) = hub.subscribe("k");
    drop(b);
    assert!(c.notified().now_or_never().is_none());
    // Two releases while the woken waiter is out: one wake-up, the other kept until that
    // waiter comes back without the lock (waiting again), then given to the next to wait.
    let (mut e, _) = hub.subscribe("j");
    let (mut f, _) = hub.subscribe("j");
    hub.notify_one("j");
    hub.notify_one("j");
    assert_eq!(e.notified().now_or_never(), Some(true));
    assert!(f.notified().now_or_never().is_none(), "one wake-up out at a time");
    assert_eq!(e.notified().now_or_never(), Some(true), "the kept wake-up, once e was refused");
    e.granted();
    assert!(f.notified().now_or_never().is_none(), "nothing kept once the lock is taken");
    // A broadcast still wakes everyone.
    let (mut d, _) = hub.subscribe("k");
    hub.notify("k");
    assert_eq!(c.notified().now_or_never(), Some(true));
    assert_eq!(d.notified().now_or_never(), Some(true));
}

#[tokio::test]
async fn a_release_naming_a_waiter_wakes_it_and_no_other() {
    use futures_util::FutureExt;
    let hub = NotifyHub::new();
    let (mut reader, _) = hub.subscribe("k");
    let (mut writer, _) = hub.subscribe("k");
    hub.wake_by_name("k");
    assert!(reader.notified_as("reader").now_or_never().is_none());
    assert!(writer.notified_as("writer").now_or_never().is_none());
    hub.notify_next("k", Some("writer"));
    assert_eq!(writer.notified_as("writer").now_or_never(), Some(true), "the named waiter wakes");
    assert!(reader.notified_as("reader").now_or_never().is_none(), "the other sleeps on");
    // Named before it waits again: the wake-up is not lost.
    hub.notify_next("k", Some("writer"));
    assert_eq!(writer.notified_as("writer").now_or_never(), Some(true));
    // Named before it ever waited: kept for it.
    let (mut late, _) = hub.subscribe("k");
    hub.notify_next("k", Some("late"));
    assert_eq!(late.notified_as("late").now_or_never(), Some(true));
}
