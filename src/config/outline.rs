//! A config document cut at its table headers, so that it can be parsed a
//! piece at a time.
//!
//! toml parses a document whole: every token, every event and the whole
//! tree are in memory at once, about 2.9 KB per job of a plain job table
//! (a small `BTreeMap` node per job table, arrays, tokens, events), which
//! would make the parse the peak of a replica's memory.
//! Here the document is lexed once (tokens streamed, none kept) to find
//! where each top-level table starts; each job's text is then parsed on
//! its own when the job is validated, and dropped with it.
//!
//! Only documents of the plain shape are cut: no key before the first
//! header, every header a list of bare keys (`[redis]`, `[jobs.backup]`,
//! `[jobs.backup.env]`), no `[jobs]` or `[[…]]` header, and each section
//! (each job, for `jobs`) in one run of consecutive headers. Its pieces
//! then define disjoint parts of the tree, so parsing them one by one
//! means what parsing the whole does. Any other document, and any piece
//! that does not parse, goes to the whole-document parse, whose problems
//! (syntax, duplicate tables) are the ones reported: a bad file gets the
//! same messages whichever way it was read.

use std::collections::HashSet;
use std::ops::Range;

use toml::Spanned;
use toml::de::{DeTable, DeValue};
use toml_parser::Source;
use toml_parser::lexer::{Token, TokenKind};

/// Where the document's sections and jobs are.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Outline<'i> {
    /// The text of each top-level section other than `jobs` (`[redis]` with
    /// its sub-tables, `[daemon]`, an unknown one), in file order.
    pub(super) sections: Vec<Range<usize>>,
    /// Each job's name and text (its `[jobs.<name>]` and sub-tables), by
    /// name: the order in which the whole-document parse hands them over.
    pub(super) jobs: Vec<(&'i str, Range<usize>)>,
}

/// Cuts `text` at its table headers; None when it is not of the plain
/// shape (see the module's documentation) and must be parsed whole.
pub(super) fn outline(text: &str) -> Option<Outline<'_>> {
    let headers = headers(text)?;
    let mut outline = Outline {
        sections: Vec::new(),
        jobs: Vec::new(),
    };
    let mut seen: HashSet<(&str, Option<&str>)> = HashSet::new();
    let mut previous: Option<(&str, Option<&str>)> = None;
    for (i, header) in headers.iter().enumerate() {
        let end = headers.get(i + 1).map_or(text.len(), |next| next.start);
        let owner = match header.keys.as_slice() {
            ["jobs", name, ..] => ("jobs", Some(*name)),
            ["jobs"] | [] => return None,
            [section, ..] => (*section, None),
        };
        if previous == Some(owner) {
            // A sub-table of the same section or job: the same piece.
            match owner.1 {
                Some(_) => outline.jobs.last_mut()?.1.end = end,
                None => outline.sections.last_mut()?.end = end,
            }
            continue;
        }
        if !seen.insert(owner) {
            return None;
        }
        previous = Some(owner);
        match owner.1 {
            Some(name) => outline.jobs.push((name, header.start..end)),
            None => outline.sections.push(header.start..end),
        }
    }
    outline.jobs.sort_unstable_by_key(|(name, _)| *name);
    Some(outline)
}

/// A `[a.b.c]` header: where it starts and its keys.
struct Header<'i> {
    start: usize,
    keys: Vec<&'i str>,
}

/// Every table header of `text`, in order; None when something else than
/// comments comes before the first, when a header is not a list of bare
/// keys, or when brackets do not pair up.
fn headers(text: &str) -> Option<Vec<Header<'_>>> {
    let mut tokens = Source::new(text).lex();
    let mut headers = Vec::new();
    // Open `[` and `{` of values (arrays, inline tables), which may span
    // lines: a `[` at the start of a line is a header only outside them.
    let mut depth = 0usize;
    let mut line_start = true;
    while let Some(token) = tokens.next() {
        match token.kind() {
            TokenKind::Eof => break,
            TokenKind::Newline => line_start = true,
            TokenKind::Whitespace | TokenKind::Comment => {}
            TokenKind::LeftSquareBracket if line_start && depth == 0 => {
                headers.push(header(text, token.span().start(), &mut tokens)?);
                line_start = false;
            }
            TokenKind::LeftSquareBracket | TokenKind::LeftCurlyBracket => {
                depth += 1;
                line_start = false;
            }
            TokenKind::RightSquareBracket | TokenKind::RightCurlyBracket => {
                depth = depth.checked_sub(1)?;
                line_start = false;
            }
            _ if headers.is_empty() => return None,
            _ => line_start = false,
        }
    }
    (depth == 0).then_some(headers)
}

/// The rest of a header whose `[` starts at `start`: bare keys separated
/// by dots, then `]`.
fn header<'i>(
    text: &'i str,
    start: usize,
    tokens: &mut impl Iterator<Item = Token>,
) -> Option<Header<'i>> {
    let mut keys = Vec::new();
    let mut expect_key = true;
    for token in tokens.by_ref() {
        match token.kind() {
            TokenKind::Whitespace => {}
            TokenKind::Atom if expect_key => {
                let key = text.get(token.span().start()..token.span().end())?;
                if !is_bare_key(key) {
                    return None;
                }
                keys.push(key);
                expect_key = false;
            }
            TokenKind::Dot if !expect_key => expect_key = true,
            TokenKind::RightSquareBracket if !expect_key => {
                return Some(Header { start, keys });
            }
            _ => return None,
        }
    }
    None
}

/// TOML's bare keys: `A-Za-z0-9_-`, at least one.
fn is_bare_key(key: &str) -> bool {
    !key.is_empty()
        && key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-'))
}

/// Parses one piece of the document (`range` of `text`) into its table,
/// with spans into the whole `text`; None when it has a syntax error.
pub(super) fn parse_piece<'i>(text: &'i str, range: Range<usize>) -> Option<DeTable<'i>> {
    let offset = range.start;
    let (table, errors) = DeTable::parse_recoverable(text.get(range)?);
    if !errors.is_empty() {
        return None;
    }
    Some(shift_table(table.into_inner(), offset))
}

fn shift_table(table: DeTable<'_>, offset: usize) -> DeTable<'_> {
    table
        .into_iter()
        .map(|(key, value)| (shift_span(key, offset), shift_value(value, offset)))
        .collect()
}

fn shift_value(value: Spanned<DeValue<'_>>, offset: usize) -> Spanned<DeValue<'_>> {
    let span = value.span();
    let inner = match value.into_inner() {
        DeValue::Table(table) => DeValue::Table(shift_table(table, offset)),
        DeValue::Array(array) => DeValue::Array(
            array
                .into_iter()
                .map(|item| shift_value(item, offset))
                .collect(),
        ),
        scalar => scalar,
    };
    Spanned::new(span.start + offset..span.end + offset, inner)
}

fn shift_span<T>(spanned: Spanned<T>, offset: usize) -> Spanned<T> {
    let span = spanned.span();
    Spanned::new(span.start + offset..span.end + offset, spanned.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn get<'a, 'i>(table: &'a DeTable<'i>, key: &str) -> &'a Spanned<DeValue<'i>> {
        table
            .iter()
            .find(|(k, _)| k.get_ref() == key)
            .map(|(_, v)| v)
            .expect("the key is there")
    }

    fn jobs<'i>(outline: &Outline<'i>, text: &'i str) -> Vec<(&'i str, &'i str)> {
        outline
            .jobs
            .iter()
            .map(|(name, range)| (*name, &text[range.clone()]))
            .collect()
    }

    #[test]
    fn a_plain_document_is_cut_at_its_sections_and_jobs() {
        let text = "# jobs\n[redis]\nurl = \"redis://h\"\n[redis.tls]\nca_file = \"a\"\n\n\
                    [jobs.b]\nschedule = \"[x]\"\ncommand = [\n  \"a\",\n  [1],\n]\n\
                    [jobs.b.env]\nX = \"1\"\n[jobs.a]\nschedule = \"\"\"\n[jobs.c]\n\"\"\"\n\
                    [daemon] # comment\nlease = \"30s\"\n";
        let outline = outline(text).expect("a plain document");
        let sections: Vec<&str> = outline.sections.iter().map(|r| &text[r.clone()]).collect();
        assert_eq!(
            sections,
            [
                "[redis]\nurl = \"redis://h\"\n[redis.tls]\nca_file = \"a\"\n\n",
                "[daemon] # comment\nlease = \"30s\"\n",
            ]
        );
        assert_eq!(
            jobs(&outline, text),
            [
                ("a", "[jobs.a]\nschedule = \"\"\"\n[jobs.c]\n\"\"\"\n"),
                (
                    "b",
                    "[jobs.b]\nschedule = \"[x]\"\ncommand = [\n  \"a\",\n  [1],\n]\n[jobs.b.env]\nX = \"1\"\n"
                ),
            ]
        );
    }

    #[test]
    fn other_shapes_are_parsed_whole() {
        for text in [
            "top = 1\n[redis]\n",
            "[jobs]\na.schedule = \"x\"\n",
            "[[jobs.a]]\n",
            "[jobs.\"a.b\"]\n",
            "[jobs.a]\n[jobs.b]\n[jobs.a.env]\n",
            "[redis]\n[jobs.a]\n[redis.tls]\n",
            "[jobs.a]\nx = [1,\n",
            "[jobs.a]\nx = 1]\n",
            "[jobs.a\n",
            "[jobs.]\n",
        ] {
            assert_eq!(outline(text), None, "{text:?}");
        }
    }

    #[test]
    fn a_piece_keeps_its_place_in_the_document() {
        let text =
            "[redis]\nurl = \"u\"\n[jobs.a]\ncommand = [\"x\", \"y\"]\nenv = { K = \"v\" }\n";
        let outline = outline(text).expect("a plain document");
        let range = outline.jobs[0].1.clone();
        let piece = parse_piece(text, range).expect("a valid piece");
        let DeValue::Table(jobs) = get(&piece, "jobs").get_ref() else {
            panic!("jobs is a table");
        };
        let (name, job) = jobs.iter().next().expect("one job");
        assert_eq!(&text[name.span()], "a");
        let DeValue::Table(job) = job.get_ref() else {
            panic!("a job is a table");
        };
        let command = get(job, "command");
        assert_eq!(&text[command.span()], "[\"x\", \"y\"]");
        let DeValue::Array(items) = command.get_ref() else {
            panic!("command is an array");
        };
        assert_eq!(&text[items[1].span()], "\"y\"");
        let DeValue::Table(env) = get(job, "env").get_ref() else {
            panic!("env is a table");
        };
        assert_eq!(&text[get(env, "K").span()], "\"v\"");
        assert!(parse_piece(text, 0..12).is_none(), "a cut through a string");
        // A table defined twice in a row is one piece, which does not parse.
        let twice = "[jobs.a]\n[jobs.a]\n";
        let pieces = super::outline(twice).expect("one piece");
        assert!(parse_piece(twice, pieces.jobs[0].1.clone()).is_none());
    }
}
