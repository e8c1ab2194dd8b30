//! Connecting, and opening (or creating) the bucket with its TTL.

use std::time::Duration;

use async_nats::ConnectOptions;
use async_nats::jetstream::kv::Store;
use async_nats::jetstream::{self, stream, stream::DiscardPolicy, stream::StorageType};
use lock_core::backend::cluster::Connection;
use lock_core::{LockError, Result};

use crate::builder::{Config, DEFAULT_LEASE_TTL, Tls};
use crate::error::{self, bounded};
use crate::store::Bucket;

/// The client's connection and the bucket.
pub(crate) async fn open(cfg: &Config) -> Result<Bucket> {
    let client = connect(&cfg.conn).await?;
    let mut js = jetstream::new(client);
    js.set_timeout(cfg.conn.request_timeout);
    let ttl = Some(cfg.lease_ttl.unwrap_or(DEFAULT_LEASE_TTL));
    let kv = open_or_create(&js, &cfg.bucket, ttl, cfg.conn.request_timeout).await?;
    let ttl = kv.stream.cached_info().config.max_age;
    if ttl < crate::builder::MIN_LEASE_TTL {
        return Err(LockError::InvalidConfig {
            reason: format!(
                "nats bucket {} has no usable TTL (max age {ttl:?}): its keys never expire",
                cfg.bucket
            ),
        });
    }
    if let Some(asked) = cfg.lease_ttl
        && asked != ttl
    {
        return Err(LockError::InvalidConfig {
            reason: format!(
                "nats bucket {} has a TTL of {ttl:?}, not the lease_ttl {asked:?} asked for: every client of \
                 a bucket shares its TTL (name another bucket, or leave lease_ttl out)",
                cfg.bucket
            ),
        });
    }
    Ok(Bucket { js, kv, name: cfg.bucket.clone(), ttl, timeout: cfg.conn.request_timeout })
}

/// The bucket `name`, created with `ttl` (`None`: its keys never expire) if it is not there.
pub(crate) async fn open_or_create(
    js: &jetstream::Context,
    name: &str,
    ttl: Option<Duration>,
    timeout: Duration,
) -> Result<Store> {
    let limit = timeout * 2;
    match bounded(limit, async { Ok(js.get_key_value(name).await) }).await? {
        Ok(kv) => Ok(kv),
        // Not there (or not readable): create it; a bucket created meanwhile by another
        // client with the same settings is the same stream, which JetStream accepts again.
        Err(_) => {
            bounded(limit, async {
                if let Err(e) = js.create_stream(stream_config(name, ttl)).await {
                    // Two clients creating it at once: the server may refuse the second
                    // ("subjects overlap", its check racing the first's create). Then it is
                    // there to open.
                    if let Ok(kv) = js.get_key_value(name).await {
                        return Ok(kv);
                    }
                    return Err(if error::permission(&e) {
                        LockError::permission_denied(error::NAME, e)
                    } else {
                        error::driver(e, true)
                    });
                }
                js.get_key_value(name).await.map_err(|e| error::driver(e, true))
            })
            .await
        }
    }
}

/// The stream of a key-value bucket as `nats kv add --history 1 --ttl <ttl>` makes it (no
/// `--ttl` for `None`).
///
/// Not `create_key_value`: async-nats 0.51 asks the account's limits first and cannot read
/// a 2.9 server's answer (it lacks the `reserved_*` fields of 2.10).
fn stream_config(bucket: &str, ttl: Option<Duration>) -> stream::Config {
    let what = if ttl.is_some() { "locks" } else { "records" };
    stream::Config {
        name: format!("KV_{bucket}"),
        description: Some(format!("dlock {what} (lock-nats)")),
        subjects: vec![format!("$KV.{bucket}.>")],
        // One message per key: a renewal replaces the grant, and the max age counts from the
        // last write.
        max_messages_per_subject: 1,
        max_age: ttl.unwrap_or_default(),
        // On disk: the revisions (the fences) survive a server restart.
        storage: StorageType::File,
        num_replicas: 1,
        allow_rollup: true,
        deny_delete: true,
        allow_direct: true,
        discard: DiscardPolicy::New,
        ..stream::Config::default()
    }
}

async fn connect(conn: &Connection<Tls>) -> Result<async_nats::Client> {
    let mut opts = ConnectOptions::new()
        .connection_timeout(conn.connect_timeout)
        .request_timeout(Some(conn.request_timeout))
        // Reconnect soon after a server comes back: the default backoff grows to seconds,
        // longer than a short lease.
        .reconnect_delay_callback(|attempts| {
            Duration::from_millis(20u64.saturating_mul(1 << attempts.min(5))).min(Duration::from_millis(500))
        })
        // A dead connection (a server gone without a FIN) is found within a few seconds.
        .ping_interval(Duration::from_secs(2))
        .name("dlock");
    if let Some((user, pw)) = &conn.auth {
        opts = opts.user_and_password(user.clone(), pw.clone());
    }
    let scheme = if conn.tls.is_some() { "tls" } else { "nats" };
    #[cfg(feature = "tls")]
    if let Some(tls) = &conn.tls {
        lock_core::backend::ensure_tls_provider();
        opts = opts.require_tls(true);
        if let Some(ca) = &tls.ca {
            opts = opts.add_root_certificates(ca.clone());
        }
    }
    let addrs: Vec<String> = conn.hosts.iter().map(|s| format!("{scheme}://{s}")).collect();
    let limit = conn.connect_timeout + conn.request_timeout;
    bounded(limit, async { opts.connect(addrs).await.map_err(error::connect) }).await
}
