//! `dlock unlock --force`: take a lock away from its holder, safely: the hold is named by the
//! fence `dlock status` would show, so a holder nobody looked at is never evicted, and the
//! evicted holder is told at its next renewal (`dlock run` then applies `--on-lost`).

use std::io::{BufRead, IsTerminal, Write};
use std::process::ExitCode;

use dlock::DynBackend;
use dlock::backend::LockInfo;
use serde_json::json;

use crate::EXIT_UNSUPPORTED;
use crate::run::fail;
use crate::status::{connect, noted};

/// Evict the holder of `key` (after asking, when stdin is a terminal and `yes` is not given).
/// Exit 0 when it was evicted or the key was free, 1 when nothing was evicted (declined, or the
/// lock changed hands since it was inspected), 78 when the store cannot name or take the hold.
pub async fn unlock(url: &str, key: &str, yes: bool, json: bool) -> ExitCode {
    let backend = match connect(url, Some(key)).await {
        Ok(b) => b,
        Err(code) => return code,
    };
    let info = match backend.inspect(key).await {
        Ok(i) => i,
        Err(e) => return fail(url, &e),
    };
    let report = |evicted: bool, holder: &Option<String>| {
        if json {
            let v = json!({
                "key": key,
                "backend": backend.name(),
                "evicted": evicted,
                "fence": info.fence.map(|f| f.0),
                "owner": info.owner,
                "holder": holder,
            });
            println!("{v}");
        }
    };
    if !info.held {
        report(false, &None);
        if !json {
            println!("{key}: free, nothing to evict ({})", backend.name());
        }
        return ExitCode::SUCCESS;
    }
    if let Some(n) = info.readers {
        eprintln!(
            "dlock: {key} is held by {n} shared holds (readers or permits); unlock takes an exclusive hold only"
        );
        return ExitCode::from(EXIT_UNSUPPORTED);
    }
    let Some(fence) = info.fence else {
        eprintln!(
            "dlock: {} shows no fence for the holder of {key}, which is how unlock names the hold it takes; \
             nothing evicted",
            backend.name()
        );
        return ExitCode::from(EXIT_UNSUPPORTED);
    };
    // Who holds, for the operator: a note the store cannot give is no reason to stop.
    let holder = noted(&backend, key, &info).await.unwrap_or(None);
    let what = describe(&info, fence.0, holder.as_deref());
    if !yes && std::io::stdin().is_terminal() && !confirm(key, &what) {
        eprintln!("dlock: nothing evicted");
        return ExitCode::from(1);
    }
    evict(&backend, url, key, fence, &what, json, || report(true, &holder)).await
}

async fn evict(
    backend: &DynBackend,
    url: &str,
    key: &str,
    fence: dlock::FencingToken,
    what: &str,
    json: bool,
    report: impl FnOnce(),
) -> ExitCode {
    match backend.evict(key, fence).await {
        Ok(true) => {
            report();
            if !json {
                println!(
                    "{key}: evicted {what} ({}); its next renewal is refused, and the next holder's fence is larger",
                    backend.name()
                );
            }
            ExitCode::SUCCESS
        }
        Ok(false) => {
            eprintln!(
                "dlock: {key} changed hands since it was inspected (released, or passed on); nothing evicted: \
                 look again with dlock status"
            );
            ExitCode::from(1)
        }
        Err(e) => fail(url, &e),
    }
}

/// The hold as the operator sees it: owner token, identity, fence, lease left.
fn describe(info: &LockInfo, fence: u64, holder: Option<&str>) -> String {
    let mut s = format!("holder {}", info.owner.as_deref().unwrap_or("(unknown)"));
    if let Some(h) = holder {
        s.push_str(&format!(" ({h})"));
    }
    s.push_str(&format!(", fence {fence}"));
    if let Some(d) = info.remaining {
        s.push_str(&format!(", remaining lease {d:?}"));
    }
    s
}

/// Asks on the terminal; anything but y or yes declines.
fn confirm(key: &str, what: &str) -> bool {
    eprint!("Take {key} from its {what}? [y/N] ");
    let _ = std::io::stderr().flush();
    let mut line = String::new();
    if std::io::stdin().lock().read_line(&mut line).is_err() {
        return false;
    }
    matches!(line.trim().to_ascii_lowercase().as_str(), "y" | "yes")
}
