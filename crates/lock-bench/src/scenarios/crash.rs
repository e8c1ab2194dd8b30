//! Crash recovery: a holder *process* is SIGKILLed; how long until another client holds the
//! lock. The holder is this binary's hidden `__hold` command.

use std::process::{ExitCode, Stdio};
use std::time::Duration;

use dlock::Locker;
use tokio::io::AsyncBufReadExt;
use tokio::time::Instant;

use super::Ctx;
use crate::error::{BenchError, Result};
use crate::row::Row;

/// The holder's lease: recovery by expiry takes about this long.
const HOLDER_LEASE: Duration = Duration::from_secs(1);

/// How long the holder may take to connect and acquire.
const HOLDER_START: Duration = Duration::from_secs(30);

/// A holder process is SIGKILLed; time until another client holds the lock.
pub async fn crash(cx: &Ctx<'_>) -> Result<Vec<Row>> {
    let key = cx.key("x");
    let exe = std::env::current_exe().map_err(BenchError::io("cannot find this executable"))?;
    let url = &holder_url(&cx.target.url, cx.sizes.crash_session);
    let mut child = tokio::process::Command::new(exe)
        .args(["__hold", "--url", url, "--key", &key, "--lease-ms"])
        .arg(HOLDER_LEASE.as_millis().to_string())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(BenchError::io("cannot start the holder process"))?;
    let stdout = child.stdout.take().ok_or(BenchError::HolderAnswer(String::new()))?;
    let mut line = String::new();
    let mut reader = tokio::io::BufReader::new(stdout);
    tokio::time::timeout(HOLDER_START, reader.read_line(&mut line))
        .await
        .map_err(|_| BenchError::HolderSilent(HOLDER_START))?
        .map_err(BenchError::io("cannot read the holder's output"))?;
    if !line.starts_with("held") {
        return Err(BenchError::HolderAnswer(line));
    }
    // The waiter on the holder's lock space (a NATS bucket of its own, see `holder_url`).
    let l = match url == &cx.target.url {
        true => cx.locker().await?,
        false => Locker::new(dlock::from_url(url).await?),
    };
    // A store whose locks another process cannot see (an in-process table) has nothing to
    // recover: the lock dies with its holder.
    if let Some(g) = l.try_lock(&key).await? {
        g.release().await?;
        let mut row = Row::new(cx.target, "crash recovery", "n/a: an in-process table dies with its holder");
        row.extra.insert("skipped".into(), true.into());
        return Ok(vec![row]);
    }
    child.start_kill().map_err(BenchError::io("cannot kill the holder process"))?;
    let killed = Instant::now();
    let g = l.lock(&key).wait(Duration::from_secs(60)).acquire().await?;
    let took = killed.elapsed();
    g.release().await?;
    let _ = child.wait().await;
    let mut row = Row::new(cx.target, "crash recovery", "holder SIGKILLed -> next holder (ms)");
    row.value = Some(took.as_secs_f64() * 1000.0);
    row.extra.insert("holder_lease_ms".into(), (HOLDER_LEASE.as_millis() as u64).into());
    if url != &cx.target.url {
        row.extra.insert("holder_url".into(), url.clone().into());
    }
    Ok(vec![row])
}

/// The holder's URL: with `session`, a ZooKeeper session or an etcd or NATS lease that long
/// (their defaults, 6 s and 10 s, are most of a quick run's time otherwise). A NATS lease is
/// its bucket's max age, fixed when the bucket is made, so the crash gets a bucket of its own.
fn holder_url(url: &str, session: Option<&str>) -> String {
    let scheme = url.split_once("://").map(|(scheme, _)| scheme);
    let (url, option) = match (scheme, session) {
        (Some("zk" | "zookeeper"), Some(s)) => (url.to_owned(), format!("session_timeout={s}")),
        (Some("etcd"), Some(s)) => (url.to_owned(), format!("lease_ttl={s}")),
        (Some("nats" | "nats+tls"), Some(s)) => {
            let (base, query) = url.split_once('?').map_or((url, None), |(b, q)| (b, Some(q)));
            let base = base.trim_end_matches('/');
            // No bucket named: the default one, whose lease the crash cannot shorten.
            if !base.split_once("://").is_some_and(|(_, rest)| rest.contains('/')) {
                return url.to_owned();
            }
            let crash = format!("{base}-crash");
            (query.map_or_else(|| crash.clone(), |q| format!("{crash}?{q}")), format!("lease_ttl={s}"))
        }
        _ => return url.to_owned(),
    };
    let sep = if url.contains('?') { '&' } else { '?' };
    format!("{url}{sep}{option}")
}

/// The hidden `__hold` command: acquire `key`, print `held [<fence>]`, and wait to be killed.
pub async fn hold(url: &str, key: &str, lease: Duration) -> ExitCode {
    let held = async {
        let locker = Locker::new(dlock::from_url(url).await?).with_watchdog_lease(lease)?;
        locker.lock(key).wait(HOLDER_START).acquire().await
    };
    match held.await {
        Ok(g) => {
            match g.fence() {
                Some(f) => println!("held {f}"),
                None => println!("held"),
            }
            std::future::pending::<()>().await;
            drop(g);
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!(
                "lock-bench: {} (url {})",
                BenchError::from(e).chain(),
                dlock::backend::redact::redact_url(url)
            );
            ExitCode::from(1)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::holder_url;

    #[test]
    fn a_quick_crash_shortens_the_session_where_the_url_can() {
        let zk = holder_url("zk://127.0.0.1:2181/b", Some("2s"));
        assert_eq!(zk, "zk://127.0.0.1:2181/b?session_timeout=2s");
        assert_eq!(holder_url("etcd://h:1/p?x=1", Some("2s")), "etcd://h:1/p?x=1&lease_ttl=2s");
        let nats = holder_url("nats://h:4222/dlock-bench", Some("2s"));
        assert_eq!(nats, "nats://h:4222/dlock-bench-crash?lease_ttl=2s");
        let nats = holder_url("nats://h:4222/b?request_timeout=1s", Some("2s"));
        assert_eq!(nats, "nats://h:4222/b-crash?request_timeout=1s&lease_ttl=2s");
        assert_eq!(holder_url("nats://h:4222", Some("2s")), "nats://h:4222");
        assert_eq!(holder_url("redis://h:6379", Some("2s")), "redis://h:6379");
        assert_eq!(holder_url("nats://h:4222/b", None), "nats://h:4222/b");
    }
}
