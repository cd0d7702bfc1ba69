//! The OpenID provider as single sign-on sees it: its discovery document
//! and keys (fetched when first needed, kept for [`METADATA_TTL`], the
//! keys fetched again once when an ID token names one they lack), the
//! authorization request with PKCE (S256), the code's exchange with the
//! client secret, and the ID token's checks: signature against the
//! provider's JWKS, `iss`, `aud` (and `azp`), `exp` and `iat` within
//! [`LEEWAY`], `nonce`. Everything the provider sends is evidence: every
//! request has a timeout, every answer a size limit, and what it says is
//! checked before use.

use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use jsonwebtoken::jwk::JwkSet;
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde::Deserialize;
use serde_json::Value;
use tokio::sync::Mutex;
use tokio::time::Instant;

use super::token::Token;
use crate::config::OidcSpec;

/// How long the discovery document and the keys are kept.
const METADATA_TTL: Duration = Duration::from_secs(3600);
/// Every request to the provider ends within this.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// The largest answer read from the provider.
const MAX_ANSWER: usize = 256 * 1024;
/// The clock difference taken on `exp`, `iat` and `nbf`.
pub(super) const LEEWAY: Duration = Duration::from_secs(60);
/// The signature algorithms taken (never `none`, never an HMAC).
const ALGORITHMS: [Algorithm; 8] = [
    Algorithm::RS256,
    Algorithm::RS384,
    Algorithm::RS512,
    Algorithm::PS256,
    Algorithm::PS384,
    Algorithm::PS512,
    Algorithm::ES256,
    Algorithm::ES384,
];

/// Why a sign-in was refused: shown on the refusal page and logged.
#[derive(Debug, thiserror::Error)]
pub(super) enum SignInError {
    #[error("the OpenID provider cannot be reached or answered badly ({0})")]
    Provider(String),
    #[error("the provider's discovery document names the issuer {found:?}, not {expected:?}")]
    WrongIssuerDocument { found: String, expected: String },
    #[error("the provider refused: {0}")]
    Refused(String),
    #[error(
        "this sign-in did not start here, or took longer than 10 minutes (its state is missing or wrong): sign in again"
    )]
    State,
    #[error("the ID token is malformed ({0})")]
    Malformed(String),
    #[error("the ID token's signature does not verify against the provider's keys")]
    Signature,
    #[error("the ID token is signed with {0}, which is not taken (RS256, ES256 and the like)")]
    Algorithm(String),
    #[error("the ID token's audience is not this dashboard's client id")]
    Audience,
    #[error("the ID token has expired")]
    Expired,
    #[error("the ID token is not valid yet (issued or valid from the future)")]
    Early,
    #[error("the ID token's issuer is not the configured issuer")]
    Issuer,
    #[error("the provider's answer names another issuer (its `iss`) than the configured one")]
    AnswerIssuer,
    #[error("the ID token's nonce is not this sign-in's")]
    Nonce,
    #[error(
        "the claim {0:?} is missing or unusable (expected a printable string of at most 200 characters)"
    )]
    Identity(String),
    #[error(
        "{who} has no role here: the claim {claim:?} holds none of the values [[dashboard.oidc.roles]] maps"
    )]
    NoRole { who: String, claim: String },
    /// Redis did not take the record (the log names why; the page does
    /// not show the store's details).
    #[error("the sign-in cannot be stored: Redis did not take it (the replica's log names why)")]
    Store,
}

/// The provider's discovery document, as far as it is used.
#[derive(Debug, Clone, Deserialize)]
pub(super) struct Metadata {
    issuer: String,
    authorization_endpoint: String,
    token_endpoint: String,
    jwks_uri: String,
    #[serde(default)]
    end_session_endpoint: Option<String>,
}

/// A configured provider: its settings, the client secret read at the
/// last load, and what was fetched from it.
pub(super) struct Provider {
    pub(super) spec: OidcSpec,
    secret: Token,
    http: reqwest::Client,
    fetched: Mutex<Option<Fetched>>,
}

impl std::fmt::Debug for Provider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Provider")
            .field("issuer", &self.spec.issuer)
            .field("client_id", &self.spec.client_id)
            .finish_non_exhaustive()
    }
}

/// The discovery document and the keys, with when they were fetched.
struct Fetched {
    at: Instant,
    metadata: Arc<Metadata>,
    keys: Arc<JwkSet>,
}

/// The claims of a checked ID token.
pub(super) type Claims = serde_json::Map<String, Value>;

/// What the browser's flow cookie holds between the redirect to the
/// provider and the way back: all random but `next`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Flow {
    pub(super) state: String,
    pub(super) nonce: String,
    pub(super) verifier: String,
    pub(super) next: String,
}

impl Flow {
    /// A new flow's random values, back to `next` after it.
    pub(super) fn new(next: &str) -> Flow {
        Flow {
            state: random_text(),
            nonce: random_text(),
            verifier: random_text(),
            next: next.to_string(),
        }
    }

    /// The cookie's value: the four parts, `next` in base64url, joined by
    /// `.`.
    pub(super) fn to_cookie(&self) -> String {
        format!(
            "{}.{}.{}.{}",
            self.state,
            self.nonce,
            self.verifier,
            URL_SAFE_NO_PAD.encode(&self.next)
        )
    }

    /// The flow a cookie holds, when it reads as one.
    pub(super) fn from_cookie(value: &str) -> Option<Flow> {
        let mut parts = value.split('.');
        let (state, nonce, verifier, next) =
            (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
        let random = |p: &str| p.len() == 43 && URL_SAFE_NO_PAD.decode(p).is_ok();
        if parts.next().is_some() || !random(state) || !random(nonce) || !random(verifier) {
            return None;
        }
        let next = String::from_utf8(URL_SAFE_NO_PAD.decode(next).ok()?).ok()?;
        Some(Flow {
            state: state.to_string(),
            nonce: nonce.to_string(),
            verifier: verifier.to_string(),
            next,
        })
    }

    /// The PKCE challenge of the verifier (S256).
    fn challenge(&self) -> String {
        let digest = ring::digest::digest(&ring::digest::SHA256, self.verifier.as_bytes());
        URL_SAFE_NO_PAD.encode(digest.as_ref())
    }
}

/// 32 random bytes in base64url (43 characters).
pub(super) fn random_text() -> String {
    use ring::rand::SecureRandom as _;
    let mut bytes = [0u8; 32];
    ring::rand::SystemRandom::new()
        .fill(&mut bytes)
        .expect("the operating system's random source answers (getrandom)");
    URL_SAFE_NO_PAD.encode(bytes)
}

/// The SHA-256 of `text`, in hex (a sign-in's key).
pub(super) fn sha256_hex(text: &str) -> String {
    use std::fmt::Write as _;
    let digest = ring::digest::digest(&ring::digest::SHA256, text.as_bytes());
    digest.as_ref().iter().fold(String::new(), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

impl Provider {
    /// The provider of `spec` with client secret `secret`, asked nothing
    /// yet.
    pub(super) fn new(spec: OidcSpec, secret: Token) -> Result<Provider, String> {
        let http = crate::notify::http_client().map_err(|e| format!("HTTP client: {e}"))?;
        Ok(Provider {
            spec,
            secret,
            http,
            fetched: Mutex::new(None),
        })
    }

    /// The client secret (redacted from runs' output like the tokens).
    pub(super) fn secret_bytes(&self) -> &[u8] {
        self.secret.secret_bytes()
    }

    /// Where the provider sends the browser back.
    pub(super) fn redirect_uri(&self) -> String {
        format!("{}/sso/callback", self.spec.public_url)
    }

    /// The discovery document (fetched again after [`METADATA_TTL`]).
    pub(super) async fn metadata(&self) -> Result<Arc<Metadata>, SignInError> {
        Ok(self.fetched(Refetch::WhenOld).await?.0)
    }

    /// The document and the keys: kept ones unless they are old or
    /// `refetch` asks for fresh ones.
    async fn fetched(&self, refetch: Refetch) -> Result<(Arc<Metadata>, Arc<JwkSet>), SignInError> {
        let mut fetched = self.fetched.lock().await;
        if let Some(f) = fetched.as_ref()
            && f.at.elapsed() < METADATA_TTL
            && refetch == Refetch::WhenOld
        {
            return Ok((f.metadata.clone(), f.keys.clone()));
        }
        let url = format!("{}/.well-known/openid-configuration", self.spec.issuer);
        let metadata: Metadata = self.get_json(&url).await?;
        if metadata.issuer.trim_end_matches('/') != self.spec.issuer {
            return Err(SignInError::WrongIssuerDocument {
                found: printable(&metadata.issuer),
                expected: self.spec.issuer.clone(),
            });
        }
        let keys: JwkSet = self.get_json(&metadata.jwks_uri).await?;
        let f = fetched.insert(Fetched {
            at: Instant::now(),
            metadata: Arc::new(metadata),
            keys: Arc::new(keys),
        });
        Ok((f.metadata.clone(), f.keys.clone()))
    }

    async fn get_json<T: serde::de::DeserializeOwned>(&self, url: &str) -> Result<T, SignInError> {
        let request = self.http.get(url).timeout(REQUEST_TIMEOUT);
        let (status, body) = bounded(request).await?;
        if !status.is_success() {
            return Err(SignInError::Provider(format!("GET {url}: HTTP {status}")));
        }
        serde_json::from_slice(&body)
            .map_err(|e| SignInError::Provider(format!("GET {url}: not the JSON expected: {e}")))
    }

    /// Where the browser goes to sign in: the authorization endpoint with
    /// the code flow's parameters, PKCE's challenge among them.
    pub(super) async fn authorization_url(&self, flow: &Flow) -> Result<String, SignInError> {
        let metadata = self.metadata().await?;
        let mut url = reqwest::Url::parse(&metadata.authorization_endpoint).map_err(|e| {
            SignInError::Provider(format!("authorization_endpoint is not a URL: {e}"))
        })?;
        url.query_pairs_mut()
            .append_pair("response_type", "code")
            .append_pair("client_id", &self.spec.client_id)
            .append_pair("redirect_uri", &self.redirect_uri())
            .append_pair("scope", &self.spec.scopes.join(" "))
            .append_pair("state", &flow.state)
            .append_pair("nonce", &flow.nonce)
            .append_pair("code_challenge", &flow.challenge())
            .append_pair("code_challenge_method", "S256");
        Ok(url.into())
    }

    /// Exchanges `code` (with the flow's verifier and the client secret)
    /// for an ID token, and checks it: its claims and the raw token.
    pub(super) async fn sign_in(
        &self,
        code: &str,
        flow: &Flow,
    ) -> Result<(Claims, String), SignInError> {
        let metadata = self.metadata().await?;
        let form = [
            ("grant_type", "authorization_code"),
            ("code", code),
            ("redirect_uri", &self.redirect_uri()),
            ("code_verifier", &flow.verifier),
        ];
        let body = serde_urlencoded_pairs(&form);
        let request = self
            .http
            .post(&metadata.token_endpoint)
            .timeout(REQUEST_TIMEOUT)
            .basic_auth(
                form_encode(&self.spec.client_id),
                Some(form_encode(&String::from_utf8_lossy(
                    self.secret.secret_bytes(),
                ))),
            )
            .header(
                reqwest::header::CONTENT_TYPE,
                "application/x-www-form-urlencoded",
            )
            .header(reqwest::header::ACCEPT, "application/json")
            .body(body);
        let (status, body) = bounded(request).await?;
        let answer: Value = serde_json::from_slice(&body).map_err(|e| {
            SignInError::Provider(format!("the token endpoint's answer is not JSON: {e}"))
        })?;
        if !status.is_success() {
            let error = answer.get("error").and_then(Value::as_str).unwrap_or("");
            return Err(SignInError::Refused(format!(
                "token endpoint HTTP {status} {}",
                printable(error)
            )));
        }
        let id_token = answer
            .get("id_token")
            .and_then(Value::as_str)
            .ok_or_else(|| SignInError::Malformed("the token endpoint sent no id_token".into()))?;
        let claims = self.check(id_token, &flow.nonce).await?;
        Ok((claims, id_token.to_string()))
    }

    /// The ID token's checks: signature, issuer, audience, times, nonce.
    pub(super) async fn check(&self, id_token: &str, nonce: &str) -> Result<Claims, SignInError> {
        let header = jsonwebtoken::decode_header(id_token)
            .map_err(|e| SignInError::Malformed(e.to_string()))?;
        if !ALGORITHMS.contains(&header.alg) {
            return Err(SignInError::Algorithm(format!("{:?}", header.alg)));
        }
        let (_, keys) = self.fetched(Refetch::WhenOld).await?;
        let key = match find_key(&keys, header.kid.as_deref(), header.alg) {
            Some(key) => key,
            // A key the provider rotated in since the keys were fetched.
            None => {
                let (_, keys) = self.fetched(Refetch::Now).await?;
                find_key(&keys, header.kid.as_deref(), header.alg).ok_or(SignInError::Signature)?
            }
        };
        let mut validation = Validation::new(header.alg);
        validation.leeway = LEEWAY.as_secs();
        validation.validate_nbf = true;
        validation.set_issuer(&[&self.spec.issuer, &format!("{}/", self.spec.issuer)]);
        validation.set_audience(&[&self.spec.client_id]);
        validation.set_required_spec_claims(&["exp", "iat", "iss", "aud", "sub"]);
        let data = jsonwebtoken::decode::<Claims>(id_token, &key, &validation)
            .map_err(|e| token_error(&e))?;
        let claims = data.claims;
        self.check_claims(&claims, nonce)?;
        Ok(claims)
    }

    /// What the library does not check: `azp` (required with several
    /// audiences), `iat` not in the future, `nonce`.
    fn check_claims(&self, claims: &Claims, nonce: &str) -> Result<(), SignInError> {
        let audiences = match claims.get("aud") {
            Some(Value::Array(list)) => list.len(),
            _ => 1,
        };
        match claims.get("azp") {
            Some(Value::String(azp)) if *azp != self.spec.client_id => {
                return Err(SignInError::Audience);
            }
            None if audiences > 1 => return Err(SignInError::Audience),
            Some(Value::String(_)) | None => {}
            Some(_) => return Err(SignInError::Malformed("azp is not a string".into())),
        }
        let now = u64::try_from(crate::clock::local_now_ms() / 1000).unwrap_or(0);
        match claims.get("iat").and_then(Value::as_u64) {
            Some(iat) if iat > now + LEEWAY.as_secs() => return Err(SignInError::Early),
            Some(_) => {}
            None => return Err(SignInError::Malformed("iat is not a number".into())),
        }
        match claims.get("nonce").and_then(Value::as_str) {
            Some(given) if constant_time_eq(given.as_bytes(), nonce.as_bytes()) => Ok(()),
            _ => Err(SignInError::Nonce),
        }
    }

    /// The origin of the provider's logout (its `end_session_endpoint`
    /// once the discovery document was read, else the issuer's), which
    /// the pages' logout form may lead to.
    pub(super) fn logout_origin(&self) -> String {
        let endpoint = self.fetched.try_lock().ok().and_then(|f| {
            f.as_ref()
                .and_then(|f| f.metadata.end_session_endpoint.clone())
        });
        let url = endpoint.unwrap_or_else(|| self.spec.issuer.clone());
        reqwest::Url::parse(&url)
            .map(|u| u.origin().ascii_serialization())
            .unwrap_or_default()
            .chars()
            .filter(|c| !c.is_whitespace() && !matches!(c, ';' | ',' | '\''))
            .collect()
    }

    /// Where the browser goes after a logout here: the provider's end of
    /// the sign-in (RP-initiated logout) when it has one, back to the
    /// login page after it; `None` without one.
    pub(super) async fn logout_url(&self, id_token: &str) -> Option<String> {
        let metadata = self.metadata().await.ok()?;
        let mut url = reqwest::Url::parse(metadata.end_session_endpoint.as_deref()?).ok()?;
        url.query_pairs_mut()
            .append_pair("id_token_hint", id_token)
            .append_pair("client_id", &self.spec.client_id)
            .append_pair(
                "post_logout_redirect_uri",
                &format!("{}/login", self.spec.public_url),
            );
        Some(url.into())
    }
}

/// Whether [`Provider::fetched`] may answer with what it keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Refetch {
    WhenOld,
    Now,
}

/// The key of `keys` an ID token signed with `alg` under `kid` names (the
/// only one of its family when the token names none).
fn find_key(keys: &JwkSet, kid: Option<&str>, alg: Algorithm) -> Option<DecodingKey> {
    use jsonwebtoken::jwk::AlgorithmParameters as P;
    let family = |jwk: &jsonwebtoken::jwk::Jwk| {
        matches!(
            (&jwk.algorithm, alg),
            (
                P::RSA(_),
                Algorithm::RS256
                    | Algorithm::RS384
                    | Algorithm::RS512
                    | Algorithm::PS256
                    | Algorithm::PS384
                    | Algorithm::PS512
            ) | (P::EllipticCurve(_), Algorithm::ES256 | Algorithm::ES384)
        )
    };
    let candidates: Vec<_> = keys
        .keys
        .iter()
        .filter(|jwk| family(jwk))
        .filter(|jwk| match kid {
            Some(kid) => jwk.common.key_id.as_deref() == Some(kid),
            None => true,
        })
        .collect();
    match candidates.as_slice() {
        [jwk] => DecodingKey::from_jwk(jwk).ok(),
        _ => None,
    }
}

/// The sign-in error of a failed `jsonwebtoken::decode`.
fn token_error(error: &jsonwebtoken::errors::Error) -> SignInError {
    use jsonwebtoken::errors::ErrorKind as K;
    match error.kind() {
        K::InvalidSignature | K::InvalidEcdsaKey | K::InvalidRsaKey(_) => SignInError::Signature,
        K::InvalidAudience => SignInError::Audience,
        K::ExpiredSignature => SignInError::Expired,
        K::ImmatureSignature => SignInError::Early,
        K::InvalidIssuer => SignInError::Issuer,
        K::InvalidAlgorithm | K::InvalidAlgorithmName => SignInError::Algorithm("another".into()),
        K::MissingRequiredClaim(claim) => {
            SignInError::Malformed(format!("the claim {claim:?} is missing"))
        }
        _ => SignInError::Malformed(error.to_string()),
    }
}

/// Sends `request` and reads at most [`MAX_ANSWER`] bytes of the answer,
/// all within [`REQUEST_TIMEOUT`].
async fn bounded(
    request: reqwest::RequestBuilder,
) -> Result<(reqwest::StatusCode, Vec<u8>), SignInError> {
    let exchange = async {
        let mut response = request
            .send()
            .await
            .map_err(|e| SignInError::Provider(e.without_url().to_string()))?;
        let status = response.status();
        let mut body = Vec::new();
        while let Some(chunk) = response
            .chunk()
            .await
            .map_err(|e| SignInError::Provider(e.without_url().to_string()))?
        {
            body.extend_from_slice(&chunk);
            if body.len() > MAX_ANSWER {
                return Err(SignInError::Provider(format!(
                    "an answer longer than {MAX_ANSWER} bytes"
                )));
            }
        }
        Ok((status, body))
    };
    tokio::time::timeout(REQUEST_TIMEOUT, exchange)
        .await
        .map_err(|_| {
            SignInError::Provider(format!(
                "no answer within {}",
                humantime::format_duration(REQUEST_TIMEOUT)
            ))
        })?
}

/// `application/x-www-form-urlencoded` of `pairs`.
fn serde_urlencoded_pairs(pairs: &[(&str, &str)]) -> String {
    pairs
        .iter()
        .map(|(k, v)| format!("{}={}", form_encode(k), form_encode(v)))
        .collect::<Vec<_>>()
        .join("&")
}

/// Percent-encoding of a form value (and of the client id and secret in
/// HTTP Basic, as RFC 6749 §2.3.1 asks).
fn form_encode(text: &str) -> String {
    super::auth::percent_encode(text)
}

/// Whether `a` and `b` are equal, compared in constant time.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// `text` with control characters dropped, at most 200 characters: what
/// a provider's words may be shown and logged as.
pub(super) fn printable(text: &str) -> String {
    text.chars().filter(|c| !c.is_control()).take(200).collect()
}

/// The values of claim `name` in `claims`: a string, or an array's
/// strings (at most 200 of them).
pub(super) fn claim_values(claims: &Claims, name: &str) -> Vec<String> {
    match claims.get(name) {
        Some(Value::String(s)) => vec![s.clone()],
        Some(Value::Array(list)) => list
            .iter()
            .filter_map(Value::as_str)
            .take(200)
            .map(str::to_string)
            .collect(),
        _ => Vec::new(),
    }
}

/// Who `claims` name, from `identity_claim` (else `email`, then `sub`):
/// a string of printable characters, at most 200 of them.
pub(super) fn identity(
    claims: &Claims,
    identity_claim: Option<&str>,
) -> Result<String, SignInError> {
    let names: Vec<&str> = match identity_claim {
        Some(name) => vec![name],
        None => vec!["email", "sub"],
    };
    let value = names
        .iter()
        .find_map(|name| claims.get(*name).and_then(Value::as_str));
    match value {
        Some(v)
            if !v.is_empty() && v.chars().count() <= 200 && !v.chars().any(char::is_control) =>
        {
            Ok(v.to_string())
        }
        _ => Err(SignInError::Identity(names.join(" or "))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flow_survives_its_cookie_and_a_tampered_one_does_not_read() {
        let flow = Flow::new("/jobs/a?x=1");
        assert_eq!(Flow::from_cookie(&flow.to_cookie()), Some(flow.clone()));
        assert_eq!(Flow::from_cookie("a.b.c.d"), None);
        assert_eq!(Flow::from_cookie(&format!("{}.x", flow.to_cookie())), None);
        assert_eq!(flow.challenge().len(), 43);
    }

    #[test]
    fn pkce_challenge_is_rfc_7636s_example() {
        let flow = Flow {
            verifier: "dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk".into(),
            ..Flow::new("/")
        };
        assert_eq!(
            flow.challenge(),
            "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM"
        );
    }

    /// A provider whose discovery document and ES256 key are already
    /// fetched (nothing is asked over the network), and its key's PKCS#8.
    fn provider_with_es256_key() -> (Provider, Vec<u8>) {
        use ring::signature::{ECDSA_P256_SHA256_FIXED_SIGNING as ES256, EcdsaKeyPair, KeyPair};
        let rng = ring::rand::SystemRandom::new();
        let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ES256, &rng).expect("a test key");
        let pair = EcdsaKeyPair::from_pkcs8(&ES256, pkcs8.as_ref(), &rng).expect("its pair");
        // An uncompressed point: 0x04, x, y.
        let point = pair.public_key().as_ref();
        let keys: JwkSet = serde_json::from_value(serde_json::json!({"keys": [{
            "kty": "EC", "crv": "P-256", "kid": "k1", "alg": "ES256", "use": "sig",
            "x": URL_SAFE_NO_PAD.encode(&point[1..33]),
            "y": URL_SAFE_NO_PAD.encode(&point[33..65]),
        }]}))
        .expect("a JWKS");
        let spec = OidcSpec {
            issuer: "https://id.example.com".into(),
            client_id: "cronlease".into(),
            client_secret: crate::config::TokenSource::Env("UNUSED".into()),
            public_url: "https://cron.example.com".into(),
            scopes: vec!["openid".into()],
            role_claim: "groups".into(),
            identity_claim: None,
            lifetime: Duration::from_secs(60),
            roles: Vec::new(),
            line: 1,
        };
        let secret = Token::new("a-client-secret-0123456789").expect("long enough");
        let provider = Provider::new(spec, secret).expect("a provider");
        let metadata = Metadata {
            issuer: "https://id.example.com".into(),
            authorization_endpoint: "https://id.example.com/auth".into(),
            token_endpoint: "https://id.example.com/token".into(),
            jwks_uri: "https://id.example.com/jwks".into(),
            end_session_endpoint: None,
        };
        *provider.fetched.try_lock().expect("unshared") = Some(Fetched {
            at: Instant::now(),
            metadata: Arc::new(metadata),
            keys: Arc::new(keys),
        });
        (provider, pkcs8.as_ref().to_vec())
    }

    /// An ES256 ID token of `claims` under the test key.
    fn es256(pkcs8: &[u8], claims: &Value) -> String {
        let mut header = jsonwebtoken::Header::new(Algorithm::ES256);
        header.kid = Some("k1".into());
        jsonwebtoken::encode(
            &header,
            claims,
            &jsonwebtoken::EncodingKey::from_ec_der(pkcs8),
        )
        .expect("signed")
    }

    #[test]
    fn an_es256_id_token_is_checked_claim_by_claim() {
        let (provider, key) = provider_with_es256_key();
        let now = crate::clock::local_now_ms() / 1000;
        let good = serde_json::json!({
            "iss": "https://id.example.com", "aud": "cronlease", "sub": "u1",
            "exp": now + 300, "iat": now, "nonce": "n-1", "email": "a@example.com",
        });
        let with = |changes: Value| {
            let mut claims = good.clone();
            for (k, v) in changes.as_object().expect("an object") {
                match v {
                    Value::Null => claims.as_object_mut().expect("an object").remove(k),
                    v => claims
                        .as_object_mut()
                        .expect("an object")
                        .insert(k.clone(), v.clone()),
                };
            }
            es256(&key, &claims)
        };
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime");
        let check = |token: String| runtime.block_on(provider.check(&token, "n-1"));
        let claims = check(es256(&key, &good)).expect("a good token");
        assert_eq!(
            claims.get("email").and_then(Value::as_str),
            Some("a@example.com")
        );
        let refused = |token: String| check(token).expect_err("refused").to_string();
        use serde_json::json;
        for (changes, reason) in [
            (json!({"aud": "another-app"}), "audience"),
            (json!({"aud": ["cronlease", "another-app"]}), "audience"),
            (json!({"aud": ["cronlease", "b"], "azp": "b"}), "audience"),
            (json!({"iss": "https://evil.example.com"}), "issuer"),
            (json!({"exp": now - 120}), "expired"),
            (json!({"iat": now + 600}), "not valid yet"),
            (json!({"nonce": "n-2"}), "nonce"),
            (json!({"nonce": null}), "nonce"),
            (json!({"sub": null}), "\"sub\" is missing"),
        ] {
            let error = refused(with(changes.clone()));
            assert!(error.contains(reason), "{changes}: {error}");
        }
        // Several audiences with this dashboard as `azp`: taken.
        check(with(json!({"aud": ["cronlease", "b"], "azp": "cronlease"}))).expect("azp");
        // The payload changed under the same signature.
        let token = es256(&key, &good);
        let mut parts: Vec<String> = token.split('.').map(str::to_string).collect();
        let forged = good.as_object().expect("an object").clone();
        let mut forged = Value::Object(forged);
        forged["sub"] = json!("admin");
        parts[1] = URL_SAFE_NO_PAD.encode(forged.to_string());
        assert!(refused(parts.join(".")).contains("signature"));
        // An HMAC under a guessable key, and `none`, are never taken.
        let hs = jsonwebtoken::encode(
            &jsonwebtoken::Header::new(Algorithm::HS256),
            &good,
            &jsonwebtoken::EncodingKey::from_secret(b"a-client-secret-0123456789"),
        )
        .expect("signed");
        assert!(refused(hs).contains("HS256"));
        let none = format!(
            "{}.{}.",
            URL_SAFE_NO_PAD.encode(r#"{"alg":"none"}"#),
            parts[1]
        );
        assert!(refused(none).contains("malformed"));
    }

    #[test]
    fn identities_and_claim_values_are_checked() {
        let claims: Claims = serde_json::from_str(
            r#"{"sub":"u1","email":"a@example.com","groups":["x","y",3],"bad":"a\u0007b","role":"ops"}"#,
        )
        .expect("JSON");
        assert_eq!(identity(&claims, None).expect("email"), "a@example.com");
        assert_eq!(identity(&claims, Some("sub")).expect("sub"), "u1");
        assert!(matches!(
            identity(&claims, Some("bad")),
            Err(SignInError::Identity(_))
        ));
        assert!(matches!(
            identity(&claims, Some("none")),
            Err(SignInError::Identity(_))
        ));
        assert_eq!(claim_values(&claims, "groups"), ["x", "y"]);
        assert_eq!(claim_values(&claims, "role"), ["ops"]);
        assert!(claim_values(&claims, "nothing").is_empty());
    }
}
