//! The raw Redis floors: one node, a cluster, through Sentinel, and Redlock's masters.

use std::time::Duration;

use lock_testkit::side::{DriverError, RawFloor, strip_query, time};

type Result<T, E = DriverError> = std::result::Result<T, E>;

pub(crate) async fn redis(url: &str, n: usize) -> Result<RawFloor, DriverError> {
    use lock_redis::redis;
    let client = redis::Client::open(redis_info(strip_query(url))?)?;
    let con = client.get_multiplexed_async_connection().await?;
    let (rtt, pair) = redis_pair(&con, n).await?;
    Ok(RawFloor::new("PING", "SET NX PX + EVALSHA unlock", rtt, pair))
}

/// A single-node URL with the same socket settings as the backend's (Nagle off).
fn redis_info(url: &str) -> Result<lock_redis::redis::ConnectionInfo> {
    use lock_redis::redis::IntoConnectionInfo;
    let info = url.into_connection_info()?;
    let tcp = info.tcp_settings().clone().set_nodelay(true);
    Ok(info.set_tcp_settings(tcp))
}

/// `PING`, and `SET NX PX` + the compare-and-delete script, `n` times each on `con`. The keys
/// are hash-tagged, so on a cluster each pair goes to one master (a different one per key).
async fn redis_pair<C>(con: &C, n: usize) -> Result<(Vec<Duration>, Vec<Duration>)>
where
    C: lock_redis::redis::aio::ConnectionLike + Clone + Send + Sync,
{
    use lock_redis::redis;
    let unlock = redis::Script::new(
        "if redis.call('get',KEYS[1]) == ARGV[1] then return redis.call('del',KEYS[1]) else return 0 end",
    );
    let rtt = time(n, |_| {
        let mut c = con.clone();
        async move { redis::cmd("PING").query_async::<String>(&mut c).await.map(drop) }
    })
    .await?;
    let pair = time(n, |i| {
        let mut c = con.clone();
        let unlock = &unlock;
        async move { redis_set_unlock(&mut c, unlock, &format!("{{dlock-floor-{i}}}")).await }
    })
    .await?;
    Ok((rtt, pair))
}

async fn redis_set_unlock<C>(
    c: &mut C,
    unlock: &lock_redis::redis::Script,
    key: &str,
) -> Result<(), lock_redis::redis::RedisError>
where
    C: lock_redis::redis::aio::ConnectionLike + Send + Sync,
{
    use lock_redis::redis;
    let _: Option<String> =
        redis::cmd("SET").arg(key).arg("tok").arg("NX").arg("PX").arg(10_000).query_async(c).await?;
    let _: i64 = unlock.key(key).arg("tok").invoke_async(c).await?;
    Ok(())
}

/// `scheme://[userinfo@]h1,h2,.../path?query` as (`userinfo@` or empty, hosts, path without
/// its leading `/`); the query is dropped (the raw clients take none of the backend's options).
fn split_hosts(url: &str) -> (String, Vec<&str>, &str) {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let (userinfo, after) = lock_core::backend::redact::split_userinfo(rest);
    let after = after.split_once('?').map_or(after, |(a, _)| a);
    let (hosts, path) = after.split_once('/').unwrap_or((after, ""));
    let userinfo = userinfo.map_or(String::new(), |u| format!("{u}@"));
    (userinfo, hosts.split(',').filter(|h| !h.is_empty()).collect(), path)
}

/// The cluster's floor: the same commands through the driver's cluster connection, which
/// routes each key to its master (the round trip goes to any node).
pub(crate) async fn redis_cluster(url: &str, n: usize) -> Result<RawFloor, DriverError> {
    use lock_redis::redis;
    let (userinfo, hosts, _) = split_hosts(url);
    let nodes =
        hosts.iter().map(|h| redis_info(&format!("redis://{userinfo}{h}/"))).collect::<Result<Vec<_>>>()?;
    let client = redis::cluster::ClusterClientBuilder::new(nodes).build()?;
    let con = client.get_async_connection().await?;
    let (rtt, pair) = redis_pair(&con, n).await?;
    Ok(RawFloor::new("PING (any node)", "SET NX PX + EVALSHA unlock (key's master)", rtt, pair))
}

/// Through Sentinel: the primary the sentinels name now (asked once, as the backend does at
/// start), then the single node's floor on it.
pub(crate) async fn redis_sentinel(url: &str, n: usize) -> Result<RawFloor, DriverError> {
    use lock_redis::redis;
    let (userinfo, hosts, path) = split_hosts(url);
    let (master, db) = path.split_once('/').unwrap_or((path, "0"));
    let mut last = None;
    for h in hosts {
        // Sentinels are asked without credentials (the URL's are the primary's).
        let h = if h.contains(':') { h.to_owned() } else { format!("{h}:26379") };
        let asked = async {
            let client = redis::Client::open(redis_info(&format!("redis://{h}/"))?)?;
            let mut c = client.get_multiplexed_async_connection().await?;
            redis::cmd("SENTINEL")
                .arg("get-master-addr-by-name")
                .arg(master)
                .query_async::<Option<(String, String)>>(&mut c)
                .await
                .map_err(DriverError::from)
        };
        match asked.await {
            Ok(Some((ip, port))) => {
                let f = redis(&format!("redis://{userinfo}{ip}:{port}/{db}"), n).await?;
                return Ok(RawFloor {
                    rtt_label: "PING (primary)",
                    pair_label: "SET NX PX + EVALSHA unlock (primary)",
                    ..f
                });
            }
            Ok(None) => last = Some(format!("no sentinel names a master {master:?}").into()),
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| "no sentinel in the URL".into()))
}

/// One step of the raw Redlock floor, sent to every master.
#[derive(Clone)]
enum Phase {
    Ping,
    Set(String),
    Unlock(String),
}

/// Raw Redlock: `SET NX PX` on every master at once, then the unlock script on every master
/// at once (one task per master, as a quorum client sends them); the round trip is a `PING`
/// to every master at once. No clock-drift arithmetic, no retries, no fencing write-back.
pub(crate) async fn redlock(url: &str, n: usize) -> Result<RawFloor, DriverError> {
    use lock_redis::redis;
    let (userinfo, hosts, path) = split_hosts(url);
    let mut cons = Vec::new();
    for h in hosts {
        let client = redis::Client::open(redis_info(&format!("redis://{userinfo}{h}/{path}"))?)?;
        cons.push(client.get_multiplexed_async_connection().await?);
    }
    let unlock = std::sync::Arc::new(redis::Script::new(
        "if redis.call('get',KEYS[1]) == ARGV[1] then return redis.call('del',KEYS[1]) else return 0 end",
    ));
    // One phase on every master at once: the next starts when the slowest answered.
    let everywhere = |phase: Phase| {
        let mut tasks = tokio::task::JoinSet::new();
        for c in &cons {
            let (mut c, phase, unlock) = (c.clone(), phase.clone(), unlock.clone());
            tasks.spawn(async move {
                match phase {
                    Phase::Ping => redis::cmd("PING").query_async::<String>(&mut c).await.map(drop),
                    Phase::Set(k) => redis::cmd("SET")
                        .arg(k)
                        .arg("tok")
                        .arg("NX")
                        .arg("PX")
                        .arg(10_000)
                        .query_async::<Option<String>>(&mut c)
                        .await
                        .map(drop),
                    Phase::Unlock(k) => unlock.key(k).arg("tok").invoke_async::<i64>(&mut c).await.map(drop),
                }
            });
        }
        async move {
            while let Some(r) = tasks.join_next().await {
                // A panicked task is a bug in this function, not the store's answer.
                r.map_err(|e| redis::RedisError::from(std::io::Error::other(e)))??;
            }
            Ok::<_, redis::RedisError>(())
        }
    };
    let rtt = time(n, |_| everywhere(Phase::Ping)).await?;
    let everywhere = &everywhere;
    let pair = time(n, |i| async move {
        // The tasks start when spawned: the unlocks only once every SET answered.
        let k = format!("dlock-floor-{i}");
        everywhere(Phase::Set(k.clone())).await?;
        everywhere(Phase::Unlock(k)).await
    })
    .await?;
    Ok(RawFloor::new(
        "PING to every master at once",
        "SET NX PX, then EVALSHA unlock, on every master at once",
        rtt,
        pair,
    ))
}
