//! Force-unlock (`Admin::evict`) in the session-bound modes: a hold is named by the fence
//! its note row carries, and only the hold with that fence is ended. A stale fence, a later hold
//! on the very connection the inspected one used, and a hold nobody noted are left alone.
//!
//! Run: `cargo test -p lock-mysql --test mysql evict::`.

use std::time::Duration;

use lock_core::backend::Admin;
use lock_core::backend::LockBackend;
use lock_core::{FencingToken, Locker, OwnerToken};
use lock_mysql::Mode;

use crate::common;

const MODES: [Mode; 2] = [Mode::Pessimistic, Mode::NamedLock];

fn key(mode: Mode, case: &str) -> String {
    format!("evict-{case}-{mode:?}-{}", OwnerToken::random())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_inspected_hold_is_evicted() {
    for mode in MODES {
        let backend = common::backend(&common::shared_url(), mode).await;
        let locker = Locker::new(backend.clone()).with_holder("evict-test").expect("holder");
        let k = key(mode, "inspected");
        let guard = locker.try_lock(k.clone()).await.expect("try_lock").expect("free");
        let fence = guard.fence().expect("fenced");
        let info = backend.inspect(&k).await.expect("inspect");
        assert!(info.held, "{mode:?}");
        assert_eq!(info.fence, Some(fence), "{mode:?}: the noted hold's fence");

        // Released and taken again on the same kept connection: the inspected hold is gone,
        // and the new one, which nobody looked at, must survive its fence.
        guard.release().await.expect("release");
        let again = locker.try_lock(k.clone()).await.expect("try_lock").expect("free");
        assert!(again.fence().expect("fenced") > fence, "{mode:?}");
        assert!(!backend.evict(&k, fence).await.expect("evict"), "{mode:?}: a stale fence evicts nothing");
        assert!(!backend.evict(&k, FencingToken(u64::MAX)).await.expect("evict"), "{mode:?}");
        assert!(!again.is_lost(), "{mode:?}: the later hold runs on");
        assert_eq!(backend.inspect(&k).await.expect("inspect").fence, again.fence(), "{mode:?}");

        assert!(backend.evict(&k, again.fence().expect("fenced")).await.expect("evict"), "{mode:?}");
        tokio::time::timeout(Duration::from_secs(10), again.lost()).await.expect("the holder is told");
        assert!(!backend.inspect(&k).await.expect("inspect").held, "{mode:?}: free after the eviction");
        assert!(!backend.evict(&k, again.fence().expect("fenced")).await.expect("evict"), "{mode:?}: twice");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hold_nobody_noted_shows_no_fence_and_is_not_evicted() {
    for mode in MODES {
        let backend = common::backend(&common::shared_url(), mode).await;
        let locker = Locker::new(backend.clone());
        let k = key(mode, "unnoted");
        let guard = locker.try_lock(k.clone()).await.expect("try_lock").expect("free");
        let info = backend.inspect(&k).await.expect("inspect");
        assert!(info.held, "{mode:?}: held, seen without a note");
        assert_eq!(info.fence, None, "{mode:?}: nothing on the server names the hold");
        let fence = guard.fence().expect("fenced");
        assert!(!backend.evict(&k, fence).await.expect("evict"), "{mode:?}");
        assert!(!guard.is_lost(), "{mode:?}");
        guard.release().await.expect("release");
        assert!(!backend.inspect(&k).await.expect("inspect").held, "{mode:?}: free again");
    }
}
