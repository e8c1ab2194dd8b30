//! The contracts table holds: every public operation of the code is in it, every promise that
//! applies to an operation has a row, and every row's case exists and is run. The gaps are
//! printed, so each CI log says what is not checked yet.
//!
//! Run: `cargo test -p lock-testkit --test contracts -- --nocapture`.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use lock_testkit::contracts::{Check, OPERATIONS, Promise, ROWS, missing_rows, operation, stray_rows};

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Every `.rs` file under `dir`, with its text.
fn sources(dir: &Path) -> Vec<(PathBuf, String)> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_owned()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap_or_else(|e| panic!("{}: {e}", d.display())).flatten() {
            let p = e.path();
            if p.is_dir() {
                if p.file_name().is_some_and(|n| n != "target") {
                    todo.push(p);
                }
            } else if p.extension().is_some_and(|x| x == "rs") {
                let text = std::fs::read_to_string(&p).expect("read");
                out.push((p, text));
            }
        }
    }
    out
}

/// The `pub async fn`s of inherent `impl` blocks in `text`, as `Type::method`, for the types
/// `keep` accepts.
fn public_async_methods(text: &str, keep: impl Fn(&str) -> bool) -> Vec<String> {
    let mut out = Vec::new();
    let mut current: Option<String> = None;
    let mut testing_only = false;
    for line in text.lines() {
        // Test hooks behind the `testing` feature are not the user's operations.
        if line.trim() == "#[cfg(feature = \"testing\")]" {
            testing_only = true;
            continue;
        }
        let skip = std::mem::take(&mut testing_only);
        if let Some(rest) = line.strip_prefix("impl") {
            // `impl<'a> Type<'a> {` is inherent; `impl Trait for Type {` is not.
            let rest = if rest.starts_with('<') { rest.split_once('>').map_or("", |(_, r)| r) } else { rest };
            current = (!rest.contains(" for ")).then(|| {
                rest.trim().split(|c: char| !c.is_alphanumeric() && c != '_').next().unwrap_or("").to_owned()
            });
            continue;
        }
        if line.starts_with('}') {
            current = None;
        }
        if let (Some(ty), Some(rest)) = (&current, line.strip_prefix("    pub async fn "))
            && keep(ty)
            && !skip
        {
            let name: String = rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
            out.push(format!("{ty}::{name}"));
        }
    }
    out
}

/// Every store's crate: each `crates/lock-*` but the core, the test kit and the bench, so a
/// new store's operations are listed without naming it here.
fn store_crates(root: &Path) -> Vec<PathBuf> {
    let mut stores: Vec<PathBuf> = std::fs::read_dir(root.join("crates"))
        .expect("crates")
        .map(|e| e.expect("entry").path())
        .filter(|p| {
            let name = p.file_name().and_then(|n| n.to_str()).unwrap_or_default();
            name.starts_with("lock-") && !["lock-core", "lock-testkit", "lock-bench"].contains(&name)
        })
        .collect();
    stores.sort();
    assert!(stores.len() >= 7, "the store crates were not found: {stores:?}");
    stores
}

/// Every public operation the code has: lock-core's user API, the stores' own calls, the
/// operator calls of `LockBackend`, and the CLI's verbs.
fn operations_in_code() -> BTreeSet<String> {
    let root = workspace();
    let mut ops = BTreeSet::new();
    let core = root.join("crates/lock-core/src");
    for (path, text) in sources(&core) {
        let rel = path.strip_prefix(&core).expect("under src");
        // The backends' own code (memory, quorum, the toolkits) is not the user API, nor is the
        // fault injector users test with (`faults`): it is a stand-in store, not a lock.
        let internal = ["backend", "memory", "quorum", "faults"].iter().any(|d| rel.starts_with(d));
        if internal || rel.ends_with("tests.rs") {
            continue;
        }
        ops.extend(public_async_methods(&text, |_| true));
    }
    for store in store_crates(&root) {
        for (_, text) in sources(&store.join("src")) {
            // A store's own public type is `<Name>Lock`; builders and `from_url` are setup.
            ops.extend(
                public_async_methods(&text, |ty| ty.ends_with("Lock"))
                    .into_iter()
                    .filter(|m| !m.ends_with("::from_url")),
            );
        }
    }
    // The operator's calls: `inspect` of the trait, `list` and `evict` of the `Admin`
    // capability, which callers reach through the calls of those names on `dyn LockBackend`.
    for (file, call) in [("lock_backend.rs", "inspect"), ("optional.rs", "list"), ("optional.rs", "evict")] {
        let path = root.join("crates/lock-core/src/backend").join(file);
        let text = std::fs::read_to_string(path).expect("backend");
        assert!(text.contains(&format!("    async fn {call}(")), "LockBackend::{call} is gone");
        ops.insert(format!("LockBackend::{call}"));
    }
    ops.extend(fenced_writes(&root));
    let cli = std::fs::read_to_string(root.join("crates/dlock-cli/src/cli.rs")).expect("cli");
    let verbs = cli.split_once("enum Cmd {").expect("the CLI's verbs").1;
    let verbs = &verbs[..verbs.find("\n}").expect("end of Cmd")];
    for line in verbs.lines() {
        let Some(rest) = line.strip_prefix("    ") else { continue };
        let name: String = rest.chars().take_while(char::is_ascii_alphanumeric).collect();
        if name.starts_with(|c: char| c.is_ascii_uppercase()) {
            ops.insert(format!("dlock {}", name.to_lowercase()));
        }
    }
    ops
}

/// The fenced writes (`dlock::fenced`): lock-core's methods that take a fence, and every
/// `pub async fn` of a store's `fenced` module, free (`lock_redis::fenced::set`) or of a type
/// (`lock_postgres::Fences::admit`).
fn fenced_writes(root: &Path) -> Vec<String> {
    let core =
        std::fs::read_to_string(root.join("crates/lock-core/src/fenced.rs")).expect("lock-core's fenced");
    let fenced = core.split_once("impl<T> Fenced<T> {").expect("lock_core::fenced::Fenced").1;
    let fenced = &fenced[..fenced.find("\n}").expect("end of impl Fenced")];
    let mut out: Vec<String> = fenced
        .lines()
        .filter_map(|l| l.strip_prefix("    pub fn "))
        .filter(|rest| rest.contains("fence: FencingToken"))
        .map(|rest| {
            format!(
                "Fenced::{}",
                rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect::<String>()
            )
        })
        .collect();
    for store in store_crates(root) {
        let Ok(text) = std::fs::read_to_string(store.join("src/fenced.rs")) else { continue };
        let krate = store.file_name().and_then(|n| n.to_str()).expect("name").replace('-', "_");
        let name =
            |rest: &str| rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect::<String>();
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("pub async fn ") {
                out.push(format!("{krate}::fenced::{}", name(rest)));
            }
        }
        for m in public_async_methods(&text, |_| true) {
            out.push(format!("{krate}::{m}"));
        }
    }
    assert!(out.len() >= 5, "the fenced writes were not found: {out:?}");
    out
}

#[test]
fn every_operation_in_the_code_is_in_the_table() {
    let found = operations_in_code();
    assert!(found.len() > 40, "the scan found too little: {found:?}");
    let missing: Vec<&String> = found.iter().filter(|o| operation(o).is_none()).collect();
    assert!(
        missing.is_empty(),
        "operations with no entry in lock_testkit::contracts::OPERATIONS (add each with its kinds, then its rows): {missing:?}"
    );
    let gone: Vec<&str> = OPERATIONS.iter().map(|o| o.name).filter(|o| !found.contains(*o)).collect();
    assert!(gone.is_empty(), "operations in the table the code no longer has: {gone:?}");
}

#[test]
fn every_promise_that_applies_has_a_row() {
    let missing = missing_rows();
    assert!(missing.is_empty(), "operations with no row for a promise that applies to them: {missing:?}");
    let stray = stray_rows();
    assert!(stray.is_empty(), "rows for an unknown operation or a promise that does not apply: {stray:?}");
    let mut seen = BTreeSet::new();
    for r in ROWS {
        assert!(seen.insert((r.op, r.promise)), "two rows for {} / {}", r.op, r.promise);
    }
}

#[test]
fn every_case_exists_and_is_run() {
    let root = workspace();
    let texts: Vec<(PathBuf, String)> =
        sources(&root.join("crates")).into_iter().chain(sources(&root.join("tests"))).collect();
    let cases: BTreeSet<&str> =
        ROWS.iter().filter_map(|r| if let Check::Case(c) = r.check { Some(c) } else { None }).collect();
    for case in &cases {
        let defined = |t: &str| t.contains(&format!("fn {case}(")) || t.contains(&format!("fn {case}<"));
        let definitions = texts.iter().filter(|(_, t)| defined(t)).count();
        assert!(definitions > 0, "the contracts table names a case no file defines: {case}");
        // A suite case is run where a test binary names it (a macro's list, a call); a test of
        // a binary of its own carries `#[test]` or `#[tokio::test]` right above it.
        let named = texts.iter().map(|(_, t)| t.matches(case).count()).sum::<usize>();
        let is_test = texts.iter().any(|(_, t)| {
            t.lines()
                .collect::<Vec<_>>()
                .windows(3)
                .any(|w| w[2].contains(&format!("fn {case}(")) && w[..2].iter().any(|l| l.contains("test")))
        });
        assert!(is_test || named > definitions, "the case {case} is defined but nothing runs it");
    }
    println!(
        "contracts: {} operations, {} rows, {} distinct cases",
        OPERATIONS.len(),
        ROWS.len(),
        cases.len()
    );
}

/// Not a check: what the table says is not checked yet, per promise, in every CI log.
#[test]
fn the_gaps_are_listed() {
    let mut total = 0;
    for p in Promise::ALL {
        let gaps: Vec<(&str, &str)> = ROWS
            .iter()
            .filter(|r| r.promise == p)
            .filter_map(|r| if let Check::Gap(why) = r.check { Some((r.op, why)) } else { None })
            .collect();
        let rows = ROWS.iter().filter(|r| r.promise == p).count();
        println!("contracts: {p}: {} of {rows} rows checked, {} gaps", rows - gaps.len(), gaps.len());
        for (op, why) in &gaps {
            println!("  GAP {op}: {why}");
        }
        total += gaps.len();
    }
    assert!(total < ROWS.len(), "every row is a gap");
}
