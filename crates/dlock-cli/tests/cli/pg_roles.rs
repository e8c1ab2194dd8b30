//! PostgreSQL with a second application role, through the real binary: a role that does not own
//! the library's tables (made by the first role's build) needs exactly the grants of
//! lock-postgres's README, "Least-privilege setup". Without them it gets 77 with the missing
//! GRANT named; with them `dlock run` and `dlock status` work, and evicting another role's
//! holder needs `pg_signal_backend` as well.

use std::process::Output;
use std::time::Duration;

use lock_postgres_testing::shared_postgres;

use crate::common;

use common::{dlock, key, spawn_holder, wait_exit, wait_for};

fn text(out: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

/// `dlock run --url url --key k -- sh -c 'echo $DLOCK_FENCING_TOKEN'`.
fn run(url: &str, k: &str) -> Output {
    dlock(&["run", "--url", url, "--key", k, "--", "sh", "-c", "echo $DLOCK_FENCING_TOKEN"])
}

/// The README's grants, for the second role.
const GRANTS: [&str; 3] = [
    "GRANT SELECT, INSERT, UPDATE ON dlock_fence TO dlock_app2",
    "GRANT SELECT, INSERT, UPDATE, DELETE ON dlock_fence_recs TO dlock_app2",
    "GRANT SELECT, INSERT, UPDATE ON dlock_fence_epoch, dlock_fence_boot TO dlock_app2",
];

#[test]
fn a_second_role_works_with_exactly_the_documented_grants() {
    let pg = shared_postgres();
    let owner = pg.url();
    let k = key("pg-second-role");
    // The first role's build creates the tables, which it then owns.
    let first = run(&owner, &k);
    assert_eq!(first.status.code(), Some(0), "{}", text(&first));
    pg.exec_as_admin(&["CREATE ROLE dlock_app2 LOGIN PASSWORD 'app2pw'"]).expect("a second role");
    let app2 = owner.replacen("lock:lockpw@", "dlock_app2:app2pw@", 1);
    assert_ne!(app2, owner);

    let denied = run(&app2, &k);
    let said = text(&denied);
    assert_eq!(denied.status.code(), Some(77), "{said}");
    assert!(said.contains("permission denied for table dlock_fence"), "{said}");
    assert!(said.contains("GRANT SELECT, INSERT, UPDATE ON dlock_fence TO"), "the missing grant: {said}");
    let status = dlock(&["status", "--url", &app2, "--key", &k]);
    assert_eq!(status.status.code(), Some(77), "{}", text(&status));

    pg.exec_as_admin(&GRANTS).expect("grants");
    let granted = run(&app2, &k);
    assert_eq!(granted.status.code(), Some(0), "{}", text(&granted));
    let fence: u64 = String::from_utf8_lossy(&granted.stdout).trim().parse().expect("a fence");
    assert!(fence > 1, "the key's counter, shared with the first role: {fence}");
    let free = dlock(&["status", "--url", &app2, "--key", &k]);
    assert_eq!(free.status.code(), Some(0), "{}", text(&free));
    let permits =
        ["run", "--url", &app2, "--key", &key("pg-second-role-sem"), "--permits", "2", "--", "true"];
    let permit = dlock(&permits);
    assert_eq!(permit.status.code(), Some(0), "a semaphore's stored count: {}", text(&permit));

    // A holder of the first role, seen by the second, and evicted by it once it may signal.
    let dir = tempfile::tempdir().expect("tmp");
    let args =
        ["--url", &owner, "--key", &k, "--lease", "1s", "--on-lost", "TERM:500ms", "--holder-label", "first"];
    let mut holder = spawn_holder(dir.path(), &args, "echo $DLOCK_FENCING_TOKEN > \"$D/fence\"");
    let fence_file = dir.path().join("fence");
    wait_for("the holder runs", Duration::from_secs(30), || {
        std::fs::read_to_string(&fence_file).is_ok_and(|f| f.ends_with('\n'))
    });
    let held = dlock(&["status", "--url", &app2, "--key", &k]);
    assert_eq!(held.status.code(), Some(1), "{}", text(&held));
    assert!(text(&held).contains("label=first"), "the holder's note: {}", text(&held));
    let refused = dlock(&["unlock", "--url", &app2, "--key", &k, "--force"]);
    let said = text(&refused);
    assert_eq!(refused.status.code(), Some(77), "{said}");
    assert!(said.contains("pg_signal_backend"), "the missing grant: {said}");
    assert!(holder.try_wait().expect("wait").is_none(), "the holder runs on");
    pg.exec_as_admin(&["GRANT pg_signal_backend TO dlock_app2"]).expect("grant");
    let evicted = dlock(&["unlock", "--url", &app2, "--key", &k, "--force"]);
    assert_eq!(evicted.status.code(), Some(0), "{}", text(&evicted));
    assert_eq!(wait_exit(&mut holder, Duration::from_secs(15)).code(), Some(76), "the holder is told");
}
