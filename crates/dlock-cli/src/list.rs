//! `dlock list`: the locks held now, each as `dlock status` shows it (holder, fence, lease
//! left), on the stores that can enumerate their locks.

use std::process::ExitCode;

use serde_json::{Value, json};

use crate::run::fail;
use crate::status::{connect, described, noted, with_holder};

/// Print every lock held now whose key starts with `prefix` (at most `limit` keys looked at).
/// Exit 0 (also when none is held), 78 where the store cannot enumerate its locks.
pub async fn list(url: &str, prefix: &str, limit: usize, json: bool) -> ExitCode {
    let backend = match connect(url, None).await {
        Ok(b) => b,
        Err(code) => return code,
    };
    let keys = match backend.list(prefix, limit).await {
        Ok(k) => k,
        Err(e) => return fail(url, &e),
    };
    let mut held: Vec<Value> = Vec::new();
    for key in keys {
        // A key listed may have been released since: only the held ones are shown.
        let info = match backend.inspect(&key).await {
            Ok(i) if i.held => i,
            Ok(_) => continue,
            Err(e) => return fail(url, &e),
        };
        let holder = match noted(&backend, &key, &info).await {
            Ok(h) => h,
            Err(e) => return fail(url, &e),
        };
        let ((head, line), mut value) = with_holder(described(&info), holder);
        if !json {
            println!("{key}: {head}{line}");
        }
        value["key"] = json!(key);
        held.push(value);
    }
    if json {
        println!("{}", json!({ "backend": backend.name(), "prefix": prefix, "locks": held }));
    } else if held.is_empty() {
        println!("no lock held under {prefix:?} ({})", backend.name());
    }
    ExitCode::SUCCESS
}
