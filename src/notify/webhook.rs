//! `kind = "webhook"`: the event as a JSON object, POSTed with
//! `Idempotency-Key` and, with a secret, `Cronlease-Signature: sha256=<hex
//! HMAC-SHA256 of the body>` (GitHub's scheme, which receivers know how to
//! check).

use hmac::{Hmac, KeyInit, Mac};
use reqwest::header::HeaderMap;
use sha2::Sha256;

use super::post::{header, idempotency_key, post};
use super::{Event, Receipt, SendError};
use crate::config::{SIGNATURE_HEADER, Secret, WebhookSpec};

/// A webhook channel, ready to send.
pub(super) struct Webhook {
    url: String,
    /// The channel's own headers, checked by the config.
    headers: HeaderMap,
    timeout: std::time::Duration,
    secret: Option<Secret>,
    client: reqwest::Client,
}

impl Webhook {
    pub(super) fn new(spec: &WebhookSpec, client: reqwest::Client) -> Webhook {
        let headers = spec
            .headers
            .iter()
            .filter_map(|(name, value)| header(name, value))
            .collect();
        Webhook {
            url: spec.url.clone(),
            headers,
            timeout: spec.timeout,
            secret: spec.secret.clone(),
            client,
        }
    }

    pub(super) async fn send(
        &self,
        event: &Event,
        dashboard_url: Option<&str>,
    ) -> Result<Receipt, SendError> {
        let body = event.json(dashboard_url).to_string().into_bytes();
        let mut headers = self.headers.clone();
        headers.extend([idempotency_key(&event.key)?]);
        if let Some(secret) = &self.secret {
            headers.extend(header(SIGNATURE_HEADER, &signature(secret, &body)));
        }
        post(&self.client, &self.url, headers, body, self.timeout).await
    }
}

/// `sha256=<lower hex HMAC-SHA256 of body under secret>`.
pub(super) fn signature(secret: &Secret, body: &[u8]) -> String {
    let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(secret.expose().as_bytes())
        .expect("HMAC takes a key of any length");
    mac.update(body);
    let digest = mac.finalize().into_bytes();
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    format!("sha256={hex}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_signature_is_rfc_4231s_hmac_sha256() {
        // RFC 4231, test case 2.
        let secret = Secret::new("Jefe".to_string());
        assert_eq!(
            signature(&secret, b"what do ya want for nothing?"),
            "sha256=5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }
}
