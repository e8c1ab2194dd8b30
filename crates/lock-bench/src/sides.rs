//! The stores with a server whose testing sides the bench runs: each starts its own server and
//! measures its own floor ([`StoreSide`]), so the bench names no store but here.

use lock_testkit::side::StoreSide;

/// Every store with a server this build has, in the report's order.
pub fn all() -> &'static [&'static dyn StoreSide] {
    &[
        #[cfg(feature = "redis")]
        &lock_redis_testing::Side,
        #[cfg(feature = "mysql")]
        &lock_mysql_testing::Side,
        #[cfg(feature = "zk")]
        &lock_zk_testing::Side,
        #[cfg(feature = "postgres")]
        &lock_postgres_testing::Side,
        #[cfg(feature = "etcd")]
        &lock_etcd_testing::Side,
        #[cfg(feature = "nats")]
        &lock_nats_testing::Side,
    ]
}
