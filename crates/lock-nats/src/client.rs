//! One client's state, shared by its handles, its keeper and its watch: the connection's
//! configuration and bucket, the holds taken through it and what wakes its waiters.

use std::sync::Arc;

use tokio::runtime::Handle;

use crate::builder::Config;
use crate::holds::Holds;
use crate::markers::Markers;
use crate::notify::Notifier;
use crate::store::Bucket;

/// The state behind every clone of a [`NatsLock`](crate::NatsLock).
pub(crate) struct Inner {
    pub cfg: Config,
    pub bucket: Bucket,
    pub holds: Holds,
    pub notifier: Notifier,
    pub markers: Arc<Markers>,
    pub runtime: Handle,
    /// The records bucket (records.rs), opened on the first record op.
    pub records: tokio::sync::OnceCell<Bucket>,
}
