//! Authentication and the least-privilege ACL rule: a user with a password (never shown),
//! and the README's rule for a lock user confined to its key prefix, in every mode.

use std::time::Duration;

use lock_core::backend::LockBackend;
use lock_redis::redis;
use lock_redis::{Mode, RedisLock};

use super::{LEASE, admin, backend, locker, server};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acl_user_and_password_and_no_leak_on_failure() {
    let Some(srv) = server(&["--requirepass", "adminpw"]) else { return };
    let mut adm = admin(&srv.url()).await;
    let _: () = redis::cmd("ACL")
        .arg(&["SETUSER", "locker", "on", ">app-s3cr3t", "~*", "&*", "+@all"][..])
        .query_async(&mut adm)
        .await
        .expect("acl setuser");
    let url = format!("redis://127.0.0.1:{}/", srv.port());
    let b =
        RedisLock::builder().url(&url).credentials(Some("locker"), "app-s3cr3t").build().await.expect("auth");
    assert!(!format!("{b:?}").contains("app-s3cr3t"));
    let l = locker(&b);
    l.try_lock("acl").await.expect("try").expect("free").release().await.expect("release");

    let bad = format!("redis://locker:wrong-pw-9@127.0.0.1:{}/", srv.port());
    let e = RedisLock::builder().url(&bad).build().await.expect_err("wrong password");
    assert!(!e.is_temporary(), "auth failure must be permanent: {e:?}");
    let shown = format!("{e} {e:?} {:?}", std::error::Error::source(&e).map(ToString::to_string));
    assert!(!shown.contains("wrong-pw-9"), "password leaked: {shown}");
}

/// The ACL rule the README gives for a least-privilege lock user (after `ACL SETUSER <name>
/// reset on >password`), read from there: keys and channels under the key prefix, and only the
/// commands the library (and its scripts) send; plus the connection set-up redis-rs sends
/// (HELLO for RESP3 pub/sub, PING; its CLIENT SETINFO may fail). Every mode works with exactly
/// that: acquire, a waiter woken by pub/sub, renew, release, a read, a permit, a wait that ends.
fn least_privilege_acl() -> Vec<&'static str> {
    let readme = include_str!("../../../../../README.md");
    let line = readme.lines().find(|l| l.starts_with("ACL SETUSER locker")).expect("the README's rule");
    let mut rule: Vec<&str> = line.split_whitespace().skip_while(|w| !w.starts_with('>')).skip(1).collect();
    rule.extend(["+hello", "+ping"]);
    rule
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn least_privilege_acl_user_runs_every_mode() {
    let Some(srv) = server(&["--requirepass", "adminpw"]) else { return };
    let mut adm = admin(&srv.url()).await;
    let mut rule = vec!["SETUSER", "locker", "reset", "on", ">lp-s3cr3t"];
    rule.extend(least_privilege_acl());
    let _: () = redis::cmd("ACL").arg(&rule[..]).query_async(&mut adm).await.expect("acl setuser");
    let url = format!("redis://locker:lp-s3cr3t@127.0.0.1:{}/", srv.port());
    for mode in [Mode::Simple, Mode::Reentrant, Mode::Fair] {
        let (a, b) = (backend(&url, mode).await, backend(&url, mode).await);
        let (la, lb) = (locker(&a), locker(&b));
        let k = format!("lp-{mode:?}");
        let g = la.lock(&k).try_acquire().await.expect("acquire").expect("free");
        g.renew(LEASE).await.expect("renew");
        let waiter = tokio::spawn(async move { lb.lock(&k).wait(Duration::from_secs(5)).acquire().await });
        tokio::time::sleep(Duration::from_millis(100)).await; // let it subscribe and wait
        g.release().await.expect("release");
        let g2 = waiter.await.expect("task").expect("the waiter is woken and acquires");
        g2.release().await.expect("release");
        if mode != Mode::Simple {
            let outer = la.lock("lp-nest").try_acquire().await.expect("try").expect("free");
            let inner =
                la.lock("lp-nest").owner(outer.owner()).try_acquire().await.expect("try").expect("nested");
            inner.release().await.expect("release");
            outer.release().await.expect("release");
        }
    }
    // A read, a permit, and a wait that ends without a guard (its leave marks the owner).
    let l = locker(&backend(&url, Mode::Simple).await);
    let held = l.lock("lp-wait").try_acquire().await.expect("acquire").expect("free");
    let late = l.lock("lp-wait").wait(Duration::from_millis(300)).acquire().await;
    assert!(late.is_err(), "the lock is held: the wait ends");
    held.release().await.expect("release");
    let rw = lock_core::RwLock::new(&l, "lp-rw").expect("rwlock");
    rw.read().try_acquire().await.expect("read").expect("free").release().await.expect("release");
    let sem = lock_core::Semaphore::new(&l, "lp-sem", 2).expect("semaphore");
    sem.try_acquire().await.expect("permit").expect("free").release().await.expect("release");
    // Outside the prefix, the same user is refused.
    let mut c = redis::Client::open(url.as_str())
        .expect("url")
        .get_multiplexed_async_connection()
        .await
        .expect("conn");
    let denied: redis::RedisResult<()> =
        redis::cmd("SET").arg("other:key").arg("1").query_async(&mut c).await;
    assert!(denied.is_err(), "the ACL must confine the user to its prefix");
}

/// The interop modes under the least-privilege rule, with the other library's key patterns in
/// place of `dlock:*` (as the README gives them) and `LPUSH` for python-redis-lock's signal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn least_privilege_acl_user_runs_the_interop_modes() {
    let Some(srv) = server(&["--requirepass", "adminpw"]) else { return };
    let mut adm = admin(&srv.url()).await;
    let mut rule = vec!["SETUSER", "locker", "reset", "on", ">lp-s3cr3t"];
    rule.extend(least_privilege_acl().into_iter().filter(|r| !r.contains("dlock:")));
    rule.extend(["~app:*", "&app:*", "~lock:app:*", "&lock:app:*", "~lock-signal:app:*", "+lpush"]);
    let _: () = redis::cmd("ACL").arg(&rule[..]).query_async(&mut adm).await.expect("acl setuser");
    let url = format!("redis://locker:lp-s3cr3t@127.0.0.1:{}/?key_prefix=app%3A", srv.port());
    for mode in [Mode::RedisPy, Mode::PythonRedisLock] {
        let url = format!("{url}&mode={mode}");
        let (a, b) =
            (RedisLock::from_url(&url).await.expect("a"), RedisLock::from_url(&url).await.expect("b"));
        let (la, lb) = (locker(&a), locker(&b));
        let k = format!("lp-{mode:?}");
        let g = la.lock(&k).try_acquire().await.expect("acquire").expect("free");
        g.renew(LEASE).await.expect("renew");
        assert!(lb.lock(&k).try_acquire().await.expect("try").is_none(), "{mode:?}: exclusive");
        let info = b.inspect(&k).await.expect("inspect");
        assert!(info.held, "{mode:?}: {info:?}");
        g.release().await.expect("release");
        let g2 = lb.lock(&k).wait(Duration::from_secs(5)).acquire().await.expect("free again");
        g2.release().await.expect("release");
    }
}

/// The rule allows every command the native modes' scripts run (the interop scripts' own are
/// named with their rule).
#[test]
fn the_least_privilege_rule_covers_the_scripts() {
    const ELSEWHERE: [&str; 3] = ["acquire_plain.lua", "release_plain.lua", "evict_plain.lua"];
    let rule = least_privilege_acl();
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts");
    for f in std::fs::read_dir(dir).expect("scripts/") {
        let path = f.expect("entry").path();
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default().to_owned();
        if ELSEWHERE.contains(&name.as_str()) {
            continue;
        }
        let text = std::fs::read_to_string(&path).expect("a script");
        for call in text.split("redis.call('").skip(1).chain(text.split("redis.pcall('").skip(1)) {
            let command = format!("+{}", call.split('\'').next().unwrap_or_default().to_lowercase());
            let allowed = rule.contains(&command.as_str())
                || (command == "+pubsub" && rule.contains(&"+pubsub|numsub"));
            assert!(allowed, "{name} runs {command}, which the least-privilege rule does not allow");
        }
    }
}
