//! Where the microseconds of an uncontended Redis acquire+release go: the raw floor, the
//! library's scripts sent raw, the backend trait, and the `Locker` paths, interleaved, with
//! the allocator calls of each (process-wide, as the bench counts them).
//! `cargo run --release -p lock-bench --example redis_profile [iterations]`; `ACQ_SRC` and
//! `REL_SRC` name files of other scripts to time raw in place of the library's.

use std::sync::Arc;
use std::time::{Duration, Instant};

use dlock::backend::{AcquireRequest, LockBackend, Side};
use dlock::lock_redis::{Mode, RedisLock, redis};
use dlock::{LeaseSignal, Locker, OwnerToken};
use lock_redis_testing::RedisServer;

type R<T> = std::result::Result<T, Box<dyn std::error::Error>>;

#[global_allocator]
static GLOBAL: &stats_alloc::StatsAlloc<std::alloc::System> = &stats_alloc::INSTRUMENTED_SYSTEM;

/// Allocator calls so far (`realloc` included, as the bench counts them).
fn allocs() -> u64 {
    let s = GLOBAL.stats();
    (s.allocations + s.reallocations) as u64
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> R<()> {
    let n: usize = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(5000);
    let server = RedisServer::start()?;
    let url = server.url();
    let client = redis::Client::open(url.as_str())?;
    let mut raw = client.get_multiplexed_async_connection().await?;
    // What the backend sends through: a connection manager with a response timeout.
    let cfg = redis::aio::ConnectionManagerConfig::new()
        .set_connection_timeout(Some(Duration::from_secs(2)))
        .set_response_timeout(Some(Duration::from_secs(2)));
    let mut managed = client.get_connection_manager_with_config(cfg).await?;
    let unlock = redis::Script::new(
        "if redis.call('get',KEYS[1]) == ARGV[1] then return redis.call('del',KEYS[1]) else return 0 end",
    );
    let mode = match std::env::var("MODE").as_deref() {
        Ok("fair") => Mode::Fair,
        Ok("reentrant") => Mode::Reentrant,
        _ => Mode::Simple,
    };
    let backend = RedisLock::builder().url(url.clone()).mode(mode).build().await?;
    let b: Arc<dyn LockBackend> = Arc::new(backend.clone());
    let locker = Locker::new(b.clone());
    let names = backend.key_names("p-raw");
    let acq_src = [
        include_str!("../../lock-redis/scripts/fence.lua"),
        include_str!("../../lock-redis/scripts/marks.lua"),
        include_str!("../../lock-redis/scripts/handoff.lua"),
        include_str!("../../lock-redis/scripts/read_phases.lua"),
        include_str!("../../lock-redis/scripts/wait_end.lua"),
        include_str!("../../lock-redis/scripts/acquire_simple.lua"),
    ]
    .concat();
    let rel_src = [
        include_str!("../../lock-redis/scripts/fence.lua"),
        include_str!("../../lock-redis/scripts/marks.lua"),
        include_str!("../../lock-redis/scripts/handoff.lua"),
        include_str!("../../lock-redis/scripts/read_phases.lua"),
        include_str!("../../lock-redis/scripts/wait_end.lua"),
        include_str!("../../lock-redis/scripts/release_simple.lua"),
    ]
    .concat();
    // Other scripts in their place, to time a variant raw (ACQ_SRC, REL_SRC: files).
    let acq_src = match std::env::var("ACQ_SRC") {
        Ok(f) => std::fs::read_to_string(f)?,
        Err(_) => acq_src,
    };
    let rel_src = match std::env::var("REL_SRC") {
        Ok(f) => std::fs::read_to_string(f)?,
        Err(_) => rel_src,
    };
    let (acq, rel) = (redis::Script::new(&acq_src), redis::Script::new(&rel_src));
    let owner = OwnerToken::random().to_string();
    let value = format!("{owner}{}", OwnerToken::random());
    let signal = LeaseSignal::new();

    let labels = [
        "ping",
        "floor SET NX PX + EVALSHA unlock",
        "our scripts raw (simple, wait_ms 0)",
        "our scripts raw (simple, wait_ms 5000)",
        "our scripts raw via a connection manager",
        "backend try_acquire+release",
        "locker try_acquire(lease)+release",
        "locker acquire(wait)+release",
    ];
    let mut samples: Vec<Vec<u64>> = vec![Vec::with_capacity(n); labels.len()];
    let mut calls = vec![0u64; labels.len()];
    for i in 0..n + 200 {
        for k in 0..labels.len() {
            let v = (k + i) % labels.len();
            let (t, a0) = (Instant::now(), allocs());
            match v {
                0 => {
                    let _: String = redis::cmd("PING").query_async(&mut raw).await?;
                }
                1 => {
                    let _: Option<String> = redis::cmd("SET")
                        .arg("p-floor")
                        .arg("tok")
                        .arg("NX")
                        .arg("PX")
                        .arg(10_000)
                        .query_async(&mut raw)
                        .await?;
                    let _: i64 = unlock.key("p-floor").arg("tok").invoke_async(&mut raw).await?;
                }
                2..=4 => {
                    let wait: u64 = if v == 2 { 0 } else { 5000 };
                    if v == 4 {
                        scripts(&mut managed, &acq, &rel, &names, &value, &owner, wait).await?;
                    } else {
                        scripts(&mut raw, &acq, &rel, &names, &value, &owner, wait).await?;
                    }
                }
                5 => {
                    let o = OwnerToken::random();
                    let req = AcquireRequest {
                        key: "p-backend",
                        owner: o,
                        lease: Duration::from_secs(10),
                        wait_until: None,
                        signal: &signal,
                        side: Side::Exclusive,
                    };
                    b.try_acquire(&req).await?;
                    b.release("p-backend", o).await?;
                }
                6 => {
                    let g = locker.lock("p-locker").lease(Duration::from_secs(10)).try_acquire().await?;
                    g.ok_or("held")?.release().await?;
                }
                _ => {
                    locker.lock("p-locker2").wait(Duration::from_secs(5)).acquire().await?.release().await?;
                }
            }
            if i >= 200 {
                samples[v].push(t.elapsed().as_micros() as u64);
                calls[v] += allocs() - a0;
            }
        }
    }
    let stats: String = redis::cmd("INFO").arg("commandstats").query_async(&mut raw).await?;
    for l in stats.lines().filter(|l| l.contains("cmdstat_")) {
        println!("{l}");
    }
    let floor = median(&mut samples[1].clone());
    for ((l, s), c) in labels.iter().zip(samples.iter_mut()).zip(&calls) {
        let m = median(s);
        let per = *c as f64 / n as f64;
        println!("{l:<45} p50 {m:>5} µs  x floor {:.2}  allocs/op {per:.1}", m as f64 / floor as f64);
    }
    Ok(())
}

/// The library's acquire and release scripts, sent as they are, with the backend's arguments.
async fn scripts<C: redis::aio::ConnectionLike + Send>(
    con: &mut C,
    acq: &redis::Script,
    rel: &redis::Script,
    names: &dlock::lock_redis::KeyNames,
    value: &str,
    owner: &str,
    wait: u64,
) -> R<()> {
    let (_, _, _): (i64, i64, i64) = acq
        .key(names.lock())
        .key(names.fence())
        .key(names.waiters())
        .key(names.queue())
        .arg(value)
        .arg(10_000)
        .arg(owner)
        .arg(wait)
        .arg("")
        .arg("")
        .arg("")
        .invoke_async(con)
        .await?;
    let (_, _): (i64, String) = rel
        .key(names.lock())
        .key(names.waiters())
        .key(names.queue())
        .key(names.fence())
        .arg(owner)
        .arg(names.channel())
        .arg(1000)
        .arg(OwnerToken::random().to_string())
        .invoke_async(con)
        .await?;
    Ok(())
}

fn median(v: &mut [u64]) -> u64 {
    v.sort_unstable();
    v[v.len() / 2]
}
