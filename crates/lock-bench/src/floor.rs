//! Raw floors measured in the same run: the backend's bare round trip, and the bare commands of
//! one acquire + release, sent by the client crate without the lock library.
//!
//! A floor is by definition the store's own client, so [`PROBES`] is the one place that pairs
//! URL schemes with drivers; which statements stand for one acquire + release follows from the
//! target's capabilities.

use std::future::Future;
use std::pin::Pin;

use dlock::backend::Capability;
use hdrhistogram::Histogram;
use tokio::time::Instant;

use crate::error::{BenchError, Result};
use crate::micros::{hist, us};
use crate::targets::Target;

/// The floor of one target.
#[derive(Debug)]
pub struct Floor {
    /// What the round trip is (`PING`, `SELECT 1`, `exists`).
    pub rtt_label: &'static str,
    /// What the acquire+release pair is.
    pub pair_label: &'static str,
    /// 99th percentile round trip (µs); `None` without a floor for the scheme.
    pub rtt_p99: Option<u64>,
    /// 99th percentile acquire+release pair (µs).
    pub pair_p99: Option<u64>,
    /// Median round trip (µs).
    pub rtt_p50: Option<u64>,
    /// Median acquire+release pair (µs).
    pub pair_p50: Option<u64>,
}

type FloorFuture<'a> = Pin<Box<dyn Future<Output = Result<Floor>> + Send + 'a>>;

/// A raw client that measures the floor of the URLs with these schemes.
struct Probe {
    schemes: &'static [&'static str],
    measure: for<'a> fn(&'a str, Capability, usize) -> FloorFuture<'a>,
}

const PROBES: &[Probe] = &[
    Probe { schemes: &["memory"], measure: |_, _, n| Box::pin(memory(n)) },
    #[cfg(feature = "redis")]
    Probe { schemes: &["redis", "rediss"], measure: |url, _, n| Box::pin(redis(url, n)) },
    #[cfg(feature = "redis")]
    Probe { schemes: &["redis+cluster"], measure: |url, _, n| Box::pin(redis_cluster(url, n)) },
    #[cfg(feature = "redis")]
    Probe { schemes: &["redis+sentinel"], measure: |url, _, n| Box::pin(redis_sentinel(url, n)) },
    #[cfg(feature = "redis")]
    Probe { schemes: &["redlock"], measure: |url, _, n| Box::pin(redlock(url, n)) },
    #[cfg(feature = "mysql")]
    Probe { schemes: &["mysql", "mariadb"], measure: |url, caps, n| Box::pin(mysql(url, caps, n)) },
    #[cfg(feature = "zk")]
    Probe { schemes: &["zk", "zookeeper"], measure: |url, _, n| Box::pin(zk(url, n)) },
    #[cfg(feature = "etcd")]
    Probe { schemes: &["etcd"], measure: |url, _, n| Box::pin(etcd(url, n)) },
    #[cfg(feature = "postgres")]
    Probe { schemes: &["postgres", "postgresql"], measure: |url, _, n| Box::pin(postgres(url, n)) },
];

impl Floor {
    /// No raw client pairs with this scheme (`rediss+cluster://`, or a backend feature left
    /// out): the target still runs, its figures have no floor to be divided by.
    fn none() -> Self {
        Floor {
            rtt_label: "none (no raw client for this scheme)",
            pair_label: "none",
            rtt_p99: None,
            pair_p99: None,
            rtt_p50: None,
            pair_p50: None,
        }
    }
}

/// Measure the floor of `t` (whose backend declares `caps`) with `n` samples each. A scheme
/// without a [`Probe`] gets an empty floor (every ratio to it blank) and a note for the
/// report, so the target is still measured.
pub async fn measure(t: &Target, caps: Capability, n: usize) -> Result<(Floor, Option<String>)> {
    let scheme = t.scheme();
    let probe = PROBES.iter().find(|p| p.schemes.contains(&scheme.as_str()));
    match probe {
        Some(p) => Ok(((p.measure)(&t.url, caps, n).await?, None)),
        None => Ok((
            Floor::none(),
            Some(format!(
                "{}: {}; its ratios to the floor are blank",
                t.name,
                BenchError::NoFloor { scheme }
            )),
        )),
    }
}

async fn time<F, Fut, E>(what: &'static str, n: usize, mut f: F) -> Result<Histogram<u64>>
where
    F: FnMut(usize) -> Fut,
    Fut: Future<Output = Result<(), E>>,
    E: Into<crate::error::DriverError>,
{
    let mut h = hist()?;
    for i in 0..n {
        let t0 = Instant::now();
        f(i).await.map_err(BenchError::driver(what))?;
        h.saturating_record(us(t0.elapsed()));
    }
    Ok(h)
}

fn floor(
    rtt_label: &'static str,
    pair_label: &'static str,
    rtt: Histogram<u64>,
    pair: Histogram<u64>,
) -> Floor {
    let (r, p) = (rtt.value_at_quantile(0.5), pair.value_at_quantile(0.5));
    let (r99, p99) = (rtt.value_at_quantile(0.99), pair.value_at_quantile(0.99));
    Floor {
        rtt_label,
        pair_label,
        rtt_p99: Some(r99),
        pair_p99: Some(p99),
        rtt_p50: Some(r),
        pair_p50: Some(p),
    }
}

async fn memory(n: usize) -> Result<Floor> {
    let m = tokio::sync::Mutex::new(0u64);
    let bump = |_: usize| async {
        *m.lock().await += 1;
        Ok::<_, std::convert::Infallible>(())
    };
    let rtt = time("memory floor", n, bump).await?;
    let pair = time("memory floor", n, bump).await?;
    Ok(floor("tokio Mutex lock+unlock", "tokio Mutex lock+unlock", rtt, pair))
}

/// The URL without its query: the floor's raw client takes none of the backend's options.
#[cfg(any(feature = "redis", feature = "mysql", feature = "postgres"))]
fn strip_query(url: &str) -> &str {
    url.split_once('?').map_or(url, |(u, _)| u)
}

#[cfg(feature = "redis")]
async fn redis(url: &str, n: usize) -> Result<Floor> {
    use dlock::lock_redis::redis;
    const WHAT: &str = "redis floor";
    let client = redis::Client::open(redis_info(strip_query(url))?).map_err(BenchError::driver(WHAT))?;
    let con = client.get_multiplexed_async_connection().await.map_err(BenchError::driver(WHAT))?;
    let (rtt, pair) = redis_pair(WHAT, &con, n).await?;
    Ok(floor("PING", "SET NX PX + EVALSHA unlock", rtt, pair))
}

/// A single-node URL with the same socket settings as the backend's (Nagle off).
#[cfg(feature = "redis")]
fn redis_info(url: &str) -> Result<dlock::lock_redis::redis::ConnectionInfo> {
    use dlock::lock_redis::redis::IntoConnectionInfo;
    let info = url.into_connection_info().map_err(BenchError::driver("redis floor"))?;
    let tcp = info.tcp_settings().clone().set_nodelay(true);
    Ok(info.set_tcp_settings(tcp))
}

/// `PING`, and `SET NX PX` + the compare-and-delete script, `n` times each on `con`. The keys
/// are hash-tagged, so on a cluster each pair goes to one master (a different one per key).
#[cfg(feature = "redis")]
async fn redis_pair<C>(what: &'static str, con: &C, n: usize) -> Result<(Histogram<u64>, Histogram<u64>)>
where
    C: dlock::lock_redis::redis::aio::ConnectionLike + Clone + Send + Sync,
{
    use dlock::lock_redis::redis;
    let unlock = redis::Script::new(
        "if redis.call('get',KEYS[1]) == ARGV[1] then return redis.call('del',KEYS[1]) else return 0 end",
    );
    let rtt = time(what, n, |_| {
        let mut c = con.clone();
        async move { redis::cmd("PING").query_async::<String>(&mut c).await.map(drop) }
    })
    .await?;
    let pair = time(what, n, |i| {
        let mut c = con.clone();
        let unlock = &unlock;
        async move { redis_set_unlock(&mut c, unlock, &format!("{{dlock-floor-{i}}}")).await }
    })
    .await?;
    Ok((rtt, pair))
}

#[cfg(feature = "redis")]
async fn redis_set_unlock<C>(
    c: &mut C,
    unlock: &dlock::lock_redis::redis::Script,
    key: &str,
) -> Result<(), dlock::lock_redis::redis::RedisError>
where
    C: dlock::lock_redis::redis::aio::ConnectionLike + Send + Sync,
{
    use dlock::lock_redis::redis;
    let _: Option<String> =
        redis::cmd("SET").arg(key).arg("tok").arg("NX").arg("PX").arg(10_000).query_async(c).await?;
    let _: i64 = unlock.key(key).arg("tok").invoke_async(c).await?;
    Ok(())
}

/// `scheme://[userinfo@]h1,h2,.../path?query` as (`userinfo@` or empty, hosts, path without
/// its leading `/`); the query is dropped (the raw clients take none of the backend's options).
#[cfg(feature = "redis")]
fn split_hosts(url: &str) -> (String, Vec<&str>, &str) {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let (userinfo, after) = dlock::backend::redact::split_userinfo(rest);
    let after = after.split_once('?').map_or(after, |(a, _)| a);
    let (hosts, path) = after.split_once('/').unwrap_or((after, ""));
    let userinfo = userinfo.map_or(String::new(), |u| format!("{u}@"));
    (userinfo, hosts.split(',').filter(|h| !h.is_empty()).collect(), path)
}

/// The cluster's floor: the same commands through the driver's cluster connection, which
/// routes each key to its master (the round trip goes to any node).
#[cfg(feature = "redis")]
async fn redis_cluster(url: &str, n: usize) -> Result<Floor> {
    use dlock::lock_redis::redis;
    const WHAT: &str = "redis cluster floor";
    let (userinfo, hosts, _) = split_hosts(url);
    let nodes =
        hosts.iter().map(|h| redis_info(&format!("redis://{userinfo}{h}/"))).collect::<Result<Vec<_>>>()?;
    let client =
        redis::cluster::ClusterClientBuilder::new(nodes).build().map_err(BenchError::driver(WHAT))?;
    let con = client.get_async_connection().await.map_err(BenchError::driver(WHAT))?;
    let (rtt, pair) = redis_pair(WHAT, &con, n).await?;
    Ok(floor("PING (any node)", "SET NX PX + EVALSHA unlock (key's master)", rtt, pair))
}

/// Through Sentinel: the primary the sentinels name now (asked once, as the backend does at
/// start), then the single node's floor on it.
#[cfg(feature = "redis")]
async fn redis_sentinel(url: &str, n: usize) -> Result<Floor> {
    use dlock::lock_redis::redis;
    const WHAT: &str = "redis sentinel floor";
    let (userinfo, hosts, path) = split_hosts(url);
    let (master, db) = path.split_once('/').unwrap_or((path, "0"));
    let mut last = None;
    for h in hosts {
        // Sentinels are asked without credentials (the URL's are the primary's).
        let h = if h.contains(':') { h.to_owned() } else { format!("{h}:26379") };
        let asked = async {
            let client = redis::Client::open(redis_info(&format!("redis://{h}/"))?)
                .map_err(BenchError::driver(WHAT))?;
            let mut c = client.get_multiplexed_async_connection().await.map_err(BenchError::driver(WHAT))?;
            redis::cmd("SENTINEL")
                .arg("get-master-addr-by-name")
                .arg(master)
                .query_async::<Option<(String, String)>>(&mut c)
                .await
                .map_err(BenchError::driver(WHAT))
        };
        match asked.await {
            Ok(Some((ip, port))) => {
                let f = redis(&format!("redis://{userinfo}{ip}:{port}/{db}"), n).await?;
                return Ok(Floor {
                    rtt_label: "PING (primary)",
                    pair_label: "SET NX PX + EVALSHA unlock (primary)",
                    ..f
                });
            }
            Ok(None) => {
                last = Some(BenchError::NoFloor { scheme: format!("redis+sentinel (no master {master:?})") })
            }
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or(BenchError::NoFloor { scheme: "redis+sentinel (no sentinel)".into() }))
}

/// One step of the raw Redlock floor, sent to every master.
#[cfg(feature = "redis")]
#[derive(Clone)]
enum Phase {
    Ping,
    Set(String),
    Unlock(String),
}

/// Raw Redlock: `SET NX PX` on every master at once, then the unlock script on every master
/// at once (one task per master, as a quorum client sends them); the round trip is a `PING`
/// to every master at once. No clock-drift arithmetic, no retries, no fencing write-back.
#[cfg(feature = "redis")]
async fn redlock(url: &str, n: usize) -> Result<Floor> {
    use dlock::lock_redis::redis;
    const WHAT: &str = "redlock floor";
    let (userinfo, hosts, path) = split_hosts(url);
    let mut cons = Vec::new();
    for h in hosts {
        let client = redis::Client::open(redis_info(&format!("redis://{userinfo}{h}/{path}"))?)
            .map_err(BenchError::driver(WHAT))?;
        cons.push(client.get_multiplexed_async_connection().await.map_err(BenchError::driver(WHAT))?);
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
    let rtt = time(WHAT, n, |_| everywhere(Phase::Ping)).await?;
    let everywhere = &everywhere;
    let pair = time(WHAT, n, |i| async move {
        // The tasks start when spawned: the unlocks only once every SET answered.
        let k = format!("dlock-floor-{i}");
        everywhere(Phase::Set(k.clone())).await?;
        everywhere(Phase::Unlock(k)).await
    })
    .await?;
    Ok(floor(
        "PING to every master at once",
        "SET NX PX, then EVALSHA unlock, on every master at once",
        rtt,
        pair,
    ))
}

#[cfg(feature = "mysql")]
async fn mysql(url: &str, caps: Capability, n: usize) -> Result<Floor> {
    use dlock::lock_mysql::sqlx::{self, Connection};
    const WHAT: &str = "mysql floor";
    let mut con = sqlx::MySqlConnection::connect(strip_query(url)).await.map_err(BenchError::driver(WHAT))?;
    sqlx::query(
        "CREATE TABLE IF NOT EXISTS dlock_bench_floor (id INT PRIMARY KEY, v BIGINT NOT NULL) ENGINE=InnoDB",
    )
    .execute(&mut con)
    .await
    .map_err(BenchError::driver(WHAT))?;
    sqlx::query("INSERT IGNORE INTO dlock_bench_floor VALUES (1, 0)")
        .execute(&mut con)
        .await
        .map_err(BenchError::driver(WHAT))?;
    let con = tokio::sync::Mutex::new(con);
    let rtt = time(WHAT, n, |_| async {
        let mut c = con.lock().await;
        sqlx::query("SELECT 1").execute(&mut *c).await.map(drop)
    })
    .await?;
    if !caps.native_wait {
        // Without the server's lock queue, acquire and release are one autocommit CAS
        // statement each.
        let pair = time(WHAT, n, |_| async {
            let mut c = con.lock().await;
            for _ in 0..2 {
                sqlx::query("UPDATE dlock_bench_floor SET v = v + 1 WHERE id = 1 AND v >= 0")
                    .execute(&mut *c)
                    .await?;
            }
            Ok::<_, sqlx::Error>(())
        })
        .await?;
        return Ok(floor("SELECT 1", "2 x autocommit UPDATE ... WHERE (CAS)", rtt, pair));
    }
    // Waiting in the server's lock queue: a locking read inside a transaction.
    let pair = time(WHAT, n, |_| async {
        let mut c = con.lock().await;
        let mut tx = c.begin().await?;
        sqlx::query("SELECT id FROM dlock_bench_floor WHERE id = 1 FOR UPDATE").execute(&mut *tx).await?;
        tx.commit().await
    })
    .await?;
    Ok(floor("SELECT 1", "BEGIN; SELECT ... FOR UPDATE; COMMIT", rtt, pair))
}

/// The bare advisory lock: `pg_try_advisory_lock` + `pg_advisory_unlock`, one round trip each,
/// on one connection (no fence counter, no pool, no keeper).
#[cfg(feature = "postgres")]
async fn postgres(url: &str, n: usize) -> Result<Floor> {
    use dlock::lock_postgres::sqlx::{self, Connection};
    const WHAT: &str = "postgres floor";
    let con = sqlx::PgConnection::connect(strip_query(url)).await.map_err(BenchError::driver(WHAT))?;
    let con = tokio::sync::Mutex::new(con);
    let rtt = time(WHAT, n, |_| async {
        let mut c = con.lock().await;
        sqlx::query("SELECT 1").execute(&mut *c).await.map(drop)
    })
    .await?;
    let pair = time(WHAT, n, |i| {
        let con = &con;
        async move {
            let mut c = con.lock().await;
            let key = i64::try_from(i).unwrap_or(0) ^ 0x646c_6f63_6b00_0000;
            let _: bool =
                sqlx::query_scalar("SELECT pg_try_advisory_lock($1)").bind(key).fetch_one(&mut *c).await?;
            let _: bool =
                sqlx::query_scalar("SELECT pg_advisory_unlock($1)").bind(key).fetch_one(&mut *c).await?;
            Ok::<_, sqlx::Error>(())
        }
    })
    .await?;
    Ok(floor("SELECT 1", "pg_try_advisory_lock + pg_advisory_unlock", rtt, pair))
}

/// The bare etcd v3 lock steps: one transaction that puts a key if absent and reads the
/// queue's head, and one delete (no lease, no keep-alive, no watch).
#[cfg(feature = "etcd")]
async fn etcd(url: &str, n: usize) -> Result<Floor> {
    use dlock::lock_etcd::etcd_client::{
        self as etcd, Compare, CompareOp, GetOptions, SortOrder, SortTarget, Txn, TxnOp,
    };
    const WHAT: &str = "etcd floor";
    let hosts = url.split_once("://").map_or(url, |(_, r)| r);
    let hosts = hosts.split(['/', '?']).next().unwrap_or(hosts);
    let endpoints: Vec<String> = hosts.split(',').map(|h| format!("http://{h}")).collect();
    let client = etcd::Client::connect(endpoints, None).await.map_err(BenchError::driver(WHAT))?;
    let rtt = time(WHAT, n, |_| {
        let mut kv = client.kv_client();
        async move { kv.get("/dlock-floor", None).await.map(drop) }
    })
    .await?;
    let pair = time(WHAT, n, |i| {
        let mut kv = client.kv_client();
        async move {
            let key = format!("/dlock-floor/{i:x}");
            let head = GetOptions::new().with_prefix().with_sort(SortTarget::Create, SortOrder::Ascend);
            let txn =
                Txn::new().when([Compare::create_revision(key.as_str(), CompareOp::Equal, 0)]).and_then([
                    TxnOp::put(key.as_str(), "", None),
                    TxnOp::get("/dlock-floor/", Some(head.with_limit(1))),
                ]);
            kv.txn(txn).await?;
            kv.delete(key, None).await.map(drop)
        }
    })
    .await?;
    Ok(floor("get", "txn put-if-absent + head read, delete", rtt, pair))
}

#[cfg(feature = "zk")]
async fn zk(url: &str, n: usize) -> Result<Floor> {
    use dlock::lock_zk::zookeeper_client as zkc;
    const WHAT: &str = "zk floor";
    let hosts = url.split_once("://").map_or(url, |(_, r)| r);
    let hosts = hosts.split_once('/').map_or(hosts, |(h, _)| h);
    let client = zkc::Client::connector().connect(hosts).await.map_err(BenchError::driver(WHAT))?;
    let opts = zkc::CreateMode::EphemeralSequential.with_acls(zkc::Acls::anyone_all());
    // A fresh ZooKeeper is a cold JVM whose first thousands of requests are slower (figures in
    // docs/BENCH.md, from examples/zk_profile.rs), and the zk target is the first on its server
    // while Curator comes after it. Untimed requests first, so that both are timed on a warm
    // server.
    for _ in 0..2 * n {
        client.check_stat("/").await.map_err(BenchError::driver(WHAT))?;
        let (_, seq) = client.create("/dlock-floor-", b"", &opts).await.map_err(BenchError::driver(WHAT))?;
        client.delete(&format!("/dlock-floor-{seq}"), None).await.map_err(BenchError::driver(WHAT))?;
    }
    let rtt = time(WHAT, n, |_| {
        let c = client.clone();
        async move { c.check_stat("/").await.map(drop) }
    })
    .await?;
    let pair = time(WHAT, n, |_| {
        let c = client.clone();
        let opts = &opts;
        async move {
            let (_, seq) = c.create("/dlock-floor-", b"", opts).await?;
            c.delete(&format!("/dlock-floor-{seq}"), None).await
        }
    })
    .await?;
    Ok(floor("exists", "create ephemeral-sequential + delete", rtt, pair))
}
