//! Throwaway measurement for issue 14: where the microseconds of a ZooKeeper acquire + release
//! go. One private server (`forceSync=yes`, as the bench starts it); the probes run in rounds,
//! interleaved, so that every probe sees the same server warmth and machine state:
//!
//! - `crate exists`, `crate create+delete`: the bench's floor, through `zookeeper-client`;
//! - `crate create|list(watch) + delete` (own directory): the lock's requests, through the crate;
//!   `+ task` adds a task awaiting the directory's watch, as the grant does;
//! - `raw ...`: the same requests on a hand-written tokio socket (Nagle off unless said), no
//!   session task, no channel, pipelined requests in one write: a round trip without the crate;
//! - `dlock try_acquire+release`, `dlock acquire()+release`: the library, as the bench calls it;
//! - `curator acquire+release`: Curator 5.4 in its JVM, timed there (when a JDK is installed).
//!
//! The first 3,000 samples of the crate's floor are taken right after the server started, as
//! the bench measures the zk target's floor first. With `nodelay`, `zk_nodelay.py` sets
//! TCP_NODELAY on this process's sockets to the server (the crate's and the lock's) from outside.
//!
//! `cargo run --release -p lock-bench --example zk_profile -- [multi|current] [rounds] [nodelay] [warmup]`
//! (`warmup`: only the p50 per block of 500 exists + 500 create+delete on the fresh server)

use std::collections::BTreeMap;
use std::error::Error;
use std::time::Duration;

use dlock::Locker;
use dlock::lock_zk::zookeeper_client as zkc;
use hdrhistogram::Histogram;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;

type Res<T> = Result<T, Box<dyn Error + Send + Sync>>;

/// Samples per probe per round.
const BATCH: usize = 100;
/// The probes' lock directory.
const D: &str = "/dlock-prof/dir";
/// The crate probes' lock directory (no other session watches it).
const D2: &str = "/dlock-prof/crate";

fn main() -> Res<()> {
    let args: Vec<String> = std::env::args().collect();
    let flavor = args.get(1).map_or("multi", String::as_str);
    let rounds: usize = args.get(2).and_then(|r| r.parse().ok()).unwrap_or(20);
    let rt = match flavor {
        "current" => tokio::runtime::Builder::new_current_thread().enable_all().build()?,
        _ => tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?,
    };
    rt.block_on(run(flavor, rounds))
}

/// A minimal ZooKeeper client: one socket, one request (or one pipelined batch) at a time.
struct Raw {
    s: TcpStream,
    xid: i32,
}

fn put_str(b: &mut Vec<u8>, s: &str) {
    b.extend((s.len() as i32).to_be_bytes());
    b.extend(s.as_bytes());
}

impl Raw {
    async fn connect(addr: &str, nodelay: bool) -> Res<Raw> {
        let s = TcpStream::connect(addr).await?;
        s.set_nodelay(nodelay)?;
        let mut raw = Raw { s, xid: 0 };
        let mut b = Vec::new();
        b.extend(0i32.to_be_bytes()); // protocol version
        b.extend(0i64.to_be_bytes()); // last zxid seen
        b.extend(10_000i32.to_be_bytes()); // session timeout
        b.extend(0i64.to_be_bytes()); // session id
        b.extend(16i32.to_be_bytes());
        b.extend([0u8; 16]); // password
        b.push(0); // read-only
        let mut f = (b.len() as i32).to_be_bytes().to_vec();
        f.extend(b);
        raw.s.write_all(&f).await?;
        raw.frame().await?;
        Ok(raw)
    }

    async fn frame(&mut self) -> Res<Vec<u8>> {
        let n = self.s.read_i32().await? as usize;
        let mut b = vec![0; n];
        self.s.read_exact(&mut b).await?;
        Ok(b)
    }

    fn request(&mut self, op: i32, body: &[u8], out: &mut Vec<u8>) {
        self.xid += 1;
        out.extend(((8 + body.len()) as i32).to_be_bytes());
        out.extend(self.xid.to_be_bytes());
        out.extend(op.to_be_bytes());
        out.extend(body);
    }

    /// Send `reqs` in one write; the bodies of their replies (watch events skipped).
    async fn call(&mut self, reqs: &[(i32, Vec<u8>)]) -> Res<Vec<Vec<u8>>> {
        let mut out = Vec::new();
        for (op, body) in reqs {
            self.request(*op, body, &mut out);
        }
        self.s.write_all(&out).await?;
        let mut replies = Vec::new();
        while replies.len() < reqs.len() {
            let f = self.frame().await?;
            let xid = i32::from_be_bytes(f[0..4].try_into()?);
            if xid == -1 {
                continue; // a watch event
            }
            let err = i32::from_be_bytes(f[12..16].try_into()?);
            if err != 0 {
                return Err(format!("zk error {err}").into());
            }
            replies.push(f[16..].to_vec());
        }
        Ok(replies)
    }

    async fn exists(&mut self, path: &str) -> Res<()> {
        let mut b = Vec::new();
        put_str(&mut b, path);
        b.push(0);
        self.call(&[(3, b)]).await.map(drop)
    }

    fn create_body(prefix: &str) -> Vec<u8> {
        let mut b = Vec::new();
        put_str(&mut b, prefix);
        b.extend(0i32.to_be_bytes()); // data
        b.extend(1i32.to_be_bytes()); // one ACL
        b.extend(31i32.to_be_bytes());
        put_str(&mut b, "world");
        put_str(&mut b, "anyone");
        b.extend(3i32.to_be_bytes()); // EPHEMERAL_SEQUENTIAL
        b
    }

    async fn delete(&mut self, path: &str) -> Res<()> {
        let mut b = Vec::new();
        put_str(&mut b, path);
        b.extend((-1i32).to_be_bytes());
        self.call(&[(2, b)]).await.map(drop)
    }

    /// create (+ `with`: (opcode, dir, watch) on the directory, in the same write unless
    /// `split`), then delete.
    async fn create_delete(&mut self, prefix: &str, with: Option<(i32, &str, bool)>, split: bool) -> Res<()> {
        let mut reqs = vec![(1, Self::create_body(prefix))];
        if let Some((op, dir, watch)) = with {
            let mut b = Vec::new();
            put_str(&mut b, dir);
            b.push(u8::from(watch));
            reqs.push((op, b));
        }
        let replies = if split && reqs.len() == 2 {
            let mut out = Vec::new();
            self.request(reqs[0].0, &reqs[0].1, &mut out);
            self.s.write_all(&out).await?;
            let mut out = Vec::new();
            self.request(reqs[1].0, &reqs[1].1, &mut out);
            self.s.write_all(&out).await?;
            let mut replies = Vec::new();
            while replies.len() < 2 {
                let f = self.frame().await?;
                if i32::from_be_bytes(f[0..4].try_into()?) != -1 {
                    replies.push(f[16..].to_vec());
                }
            }
            replies
        } else {
            self.call(&reqs).await?
        };
        let n = i32::from_be_bytes(replies[0][0..4].try_into()?) as usize;
        let path = std::str::from_utf8(&replies[0][4..4 + n])?.to_owned();
        self.delete(&path).await
    }
}

async fn crate_pair(c: &zkc::Client, opts: &zkc::CreateOptions<'_>, dir: &str) -> Result<(), zkc::Error> {
    let (_, seq) = c.create(&format!("{dir}/dlock-floor-"), b"", opts).await?;
    c.delete(&format!("{dir}/dlock-floor-{seq}"), None).await
}

#[derive(Default)]
struct Probes(BTreeMap<&'static str, Histogram<u64>>);

impl Probes {
    fn record(&mut self, name: &'static str, t0: Instant) {
        let h = self.0.entry(name).or_insert_with(|| Histogram::new(3).expect("sigfig 3"));
        h.saturating_record(t0.elapsed().as_micros() as u64);
    }
    fn print(&self, title: &str) {
        println!("{title}");
        println!("  {:<40} {:>6} {:>6} {:>6} {:>7}", "probe", "p50", "p90", "p99", "n");
        for (name, h) in &self.0 {
            println!(
                "  {name:<40} {:>6} {:>6} {:>6} {:>7}",
                h.value_at_quantile(0.5),
                h.value_at_quantile(0.9),
                h.value_at_quantile(0.99),
                h.len()
            );
        }
    }
}

fn args_nodelay() -> bool {
    std::env::args().any(|a| a == "nodelay")
}

async fn run(flavor: &str, rounds: usize) -> Res<()> {
    let server = lock_zk_testing::ZkServer::start_with(&["forceSync=yes"])?;
    let connect = server.connect_string();
    println!("zookeeper on {connect} (forceSync=yes); runtime {flavor}; {rounds} rounds x {BATCH}");
    let client = zkc::Client::connector().connect(&connect).await?;
    let opts = zkc::CreateMode::EphemeralSequential.with_acls(zkc::Acls::anyone_all());
    let crate_exists = |c: zkc::Client| async move { c.check_stat("/").await.map(drop) };
    if std::env::args().any(|a| a == "warmup") {
        // How fast a fresh server warms up: p50 per block of 500 pairs (exists, create+delete).
        for block in 0..rounds {
            let (mut e, mut c) = (Probes::default(), Probes::default());
            for _ in 0..500 {
                let t0 = Instant::now();
                crate_exists(client.clone()).await?;
                e.record("exists", t0);
                let t0 = Instant::now();
                crate_pair(&client, &opts, "").await?;
                c.record("create+delete", t0);
            }
            let p50 = |p: &Probes| p.0.values().next().map_or(0, |h| h.value_at_quantile(0.5));
            println!(
                "ops {:>6}: exists p50 {:>4}  create+delete p50 {:>4}",
                (block + 1) * 1000,
                p50(&e),
                p50(&c)
            );
        }
        return Ok(());
    }
    // Cold: the bench's zk floor is its first use of a fresh server.
    let mut cold = Probes::default();
    for _ in 0..3_000 {
        let t0 = Instant::now();
        crate_exists(client.clone()).await?;
        cold.record("crate exists (cold, first 3000)", t0);
    }
    for _ in 0..3_000 {
        let t0 = Instant::now();
        crate_pair(&client, &opts, "").await?;
        cold.record("crate create+delete (cold, first 3000)", t0);
    }
    cold.print("cold server, in the bench's order (floor of the zk target):");

    let locker = Locker::new(dlock::from_url(&format!("zk://{connect}/dlock-prof")).await?);
    client.mkdir(D, &zkc::CreateMode::Persistent.with_acls(zkc::Acls::anyone_all())).await?;
    client.mkdir(D2, &zkc::CreateMode::Persistent.with_acls(zkc::Acls::anyone_all())).await?;
    if args_nodelay() {
        // Nagle off on the crate's sockets (the crate leaves it on), from outside: python
        // duplicates each socket with pidfd_getfd and sets TCP_NODELAY on it.
        let port = connect.rsplit(':').next().unwrap_or_default();
        let script = format!("{}/examples/zk_nodelay.py", env!("CARGO_MANIFEST_DIR"));
        let out = std::process::Command::new("python3")
            .args([script.as_str(), &std::process::id().to_string(), port])
            .output()?;
        println!("nodelay set on the crate's sockets: {}", String::from_utf8_lossy(&out.stdout).trim());
        if !out.status.success() {
            return Err(String::from_utf8_lossy(&out.stderr).into_owned().into());
        }
    }

    let mut raw = Raw::connect(&connect, true).await?;
    let mut nagle = Raw::connect(&connect, false).await?;
    let mut curator = lock_testkit::interop::curator_peer(&connect, Duration::from_secs(10)).await;
    if curator.is_none() {
        println!("no curator peer (JDK or jars missing)");
    }

    let mut p = Probes::default();
    for round in 0..rounds {
        for _ in 0..BATCH {
            let t0 = Instant::now();
            crate_exists(client.clone()).await?;
            p.record("crate exists", t0);
            let t0 = Instant::now();
            raw.exists("/").await?;
            p.record("raw exists (nodelay)", t0);
            let t0 = Instant::now();
            crate_pair(&client, &opts, "").await?;
            p.record("crate create+delete", t0);
            let t0 = Instant::now();
            crate_pair(&client, &opts, "/dlock-prof/dir").await?;
            p.record("crate create+delete (depth 2)", t0);
            let t0 = Instant::now();
            raw.create_delete("/dlock-floor-", None, false).await?;
            p.record("raw create+delete (nodelay)", t0);
            let t0 = Instant::now();
            nagle.create_delete("/dlock-floor-", None, false).await?;
            p.record("raw create+delete (Nagle on)", t0);
            let t0 = Instant::now();
            raw.create_delete("/dlock-prof/dir/x-", Some((8, D, true)), false).await?;
            p.record("raw create|list(watch) + delete", t0);
            let t0 = Instant::now();
            raw.create_delete("/dlock-prof/dir/x-", Some((8, D, false)), false).await?;
            p.record("raw create|list + delete", t0);
            let t0 = Instant::now();
            raw.create_delete("/dlock-prof/dir/x-", Some((3, D, false)), false).await?;
            p.record("raw create|exists(dir) + delete", t0);
            let t0 = Instant::now();
            nagle.create_delete("/dlock-prof/dir/x-", Some((8, D, true)), true).await?;
            p.record("raw create,list(watch) 2 writes Nagle", t0);
            let t0 = Instant::now();
            raw.create_delete("/dlock-prof/dir/x-", Some((8, D, true)), true).await?;
            p.record("raw create,list(watch) 2 writes nodelay", t0);
            let t0 = Instant::now();
            {
                let created = client.create("/dlock-prof/crate/y-", b"", &opts);
                let listed = client.list_and_watch_children(D2);
                let (_, seq) = created.await?;
                let (_, w) = listed.await?;
                client.delete(&format!("/dlock-prof/crate/y-{seq}"), None).await?;
                drop(w);
            }
            p.record("crate create|list(watch) + delete", t0);
            let t0 = Instant::now();
            {
                let created = client.create("/dlock-prof/crate/y-", b"", &opts);
                let listed = client.list_and_watch_children(D2);
                let (_, seq) = created.await?;
                let (_, w) = listed.await?;
                // As the lock's grant does: a task waits for the directory's event.
                let task = tokio::spawn(async move { w.changed().await });
                client.delete(&format!("/dlock-prof/crate/y-{seq}"), None).await?;
                task.abort();
            }
            p.record("crate create|list(watch) + delete + task", t0);
            let t0 = Instant::now();
            {
                let created = client.create("/dlock-prof/crate/y-", b"", &opts);
                let listed = client.list_children(D2);
                let (_, seq) = created.await?;
                listed.await?;
                client.delete(&format!("/dlock-prof/crate/y-{seq}"), None).await?;
            }
            p.record("crate create|list + delete", t0);
            let t0 = Instant::now();
            {
                let (_, seq) = client.create("/dlock-prof/crate/y-", b"", &opts).await?;
                client.list_children(D2).await?;
                client.delete(&format!("/dlock-prof/crate/y-{seq}"), None).await?;
            }
            p.record("crate create, list, delete (sequential)", t0);
            let t0 = Instant::now();
            let g = locker.lock("k").lease(Duration::from_secs(10)).try_acquire().await?;
            g.ok_or("held")?.release().await?;
            p.record("dlock try_acquire+release", t0);
            let t0 = Instant::now();
            locker.lock("k").wait(Duration::from_secs(5)).acquire().await?.release().await?;
            p.record("dlock acquire()+release", t0);
        }
        if let Some(peer) = curator.as_mut() {
            peer.send(&format!("bench /dlock-prof-curator/k{round} {BATCH} 5000")).await;
            let line = peer.recv(Duration::from_secs(120)).await;
            let h =
                p.0.entry("curator acquire+release (JVM)").or_insert_with(|| Histogram::new(3).expect("3"));
            for us in line.split(' ').skip(1) {
                h.saturating_record(us.parse()?);
            }
        }
    }
    p.print("warm server, interleaved (µs):");
    if let Some(mut peer) = curator {
        peer.send("exit").await;
    }
    Ok(())
}
