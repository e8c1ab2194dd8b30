//! Records: one key per record in the bucket `<bucket>_records`, a stream with no max age (a
//! record outlives every lease until it is deleted, and a deleted record's marker is purged),
//! its value `LocalRecord`'s text form (the rules and the form every store shares). Each op
//! reads the record and, if the op changes it, writes it back naming the revision read
//! (compare-and-set), again from the read on a conflict. Every op is idempotent, so a copy of a
//! write sent twice, or an op applied again after a conflict, leaves what one would.

use async_nats::jetstream::kv::Operation;
use lock_core::backend::{LocalRecord, Record, RecordOp, unsupported};
use lock_core::{LockError, Result};

use crate::client::Inner;
use crate::error::{self, Refused, bounded};
use crate::keys::encode_key;
use crate::store::{Bucket, nonce};

/// Tries of one op against writers racing it on the same record.
const CAS_TRIES: usize = 16;

impl Inner {
    /// Apply `op` to the record of `key`.
    pub(crate) async fn record(&self, key: &str, op: RecordOp<'_>) -> Result<Record> {
        if let RecordOp::Mark(token) = op
            && !LocalRecord::valid_mark(token)
        {
            return Err(unsupported(error::NAME, "a record mark that is not one line"));
        }
        let bucket = self.records_bucket().await?;
        let name = encode_key(key);
        for _ in 0..CAS_TRIES {
            let (mut record, revision) = read(bucket, &name).await?;
            let before = record.clone();
            let (answer, keep) = record.apply(op);
            if record == before {
                return Ok(answer);
            }
            let id = format!("{:016x}", nonce());
            let written = match keep {
                true => bucket.write(&name, record.to_text().into(), revision, &id).await,
                false => bucket.delete(&name, revision, &id).await,
            };
            match written {
                Ok(marker) if !keep => {
                    // The record is gone: so is its marker, or each name ever deleted would
                    // leave one. A failed purge leaves the marker, which reads as no record.
                    if let Err(e) = bucket.purge_through(&name, marker).await {
                        tracing::debug!(error = %e, "purging a deleted record's marker failed");
                    }
                    return Ok(answer);
                }
                Ok(_) => return Ok(answer),
                Err(Refused::Conflict) => continue,
                Err(Refused::Failed(e)) => return Err(e),
            }
        }
        Err(error::temporary("a record kept changing under its writes"))
    }

    /// The records bucket, opened (or created) on the first op.
    async fn records_bucket(&self) -> Result<&Bucket> {
        self.records
            .get_or_try_init(|| async {
                let b = &self.bucket;
                let name = format!("{}_records", b.name);
                let kv = crate::connect::open_or_create(&b.js, &name, None, b.timeout).await?;
                Ok(Bucket { js: b.js.clone(), kv, name, ttl: std::time::Duration::ZERO, timeout: b.timeout })
            })
            .await
    }
}

/// The record under `name` and the revision a write must name (0: never written).
async fn read(bucket: &Bucket, name: &str) -> Result<(LocalRecord, u64)> {
    let entry =
        bounded(bucket.timeout, async { bucket.kv.entry(name).await.map_err(|e| error::driver(e, true)) })
            .await?;
    Ok(match entry {
        None => (LocalRecord::default(), 0),
        Some(e) if matches!(e.operation, Operation::Delete | Operation::Purge) => {
            (LocalRecord::default(), e.revision)
        }
        Some(e) => {
            let text = std::str::from_utf8(&e.value).ok();
            let record = text.and_then(LocalRecord::from_text).ok_or_else(|| {
                LockError::permanent(error::NAME, format!("record {name} holds something else"))
            })?;
            (record, e.revision)
        }
    })
}
