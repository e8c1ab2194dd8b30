//! One table of hostile inputs across the public API, `from_url` for every scheme and the
//! `dlock` CLI. Each gets a typed error or correct handling: never a panic, never a hang, and
//! never a password in an error message or `Debug` output.

use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use dlock::{LockError, Locker, MAX_KEY_BYTES, MultiLock};
use lock_redis_testing::shared_redis;

/// The password every hostile URL carries, raw and percent-encoded (it contains `/ ? # @ %`).
const SECRET: &str = "s3/cr?t#p@ss%w0rd";
const SECRET_ENC: &str = "s3%2Fcr%3Ft%23p%40ss%25w0rd";

fn assert_no_secret(what: &str, text: &str) {
    for needle in [SECRET, SECRET_ENC, "s3/cr", "s3%2Fcr", "p@ss", "p%40ss", "ss%25w0rd", "ss%w0rd"] {
        assert!(!text.contains(needle), "{what}: leaks the password ({needle:?}) in {text:?}");
    }
}

/// Expected outcome of one case.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Want {
    /// Works (a lock round trip where it is a key).
    Ok,
    /// `InvalidKey`.
    Key,
    /// `InvalidLease`.
    Lease,
    /// `InvalidWait`.
    Wait,
    /// `InvalidConfig`.
    Config,
    /// Any typed error (a backend error for an unreachable server is fine).
    Err,
}

fn kind(r: &Result<(), LockError>) -> Want {
    match r {
        Ok(()) => Want::Ok,
        Err(LockError::InvalidKey { .. }) => Want::Key,
        Err(LockError::InvalidLease { .. }) => Want::Lease,
        Err(LockError::InvalidWait { .. }) => Want::Wait,
        Err(LockError::InvalidConfig { .. }) => Want::Config,
        Err(_) => Want::Err,
    }
}

async fn round_trip(l: &Locker, key: &str) -> Result<(), LockError> {
    let g = l.lock(key).lease(Duration::from_secs(5)).try_acquire().await?;
    let g = g.ok_or_else(|| LockError::InvalidConfig { reason: format!("{key:?} was not free") })?;
    g.release().await
}

fn keys() -> Vec<(String, Want)> {
    let mut v: Vec<(String, Want)> = vec![
        (String::new(), Want::Key),
        ("k".repeat(MAX_KEY_BYTES + 1), Want::Key),
        ("k".repeat(1 << 20), Want::Key),
        ("nul\0byte".into(), Want::Key),
        ("\0".into(), Want::Key),
        ("bell\x07".into(), Want::Key),
        ("tab\tkey".into(), Want::Key),
        ("new\nline".into(), Want::Key),
        ("carriage\rreturn".into(), Want::Key),
        ("del\x7f".into(), Want::Key),
        ("c1\u{85}next-line".into(), Want::Key),
        ("k".repeat(MAX_KEY_BYTES), Want::Ok),
        // 254 ASCII bytes and a two-byte character: 256 bytes.
        (format!("{}é", "k".repeat(MAX_KEY_BYTES - 1)), Want::Key),
        ("{".into(), Want::Ok),
        ("}".into(), Want::Ok),
        ("{tag}rest".into(), Want::Ok),
        ("{}".into(), Want::Ok),
        ("'single".into(), Want::Ok),
        ("\"double".into(), Want::Ok),
        ("`backtick`".into(), Want::Ok),
        ("'; DROP TABLE dlock_locks; --".into(), Want::Ok),
        ("a' OR '1'='1".into(), Want::Ok),
        ("]]..'..--[[".into(), Want::Ok),
        ("redis.call('FLUSHALL')".into(), Want::Ok),
        ("*".into(), Want::Ok),
        ("?[a-z]*".into(), Want::Ok),
        ("%s%d%n".into(), Want::Ok),
        ("%00".into(), Want::Ok),
        ("/".into(), Want::Ok),
        ("//double//slash".into(), Want::Ok),
        (".".into(), Want::Ok),
        ("..".into(), Want::Ok),
        ("../../etc/passwd".into(), Want::Ok),
        ("\\back\\slash".into(), Want::Ok),
        ("zookeeper".into(), Want::Ok),
        (" leading and trailing spaces ".into(), Want::Ok),
        ("ünïcødé-ключ-锁-🔒".into(), Want::Ok),
        ("\u{202e}bidi-override".into(), Want::Ok),
        ("zero\u{200b}width".into(), Want::Ok),
        ("lock".into(), Want::Ok),
    ];
    // Look-alikes that must not alias one another.
    for k in ["ⅼock", "lоck", "LOCK", "lock ", "e\u{301}", "\u{e9}"] {
        v.push((k.into(), Want::Ok));
    }
    v
}

/// Keys on the memory backend and on a real Redis; leases and waits; a held look-alike must
/// not block its twin.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_keys_leases_and_waits() {
    let prefix = lock_testkit::conformance::key("hostile");
    let redis_url = lock_redis_testing::external_url().unwrap_or_else(|| shared_redis().url());
    let backends: Vec<(&str, Locker)> = vec![
        ("memory", Locker::new(dlock::from_url("memory://hostile").await.expect("memory"))),
        (
            "redis",
            Locker::new(
                dlock::from_url(&format!("{redis_url}?key_prefix=hostile-{prefix}:")).await.expect("redis"),
            ),
        ),
    ];
    let mut cases = 0;
    for (name, l) in &backends {
        for (k, want) in keys() {
            let got = kind(&round_trip(l, &k).await);
            assert_eq!(got, want, "{name}: key {:?}", k.chars().take(40).collect::<String>());
            cases += 1;
        }
        // Look-alikes held at once: all distinct.
        let twins = ["ⅼock", "lоck", "LOCK", "lock ", "lock", "e\u{301}", "\u{e9}"];
        let mut held = Vec::new();
        for k in twins {
            held.push(l.try_lock(k).await.expect("try").unwrap_or_else(|| panic!("{name}: {k:?} aliased")));
        }
        for g in held {
            g.release().await.expect("release");
        }
    }
    let l = &backends[0].1;
    let k = "hostile-durations";
    let leases = [
        (Duration::ZERO, Want::Lease),
        (Duration::from_nanos(1), Want::Lease),
        (Duration::from_millis(9), Want::Lease),
        (Duration::from_millis(10), Want::Ok),
        (dlock::MAX_LEASE, Want::Ok),
        (dlock::MAX_LEASE + Duration::from_nanos(1), Want::Lease),
        (Duration::MAX, Want::Lease),
    ];
    for (lease, want) in leases {
        let r = async {
            let g = l.lock(k).lease(lease).try_acquire().await?.expect("free");
            g.release().await
        };
        assert_eq!(kind(&r.await), want, "lease {lease:?}");
        cases += 1;
    }
    let waits = [
        (Duration::ZERO, Want::Ok),
        (Duration::from_nanos(1), Want::Ok),
        (dlock::MAX_WAIT, Want::Ok),
        (dlock::MAX_WAIT + Duration::from_nanos(1), Want::Wait),
        (Duration::MAX, Want::Wait),
    ];
    for (wait, want) in waits {
        let r = async { l.lock(k).wait(wait).acquire().await?.release().await };
        assert_eq!(kind(&r.await), want, "wait {wait:?}");
        let m = async { MultiLock::new().with(l, k).acquire(wait, None).await?.release().await };
        assert_eq!(kind(&m.await), want, "multi-lock wait {wait:?}");
        cases += 2;
    }
    let mem = || Locker::new(Arc::new(dlock::MemoryBackend::new()));
    for (what, r) in [
        ("watchdog lease 0", mem().with_watchdog_lease(Duration::ZERO).map(drop)),
        ("watchdog lease MAX", mem().with_watchdog_lease(Duration::MAX).map(drop)),
        ("drift rate -1", mem().with_clock_drift(-1.0, Duration::ZERO).map(drop)),
        ("drift rate NaN", mem().with_clock_drift(f64::NAN, Duration::MAX).map(drop)),
        ("drift rate inf", mem().with_clock_drift(f64::INFINITY, Duration::MAX).map(drop)),
    ] {
        assert!(
            matches!(r, Err(LockError::InvalidLease { .. } | LockError::InvalidConfig { .. })),
            "{what}: {r:?}"
        );
        cases += 1;
    }
    let slow = mem().with_poll_backoff(Duration::MAX, Duration::MAX);
    slow.try_lock(k).await.expect("saturated poll bounds").expect("free").release().await.expect("release");
    cases += 1;
    eprintln!("{cases} key, lease and wait cases");
    assert!(cases >= 100);
}

/// Hostile URLs for every scheme: each a typed error within a bounded time, no panic, and no
/// password in `Display` or `Debug`. Servers named here are unreachable (port 1 refuses).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_urls() {
    let p = SECRET_ENC;
    let urls: Vec<(String, Want)> = vec![
        (String::new(), Want::Config),
        ("redis".into(), Want::Config),
        ("://".into(), Want::Config),
        ("nosuch://h:1/".into(), Want::Config),
        ("http://h:1/".into(), Want::Config),
        ("redis://".into(), Want::Err),
        ("redis://127.0.0.1:99999/".into(), Want::Err),
        ("redis://127.0.0.1:-1/".into(), Want::Err),
        ("redis://127.0.0.1:port/".into(), Want::Err),
        ("redis://[::1/".into(), Want::Err),
        ("redis://[::1]:1/".into(), Want::Err),
        ("redis://127.0.0.1:1/?mode=bogus".into(), Want::Config),
        ("redis://127.0.0.1:1/?mode=".into(), Want::Config),
        (format!("redis://user:{p}@127.0.0.1:1/"), Want::Err),
        (format!("redis://:{p}@127.0.0.1:1/0"), Want::Err),
        (format!("redis://user:{SECRET}@127.0.0.1:1/"), Want::Err),
        (format!("rediss://user:{p}@127.0.0.1:1/"), Want::Err),
        ("redis://127.0.0.1:1/?key_prefix={bad}".into(), Want::Config),
        ("redlock://".into(), Want::Config),
        ("redlock:///?mode=simple".into(), Want::Config),
        ("redlock://127.0.0.1:1,127.0.0.1:2/?mode=fair".into(), Want::Config),
        (format!("redlock://u:{p}@127.0.0.1:1,127.0.0.1:2,127.0.0.1:3/"), Want::Err),
        (format!("redlock://u:{SECRET}@127.0.0.1:1,127.0.0.1:2,127.0.0.1:3/"), Want::Err),
        ("mysql://".into(), Want::Err),
        ("mysql://127.0.0.1:99999/db".into(), Want::Err),
        ("mysql://127.0.0.1:1/db?mode=bogus".into(), Want::Config),
        (format!("mysql://root:{p}@127.0.0.1:1/db"), Want::Err),
        (format!("mariadb://root:{p}@127.0.0.1:1/db?mode=optimistic"), Want::Err),
        (format!("mysql://root:{SECRET}@127.0.0.1:1/db"), Want::Err),
        ("zk://".into(), Want::Config),
        ("zk://127.0.0.1:99999/root".into(), Want::Config),
        ("zk://127.0.0.1:port/root".into(), Want::Config),
        ("zk://127.0.0.1:1,:2/root".into(), Want::Config),
        ("zk://127.0.0.1:1/root?session_timeout_ms=abc".into(), Want::Config),
        ("zk://127.0.0.1:1/root?bogus=1".into(), Want::Config),
        (format!("zk://u:{p}@127.0.0.1:1/root"), Want::Err),
        ("memory://".into(), Want::Ok),
        ("memory://name/with/slashes".into(), Want::Ok),
    ];
    let mut n = 0;
    for (url, want) in urls {
        let shown = dlock::redact_url(&url);
        assert_no_secret(&format!("redact_url({url:?})"), &shown);
        let t = std::time::Instant::now();
        let r = tokio::time::timeout(
            Duration::from_secs(15),
            tokio::spawn({
                let url = url.clone();
                async move { dlock::from_url(&url).await.map(|b| format!("{b:?}")) }
            }),
        )
        .await
        .unwrap_or_else(|_| panic!("from_url({shown:?}) hung"));
        let r = r.unwrap_or_else(|e| panic!("from_url({shown:?}) panicked: {e}"));
        match &r {
            Ok(debug) => assert_no_secret(&shown, debug),
            Err(e) => {
                assert_no_secret(&shown, &e.to_string());
                assert_no_secret(&shown, &format!("{e:?}"));
                let mut src = std::error::Error::source(e);
                while let Some(s) = src {
                    assert_no_secret(&shown, &s.to_string());
                    src = s.source();
                }
            }
        }
        eprintln!("{shown:?}: {:?} in {:?}", r.as_ref().map(drop).map_err(ToString::to_string), t.elapsed());
        let got = kind(&r.map(drop));
        assert!(
            got == want || (want == Want::Err && got == Want::Config),
            "{shown:?}: wanted {want:?}, got {got:?}"
        );
        n += 1;
    }
    eprintln!("{n} URL cases");
}

/// The CLI with hostile arguments: a usage or configuration exit code, never a panic (exit
/// 101) and never a password on stderr.
#[test]
fn hostile_cli_arguments() {
    let p = SECRET_ENC;
    let run = |url: &str, key: &str, extra: &[&str]| -> Vec<String> {
        let mut v: Vec<String> = ["run", "--url", url, "--key", key].map(String::from).to_vec();
        v.extend(extra.iter().map(|s| s.to_string()));
        v
    };
    let cases: Vec<Vec<String>> = vec![
        vec![],
        vec!["nosuch".into()],
        vec!["run".into()],
        run("memory://x", "k", &[]),
        run("memory://x", "", &["--", "true"]),
        run("redis://127.0.0.1:1/", "k", &["--wait", "abc", "--", "true"]),
        run("redis://127.0.0.1:1/", "k", &["--wait", "99999999999d", "--", "true"]),
        run(&format!("redis://u:{p}@127.0.0.1:1/"), "k", &["--wait", "1s", "--", "true"]),
        run(&format!("mysql://u:{p}@127.0.0.1:1/db"), "k", &["--wait", "1s", "--", "true"]),
        ["status", "--url", &format!("redis://u:{SECRET}@127.0.0.1:1/"), "--key", "k"]
            .map(String::from)
            .to_vec(),
        run("nosuch://x", "k", &["--", "true"]),
        run("memory://x", "nul\u{1}", &["--", "true"]),
    ];
    for args in &cases {
        let out = Command::new(env!("CARGO_BIN_EXE_dlock")).args(args).output().expect("run dlock");
        let stderr = String::from_utf8_lossy(&out.stderr);
        let code = out.status.code();
        assert_ne!(code, Some(101), "dlock {args:?} panicked: {stderr}");
        assert_ne!(code, Some(0), "dlock {args:?} must fail");
        assert!(code.is_some(), "dlock {args:?} died by a signal");
        assert_no_secret(&format!("dlock {args:?}"), &stderr);
        assert_no_secret(&format!("dlock {args:?}"), &String::from_utf8_lossy(&out.stdout));
    }
    eprintln!("{} CLI cases", cases.len());
}

/// An `@` in a URL option is the option's, not the end of credentials: `?key_prefix=ops@x` on
/// a real Redis names a key space of its own (two clients of it exclude each other; a client
/// without the prefix does not see their lock), instead of turning the host into a password.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_at_sign_in_an_option_is_the_options() {
    let url = lock_redis_testing::external_url().unwrap_or_else(|| shared_redis().url());
    let base = url.split('?').next().unwrap_or(&url).trim_end_matches('/').to_owned();
    let prefixed = format!("{base}/0?key_prefix=ops@x");
    let connect = |u: String| async move { Locker::new(dlock::from_url(&u).await.expect("connect")) };
    let (a, b, plain) = (connect(prefixed.clone()).await, connect(prefixed).await, connect(base).await);
    let key = lock_testkit::conformance::key("at_in_option");
    let held = a.lock(key.as_str()).try_acquire().await.expect("try").expect("free");
    assert!(b.lock(key.as_str()).try_acquire().await.expect("try").is_none(), "one key space");
    let other = plain.lock(key.as_str()).try_acquire().await.expect("try").expect("another key space");
    other.release().await.expect("release");
    held.release().await.expect("release");
}
