#![doc = include_str!("../README.md")]
#![forbid(unsafe_code)]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![deny(missing_docs)]
#![warn(missing_debug_implementations)]

mod backend;
mod builder;
mod cleanup;
mod error;
mod keys;
mod note;
mod notify;
mod options;
mod recipe;
mod records;
mod release;
mod session;

pub use backend::EtcdLock;
pub use builder::{
    DEFAULT_CONNECT_TIMEOUT, DEFAULT_LEASE_TTL, DEFAULT_PREFIX, DEFAULT_REQUEST_TIMEOUT, EtcdLockBuilder,
};
/// The etcd client this backend is built on, so error sources can be downcast, callers can pass
/// their own [`Client`](etcd_client::Client), and tests can talk to the server with the same
/// version.
pub use etcd_client;
pub use recipe::encode_key;
pub use session::WAITING_TTL;

/// etcd in the registry.
pub static DESCRIPTOR: lock_core::backend::registry::Descriptor = lock_core::backend::registry::Descriptor {
    name: "etcd",
    schemes: &["etcd", "etcds"],
    urls: "`etcd://[user:pw@]h1:p1[,h2:p2]/prefix` (`etcds://` over TLS; `?lease_ttl=`)",
    summary: "etcd v3: keys on a lease, each waiter watching its predecessor's revision",
    connect: |url| Box::pin(async move { Ok(std::sync::Arc::new(EtcdLock::from_url(url).await?) as _) }),
    modes: &[],
    local: None,
    // Every lock is a Raft commit: 100k holds kept fine (docs/BENCH.md) but took minutes to
    // take, too long for every bench run.
    watchdog_locks: Some(10_000),
    session_lease: Some(lock_core::backend::registry::SessionLease {
        option: "lease_ttl",
        floor: "etcd counts whole seconds and raises it to 1.5 election timeouts (2 s by default)",
    }),
};
