//! A TCP proxy on loopback between the clients and a server, for network faults: cut every
//! connection at once, blackhole the traffic (connections stay open, bytes stop flowing,
//! as in a partition), or delay it (a slow link, each direction on its own).
//!
//! Three controls are all the tests need, so this is a few dozen lines on tokio rather than the
//! `noxious` crate (a port of Toxiproxy's core, built around proxies and toxics managed through
//! shared state, on rand 0.8 and mockall_double).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use lock_core::backend::Mutex;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;
use tokio::time::Instant;

/// A running proxy; stops (and drops every connection) when dropped.
#[derive(Debug)]
pub struct Proxy {
    addr: SocketAddr,
    blackhole: watch::Sender<bool>,
    /// Added to each chunk's trip: (towards the server, towards the client).
    delay: watch::Sender<(Duration, Duration)>,
    conns: Arc<Mutex<JoinSet<()>>>,
    accept: tokio::task::JoinHandle<()>,
}

impl Proxy {
    /// Listen on a free loopback port and forward every connection to `target`.
    ///
    /// # Errors
    /// When no loopback port can be bound.
    pub async fn start(target: SocketAddr) -> std::io::Result<Proxy> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let (blackhole, rx) = watch::channel(false);
        let (delay, delays) = watch::channel((Duration::ZERO, Duration::ZERO));
        let conns = Arc::new(Mutex::new(JoinSet::new()));
        let set = conns.clone();
        let accept = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let (rx, delays) = (rx.clone(), delays.clone());
                let mut guard = set.lock();
                // Reap finished connection tasks so the set does not grow.
                while guard.try_join_next().is_some() {}
                guard.spawn(async move {
                    let Ok(server) = TcpStream::connect(target).await else { return };
                    let _ = client.set_nodelay(true);
                    let _ = server.set_nodelay(true);
                    let (cr, cw) = client.into_split();
                    let (sr, sw) = server.into_split();
                    tokio::select! {
                        _ = pipe(cr, sw, rx.clone(), delays.clone(), |d| d.0) => {}
                        _ = pipe(sr, cw, rx, delays, |d| d.1) => {}
                    }
                });
            }
        });
        Ok(Proxy { addr, blackhole, delay, conns, accept })
    }

    /// The address clients connect to.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The port clients connect to.
    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// Close every open connection at once (new ones are accepted again).
    pub fn cut(&self) {
        self.conns.lock().abort_all();
    }

    /// Stop (`true`) or resume (`false`) forwarding bytes; connections stay open meanwhile.
    pub fn blackhole(&self, on: bool) {
        self.blackhole.send_replace(on);
    }

    /// Deliver each chunk read from now on this much later, towards the server and towards
    /// the client (order kept; bytes already read keep the delay they were read with).
    pub fn delay(&self, to_server: Duration, to_client: Duration) {
        self.delay.send_replace((to_server, to_client));
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.accept.abort();
        self.cut();
    }
}

/// Copy `from` to `to`, each chunk due its direction's delay after it was read, and held back
/// while the blackhole is on. Reading goes on meanwhile, so a delay is latency, not a slower
/// link: a chunk read later is not held behind an earlier one's delay longer than its own.
async fn pipe(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    mut blackhole: watch::Receiver<bool>,
    delays: watch::Receiver<(Duration, Duration)>,
    this_way: fn((Duration, Duration)) -> Duration,
) {
    let (tx, mut rx) = mpsc::unbounded_channel::<(Instant, Vec<u8>)>();
    let read = async move {
        let mut buf = vec![0u8; 16 * 1024];
        loop {
            // The end of the stream is delayed as data is: an empty chunk closes the other side.
            let n = from.read(&mut buf).await.unwrap_or(0);
            let due = Instant::now() + this_way(*delays.borrow());
            if tx.send((due, buf[..n].to_vec())).is_err() || n == 0 {
                return;
            }
        }
    };
    let write = async move {
        while let Some((due, chunk)) = rx.recv().await {
            // Only a chunk still due waits: tokio's timers round up to the next millisecond,
            // so a sleep until a moment already past would hold every chunk up to 1 ms (a few
            // ms per request and answer through a proxy that delays nothing).
            if due > Instant::now() {
                tokio::time::sleep_until(due).await;
            }
            if chunk.is_empty() {
                return;
            }
            if blackhole.wait_for(|on| !on).await.is_err() || to.write_all(&chunk).await.is_err() {
                return;
            }
        }
    };
    // A closed source ends the pipe when its end is delivered, after what was read before it.
    tokio::join!(read, write);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn forwards_cuts_blackholes_and_delays() {
        let echo = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let target = echo.local_addr().expect("addr");
        tokio::spawn(async move {
            while let Ok((mut s, _)) = echo.accept().await {
                tokio::spawn(async move {
                    let mut b = [0u8; 64];
                    while let Ok(n) = s.read(&mut b).await {
                        if n == 0 || s.write_all(&b[..n]).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        let p = Proxy::start(target).await.expect("proxy");
        let mut c = TcpStream::connect(p.addr()).await.expect("connect");
        let mut b = [0u8; 4];
        c.write_all(b"ping").await.expect("write");
        c.read_exact(&mut b).await.expect("echo");
        assert_eq!(&b, b"ping");
        p.blackhole(true);
        c.write_all(b"pong").await.expect("write");
        let held = tokio::time::timeout(Duration::from_millis(100), c.read_exact(&mut b)).await;
        assert!(held.is_err(), "bytes passed a blackhole");
        p.blackhole(false);
        c.read_exact(&mut b).await.expect("released after the blackhole");
        assert_eq!(&b, b"pong");
        p.delay(Duration::ZERO, Duration::from_millis(150));
        let sent = Instant::now();
        c.write_all(b"slow").await.expect("write");
        c.read_exact(&mut b).await.expect("delayed echo");
        assert!(sent.elapsed() >= Duration::from_millis(150), "echo in {:?}", sent.elapsed());
        p.delay(Duration::ZERO, Duration::ZERO);
        p.cut();
        let n = tokio::time::timeout(Duration::from_secs(1), c.read(&mut b)).await.expect("cut is seen");
        assert!(matches!(n, Ok(0) | Err(_)), "connection survived a cut");
    }
}
