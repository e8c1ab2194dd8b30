//! Records (`scripts/record.lua`): the number in `<lock>:v`, the marks in the set `<lock>:m`,
//! both named from the record's key like a lock's (one hash tag: one cluster slot).

use lock_core::Result;
use lock_core::backend::{Record, RecordOp, unsupported};

use super::RedisLock;
use crate::error::{NAME, bad_reply, classify};
use crate::scripts;

impl RedisLock {
    /// One op on the record under `key`, in one script.
    pub(super) async fn record_op(&self, key: &str, op: RecordOp<'_>) -> Result<Record> {
        let names = self.inner.layout.names(key);
        let (name, arg) = match op {
            RecordOp::Get => ("get", String::new()),
            RecordOp::Init(v) => ("init", v.to_string()),
            RecordOp::Set(v) => ("set", v.to_string()),
            RecordOp::Mark(token) => ("mark", token.to_owned()),
            RecordOp::Delete => ("delete", String::new()),
            _ => return Err(unsupported(NAME, "this record operation")),
        };
        let mut conn = self.inner.conn.clone();
        let (value, marks): (String, u64) = scripts::RECORD
            .get(conn.sharded())
            .key(format!("{}:v", names.lock()))
            .key(format!("{}:m", names.lock()))
            .arg(name)
            .arg(arg)
            .arg(names.channel())
            .invoke_async(&mut conn)
            .await
            .map_err(classify)?;
        let value = match value.as_str() {
            "" => None,
            v => Some(v.parse().map_err(|_| bad_reply("a record's number that is not one"))?),
        };
        Ok(Record { value, marks })
    }
}
