//! The docs checked against the code: every `dlock` command line the READMEs, the docs and
//! `dlock --help` show parses with this build's command line, and every exit status the code
//! can give is stated in `dlock run --help` and the README. A flag renamed or a status added
//! then fails here instead of in a reader's shell.

use std::path::{Path, PathBuf};

// One copy with the integration tests that run the README's lines.
#[path = "../tests/cli/common/words.rs"]
mod words;

use words::words;

use crate::{EXIT_CONFIG, EXIT_LOST, EXIT_NOPERM, EXIT_TIMEOUT, EXIT_UNAVAILABLE, EXIT_UNSUPPORTED};

/// Every exit status `dlock run` can give besides the command's own: the library's (a bad
/// argument is 64 too, not clap's 2), and the shell's 126 and 127 for a command that cannot run.
const EXIT_STATUSES: [u8; 8] =
    [EXIT_CONFIG, EXIT_UNAVAILABLE, EXIT_TIMEOUT, EXIT_LOST, EXIT_NOPERM, EXIT_UNSUPPORTED, 126, 127];

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The Markdown files that show `dlock` commands: both READMEs and `docs/`.
fn docs() -> Vec<(String, String)> {
    let mut files = vec![repo().join("README.md"), repo().join("crates/dlock-cli/README.md")];
    for entry in std::fs::read_dir(repo().join("docs")).expect("docs/") {
        let path = entry.expect("docs/ entry").path();
        if path.extension().is_some_and(|e| e == "md") {
            files.push(path);
        }
    }
    files.into_iter().map(|p| (p.display().to_string(), read(&p))).collect()
}

/// The `dlock` command lines of a text: console lines (`$ dlock ...`) and, in help text,
/// example lines (`dlock ...` after indentation).
fn commands(text: &str) -> Vec<String> {
    text.lines()
        .map(str::trim_start)
        .filter_map(|l| l.strip_prefix("$ ").or(Some(l)).filter(|l| l.starts_with("dlock ")))
        // Prose that starts a line with the command's name is not an example: examples give a
        // subcommand and a flag.
        .filter(|l| l.contains(" --") || l.starts_with("dlock completions "))
        .map(str::to_owned)
        .collect()
}

#[test]
fn every_documented_command_line_parses() {
    let mut help = crate::stores::command();
    let top = help.render_long_help().to_string();
    let mut sources = docs();
    sources.push(("dlock --help".to_owned(), top));
    let mut seen = 0;
    for (source, text) in &sources {
        for line in commands(text) {
            seen += 1;
            let args = words(&line);
            if let Err(e) = crate::stores::command().try_get_matches_from(&args) {
                panic!("{source}: `{line}` does not parse with this build: {}", e.render());
            }
        }
    }
    assert!(seen >= 30, "only {seen} documented command lines found: is the extraction broken?");
}

#[test]
fn both_readmes_show_every_subcommand_and_the_main_one_every_scheme() {
    let cli = crate::stores::command();
    for file in ["README.md", "crates/dlock-cli/README.md"] {
        let text = read(&repo().join(file));
        let shown = commands(&text);
        // Hidden ones (the supervisor's entry point) are not for readers.
        for sub in cli.get_subcommands().filter(|c| !c.is_hide_set()).map(|c| c.get_name()) {
            // A console line or inline code: `dlock leader --key K -- cmd`.
            let prefix = format!("dlock {sub} ");
            let inline = text.contains(&format!("`{prefix}"));
            assert!(
                inline || shown.iter().any(|l| l.starts_with(&prefix)),
                "{file} never shows `dlock {sub}`"
            );
        }
        // The schemes are listed once, in the repository's backend table; this README points
        // there and to `dlock run --help`, which lists those of the build.
        if file != "README.md" {
            continue;
        }
        for scheme in dlock::stores().iter().filter(|d| d.name != "memory").flat_map(|d| d.schemes) {
            assert!(text.contains(&format!("`{scheme}://")), "{file} does not name {scheme}://");
        }
    }
}

#[test]
fn every_exit_status_is_stated() {
    let mut cmd = crate::stores::command();
    let run = cmd.find_subcommand_mut("run").expect("run").render_long_help().to_string();
    let readme = read(&repo().join("README.md"));
    let stated = readme
        .split_once("Exit statuses:")
        .and_then(|(_, rest)| rest.split_once("each has a test"))
        .map(|(sentence, _)| sentence.to_owned())
        .expect("the README's sentence \"Exit statuses: ... each has a test\"");
    for code in EXIT_STATUSES {
        for (what, text) in [("dlock run --help", &run), ("the README", &stated)] {
            let said = text.split(|c: char| !c.is_ascii_digit()).any(|n| n == code.to_string());
            assert!(said, "{what} does not state exit status {code}:\n{text}");
        }
    }
}

#[test]
fn shell_words() {
    assert_eq!(
        words("dlock run --url 'redis://:pw@h:1/' --key k -- true &"),
        ["dlock", "run", "--url", "redis://:pw@h:1/", "--key", "k", "--", "true"]
    );
    assert_eq!(
        words("dlock leader --identity \"$(hostname)\" -- ./s"),
        ["dlock", "leader", "--identity", "$(hostname)", "--", "./s"]
    );
    assert_eq!(words("dlock completions bash > ~/x"), ["dlock", "completions", "bash"]);
}
