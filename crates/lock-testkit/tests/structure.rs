//! The workspace's shape: no import circle between the module files of any crate, and no
//! source file over 400 lines. Both are read from the text, like the contracts table's check.
//!
//! An import circle is files that each import the next, round to the first:
//! `a.rs -> b.rs -> a.rs`. File A imports file B when A's code names an item defined in B,
//! resolved at file granularity (`structure/imports.rs` has the details):
//! - through `use` bindings and `crate::`, `super::`, `self::` paths in code;
//! - a `mod child;` line is not an import, nor is a `pub use child::Thing;` re-export: an item
//!   named through a re-export is imported from the re-exporting file (the facade);
//! - a child naming `super::Thing` defined in its parent imports the parent; a parent naming
//!   its own descendants' items is assembling its parts, not importing them, so a `mod.rs`
//!   that holds a shared context and dispatches to its children is no circle;
//! - test code in a file (`mod tests`) is that file's code.
//!
//! A circle is fixed by moving the item both sides need to the file of its concept.
//!
//! Run: `cargo test -p lock-testkit --test structure`.

// Not `tests/imports.rs`: cargo would take that for a test binary of its own.
#[path = "structure/imports.rs"]
mod imports;
#[path = "structure/lex.rs"]
mod lex;
#[path = "structure/vocabulary.rs"]
mod vocabulary;

use std::path::{Path, PathBuf};

use imports::{Crate, cycles};
use lex::lex;

/// Circles tolerated for now, as the check prints them, each with the reason. A line goes when
/// its circle does (the check fails on a line whose circle is gone).
// Empty: lock-core's `backend/session/holds.rs -> keeper.rs -> holds.rs` ("being rewritten
// with the shared pinned session (issue 48)") was gone by 92b06c2, which gave both the hold
// table of `table.rs`, before this check came in.
const ALLOWED_CYCLES: &[(&str, &str)] = &[];

/// The longest a source file may be.
const MAX_LINES: usize = 400;

/// Files tolerated over `MAX_LINES` for now, relative to the workspace, with the reason. A line
/// goes when its file is split (the check fails on a line whose file is short enough).
// lock-core's semaphore/mod.rs, renewer.rs, locker/request.rs, backend/notify/mod.rs and
// backend/mod.rs, and the test kit's server/postgres.rs, server/zk.rs and server/process.rs,
// were on this list ("being split by the lead (issue 48)") and were split before this check
// came in.
const ALLOWED_LONG: &[(&str, &str)] = &[];

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Every crate of the workspace: its name and directory.
fn crates() -> Vec<(String, PathBuf)> {
    let root = workspace();
    let mut out = vec![("dlock-rs".to_owned(), root.clone())];
    for e in std::fs::read_dir(root.join("crates")).expect("crates/").flatten() {
        if e.path().join("Cargo.toml").exists() {
            out.push((e.file_name().to_string_lossy().into_owned(), e.path()));
        }
        // A store's testing side is a crate of its own next to it (`crates/lock-x/testing`).
        let testing = e.path().join("testing");
        if testing.join("Cargo.toml").exists() {
            out.push((format!("{}-testing", e.file_name().to_string_lossy()), testing));
        }
    }
    out.sort();
    out
}

/// Every `.rs` file under `dir`, recursively.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_owned()];
    while let Some(d) = todo.pop() {
        for p in std::fs::read_dir(&d).into_iter().flatten().flatten().map(|e| e.path()) {
            if p.is_dir() {
                todo.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

/// The circles of a crate whose files `read` gives, as `a.rs -> b.rs -> a.rs`, each followed by
/// the names that make its edges.
fn circles(roots: &[&str], read: &dyn Fn(&Path) -> Option<String>) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for root in roots.iter().filter(|r| read(Path::new(r)).is_some()) {
        let graph = Crate::load(root, read).imports();
        for cycle in cycles(&graph) {
            let why: Vec<String> =
                cycle.windows(2).map(|w| format!("{} names {}", w[0], graph[&w[0]][&w[1]])).collect();
            out.push((cycle.join(" -> "), why.join("; ")));
        }
    }
    out
}

#[test]
fn no_module_imports_itself_round_a_circle() {
    let mut found = Vec::new();
    let mut files = 0;
    for (name, dir) in crates() {
        let read = |p: &Path| std::fs::read_to_string(dir.join(p)).ok();
        files += rust_files(&dir.join("src")).len();
        for (cycle, why) in circles(&["src/lib.rs", "src/main.rs"], &read) {
            found.push((format!("{name}: {cycle}"), why));
        }
    }
    assert!(files > 100, "the scan found too few files: {files}");
    let allowed = |c: &str| ALLOWED_CYCLES.iter().any(|(a, _)| *a == c);
    let bad: Vec<String> =
        found.iter().filter(|(c, _)| !allowed(c)).map(|(c, why)| format!("{c}\n    ({why})")).collect();
    for (c, why) in found.iter().filter(|(c, _)| allowed(c)) {
        println!("structure: allowed for now: {c} ({why})");
    }
    let gone: Vec<&str> =
        ALLOWED_CYCLES.iter().map(|(c, _)| *c).filter(|c| !found.iter().any(|(f, _)| f == c)).collect();
    assert!(
        bad.is_empty(),
        "{} import circles (move the shared item to its concept's file):\n{}",
        bad.len(),
        bad.join("\n")
    );
    assert!(gone.is_empty(), "allowed circles that are gone, drop them from ALLOWED_CYCLES: {gone:?}");
}

#[test]
fn no_source_file_is_over_400_lines() {
    let root = workspace();
    let mut long = Vec::new();
    let mut gone = Vec::new();
    for (_, dir) in crates() {
        for file in ["src", "tests"].iter().flat_map(|d| rust_files(&dir.join(d))) {
            let lines = std::fs::read_to_string(&file).expect("read").lines().count();
            let rel = file.strip_prefix(&root).expect("in the workspace").to_string_lossy().into_owned();
            let allowed = ALLOWED_LONG.iter().any(|(a, _)| *a == rel);
            if lines > MAX_LINES && !allowed {
                long.push(format!("{rel}: {lines} lines"));
            } else if lines <= MAX_LINES && allowed {
                gone.push(rel);
            }
        }
    }
    assert!(long.is_empty(), "files over {MAX_LINES} lines (split them by concept):\n{}", long.join("\n"));
    assert!(gone.is_empty(), "allowed long files now short, drop them from ALLOWED_LONG: {gone:?}");
}

/// A crate of in-memory files, for the checks on the parser itself.
fn circles_of(files: &[(&str, &str)]) -> Vec<String> {
    let read = |p: &Path| files.iter().find(|(n, _)| Path::new(n) == p).map(|(_, t)| (*t).to_owned());
    circles(&["src/lib.rs"], &read).into_iter().map(|(c, _)| c).collect()
}

#[test]
fn parents_assemble_their_children_and_a_facade_stands_between() {
    let parent = "mod a;\nmod b;\npub use a::A;\npub struct Shared;\nfn make() -> A { b::f() }\n";
    let a = "use super::Shared;\npub struct A(Shared);\n";
    let b = "pub fn f() -> super::A { todo!() }\n";
    let files =
        |a, b| [("src/lib.rs", "pub mod m;"), ("src/m/mod.rs", parent), ("src/m/a.rs", a), ("src/m/b.rs", b)];
    // a and b name their parent's items; the parent names theirs, which is not an import.
    assert_eq!(circles_of(&files(a, b)), Vec::<String>::new());
    // b names A through the parent's re-export: b imports the parent, not a.
    let a2 = format!("{a}fn g() {{ super::b::f(); }}\n");
    assert_eq!(circles_of(&files(&a2, b)), Vec::<String>::new());
    // Past the facade, to where A is defined, b imports a: a circle.
    let b2 = "pub fn f() -> crate::m::a::A { todo!() }\n";
    assert_eq!(circles_of(&files(&a2, b2)), ["src/m/a.rs -> src/m/b.rs -> src/m/a.rs"]);
}

#[test]
fn a_circle_through_three_files_is_found() {
    let lib = "mod a;\nmod b;\nmod c;\n";
    let a = "use crate::b::{self, B as Bee};\nfn f() { b::g(); let _: Bee; }\npub struct A;\n";
    let b = "/// [`crate::a::A`] is in a doc comment: not an import.\npub struct B;\npub fn g() -> crate::c::C { todo!() }\n";
    let c = "pub struct C;\nconst S: &str = \"crate::a::A\";\nmacro_rules! m { () => { crate::a::A }; }\n#[cfg(test)]\nmod tests {\n    use super::*;\n    fn t() -> C { C }\n}\n";
    let files = [("src/lib.rs", lib), ("src/a.rs", a), ("src/b.rs", b), ("src/c.rs", c)];
    assert_eq!(circles_of(&files), Vec::<String>::new());
    let c = format!("{c}use crate::a::A as Alias;\nfn back(_: &'static Alias) {{}}\n");
    let files = [("src/lib.rs", lib), ("src/a.rs", a), ("src/b.rs", b), ("src/c.rs", &c)];
    assert_eq!(circles_of(&files), ["src/a.rs -> src/b.rs -> src/c.rs -> src/a.rs"]);
}

#[test]
fn the_lexer_drops_comments_strings_and_lifetimes() {
    let t = lex("a /* b /* c */ d */ e // f\n'g' h<'i> r#\"j\"# '\\'' k \"l\\\"m\" n");
    assert_eq!(t, ["a", "e", "h", "<", ">", "\"j", "k", "\"l\\\"m", "n"]);
}

/// The store crates: those whose `lib.rs` registers a store (`DESCRIPTOR`), lock-core aside.
fn store_crates() -> Vec<(String, PathBuf)> {
    crates()
        .into_iter()
        .filter(|(name, dir)| {
            name != "lock-core"
                && std::fs::read_to_string(dir.join("src/lib.rs")).is_ok_and(|t| t.contains("DESCRIPTOR"))
        })
        .collect()
}

#[test]
fn every_store_names_its_concepts_alike() {
    let stores = store_crates();
    assert!(stores.len() >= 7, "the scan found too few stores: {stores:?}");
    let mut bad = Vec::new();
    for (name, dir) in &stores {
        let stems: Vec<String> =
            rust_files(&dir.join("src")).iter().filter_map(|f| vocabulary::stem(f)).collect();
        for required in vocabulary::REQUIRED {
            if !stems.iter().any(|s| s == required) {
                bad.push(format!("{name}: no {required}.rs"));
            }
        }
        for (synonym, word) in vocabulary::SYNONYMS {
            if stems.iter().any(|s| s == synonym) {
                bad.push(format!("{name}: {synonym}.rs is what the other stores call {word}.rs"));
            }
        }
        for file in rust_files(&dir.join("src")) {
            let text = std::fs::read_to_string(&file).expect("read");
            for ty in vocabulary::namesakes(&text) {
                bad.push(format!("{name}: {} wraps a type of its own name, {ty}", file.display()));
            }
        }
    }
    assert!(bad.is_empty(), "the stores' vocabulary differs:\n{}", bad.join("\n"));
}
