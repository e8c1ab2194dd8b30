//! kazoo's `ReadLock`/`WriteLock` and `Semaphore` (Python) on the `zk` target's server, in the
//! same run: the library's read-mostly mix and its semaphore mix (`primitives.rs`), one thread
//! and one `KazooClient` per bench client in one Python process (`peers/kazoo_bench.py`, in the
//! test kit's pinned venv), waits timed in Python. The other scenarios are not run on it.

use std::process::Stdio;
use std::time::Duration;

use lock_testkit::interop::python;

use super::Ctx;
use super::curator::{SESSION, connect_string, mix_answer};
use super::primitives::{CLIENTS, PERMITS, WRITE_EVERY, rwlock_rows, semaphore_row};
use crate::error::{BenchError, Result};
use crate::row::Row;

/// The script, next to this crate's sources.
const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/peers/kazoo_bench.py");
/// Where kazoo's nodes go (outside the library's `dlock-bench` root).
const ROOT: &str = "/dlock-bench-kazoo";
/// The longest a mix may take beyond its own duration (connecting 8 clients included).
const SLACK: Duration = Duration::from_secs(120);

/// One scenario of the table on the kazoo target.
pub async fn run(cx: &Ctx<'_>, scenario: &str) -> Result<Vec<Row>> {
    let ms = cx.sizes.contended_for.as_millis();
    let path = format!("{ROOT}/{}", cx.key("kazoo"));
    let (kind, args, prefix) = match scenario {
        "rwlock" => ("rw", format!("{CLIENTS} {ms} {WRITE_EVERY}"), "RWSAMPLES"),
        "semaphore" => ("sem", format!("{CLIENTS} {PERMITS} {ms}"), "SEMSAMPLES"),
        other => {
            return Ok(vec![skipped(cx, other, "n/a: kazoo runs the read-write lock and the semaphore")]);
        }
    };
    let Some(python) = python() else {
        return Ok(vec![skipped(cx, scenario, "n/a: no Python venv with kazoo (scripts/interop-venv.sh)")]);
    };
    let mut command = tokio::process::Command::new(python);
    command.arg(SCRIPT).args([kind, connect_string(&cx.target.url)]);
    command.arg(SESSION.as_millis().to_string()).arg(&path).args(args.split(' '));
    command.stdin(Stdio::null()).stderr(Stdio::inherit()).kill_on_drop(true);
    let limit = cx.sizes.contended_for + SLACK;
    let out = tokio::time::timeout(limit, command.output())
        .await
        .map_err(|_| BenchError::Peer(format!("kazoo {kind} mix ran past {limit:?}")))?
        .map_err(|e| BenchError::Peer(format!("kazoo {kind} mix: {e}")))?;
    let line = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    if !line.starts_with(prefix) {
        return Err(BenchError::Peer(format!("kazoo answered {line:.200}")));
    }
    let (secs, lists) = mix_answer(&line)?;
    match (scenario, &lists[..]) {
        ("rwlock", [reads, writes]) => Ok(rwlock_rows(cx.target, (reads, writes), secs, true).into()),
        ("semaphore", [waits]) => Ok(vec![semaphore_row(cx.target, waits, secs)]),
        _ => Err(BenchError::Peer(format!("kazoo's {kind} mix answered {} lists", lists.len()))),
    }
}

/// A row that says why `scenario` is not run on kazoo.
fn skipped(cx: &Ctx<'_>, scenario: &str, why: &str) -> Row {
    let mut row = Row::new(cx.target, scenario, why);
    row.extra.insert("skipped".into(), true.into());
    row
}
