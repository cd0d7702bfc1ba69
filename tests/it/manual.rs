//! The man pages and shell completions the binary generates from its clap
//! definitions: a page per visible subcommand, each rendered by `man -l`
//! with the sections a man page needs, and a bash completion script bash
//! reads. `scripts/package` checks the same of the pages the package
//! installs.

use std::path::Path;
use std::process::{Command, Stdio};

use clap::CommandFactory;

use crate::support::cronlease;

/// `man -l PAGE`, 80 columns, groff's warnings on: the text, or a panic
/// with what man said.
#[track_caller]
fn render(page: &Path) -> String {
    let output = Command::new("man")
        .args(["--warnings", "-l"])
        .arg(page)
        .env("MANWIDTH", "80")
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("cannot run man ({e}); scripts/install-deps installs man-db"));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success() && stderr.trim().is_empty(),
        "man -l {}: {}\n{stderr}",
        page.display(),
        output.status
    );
    String::from_utf8(output.stdout).expect("man's output is UTF-8")
}

#[test]
fn every_subcommand_has_a_man_page_that_renders() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("man");
    cronlease([Path::new("generate-man"), &out]).expect_code(0);

    // A page per visible subcommand, nested ones too (`cronlease-notify-test.1`).
    fn pages(command: &clap::Command, prefix: &str, into: &mut Vec<String>) {
        for sub in command.get_subcommands().filter(|s| !s.is_hide_set()) {
            let name = format!("{prefix}-{}", sub.get_name());
            into.push(format!("{name}.1"));
            pages(sub, &name, into);
        }
    }
    let cli = cronlease::cli::Cli::command();
    let mut expected = vec!["cronlease.1".to_string()];
    pages(&cli, "cronlease", &mut expected);
    expected.sort();
    let mut written: Vec<String> = std::fs::read_dir(&out)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    written.sort();
    assert_eq!(written, expected);
    assert!(written.contains(&"cronlease-run.1".to_string()));
    assert!(!written.iter().any(|name| name.contains("generate-man")));

    for name in &written {
        let text = render(&out.join(name));
        for section in ["NAME", "SYNOPSIS", "DESCRIPTION"] {
            assert!(
                text.lines().any(|line| line == section),
                "{name} lacks {section}:\n{text}"
            );
        }
    }
    // The page of `cronlease` lists the subcommands' pages.
    let main = render(&out.join("cronlease.1"));
    assert!(main.contains("cronlease-run(1)"), "{main}");
}

#[test]
fn the_bash_completion_script_parses() {
    let script = cronlease(["completions", "bash"]).expect_code(0).stdout();
    assert!(script.contains("cronlease"), "{script}");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cronlease.bash");
    std::fs::write(&path, &script).unwrap();
    let output = Command::new("bash")
        .arg("-n")
        .arg(&path)
        .output()
        .unwrap_or_else(|e| panic!("cannot run bash: {e}"));
    assert!(
        output.status.success(),
        "bash -n rejects the completion script: {}\n{script}",
        String::from_utf8_lossy(&output.stderr)
    );
}

#[test]
fn completions_need_a_known_shell() {
    let run = cronlease(["completions", "tcsh"]).expect_code(2);
    assert!(run.stderr().contains("bash"), "{}", run.describe());
    for shell in ["zsh", "fish"] {
        let script = cronlease(["completions", shell]).expect_code(0).stdout();
        assert!(script.contains("cronlease"), "{shell}: {script}");
    }
}
