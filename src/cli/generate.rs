//! The man pages and the shell completions, generated from the clap
//! definitions in `cli.rs` so that they cannot drift from `--help`
//! (`clap_mangen`, `clap_complete`): `cronlease completions SHELL` prints
//! a completion script, and the hidden `cronlease generate-man DIR` writes
//! the pages `scripts/package` installs.

use std::io::Write;
use std::path::Path;

use clap::CommandFactory;

use super::Cli;
use crate::exit::Exit;

/// A shell `cronlease completions` writes a script for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum CompletionShell {
    /// bash (bash-completion).
    Bash,
    /// zsh.
    Zsh,
    /// fish.
    Fish,
}

impl CompletionShell {
    fn generator(self) -> clap_complete::Shell {
        match self {
            CompletionShell::Bash => clap_complete::Shell::Bash,
            CompletionShell::Zsh => clap_complete::Shell::Zsh,
            CompletionShell::Fish => clap_complete::Shell::Fish,
        }
    }
}

/// The command line as completions offer it: `Cli`'s, without its hidden
/// subcommands (clap_complete lists every subcommand it is given, hidden
/// or not). Each subcommand is `Cli`'s own, arguments and all; the top
/// level has only `--help` and `--version`, as `Cli`'s (a test compares
/// them).
fn completion_command() -> clap::Command {
    let cli = Cli::command();
    let visible: Vec<clap::Command> = cli
        .get_subcommands()
        .filter(|subcommand| !subcommand.is_hide_set())
        .cloned()
        .collect();
    let mut command = clap::Command::new("cronlease")
        .version(env!("CARGO_PKG_VERSION"))
        .subcommand_required(true)
        .subcommands(visible);
    if let Some(about) = cli.get_about() {
        command = command.about(about.clone());
    }
    command
}

/// The completion script of `shell`.
fn completion_script(shell: CompletionShell) -> Vec<u8> {
    let mut command = completion_command();
    let name = command.get_name().to_string();
    let mut script = Vec::new();
    clap_complete::generate(shell.generator(), &mut command, name, &mut script);
    script
}

/// `cronlease completions SHELL`.
pub(super) fn print_completions(shell: CompletionShell) -> Exit {
    // Generated into memory first: clap_complete panics on a failed write.
    let script = completion_script(shell);
    match std::io::stdout().lock().write_all(&script) {
        Ok(()) => Exit::Success,
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Exit::Success,
        Err(e) => {
            eprintln!("error: cannot write to stdout: {e}");
            Exit::Failure
        }
    }
}

/// `cronlease generate-man DIR`: `cronlease.1` and a page per visible
/// subcommand (`cronlease-run.1`, …), uncompressed; the package gzips them.
pub(super) fn man_pages(dir: &Path) -> Exit {
    let written =
        std::fs::create_dir_all(dir).and_then(|()| clap_mangen::generate_to(Cli::command(), dir));
    match written {
        Ok(()) => Exit::Success,
        Err(e) => {
            eprintln!(
                "error: cannot write the man pages into {}: {e}",
                dir.display()
            );
            Exit::Failure
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn completions_offer_the_visible_command_line() {
        let mut cli = Cli::command();
        cli.build();
        let mut completion = completion_command();
        completion.build();
        assert_eq!(completion.get_name(), cli.get_name());
        assert_eq!(completion.get_version(), cli.get_version());
        let flags = |command: &clap::Command| -> Vec<String> {
            command
                .get_arguments()
                .map(|a| a.get_id().to_string())
                .collect()
        };
        assert_eq!(flags(&completion), flags(&cli));
        let visible: Vec<&str> = cli
            .get_subcommands()
            .filter(|s| !s.is_hide_set())
            .map(|s| s.get_name())
            .collect();
        let offered: Vec<&str> = completion.get_subcommands().map(|s| s.get_name()).collect();
        assert_eq!(offered, visible);
        assert!(!offered.contains(&"generate-man"));
        assert!(offered.contains(&"completions"));
    }

    #[test]
    fn every_script_names_every_visible_subcommand() {
        for shell in [
            CompletionShell::Bash,
            CompletionShell::Zsh,
            CompletionShell::Fish,
        ] {
            let script = String::from_utf8(completion_script(shell)).unwrap();
            for name in ["check", "run", "status", "lock", "completions"] {
                assert!(script.contains(name), "{shell:?} lacks {name}");
            }
            assert!(!script.contains("generate-man"), "{shell:?}");
        }
    }
}
