//! The README's console output of the command lines that need no server (a refused URL, an
//! unreachable one), compared with what the real binary prints and the status it exits with.

use crate::common;

use common::{dlock, words::words};

/// The URLs whose outcome does not depend on a server running: the in-process store, refused,
/// and port 1 of the loopback, where nothing listens.
fn serverless(url: &str) -> bool {
    url.starts_with("memory://") || url.contains("127.0.0.1:1/")
}

#[test]
fn readme_output_is_what_dlock_prints() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../README.md");
    let readme = std::fs::read_to_string(path).expect("README.md");
    let lines: Vec<&str> = readme.lines().collect();
    let mut checked = 0;
    for (i, line) in lines.iter().enumerate() {
        let Some(cmd) = line.strip_prefix("$ ") else { continue };
        let args = words(cmd);
        let url = args.windows(2).find(|w| w[0] == "--url").map(|w| w[1].as_str());
        if args.first().map(String::as_str) != Some("dlock") || !url.is_some_and(serverless) {
            continue;
        }
        // What it prints: the lines up to the next prompt, which must be `echo $?` and its answer.
        let printed: Vec<&str> =
            lines[i + 1..].iter().take_while(|l| !l.starts_with("$ ")).copied().collect();
        let after = i + 1 + printed.len();
        assert_eq!(lines.get(after), Some(&"$ echo $?"), "README: `{line}` shows no exit status");
        let status: i32 = lines[after + 1].parse().expect("an exit status after `echo $?`");
        let out = dlock(&args[1..].iter().map(String::as_str).collect::<Vec<_>>());
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(stderr.trim_end(), printed.join("\n"), "README: `{line}` prints something else");
        assert_eq!(out.status.code(), Some(status), "README: `{line}`");
        checked += 1;
    }
    assert!(checked >= 2, "{checked} serverless README lines found: the refused and the unreachable URL");
}
