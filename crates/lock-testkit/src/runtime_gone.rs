//! A `Locker` and its guard that outlive their runtime (the application's runtime shut down
//! first): dropping them panics nowhere, and the connection a hold had goes, so the server frees
//! the lock.

use std::time::Duration;

use lock_core::Locker;

use crate::poll::eventually;

/// A runtime of its own (one worker), standing for the application's.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().expect("runtime")
}

/// A `Locker` from `locker` takes `key` on a runtime of its own (and with `release_first`
/// releases it again: its connection is then kept for the next hold); that runtime shuts down,
/// then the guard and the `Locker` are dropped. Then [`taken_again`] within `bound`.
pub fn dropped_after_the_runtime<F, Fut>(locker: F, key: &str, release_first: bool, bound: Duration)
where
    F: Fn() -> Fut,
    Fut: Future<Output = Locker>,
{
    let rt = runtime();
    let (l, guard) = rt.block_on(async {
        let l = locker().await;
        let g = l.try_lock(key).await.expect("try").expect("free");
        if release_first {
            g.release().await.expect("release");
            return (l, None);
        }
        (l, Some(g))
    });
    drop(rt);
    drop(guard);
    drop(l);
    taken_again(locker, key, bound);
}

/// Another `Locker` from `locker`, on a runtime of its own, takes `key` within `bound` (once the
/// server has seen the dropped connections go).
pub fn taken_again<F, Fut>(locker: F, key: &str, bound: Duration)
where
    F: Fn() -> Fut,
    Fut: Future<Output = Locker>,
{
    runtime().block_on(async {
        let other = locker().await;
        eventually(bound, "the key is free again", || async {
            match other.try_lock(key).await.expect("try") {
                Some(g) => g.release().await.is_ok(),
                None => false,
            }
        })
        .await;
    });
}
