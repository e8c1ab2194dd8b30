//! The stores this build of `dlock` can reach, from the library's registry: what `--url`'s
//! help lists, so that a store compiled in is documented and one compiled out is not.

use clap::{Command, CommandFactory, FromArgMatches};

use crate::Cli;

/// The command line, its `--url` help made from the registered stores.
pub(crate) fn command() -> Command {
    let long = url_help();
    let with_help = |arg: clap::Arg| arg.long_help(long.clone());
    Cli::command().mut_subcommand("run", |run| run.mut_arg("url", with_help))
}

/// The command line as a shell completes it: without the hidden subcommands (the supervisor
/// `dlock run` starts), which the completion generators would otherwise offer.
pub(crate) fn for_completions() -> Command {
    let full = command();
    let shown: Vec<Command> = full.get_subcommands().filter(|s| !s.is_hide_set()).cloned().collect();
    Command::new("dlock").version(env!("CARGO_PKG_VERSION")).subcommands(shown)
}

/// Parse the process's arguments against [`command`]: exits 0 after `--help` and
/// `--version`, and 64 (EX_USAGE) on bad arguments, the status of every other usage error,
/// where clap alone would exit 2.
pub(crate) fn parse() -> Cli {
    let parsed = command().try_get_matches().and_then(|m| Cli::from_arg_matches(&m));
    parsed.unwrap_or_else(|e| {
        if !e.use_stderr() {
            e.exit();
        }
        let _ = e.print();
        std::process::exit(i32::from(crate::EXIT_CONFIG))
    })
}

/// `--url`'s long help: one line per registered store that another process can share (the
/// in-process one is refused by `dlock run`, and said so last).
fn url_help() -> String {
    let lines: Vec<String> = dlock::stores()
        .iter()
        .filter(|d| d.name != "memory")
        .map(|d| format!("  {}: {}\n      {}", d.name, plain(d.summary), plain(d.urls)))
        .collect();
    format!(
        "Store URL; this build reaches:\n{}\n  (memory:// lives inside one process: refused here)",
        lines.join("\n")
    )
}

/// Markdown of the table cell as terminal text: no backticks, no escaped bars.
fn plain(cell: &str) -> String {
    cell.replace("\\|", "|").replace('`', "")
}

/// The schemes that reach another process (every store but the in-process one), for the
/// message that refuses `memory://` where another process must see the lock.
pub(crate) fn shared_schemes() -> String {
    let schemes: Vec<String> = dlock::stores()
        .iter()
        .filter(|d| d.name != "memory")
        .flat_map(|d| d.schemes.iter().map(|s| format!("{s}://")))
        .collect();
    schemes.join(", ")
}

#[cfg(test)]
mod tests {
    #[test]
    fn url_help_names_every_registered_store() {
        let help = super::url_help();
        for store in dlock::stores().iter().filter(|d| d.name != "memory") {
            assert!(help.contains(store.schemes[0]), "{} missing from:\n{help}", store.name);
        }
        assert!(help.trim_end().ends_with("refused here)"), "memory:// is refused, said last: {help}");
        assert!(!help.contains('`') && !help.contains("\\|"), "{help}");
        assert!(!super::shared_schemes().contains("memory"));
    }

    #[test]
    fn completions_offer_no_hidden_subcommand() {
        let cmd = super::for_completions();
        assert!(cmd.find_subcommand("__supervise").is_none());
        assert!(cmd.find_subcommand("run").is_some_and(|r| r.get_arguments().any(|a| a.get_id() == "wait")));
    }
}
