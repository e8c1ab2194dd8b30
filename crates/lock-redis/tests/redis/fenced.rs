//! `lock_redis::fenced`: a guarded write refuses a fence older than one admitted before for the
//! key, against the real server.
//!
//! Run: `cargo test -p lock-redis --test redis fenced::`.

use std::time::Duration;

use lock_core::fenced::FenceError;
use lock_core::{FencingToken, Locker, OwnerToken};
use lock_redis::Mode;
use lock_redis::fenced::{delete, fence_key, set};
use redis::AsyncCommands;

use crate::common::{SERVER, backend};

async fn connection() -> Option<redis::aio::MultiplexedConnection> {
    let srv = SERVER.as_ref()?;
    Some(
        redis::Client::open(srv.url())
            .expect("url")
            .get_multiplexed_async_connection()
            .await
            .expect("connect"),
    )
}

/// The classic failure: the holder is paused past its fixed lease, the next holder takes the
/// lock and writes, and the paused holder wakes and writes with its older fence: refused, and
/// the key keeps the current holder's value.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_holders_late_write_is_refused() {
    let (Some(ba), Some(bb), Some(mut conn)) =
        (backend(Mode::Simple).await, backend(Mode::Simple).await, connection().await)
    else {
        return;
    };
    let (a, b) = (Locker::new(std::sync::Arc::new(ba)), Locker::new(std::sync::Arc::new(bb)));
    let k = format!("fenced-{}", OwnerToken::random());
    let data = format!("balance:{k}");

    let ga = a.lock(&k).lease(Duration::from_millis(300)).try_acquire().await.expect("try").expect("free");
    let fa = ga.fence().expect("fenced");
    // The holder is paused now: nothing renews its lease. The next holder waits it out.
    let gb = b.lock(&k).wait(Duration::from_secs(10)).acquire().await.expect("the next holder");
    let fb = gb.fence().expect("fenced");
    assert!(fb > fa, "{fb} after {fa}");
    set(&mut conn, &data, "70", fb).await.expect("the holder writes");

    let late = set(&mut conn, &data, "40", fa).await.expect_err("the late write is refused");
    let stale = late.stale().expect("refused as stale");
    assert_eq!((stale.fence(), stale.seen()), (fa, fb));
    let kept: String = conn.get(&data).await.expect("get");
    assert_eq!(kept, "70", "only the current holder's write landed");
    let stale_delete = delete(&mut conn, &data, fa).await.expect_err("a late delete is refused too");
    assert!(stale_delete.stale().is_some(), "{stale_delete}");
    gb.release().await.expect("release");
}

/// One hold writes again, a delete keeps the watermark (a stale holder cannot bring the key
/// back), fences compare as numbers past Lua's doubles, and bad input is refused unsent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_watermark_outlives_a_delete_and_compares_exactly() {
    let Some(mut conn) = connection().await else { return };
    let data = format!("fenced-{}", OwnerToken::random());
    for _ in 0..2 {
        set(&mut conn, &data, "a", FencingToken(9)).await.expect("admitted, twice");
    }
    delete(&mut conn, &data, FencingToken(10)).await.expect("a newer hold deletes");
    let back =
        set(&mut conn, &data, "b", FencingToken(9)).await.expect_err("a stale holder cannot recreate it");
    assert_eq!(back.stale().map(|s| s.seen()), Some(FencingToken(10)));
    let exists: bool = conn.exists(&data).await.expect("exists");
    assert!(!exists, "the refused write wrote nothing");

    // 2^53 + 1 and 2^53 are one double apart from equal: compared as text they differ.
    let big = 1_u64 << 53;
    set(&mut conn, &data, "c", FencingToken(big + 1)).await.expect("big");
    let below = set(&mut conn, &data, "d", FencingToken(big)).await.expect_err("one below");
    assert_eq!(below.stale().map(|s| s.seen()), Some(FencingToken(big + 1)));
    let mark: String = conn.get(fence_key::<()>(&data).expect("key")).await.expect("watermark");
    assert_eq!(mark, (big + 1).to_string());

    let huge = set(&mut conn, &data, "e", FencingToken(u64::MAX)).await.expect_err("too large");
    assert!(matches!(huge, FenceError::Invalid { .. }), "{huge}");
    let odd = set(&mut conn, "a}b", "f", FencingToken(1)).await.expect_err("no slot neighbour");
    assert!(matches!(odd, FenceError::Invalid { .. }), "{odd}");
}
