//! Records: a persistent node `<root>/%records/<encoded key>` whose data is the number, with
//! one persistent child `m-<token>` per mark (`%records` is no encoded key: `%` is always
//! followed by two hex digits there). Each op is idempotent when sent again: a create that
//! finds its node answers as if it made it, and the number is the same.

use std::sync::Arc;

use lock_core::backend::{Record, RecordOp, unsupported};
use lock_core::{LockError, Result};
use zookeeper_client as zk;

use crate::error::{NAME, lock_error};
use crate::keys::encode_key;
use crate::session::Inner;

/// How often a delete retries when a mark arrived between its listing and the node's delete.
const DELETE_TRIES: usize = 5;

impl Inner {
    pub(crate) async fn record(self: &Arc<Self>, key: &str, op: RecordOp<'_>) -> Result<Record> {
        let session = self.session().await?;
        let client = &session.client;
        let parent = format!("{}/%records", self.cfg.root);
        let node = format!("{parent}/{}", encode_key(key));
        let persistent = zk::CreateMode::Persistent.with_acls(self.acls());
        let create = |path: String, data: Vec<u8>| {
            let persistent = &persistent;
            async move {
                match client.create(&path, &data, persistent).await {
                    Ok(_) | Err(zk::Error::NodeExists) => Ok(true),
                    Err(zk::Error::NoNode) => Ok(false),
                    Err(e) => Err(lock_error(e)),
                }
            }
        };
        match op {
            RecordOp::Get => {}
            RecordOp::Init(v) => {
                if !create(node.clone(), v.to_string().into_bytes()).await? {
                    client.mkdir(&parent, &persistent).await.map_err(lock_error)?;
                    create(node.clone(), v.to_string().into_bytes()).await?;
                }
            }
            RecordOp::Set(v) => match client.set_data(&node, v.to_string().as_bytes(), None).await {
                Ok(_) => {}
                Err(zk::Error::NoNode) => {
                    client.mkdir(&parent, &persistent).await.map_err(lock_error)?;
                    if let Err(zk::Error::NodeExists) =
                        client.create(&node, v.to_string().as_bytes(), &persistent).await.map(drop)
                    {
                        client.set_data(&node, v.to_string().as_bytes(), None).await.map_err(lock_error)?;
                    }
                }
                Err(e) => return Err(lock_error(e)),
            },
            // Without the number's node there is nothing to mark (NoNode): nothing is added.
            RecordOp::Mark(token) => {
                create(format!("{node}/m-{token}"), Vec::new()).await?;
            }
            RecordOp::Delete => delete(client, &node).await?,
            _ => return Err(unsupported(NAME, "this record operation")),
        }
        match client.get_data(&node).await {
            Ok((data, stat)) => {
                let value = std::str::from_utf8(&data)
                    .ok()
                    .and_then(|v| v.parse().ok())
                    .ok_or_else(|| LockError::temporary(NAME, "a record's number that is not one"))?;
                Ok(Record { value: Some(value), marks: u64::try_from(stat.num_children).unwrap_or(0) })
            }
            Err(zk::Error::NoNode) => Ok(Record::default()),
            Err(e) => Err(lock_error(e)),
        }
    }
}

/// The record's node and its marks.
async fn delete(client: &zk::Client, node: &str) -> Result<()> {
    for _ in 0..DELETE_TRIES {
        let children = match client.list_children(node).await {
            Ok(c) => c,
            Err(zk::Error::NoNode) => return Ok(()),
            Err(e) => return Err(lock_error(e)),
        };
        for child in children {
            match client.delete(&format!("{node}/{child}"), None).await {
                Ok(()) | Err(zk::Error::NoNode) => {}
                Err(e) => return Err(lock_error(e)),
            }
        }
        match client.delete(node, None).await {
            Ok(()) | Err(zk::Error::NoNode) => return Ok(()),
            Err(zk::Error::NotEmpty) => continue,
            Err(e) => return Err(lock_error(e)),
        }
    }
    Err(LockError::temporary(NAME, "a record kept gaining marks while it was deleted"))
}
