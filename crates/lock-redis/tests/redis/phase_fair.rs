//! The native read-write lock is phase-fair (issue 46, point 7), step by step on a private
//! server in every mode with readers: a writer's release lets every waiting reader in before
//! the next writer, that writer waits for those readers only, and readers that came after it
//! wait for its release, even when a waiter leaves meanwhile. A waiting reader that gives up
//! gives back a read let in for it, and a copy of its attempt arriving later neither waits nor
//! holds; every step sent twice does what one did.

use lock_core::backend::{AcquireRequest, Attempt, LockBackend, Side};
use lock_core::{LeaseSignal, OwnerToken};
use lock_redis::{Mode, RedisLock};
use tokio::time::Instant;

use crate::common;
use common::{LONG, backend};
use lock_core::backend::WaitQueue;

const MODES: [Mode; 3] = [Mode::Simple, Mode::Reentrant, Mode::Fair];

/// One waiting attempt of `owner` on `key`'s `side`: whether it holds.
async fn attempt(b: &RedisLock, key: &str, owner: OwnerToken, side: Side) -> bool {
    let signal = LeaseSignal::new();
    let wait_until = Some(Instant::now() + LONG);
    let req = AcquireRequest { key, owner, lease: LONG, wait_until, signal: &signal, side };
    matches!(b.try_acquire(&req).await.expect("attempt"), Attempt::Acquired(_))
}

/// Writer, readers, writer, readers: each freed write lets in the readers that waited for it,
/// including one that came after the next writer queued, and the next writer gets in after
/// them, before the readers that came while they held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_freed_write_lets_the_waiting_readers_in_before_the_next_writer() {
    for mode in MODES {
        let Some(b) = backend(mode).await else { return };
        let key = lock_testkit::key("phase");
        let [w1, r1, w2, r2, r3] = [(); 5].map(|()| OwnerToken::random());
        assert!(attempt(&b, &key, w1, Side::Write).await, "{mode}: free");
        assert!(!attempt(&b, &key, r1, Side::Read).await, "{mode}: a reader while a writer holds");
        assert!(!attempt(&b, &key, w2, Side::Write).await, "{mode}: a second writer");
        assert!(!attempt(&b, &key, r2, Side::Read).await, "{mode}: a reader after the second writer");
        assert!(b.release(&key, w1).await.expect("release"), "{mode}");
        assert!(!attempt(&b, &key, w2, Side::Write).await, "{mode}: the writer went before the readers");
        assert!(attempt(&b, &key, r1, Side::Read).await, "{mode}: the first reader is let in");
        assert!(attempt(&b, &key, r2, Side::Read).await, "{mode}: so is the one behind the writer");
        assert!(!attempt(&b, &key, r3, Side::Read).await, "{mode}: a new reader goes behind the writer");
        assert!(b.release(&key, r1).await.expect("release"), "{mode}");
        assert!(!attempt(&b, &key, w2, Side::Write).await, "{mode}: the writer waits for every reader");
        assert!(b.release(&key, r2).await.expect("release"), "{mode}");
        assert!(attempt(&b, &key, w2, Side::Write).await, "{mode}: the last reader hands over");
        assert!(!attempt(&b, &key, r3, Side::Read).await, "{mode}: the writer holds");
        assert!(b.release(&key, w2).await.expect("release"), "{mode}");
        assert!(attempt(&b, &key, r3, Side::Read).await, "{mode}: the reader that came meanwhile");
        assert!(b.release(&key, r3).await.expect("release"), "{mode}");
        assert!(attempt(&b, &key, OwnerToken::random(), Side::Write).await, "{mode}: nothing left behind");
    }
}

/// An upgraded reader releases its write and its read together, in either order: the readers
/// that waited for the write come in first either way, before the writer that waited too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upgrades_release_lets_the_waiting_readers_in_too() {
    for mode in MODES {
        for write_first in [true, false] {
            let Some(b) = backend(mode).await else { return };
            let key = lock_testkit::key("phase-upgrade");
            let [u, up, r, w] = [(); 4].map(|()| OwnerToken::random());
            assert!(attempt(&b, &key, u, Side::Read).await, "{mode}: free");
            assert!(
                attempt(&b, &key, up, Side::Upgrade { reader: u }).await,
                "{mode}: the only reader upgrades"
            );
            assert!(!attempt(&b, &key, r, Side::Read).await, "{mode}: a reader waits for the upgrade");
            assert!(!attempt(&b, &key, w, Side::Write).await, "{mode}: a writer waits for the upgrade");
            let order = if write_first { [up, u] } else { [u, up] };
            for owner in order {
                assert!(b.release(&key, owner).await.expect("release"), "{mode}");
            }
            let how = if write_first { "write, then read" } else { "read, then write" };
            assert!(!attempt(&b, &key, w, Side::Write).await, "{mode} ({how}): the writer went first");
            assert!(attempt(&b, &key, r, Side::Read).await, "{mode} ({how}): the reader is let in");
            assert!(b.release(&key, r).await.expect("release"), "{mode}");
            assert!(attempt(&b, &key, w, Side::Write).await, "{mode} ({how}): then the writer");
        }
    }
}

/// A reader let in by a freed write whose wait ends before it claims the read (it left the
/// queue: a timeout, a dropped future) gives it back: the writer waiting for it gets in at
/// once, not after the claim window. A copy of its attempt arriving after that neither
/// registers nor holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_leaving_gives_back_the_read_let_in_for_it() {
    for mode in MODES {
        let Some(b) = backend(mode).await else { return };
        let key = lock_testkit::key("phase-leave");
        let [w1, gone, w2] = [(); 3].map(|()| OwnerToken::random());
        assert!(attempt(&b, &key, w1, Side::Write).await, "{mode}: free");
        assert!(!attempt(&b, &key, gone, Side::Read).await, "{mode}: a reader waits");
        assert!(!attempt(&b, &key, w2, Side::Write).await, "{mode}: a writer waits");
        assert!(b.release(&key, w1).await.expect("release"), "{mode}");
        assert!(!attempt(&b, &key, w2, Side::Write).await, "{mode}: the reader was let in first");
        b.leave_queue(&key, gone).await.expect("leave");
        assert!(attempt(&b, &key, w2, Side::Write).await, "{mode}: the read given back, the writer holds");
        assert!(b.release(&key, w2).await.expect("release"), "{mode}");
        assert!(!attempt(&b, &key, gone, Side::Read).await, "{mode}: a late copy of the reader's attempt");
        assert!(attempt(&b, &key, OwnerToken::random(), Side::Write).await, "{mode}: it left nothing behind");
    }
}

/// Every step sent twice (the driver resends, the second answer returned) does what one did: a
/// reader's wait, its claim of the read let in for it and its release leave one reader, then
/// none, and the writer's release lets the reader in once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn phases_are_idempotent_per_attempt() {
    for mode in MODES {
        let Some(b) = backend(mode).await else { return };
        let conn = b.connection();
        let key = lock_testkit::key("phase-resend");
        let [w1, r1, w2] = [(); 3].map(|()| OwnerToken::random());
        assert!(attempt(&b, &key, w1, Side::Write).await, "{mode}: free");
        conn.resend_every_command(true);
        assert!(!attempt(&b, &key, r1, Side::Read).await, "{mode}: a reader waits");
        assert!(!attempt(&b, &key, w2, Side::Write).await, "{mode}: a writer waits");
        let released = b.release(&key, w1).await;
        let claimed = attempt(&b, &key, r1, Side::Read).await;
        conn.resend_every_command(false);
        assert!(released.expect("release"), "{mode}: a write release sent twice");
        assert!(claimed, "{mode}: the reader let in claims its read");
        assert!(!attempt(&b, &key, w2, Side::Write).await, "{mode}: the writer waits for the reader");
        conn.resend_every_command(true);
        let released = b.release(&key, r1).await;
        conn.resend_every_command(false);
        assert!(released.expect("release"), "{mode}: a read release sent twice");
        assert!(attempt(&b, &key, w2, Side::Write).await, "{mode}: the reader's release handed over");
        assert!(b.release(&key, w2).await.expect("release"), "{mode}");
        assert!(attempt(&b, &key, OwnerToken::random(), Side::Write).await, "{mode}: nothing left behind");
    }
}

/// A waiter leaving while readers hold and a writer waits (its wait timed out) lets nobody in:
/// the readers that came after the writer still wait for its write, in every mode.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_leaving_during_a_read_phase_keeps_the_writers_turn() {
    for mode in MODES {
        let Some(b) = backend(mode).await else { return };
        let key = lock_testkit::key("phase-leave-reading");
        let [r1, w, r2, gone] = [(); 4].map(|()| OwnerToken::random());
        assert!(attempt(&b, &key, r1, Side::Read).await, "{mode}: free");
        assert!(!attempt(&b, &key, w, Side::Write).await, "{mode}: a writer waits for the reader");
        assert!(!attempt(&b, &key, r2, Side::Read).await, "{mode}: a reader waits for the writer");
        assert!(!attempt(&b, &key, gone, Side::Read).await, "{mode}: so does another");
        b.leave_queue(&key, gone).await.expect("leave");
        assert!(!attempt(&b, &key, r2, Side::Read).await, "{mode}: a reader went past the writer");
        assert!(b.release(&key, r1).await.expect("release"), "{mode}");
        assert!(attempt(&b, &key, w, Side::Write).await, "{mode}: the last reader hands over");
        assert!(b.release(&key, w).await.expect("release"), "{mode}");
        assert!(attempt(&b, &key, r2, Side::Read).await, "{mode}: then the reader");
        assert!(b.release(&key, r2).await.expect("release"), "{mode}");
    }
}
