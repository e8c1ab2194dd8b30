//! Every store with a server, through its testing side (`crates/lock-<store>/testing`): the
//! history checkers make a test of each checked target instead of naming each store, with
//! libtest-mimic as their harness (the test list is known at run time).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use libtest_mimic::Trial;
use lock_testkit::server::or_skip;
use lock_testkit::side::{Checked, CheckedServer, StoreSide};

/// The stores with a server, in the reports' order (the bench keeps its own list, behind its
/// features: `crates/lock-bench/src/sides.rs`).
pub fn all() -> [&'static dyn StoreSide; 6] {
    [
        &lock_redis_testing::Side,
        &lock_mysql_testing::Side,
        &lock_postgres_testing::Side,
        &lock_zk_testing::Side,
        &lock_etcd_testing::Side,
        &lock_nats_testing::Side,
    ]
}

/// A check of one target on its server.
pub type Check = for<'a> fn(&'a Checked, &'a CheckedServer) -> Pin<Box<dyn Future<Output = ()> + 'a>>;

/// A test `stores::<label>` for every target of every store that `pick` keeps: it starts the
/// target's private server (a skip, said loudly, when its package is missing and servers are
/// not required) and runs `check` on it.
pub fn trials(pick: fn(&Checked) -> bool, check: Check) -> Vec<Trial> {
    all()
        .iter()
        .flat_map(|side| side.checked())
        .filter(pick)
        .map(|target| {
            let target = Arc::new(target);
            Trial::test(format!("stores::{}", target.label), move || {
                let Some(server) = or_skip(&target.label, target.start()) else { return Ok(()) };
                block_on(check(&target, &server));
                Ok(())
            })
        })
        .collect()
}

/// Runs `f` to completion on a runtime of its own, as `#[tokio::test(flavor = "multi_thread",
/// worker_threads = 2)]` would.
pub fn block_on<F: Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime for the test")
        .block_on(f)
}

/// Tests of the functions named, each run with [`block_on`].
macro_rules! tests {
    ($($f:ident),* $(,)?) => {
        vec![$(libtest_mimic::Trial::test(stringify!($f), || {
            $crate::support::sides::block_on($f());
            Ok(())
        })),*]
    };
}
pub(crate) use tests;
