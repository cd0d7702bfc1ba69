//! A dashboard token's secret (`Token`), read once per load from the
//! environment variable or file the config names and never printed, and
//! the HMACs made from it: the session cookie, the CSRF token, the
//! constant-time comparisons. Why a secret cannot be read is a
//! `TokenError`.

use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

use crate::config::TokenSource;

/// The label of a session cookie's HMAC.
pub(super) const SESSION_LABEL: &[u8] = b"cronlease dashboard session";
/// The label of a form's CSRF HMAC.
pub(super) const CSRF_LABEL: &[u8] = b"cronlease dashboard csrf";

/// Why the token could not be read when the replica started.
#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    #[error(
        "[daemon] dashboard_token_env: the environment variable {0} is not set or empty (it holds the dashboard's operator token)"
    )]
    EnvMissing(String),
    #[error("[daemon] dashboard_token_file: cannot read {path}: {source}")]
    File {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "[daemon] dashboard_token_file: {0} is empty (it should hold the dashboard's operator token)"
    )]
    FileEmpty(String),
    #[error(
        "[daemon] dashboard_token_*: the token is {0} bytes long; expected at least 16 (generate one with `openssl rand -hex 32`)"
    )]
    TooShort(usize),
    /// A `[[dashboard.tokens]]` entry's secret (`what` names the file,
    /// line and entry; `why` never holds the secret).
    #[error("{what}: {why}")]
    Unreadable { what: String, why: String },
    #[error(
        "{what}: the same secret as the token {other:?}: expected a secret of its own (a token is told apart by its secret)"
    )]
    SameSecret { what: String, other: String },
}

/// The operator token. Its `Debug` never shows it.
pub struct Token(Vec<u8>);

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Token(…)")
    }
}

/// The shortest token accepted: shorter ones can be guessed.
const MIN_TOKEN_BYTES: usize = 16;

impl Token {
    /// Reads the token from where the config says.
    pub fn load(source: &TokenSource) -> Result<Token, TokenError> {
        let text = match source {
            TokenSource::Env(name) => std::env::var(name)
                .ok()
                .filter(|v| !v.trim().is_empty())
                .ok_or_else(|| TokenError::EnvMissing(name.clone()))?,
            TokenSource::File(path) => {
                let text = std::fs::read_to_string(path).map_err(|source| TokenError::File {
                    path: path.display().to_string(),
                    source,
                })?;
                if text.trim().is_empty() {
                    return Err(TokenError::FileEmpty(path.display().to_string()));
                }
                text
            }
        };
        Token::new(text.trim())
    }

    /// A token from its text (trimmed by the caller).
    pub fn new(text: &str) -> Result<Token, TokenError> {
        if text.len() < MIN_TOKEN_BYTES {
            return Err(TokenError::TooShort(text.len()));
        }
        Ok(Token(text.as_bytes().to_vec()))
    }

    /// The token itself: for the redaction of runs' output only.
    pub(crate) fn secret_bytes(&self) -> &[u8] {
        &self.0
    }

    fn mac(&self, label: &[u8]) -> Hmac<Sha256> {
        let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(&self.0)
            .expect("HMAC takes a key of any length");
        mac.update(label);
        mac
    }

    /// The session cookie's value.
    pub(super) fn session(&self) -> String {
        hex(&self.mac(SESSION_LABEL).finalize().into_bytes())
    }

    /// The CSRF token every action form carries.
    pub(super) fn csrf(&self) -> String {
        hex(&self.mac(CSRF_LABEL).finalize().into_bytes())
    }

    /// Whether `presented` is the token (constant time).
    pub(super) fn matches(&self, presented: &str) -> bool {
        let Ok(presented) = Token::new(presented.trim()) else {
            return false;
        };
        // Compare the HMACs of one label under both keys: equal lengths,
        // compared in constant time by `verify_slice`.
        let theirs = presented.mac(b"compare").finalize().into_bytes();
        self.mac(b"compare").verify_slice(&theirs).is_ok()
    }

    /// Whether `other` has the same secret (constant time).
    pub(super) fn same_secret(&self, other: &Token) -> bool {
        let theirs = other.mac(b"compare").finalize().into_bytes();
        self.mac(b"compare").verify_slice(&theirs).is_ok()
    }

    /// Whether `value` is this token's session (or CSRF) value, in
    /// constant time.
    pub(super) fn verify(&self, label: &[u8], value: &str) -> bool {
        let Some(bytes) = unhex(value) else {
            return false;
        };
        self.mac(label).verify_slice(&bytes).is_ok()
    }
}

/// `bytes` as lowercase hex digits (a cookie's or a form's value).
fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    bytes.iter().fold(String::new(), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

/// The bytes of hex digits `text`; `None` when it is not hex.
fn unhex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect()
}
