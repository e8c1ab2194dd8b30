//! The native read-write lock's layout under a lock's prefix: readers' keys under `read/`,
//! writers' under `write/`, one create revision ordering both, a reader waiting only for a
//! writer created before it. Shares this binary's server.
use std::time::Duration;

use lock_core::{LockBackend, RwLock};
use lock_etcd::etcd_client::GetOptions;
use lock_testkit::{eventually, key, within};
use tokio::sync::oneshot;

use crate::common;

use common::{TTL, locker, queued};

const ANSWER: Duration = Duration::from_secs(10);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_writer_queues_between_readers() {
    let e =
        common::etcd_lock([lock_etcd_testing::shared_etcd().endpoint()], "/rw", TTL, Duration::from_secs(2))
            .await;
    let rw = RwLock::new(&locker(&e), key("rw-layout")).expect("rwlock");
    assert!(rw.is_native(), "etcd has shared holds");
    let prefix = e.lock_prefix(rw.gate_key());
    let client = e.client();

    let first = rw.read().try_acquire().await.expect("try").expect("free");
    let also = rw.read().try_acquire().await.expect("try").expect("readers share");
    let (tx, granted) = oneshot::channel();
    let writer = rw.clone();
    tokio::spawn(async move {
        let _ = tx.send(writer.write().wait(ANSWER).acquire().await.expect("the writer"));
    });
    eventually(ANSWER, "the writer queued", || async { queued(&client, &prefix).await == 3 }).await;
    let mut kv = client.kv_client();
    let keys =
        kv.get(prefix.as_str(), Some(GetOptions::new().with_prefix().with_keys_only())).await.expect("list");
    let names: Vec<String> =
        keys.kvs().iter().map(|k| String::from_utf8_lossy(&k.key()[prefix.len()..]).into_owned()).collect();
    assert_eq!(names.iter().filter(|n| n.starts_with("read/")).count(), 2, "{names:?}");
    assert_eq!(names.iter().filter(|n| n.starts_with("write/")).count(), 1, "{names:?}");
    let info = e.inspect(rw.gate_key()).await.expect("inspect");
    assert_eq!((info.readers, info.waiters), (Some(2), Some(1)));

    assert!(rw.read().try_acquire().await.expect("try").is_none(), "a reader queues behind the writer");
    first.release().await.expect("release");
    also.release().await.expect("release");
    let w = within(ANSWER, "the writer after the readers", granted).await.expect("granted");
    assert!(rw.read().try_acquire().await.expect("try").is_none(), "the writer holds");
    w.release().await.expect("release");
    rw.read().try_acquire().await.expect("try").expect("free again").release().await.expect("release");
}
