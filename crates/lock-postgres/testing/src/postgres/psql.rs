//! The superuser's `psql` over TCP: how the test kit sets a server up and proves it is ours.

use std::path::Path;
use std::process::Command;

use super::ADMIN_PASSWORD;
use crate::{ServerError, run_command};

/// Runs SQL as the superuser with `psql` over TCP; one `-c` per statement (CREATE DATABASE
/// cannot share a transaction); returns stdout (`-A -t`: unaligned, no headers).
pub(crate) fn psql(
    bin: &Path,
    port: u16,
    database: &str,
    statements: &[&str],
) -> Result<String, ServerError> {
    run_command("psql", &mut psql_command(bin, port, database, statements))
}

/// `psql` as the superuser, each statement a `-c`, stopping at the first error.
pub(super) fn psql_command(bin: &Path, port: u16, database: &str, statements: &[&str]) -> Command {
    let mut cmd = Command::new(bin.join("psql"));
    cmd.env("PGPASSWORD", ADMIN_PASSWORD)
        .env("PGCONNECT_TIMEOUT", "2")
        .args(["-X", "-A", "-t", "-q", "-v", "ON_ERROR_STOP=1", "-h", "127.0.0.1", "-U", "postgres"])
        .arg("-p")
        .arg(port.to_string())
        .arg("-d")
        .arg(database);
    for s in statements {
        cmd.arg("-c").arg(s);
    }
    cmd
}
