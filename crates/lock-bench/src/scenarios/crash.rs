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
    let l = cx.locker().await?;
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

/// The holder's URL: with `session`, a ZooKeeper session or an etcd lease that long (their
/// defaults, 6 s and 10 s, are most of a quick run's time otherwise).
fn holder_url(url: &str, session: Option<&str>) -> String {
    let option = match (url.split_once("://").map(|(scheme, _)| scheme), session) {
        (Some("zk" | "zookeeper"), Some(s)) => format!("session_timeout={s}"),
        (Some("etcd"), Some(s)) => format!("lease_ttl={s}"),
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
