//! Reading a script's reply: [`Reply`] holds the reply's items and the
//! script's name, and every read that fails gives the same error, which
//! names the script and shows the whole reply. Fences are read in one
//! place: a negative fence is a protocol error, never a wrapped number.

use redis::Value;

use super::error::StoreError;

/// The error for a reply to `what` that is not what its script answers.
pub(super) fn protocol(what: &'static str, reply: &Value) -> StoreError {
    StoreError::Protocol {
        what,
        reply: format!("{reply:?}"),
    }
}

/// A reply value as text, if it is text, a number or `OK`.
pub(super) fn as_string(value: &Value) -> Option<String> {
    match value {
        Value::BulkString(bytes) => String::from_utf8(bytes.clone()).ok(),
        Value::SimpleString(s) => Some(s.clone()),
        Value::Int(n) => Some(n.to_string()),
        Value::Okay => Some("OK".to_string()),
        _ => None,
    }
}

/// A reply value as an integer, if it is one or text that reads as one.
pub(super) fn as_int(value: &Value) -> Option<i64> {
    match value {
        Value::Int(n) => Some(*n),
        Value::BulkString(bytes) => std::str::from_utf8(bytes).ok()?.parse().ok(),
        Value::SimpleString(s) => s.parse().ok(),
        _ => None,
    }
}

/// The items of one script reply (a Redis array).
pub(super) struct Reply {
    what: &'static str,
    items: Vec<Value>,
}

impl Reply {
    /// `value` as the reply of script `what`; an error unless it is an array.
    pub(super) fn new(value: Value, what: &'static str) -> Result<Reply, StoreError> {
        match value {
            Value::Array(items) => Ok(Reply { what, items }),
            other => Err(protocol(what, &other)),
        }
    }

    /// The error for this reply: it is not what the script should answer.
    pub(super) fn bad(&self) -> StoreError {
        StoreError::Protocol {
            what: self.what,
            reply: format!("{:?}", self.items),
        }
    }

    /// How many items there are.
    pub(super) fn len(&self) -> usize {
        self.items.len()
    }

    /// Item `i` as text; an error when missing or not text.
    pub(super) fn string(&self, i: usize) -> Result<String, StoreError> {
        self.items
            .get(i)
            .and_then(as_string)
            .ok_or_else(|| self.bad())
    }

    /// Item `i` as text, empty when missing.
    pub(super) fn string_or_empty(&self, i: usize) -> String {
        self.items.get(i).and_then(as_string).unwrap_or_default()
    }

    /// Item `i` as an integer; an error when missing or not a number.
    pub(super) fn int(&self, i: usize) -> Result<i64, StoreError> {
        self.items.get(i).and_then(as_int).ok_or_else(|| self.bad())
    }

    /// Item `i` as an integer, `default` when missing (older scripts answer
    /// with fewer items).
    pub(super) fn int_or(&self, i: usize, default: i64) -> i64 {
        self.items.get(i).and_then(as_int).unwrap_or(default)
    }

    /// Item `i` as a list of texts, empty when missing (or not a list).
    pub(super) fn strings(&self, i: usize) -> Vec<String> {
        match self.items.get(i) {
            Some(Value::Array(items)) => items.iter().filter_map(as_string).collect(),
            _ => Vec::new(),
        }
    }

    /// Item `i` is the flag 1.
    /// Item `i` as what a claim found of the job's state: 1 behind, a
    /// checked field's name implausible, 0 or missing sound; anything else
    /// is an error.
    pub(super) fn state_check(&self, i: usize) -> Result<super::StateCheck, StoreError> {
        use super::{StateCheck, StateField};
        match self.items.get(i) {
            None => Ok(StateCheck::Sound),
            Some(Value::BulkString(name)) => std::str::from_utf8(name)
                .ok()
                .and_then(StateField::parse)
                .map(StateCheck::Implausible)
                .ok_or_else(|| self.bad()),
            Some(_) => match self.int_or(i, -1) {
                0 => Ok(StateCheck::Sound),
                1 => Ok(StateCheck::Behind),
                _ => Err(self.bad()),
            },
        }
    }

    /// Item `i` as a fence; an error when missing, not a number or negative.
    pub(super) fn fence(&self, i: usize) -> Result<u64, StoreError> {
        self.items
            .get(i)
            .and_then(fence_of)
            .ok_or_else(|| self.bad())
    }

    /// Item `i` as a fence, 0 when missing.
    pub(super) fn fence_or_zero(&self, i: usize) -> Result<u64, StoreError> {
        if self.items.get(i).is_none() {
            return Ok(0);
        }
        self.fence(i)
    }
}

/// A reply item (or a whole reply) as a fence; None when it is not a
/// number or negative.
pub(super) fn fence_of(value: &Value) -> Option<u64> {
    u64::try_from(as_int(value)?).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reply(items: Vec<Value>) -> Reply {
        Reply::new(Value::Array(items), "claim").expect("an array is a reply")
    }

    #[test]
    fn reads_items_and_names_the_script_and_reply_when_one_is_wrong() {
        let r = reply(vec![
            Value::BulkString(b"claimed".to_vec()),
            Value::Int(7),
            Value::BulkString(b"-3".to_vec()),
        ]);
        assert_eq!(r.string(0).unwrap(), "claimed");
        assert_eq!(r.fence(1).unwrap(), 7);
        assert_eq!(r.int(2).unwrap(), -3);
        assert_eq!(r.int_or(9, -1), -1);
        assert_eq!(r.fence_or_zero(9).unwrap(), 0);
        assert_eq!(r.state_check(9).unwrap(), super::super::StateCheck::Sound);
        assert!(
            r.state_check(0).is_err(),
            "\"claimed\" names no checked field"
        );
        assert_eq!(
            r.state_check(1).unwrap_err().to_string(),
            r.bad().to_string()
        );
        let error = r.fence(2).unwrap_err().to_string();
        assert!(
            error.contains("claim") && error.contains("claimed"),
            "{error}"
        );
        assert!(r.int(3).is_err());
        assert!(Reply::new(Value::Int(1), "claim").is_err());
    }
}
