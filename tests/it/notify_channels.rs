//! Notification channels against real receivers: a webhook receiver that
//! checks the signature with its own HMAC (Python's), the JSON fields and
//! the idempotency key; a Slack-style receiver; a real SMTP server
//! (aiosmtpd) with STARTTLS from a throwaway CA and AUTH; `notify test`
//! through the binary; the classification of failures; every problem
//! `check` finds in channels and rules; and secrets kept out of `check`'s
//! output and of `Debug`.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::Path;
use std::time::Duration;

use cronlease::config::{ChannelSpec, Config, EmailSpec, EventKind, Secret, SmtpTls, WebhookSpec};
use cronlease::notify::{Channels, Event, SendError};

use crate::support::{
    ConfigFile, REDIS_SECTION, Receiver, Run, SmtpServer, TlsFiles, cronlease, python_hmac, runtime,
};

const JOB: &str = "[jobs.noon]\nschedule = \"0 12 * * *\"\ncommand = [\"true\"]\n";

/// `cronlease ARGS… --config PATH`.
fn run_with_config(args: &[&str], path: &Path, env: &[(&str, &str)]) -> Run {
    let mut all: Vec<OsString> = args.iter().map(OsString::from).collect();
    all.extend([OsString::from("--config"), path.as_os_str().to_owned()]);
    crate::support::cronlease_with_env(all, env)
}

/// An event of job `noon` as the delivery would have read it.
fn failed_event(key: &str) -> Event {
    Event {
        kind: EventKind::Failed,
        key: key.to_string(),
        job: Some("noon".to_string()),
        tick_ms: Some(1_795_089_600_000),
        run_id: Some("0b9c5c0e-run".to_string()),
        fence: Some(42),
        replica: Some("host-a".to_string()),
        status: Some("failed".to_string()),
        attempt: Some(2),
        output_tail: None,
        occurred_ms: 1_795_089_601_234,
        detail: None,
    }
}

fn webhook(url: &str, secret: Option<&str>) -> ChannelSpec {
    ChannelSpec::Webhook(WebhookSpec {
        url: url.to_string(),
        headers: vec![("X-Team".to_string(), "payments".to_string())],
        timeout: Duration::from_secs(5),
        secret: secret.map(|s| Secret::new(s.to_string())),
        secret_env: None,
    })
}

/// `spec` built as the only channel, named `ch`.
fn channels(spec: ChannelSpec) -> Channels {
    Channels::build(&BTreeMap::from([("ch".to_string(), spec)])).expect("the channel builds")
}

#[test]
fn a_webhook_is_signed_carries_every_field_and_keeps_its_key_across_retries() {
    let receiver = Receiver::start(200, "thanks");
    let secret = "whsec-0123456789";
    let channels = channels(webhook(&receiver.url("/hook"), Some(secret)));
    let target = channels.get("ch").expect("the channel");
    let event = failed_event("noon:1795089600000:failed");
    let receipts: Vec<_> = runtime().block_on(async {
        let mut receipts = Vec::new();
        for _ in 0..2 {
            let sent = target.send(&event, Some("https://cron.example.com/")).await;
            receipts.push(sent.expect("the receiver took it"));
        }
        receipts
    });
    assert_eq!(receipts[0].answer, "HTTP 200 OK: thanks");

    let requests = receiver.requests();
    assert_eq!(requests.len(), 2, "{requests:#?}");
    for request in &requests {
        assert_eq!(
            (request.method.as_str(), request.path.as_str()),
            ("POST", "/hook")
        );
        let signature = request.header("cronlease-signature").expect("a signature");
        assert_eq!(
            signature,
            format!("sha256={}", python_hmac(secret, &request.body))
        );
        assert_eq!(request.header("idempotency-key"), Some(event.key.as_str()));
        assert_eq!(request.header("content-type"), Some("application/json"));
        assert_eq!(request.header("x-team"), Some("payments"));
        let agent = request.header("user-agent").expect("a User-Agent");
        assert_eq!(agent, concat!("cronlease/", env!("CARGO_PKG_VERSION")));
    }
    let body = requests[0].json();
    let expected = serde_json::json!({
        "event": "failed",
        "job": "noon",
        "tick": "2026-11-19T12:00:00.000Z",
        "run_id": "0b9c5c0e-run",
        "fence": 42,
        "replica": "host-a",
        "status": "failed",
        "attempt": 2,
        "output_tail": null,
        "dashboard_url": "https://cron.example.com/jobs/noon",
        "occurred_at": "2026-11-19T12:00:01.234Z",
        "detail": "job noon failed (attempt 2)",
        "idempotency_key": "noon:1795089600000:failed",
    });
    assert_eq!(body, expected);
    assert_eq!(
        requests[1].body, requests[0].body,
        "a retry sends the same bytes"
    );
}

#[test]
fn without_a_secret_there_is_no_signature_and_absent_values_are_null() {
    let receiver = Receiver::start(204, "");
    let channels = channels(webhook(&receiver.url("/"), None));
    let mut event = failed_event("k-1");
    (event.job, event.tick_ms, event.fence, event.attempt) = (None, None, None, None);
    event.kind = EventKind::ReplicaDead;
    let receipt = runtime()
        .block_on(channels.get("ch").expect("the channel").send(&event, None))
        .expect("the receiver took it");
    assert!(receipt.answer.starts_with("HTTP 204"), "{receipt:?}");
    let request = &receiver.requests()[0];
    assert_eq!(request.header("cronlease-signature"), None);
    let body = request.json();
    for field in [
        "job",
        "tick",
        "fence",
        "attempt",
        "dashboard_url",
        "output_tail",
    ] {
        assert_eq!(body[field], serde_json::Value::Null, "{field} in {body}");
    }
    assert_eq!(body["event"], "replica_dead");
    assert_eq!(body["detail"], "replica host-a stopped sending heartbeats");
}

#[test]
fn a_slack_channel_posts_one_readable_text() {
    let receiver = Receiver::start(200, "ok");
    let spec = ChannelSpec::Slack(cronlease::config::SlackSpec {
        url: receiver.url("/services/T0/B0/XXXX"),
        timeout: Duration::from_secs(5),
    });
    let channels = channels(spec);
    let mut event = failed_event("slack-key");
    event.output_tail = Some(format!("{}\nError: disk full\n", "x".repeat(10_000)));
    let receipt = runtime()
        .block_on(
            channels
                .get("ch")
                .expect("the channel")
                .send(&event, Some("https://cron.example.com")),
        )
        .expect("the receiver took it");
    assert_eq!(receipt.answer, "HTTP 200 OK: ok");
    let request = &receiver.requests()[0];
    assert_eq!(request.header("idempotency-key"), Some("slack-key"));
    let body = request.json();
    let object = body.as_object().expect("an object");
    assert_eq!(object.keys().collect::<Vec<_>>(), ["text"], "{body}");
    let text = body["text"].as_str().expect("a string");
    for fragment in [
        "noon: failed",
        "tick: 2026-11-19T12:00:00.000Z",
        "status: failed",
        "replica: host-a",
        "https://cron.example.com/jobs/noon",
        "```\n…",
        "Error: disk full\n```",
    ] {
        assert!(text.contains(fragment), "{fragment:?} not in {text}");
    }
    assert!(
        text.len() <= 4100,
        "the message is cut: {} bytes",
        text.len()
    );
}

#[test]
fn failures_are_permanent_or_worth_retrying() {
    let cases = [
        (400, true),
        (404, true),
        (408, false),
        (429, false),
        (500, false),
        (503, false),
    ];
    for (status, permanent) in cases {
        let receiver = Receiver::start(status, "nope \u{1b}[31mred\u{1b}[0m");
        let channels = channels(webhook(&receiver.url("/"), None));
        let sent = runtime().block_on(
            channels
                .get("ch")
                .expect("the channel")
                .send(&failed_event("k"), None),
        );
        let Err(error) = sent else {
            panic!("HTTP {status} was taken as success");
        };
        assert!(
            matches!(error, SendError::Http { status: s, .. } if s == status),
            "{error:?}"
        );
        assert_eq!(error.is_permanent(), permanent, "HTTP {status}: {error}");
        let shown = error.to_string();
        assert!(
            !shown.contains('\u{1b}'),
            "the answer is escaped: {shown:?}"
        );
        assert!(shown.contains("\\u{1b}[31mred"), "{shown:?}");
    }
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port");
    let closed_channels = channels(webhook(&format!("http://{closed}/"), None));
    let error = runtime()
        .block_on(
            closed_channels
                .get("ch")
                .expect("the channel")
                .send(&failed_event("k"), None),
        )
        .expect_err("nothing listens");
    assert!(matches!(error, SendError::Connect(_)), "{error:?}");
    assert!(!error.is_permanent(), "{error}");

    // Connected (the kernel's backlog accepts), never answered.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
    let mut spec = webhook(
        &format!("http://{}/", silent.local_addr().expect("its address")),
        None,
    );
    if let ChannelSpec::Webhook(w) = &mut spec {
        w.timeout = Duration::from_millis(500);
    }
    let silent_channels = channels(spec);
    let error = runtime()
        .block_on(
            silent_channels
                .get("ch")
                .expect("the channel")
                .send(&failed_event("k"), None),
        )
        .expect_err("nobody answers");
    assert!(matches!(error, SendError::Timeout(_)), "{error:?}");
    assert!(!error.is_permanent(), "{error}");
}

/// A config with channel `hook` (a webhook to `url`, signed with the
/// secret in a file) and `slack`.
fn webhook_config(url: &str, secret_file: &Path) -> String {
    format!(
        "{REDIS_SECTION}[daemon]\ndashboard_url = \"https://cron.example.com\"\n\
         [notify.hook]\nkind = \"webhook\"\nurl = \"{url}\"\nsecret_file = \"{}\"\n\
         [notify.slack]\nkind = \"slack\"\nurl = \"{url}\"\n{JOB}",
        secret_file.display()
    )
}

#[test]
fn notify_test_sends_a_signed_test_event_and_prints_the_answer() {
    let receiver = Receiver::start(202, "accepted by the test receiver");
    let dir = tempfile::tempdir().expect("a temporary directory");
    let secret_file = dir.path().join("hook.secret");
    std::fs::write(&secret_file, "file-secret-7f3a\n").expect("the secret file");
    let config = ConfigFile::new(&webhook_config(&receiver.url("/t"), &secret_file));

    let first = run_with_config(&["notify", "test", "hook"], config.path(), &[]).expect_code(0);
    let stdout = first.stdout();
    assert!(
        stdout.contains("HTTP 202 Accepted: accepted by the test receiver"),
        "{}",
        first.describe()
    );
    assert!(!stdout.contains("file-secret-7f3a"), "{}", first.describe());
    run_with_config(&["notify", "test", "hook"], config.path(), &[]).expect_code(0);

    let requests = receiver.requests();
    assert_eq!(requests.len(), 2);
    let keys: Vec<&str> = requests
        .iter()
        .filter_map(|r| r.header("idempotency-key"))
        .collect();
    assert_eq!(keys.len(), 2);
    assert_ne!(keys[0], keys[1], "each test is a fresh event");
    assert!(stdout.contains(keys[0]), "the key is printed: {stdout}");
    for request in &requests {
        let expected = format!("sha256={}", python_hmac("file-secret-7f3a", &request.body));
        assert_eq!(
            request.header("cronlease-signature"),
            Some(expected.as_str())
        );
        let body = request.json();
        assert_eq!(body["event"], "test");
        assert_eq!(
            body["idempotency_key"],
            request.header("idempotency-key").unwrap_or_default()
        );
        assert_eq!(body["dashboard_url"], "https://cron.example.com/");
    }

    let slack = run_with_config(&["notify", "test", "slack"], config.path(), &[]).expect_code(0);
    assert!(slack.stdout().contains("HTTP 202"), "{}", slack.describe());
    let text = receiver.requests()[2].json();
    assert!(
        text["text"].as_str().is_some_and(|t| t.contains("test")),
        "{text}"
    );

    let unknown = run_with_config(&["notify", "test", "pager"], config.path(), &[]).expect_code(2);
    assert!(
        unknown.stderr().contains("no channel \"pager\"")
            && unknown.stderr().contains("expected one of hook, slack"),
        "{}",
        unknown.describe()
    );
}

#[test]
fn notify_test_fails_clearly_when_the_receiver_refuses() {
    let receiver = Receiver::start(401, "bad token");
    let dir = tempfile::tempdir().expect("a temporary directory");
    let secret_file = dir.path().join("hook.secret");
    std::fs::write(&secret_file, "s").expect("the secret file");
    let config = ConfigFile::new(&webhook_config(&receiver.url("/"), &secret_file));
    let run = run_with_config(&["notify", "test", "hook"], config.path(), &[]).expect_code(1);
    let stderr = run.stderr();
    assert!(stderr.contains("HTTP 401: bad token"), "{}", run.describe());
    assert!(stderr.contains("permanent"), "{}", run.describe());
}

/// The e-mail channel of a config: STARTTLS to `server` trusting `ca`,
/// logging in with a password from `password_env` when given.
fn email_config(server: &SmtpServer, ca: &Path, login: Option<&str>, to: &str) -> String {
    let login = login.map_or(String::new(), |env| {
        format!("username = \"cron\"\npassword_env = \"{env}\"\n")
    });
    format!(
        "{REDIS_SECTION}[notify.mail]\nkind = \"email\"\nhost = \"localhost\"\nport = {}\n\
         ca_file = \"{}\"\n{login}from = \"Cron <cron@example.com>\"\nto = [\"{to}\"]\n{JOB}",
        server.port(),
        ca.display()
    )
}

#[test]
fn an_email_goes_over_starttls_with_auth_and_carries_its_key_as_message_id() {
    let tls = TlsFiles::generate();
    let server = SmtpServer::start(&tls, Some(("cron", "smtp-pass-91c2")));
    let config = ConfigFile::new(&email_config(
        &server,
        &tls.ca(),
        Some("CRONLEASE_TEST_SMTP_PASSWORD"),
        "ops@example.com",
    ));
    let env = [("CRONLEASE_TEST_SMTP_PASSWORD", "smtp-pass-91c2")];
    let run = run_with_config(&["notify", "test", "mail"], config.path(), &env).expect_code(0);
    let stdout = run.stdout();
    assert!(
        stdout.contains("250 2.0.0 Ok: queued as cronlease-test-0"),
        "{}\n{}",
        run.describe(),
        server.log()
    );
    assert!(!stdout.contains("smtp-pass-91c2"), "{}", run.describe());
    let key = stdout
        .split("sent test event ")
        .nth(1)
        .and_then(|rest| rest.split(';').next())
        .expect("the key is printed");

    let messages = server.messages();
    assert_eq!(messages.len(), 1, "{}", server.log());
    let message = &messages[0];
    for line in [
        "X-Envelope-To: ops@example.com".to_string(),
        "X-Authenticated: True".to_string(),
        "From: Cron <cron@example.com>".to_string(),
        "To: ops@example.com".to_string(),
        "Subject: [cronlease] test: a test notification".to_string(),
        format!("Message-ID: <{key}@cronlease>"),
    ] {
        assert!(message.contains(&line), "{line:?} not in\n{message}");
    }

    let wrong = [("CRONLEASE_TEST_SMTP_PASSWORD", "wrong")];
    let refused =
        run_with_config(&["notify", "test", "mail"], config.path(), &wrong).expect_code(1);
    assert!(refused.stderr().contains("535"), "{}", refused.describe());
}

#[test]
fn a_refused_recipient_is_permanent_and_a_wrong_ca_fails_the_handshake() {
    let tls = TlsFiles::generate();
    let server = SmtpServer::start(&tls, None);
    let spec = |ca: &Path, to: &str| {
        ChannelSpec::Email(EmailSpec {
            host: "localhost".to_string(),
            port: server.port(),
            tls: SmtpTls::Starttls,
            ca_file: Some(ca.to_path_buf()),
            username: None,
            password: None,
            password_env: None,
            from: "cron@example.com".to_string(),
            to: vec![to.to_string()],
            timeout: Duration::from_secs(10),
        })
    };
    let send = |spec: ChannelSpec| {
        let channels = channels(spec);
        runtime().block_on(
            channels
                .get("ch")
                .expect("the channel")
                .send(&failed_event("m-1"), None),
        )
    };
    let error = send(spec(&tls.ca(), "refused@example.com")).expect_err("the server refuses him");
    assert!(
        matches!(error, SendError::Smtp { code: 550, .. }),
        "{error:?}\n{}",
        server.log()
    );
    assert!(error.is_permanent(), "{error}");

    let error = send(spec(&tls.other_ca(), "ops@example.com")).expect_err("an unknown CA");
    assert!(!error.is_permanent(), "{error:?}");
    assert!(server.messages().is_empty());

    let receipt = send(spec(&tls.ca(), "ops@example.com")).expect("delivered");
    assert!(receipt.answer.starts_with("250"), "{receipt:?}");
    let message = &server.messages()[0];
    assert!(message.contains("Message-ID: <m-1@cronlease>"), "{message}");
    assert!(
        message.contains("Subject: [cronlease] noon: failed: job noon failed (attempt 2)"),
        "{message}"
    );
}

/// Runs `check` on `config` and asserts exit 2 and that stderr holds every
/// fragment.
#[track_caller]
fn rejected(case: &str, config: &str, fragments: &[&str]) {
    let file = ConfigFile::new(config);
    let run = cronlease([
        OsString::from("check"),
        "--config".into(),
        file.path().into(),
    ]);
    assert_eq!(run.code(), Some(2), "case {case:?}\n{}", run.describe());
    for fragment in fragments {
        assert!(
            run.stderr().contains(fragment),
            "case {case:?}: no {fragment:?}\n{}",
            run.describe()
        );
    }
}

#[test]
fn every_channel_and_rule_problem_names_its_place() {
    let hook = "[notify.ops]\nkind = \"webhook\"\nurl = \"https://hooks.example.com/x\"\n";
    let cases: Vec<(&str, String, Vec<&str>)> = vec![
        (
            "unknown kind",
            format!("{REDIS_SECTION}[notify.ops]\nkind = \"pager\"\n{JOB}"),
            vec![
                "jobs.toml:4:8",
                "[notify.ops]",
                "field `kind`",
                "unknown kind \"pager\": expected one of webhook, slack, email",
            ],
        ),
        (
            "bad url",
            format!(
                "{REDIS_SECTION}[notify.ops]\nkind = \"slack\"\nurl = \"hooks.slack.com/x\"\n{JOB}"
            ),
            vec![
                "jobs.toml:5:7",
                "[notify.ops]",
                "field `url`",
                "expected http:// or https://",
            ],
        ),
        (
            "missing to",
            format!(
                "{REDIS_SECTION}[notify.mail]\nkind = \"email\"\nhost = \"smtp.example.com\"\nfrom = \"c@example.com\"\n{JOB}"
            ),
            vec!["[notify.mail]", "field `to`", "missing `to`"],
        ),
        (
            "unknown key",
            format!("{REDIS_SECTION}{hook}secret_fil = \"/x\"\n{JOB}"),
            vec![
                "jobs.toml:6:1",
                "[notify.ops]",
                "field `secret_fil`",
                "unknown field `secret_fil`, expected one of",
                "`secret_file`",
            ],
        ),
        (
            "key of another kind",
            format!("{REDIS_SECTION}{hook}to = [\"a@example.com\"]\n{JOB}"),
            vec![
                "jobs.toml:6:6",
                "[notify.ops]",
                "field `to`",
                "not a setting of a channel of kind webhook",
            ],
        ),
        (
            "reserved header",
            format!("{REDIS_SECTION}{hook}headers = {{ \"Idempotency-Key\" = \"x\" }}\n{JOB}"),
            vec![
                "jobs.toml:6:13",
                "[notify.ops]",
                "field `headers`",
                "set by cronlease",
            ],
        ),
        (
            "two secrets",
            format!("{REDIS_SECTION}{hook}secret_env = \"A\"\nsecret_file = \"/b\"\n{JOB}"),
            vec![
                "jobs.toml:7:15",
                "field `secret_file`",
                "both `secret_env` and `secret_file`",
            ],
        ),
        (
            "unset secret variable",
            format!("{REDIS_SECTION}{hook}secret_env = \"CRONLEASE_TEST_UNSET_7C1\"\n{JOB}"),
            vec![
                "jobs.toml:6:14",
                "[notify.ops]",
                "field `secret_env`",
                "\"CRONLEASE_TEST_UNSET_7C1\" is not set",
            ],
        ),
        (
            "missing secret file",
            format!("{REDIS_SECTION}{hook}secret_file = \"/nonexistent/cronlease.secret\"\n{JOB}"),
            vec![
                "jobs.toml:6:15",
                "field `secret_file`",
                "cannot read /nonexistent/cronlease.secret",
            ],
        ),
        (
            "job names an unknown channel",
            format!(
                "{REDIS_SECTION}{hook}[notify.mail]\nkind = \"slack\"\nurl = \"https://x.example.com/\"\n{JOB}notify = [\"pager\"]\n"
            ),
            vec![
                "jobs.toml:12:11",
                "job \"noon\"",
                "field `notify`",
                "unknown channel \"pager\": expected one of mail, ops",
            ],
        ),
        (
            "daemon names an unknown channel",
            format!("{REDIS_SECTION}[daemon]\nnotify = [\"opz\"]\n{hook}{JOB}"),
            vec![
                "jobs.toml:4:11",
                "[daemon]",
                "field `notify`",
                "unknown channel \"opz\": expected one of ops",
            ],
        ),
        (
            "unknown event",
            format!("{REDIS_SECTION}{JOB}notify_on = [\"failed\", \"crashed\"]\n"),
            vec![
                "jobs.toml:6:24",
                "job \"noon\"",
                "field `notify_on`",
                "unknown event \"crashed\": expected one of failed, timeout, recovered, missed, lost_lease, abandoned, late, overdue, replica_dead",
            ],
        ),
        (
            "late without late_after",
            format!("{REDIS_SECTION}{JOB}notify_on = [\"late\"]\n"),
            vec![
                "jobs.toml:6:13",
                "job \"noon\"",
                "field `notify_on`",
                "`late` needs `late_after`",
            ],
        ),
        (
            "late without late_after in daemon",
            format!("{REDIS_SECTION}[daemon]\nnotify_on = [\"late\"]\n{JOB}"),
            vec![
                "jobs.toml:4:13",
                "[daemon]",
                "field `notify_on`",
                "`late` needs `late_after`",
            ],
        ),
        (
            "overdue without expect_success_within",
            format!("{REDIS_SECTION}{JOB}notify_on = [\"overdue\"]\n"),
            vec![
                "jobs.toml:6:13",
                "job \"noon\"",
                "field `notify_on`",
                "`overdue` needs `expect_success_within`",
            ],
        ),
        (
            "replica_dead in a job",
            format!("{REDIS_SECTION}{JOB}notify_on = [\"replica_dead\"]\n"),
            vec![
                "jobs.toml:6:13",
                "job \"noon\"",
                "field `notify_on`",
                "it belongs in [daemon] notify_on",
            ],
        ),
        (
            "bad duration",
            format!("{REDIS_SECTION}{JOB}expect_success_within = \"soon\"\n"),
            vec![
                "jobs.toml:6:25",
                "job \"noon\"",
                "field `expect_success_within`",
                "invalid duration",
            ],
        ),
        (
            "bad dashboard_url",
            format!("{REDIS_SECTION}[daemon]\ndashboard_url = \"cron.example.com\"\n{JOB}"),
            vec![
                "jobs.toml:4:17",
                "[daemon]",
                "field `dashboard_url`",
                "expected http:// or https://",
            ],
        ),
        (
            "bad address",
            format!(
                "{REDIS_SECTION}[notify.mail]\nkind = \"email\"\nhost = \"smtp.example.com\"\nfrom = \"cron at example\"\nto = [\"ops@example.com\"]\n{JOB}"
            ),
            vec![
                "jobs.toml:6:8",
                "[notify.mail]",
                "field `from`",
                "invalid address \"cron at example\"",
            ],
        ),
    ];
    for (case, config, fragments) in cases {
        rejected(case, &config, &fragments);
    }
}

#[test]
fn secrets_never_appear_in_checks_output_or_debug() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let secret_file = dir.path().join("hook.secret");
    std::fs::write(&secret_file, "file-secret-d41d8c\n").expect("the secret file");
    let password_file = dir.path().join("smtp.password");
    std::fs::write(&password_file, "file-password-e3b0c4\n").expect("the password file");
    let text = format!(
        "{REDIS_SECTION}[daemon]\nnotify = [\"hook\", \"mail\", \"mail2\"]\n\
         [notify.hook]\nkind = \"webhook\"\nurl = \"https://hooks.example.com/T0KEN-9a8b\"\nsecret_file = \"{}\"\n\
         [notify.mail]\nkind = \"email\"\nhost = \"smtp.example.com\"\nusername = \"cron\"\npassword_file = \"{}\"\n\
         from = \"cron@example.com\"\nto = [\"ops@example.com\"]\n\
         [notify.mail2]\nkind = \"email\"\nhost = \"smtp.example.com\"\nusername = \"cron\"\npassword_env = \"CRONLEASE_TEST_MAIL_PW\"\n\
         from = \"cron@example.com\"\nto = [\"ops@example.com\"]\n{JOB}",
        secret_file.display(),
        password_file.display()
    );
    let config = ConfigFile::new(&text);
    let env = [("CRONLEASE_TEST_MAIL_PW", "env-password-a9f0e1")];
    let secrets = [
        "file-secret-d41d8c",
        "file-password-e3b0c4",
        "env-password-a9f0e1",
        "T0KEN-9a8b",
    ];
    for extra in [&[][..], &["--json"][..]] {
        let mut args = vec!["check"];
        args.extend(extra);
        let run = run_with_config(&args, config.path(), &env).expect_code(0);
        let all = format!("{}{}", run.stdout(), run.stderr());
        for secret in secrets {
            assert!(
                !all.contains(secret),
                "{secret} shown by check {extra:?}\n{}",
                run.describe()
            );
        }
        assert!(
            all.contains("hook") && all.contains("mail2"),
            "{}",
            run.describe()
        );
    }
    let text_run = run_with_config(&["check"], config.path(), &env);
    assert!(
        text_run
            .stdout()
            .contains("webhook https://hooks.example.com/…, signed"),
        "{}",
        text_run.describe()
    );

    let loaded = Config::load(config.path());
    // The variable is not set in this process: that problem is the only one.
    let error = loaded.expect_err("CRONLEASE_TEST_MAIL_PW is unset here");
    assert_eq!(error.problems.len(), 1, "{error}");
    let without_env = text.replace(
        "password_env = \"CRONLEASE_TEST_MAIL_PW\"",
        &format!("password_file = \"{}\"", password_file.display()),
    );
    let config = Config::parse(&without_env, config.path()).expect("valid");
    let debug = format!("{config:?} {:#?}", config.notify);
    for secret in secrets {
        assert!(!debug.contains(secret), "{secret} in Debug: {debug}");
    }
    assert!(debug.contains("***"), "{debug}");
}

#[test]
fn the_rules_resolve_daemons_defaults_into_each_job() {
    let text = format!(
        "{REDIS_SECTION}[daemon]\nnotify = [\"ops\"]\nlate_after = \"2m\"\nrepeat_every = \"4h\"\n\
         retry_for = \"30m\"\ndashboard_url = \"https://cron.example.com/\"\n\
         [notify.ops]\nkind = \"slack\"\nurl = \"https://chat.example.com/hook\"\n\
         [notify.mail]\nkind = \"slack\"\nurl = \"https://chat.example.com/other\"\n\
         {JOB}\
         [jobs.own]\nschedule = \"0 3 * * *\"\ncommand = [\"true\"]\nnotify = [\"mail\"]\n\
         notify_on = [\"failed\", \"overdue\"]\nexpect_success_within = \"1d\"\nrepeat_every = \"10m\"\n\
         [jobs.quiet]\nschedule = \"0 4 * * *\"\ncommand = [\"true\"]\nnotify = []\n"
    );
    let config = Config::parse(&text, Path::new("/etc/cronlease/jobs.toml")).expect("valid");
    let daemon = &config.daemon.notify;
    assert_eq!(daemon.replica_dead_channels(), ["ops"]);
    assert_eq!(daemon.retry_for, Duration::from_secs(1800));
    assert_eq!(
        daemon.dashboard_url.as_deref(),
        Some("https://cron.example.com")
    );

    let noon = &config.jobs["noon"].notify;
    assert_eq!(noon.channels, ["ops"]);
    assert_eq!(noon.late_after, Some(Duration::from_secs(120)));
    assert_eq!(noon.repeat_every, Duration::from_secs(4 * 3600));
    let events: Vec<EventKind> = noon.on.iter().collect();
    assert_eq!(
        events,
        [
            EventKind::Failed,
            EventKind::Timeout,
            EventKind::Recovered,
            EventKind::Missed,
            EventKind::LostLease,
            EventKind::Abandoned,
            EventKind::Late,
            EventKind::Overdue,
        ],
        "the default, with `late` since a late_after applies"
    );

    let own = &config.jobs["own"].notify;
    assert_eq!(own.channels, ["mail"]);
    assert_eq!(
        own.on.iter().collect::<Vec<_>>(),
        [EventKind::Failed, EventKind::Overdue]
    );
    assert_eq!(own.expect_success_within, Some(Duration::from_secs(86_400)));
    assert_eq!(own.repeat_every, Duration::from_secs(600));
    assert!(config.jobs["quiet"].notify.channels.is_empty());
}

#[test]
fn an_embedded_scheduler_checks_its_channels_and_rules_like_a_job_table() {
    use cronlease::{Channel, JobBuilder, RedisSettings, Run, SchedulerError};

    let redis = crate::support::RedisServer::start();
    let rt = runtime();
    let error = rt.block_on(async {
        let cluster = cronlease::Cluster::connect(RedisSettings::url(&redis.url()))
            .await
            .expect("Redis is up");
        let job = JobBuilder::new("noon", "0 12 * * *")
            .notify(&["ops", "pager"])
            .notify_on([EventKind::Failed, EventKind::Overdue])
            .repeat_every(Duration::from_secs(600))
            .run(|_run: Run| async { Ok::<(), std::io::Error>(()) });
        let started = cluster
            .scheduler()
            .channel(
                "ops",
                Channel::webhook("ftp://hooks.example.com/x").secret("code-secret-5e1"),
            )
            .channel(
                "mail",
                Channel::email("smtp.example.com", "cron@example.com", &[]),
            )
            .job(job)
            .start();
        match started {
            Err(SchedulerError::Config(error)) => error,
            Err(other) => panic!("not a config error: {other}"),
            Ok(_) => panic!("the channels and rules are refused"),
        }
    });
    let text = error.to_string();
    for fragment in [
        "[notify.ops], field `url`: invalid URL",
        "[notify.mail], field `to`: no address",
        "job \"noon\", field `notify`: unknown channel \"pager\": expected one of mail, ops",
        "job \"noon\", field `notify_on`: `overdue` needs `expect_success_within`",
    ] {
        assert!(text.contains(fragment), "{fragment:?} not in\n{text}");
    }
    assert!(!text.contains("code-secret-5e1"), "{text}");
    assert!(
        error.problems.iter().all(|p| p.line_col.is_none()),
        "{error:?}"
    );

    let fine = rt.block_on(async {
        let cluster = cronlease::Cluster::connect(RedisSettings::url(&redis.url()))
            .await
            .expect("Redis is up");
        let job = JobBuilder::new("noon", "0 12 * * *")
            .notify(&["ops"])
            .expect_success_within(Duration::from_secs(90_000))
            .late_after(Duration::from_secs(60))
            .run(|_run: Run| async { Ok::<(), std::io::Error>(()) });
        let scheduler = cluster
            .scheduler()
            .channel(
                "ops",
                Channel::webhook("https://hooks.example.com/x").secret("s"),
            )
            .notify(&["ops"])
            .job(job)
            .start()
            .expect("valid channels and rules");
        scheduler.shutdown().await
    });
    fine.expect("a clean shutdown");
}

#[test]
fn repeat_every_zero_tells_every_failure_and_is_accepted_everywhere() {
    let text = format!(
        "{REDIS_SECTION}[daemon]\nnotify = [\"ops\"]\nrepeat_every = \"0s\"\n\
         [notify.ops]\nkind = \"slack\"\nurl = \"https://chat.example.com/hook\"\n\
         {JOB}\
         [jobs.own]\nschedule = \"0 3 * * *\"\ncommand = [\"true\"]\nrepeat_every = \"0ms\"\n"
    );
    let config = Config::parse(&text, Path::new("/etc/cronlease/jobs.toml")).expect("valid");
    assert_eq!(config.daemon.notify.repeat_every, Duration::ZERO);
    assert_eq!(config.jobs["noon"].notify.repeat_every, Duration::ZERO);
    assert_eq!(config.jobs["own"].notify.repeat_every, Duration::ZERO);
    let job = cronlease::JobBuilder::new("draw", "0 12 * * *")
        .notify(&["ops"])
        .repeat_every(Duration::ZERO)
        .run(|_run: cronlease::Run| async { Ok::<(), std::io::Error>(()) });
    let redis = crate::support::RedisServer::start();
    runtime().block_on(async {
        let cluster = cronlease::Cluster::connect(cronlease::RedisSettings::url(&redis.url()))
            .await
            .expect("Redis is up");
        let scheduler = cluster
            .scheduler()
            .channel(
                "ops",
                cronlease::Channel::slack("https://chat.example.com/hook"),
            )
            .job(job)
            .start()
            .expect("a zero repeat_every is valid from code too");
        scheduler.shutdown().await.expect("a clean shutdown");
    });
}

#[test]
fn a_webhook_may_set_neither_the_signature_nor_a_connection_header() {
    for header in [
        "Cronlease-Signature",
        "cronlease-signature",
        "Transfer-Encoding",
    ] {
        let text = format!(
            "{REDIS_SECTION}[notify.ops]\nkind = \"webhook\"\nurl = \"https://hooks.example.com/x\"\n\
             headers = {{ \"{header}\" = \"x\" }}\n{JOB}"
        );
        let error = Config::parse(&text, Path::new("/etc/cronlease/jobs.toml"))
            .expect_err("a reserved header is refused")
            .to_string();
        assert!(
            error.contains("field `headers`") && error.contains("is set by"),
            "{header}: {error}"
        );
    }
}
