//! What records leave in their bucket: a deleted record leaves nothing (no delete marker), so
//! latches with names used once do not grow the bucket, which has no max age to clear them.

use lock_core::{CountDownLatch, Locker};
use lock_nats::async_nats::{self, jetstream};
use lock_nats::encode_key;
use lock_nats_testing::NatsFactory;
use lock_testkit::{Factory, key};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_record_leaves_no_marker() {
    let Some(f) = NatsFactory::on_shared() else { return };
    let locker: Locker = f.client().await.locker();
    let js = jetstream::new(async_nats::connect(f.endpoint()).await.expect("raw client"));
    let mut keys = Vec::new();
    for i in 0..5 {
        let latch = CountDownLatch::new(&locker, key(&format!("once-{i}"))).expect("latch");
        latch.set_count(2).await.expect("set");
        latch.count_down().await.expect("down");
        latch.delete().await.expect("delete");
        keys.push(latch.key().to_owned());
    }
    let records = js.get_key_value("conformance_records").await.expect("the records bucket");
    for k in keys {
        let entry = records.entry(encode_key(&k)).await.expect("entry");
        assert!(entry.is_none(), "{k}: the bucket still holds {entry:?}");
    }
    // A record created again after its deletion is an ordinary record.
    let again = CountDownLatch::new(&locker, key("again")).expect("latch");
    again.set_count(1).await.expect("set");
    again.delete().await.expect("delete");
    again.set_count(3).await.expect("set after delete");
    assert_eq!(again.count().await.expect("count"), 3);
    again.delete().await.expect("delete");
}
