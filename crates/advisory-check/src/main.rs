//! `advisory-check --db DIR --lock Cargo.lock --shipped FILE`: the lock file against an offline
//! copy of the RustSec advisory database (`DIR`, its `SNAPSHOT.md` naming the snapshot). Every
//! vulnerability found is printed; the exit status is 1 when one affects a crate that a shipped
//! crate links (`FILE`: `name version` lines, as `scripts/check-licenses.py --shipped` writes
//! them), 2 on bad input, else 0. Informational advisories (unmaintained, unsound) are not
//! vulnerabilities and do not fail the check.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use rustsec::{Database, Lockfile};

/// What one run found.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Findings {
    /// `name version: id (title)` of each vulnerability in a shipped crate.
    pub shipped: Vec<String>,
    /// The same for crates only tests, the bench or build tools link.
    pub unshipped: Vec<String>,
}

/// Check `lock` against the database at `db`; `shipped` holds `name version` pairs.
///
/// # Errors
/// A database or lock file that cannot be read.
pub fn check(db: &Path, lock: &Path, shipped: &HashSet<(String, String)>) -> Result<Findings, String> {
    let db = Database::open(db).map_err(|e| format!("advisory database {}: {e}", db.display()))?;
    let lockfile = Lockfile::load(lock).map_err(|e| format!("lock file {}: {e}", lock.display()))?;
    let mut found = Findings::default();
    for v in db.vulnerabilities(&lockfile) {
        let (name, version) = (v.package.name.to_string(), v.package.version.to_string());
        let line = format!("{name} {version}: {} ({})", v.advisory.id, v.advisory.title);
        if shipped.contains(&(name, version)) {
            found.shipped.push(line);
        } else {
            found.unshipped.push(line);
        }
    }
    found.shipped.sort();
    found.unshipped.sort();
    Ok(found)
}

/// `name version` lines as a set.
pub fn parse_shipped(text: &str) -> HashSet<(String, String)> {
    text.lines()
        .filter_map(|l| l.split_once(' '))
        .map(|(n, v)| (n.trim().to_owned(), v.trim().to_owned()))
        .collect()
}

/// The line of `SNAPSHOT.md` that dates the snapshot, if any.
fn snapshot_line(db: &Path) -> Option<String> {
    let text = std::fs::read_to_string(db.join("SNAPSHOT.md")).ok()?;
    text.lines().find(|l| l.contains("snapshot of commit")).map(|l| l.trim_start_matches("- ").to_owned())
}

fn arg(args: &[String], name: &str) -> Option<PathBuf> {
    args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).map(PathBuf::from)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    let (Some(db), Some(lock), Some(shipped)) =
        (arg(&args, "--db"), arg(&args, "--lock"), arg(&args, "--shipped"))
    else {
        eprintln!("usage: advisory-check --db DIR --lock Cargo.lock --shipped FILE");
        return ExitCode::from(2);
    };
    let shipped = match std::fs::read_to_string(&shipped) {
        Ok(text) => parse_shipped(&text),
        Err(e) => {
            eprintln!("advisory-check: shipped crates {}: {e}", shipped.display());
            return ExitCode::from(2);
        }
    };
    println!(
        "advisory-check: RustSec database {} ({})",
        db.display(),
        snapshot_line(&db).unwrap_or_else(|| "no SNAPSHOT.md: date unknown".to_owned())
    );
    let found = match check(&db, &lock, &shipped) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("advisory-check: {e}");
            return ExitCode::from(2);
        }
    };
    for line in &found.unshipped {
        println!("  not shipped (tests, bench or tools only): {line}");
    }
    for line in &found.shipped {
        println!("  SHIPPED: {line}");
    }
    println!(
        "advisory-check: {} vulnerabilities in {} shipped crates, {} elsewhere",
        found.shipped.len(),
        shipped.len(),
        found.unshipped.len()
    );
    if found.shipped.is_empty() { ExitCode::SUCCESS } else { ExitCode::from(1) }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::{check, parse_shipped};

    fn fixture(p: &str) -> std::path::PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixture").join(p)
    }

    #[test]
    fn an_advisory_fails_the_check_only_for_a_shipped_crate() {
        let shipped = parse_shipped("itoa 1.0.15\nryu 1.0.20\n");
        let found = check(&fixture("db"), &fixture("Cargo.lock"), &shipped).expect("check");
        assert_eq!(found.shipped.len(), 1, "{found:?}");
        assert!(found.shipped[0].starts_with("itoa 1.0.15: RUSTSEC-2099-0001"), "{found:?}");
        assert!(found.unshipped.is_empty());
        let found =
            check(&fixture("db"), &fixture("Cargo.lock"), &parse_shipped("ryu 1.0.20")).expect("check");
        assert!(found.shipped.is_empty() && found.unshipped.len() == 1, "{found:?}");
    }

    #[test]
    fn a_missing_database_is_an_error_not_a_pass() {
        let shipped = parse_shipped("itoa 1.0.15");
        assert!(check(&fixture("no-such-db"), &fixture("Cargo.lock"), &shipped).is_err());
    }
}
