//! The user guide (`docs/src/`, an mdBook) and the README, read as text:
//! every relative link and image reaches a file, every `#anchor` a heading
//! of its target (by mdBook's rule for heading ids), every `{{#include
//! FILE:ANCHOR}}` a file with that anchor, and the README's Rust snippet is
//! a region of a compiled example. And the configuration reference names
//! exactly the keys the config reader takes: the reader's side comes from
//! `cronlease check` on a file with an unknown key in every section (its
//! error lists the keys it would take). No Redis.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsStr;
use std::path::{Component, Path, PathBuf};

use crate::support::{ConfigFile, cronlease, files_under};

fn root() -> PathBuf {
    crate::support::repository()
}

/// The guide's chapters and the README, sorted.
fn documents() -> Vec<PathBuf> {
    let mut files = vec![root().join("README.md")];
    files.extend(files_under(&root().join("docs/src"), "md"));
    files.sort();
    files
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn relative(path: &Path) -> String {
    path.strip_prefix(root())
        .unwrap_or(path)
        .display()
        .to_string()
}

/// The lines of `text` outside fenced code blocks, with their numbers
/// (from 1).
fn prose_lines(text: &str) -> Vec<(usize, &str)> {
    let mut fence: Option<&str> = None;
    let mut lines = Vec::new();
    for (index, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        let marker = ["```", "~~~"].into_iter().find(|m| trimmed.starts_with(m));
        match (fence, marker) {
            (None, Some(marker)) => fence = Some(marker),
            (Some(open), Some(marker)) if open == marker => fence = None,
            (None, None) => lines.push((index + 1, line)),
            _ => {}
        }
    }
    lines
}

/// `line` without its inline code spans (a link inside backticks is text).
fn without_code_spans(line: &str) -> String {
    let mut out = String::new();
    let mut in_code = false;
    for c in line.chars() {
        if c == '`' {
            in_code = !in_code;
        } else if !in_code {
            out.push(c);
        }
    }
    out
}

/// The targets of the inline links and images of one line: what stands in
/// `](…)`, up to a space (a title) or the closing parenthesis.
fn link_targets(line: &str) -> Vec<String> {
    let line = without_code_spans(line);
    let mut targets = Vec::new();
    let mut rest = line.as_str();
    while let Some(at) = rest.find("](") {
        let after = &rest[at + 2..];
        let end = after.find([')', ' ']).unwrap_or(after.len());
        targets.push(after[..end].trim_matches(['<', '>']).to_string());
        rest = &after[end..];
    }
    targets
}

/// mdBook's id of a heading: its text without markup, lowercased, spaces
/// as `-`, every character but letters, digits, `-` and `_` dropped.
fn heading_id(heading: &str) -> String {
    let mut text = String::new();
    let (mut in_code, mut in_tag) = (false, false);
    for c in heading.chars() {
        match c {
            '`' => in_code = !in_code,
            '<' if !in_code => in_tag = true,
            '>' if in_tag => in_tag = false,
            '*' if !in_code => {}
            _ if in_tag => {}
            _ => text.push(c),
        }
    }
    let mut id = String::new();
    for c in text.trim().chars() {
        if c.is_alphanumeric() || c == '_' || c == '-' {
            id.extend(c.to_lowercase());
        } else if c.is_whitespace() {
            id.push('-');
        }
    }
    id
}

/// The anchors of a Markdown file's headings, duplicates numbered `-1`,
/// `-2`… as mdBook numbers them.
fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut ids = BTreeSet::new();
    for (_, line) in prose_lines(text) {
        let hashes = line.chars().take_while(|&c| c == '#').count();
        if hashes == 0 || hashes > 6 || !line[hashes..].starts_with(' ') {
            continue;
        }
        let id = heading_id(&line[hashes..]);
        let count = seen.entry(id.clone()).or_insert(0);
        ids.insert(if *count == 0 {
            id
        } else {
            format!("{id}-{count}")
        });
        *count += 1;
    }
    ids
}

/// `base.join(target)` with `.` and `..` resolved by hand (the target may
/// not exist, and `canonicalize` would need it to).
fn resolve(base: &Path, target: &str) -> PathBuf {
    let mut path = PathBuf::new();
    for component in base.join(target).components() {
        match component {
            Component::ParentDir => {
                path.pop();
            }
            Component::CurDir => {}
            other => path.push(other),
        }
    }
    path
}

/// Every broken relative link or anchor of `file`, as `file:line: why`.
fn broken_links(file: &Path, text: &str) -> Vec<String> {
    let dir = file.parent().expect("a file in a directory");
    let mut broken = Vec::new();
    for (number, line) in prose_lines(text) {
        for target in link_targets(line) {
            if target.contains("://") || target.starts_with("mailto:") || target.is_empty() {
                continue;
            }
            let (path, anchor) = match target.split_once('#') {
                Some((path, anchor)) => (path, Some(anchor)),
                None => (target.as_str(), None),
            };
            let place = format!("{}:{number}", relative(file));
            let target_file = if path.is_empty() {
                file.to_path_buf()
            } else {
                resolve(dir, path)
            };
            if !target_file.exists() {
                broken.push(format!(
                    "{place}: {target}: no file {}",
                    relative(&target_file)
                ));
                continue;
            }
            let Some(anchor) = anchor else { continue };
            if target_file.extension().is_none_or(|e| e != "md") {
                broken.push(format!(
                    "{place}: {target}: an anchor into a file that is not Markdown"
                ));
                continue;
            }
            let known = anchors(&read(&target_file));
            if !known.contains(anchor) {
                broken.push(format!(
                    "{place}: {target}: no heading #{anchor} in {} (it has {known:?})",
                    relative(&target_file)
                ));
            }
        }
    }
    broken
}

/// Every `{{#include FILE:ANCHOR}}` of `file` (code blocks included) whose
/// file is missing or lacks `ANCHOR: ANCHOR` and its end.
fn broken_includes(file: &Path, text: &str) -> Vec<String> {
    let dir = file.parent().expect("a file in a directory");
    let mut broken = Vec::new();
    for (index, line) in text.lines().enumerate() {
        let mut rest = line;
        while let Some(at) = rest.find("{{#include ") {
            let after = &rest[at + "{{#include ".len()..];
            let end = after.find("}}").unwrap_or(after.len());
            let spec = after[..end].trim();
            rest = &after[end..];
            let place = format!("{}:{}", relative(file), index + 1);
            let (path, anchor) = match spec.split_once(':') {
                Some((path, anchor)) => (path, Some(anchor)),
                None => (spec, None),
            };
            let target = resolve(dir, path);
            let Ok(source) = std::fs::read_to_string(&target) else {
                broken.push(format!("{place}: {spec}: no file {}", relative(&target)));
                continue;
            };
            if let Some(anchor) = anchor.filter(|a| !a.chars().all(|c| c.is_ascii_digit())) {
                let has = |marker: &str| {
                    source.lines().any(|l| {
                        l.trim_start()
                            .strip_prefix("// ")
                            .and_then(|l| l.strip_prefix(marker))
                            .is_some_and(|name| name.trim() == anchor)
                    })
                };
                if !has("ANCHOR:") || !has("ANCHOR_END:") {
                    broken.push(format!(
                        "{place}: {spec}: {} has no `ANCHOR: {anchor}` with its `ANCHOR_END`",
                        relative(&target)
                    ));
                }
            }
        }
    }
    broken
}

#[test]
fn every_link_anchor_and_include_of_the_guide_and_the_readme_resolves() {
    let documents = documents();
    assert!(
        documents.len() > 10,
        "the guide's chapters were not found: {documents:?}"
    );
    let mut broken = Vec::new();
    for file in &documents {
        let text = read(file);
        broken.extend(broken_links(file, &text));
        broken.extend(broken_includes(file, &text));
    }
    assert!(broken.is_empty(), "broken:\n{}", broken.join("\n"));
}

#[test]
fn every_chapter_is_in_the_summary_and_every_summary_entry_exists() {
    let src = root().join("docs/src");
    let summary = read(&src.join("SUMMARY.md"));
    let listed: BTreeSet<String> = prose_lines(&summary)
        .into_iter()
        .flat_map(|(_, line)| link_targets(line))
        .collect();
    let chapters: BTreeSet<String> = documents()
        .into_iter()
        .filter_map(|path| {
            let name = path.strip_prefix(&src).ok()?.display().to_string();
            (name != "SUMMARY.md").then_some(name)
        })
        .collect();
    assert_eq!(
        listed, chapters,
        "SUMMARY.md and the files under docs/src differ"
    );
}

#[test]
fn heading_ids_follow_mdbooks_rule() {
    let cases = [
        ("Why didn't my job run?", "why-didnt-my-job-run"),
        ("`cronlease status`", "cronlease-status"),
        ("Hashed spread: `H`", "hashed-spread-h"),
        ("`[jobs.<name>]`", "jobsname"),
        ("TLS and ACL users", "tls-and-acl-users"),
        ("At most once per tick", "at-most-once-per-tick"),
    ];
    for (heading, id) in cases {
        assert_eq!(heading_id(heading), id, "heading {heading:?}");
    }
    assert_eq!(
        anchors("# A\n## A\n```sh\n# not a heading\n```\n## A\n"),
        ["a", "a-1", "a-2"].map(String::from).into()
    );
}

/// The regions between `// ANCHOR: name` and `// ANCHOR_END: name` of a
/// Rust file, each without its common indentation.
fn anchored_regions(source: &str) -> Vec<String> {
    let mut regions = Vec::new();
    let lines: Vec<&str> = source.lines().collect();
    for (start, line) in lines.iter().enumerate() {
        let Some(name) = line.trim_start().strip_prefix("// ANCHOR: ") else {
            continue;
        };
        let end_marker = format!("// ANCHOR_END: {}", name.trim());
        let Some(len) = lines[start + 1..]
            .iter()
            .position(|l| l.trim_start() == end_marker)
        else {
            continue;
        };
        let body = &lines[start + 1..start + 1 + len];
        let indent = body
            .iter()
            .filter(|l| !l.trim().is_empty())
            .map(|l| l.len() - l.trim_start().len())
            .min()
            .unwrap_or(0);
        let text: Vec<&str> = body
            .iter()
            .map(|l| if l.len() >= indent { &l[indent..] } else { "" })
            .collect();
        regions.push(text.join("\n"));
    }
    regions
}

#[test]
fn the_readmes_rust_snippets_are_regions_of_a_compiled_example() {
    let example = read(&root().join("examples/guide_embedding.rs"));
    let regions = anchored_regions(&example);
    let readme = read(&root().join("README.md"));
    let mut snippets = Vec::new();
    let mut current: Option<Vec<&str>> = None;
    for line in readme.lines() {
        match &mut current {
            None if line.starts_with("```rust") => current = Some(Vec::new()),
            Some(lines) if line.starts_with("```") => {
                snippets.push(lines.join("\n"));
                current = None;
            }
            Some(lines) => lines.push(line),
            None => {}
        }
    }
    assert!(!snippets.is_empty(), "the README has no Rust snippet");
    for snippet in snippets {
        assert!(
            regions.contains(&snippet),
            "this README snippet is not an anchored region of examples/guide_embedding.rs \
             (copy the region there, or change both):\n{snippet}"
        );
    }
}

/// The sections the reader takes and, per section, the keys it takes: from
/// `cronlease check` on a table with an unknown key in every section and an
/// unknown section, whose errors list what would be valid.
fn keys_the_reader_takes() -> BTreeMap<String, BTreeSet<String>> {
    let config = ConfigFile::new(
        "[redis]\nurl = \"redis://127.0.0.1:1/0\"\nzz_unknown = 1\n\n\
         [daemon]\nzz_unknown = 1\n\n\
         [daemon.telemetry]\nendpoint = \"http://127.0.0.1:1\"\nzz_unknown = 1\n\n\
         [notify.x]\nkind = \"webhook\"\nurl = \"http://127.0.0.1:1/\"\nzz_unknown = 1\n\n\
         [calendars.x]\ndates = []\nzz_unknown = 1\n\n\
         [groups.x]\nmax = 1\nzz_unknown = 1\n\n\
         [dashboard]\nzz_unknown = 1\n\n\
         [[dashboard.tokens]]\nname = \"x\"\nrole = \"viewer\"\ntoken_env = \"X\"\nzz_unknown = 1\n\n\
         [dashboard.oidc]\nissuer = \"https://id.example.com\"\nclient_id = \"x\"\nclient_secret_env = \"X\"\npublic_url = \"https://cron.example.com\"\nzz_unknown = 1\n\n\
         [[dashboard.oidc.roles]]\nvalue = \"x\"\nrole = \"viewer\"\nzz_unknown = 1\n\n\
         [jobs.x]\nschedule = \"* * * * *\"\ncommand = [\"true\"]\nzz_unknown = 1\n\n\
         [zz_unknown]\nzz_unknown = 1\n",
    );
    let run = cronlease([
        OsStr::new("check"),
        OsStr::new("--config"),
        config.path().as_os_str(),
    ]);
    assert_eq!(run.code(), Some(2), "{}", run.describe());
    let backticked = |text: &str| -> BTreeSet<String> {
        text.split('`')
            .skip(1)
            .step_by(2)
            .map(str::to_string)
            .collect()
    };
    let mut accepted = BTreeMap::new();
    for line in run.stderr().lines() {
        if let Some((_, valid)) = line.split_once("unknown section `zz_unknown`: expected ") {
            accepted.insert("(sections)".to_string(), backticked(valid));
            continue;
        }
        // serde names a section of one key without "one of".
        let Some((before, valid)) = line
            .split_once("unknown field `zz_unknown`, expected one of ")
            .or_else(|| line.split_once("unknown field `zz_unknown`, expected "))
        else {
            continue;
        };
        let section = if before.contains("[redis]") {
            "redis"
        } else if before.contains("[daemon.telemetry]") {
            "daemon.telemetry"
        } else if before.contains("[daemon]") {
            "daemon"
        } else if before.contains("[notify.x]") {
            "notify.<name>"
        } else if before.contains("job \"x\"") {
            "jobs.<name>"
        } else if before.contains("[calendars.x]") {
            "calendars.<name>"
        } else if before.contains("[groups.x]") {
            "groups.<name>"
        } else if before.contains("[[dashboard.oidc.roles]]") {
            "dashboard.oidc.roles"
        } else if before.contains("[dashboard.oidc]") {
            "dashboard.oidc"
        } else if before.contains("[[dashboard.tokens]]") {
            "dashboard.tokens"
        } else if before.contains("[dashboard]") {
            "dashboard"
        } else {
            panic!("an unknown key in a section this test does not know: {line}")
        };
        accepted.insert(section.to_string(), backticked(valid));
    }
    accepted
}

/// The sections the reference chapter documents (its `` ## `[section]` ``
/// headings) and, per section, the keys in the first column of its tables.
fn keys_the_reference_documents() -> BTreeMap<String, BTreeSet<String>> {
    let text = read(&root().join("docs/src/job-table.md"));
    let mut documented: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut section: Option<String> = None;
    for (_, line) in prose_lines(&text) {
        if let Some(heading) = line.strip_prefix("## ") {
            section = heading
                .trim()
                .strip_prefix("`[")
                .and_then(|h| h.strip_suffix("]`"))
                .map(str::to_string);
            if let Some(name) = &section {
                let top = name.split('.').next().expect("a section name");
                documented
                    .entry("(sections)".to_string())
                    .or_default()
                    .insert(top.to_string());
                documented.entry(name.clone()).or_default();
            }
            continue;
        }
        let (Some(name), Some(row)) = (&section, line.strip_prefix("| ")) else {
            continue;
        };
        let first = row.split(" |").next().unwrap_or_default();
        if first.starts_with("---") || first == "key" {
            continue;
        }
        let keys = documented.get_mut(name).expect("the section's entry");
        keys.extend(first.split('`').skip(1).step_by(2).map(str::to_string));
    }
    documented
}

#[test]
fn the_configuration_reference_documents_exactly_the_keys_the_reader_takes() {
    let reader = keys_the_reader_takes();
    let reference = keys_the_reference_documents();
    assert_eq!(
        reader.keys().collect::<Vec<_>>(),
        [
            "(sections)",
            "calendars.<name>",
            "daemon",
            "daemon.telemetry",
            "dashboard",
            "dashboard.oidc",
            "dashboard.oidc.roles",
            "dashboard.tokens",
            "groups.<name>",
            "jobs.<name>",
            "notify.<name>",
            "redis"
        ],
        "the reader's errors were not all understood: {reader:?}"
    );
    let mut differences = Vec::new();
    for (section, taken) in &reader {
        let documented = reference.get(section).cloned().unwrap_or_default();
        for key in taken.difference(&documented) {
            differences.push(format!(
                "[{section}] `{key}`: taken by the reader, not in docs/src/job-table.md"
            ));
        }
        for key in documented.difference(taken) {
            differences.push(format!(
                "[{section}] `{key}`: in docs/src/job-table.md, refused by the reader"
            ));
        }
    }
    for section in reference.keys().filter(|s| !reader.contains_key(*s)) {
        differences.push(format!("a section the reader does not know: {section}"));
    }
    assert!(differences.is_empty(), "{}", differences.join("\n"));
}
