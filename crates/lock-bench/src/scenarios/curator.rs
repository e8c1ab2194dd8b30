//! Apache Curator's `InterProcessMutex` on the `zk` target's server, in the same run (issue 14:
//! "ZK vs Curator in the same run"). Curator runs in a JVM, the test kit's peer
//! (`lock_testkit::interop::curator_peer`), and is timed inside the JVM: the pipe to it is not
//! Curator's cost. Uncontended: acquire (wait 5 s) + release on one `InterProcessMutex`, as a
//! user keeps one. Handoff: one JVM releases while another waits in the queue, timed from
//! before its release call to the waiter's acquire returning, both on `System.nanoTime()` (one
//! machine-wide monotonic clock). Contended is not run: it would take a JVM per client. The
//! read-write lock and the semaphore run the library's mixes (`primitives.rs`) on Curator's
//! `InterProcessReadWriteLock` and `InterProcessSemaphoreV2`, one thread and one client per
//! bench client in one JVM, waits timed in the JVM.

use std::time::Duration;

use dlock::lock_zk::zookeeper_client as zkc;
use lock_testkit::interop::{Peer as Jvm, curator_peer};

use super::Ctx;
use super::primitives::{CLIENTS, PERMITS, WRITE_EVERY, rwlock_rows, semaphore_row};
use crate::error::{BenchError, Result};
use crate::micros::hist;
use crate::row::Row;

/// The session Curator asks for: `ZkLock`'s default, so both sides are clamped alike.
pub(super) const SESSION: Duration = dlock::lock_zk::DEFAULT_SESSION_TIMEOUT;
/// The uncontended acquire's wait, as the library's uncontended `acquire()`.
const WAIT_MS: u64 = 5_000;
/// The longest a peer's answer may take.
const ANSWER: Duration = Duration::from_secs(60);
/// The longest the uncontended series may take (it is one answer).
const SERIES: Duration = Duration::from_secs(600);
/// Pause after the waiter's node is queued, as the library's handoff pauses: the waiter sets
/// its watch on the holder's node.
const SETTLE: Duration = Duration::from_millis(5);
/// Where Curator's lock nodes go (outside the library's `dlock-bench` root).
const ROOT: &str = "/dlock-bench-curator";

/// One scenario of the table on the Curator target.
pub async fn run(cx: &Ctx<'_>, scenario: &str) -> Result<Vec<Row>> {
    // The peer panics on a protocol failure (it is the test kit's): a task turns that into an
    // error of this scenario instead of the end of the run.
    let connect = connect_string(&cx.target.url).to_owned();
    let (target, sizes) = (cx.target.clone(), *cx.sizes);
    let (floor_pair, floor_rtt) = (cx.floor.pair_p50, cx.floor.rtt_p50);
    let key = cx.key("curator");
    let path = format!("{ROOT}/{key}");
    let rows = match scenario {
        "uncontended" => tokio::spawn(async move {
            let Some(mut peer) = curator_peer(&connect, SESSION).await else { return Ok(None) };
            let series = format!("bench {path} {} {WAIT_MS}", sizes.uncontended_ops);
            let line = answer(&mut peer, Some(&series), "SAMPLES", SERIES).await?;
            peer.send("exit").await;
            let mut h = hist()?;
            let mut busy_us = 0u64;
            for us in line.split(' ').skip(1) {
                let us: u64 =
                    us.parse().map_err(|_| BenchError::Peer(format!("bad sample in {line:.80}")))?;
                busy_us += us;
                h.saturating_record(us.max(1));
            }
            let rate = h.len() as f64 / (busy_us.max(1) as f64 / 1e6);
            let metric = "acquire+release (wait 5 s; timed in the JVM)";
            Ok(Some(vec![Row::latency(&target, "uncontended acquire()", metric, &h, Some(rate), floor_pair)]))
        }),
        "handoff" => tokio::spawn(async move {
            let (Some(a), Some(b)) =
                (curator_peer(&connect, SESSION).await, curator_peer(&connect, SESSION).await)
            else {
                return Ok(None);
            };
            let h = handoff(a, b, &connect, &path, sizes.handoffs).await?;
            let metric = "release -> waiter holds (JVM clocks)";
            Ok(Some(vec![Row::latency(&target, "handoff", metric, &h, None, floor_rtt)]))
        }),
        "rwlock" => tokio::spawn(async move {
            let ms = sizes.contended_for.as_millis();
            let command = format!("rwbench {path} {CLIENTS} {ms} {WRITE_EVERY}");
            let Some((secs, lists)) = mix(&connect, &command, "RWSAMPLES").await? else { return Ok(None) };
            let [reads, writes] = &lists[..] else {
                return Err(BenchError::Peer("rwbench answered no read and write lists".into()));
            };
            Ok(Some(rwlock_rows(&target, (reads, writes), secs, true).into()))
        }),
        "semaphore" => tokio::spawn(async move {
            let ms = sizes.contended_for.as_millis();
            let command = format!("sembench {path} {CLIENTS} {PERMITS} {ms}");
            let Some((secs, lists)) = mix(&connect, &command, "SEMSAMPLES").await? else { return Ok(None) };
            let [waits] = &lists[..] else {
                return Err(BenchError::Peer("sembench answered no list of waits".into()));
            };
            Ok(Some(vec![semaphore_row(&target, waits, secs)]))
        }),
        other => {
            let mut row =
                Row::new(cx.target, other, "n/a: one JVM per client; Curator runs uncontended and handoff");
            row.extra.insert("skipped".into(), true.into());
            return Ok(vec![row]);
        }
    };
    match rows.await? {
        Ok(Some(rows)) => Ok(rows),
        Ok(None) => {
            let mut row = Row::new(cx.target, scenario, "n/a: no JDK or libcurator-recipes-java");
            row.extra.insert("skipped".into(), true.into());
            Ok(vec![row])
        }
        Err(e) => Err(e),
    }
}

/// `handoffs` hand-overs from `a` to `b` on `path`, in µs.
async fn handoff(
    mut a: Jvm,
    mut b: Jvm,
    connect: &str,
    path: &str,
    handoffs: usize,
) -> Result<hdrhistogram::Histogram<u64>> {
    const WHAT: &str = "curator handoff observer";
    let observer = zkc::Client::connector().connect(connect).await.map_err(BenchError::driver(WHAT))?;
    let mut h = hist()?;
    for _ in 0..handoffs {
        answer(&mut a, Some(&format!("acquire {path} {WAIT_MS}")), "ACQUIRED", ANSWER).await?;
        b.send(&format!("acquire {path} {}", ANSWER.as_millis())).await;
        while observer.list_children(path).await.map_err(BenchError::driver(WHAT))?.len() < 2 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        tokio::time::sleep(SETTLE).await;
        let released = nanos(&answer(&mut a, Some("release"), "RELEASED", ANSWER).await?, 1)?;
        let acquired = nanos(&answer(&mut b, None, "ACQUIRED", ANSWER).await?, 3)?;
        h.saturating_record((acquired.saturating_sub(released) / 1_000).max(1));
        answer(&mut b, Some("release"), "RELEASED", ANSWER).await?;
    }
    a.send("exit").await;
    b.send("exit").await;
    Ok(h)
}

/// Sends `command` (if any) and reads the answer: the line if it starts with `prefix`, else an
/// error (`ERROR ..`, or a `TIMEOUT` where none may happen).
async fn answer(peer: &mut Jvm, command: Option<&str>, prefix: &str, limit: Duration) -> Result<String> {
    if let Some(c) = command {
        peer.send(c).await;
    }
    let line = peer.recv(limit).await;
    if line.starts_with(prefix) { Ok(line) } else { Err(BenchError::Peer(line)) }
}

/// One of the JVM's mixes (`command`, answered with `prefix`): the seconds it ran and each
/// list of waits it answered; `None` without a JDK.
async fn mix(
    connect: &str,
    command: &str,
    prefix: &str,
) -> Result<Option<(f64, Vec<hdrhistogram::Histogram<u64>>)>> {
    let Some(mut peer) = curator_peer(connect, SESSION).await else { return Ok(None) };
    let line = answer(&mut peer, Some(command), prefix, SERIES).await?;
    peer.send("exit").await;
    mix_answer(&line).map(Some)
}

/// A mix's answer, `<PREFIX> <elapsed-µs> <waits> ..`: the seconds it ran and each list of
/// waits. Curator's JVM and kazoo's script answer alike.
pub(super) fn mix_answer(line: &str) -> Result<(f64, Vec<hdrhistogram::Histogram<u64>>)> {
    let mut words = line.split(' ').skip(1);
    let secs = parse(words.next().unwrap_or_default())? as f64 / 1e6;
    Ok((secs, words.map(samples).collect::<Result<_>>()?))
}

/// A number of a peer's answer.
fn parse(word: &str) -> Result<u64> {
    word.parse().map_err(|_| BenchError::Peer(format!("bad number {word:.40}")))
}

/// A comma-separated list of waits in µs (`-` for none) as a histogram.
fn samples(list: &str) -> Result<hdrhistogram::Histogram<u64>> {
    let mut h = hist()?;
    for us in list.split(',').filter(|w| *w != "-") {
        h.saturating_record(parse(us)?.max(1));
    }
    Ok(h)
}

/// The `System.nanoTime()` word `i` of a peer's answer.
fn nanos(line: &str, i: usize) -> Result<u64> {
    line.split(' ')
        .nth(i)
        .and_then(|w| w.parse().ok())
        .ok_or_else(|| BenchError::Peer(format!("no time in {line:?}")))
}

/// The ZooKeeper connect string of a `zk://host:port[,..]/root` URL.
pub(super) fn connect_string(url: &str) -> &str {
    let hosts = url.split_once("://").map_or(url, |(_, r)| r);
    hosts.split_once('/').map_or(hosts, |(h, _)| h)
}
