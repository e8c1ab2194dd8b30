#![doc = include_str!("../README.md")]
#![forbid(unsafe_code)]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![deny(missing_docs)]
#![warn(missing_debug_implementations)]

mod acquire;
mod backend;
mod builder;
mod client;
mod connect;
mod error;
mod holds;
mod keeper;
mod keys;
mod markers;
mod notify;
mod options;
mod records;
/// The URL parser of [`NatsLock::from_url`], for the test kit's raw client (feature `testing`).
#[cfg(feature = "testing")]
pub use options::parse as parse_url;
mod store;

/// The NATS client this backend is built on, so error sources can be downcast and tests can
/// talk to the server with the same version.
pub use async_nats;
pub use backend::NatsLock;
pub use builder::{
    DEFAULT_BUCKET, DEFAULT_CONNECT_TIMEOUT, DEFAULT_LEASE_TTL, DEFAULT_REQUEST_TIMEOUT, MIN_LEASE_TTL,
    NatsLockBuilder,
};
pub use keys::encode_key;

/// NATS in the registry.
pub static DESCRIPTOR: lock_core::backend::registry::Descriptor = lock_core::backend::registry::Descriptor {
    name: "nats",
    schemes: &["nats", "nats+tls"],
    urls: "`nats://[user:pw@]h1:p1[,h2:p2]/bucket` (`nats+tls://` over TLS; `?lease_ttl=`)",
    summary: "NATS JetStream key-value: create-if-absent, revision compare-and-set, one watch per client",
    connect: |url| Box::pin(async move { Ok(std::sync::Arc::new(NatsLock::from_url(url).await?) as _) }),
    modes: &[],
    local: None,
    // Every hold's renewal is a write of its own (the bucket's max age is each key's TTL):
    // 100k holds of one client lost 99.7 % of them to unconfirmed renewals (docs/BENCH.md).
    watchdog_locks: Some(10_000),
    session_lease: Some(lock_core::backend::registry::SessionLease {
        option: "lease_ttl",
        floor: "the bucket's max age is every lease: one TTL per bucket, at least 100 ms",
    }),
};
