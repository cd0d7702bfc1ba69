//! TOML's "duplicate key" errors, said the way an operator thinks of them.
//!
//! The parser reports a table defined twice (`[jobs.draw]` pasted in again)
//! as one "duplicate key" for the header and one more for every key of the
//! second table, none of them naming the table. This module finds table
//! headers in the text itself, so a table defined twice becomes one problem
//! that names it and the line of its first definition, and a key set twice
//! names its table and its first line.

use std::ops::Range;

/// A `[table]` header: its dotted path, where it is, and where its body ends.
struct Header {
    path: Vec<String>,
    line: usize,
    /// Byte range from the header to the next header (or the end).
    body: Range<usize>,
}

/// One rewritten problem: where (byte offset) and what.
pub(super) struct Duplicate {
    pub(super) offset: usize,
    pub(super) message: String,
}

/// Rewrites the parser's duplicate-key errors (given by their byte spans).
/// Returns one problem per table defined twice and per key set twice; every
/// duplicate-key span inside a table defined twice is absorbed by that
/// table's problem.
pub(super) fn explain(text: &str, spans: &[Range<usize>]) -> Vec<Duplicate> {
    let headers = headers(text);
    let mut problems = Vec::new();
    let mut repeated: Vec<&Header> = Vec::new();
    for (index, header) in headers.iter().enumerate() {
        if let Some(first) = headers[..index].iter().find(|h| h.path == header.path) {
            repeated.push(header);
            problems.push(Duplicate {
                offset: header.body.start,
                message: format!(
                    "table [{}] is defined twice (first at line {}): a table may appear once; \
                     merge the two or rename one",
                    render(&header.path),
                    first.line
                ),
            });
        }
    }
    for span in spans {
        if repeated.iter().any(|h| h.body.contains(&span.start)) {
            continue;
        }
        let key = text.get(span.clone()).unwrap_or_default().trim();
        let table = headers.iter().rev().find(|h| h.body.contains(&span.start));
        let (table_name, body_start) = match table {
            Some(h) => (format!("[{}]", render(&h.path)), h.body.start),
            None => ("the top level".to_string(), 0),
        };
        let first_line = first_assignment(text, body_start..span.start, key)
            .map(|line| format!(" (first at line {line})"))
            .unwrap_or_default();
        problems.push(Duplicate {
            offset: span.start,
            message: format!(
                "key `{key}` is set twice in {table_name}{first_line}: a key may appear once per table"
            ),
        });
    }
    problems
}

/// The 1-based line of the first `key = …` in `range` of `text`.
fn first_assignment(text: &str, range: Range<usize>, key: &str) -> Option<usize> {
    let region = text.get(range.clone())?;
    let mut offset = range.start;
    for line in region.split_inclusive('\n') {
        let trimmed = line.trim_start();
        if let Some(rest) = trimmed.strip_prefix(key)
            && rest.trim_start().starts_with('=')
        {
            return Some(text[..offset].matches('\n').count() + 1);
        }
        offset += line.len();
    }
    None
}

fn render(path: &[String]) -> String {
    path.iter()
        .map(|part| {
            if !part.is_empty()
                && part
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
            {
                part.clone()
            } else {
                format!("{part:?}")
            }
        })
        .collect::<Vec<_>>()
        .join(".")
}

/// Every `[a.b]` header line (not `[[array]]` ones), in file order.
fn headers(text: &str) -> Vec<Header> {
    let mut found: Vec<(Vec<String>, usize, usize)> = Vec::new();
    let mut offset = 0;
    for (index, line) in text.split_inclusive('\n').enumerate() {
        let trimmed = line.trim_start();
        if trimmed.starts_with('[')
            && !trimmed.starts_with("[[")
            && let Some(path) = header_path(&trimmed[1..])
        {
            found.push((path, index + 1, offset));
        }
        offset += line.len();
    }
    let ends: Vec<usize> = found
        .iter()
        .skip(1)
        .map(|(_, _, start)| *start)
        .chain([text.len()])
        .collect();
    found
        .into_iter()
        .zip(ends)
        .map(|((path, line, start), end)| Header {
            path,
            line,
            body: start..end,
        })
        .collect()
}

/// The dotted key of a header, from just after its `[` to its `]`: bare
/// keys and "double" or 'single' quoted ones. `None` if it is not one.
fn header_path(text: &str) -> Option<Vec<String>> {
    let mut path = Vec::new();
    let mut rest = text.trim_start();
    loop {
        let (part, after) = if let Some(quoted) = rest.strip_prefix('"') {
            let end = quoted.find('"')?;
            (quoted[..end].to_string(), &quoted[end + 1..])
        } else if let Some(quoted) = rest.strip_prefix('\'') {
            let end = quoted.find('\'')?;
            (quoted[..end].to_string(), &quoted[end + 1..])
        } else {
            let end = rest
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '-'))
                .unwrap_or(rest.len());
            if end == 0 {
                return None;
            }
            (rest[..end].to_string(), &rest[end..])
        };
        path.push(part);
        let after = after.trim_start();
        if let Some(next) = after.strip_prefix('.') {
            rest = next.trim_start();
        } else if after.starts_with(']') {
            return Some(path);
        } else {
            return None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(text: &str, spans: &[Range<usize>], expected: &[&str]) {
        let got: Vec<String> = explain(text, spans)
            .into_iter()
            .map(|d| d.message)
            .collect();
        assert_eq!(got, expected);
    }

    #[test]
    fn a_table_defined_twice_is_one_problem_naming_it() {
        let text =
            "[jobs.draw]\na = 1\n\n[jobs.\"other\"]\na = 1\n[ jobs . 'draw' ]\na = 2\nb = 3\n";
        let second = text.find("[ jobs").unwrap();
        let spans = [
            second + 9..second + 15,
            second + 18..second + 19,
            second + 24..second + 25,
        ];
        check(
            text,
            &spans,
            &[
                "table [jobs.draw] is defined twice (first at line 1): a table may appear once; merge the two or rename one",
            ],
        );
    }

    #[test]
    fn a_key_set_twice_names_its_table_and_first_line() {
        let text = "[redis]\nurl = \"a\"\n# note\nurl = \"b\"\n";
        let at = text.rfind("url").unwrap();
        check(
            text,
            std::slice::from_ref(&(at..at + 3)),
            &[
                "key `url` is set twice in [redis] (first at line 2): a key may appear once per table",
            ],
        );
    }
}
