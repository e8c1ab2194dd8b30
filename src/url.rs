//! Backend selection by URL scheme.

use crate::registry::{feature_of, known_schemes, store_for};
use crate::{DynBackend, LockError};

pub use lock_core::backend::redact::redact_url;

/// Connect to the store a URL names: the registered store whose schemes include the URL's
/// (the README's backend table lists them; [`stores`](crate::stores) has them at run time).
///
/// # Errors
/// [`LockError::FeatureNotEnabled`] for a known scheme compiled out, [`LockError::InvalidConfig`]
/// for an unknown scheme or a malformed URL, backend errors when the server is unreachable.
pub async fn from_url(url: &str) -> Result<DynBackend, LockError> {
    let Some((scheme, _)) = url.split_once("://") else {
        return Err(LockError::InvalidConfig { reason: format!("not a URL: {:?}", redact_url(url)) });
    };
    if let Some(store) = store_for(scheme) {
        return (store.connect)(url).await;
    }
    let scheme = scheme.to_ascii_lowercase();
    Err(match feature_of(&scheme) {
        Some(feature) => LockError::FeatureNotEnabled { scheme, feature },
        None => LockError::InvalidConfig {
            reason: format!("unknown scheme {scheme:?} (expected one of {})", known_schemes().join(", ")),
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redacts_passwords() {
        assert_eq!(redact_url("redis://user:s3cret@h:1/0"), "redis://user:***@h:1/0");
        assert_eq!(
            redact_url("mysql://root:pw@127.0.0.1:3306/db?x=1"),
            "mysql://root:***@127.0.0.1:3306/db?x=1"
        );
        assert_eq!(redact_url("redis://:pw@h"), "redis://:***@h");
        assert_eq!(redact_url("zk://h:2181/r"), "zk://h:2181/r");
    }

    #[tokio::test]
    async fn memory_tables_are_shared_by_name() {
        let a = crate::Locker::new(from_url("memory://t1").await.expect("memory"));
        let b = crate::Locker::new(from_url("memory://t1").await.expect("memory"));
        let c = crate::Locker::new(from_url("memory://t2").await.expect("memory"));
        let g = a.try_lock("k").await.expect("try").expect("free");
        assert!(b.try_lock("k").await.expect("try").is_none());
        c.try_lock("k").await.expect("try").expect("other table").release().await.expect("release");
        g.release().await.expect("release");
    }

    #[cfg(feature = "redis")]
    #[tokio::test]
    async fn bad_redis_mode_is_refused_before_connecting() {
        let e = from_url("redis://127.0.0.1:1/?mode=bogus").await.expect_err("refused");
        assert!(matches!(e, LockError::InvalidConfig { .. }), "{e:?}");
    }

    #[tokio::test]
    async fn unknown_and_malformed_urls_are_typed_errors() {
        assert!(matches!(from_url("ftp://x").await, Err(LockError::InvalidConfig { .. })));
        assert!(matches!(from_url("nonsense").await, Err(LockError::InvalidConfig { .. })));
        let err = from_url("ftp://x").await.expect_err("unknown").to_string();
        for scheme in crate::registry::known_schemes() {
            assert!(err.contains(scheme), "every known scheme is named ({scheme} is not): {err}");
        }
        let err = from_url("mysql://u:topsecret@h/db").await.expect_err("error");
        assert!(!err.to_string().contains("topsecret"));
    }
}

#[cfg(all(test, not(feature = "etcd")))]
#[tokio::test]
async fn a_store_compiled_out_names_its_feature() {
    let err = from_url("etcd://127.0.0.1:1/x").await.expect_err("compiled out");
    assert!(matches!(err, LockError::FeatureNotEnabled { feature: "etcd", .. }), "{err:?}");
}
