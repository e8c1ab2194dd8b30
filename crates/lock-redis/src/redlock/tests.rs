//! The `redlock://` URL and a quorum of three real masters.

use std::sync::Arc;

use lock_core::backend::registry::Connected;
use lock_core::{LockError, Locker};

use super::{connect, redlock_urls};

#[test]
fn redlock_urls_name_every_master() {
    let urls =
        redlock_urls(":pw@127.0.0.1:1,127.0.0.1:2,h3:3/2?mode=reentrant&key_prefix=app:").expect("parsed");
    let q = "?mode=reentrant&key_prefix=app:";
    assert_eq!(
        urls,
        [
            format!("redis://:pw@127.0.0.1:1/2{q}"),
            format!("redis://:pw@127.0.0.1:2/2{q}"),
            format!("redis://:pw@h3:3/2{q}")
        ]
    );
    assert!(matches!(redlock_urls("/?mode=simple"), Err(LockError::InvalidConfig { .. })));
    assert!(matches!(redlock_urls("h:1,h:2/?mode=fair"), Err(LockError::InvalidConfig { .. })));
    assert!(matches!(redlock_urls("h:1,h:2/?mode=redis-py"), Err(LockError::InvalidConfig { .. })));
    assert!(matches!(redlock_urls("h:1/?mode=simple&mode=fair"), Err(LockError::InvalidConfig { .. })));
    let urls = redlock_urls(":p/w@h1:1,h2:2/0").expect("a raw password with a slash");
    assert_eq!(urls, ["redis://:p/w@h1:1/0", "redis://:p/w@h2:2/0"]);
}

/// Three real masters: the quorum locks, and a second client through the same URL is
/// excluded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock_scheme_locks_on_three_masters() {
    use lock_redis_testing::RedisServer;
    use lock_testkit::server::require_servers;
    let mut masters = Vec::new();
    for _ in 0..3 {
        match RedisServer::start() {
            Ok(s) => masters.push(s),
            Err(e) if e.is_missing_binary() && !require_servers() => return eprintln!("SKIPPED: {e}"),
            Err(e) => panic!("redis-server: {e}"),
        }
    }
    let hosts: Vec<String> = masters.iter().map(|m| format!("127.0.0.1:{}", m.port())).collect();
    // One master down at start: the quorum still forms, and the master joins when it is back.
    masters[2].kill().expect("kill");
    let early =
        connect(&format!("redlock://{}/?mode=simple", hosts.join(","))).await.expect("a minority down");
    let early = Locker::new(Arc::new(early));
    early.try_lock("minority").await.expect("try").expect("free").release().await.expect("release");
    masters[2].restart().expect("restart");
    masters[0].kill().expect("kill another");
    early
        .try_lock("minority")
        .await
        .expect("try")
        .expect("healed master makes the quorum")
        .release()
        .await
        .expect("release");
    masters[0].restart().expect("restart");
    let url = format!("redlock://{}/?mode=simple&key_prefix=url-test:", hosts.join(","));
    let a: Connected = Arc::new(connect(&url).await.expect("redlock"));
    assert_eq!(a.name(), "quorum");
    assert!(a.capabilities().fencing, "Redlock grants carry the quorum's fencing token");
    let (a, b) = (Locker::new(a), Locker::new(Arc::new(connect(&url).await.expect("redlock")) as Connected));
    let g = a.try_lock("k").await.expect("try").expect("free");
    assert!(b.try_lock("k").await.expect("try").is_none());
    masters[2].kill().expect("kill");
    g.release().await.expect("release on 2 of 3");
    b.try_lock("k").await.expect("2 of 3").expect("free").release().await.expect("release");
}
