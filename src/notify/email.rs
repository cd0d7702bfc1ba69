//! `kind = "email"`: a plain-text message over SMTP (lettre on tokio,
//! rustls with ring, the system's roots plus the channel's `ca_file`),
//! whose `Message-ID` is built from the event's key: a receiving system
//! that deduplicates by it sees one message however often it is retried.

use std::time::Duration;

use lettre::message::header::ContentType;
use lettre::message::{Mailbox, Mailboxes};
use lettre::transport::smtp::authentication::Credentials;
use lettre::transport::smtp::client::{Certificate, Tls, TlsParameters};
use lettre::transport::smtp::extension::ClientId;
use lettre::{AsyncSmtpTransport, AsyncTransport, Message, Tokio1Executor};

use super::{Event, Receipt, SendError, printable};
use crate::config::{EmailSpec, MAX_PEM_FILE, SmtpTls, read_bounded};

/// An e-mail channel, ready to send: its transport is built once.
pub(super) struct Email {
    transport: AsyncSmtpTransport<Tokio1Executor>,
    from: Mailbox,
    to: Mailboxes,
    timeout: Duration,
}

impl Email {
    /// The channel of `spec`; an error (the message) when its `ca_file`
    /// or an address cannot be used.
    pub(super) fn new(spec: &EmailSpec) -> Result<Email, String> {
        let mut builder = AsyncSmtpTransport::<Tokio1Executor>::builder_dangerous(&spec.host)
            .port(spec.port)
            .timeout(Some(spec.timeout))
            .hello_name(hello_name());
        if spec.tls != SmtpTls::None {
            let mut parameters = TlsParameters::builder(spec.host.clone());
            if let Some(ca_file) = &spec.ca_file {
                let pem = read_bounded(ca_file, MAX_PEM_FILE)
                    .map_err(|e| format!("cannot read {}: {e}", ca_file.display()))?;
                let roots = Certificate::from_pem(&pem)
                    .map_err(|e| format!("{}: {e}", ca_file.display()))?;
                parameters = parameters.add_root_certificate(roots);
            }
            let parameters = parameters.build_rustls().map_err(|e| e.to_string())?;
            builder = builder.tls(match spec.tls {
                SmtpTls::Implicit => Tls::Wrapper(parameters),
                _ => Tls::Required(parameters),
            });
        } else {
            builder = builder.tls(Tls::None);
        }
        if let (Some(user), Some(password)) = (&spec.username, &spec.password) {
            let credentials = Credentials::new(user.clone(), password.expose().to_string());
            builder = builder.credentials(credentials);
        }
        let from = spec
            .from
            .parse()
            .map_err(|e| format!("from {:?}: {e}", spec.from))?;
        let mut to = Mailboxes::new();
        for address in &spec.to {
            to.push(
                address
                    .parse()
                    .map_err(|e| format!("to {address:?}: {e}"))?,
            );
        }
        Ok(Email {
            transport: builder.build(),
            from,
            to,
            timeout: spec.timeout,
        })
    }

    pub(super) async fn send(
        &self,
        event: &Event,
        dashboard_url: Option<&str>,
    ) -> Result<Receipt, SendError> {
        let mut message = Message::builder()
            .from(self.from.clone())
            .subject(event.subject())
            .message_id(Some(message_id(&event.key)))
            .header(ContentType::TEXT_PLAIN);
        for to in self.to.iter() {
            message = message.to(to.clone());
        }
        let message = message
            .body(event.text(dashboard_url, ""))
            .map_err(|e| SendError::Message(e.to_string()))?;
        let sent = tokio::time::timeout(self.timeout, self.transport.send(message)).await;
        let response = match sent {
            Err(_) => return Err(SendError::Timeout(self.timeout)),
            Ok(Err(e)) => return Err(error(&e, self.timeout)),
            Ok(Ok(response)) => response,
        };
        let lines: Vec<&str> = response.message().collect();
        Ok(Receipt {
            answer: printable(&format!("{} {}", response.code(), lines.join(" "))),
        })
    }
}

/// `<key@cronlease>`, the key's bytes that RFC 5322 does not allow in a
/// message id's left part (`atext` and dots) written `=XX`: one key, one
/// id, and no key can break the header.
pub(super) fn message_id(key: &str) -> String {
    let mut id = String::with_capacity(key.len() + 12);
    id.push('<');
    for byte in key.bytes() {
        let atext = byte.is_ascii_alphanumeric() || b"!#$%&'*+-/?^_`{|}~.".contains(&byte);
        if atext && byte != b'=' {
            id.push(char::from(byte));
        } else {
            id.push_str(&format!("={byte:02X}"));
        }
    }
    id.push_str("@cronlease>");
    id
}

/// The name this host gives in `EHLO`.
fn hello_name() -> ClientId {
    match nix::unistd::gethostname()
        .ok()
        .and_then(|n| n.into_string().ok())
    {
        Some(name) if !name.is_empty() => ClientId::Domain(name),
        _ => ClientId::Domain("localhost".to_string()),
    }
}

/// An SMTP failure, classified: a reply the server gave (4xx, 5xx), a
/// timeout, or a connection that failed.
fn error(e: &lettre::transport::smtp::Error, timeout: Duration) -> SendError {
    let message = printable(&crate::inert::error_chain(e));
    if e.is_timeout() {
        SendError::Timeout(timeout)
    } else if let Some(code) = e.status() {
        SendError::Smtp {
            code: u16::from(code),
            message,
        }
    } else if e.is_permanent() || e.is_transient() {
        let code = if e.is_permanent() { 500 } else { 400 };
        SendError::Smtp { code, message }
    } else {
        SendError::Connect(message)
    }
}

#[cfg(test)]
mod tests {
    use super::message_id;

    #[test]
    fn a_message_id_holds_the_key_or_its_escapes() {
        assert_eq!(message_id("3f1c-9a"), "<3f1c-9a@cronlease>");
        assert_eq!(message_id("noon:17 x=1"), "<noon=3A17=20x=3D1@cronlease>");
    }
}
