//! A real SMTP server per test: PyPI's aiosmtpd (`scripts/install-deps`
//! installs it), run by a small script this file writes into the server's
//! own temporary directory, on a free loopback port, with STARTTLS
//! required (a certificate of the test's throwaway CA) and, when asked,
//! AUTH with a user and password. Each message it takes is written to
//! `DIR/mail/NNNN.eml`; a recipient starting `refused` gets `550`.
//! Dropping it kills the process.

use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::TlsFiles;

/// The server's script: argv is DIR PORT CERT KEY [USER PASSWORD].
const SCRIPT: &str = r#"
import os, ssl, sys, threading
from aiosmtpd.controller import Controller
from aiosmtpd.smtp import AuthResult, LoginPassword

out, port, cert, key = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
user = sys.argv[5] if len(sys.argv) > 6 else None
password = sys.argv[6] if len(sys.argv) > 6 else None
os.makedirs(os.path.join(out, "mail"), exist_ok=True)

class Handler:
    async def handle_RCPT(self, server, conversation, envelope, address, rcpt_options):
        if address.startswith("refused"):
            return "550 5.1.1 no such mailbox"
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server, conversation, envelope):
        n = len(os.listdir(os.path.join(out, "mail")))
        path = os.path.join(out, "mail", "%04d.eml" % n)
        with open(path + ".tmp", "wb") as f:
            f.write(b"X-Envelope-To: " + ", ".join(envelope.rcpt_tos).encode() + b"\r\n")
            f.write(b"X-Authenticated: " + str(conversation.authenticated).encode() + b"\r\n")
            f.write(envelope.content)
        os.rename(path + ".tmp", path)
        return "250 2.0.0 Ok: queued as cronlease-test-%d" % n

def authenticator(server, conversation, envelope, mechanism, auth_data):
    ok = (isinstance(auth_data, LoginPassword)
          and auth_data.login.decode() == user
          and auth_data.password.decode() == password)
    return AuthResult(success=ok, handled=False)

context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
context.load_cert_chain(cert, key)
controller = Controller(
    Handler(), hostname="127.0.0.1", port=port, tls_context=context,
    require_starttls=True, authenticator=authenticator,
    auth_required=user is not None, auth_require_tls=True)
controller.start()
open(os.path.join(out, "ready"), "w").write("ready")
threading.Event().wait()
"#;

/// An aiosmtpd process this test owns.
pub struct SmtpServer {
    port: u16,
    dir: tempfile::TempDir,
    process: Child,
}

impl SmtpServer {
    /// Starts a server presenting `tls`'s server certificate (for
    /// `127.0.0.1` and `localhost`), requiring STARTTLS, and requiring AUTH
    /// as `login` (user, password) when given.
    ///
    /// # Panics
    ///
    /// When python3 or aiosmtpd is missing (run `scripts/install-deps`),
    /// or the server is not ready within 20 s (the message holds its
    /// output).
    pub fn start(tls: &TlsFiles, login: Option<(&str, &str)>) -> SmtpServer {
        let dir = tempfile::Builder::new()
            .prefix("cronlease-smtp-")
            .tempdir()
            .expect("cannot create a temporary directory for the SMTP server");
        let script = dir.path().join("smtp_server.py");
        std::fs::write(&script, SCRIPT).expect("cannot write the SMTP server's script");
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("cannot find a free loopback port")
            .port();
        let log = std::fs::File::create(dir.path().join("server.log"))
            .expect("cannot create the SMTP server's log");
        let mut command = Command::new("python3");
        command
            .arg(&script)
            .arg(dir.path())
            .arg(port.to_string())
            .arg(tls.server_cert())
            .arg(tls.server_key())
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("a second handle on the log"))
            .stderr(log);
        if let Some((user, password)) = login {
            command.args([user, password]);
        }
        super::die_with_this_thread(&mut command);
        let process = command
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run python3 (run scripts/install-deps): {e}"));
        let mut server = SmtpServer { port, dir, process };
        server.wait_ready();
        server
    }

    fn wait_ready(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if self.dir.path().join("ready").exists()
                && TcpStream::connect(("127.0.0.1", self.port)).is_ok()
            {
                return;
            }
            if let Ok(Some(status)) = self.process.try_wait() {
                panic!(
                    "the SMTP server exited ({status}) before it was ready (is aiosmtpd installed? run scripts/install-deps):\n{}",
                    self.log()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("the SMTP server was not ready within 20 s:\n{}", self.log());
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// What the server printed.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("server.log")).unwrap_or_default()
    }

    /// The messages taken so far, in order (each with `X-Envelope-To` and
    /// `X-Authenticated` lines first).
    pub fn messages(&self) -> Vec<String> {
        let mail = self.dir.path().join("mail");
        let mut files: Vec<PathBuf> = std::fs::read_dir(&mail)
            .map(|entries| entries.flatten().map(|e| e.path()).collect())
            .unwrap_or_default();
        files.retain(|p| p.extension().is_some_and(|e| e == "eml"));
        files.sort();
        files.iter().map(|p| read(p)).collect()
    }
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
}

impl Drop for SmtpServer {
    fn drop(&mut self) {
        let _ = self.process.kill();
        let _ = self.process.wait();
    }
}
