//! `dlock status` and `dlock unlock --force` on MariaDB's session-bound modes, through the real
//! binary: `GET_LOCK` (`?mode=get_lock`) and row locks (`?mode=pessimistic`). The hold is
//! named by the fence its holder noted with it; unlock ends the holding session (`KILL
//! CONNECTION`) once the server shows that hold, the holder's command is stopped (exit 76) and
//! the next holder's fence is larger. Killing another user's session needs `CONNECTION ADMIN`:
//! without it unlock exits 77 and the holder runs on.

use std::path::Path;
use std::process::{Child, Output};
use std::time::Duration;

use lock_mysql_testing::shared_mariadb;
use nix::sys::signal::{Signal, kill};

use crate::common;

use common::{dlock, key, pid, spawn_holder, wait_exit, wait_for};

const MODES: [&str; 2] = ["get_lock", "pessimistic"];

fn url(mode: &str) -> String {
    format!("{}?mode={mode}", shared_mariadb().url())
}

fn text(out: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

/// `dlock run` of a command that writes its fencing token to `$D/fence` and then sleeps; its
/// fence once the command runs.
fn holder(dir: &Path, url: &str, key: &str) -> (Child, u64) {
    let args = ["--url", url, "--key", key, "--lease", "1s", "--on-lost", "TERM:500ms"];
    let args = [&args[..], &["--holder-label", "stuck-job"]].concat();
    let child = spawn_holder(dir, &args, "echo $DLOCK_FENCING_TOKEN > \"$D/fence\"");
    let fence_file = dir.join("fence");
    wait_for("the command runs", Duration::from_secs(30), || {
        std::fs::read_to_string(&fence_file).is_ok_and(|f| f.ends_with('\n'))
    });
    let fence = std::fs::read_to_string(&fence_file).expect("fence").trim().parse().expect("a fence");
    (child, fence)
}

#[test]
fn status_shows_and_unlock_evicts_a_session_holder_by_its_fence() {
    for mode in MODES {
        let (url, k) = (url(mode), key(&format!("force-{mode}")));
        let free = dlock(&["status", "--url", &url, "--key", &k]);
        assert_eq!(free.status.code(), Some(0), "{mode}: {}", text(&free));
        assert!(text(&free).contains("free"), "{mode}: {}", text(&free));

        let dir = tempfile::tempdir().expect("tmp");
        let (mut child, fence) = holder(dir.path(), &url, &k);
        let status = dlock(&["status", "--url", &url, "--key", &k, "--json"]);
        let shown = text(&status);
        assert!(shown.contains("\"held\":true"), "{mode}: {shown}");
        assert!(shown.contains(&format!("\"fence\":{fence}")), "{mode}: the holder's fence: {shown}");
        assert!(shown.contains("connection "), "{mode}: the holding session: {shown}");

        let out = dlock(&["unlock", "--url", &url, "--key", &k, "--force", "--json"]);
        let said = text(&out);
        assert_eq!(out.status.code(), Some(0), "{mode}: {said}");
        assert!(said.contains("\"evicted\":true"), "{mode}: {said}");
        assert!(said.contains(&format!("\"fence\":{fence}")), "{mode}: the inspected hold: {said}");
        assert!(said.contains(&format!(":{} cmd=sh label=stuck-job", child.id())), "{mode}: {said}");
        // The holder's keeper finds its session gone at its next ping: the command is stopped.
        assert_eq!(wait_exit(&mut child, Duration::from_secs(15)).code(), Some(76), "{mode}: lost");

        let next = ["run", "--url", &url, "--key", &k, "--wait", "10s", "--", "sh", "-c"];
        let next = dlock(&[&next[..], &["echo $DLOCK_FENCING_TOKEN"]].concat());
        assert_eq!(next.status.code(), Some(0), "{mode}: {}", text(&next));
        let after: u64 =
            String::from_utf8_lossy(&next.stdout).trim().parse().expect("the next holder's fence");
        assert!(after > fence, "{mode}: {after} after evicting {fence}");
        let again = dlock(&["unlock", "--url", &url, "--key", &k, "--force"]);
        assert_eq!(again.status.code(), Some(0), "{mode}: {}", text(&again));
        assert!(text(&again).contains("free, nothing to evict"), "{mode}: {}", text(&again));
    }
}

#[test]
fn killing_another_users_holder_needs_connection_admin() {
    let server = shared_mariadb();
    server
        .exec_as_root(
            "CREATE USER IF NOT EXISTS 'dlock_ops'@'%' IDENTIFIED BY 'opspw'; \
             GRANT ALL PRIVILEGES ON `locktest`.* TO 'dlock_ops'@'%';",
        )
        .expect("a second user");
    for mode in MODES {
        let k = key(&format!("force-denied-{mode}"));
        let dir = tempfile::tempdir().expect("tmp");
        let (mut child, _) = holder(dir.path(), &url(mode), &k);
        let ops = format!("mysql://dlock_ops:opspw@127.0.0.1:{}/locktest?mode={mode}", server.port());
        let out = dlock(&["unlock", "--url", &ops, "--key", &k, "--force"]);
        let said = text(&out);
        assert_eq!(out.status.code(), Some(77), "{mode}: {said}");
        assert!(said.contains("not owner of thread"), "{mode}: the server's refusal: {said}");
        assert!(child.try_wait().expect("wait").is_none(), "{mode}: the holder runs on");
        kill(pid(&child), Signal::SIGTERM).expect("SIGTERM");
        assert_eq!(wait_exit(&mut child, Duration::from_secs(10)).code(), Some(143), "{mode}");
    }
}
