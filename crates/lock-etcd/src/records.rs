//! Records: the number in `<prefix>/%records/<encoded key>/v` and one key per mark token under
//! `.../m/`, none under a lease. Each op is one transaction that also reads the record back;
//! each is idempotent when sent again (the put of a number or a mark writes the same).

use etcd_client::{Compare, CompareOp, GetOptions, PutOptions, Txn, TxnOp, TxnOpResponse};
use lock_core::backend::{Record, RecordOp, unsupported};
use lock_core::{LockError, Result};

use crate::error::{NAME, bounded, lock_error};
use crate::recipe::encode_key;
use crate::session::Inner;

impl Inner {
    pub(crate) async fn record(&self, key: &str, op: RecordOp<'_>) -> Result<Record> {
        let dir = format!("{}/%records/{}/", self.cfg.prefix, encode_key(key));
        let (number, marks) = (format!("{dir}v"), format!("{dir}m/"));
        let read = || {
            [
                TxnOp::get(number.as_str(), None),
                TxnOp::get(marks.as_str(), Some(GetOptions::new().with_prefix().with_count_only())),
            ]
        };
        let absent = Compare::create_revision(number.as_str(), CompareOp::Equal, 0);
        let put = |k: &str, v: String| TxnOp::put(k, v, None::<PutOptions>);
        let txn = match op {
            RecordOp::Get => Txn::new().and_then(read()),
            RecordOp::Init(v) => Txn::new()
                .when([absent])
                .and_then([[put(&number, v.to_string())].as_slice(), &read()].concat())
                .or_else(read()),
            RecordOp::Set(v) => {
                Txn::new().and_then([[put(&number, v.to_string())].as_slice(), &read()].concat())
            }
            // Without a number nothing is marked: a late count-down of a deleted latch leaves
            // no key.
            RecordOp::Mark(token) => Txn::new()
                .when([Compare::create_revision(number.as_str(), CompareOp::Greater, 0)])
                .and_then([[put(&format!("{marks}{token}"), String::new())].as_slice(), &read()].concat())
                .or_else(read()),
            RecordOp::Delete => Txn::new().and_then(
                [
                    [
                        TxnOp::delete(number.as_str(), None),
                        TxnOp::delete(marks.as_str(), Some(etcd_client::DeleteOptions::new().with_prefix())),
                    ]
                    .as_slice(),
                    &read(),
                ]
                .concat(),
            ),
            _ => return Err(unsupported(NAME, "this record operation")),
        };
        let mut kv = self.client.kv_client();
        let resp = bounded(self.cfg.conn.request_timeout, kv.txn(txn)).await.map_err(lock_error)?;
        let mut gets: Vec<_> = resp
            .op_responses()
            .into_iter()
            .filter_map(|r| match r {
                TxnOpResponse::Get(g) => Some(g),
                _ => None,
            })
            .collect();
        let (Some(count), Some(value)) = (gets.pop(), gets.pop()) else {
            return Err(LockError::temporary(NAME, "a record's transaction answered without its reads"));
        };
        let value = match value.kvs().first() {
            None => None,
            Some(kv) => Some(
                std::str::from_utf8(kv.value())
                    .ok()
                    .and_then(|v| v.parse().ok())
                    .ok_or_else(|| LockError::temporary(NAME, "a record's number that is not one"))?,
            ),
        };
        Ok(Record { value, marks: u64::try_from(count.count()).unwrap_or(0) })
    }
}
