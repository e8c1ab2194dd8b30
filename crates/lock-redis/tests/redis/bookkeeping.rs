//! What a lock remembers so that late copies of its requests change nothing stays bounded
//! whatever the rate (issue 46, point 9): a burst of cut-off attempts and of read releases on
//! one lock leaves one sorted set of at most `MARKS_CAP` members (handoff.lua), not a key
//! per attempt; and a late copy of a cancelled attempt still grants nothing, in every mode.

use std::time::Duration;

use futures_util::future::join_all;
use lock_core::backend::{AcquireRequest, Attempt, LockBackend, Side};
use lock_core::{LeaseSignal, OwnerToken, settle_cleanups};
use lock_redis::redis::{self, AsyncCommands, aio::ConnectionManager};
use lock_redis::{Mode, RedisLock};

use crate::common;
use common::{LONG, SERVER, backend};

const MODES: [Mode; 3] = [Mode::Simple, Mode::Reentrant, Mode::Fair];
/// Read releases in a burst: each used to leave a key of its own.
const BURST: usize = 2000;
/// Cleaned-up attempts in a burst (each used to leave a key too): more than the cap, so the
/// set is full of them.
const CANCELLED: usize = 2100;
/// `MARKS_CAP` in handoff.lua.
const MARKS_CAP: usize = 2048;

async fn admin() -> ConnectionManager {
    let url = SERVER.as_ref().expect("server").url();
    redis::Client::open(url).expect("url").get_connection_manager().await.expect("admin connection")
}

/// Every key whose name starts with `lock` (the lock and the keys that share its hash tag).
async fn keys_of(adm: &mut ConnectionManager, lock: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut cursor = 0u64;
    loop {
        let (next, batch): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(format!("{lock}*"))
            .arg("COUNT")
            .arg(1000)
            .query_async(adm)
            .await
            .expect("scan");
        found.extend(batch);
        if next == 0 {
            return found;
        }
        cursor = next;
    }
}

fn request<'a>(key: &'a str, owner: OwnerToken, signal: &'a LeaseSignal, side: Side) -> AcquireRequest<'a> {
    AcquireRequest { key, owner, lease: LONG, wait_until: None, signal, side }
}

/// A burst of cancelled attempts (their cleanups, as a dropped attempt runs them, and real
/// attempts cut off at once) and of read acquisitions and releases on one lock leaves a
/// handful of keys: the marks share one sorted set, capped, which expires on its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_cancellations_and_releases_leaves_one_bounded_set() {
    for mode in MODES {
        let Some(b) = backend(mode).await else { return };
        let key = lock_testkit::key("bookkeeping");
        let signal = LeaseSignal::new();
        // Cleanups of attempts whose answer never came, 50 at a time.
        for _ in 0..CANCELLED / 50 {
            let undos = (0..50).map(|_| b.undo_unsent_attempt(&key, OwnerToken::random()));
            for r in join_all(undos).await {
                r.expect("cleanup");
            }
        }
        // Attempts dropped as soon as they are sent (their cleanups run in the background),
        // while another owner holds the lock: an attempt the timeout did not cut off after all
        // (the task's budget ran out first) is refused, not a grant left behind.
        let holder = OwnerToken::random();
        let got = b.try_acquire(&request(&key, holder, &signal, Side::Write)).await.expect("write");
        assert!(matches!(got, Attempt::Acquired(_)), "{mode}: the lock is free");
        for _ in 0..100 {
            let req = request(&key, OwnerToken::random(), &signal, Side::Write);
            let _ = tokio::time::timeout(Duration::ZERO, b.try_acquire(&req)).await;
        }
        assert!(settle_cleanups(Duration::from_secs(10)).await, "{mode}: cleanups still running");
        assert!(b.release(&key, holder).await.expect("release"), "{mode}: the holder held");
        // The set is full of cancellations' marks, which live 300 s: a read release's mark
        // (10 s) still goes in as the newest, so its resent copy answers what the first did.
        let (reader, conn) = (OwnerToken::random(), b.connection());
        let got = b.try_acquire(&request(&key, reader, &signal, Side::Read)).await.expect("read");
        assert!(matches!(got, Attempt::Acquired(_)), "{mode}: a read of a free lock");
        conn.resend_every_command(true);
        let released = b.release(&key, reader).await;
        conn.resend_every_command(false);
        assert!(released.expect("release"), "{mode}: a read release sent twice on a full set");
        // Reads taken and released: each release marks its owner done.
        for _ in 0..BURST {
            let owner = OwnerToken::random();
            let got = b.try_acquire(&request(&key, owner, &signal, Side::Read)).await.expect("read");
            assert!(matches!(got, Attempt::Acquired(_)), "{mode}: a read of a free lock");
            assert!(b.release(&key, owner).await.expect("release"), "{mode}: the reader held");
        }
        let lock = b.key_names(&key).lock().to_owned();
        let mut adm = admin().await;
        let keys = keys_of(&mut adm, &lock).await;
        assert!(
            keys.len() <= 4,
            "{mode}: {} keys of {lock} after the burst: {:?}",
            keys.len(),
            &keys[..8.min(keys.len())]
        );
        let marks = format!("{lock}:x");
        let members: usize = adm.zcard(&marks).await.expect("zcard");
        assert_eq!(members, MARKS_CAP, "{mode}: the marks are capped, the newest kept");
        let ttl: i64 = adm.pttl(&marks).await.expect("pttl");
        assert!(ttl > 0 && ttl <= 300_000, "{mode}: the marks expire when the lock is idle ({ttl} ms)");
        // Still usable: a write after all that.
        let owner = OwnerToken::random();
        let got = b.try_acquire(&request(&key, owner, &signal, Side::Write)).await.expect("write");
        assert!(matches!(got, Attempt::Acquired(_)), "{mode}: the lock is free");
        assert!(b.release(&key, owner).await.expect("release"), "{mode}");
    }
}

/// The scripts as the crate builds them (src/scripts.rs): preludes, then the body.
fn script(body: &str, hold: bool) -> redis::Script {
    let mut src = String::from(include_str!("../../scripts/fence.lua"));
    src.push_str(include_str!("../../scripts/marks.lua"));
    src.push_str(include_str!("../../scripts/handoff.lua"));
    src.push_str(include_str!("../../scripts/read_phases.lua"));
    if hold {
        src.push_str(include_str!("../../scripts/hold.lua"));
    }
    src.push_str(body);
    redis::Script::new(&src)
}

/// The late copy of one attempt of `owner` with `nonce` on `key` (a request the driver resent,
/// or sent on a connection it had replaced, arriving after the attempt's cleanup): its reply.
async fn late_copy(b: &RedisLock, mode: Mode, key: &str, owner: &str, nonce: &str) -> Vec<i64> {
    let n = b.key_names(key);
    let (tag, lease) = ("0".repeat(32), LONG.as_millis().to_string());
    let (body, hold) = match mode {
        Mode::Simple => (include_str!("../../scripts/acquire_simple.lua"), false),
        Mode::Reentrant => (include_str!("../../scripts/acquire_reentrant.lua"), true),
        _ => (include_str!("../../scripts/acquire_fair.lua"), true),
    };
    let s = script(body, hold);
    let mut inv = s.prepare_invoke();
    match mode {
        Mode::Simple => {
            inv.key(n.lock()).key(n.fence()).key(n.waiters()).key(n.queue());
            inv.arg(format!("{owner}{nonce}")).arg(&lease).arg(owner).arg(0).arg(&tag).arg("").arg("")
        }
        Mode::Reentrant => {
            inv.key(n.lock()).key(n.fence()).key(n.waiters()).key(n.queue());
            inv.arg(owner).arg(&lease).arg(nonce).arg(0).arg(&tag).arg("").arg("")
        }
        _ => {
            inv.key(n.lock()).key(n.fence()).key(n.queue()).key(n.waiters());
            inv.arg(owner).arg(&lease).arg(nonce).arg(0).arg(n.channel()).arg(1000).arg(&tag).arg("").arg("")
        }
    };
    inv.invoke_async(&mut admin().await).await.expect("late copy")
}

/// The cleanup of the attempt of `owner` with `nonce` on `key`, as its dropped future runs it.
async fn cancel(b: &RedisLock, mode: Mode, key: &str, owner: &str, nonce: &str) {
    let n = b.key_names(key);
    let tag = "0".repeat(32);
    let s = script(
        if mode == Mode::Simple {
            include_str!("../../scripts/cancel_simple.lua")
        } else {
            include_str!("../../scripts/cancel_hash.lua")
        },
        false,
    );
    let mut inv = s.prepare_invoke();
    if mode == Mode::Simple {
        inv.key(n.lock()).key(n.waiters()).key(n.queue()).key(n.fence());
    } else {
        inv.key(n.lock()).key(n.queue()).key(n.waiters()).key(n.fence());
    }
    inv.arg(owner).arg(nonce).arg(n.channel()).arg(1000).arg(&tag).arg("");
    let _: i64 = inv.invoke_async(&mut admin().await).await.expect("cancel");
}

/// A copy of an attempt that arrives after its cleanup grants nothing, even after a burst of
/// other cleanups on the same lock (fewer than the cap), and a second run of the cleanup is
/// a no-op; a fresh attempt of the same owner is granted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_copy_of_a_cancelled_attempt_never_grants() {
    for mode in MODES {
        let Some(b) = backend(mode).await else { return };
        let key = lock_testkit::key("late-copy");
        let (owner, nonce) = (OwnerToken::random().to_string(), OwnerToken::random().to_string());
        cancel(&b, mode, &key, &owner, &nonce).await;
        for _ in 0..(MARKS_CAP * 3 / 4) / 50 {
            let undos = (0..50).map(|_| b.undo_unsent_attempt(&key, OwnerToken::random()));
            for r in join_all(undos).await {
                r.expect("cleanup");
            }
        }
        cancel(&b, mode, &key, &owner, &nonce).await;
        assert_eq!(late_copy(&b, mode, &key, &owner, &nonce).await, [0, -1, 0], "{mode}: refused");
        let mut adm = admin().await;
        let held: bool = adm.exists(b.key_names(&key).lock()).await.expect("exists");
        assert!(!held, "{mode}: the late copy took the lock");
        let fresh = OwnerToken::random().to_string();
        assert_eq!(late_copy(&b, mode, &key, &owner, &fresh).await[0], 1, "{mode}: a new attempt holds");
    }
}
