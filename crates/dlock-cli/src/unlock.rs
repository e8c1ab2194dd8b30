//! `dlock unlock --force`: take a lock away from its holder, safely: the hold is named by the
//! fence `dlock status` would show, so a holder nobody looked at is never evicted, and the
//! evicted holder is told at its next renewal (`dlock run` then applies `--on-lost`). The key
//! may name a mutex, a semaphore (one permit is taken) or a read-write lock (its writer, or
//! one reader), as the store shows it.

use std::io::{BufRead, IsTerminal, Write};
use std::process::ExitCode;

use dlock::backend::LockInfo;
use dlock::{DynBackend, FencingToken};
use serde_json::json;

use crate::report::refuse;
use crate::run::fail;
use crate::status::kinds::{self, Found};
use crate::status::noted;
use crate::status::primitives::{Part, see_permits, see_rw};
use crate::{EXIT_CONFIG, EXIT_UNSUPPORTED};

/// Which hold the operator named: by its fence, by its slot (a permit's or a reader's), both.
#[derive(Clone, Copy, Debug, Default)]
pub struct Named {
    pub fence: Option<u64>,
    pub slot: Option<u32>,
}

/// One hold to take: its key, what the store shows, its holder's identity, and how the
/// operator sees it.
struct Target {
    key: String,
    info: LockInfo,
    holder: Option<String>,
    what: String,
}

/// Evict the holder of `key` (after asking, when stdin is a terminal and `yes` is not given):
/// a mutex's holder, a read-write lock's writer (its gate and every slot it took), or the one
/// permit or reader `named` by fence or slot (or the only one held). Exit 0 when it was
/// evicted or nothing was held, 1 when nothing was evicted (declined, or the hold changed since
/// it was inspected), 64 when several permits or readers hold and `named` tells none apart, 78
/// when the store cannot name or take the hold.
pub async fn unlock(url: &str, key: &str, named: Named, yes: bool, json: bool) -> ExitCode {
    let backend = match crate::status::connect(url, Some(key)).await {
        Ok(b) => b,
        Err(code) => return code,
    };
    let targets = match targets(&backend, key, named).await {
        Ok(Ok(t)) => t,
        Ok(Err(code)) => return code,
        Err(e) => return fail(url, &e),
    };
    let report = |evicted: bool, t: Option<&Target>| {
        if json {
            let v = json!({
                "key": key,
                "backend": backend.name(),
                "evicted": evicted,
                "fence": t.and_then(|t| t.info.fence).map(|f| f.0),
                "owner": t.and_then(|t| t.info.owner.clone()),
                "holder": t.and_then(|t| t.holder.clone()),
                "parts": targets.iter().map(|t| &t.key).collect::<Vec<_>>(),
            });
            println!("{v}");
        }
    };
    let Some(first) = targets.first() else {
        report(false, None);
        if !json {
            println!("{key}: free, nothing to evict ({})", backend.name());
        }
        return ExitCode::SUCCESS;
    };
    if !yes && std::io::stdin().is_terminal() && !confirm(key, &first.what) {
        eprintln!("dlock: nothing evicted");
        return ExitCode::from(1);
    }
    // The first part decides (a writer's gate, or the one hold): once it is taken the holder
    // is told at its next renewal; its other parts (a composite writer's slots) follow.
    for (i, t) in targets.iter().enumerate() {
        let fence = t.info.fence.expect("targets have fences");
        match backend.evict(&t.key, fence).await {
            Ok(true) => {}
            Ok(false) if i == 0 => {
                eprintln!(
                    "dlock: {key} changed hands since it was inspected (released, or passed on); nothing evicted: \
                     look again with dlock status"
                );
                return ExitCode::from(1);
            }
            // A slot the writer gave back meanwhile (its hold fell apart with the gate).
            Ok(false) => {}
            Err(e) => return fail(url, &e),
        }
    }
    report(true, Some(first));
    if !json {
        println!(
            "{key}: evicted {} ({}); its next renewal is refused, and the next holder's fence is larger",
            first.what,
            backend.name()
        );
    }
    ExitCode::SUCCESS
}

/// The holds to take for `key` as the store shows it: none when nothing is held; else the
/// exit status of a hold that cannot be named or taken.
async fn targets(
    backend: &DynBackend,
    key: &str,
    named: Named,
) -> dlock::Result<Result<Vec<Target>, ExitCode>> {
    let fence = named.fence;
    let store = backend.name();
    Ok(match kinds::find(backend, key).await? {
        Found::Mutex | Found::Nothing => {
            let info = backend.inspect(key).await?;
            if !info.held {
                return Ok(Ok(Vec::new()));
            }
            // Who holds, for the operator: a note the store cannot give is no reason to stop.
            let holder = noted(backend, key, &info).await.unwrap_or(None);
            let part = Part { slot: 0, key: key.to_owned(), info, holder };
            one(key, "holder", part, fence, store)
        }
        Found::Semaphore(n) => {
            let seen = see_permits(backend, key, n).await?;
            if seen.native && !seen.held.is_empty() {
                let why = format!(
                    "{key} is a semaphore whose permits {store} keeps itself, in one key: it cannot take one \
                     permit from its holder; nothing evicted (stop the holder's process)"
                );
                return Ok(Err(refuse(EXIT_UNSUPPORTED, &why)));
            }
            pick(key, "permit", seen.held, named, store)
        }
        Found::ReadWrite(k) => {
            let seen = see_rw(backend, key, k).await?;
            // A writer that only waits for the readers is not what holds the lock: the readers are.
            if seen.writer_holds {
                let holder = seen.writer_note.clone();
                let gate = Part { slot: 0, key: seen.gate_key.clone(), info: seen.gate.clone(), holder };
                let mut parts = match one(key, "writer", gate, fence, store) {
                    Ok(p) => p,
                    Err(code) => return Ok(Err(code)),
                };
                for part in seen.writer_parts {
                    let what = String::new();
                    parts.push(Target { key: part.key, info: part.info, holder: part.holder, what });
                }
                Ok(parts)
            } else if seen.native && seen.readers > 0 {
                let why = format!(
                    "{key} is held by {} readers, shared holds of one key that {store} keeps without a fence or \
                     an identity each: none can be named to take it; nothing evicted (stop the readers' processes)",
                    seen.readers
                );
                Err(refuse(EXIT_UNSUPPORTED, &why))
            } else {
                pick(key, "reader", seen.reader_parts, named, store)
            }
        }
    })
}

/// The one hold of `parts` that `named` names, or the only one held.
fn pick(key: &str, what: &str, parts: Vec<Part>, named: Named, store: &str) -> Result<Vec<Target>, ExitCode> {
    if parts.is_empty() {
        return Ok(Vec::new());
    }
    let asked = |p: &Part| {
        named.fence.is_none_or(|f| p.info.fence == Some(FencingToken(f)))
            && named.slot.is_none_or(|s| p.slot == s)
    };
    let mut chosen: Vec<Part> = parts.into_iter().filter(asked).collect();
    match chosen.len() {
        1 => one(key, what, chosen.remove(0), None, store),
        0 => {
            eprintln!("dlock: no {what} of {key} holds with{}; nothing evicted", naming(named));
            Err(ExitCode::from(1))
        }
        n => {
            let list: Vec<String> = chosen.iter().map(|p| describe(what, p, true)).collect();
            let with = if named.fence.is_some() || named.slot.is_some() {
                format!(" with{}", naming(named))
            } else {
                String::new()
            };
            let why = format!(
                "{key}: {n} {what}s hold it{with}; name the one to take with --fence or --slot: {}",
                list.join("; ")
            );
            Err(refuse(EXIT_CONFIG, &why))
        }
    }
}

/// What the operator named, for a message: " fence F", " slot S", or both.
fn naming(named: Named) -> String {
    let mut s = String::new();
    if let Some(f) = named.fence {
        s.push_str(&format!(" fence {f}"));
    }
    if let Some(slot) = named.slot {
        s.push_str(&format!(" slot {slot}"));
    }
    s
}

/// `part` as the hold to take, when it has a fence (and the one asked for, if any).
fn one(key: &str, what: &str, part: Part, fence: Option<u64>, store: &str) -> Result<Vec<Target>, ExitCode> {
    let Some(f) = part.info.fence else {
        let why = format!(
            "{store} shows no fence for the {what} of {key}, which is how unlock names the hold it takes; nothing \
             evicted"
        );
        return Err(refuse(EXIT_UNSUPPORTED, &why));
    };
    if fence.is_some_and(|asked| asked != f.0) {
        eprintln!(
            "dlock: the {what} of {key} holds fence {}, not {}; nothing evicted",
            f.0,
            fence.unwrap_or(0)
        );
        return Err(ExitCode::from(1));
    }
    // A permit's or a reader's slot names it along with its fence.
    let what = describe(what, &part, matches!(what, "permit" | "reader"));
    Ok(vec![Target { key: part.key, info: part.info, holder: part.holder, what }])
}

/// The hold as the operator sees it: its slot (a permit's, a reader's), owner token, identity,
/// fence, lease left.
fn describe(what: &str, p: &Part, slotted: bool) -> String {
    let mut s = what.to_owned();
    if slotted {
        s.push_str(&format!(" slot {}", p.slot));
    }
    match (&p.info.owner, slotted) {
        (Some(o), _) => s.push_str(&format!(" {o}")),
        (None, false) => s.push_str(" (unknown)"),
        (None, true) => {}
    }
    if let Some(h) = &p.holder {
        s.push_str(&format!(" ({h})"));
    }
    if let Some(f) = p.info.fence {
        s.push_str(&format!(", fence {}", f.0));
    }
    if let Some(d) = p.info.remaining {
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
