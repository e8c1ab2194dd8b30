use std::time::Duration;

use lock_core::LockError;

use crate::{Mode, RedisLock, RedisLockBuilder};

#[test]
fn public_types_are_send_and_sync() {
    fn check<T: Send + Sync>() {}
    check::<RedisLock>();
    check::<RedisLockBuilder>();
}

#[test]
fn debug_never_shows_the_password() {
    let b = RedisLock::builder().url("redis://app:hunter2@127.0.0.1:1/").credentials(Some("u"), "s3cr3t");
    let s = format!("{b:?}");
    assert!(!s.contains("hunter2") && !s.contains("s3cr3t"), "{s}");
}

#[tokio::test]
async fn bad_configs_are_refused_without_secrets() {
    let e = RedisLock::builder()
        .url("redis://127.0.0.1:1/")
        .key_prefix("a{b")
        .build()
        .await
        .expect_err("refused");
    assert!(matches!(e, LockError::InvalidConfig { .. }));
    let e = RedisLock::builder()
        .url("redis://127.0.0.1:1/")
        .mode(Mode::RedisPy)
        .interop_poll(Duration::from_millis(1))
        .build()
        .await
        .expect_err("refused");
    assert!(matches!(e, LockError::InvalidConfig { .. }), "{e:?}");
    // An interop prefix is part of the other library's name: braces pass the check (and
    // the build then fails only on the closed port).
    let e = RedisLock::builder()
        .url("redis://127.0.0.1:1/")
        .mode(Mode::RedisPy)
        .key_prefix("a{b}:")
        .connection_timeout(Duration::from_millis(200))
        .build()
        .await
        .expect_err("nothing listens");
    assert!(!matches!(e, LockError::InvalidConfig { .. }), "{e:?}");
    let e = RedisLock::builder().url("http://u:hunter2@h/").build().await.expect_err("refused");
    assert!(matches!(e, LockError::InvalidConfig { .. }), "{e:?}");
    assert!(!format!("{e} {e:?}").contains("hunter2"));
    if !cfg!(feature = "tls") {
        let e = RedisLock::builder().url("rediss://h:1/").build().await.expect_err("refused");
        assert!(matches!(e, LockError::FeatureNotEnabled { feature: "tls", .. }));
    }
}
