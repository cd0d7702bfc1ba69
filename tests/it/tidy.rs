//! The absences ARCHITECTURE.md states, checked by reading the sources
//! (as rust-analyzer's tidy tests do): no source file over 800 lines, no
//! glob import, no wall-clock read outside `clock`, no `bool` parameter.
//! Test code (a `tests.rs` file, or a file's `#[cfg(test)] mod tests`) is
//! exempt from all but the first.

use std::path::Path;

/// The sources, the library's and the binary's: (path relative to the
/// repository, whole text, the text that is not test code).
fn sources() -> Vec<(String, String, String)> {
    let root = &crate::support::repository();
    [root.join("src"), root.join("cli/src")]
        .iter()
        .flat_map(|dir| crate::support::files_under(dir, "rs"))
        .map(|path| {
            let text = std::fs::read_to_string(&path).expect("a readable source file");
            let relative = path
                .strip_prefix(root)
                .expect("under the repository")
                .to_string_lossy()
                .into_owned();
            let code = if relative.ends_with("tests.rs") {
                String::new()
            } else {
                match text.find("#[cfg(test)]\nmod tests") {
                    Some(at) => text[..at].to_string(),
                    None => text.clone(),
                }
            };
            (relative, text, code)
        })
        .collect()
}

/// Asserts `found` is empty, listing it as `what`.
#[track_caller]
fn none(what: &str, found: Vec<String>) {
    assert!(found.is_empty(), "{what}:\n  {}", found.join("\n  "));
}

#[test]
fn no_source_file_is_over_800_lines() {
    none(
        "files over 800 lines (one concept per file)",
        sources()
            .into_iter()
            .filter_map(|(path, text, _)| {
                let lines = text.lines().count();
                (lines > 800).then(|| format!("{path}: {lines} lines"))
            })
            .collect(),
    );
}

#[test]
fn no_glob_import_outside_tests() {
    none(
        "glob imports (name what is used)",
        sources()
            .into_iter()
            .flat_map(|(path, _, code)| {
                code.lines()
                    .enumerate()
                    .filter(|(_, line)| {
                        let line = line.trim_start();
                        line.starts_with("use ") && line.trim_end().ends_with("::*;")
                    })
                    .map(|(n, line)| format!("{path}:{}: {}", n + 1, line.trim()))
                    .collect::<Vec<_>>()
            })
            .collect(),
    );
}

#[test]
fn no_wall_clock_read_outside_clock() {
    let reads = [
        "SystemTime::now",
        "Utc::now",
        "Local::now",
        "Timestamp::now",
        "Zoned::now",
    ];
    none(
        "wall-clock reads outside src/clock.rs (the clock is injected there)",
        sources()
            .into_iter()
            .filter(|(path, _, _)| path != "src/clock.rs")
            .flat_map(|(path, _, code)| {
                code.lines()
                    .enumerate()
                    .filter(|(_, line)| !line.trim_start().starts_with("//"))
                    .filter(|(_, line)| reads.iter().any(|read| line.contains(read)))
                    .map(|(n, line)| format!("{path}:{}: {}", n + 1, line.trim()))
                    .collect::<Vec<_>>()
            })
            .collect(),
    );
}

/// The parameters of every function signature in `code`: the text
/// between `fn name(` and its closing parenthesis, with where it starts.
fn signatures(code: &str) -> Vec<(usize, String, String)> {
    let mut found = Vec::new();
    let bytes = code.as_bytes();
    let mut at = 0;
    while let Some(offset) = code[at..].find("fn ") {
        let start = at + offset;
        at = start + 3;
        let boundary =
            start == 0 || !(bytes[start - 1].is_ascii_alphanumeric() || bytes[start - 1] == b'_');
        if !boundary {
            continue;
        }
        let rest = &code[at..];
        let name: String = rest
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        let Some(open) = rest.find('(') else { break };
        // `fn` pointer types (`fn(u32) -> bool`) have no name.
        if name.is_empty() || rest[..open].contains(['{', ';', '\n']) && !rest[..open].contains('<')
        {
            continue;
        }
        let mut depth = 0;
        let mut close = None;
        for (i, c) in rest[open..].char_indices() {
            match c {
                '(' => depth += 1,
                ')' => {
                    depth -= 1;
                    if depth == 0 {
                        close = Some(open + i);
                        break;
                    }
                }
                _ => {}
            }
        }
        if let Some(close) = close {
            let line = code[..start].matches('\n').count() + 1;
            found.push((line, name, rest[open + 1..close].to_string()));
        }
    }
    found
}

#[test]
fn no_function_takes_a_bool() {
    none(
        "bool parameters (an enum says which, a struct groups them)",
        sources()
            .into_iter()
            .flat_map(|(path, _, code)| {
                signatures(&code)
                    .into_iter()
                    .filter(|(_, _, params)| {
                        params.split(',').any(|param| {
                            param
                                .split_once(':')
                                .is_some_and(|(_, ty)| ty.trim() == "bool")
                        })
                    })
                    .map(|(line, name, _)| format!("{path}:{line}: fn {name}"))
                    .collect::<Vec<_>>()
            })
            .collect(),
    );
}

#[test]
fn the_checks_see_what_they_look_for() {
    // Each check, on a line it must flag and one it must not.
    let sigs = signatures("pub fn set(on: bool, n: u32) {}\nfn pointer(f: fn(bool) -> u8) {}\n");
    assert_eq!(sigs.len(), 2, "{sigs:?}");
    assert_eq!(sigs[0].1, "set");
    assert!(sigs[0].2.contains("on: bool"));
    assert!(
        !sigs[1]
            .2
            .split(',')
            .any(|p| p.split_once(':').is_some_and(|(_, t)| t.trim() == "bool"))
    );
    let siblings = ["a", "b", "c", "d", "mod"].map(String::from);
    assert_eq!(
        imported_siblings(
            "a",
            "use super::b::X;\nuse super::{c::Y, Z};\npub use super::d::W;\nuse crate::e;",
            &siblings
        ),
        ["b", "c", "mod"]
    );
    assert_eq!(
        imported_siblings("mod", "use b::X;\npub use c::Y;\nuse std::fmt;", &siblings),
        ["b"]
    );
}

/// The functions of `code` longer than `most` lines, with where they
/// start: from `fn` to the closing brace at the same indentation. A
/// function whose docs or attributes follow a comment starting `// Long by
/// design:` (which says why one long body is the clearest form) is left
/// out.
fn long_functions(code: &str, most: usize) -> Vec<(usize, String, usize)> {
    let lines: Vec<&str> = code.lines().collect();
    let mut found = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let trimmed = line.trim_start();
        let indent = &line[..line.len() - trimmed.len()];
        let head = trimmed
            .trim_start_matches("pub ")
            .trim_start_matches("pub(crate) ")
            .trim_start_matches("pub(super) ")
            .trim_start_matches("const ")
            .trim_start_matches("async ")
            .trim_start_matches("unsafe ")
            .trim_start_matches("extern \"C\" ");
        let Some(rest) = head.strip_prefix("fn ") else {
            continue;
        };
        let name: String = rest
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        // A declaration without a body (a trait's) ends in `;`.
        let Some(open) = lines[i..]
            .iter()
            .position(|l| l.contains('{') || l.trim_end().ends_with(';'))
        else {
            continue;
        };
        if !lines[i + open].contains('{') {
            continue;
        }
        let closing = format!("{indent}}}");
        let Some(end) = lines[i..].iter().position(|l| *l == closing) else {
            continue;
        };
        let mut above = i;
        while above > 0 {
            let prev = lines[above - 1].trim_start();
            // Docs, attributes and plain comments above the function.
            if prev.starts_with("//") || prev.starts_with("#[") {
                above -= 1;
            } else {
                break;
            }
        }
        let excused = lines[above..i]
            .iter()
            .any(|l| l.trim_start().starts_with("// Long by design:"));
        if end + 1 > most && !excused {
            found.push((i + 1, name, end + 1));
        }
    }
    found
}

#[test]
fn no_function_is_over_80_lines() {
    none(
        "functions over 80 lines (split them, or say why one long body is clearest)",
        sources()
            .into_iter()
            .flat_map(|(path, _, code)| {
                long_functions(&code, 80)
                    .into_iter()
                    .map(|(line, name, lines)| format!("{path}:{line}: fn {name}: {lines} lines"))
                    .collect::<Vec<_>>()
            })
            .collect(),
    );
}

/// The fields of a job's state hash that only the scripts (`src/lua`)
/// and `store`, which reads them beside the scripts, may name. The
/// generic ones (`fence`, `paused`) are left out: they are words of other
/// things too.
const STATE_FIELDS: [&str; 15] = [
    "last_tick",
    "missed_total",
    "missed_until",
    "paused_by",
    "paused_at_ms",
    "outcome_status",
    "outcome_tick",
    "outcome_fence",
    "outcome_replica",
    "outcome_duration_ms",
    "outcome_finished_ms",
    "repair_field",
    "repair_value",
    "repair_at",
    "born",
];

#[test]
fn no_state_field_is_named_outside_store() {
    let root = &crate::support::repository();
    let scripts: String = std::fs::read_dir(root.join("src/lua"))
        .expect("src/lua")
        .map(|entry| std::fs::read_to_string(entry.expect("an entry").path()).expect("a script"))
        .collect();
    none(
        "state fields the scripts never write (take them off STATE_FIELDS)",
        STATE_FIELDS
            .iter()
            .filter(|field| !scripts.contains(&format!("'{field}'")))
            .map(|field| field.to_string())
            .collect(),
    );
    none(
        "state fields named outside store (read them through store::JobState)",
        sources()
            .into_iter()
            .filter(|(path, _, _)| !path.starts_with("src/store/"))
            .flat_map(|(path, _, code)| {
                STATE_FIELDS
                    .iter()
                    .filter(|field| code.contains(&format!("\"{field}\"")))
                    .map(|field| format!("{path}: {field}"))
                    .collect::<Vec<_>>()
            })
            .collect(),
    );
}

/// Every `file:function` anchor in ARCHITECTURE.md (`src/…/x.rs:name`)
/// names a function of that file: the path of a tick stays true as code
/// moves.
#[test]
fn architecture_anchors_name_functions_that_exist() {
    let root = &crate::support::repository();
    let text = std::fs::read_to_string(root.join("ARCHITECTURE.md")).expect("ARCHITECTURE.md");
    let anchors: Vec<(&str, &str)> = text
        .split('`')
        .skip(1)
        .step_by(2)
        .filter_map(|code| code.split_once(".rs:"))
        .filter(|(path, name)| {
            path.starts_with("src/")
                && !name.is_empty()
                && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        })
        .collect();
    assert!(
        anchors.len() >= 5,
        "the path of a tick lost its anchors: {anchors:?}"
    );
    none(
        "anchors in ARCHITECTURE.md that name no function of their file",
        anchors
            .iter()
            .filter(|(path, name)| {
                let file = root.join(format!("{path}.rs"));
                let code = std::fs::read_to_string(&file).unwrap_or_default();
                !code.contains(&format!("fn {name}(")) && !code.contains(&format!("fn {name}<"))
            })
            .map(|(path, name)| format!("{path}.rs:{name}"))
            .collect(),
    );
}

/// The files of a module directory that `file` imports from: a sibling
/// named in a `use super::…` path, and `mod.rs` for an item it defines
/// (`use super::Item`); for `mod.rs`, the children it imports from (a
/// `pub use`, the module's public face, is not an import).
fn imported_siblings(file: &str, code: &str, siblings: &[String]) -> Vec<String> {
    let mut found = Vec::new();
    for statement in code.split(';') {
        let statement = statement.trim();
        // A module's `pub use` of a child's item is its façade, not an
        // import: only what a file uses itself counts.
        let Some(path) = statement.strip_prefix("use ") else {
            continue;
        };
        let names: Vec<&str> = if file == "mod" {
            vec![path.split("::").next().unwrap_or_default()]
        } else if let Some(rest) = path.strip_prefix("super::") {
            match rest.strip_prefix('{') {
                // `use super::{a::B, C}`: each part's first name.
                Some(group) => group
                    .trim_end_matches('}')
                    .split(',')
                    .map(|part| part.trim().split("::").next().unwrap_or_default())
                    .collect(),
                None => vec![rest.split("::").next().unwrap_or_default()],
            }
        } else {
            Vec::new()
        };
        for name in names {
            let target = if siblings.iter().any(|s| s == name) {
                name
            } else if file != "mod" && !name.is_empty() && name != "*" && name != "self" {
                "mod"
            } else {
                continue;
            };
            if target != file && !found.iter().any(|f| f == target) {
                found.push(target.to_string());
            }
        }
    }
    found
}

/// Files that import each other by design: the spawn's child (`child.rs`)
/// runs after `clone` on what `mod.rs` prepared for it, and `mod.rs`
/// starts it; the two are one mechanism split for reading.
const SHARE_BY_DESIGN: &[&str] = &["src/runner/spawn: child.rs and mod.rs"];

/// No two files of a module import each other: each concept has one owner,
/// and what two files both need lives in a third that needs neither.
#[test]
fn no_two_files_import_each_other() {
    let mut by_dir: std::collections::BTreeMap<String, Vec<(String, String)>> =
        std::collections::BTreeMap::new();
    for (path, _, code) in sources() {
        let path = Path::new(&path);
        let dir = path.parent().expect("a file in a directory");
        let stem = path
            .file_stem()
            .expect("a file name")
            .to_string_lossy()
            .into_owned();
        by_dir
            .entry(dir.to_string_lossy().into_owned())
            .or_default()
            .push((stem, code));
    }
    let mut mutual = Vec::new();
    for (dir, files) in &by_dir {
        if !files.iter().any(|(stem, _)| stem == "mod") {
            continue;
        }
        // The files, and the directories of child modules (`spawn/`).
        let siblings: Vec<String> = files
            .iter()
            .map(|(stem, _)| stem.clone())
            .chain(by_dir.keys().filter_map(|other| {
                let other = Path::new(other);
                (other.parent() == Some(Path::new(dir)))
                    .then(|| other.file_name())
                    .flatten()
                    .map(|name| name.to_string_lossy().into_owned())
            }))
            .collect();
        let edges: Vec<(String, Vec<String>)> = files
            .iter()
            .map(|(stem, code)| (stem.clone(), imported_siblings(stem, code, &siblings)))
            .collect();
        for (a, imports) in &edges {
            for b in imports {
                let back = edges
                    .iter()
                    .any(|(name, theirs)| name == b && theirs.contains(a));
                let pair = format!("{dir}: {a}.rs and {b}.rs");
                if back && a < b && !SHARE_BY_DESIGN.contains(&pair.as_str()) {
                    mutual.push(pair);
                }
            }
        }
    }
    none("files that import each other", mutual);
}
