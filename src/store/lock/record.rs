//! A lock's record: the value of its `lease` key, which says who holds it
//! (see `lock_acquire.lua`). The caller writes it whole; a re-entry or
//! release of one hold rewrites the count, a waiter appends `w`:
//!
//! ```text
//! 36:<run id>12:<holder>9:<host>|<since_ms>|<holds>[w]
//! ```
//!
//! The token (the run id, length-prefixed) comes first, so a release,
//! renewal or re-entry is one comparison with the value's beginning, and
//! no run id's token is the beginning of another's; holder and host are
//! length-prefixed too, since both are free text. The numbers come last,
//! so a script finds them from the end; `w` says a waiter waits for the
//! release. `since_ms` is the holder's estimate of the Redis time when it
//! asked (its clock plus the offset to Redis's it measured), so that the
//! script needs no `TIME`. The fence is not here but in the lock's state,
//! whose fence is the holder's (only a grant changes it).

/// `text` length-prefixed (`<bytes>:<text>`), appended to `out`.
pub(super) fn push_encoded(out: &mut String, text: &str) {
    // The length's decimal digits, without the formatting machinery.
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    let mut len = text.len();
    loop {
        at -= 1;
        // A digit: `len % 10` is below 10.
        digits[at] = b'0' + (len % 10) as u8;
        len /= 10;
        if len == 0 {
            break;
        }
    }
    for &digit in &digits[at..] {
        out.push(char::from(digit));
    }
    out.push(':');
    out.push_str(text);
}

/// The run id inside a token (made by [`push_encoded`]).
pub(super) fn run_id_of(token: &str) -> &str {
    token.split_once(':').map_or(token, |(_, run_id)| run_id)
}

/// The holder's part of a record: holder and host, each length-prefixed.
pub(super) fn holder_part(holder: &str, host: &str) -> String {
    let mut out = String::with_capacity(holder.len() + host.len() + 8);
    push_encoded(&mut out, holder);
    push_encoded(&mut out, host);
    out
}

/// One length-prefixed text at the beginning of `text`, and what follows.
fn decode(text: &str) -> Option<(&str, &str)> {
    let (len, rest) = text.split_once(':')?;
    if len.is_empty() || !len.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let len: usize = len.parse().ok()?;
    Some((rest.get(..len)?, rest.get(len..)?))
}

/// A lock's record, read back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Record<'a> {
    pub run_id: &'a str,
    pub holder: &'a str,
    pub host: &'a str,
    pub since_ms: i64,
    pub holds: u32,
}

/// `value` as a record; `None` unless it reads whole (an older cronlease
/// kept only the run id there).
pub(super) fn parse(value: &str) -> Option<Record<'_>> {
    let (run_id, rest) = decode(value)?;
    let (holder, rest) = decode(rest)?;
    let (host, rest) = decode(rest)?;
    let numbers = rest.strip_prefix('|')?;
    let numbers = numbers.strip_suffix('w').unwrap_or(numbers);
    let mut fields = numbers.split('|');
    let mut next = || -> Option<&str> {
        fields
            .next()
            .filter(|f| !f.is_empty() && f.bytes().all(|b| b.is_ascii_digit()))
    };
    let record = Record {
        run_id,
        holder,
        host,
        since_ms: next()?.parse().ok()?,
        holds: next()?.parse().ok()?,
    };
    fields.next().is_none().then_some(record)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_reads_back_as_the_caller_and_the_script_wrote_it() {
        let mut token = String::new();
        push_encoded(&mut token, "owner:a:b|1|2");
        assert_eq!(token, "13:owner:a:b|1|2");
        let mut long = String::new();
        push_encoded(&mut long, &"x".repeat(1234));
        assert!(long.starts_with("1234:x") && long.len() == 1239);
        let mut empty = String::new();
        push_encoded(&mut empty, "");
        assert_eq!(empty, "0:");
        assert_eq!(run_id_of(&token), "owner:a:b|1|2");
        let head = format!("{token}{}", holder_part("w|3|4|5|6", "höst"));
        for (tail, waiters) in [("|1700000000005|2", ""), ("|1700000000005|2", "w")] {
            let value = format!("{head}{tail}{waiters}");
            assert_eq!(
                parse(&value),
                Some(Record {
                    run_id: "owner:a:b|1|2",
                    holder: "w|3|4|5|6",
                    host: "höst",
                    since_ms: 1_700_000_000_005,
                    holds: 2,
                })
            );
        }
    }

    #[test]
    fn what_is_not_a_whole_record_does_not_read() {
        let head = format!("1:r{}", holder_part("h", "x"));
        for value in [
            "3f2a-an-older-run-id".to_string(),
            String::new(),
            format!("{head}|1"),
            format!("{head}|1|1|2"),
            format!("{head}|1|-1"),
            format!("{head}|1|2ww"),
            format!("{head}||2"),
            format!("{head}1|2"),
            "99:short".to_string(),
            "+1:r1:h1:x|1|1".to_string(),
            // A length inside a multi-byte character.
            "1:ö1:h1:x|1|1".to_string(),
        ] {
            assert_eq!(parse(&value), None, "{value:?}");
        }
    }
}
