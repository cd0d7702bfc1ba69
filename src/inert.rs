//! What reaches people is inert: text that came from outside (a job's
//! output, a name or value read from Redis or a socket) with its control
//! characters escaped before it is printed to a terminal or written into a
//! log field, so it can neither move a cursor, recolour a screen, rewrite
//! a terminal's title nor start a forged log line.

use std::borrow::Cow;
use std::fmt::Write;

/// `text` with every control character (C0, DEL, C1; a newline, a carriage
/// return and ESC among them) and every Unicode bidirectional override
/// written as an escape: `\n`, `\r`, `\t`, else `\u{…}`. Printable text,
/// other languages' letters included, is left as it is; text without a
/// control character is borrowed, not copied.
pub fn escape(text: &str) -> Cow<'_, str> {
    if !text.chars().any(needs_escape) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if needs_escape(c) => {
                let _ = write!(out, "\\u{{{:x}}}", c as u32);
            }
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// [`escape`], keeping line breaks and tabs: for multi-line output (a run's
/// output tail) shown in a terminal, where lines are what a reader expects.
pub fn escape_keeping_lines(text: &str) -> Cow<'_, str> {
    if !text
        .chars()
        .any(|c| needs_escape(c) && !matches!(c, '\n' | '\t'))
    {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for line in text.split_inclusive('\n') {
        let (body, end) = match line.strip_suffix('\n') {
            Some(body) => (body, "\n"),
            None => (line, ""),
        };
        for piece in body.split('\t').enumerate() {
            if piece.0 > 0 {
                out.push('\t');
            }
            out.push_str(&escape(piece.1));
        }
        out.push_str(end);
    }
    Cow::Owned(out)
}

fn needs_escape(c: char) -> bool {
    c.is_control() || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// What `e` says with each of its causes after it (`a: b: c`): the HTTP
/// and SMTP clients' own messages name only the outermost step ("error
/// sending request"). Not made inert: callers escape what they print.
#[cfg(any(feature = "notify", feature = "http-jobs"))]
pub(crate) fn error_chain(e: &dyn std::error::Error) -> String {
    let mut message = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        message.push_str(": ");
        message.push_str(&cause.to_string());
        source = cause.source();
    }
    message
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_are_escaped_and_the_rest_left() {
        let check = |input: &str, expected: &str| assert_eq!(escape(input), expected, "{input:?}");
        check("plain text, déjà vu, 中文", "plain text, déjà vu, 中文");
        check("\x1b[31mred\x1b[0m", "\\u{1b}[31mred\\u{1b}[0m");
        check("a\nforged line", "a\\nforged line");
        check(
            "bell\x07 del\x7f c1\u{9b}",
            "bell\\u{7} del\\u{7f} c1\\u{9b}",
        );
        check("\u{202e}evil", "\\u{202e}evil");
        assert!(matches!(escape("clean"), Cow::Borrowed(_)));
    }

    #[test]
    fn lines_and_tabs_survive_when_kept() {
        assert_eq!(
            escape_keeping_lines("one\ttwo\n\x1b]0;title\x07three\r\n"),
            "one\ttwo\n\\u{1b}]0;title\\u{7}three\\r\n"
        );
    }
}
