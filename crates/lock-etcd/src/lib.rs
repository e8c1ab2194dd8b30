#![doc = include_str!("../README.md")]
#![forbid(unsafe_code)]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![deny(missing_docs)]
#![warn(missing_debug_implementations)]

mod backend;
mod builder;
mod cleanup;
mod error;
mod keeper;
mod note;
mod options;
mod recipe;
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
