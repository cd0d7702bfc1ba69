//! Who is asking: the tokens (`keys`), the session cookie made from one,
//! and the checks every form passes; what a token may do is
//! `api::permit`'s.
//!
//! The tokens are read once per load (start-up, SIGHUP) from the
//! environment variables or files the config names, and never printed. A
//! browser logs in by posting one once; the replica answers with a session
//! cookie that is an HMAC of a fixed label under that token's secret
//! (`HttpOnly`, `SameSite=Strict`) and a cookie naming the token, so no
//! session state is kept and every replica with the same tokens accepts
//! it. Each form carries a second HMAC (the CSRF token) and an
//! action also needs the request's `Origin`, when the browser sends one,
//! to be the dashboard's own. A script may instead send
//! `Authorization: Bearer <token>`, which browsers never add on their own.

use std::collections::{HashMap, VecDeque};
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::http::{HeaderMap, header};

use super::keys::{Key, KeyKind, Keyring, Scope};
use super::token::{CSRF_LABEL, SESSION_LABEL};
use crate::config::LEGACY_TOKEN_NAME;

/// The session cookie's name.
pub(super) const SESSION_COOKIE: &str = "cronlease_session";
/// The cookie holding the name the operator gave at login.
pub(super) const OPERATOR_COOKIE: &str = "cronlease_operator";
/// The cookie naming the token that logged in (none: the daemon's
/// token, `dashboard`).
pub(super) const TOKEN_COOKIE: &str = "cronlease_token";

/// A token that logged in (or came as a bearer token): its entry, and
/// the name the person gave at login.
#[derive(Debug, Clone)]
pub(super) struct Holder {
    pub(super) key: Arc<Key>,
    /// The name given at login (pages only).
    pub(super) person: Option<String>,
}

impl PartialEq for Holder {
    fn eq(&self, other: &Holder) -> bool {
        Arc::ptr_eq(&self.key, &other.key) && self.person == other.person
    }
}

impl Eq for Holder {}

impl Holder {
    /// Who its actions are recorded as, before `via dashboard …`: the
    /// daemon's token as `api` (bearer) or the name given at login, a
    /// `[[dashboard.tokens]]` entry as `token NAME` (and the name given at
    /// login in parentheses).
    pub(super) fn who(&self) -> String {
        match (self.key.kind, &self.person) {
            (KeyKind::Daemon, Some(person)) => person.clone(),
            (KeyKind::Daemon, None) => "api".to_string(),
            (KeyKind::Named, Some(person)) => format!("token {} ({person})", self.key.name),
            (KeyKind::Named, None) => format!("token {}", self.key.name),
            (KeyKind::Sso, _) => format!("sso {}", self.key.name),
        }
    }

    /// What the token sees.
    pub(super) fn scope(&self) -> &Scope {
        &self.key.scope
    }
}

tokio::task_local! {
    /// The request's person signed in through single sign-on, as
    /// `sso::resolve` (a layer in front of every route) read the sign-in
    /// from Redis; `None` without one.
    pub(super) static SIGNED_IN: Option<Holder>;
}

/// The signed-in person of the request being served, if any.
fn signed_in() -> Option<Holder> {
    SIGNED_IN.try_with(Clone::clone).ok().flatten()
}

/// Who is asking, as far as the pages can tell.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Visitor {
    /// No token is configured: the dashboard is read-only.
    ReadOnly,
    /// A token is configured and this browser has not logged in.
    Anonymous,
    /// Logged in (session cookie) with a token, under the name given at
    /// login.
    Operator(Holder),
}

impl Visitor {
    /// Who the request's cookies say it is: the session cookie checked
    /// against the token the token cookie names (the daemon's token when
    /// it names none), as the keyring stands at the request, so a token removed by a
    /// reload logs its browsers out.
    /// A person signed in through single sign-on (`sso::resolve` read
    /// the sign-in from Redis for this request) comes first.
    pub(super) fn of(keys: &Keyring, headers: &HeaderMap) -> Visitor {
        if let Some(holder) = signed_in() {
            return Visitor::Operator(holder);
        }
        if keys.is_empty() {
            return Visitor::ReadOnly;
        }
        let name = cookie(headers, TOKEN_COOKIE)
            .map(|n| percent_decode(&n))
            .unwrap_or_else(|| LEGACY_TOKEN_NAME.to_string());
        let Some(key) = keys.named(&name) else {
            return Visitor::Anonymous;
        };
        match cookie(headers, SESSION_COOKIE) {
            Some(session) if key.token.verify(SESSION_LABEL, &session) => {
                let person = cookie(headers, OPERATOR_COOKIE)
                    .map(|n| percent_decode(&n))
                    .filter(|n| !n.is_empty())
                    .unwrap_or_else(|| "operator".to_string());
                Visitor::Operator(Holder {
                    key,
                    person: Some(person),
                })
            }
            _ => Visitor::Anonymous,
        }
    }

    /// The jobs this visitor sees: a logged-in token's, else every job.
    pub(super) fn scope(&self) -> Scope {
        match self {
            Visitor::Operator(holder) => holder.scope().clone(),
            Visitor::ReadOnly | Visitor::Anonymous => Scope::All,
        }
    }
}

/// Why an action was refused (403, or 404 for a job the token does not
/// see; nothing changed).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(super) enum Refusal {
    #[error(
        "actions are off: this replica has no dashboard token ([daemon] dashboard_token_env or dashboard_token_file, or [[dashboard.tokens]])"
    )]
    NoToken,
    #[error("not logged in, or the token given is wrong")]
    NotAuthorized,
    #[error("the form's CSRF token is missing or wrong (reload the page and try again)")]
    BadCsrf,
    #[error("the request comes from another site ({0})")]
    CrossOrigin(String),
    /// The token's role does not allow the action.
    #[error("{0}")]
    Role(String),
    /// A job the token does not see: as if it did not exist.
    #[error("{0}")]
    Hidden(String),
}

/// Who a page's form (or a script's request) says it is: a bearer token
/// (checked against every token), else the login cookie with the form's CSRF
/// token and the same origin. What the token may do is `api::permit`'s
/// to decide.
pub(super) fn form_holder(
    keys: &Keyring,
    headers: &HeaderMap,
    csrf: Option<&str>,
) -> Result<Holder, Refusal> {
    if keys.is_empty() {
        return Err(Refusal::NoToken);
    }
    if let Some(bearer) = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
    {
        return match keys.bearer(bearer) {
            Some(key) => Ok(Holder { key, person: None }),
            None => Err(Refusal::NotAuthorized),
        };
    }
    let Visitor::Operator(holder) = Visitor::of(keys, headers) else {
        return Err(Refusal::NotAuthorized);
    };
    same_origin(headers)?;
    match csrf {
        Some(value) if holder.key.token.verify(CSRF_LABEL, value) => Ok(holder),
        _ => Err(Refusal::BadCsrf),
    }
}

/// Who an action is recorded as in the job's actions: `name via
/// dashboard on REPLICA from ADDRESS`.
pub(super) fn recorded_as(name: &str, replica: &str, peer: SocketAddr) -> String {
    format!("{name} via dashboard on {replica} from {}", peer.ip())
}

/// The login form's check: the token (any of the keyring's), and (as
/// for every form) the origin; the token's entry when both hold.
pub(super) fn login(keys: &Keyring, headers: &HeaderMap, given: &str) -> Result<Arc<Key>, Refusal> {
    if keys.is_empty() {
        return Err(Refusal::NoToken);
    }
    same_origin(headers)?;
    keys.bearer(given).ok_or(Refusal::NotAuthorized)
}

/// A request whose `Origin` (sent by browsers with every cross-site POST)
/// names another host than the one it was sent to is refused.
fn same_origin(headers: &HeaderMap) -> Result<(), Refusal> {
    let Some(origin) = headers.get(header::ORIGIN).and_then(|v| v.to_str().ok()) else {
        return Ok(());
    };
    let host = headers
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    let origin_host = origin
        .strip_prefix("http://")
        .or_else(|| origin.strip_prefix("https://"))
        .unwrap_or(origin);
    if origin_host == host {
        Ok(())
    } else {
        Err(Refusal::CrossOrigin(origin.to_string()))
    }
}

/// Where a login may lead: `next` if it is a path on this site (one `/`
/// first, not `//` or `/\`, which browsers read as another host, and no
/// backslash, whitespace or control character anywhere, which browsers
/// drop or rewrite), else `/`.
pub(super) fn login_destination(next: &str) -> &str {
    let mut bytes = next.bytes();
    let path = bytes.next() == Some(b'/')
        && !matches!(bytes.next(), Some(b'/'))
        && next.len() <= 2048
        && !next
            .bytes()
            .any(|b| b == b'\\' || b.is_ascii_whitespace() || b.is_ascii_control());
    if path { next } else { "/" }
}

/// Failed logins (and wrong bearer tokens) per client address: after
/// [`Throttle::MAX_FAILURES`] within [`Throttle::WINDOW`], that address is
/// refused (429) until the oldest of them is a window old, right token or
/// not. At most [`Throttle::MAX_ADDRESSES`] addresses are remembered;
/// when that many failed within the window, every address is refused
/// until one ages out.
#[derive(Debug, Default)]
pub(super) struct Throttle {
    /// Per address, its failures within the window, oldest first. A `std`
    /// mutex, never held across an `.await`.
    failures: std::sync::Mutex<HashMap<IpAddr, VecDeque<Instant>>>,
}

impl Throttle {
    pub(super) const MAX_FAILURES: usize = 5;
    pub(super) const WINDOW: Duration = Duration::from_secs(60);
    const MAX_ADDRESSES: usize = 10_000;

    /// `Err(wait)` while `address` may not try again, for `wait`.
    pub(super) fn check(&self, address: IpAddr) -> Result<(), Duration> {
        let mut failures = self.lock();
        let now = Instant::now();
        forget_old(&mut failures, now);
        let full = failures.len() >= Self::MAX_ADDRESSES && !failures.contains_key(&address);
        match failures.get(&address) {
            Some(times) if times.len() >= Self::MAX_FAILURES => {
                let oldest = times.front().copied().unwrap_or(now);
                Err((oldest + Self::WINDOW)
                    .saturating_duration_since(now)
                    .max(Duration::from_secs(1)))
            }
            _ if full => Err(Self::WINDOW),
            _ => Ok(()),
        }
    }

    /// Notes a failed attempt from `address`.
    pub(super) fn failed(&self, address: IpAddr) {
        let mut failures = self.lock();
        let now = Instant::now();
        forget_old(&mut failures, now);
        if failures.len() < Self::MAX_ADDRESSES || failures.contains_key(&address) {
            let times = failures.entry(address).or_default();
            times.push_back(now);
            while times.len() > Self::MAX_FAILURES {
                times.pop_front();
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<IpAddr, VecDeque<Instant>>> {
        self.failures
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// Drops the failures older than the window, and addresses left with none.
fn forget_old(failures: &mut HashMap<IpAddr, VecDeque<Instant>>, now: Instant) {
    failures.retain(|_, times| {
        while times
            .front()
            .is_some_and(|t| now.saturating_duration_since(*t) >= Throttle::WINDOW)
        {
            times.pop_front();
        }
        !times.is_empty()
    });
}

/// The value of cookie `name`, if the request has it.
pub(super) fn cookie(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find_map(|(k, v)| (k == name).then(|| v.to_string()))
}

/// The `Set-Cookie` values of a login with `key` as `name`.
pub(super) fn login_cookies(key: &Key, name: &str) -> [String; 3] {
    [
        format!(
            "{SESSION_COOKIE}={}; Path=/; HttpOnly; SameSite=Strict",
            key.token.session()
        ),
        format!(
            "{OPERATOR_COOKIE}={}; Path=/; HttpOnly; SameSite=Strict",
            percent_encode(name)
        ),
        format!(
            "{TOKEN_COOKIE}={}; Path=/; HttpOnly; SameSite=Strict",
            percent_encode(&key.name)
        ),
    ]
}

/// The `Set-Cookie` values of a logout.
pub(super) fn logout_cookies() -> [String; 3] {
    [SESSION_COOKIE, OPERATOR_COOKIE, TOKEN_COOKIE]
        .map(|name| format!("{name}=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0"))
}

/// Percent-encodes everything but unreserved characters (URLs' query
/// values and the operator cookie).
pub(super) fn percent_encode(text: &str) -> String {
    use std::fmt::Write as _;
    text.bytes().fold(String::new(), |mut s, b| {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            s.push(char::from(b));
        } else {
            let _ = write!(s, "%{b:02X}");
        }
        s
    })
}

fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let decoded = (bytes[i] == b'%')
            .then(|| text.get(i + 1..i + 3))
            .flatten()
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match decoded {
            Some(b) => {
                out.push(b);
                i += 3;
            }
            None => {
                out.push(bytes[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dashboard::token::{Token, TokenError};
    use axum::http::HeaderValue;

    const TOKEN: &str = "0123456789abcdef0123";

    fn headers(pairs: &[(header::HeaderName, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(name, HeaderValue::from_str(value).expect("test header"));
        }
        map
    }

    fn peer() -> SocketAddr {
        "127.0.0.1:5000".parse().expect("test address")
    }

    #[test]
    fn short_tokens_are_refused_and_debug_hides_the_token() {
        assert!(matches!(Token::new("short"), Err(TokenError::TooShort(5))));
        let token = Token::new(TOKEN).expect("long enough");
        assert!(!format!("{token:?}").contains(TOKEN));
    }

    fn keyring() -> Keyring {
        Keyring::of_keys(vec![
            Key {
                name: LEGACY_TOKEN_NAME.to_string(),
                role: crate::config::DashboardRole::Admin,
                scope: Scope::All,
                kind: KeyKind::Daemon,
                token: Token::new(TOKEN).expect("long enough"),
            },
            Key {
                name: "viewer".to_string(),
                role: crate::config::DashboardRole::Viewer,
                scope: Scope::All,
                kind: KeyKind::Named,
                token: Token::new("fedcba9876543210fedc").expect("long enough"),
            },
        ])
    }

    #[test]
    fn an_action_needs_session_csrf_and_same_origin() {
        let keys = keyring();
        let token = Token::new(TOKEN).expect("long enough");
        let session = format!(
            "{SESSION_COOKIE}={}; {OPERATOR_COOKIE}=alice",
            token.session()
        );
        let csrf = token.csrf();
        let ok = headers(&[
            (header::COOKIE, &session),
            (header::HOST, "127.0.0.1:9465"),
            (header::ORIGIN, "http://127.0.0.1:9465"),
        ]);
        let holder = form_holder(&keys, &ok, Some(&csrf)).expect("a logged-in form");
        assert_eq!(holder.who(), "alice");
        assert_eq!(
            recorded_as(&holder.who(), "r1", peer()),
            "alice via dashboard on r1 from 127.0.0.1"
        );
        assert_eq!(
            form_holder(&Keyring::empty(), &ok, Some(&csrf)),
            Err(Refusal::NoToken)
        );
        assert_eq!(form_holder(&keys, &ok, None), Err(Refusal::BadCsrf));
        let other_site = headers(&[
            (header::COOKIE, &session),
            (header::HOST, "127.0.0.1:9465"),
            (header::ORIGIN, "http://evil.example"),
        ]);
        assert!(matches!(
            form_holder(&keys, &other_site, Some(&csrf)),
            Err(Refusal::CrossOrigin(_))
        ));
        let forged = headers(&[(header::COOKIE, "cronlease_session=00ff")]);
        assert_eq!(
            form_holder(&keys, &forged, Some(&csrf)),
            Err(Refusal::NotAuthorized)
        );
        let bearer = headers(&[(header::AUTHORIZATION, &format!("Bearer {TOKEN}"))]);
        assert_eq!(
            form_holder(&keys, &bearer, None).map(|h| h.who()),
            Ok("api".to_string())
        );
        let wrong = headers(&[(header::AUTHORIZATION, "Bearer 0123456789abcdef0124")]);
        assert_eq!(
            form_holder(&keys, &wrong, None),
            Err(Refusal::NotAuthorized)
        );
    }

    #[test]
    fn a_login_cookie_names_its_token_and_another_token_cannot_claim_it() {
        let keys = keyring();
        let viewer = Token::new("fedcba9876543210fedc").expect("long enough");
        let cookies = format!(
            "{SESSION_COOKIE}={}; {TOKEN_COOKIE}=viewer; {OPERATOR_COOKIE}=bob",
            viewer.session()
        );
        let Visitor::Operator(holder) = Visitor::of(&keys, &headers(&[(header::COOKIE, &cookies)]))
        else {
            panic!("the viewer's cookie is a login");
        };
        assert_eq!(holder.key.name, "viewer");
        assert_eq!(holder.who(), "token viewer (bob)");
        // The viewer's cookie presented as the daemon's token's.
        let claimed = format!(
            "{SESSION_COOKIE}={}; {TOKEN_COOKIE}=dashboard",
            viewer.session()
        );
        assert_eq!(
            Visitor::of(&keys, &headers(&[(header::COOKIE, &claimed)])),
            Visitor::Anonymous
        );
        // A token the keyring does not hold (removed by a reload).
        let gone = format!("{SESSION_COOKIE}={}; {TOKEN_COOKIE}=gone", viewer.session());
        assert_eq!(
            Visitor::of(&keys, &headers(&[(header::COOKIE, &gone)])),
            Visitor::Anonymous
        );
    }

    #[test]
    fn a_login_leads_only_to_a_path_on_this_site() {
        for (next, to) in [
            ("/jobs/draw", "/jobs/draw"),
            ("/?q=a&state=all", "/?q=a&state=all"),
            ("", "/"),
            ("//evil.example", "/"),
            ("/\\evil.example", "/"),
            ("/\t/evil.example", "/"),
            ("https://evil.example/", "/"),
            ("evil.example", "/"),
            ("/jobs/a\\b", "/"),
        ] {
            assert_eq!(login_destination(next), to, "{next:?}");
        }
    }

    #[test]
    fn the_sixth_failure_within_a_minute_is_throttled() {
        let throttle = Throttle::default();
        let (attacker, other) = (peer().ip(), "127.0.0.2".parse().expect("test address"));
        for _ in 0..Throttle::MAX_FAILURES {
            assert_eq!(throttle.check(attacker), Ok(()));
            throttle.failed(attacker);
        }
        let wait = throttle
            .check(attacker)
            .expect_err("throttled after five failures");
        assert!(
            wait <= Throttle::WINDOW && wait >= Duration::from_secs(1),
            "{wait:?}"
        );
        assert_eq!(throttle.check(other), Ok(()), "another address is not");
    }

    #[test]
    fn names_survive_the_cookie() {
        assert_eq!(
            percent_decode(&percent_encode("Zoë O'Brien")),
            "Zoë O'Brien"
        );
    }
}
