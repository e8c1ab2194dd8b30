//! The raw NATS floor: the bare key-value steps of a lock with the JetStream client alone.

use lock_nats::async_nats::{self, HeaderMap, header};
use lock_testkit::side::{DriverError, RawFloor, time};

/// On the URL's bucket (the lock library's own client has made it by then): a direct read of
/// one key as the round trip, and for the pair a write that expects the key absent (what an
/// uncontended grant is) and a delete marker that expects the write's revision (a release).
/// No message ids (the library's dedup of a resent write), no keeper, no watch.
pub(crate) async fn nats(url: &str, n: usize) -> Result<RawFloor, DriverError> {
    // The library's own parser: the same hosts, bucket and (percent-decoded) credentials.
    let u = lock_nats::parse_url(url)?;
    let bucket = u.path.unwrap_or_else(|| lock_nats::DEFAULT_BUCKET.to_owned());
    let mut opts = async_nats::ConnectOptions::new();
    if let Some((user, pw)) = u.auth {
        opts = opts.user_and_password(user, pw);
    }
    let addrs: Vec<String> = u.hosts.iter().map(|h| format!("nats://{h}")).collect();
    let client = opts.connect(addrs).await?;
    let js = async_nats::jetstream::new(client);
    let kv = js.get_key_value(bucket.as_str()).await?;
    let rtt = time(n, |_| {
        let kv = &kv;
        async move { kv.entry("dlock-floor").await.map(drop) }
    })
    .await?;
    let write = |subject: String, expected: u64, delete: bool| {
        let js = &js;
        async move {
            let mut h = HeaderMap::new();
            h.insert(header::NATS_EXPECTED_LAST_SUBJECT_SEQUENCE, expected.to_string());
            if delete {
                h.insert("KV-Operation", "DEL");
            }
            let ack = js.publish_with_headers(subject, h, Default::default()).await?.await?;
            Ok::<u64, DriverError>(ack.sequence)
        }
    };
    let pair = time(n, |i| {
        let (write, subject) = (&write, format!("$KV.{bucket}.dlock-floor-{i}"));
        async move {
            let revision = write(subject.clone(), 0, false).await?;
            write(subject, revision, true).await.map(drop)
        }
    })
    .await?;
    Ok(RawFloor::new("direct get", "write expecting no key + delete expecting its revision", rtt, pair))
}
