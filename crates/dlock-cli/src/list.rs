//! `dlock list`: the locks held now, each by the name its users gave and as `dlock status`
//! shows it (a mutex's holder, fence and lease left; a semaphore's permits; a read-write
//! lock's writer or readers), on the stores that can enumerate their locks.

use std::collections::{BTreeMap, BTreeSet};
use std::process::ExitCode;

use serde_json::{Value, json};

use crate::EXIT_CONFIG;
use crate::report::refuse;
use crate::run::fail;
use crate::status::kinds::{Found, user_name};
use crate::status::{Kind, Shown, connect, shown};

/// Print every lock held now whose key starts with `prefix`, looking at most at `limit` keys
/// of the store, and say so when more were there. Exit 0 (also when none is held), 64 for a
/// `limit` of 0 (before connecting), 78 where the store cannot enumerate its locks.
pub async fn list(url: &str, prefix: &str, limit: usize, json: bool) -> ExitCode {
    if limit == 0 {
        return refuse(EXIT_CONFIG, "--limit 0 would look at no key: give 1 or more");
    }
    let backend = match connect(url, None).await {
        Ok(b) => b,
        Err(code) => return code,
    };
    // One key more than asked tells a list cut short from one that just fits.
    let mut keys = match backend.list(prefix, limit.saturating_add(1)).await {
        Ok(k) => k,
        Err(e) => return fail(url, &e),
    };
    let truncated = keys.len() > limit;
    keys.truncate(limit);
    // A semaphore's slots, a read-write lock's gate and slots: one entry under the user's
    // name, looked at as the primitive its keys tell (or as any, where they tell several).
    let mut names: BTreeMap<&str, BTreeSet<Found>> = BTreeMap::new();
    for key in &keys {
        let (name, kind) = user_name(key);
        names.entry(name).or_default().insert(kind);
    }
    let mut held: Vec<Value> = Vec::new();
    for (name, kinds) in names {
        let kind = match kinds.first() {
            Some(&only) if kinds.len() == 1 && only != Found::Nothing => Kind::Found(only),
            _ => Kind::Mutex { leader: false },
        };
        // A key listed may have been released since: only what is held is shown.
        let Shown { busy: _, text: (head, line), mut value } = match shown(&backend, name, kind).await {
            Ok(s) => s,
            Err(e) => return fail(url, &e),
        };
        if !held_now(&value) {
            continue;
        }
        if !json {
            println!("{name}: {head}{line}");
        }
        value["key"] = json!(name);
        held.push(value);
    }
    if json {
        let v = json!({
            "backend": backend.name(),
            "prefix": prefix,
            "locks": held,
            "truncated": truncated,
            "limit": limit,
        });
        println!("{v}");
    } else if held.is_empty() {
        let among = if truncated { format!(" among the first {limit} keys") } else { String::new() };
        println!("no lock held under {prefix:?}{among} ({})", backend.name());
    }
    if truncated && !json {
        eprintln!(
            "dlock: the list stopped at --limit {limit} keys and more are there: raise --limit or narrow --prefix"
        );
    }
    ExitCode::SUCCESS
}

/// Whether a status shows anything held: the mutex, a permit, the writer (holding or waiting)
/// or a reader.
fn held_now(v: &Value) -> bool {
    let yes = |f: &str| v[f].as_bool() == Some(true);
    let some = |f: &str| v[f].as_u64().is_some_and(|n| n > 0);
    yes("held") || yes("writer") || yes("writer_waiting") || some("readers") || some("held_permits")
}
