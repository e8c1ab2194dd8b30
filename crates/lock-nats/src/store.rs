//! The bucket's conditional writes and reads, each one request, each safe to see twice.
//!
//! Every write is a JetStream publish to `$KV.<bucket>.<key>` with the header
//! `Nats-Expected-Last-Subject-Sequence` (the server stores it only if the key's last revision
//! is the one named: 0 for a key with no message at all) and a `Nats-Msg-Id` unique to the
//! write. Why a second copy of any of them is harmless:
//! - the server drops a copy whose message id it stored within the duplicate window (the
//!   bucket's max age, at most 2 min) and answers with the first copy's revision, so a resent
//!   create, renewal or delete reports what the first did;
//! - a copy outside that window names a revision that is no longer the key's last (the first
//!   copy, or anything after it, moved it on): the server refuses it.
//!
//! The one write that names revision 0, a create, could only land again after the key had no
//! message at all for the whole window: that is, after the hold it made had expired and its
//! delete marker too. A copy delayed that long (a server paused for longer than the TTL) would
//! make a hold nobody owns, which frees itself at the TTL.

use std::time::{Duration, SystemTime};

use async_nats::HeaderMap;
use async_nats::header::{NATS_EXPECTED_LAST_SUBJECT_SEQUENCE, NATS_MESSAGE_ID};
use async_nats::jetstream::Context;
use async_nats::jetstream::kv::{EntryErrorKind, Operation, Store};
use bytes::Bytes;
use lock_core::{LockError, Result};

use crate::error::{self, Refused, bounded};
use crate::keys::Value;

/// What a lock key holds now.
#[derive(Debug, Clone)]
pub(crate) enum Current {
    /// No message: never written, or expired with its delete marker. A create names 0.
    Absent,
    /// A delete marker at this revision: free, and a create names it.
    Deleted(u64),
    /// Held: the revision, the value (`None`: bytes this crate did not write) and when the
    /// server stored it.
    Held { revision: u64, value: Option<Value>, written: SystemTime },
}

impl Current {
    /// The revision a create must name to take the key, if it is free.
    pub fn free_at(&self) -> Option<u64> {
        match self {
            Current::Absent => Some(0),
            Current::Deleted(r) => Some(*r),
            Current::Held { .. } => None,
        }
    }
}

/// One bucket: its name, TTL (the max age of every message) and the request bound.
#[derive(Clone, Debug)]
pub(crate) struct Bucket {
    pub js: Context,
    pub kv: Store,
    pub name: String,
    pub ttl: Duration,
    pub timeout: Duration,
}

impl Bucket {
    fn subject(&self, key: &str) -> String {
        format!("$KV.{}.{key}", self.name)
    }

    /// Store `value` under `key` if its last revision is `expected`; the new revision.
    ///
    /// # Errors
    /// [`Refused::Conflict`] when the key's last revision is another; the driver's errors.
    pub async fn write(&self, key: &str, value: Bytes, expected: u64, id: &str) -> Result<u64, Refused> {
        let mut h = HeaderMap::new();
        h.insert(NATS_EXPECTED_LAST_SUBJECT_SEQUENCE, expected.to_string());
        h.insert(NATS_MESSAGE_ID, id);
        self.publish(key, h, value).await
    }

    /// Put a delete marker on `key` if its last revision is `expected` (a compare-and-delete:
    /// watchers hear it at once).
    ///
    /// # Errors
    /// As [`write`](Self::write).
    pub async fn delete(&self, key: &str, expected: u64, id: &str) -> Result<u64, Refused> {
        let mut h = HeaderMap::new();
        h.insert(NATS_EXPECTED_LAST_SUBJECT_SEQUENCE, expected.to_string());
        h.insert(NATS_MESSAGE_ID, id);
        h.insert("KV-Operation", "DEL");
        self.publish(key, h, Bytes::new()).await
    }

    /// Remove `key`'s messages up to the delete marker stored as `marker`, the marker
    /// included: in a bucket without a max age the marker would otherwise stay for good, one
    /// per name ever deleted. A write stored after the marker has a later sequence and stays.
    ///
    /// # Errors
    /// The server's refusal, or a timeout.
    pub async fn purge_through(&self, key: &str, marker: u64) -> Result<()> {
        let purge = self.kv.stream.purge().filter(self.subject(key)).sequence(marker + 1);
        bounded(self.timeout, async {
            purge.await.map(drop).map_err(|e| LockError::temporary(error::NAME, e))
        })
        .await
    }

    async fn publish(&self, key: &str, headers: HeaderMap, value: Bytes) -> Result<u64, Refused> {
        let send = async {
            let ack = self.js.publish_with_headers(self.subject(key), headers, value).await;
            let ack = ack.map_err(error::publish)?.await.map_err(error::publish)?;
            Ok::<u64, Refused>(ack.sequence)
        };
        match tokio::time::timeout(self.timeout, send).await {
            Ok(r) => r,
            Err(_) => Err(Refused::Failed(error::temporary("nats publish timed out"))),
        }
    }

    /// What `key` holds now (a direct get from the stream: no consumer).
    ///
    /// # Errors
    /// The driver's, temporary for a timeout or a server not answering.
    pub async fn current(&self, key: &str) -> Result<Current> {
        let read = async {
            self.kv.entry(key).await.map_err(|e| {
                let temporary = matches!(e.kind(), EntryErrorKind::TimedOut | EntryErrorKind::Other);
                error::driver(e, temporary)
            })
        };
        let entry = bounded(self.timeout, read).await?;
        Ok(match entry {
            None => Current::Absent,
            Some(e) if matches!(e.operation, Operation::Delete | Operation::Purge) => {
                Current::Deleted(e.revision)
            }
            Some(e) => {
                let nanos = e.created.unix_timestamp_nanos();
                let written = u64::try_from(nanos)
                    .map_or(SystemTime::UNIX_EPOCH, |n| SystemTime::UNIX_EPOCH + Duration::from_nanos(n));
                Current::Held { revision: e.revision, value: Value::parse(&e.value), written }
            }
        })
    }

    /// How long a hold written at `written` has left by this machine's clock (at least a few
    /// milliseconds: a waiter then tries again, and the server expires it by its own clock).
    pub fn remaining(&self, written: SystemTime) -> Duration {
        let age = SystemTime::now().duration_since(written).unwrap_or_default();
        self.ttl.saturating_sub(age).max(Duration::from_millis(5))
    }
}

/// A fresh random nonce for one attempt.
pub(crate) fn nonce() -> u64 {
    let (hi, lo) = uuid::Uuid::new_v4().as_u64_pair();
    hi ^ lo
}

/// Whether `e` is worth another try of a clean-up.
pub(crate) fn retry(e: &LockError) -> bool {
    e.is_temporary()
}
