//! The operator verbs against a store that accepts connections and never answers (a listener
//! nobody reads: the hardest stall, since nothing fails): `status`, `list` and `unlock` each
//! exit 69 (unavailable) within the store's response bound, never hang.
//!
//! Run: `cargo test -p dlock-cli --test cli silent_store::`.

use std::process::Command;
use std::time::{Duration, Instant};

/// What a loaded machine may add to a store's bound (process start included).
const SLACK: Duration = Duration::from_millis(1500);

#[test]
fn operator_verbs_answer_a_silent_store_within_its_bound() {
    let silent = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = silent.local_addr().expect("addr").port();
    // Each store's bound for a call without a deadline (README, "Every call answers in time"):
    // connecting is bounded the same way.
    let stores = [
        (format!("redis://127.0.0.1:{port}/"), Duration::from_secs(2)),
        (format!("mysql://u:pw@127.0.0.1:{port}/db"), Duration::from_secs(5)),
        (format!("postgres://u:pw@127.0.0.1:{port}/db"), Duration::from_secs(5)),
        (format!("zk://127.0.0.1:{port}/"), Duration::from_secs(3)),
        (format!("etcd://127.0.0.1:{port}/p"), Duration::from_secs(5)),
    ];
    let verbs: [&[&str]; 3] = [&["status", "--key", "k"], &["list"], &["unlock", "--force", "--key", "k"]];
    // All at once: the run costs the slowest store's bound, not their sum.
    let mut runs = Vec::new();
    for (url, bound) in &stores {
        for verb in verbs {
            let (url, bound, verb) = (url.clone(), *bound, verb.to_vec());
            runs.push(std::thread::spawn(move || {
                let t = Instant::now();
                let out = Command::new(env!("CARGO_BIN_EXE_dlock"))
                    .arg(verb[0])
                    .args(["--url", &url])
                    .args(&verb[1..])
                    .output()
                    .expect("dlock");
                (url, verb[0].to_owned(), bound, t.elapsed(), out)
            }));
        }
    }
    let mut wrong = Vec::new();
    for r in runs {
        let (url, verb, bound, took, out) = r.join().expect("thread");
        let scheme = url.split(':').next().unwrap_or_default().to_owned();
        println!("{scheme} {verb}: exit {:?} after {took:.2?} (bound {bound:?})", out.status.code());
        if out.status.code() != Some(69) {
            wrong.push(format!(
                "{scheme} {verb}: exit {:?}: {}",
                out.status.code(),
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        if took > bound + SLACK {
            wrong.push(format!("{scheme} {verb}: answered after {took:.2?}, bound {bound:?}"));
        }
        assert!(!String::from_utf8_lossy(&out.stderr).contains("pw@"), "a password in the output");
    }
    drop(silent);
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}
