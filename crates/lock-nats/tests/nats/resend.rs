//! What makes a write sent twice harmless (a driver's resend after a timeout or a reconnect),
//! checked on a bucket this crate created, with the headers its writes carry: the bucket's
//! duplicate window is its TTL (at most the server's 2 min), a copy within it is dropped and
//! answered with the first copy's revision, and a copy of a create that lands after the key
//! moved on is refused for the revision it names.

use std::time::Duration;

use lock_nats::async_nats::HeaderMap;
use lock_nats::async_nats::header::{NATS_EXPECTED_LAST_SUBJECT_SEQUENCE, NATS_MESSAGE_ID};
use lock_nats::async_nats::{self, jetstream};
use lock_nats_testing::NatsFactory;
use lock_testkit::key;

fn headers(expected: u64, id: &str) -> HeaderMap {
    let mut h = HeaderMap::new();
    h.insert(NATS_EXPECTED_LAST_SUBJECT_SEQUENCE, expected.to_string());
    h.insert(NATS_MESSAGE_ID, id);
    h
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_sent_twice_is_stored_once() {
    let Some(shared) = NatsFactory::on_shared() else { return };
    let ttl = Duration::from_millis(1500);
    let f = NatsFactory::new(shared.endpoint().to_owned(), "resend", ttl);
    // Creates the bucket as the library does.
    let _lock = f.connect(f.endpoint()).await;
    let js = jetstream::new(async_nats::connect(f.endpoint()).await.expect("raw client"));
    let mut stream = js.get_stream("KV_resend").await.expect("the bucket's stream");
    let window = stream.info().await.expect("stream info").config.duplicate_window;
    assert_eq!(window, ttl, "the duplicate window is the bucket's TTL");

    let subject = format!("$KV.resend.{}", key("twice"));
    let publish = |h: HeaderMap, body: &'static str| {
        let (js, subject) = (js.clone(), subject.clone());
        async move { js.publish_with_headers(subject, h, body.into()).await.expect("sent").await }
    };
    let first = publish(headers(0, "create-1"), "a").await.expect("the create is stored");
    let again = publish(headers(0, "create-1"), "a").await.expect("its copy is answered");
    assert!(again.duplicate && again.sequence == first.sequence, "{again:?} after {first:?}");
    // The key moves on (a renewal); a copy of the create outside the window would name a
    // revision that is no longer the key's last: refused, whatever its id.
    let renewed = publish(headers(first.sequence, "renew-1"), "b").await.expect("the renewal is stored");
    assert!(renewed.sequence > first.sequence);
    let late = publish(headers(0, "create-2"), "a").await;
    assert!(late.is_err(), "a create naming revision 0 on a held key must be refused: {late:?}");
}
