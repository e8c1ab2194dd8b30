//! What the script-level test binaries share: one private redis-server per binary, and
//! backends on it whose waiter timeout (so their claim windows) never runs out in a test.

use std::sync::LazyLock;
use std::time::Duration;

use lock_redis::{Mode, RedisLock};
use lock_redis_testing::RedisServer;
use lock_testkit::server::or_skip;

/// No lease, waiter deadline or claim window (a third of the waiter timeout) runs out during a
/// test: what the steps show is the order of grants, not a lapse.
pub const LONG: Duration = Duration::from_secs(60);

/// The binary's server; `None` (said loudly by `or_skip`) where redis-server is missing.
pub static SERVER: LazyLock<Option<RedisServer>> =
    LazyLock::new(|| or_skip("redis-server", RedisServer::start()));

/// A backend in `mode` on [`SERVER`], waiter timeout [`LONG`].
pub async fn backend(mode: Mode) -> Option<RedisLock> {
    let srv = SERVER.as_ref()?;
    let b = RedisLock::builder().url(srv.url()).mode(mode).fair_waiter_timeout(LONG);
    Some(b.build().await.expect("backend"))
}
