//! No secret in logs, errors or `Debug` output: failures and successful lock round trips with
//! known passwords (wrong and right, raw and percent-encoded, with `/ ? # @ %` in them) while
//! every `tracing` event down to TRACE is captured; the password appears nowhere.

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use dlock::{LockError, Locker};
use lock_testkit::server::{MARIADB_DATABASE, MariaDbServer, RedisServer};

#[derive(Clone, Default)]
struct Buf(Arc<Mutex<Vec<u8>>>);

impl Write for Buf {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

const SECRETS: &[&str] =
    &["Ri9ht/pw?#@%x", "Ri9ht%2Fpw%3F%23%40%25x", "Wr0ng/pw?#@%y", "Wr0ng%2Fpw%3F%23%40%25y"];

fn text(e: &LockError) -> String {
    let mut s = format!("{e} | {e:?}");
    let mut src = std::error::Error::source(e);
    while let Some(x) = src {
        s.push_str(&format!(" | {x} | {x:?}"));
        src = x.source();
    }
    s
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_password_in_logs_errors_or_debug() {
    let buf = Buf::default();
    let writer = buf.clone();
    tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_max_level(tracing::Level::TRACE)
        .with_ansi(false)
        .init();
    let mut seen = Vec::new();

    // Redis with a password that needs percent-encoding in a URL.
    let raw = "Ri9ht/pw?#@%x";
    let redis = RedisServer::start_with(&["--requirepass", raw]).expect("redis");
    let ok = format!("redis://:{}@127.0.0.1:{}/", SECRETS[1], redis.port());
    let b = dlock::from_url(&ok).await.expect("right password");
    seen.push(format!("{b:?}"));
    let l = Locker::new(b).with_watchdog_lease(Duration::from_millis(300)).expect("lease");
    let g = l.lock("secrets").wait(Duration::from_secs(2)).acquire().await.expect("acquire");
    tokio::time::sleep(Duration::from_millis(250)).await; // a renewal or two, logged at TRACE
    g.release().await.expect("release");
    for url in [
        format!("redis://:{}@127.0.0.1:{}/", SECRETS[3], redis.port()),
        format!("redis://user:{}@127.0.0.1:{}/", SECRETS[2], redis.port()),
        format!("redlock://:{}@127.0.0.1:{},127.0.0.1:1/", SECRETS[3], redis.port()),
    ] {
        match dlock::from_url(&url).await {
            Ok(b) => seen.push(format!("{b:?}")),
            Err(e) => seen.push(text(&e)),
        }
    }

    // MariaDB: a user whose password has the same characters.
    let maria = MariaDbServer::start().expect("mariadb");
    maria
        .exec_as_root(&format!(
            "CREATE USER 'sec'@'%' IDENTIFIED BY '{raw}'; GRANT ALL ON {MARIADB_DATABASE}.* TO 'sec'@'%';"
        ))
        .expect("user");
    let ok = format!("mysql://sec:{}@127.0.0.1:{}/{MARIADB_DATABASE}", SECRETS[1], maria.port());
    for mode in ["pessimistic", "optimistic"] {
        let b = dlock::from_url(&format!("{ok}?mode={mode}")).await.expect("right password");
        seen.push(format!("{b:?}"));
        let l = Locker::new(b);
        l.try_lock("secrets").await.expect("try").expect("free").release().await.expect("release");
    }
    for url in [
        format!("mysql://sec:{}@127.0.0.1:{}/{MARIADB_DATABASE}", SECRETS[3], maria.port()),
        format!("mysql://sec:{}@127.0.0.1:{}/{MARIADB_DATABASE}", SECRETS[2], maria.port()),
        format!("mysql://sec:{}@127.0.0.1:{}/nosuchdb", SECRETS[1], maria.port()),
    ] {
        match dlock::from_url(&url).await {
            Ok(b) => seen.push(format!("{b:?}")),
            Err(e) => seen.push(text(&e)),
        }
    }
    // ZooKeeper digest credentials in the URL, against nothing listening.
    let zk = format!("zk://u:{}@127.0.0.1:1/root", SECRETS[1]);
    if let Ok(Err(e)) = tokio::time::timeout(Duration::from_secs(10), dlock::from_url(&zk)).await {
        seen.push(text(&e));
    }

    let logs = String::from_utf8_lossy(&buf.0.lock().unwrap_or_else(|e| e.into_inner())).into_owned();
    assert!(logs.contains("lock acquired"), "TRACE logs were not captured");
    let everything = format!("{logs}\n{}", seen.join("\n"));
    for s in SECRETS.iter().chain(&["Ri9ht", "Wr0ng"]) {
        assert!(!everything.contains(s), "{s:?} leaked:\n{everything}");
    }
    eprintln!("checked {} bytes of logs and {} errors/Debug strings", logs.len(), seen.len());
}
