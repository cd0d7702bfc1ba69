//! HTTP jobs end to end: real replicas send a job's request to a real
//! server (the receiver, or a Python HTTPS server with a throwaway CA),
//! with the run's headers; the answer's status decides the outcome and
//! its body lands in the output; a hung server is left at the timeout
//! and at a lost lease; `cronlease check` names what is wrong.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use chrono::SecondsFormat;

use crate::support::{
    Cluster, ConfigFile, Outcome, REDIS_SECTION, Receiver, RedisServer, TlsFiles, cronlease,
    wait_until, wait_until_or_show,
};

/// `[jobs.<name>]` sending `http` every second, with `extra` settings.
fn http_job(name: &str, http: &str, extra: &str) -> String {
    format!("[jobs.{name}]\nschedule = \"* * * * * *\"\nhttp = {{ {http} }}\n{extra}\n")
}

/// The first outcome of `job` with `status`, waiting for it.
fn first_with(cluster: &Cluster, job: &str, status: &str) -> Outcome {
    wait_until_or_show(
        Duration::from_secs(20),
        &format!("a {status} outcome of {job}"),
        || cluster.logs(),
        || {
            cluster
                .outcomes(job)
                .into_iter()
                .find(|o| o.status() == status)
        },
    )
}

fn output(outcome: &Outcome) -> &str {
    outcome.field("output").unwrap_or("")
}

#[test]
fn requests_carry_the_run_and_a_2xx_is_ok() {
    let receiver = Receiver::start(200, "all fine");
    let mut cluster = Cluster::new(RedisServer::start());
    let jobs = http_job(
        "ping",
        &format!(
            "method = \"POST\", url = \"{}\", headers = {{ X-Token = \"abc\" }}, body = \"hello\", expect = \"2xx\"",
            receiver.url("/tick")
        ),
        "",
    );
    cluster.start("a", &jobs);
    cluster.start("b", &jobs);
    cluster.wait_ready();
    let ok = first_with(&cluster, "ping", "ok");
    cluster.stop_all();

    assert!(output(&ok).starts_with("HTTP 200"), "{ok:?}");
    assert!(output(&ok).contains("all fine"), "{ok:?}");
    assert_eq!(ok.field("exit_code"), None, "{ok:?}");
    let requests = receiver.requests();
    let request = requests
        .iter()
        .find(|r| r.header("cronlease-run-id") == Some(ok.run_id()))
        .unwrap_or_else(|| panic!("no request of run {}: {requests:#?}", ok.run_id()));
    let tick = chrono::DateTime::from_timestamp_millis(ok.tick())
        .expect("a tick within chrono's range")
        .to_rfc3339_opts(SecondsFormat::Secs, true);
    let fence = ok.fence().to_string();
    let user_agent = format!("cronlease/{}", env!("CARGO_PKG_VERSION"));
    let expected = [
        ("cronlease-job", "ping"),
        ("cronlease-tick", tick.as_str()),
        ("cronlease-fence", fence.as_str()),
        ("cronlease-run-id", ok.run_id()),
        ("idempotency-key", ok.run_id()),
        ("user-agent", user_agent.as_str()),
        ("x-token", "abc"),
    ];
    for (name, value) in expected {
        assert_eq!(request.header(name), Some(value), "{name}: {request:#?}");
    }
    assert_eq!(
        (request.method.as_str(), request.path.as_str()),
        ("POST", "/tick")
    );
    assert_eq!(request.body, b"hello");
}

#[test]
fn a_500_is_failed_with_the_body_in_the_output() {
    let receiver = Receiver::start(500, "database is down");
    let mut cluster = Cluster::new(RedisServer::start());
    let jobs = http_job("report", &format!("url = \"{}\"", receiver.url("/")), "");
    cluster.start("a", &jobs);
    cluster.wait_ready();
    let failed = first_with(&cluster, "report", "failed");
    cluster.stop_all();

    let text = output(&failed);
    assert_eq!(
        text.lines().next(),
        Some("HTTP 500 Internal Server Error"),
        "{failed:?}"
    );
    assert!(text.contains("database is down"), "{failed:?}");
    assert_eq!(failed.field("exit_code"), None, "{failed:?}");
    assert!(
        receiver
            .requests()
            .iter()
            .all(|r| r.method == "GET" && r.body.is_empty())
    );
}

/// A Python HTTPS server on a free loopback port answering every GET with
/// 200 and "secure hello", killed when dropped.
struct HttpsServer {
    child: Child,
    port: u16,
}

impl HttpsServer {
    fn start(tls: &TlsFiles) -> HttpsServer {
        let script = "import http.server, ssl, sys\n\
            class H(http.server.BaseHTTPRequestHandler):\n\
            \x20   def do_GET(self):\n\
            \x20       body = b'secure hello'\n\
            \x20       self.send_response(200)\n\
            \x20       self.send_header('Content-Length', str(len(body)))\n\
            \x20       self.end_headers()\n\
            \x20       self.wfile.write(body)\n\
            \x20   def log_message(self, *args):\n\
            \x20       pass\n\
            server = http.server.ThreadingHTTPServer(('127.0.0.1', 0), H)\n\
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)\n\
            context.load_cert_chain(sys.argv[1], sys.argv[2])\n\
            server.socket = context.wrap_socket(server.socket, server_side=True)\n\
            print(server.server_address[1], flush=True)\n\
            server.serve_forever()\n";
        let mut child = Command::new("python3")
            .arg("-c")
            .arg(script)
            .arg(tls.server_cert())
            .arg(tls.server_key())
            .stdout(Stdio::piped())
            .spawn()
            .expect("python3 is needed for the HTTPS server of the HTTP job tests");
        let stdout = child.stdout.take().expect("stdout was piped");
        let mut line = String::new();
        BufReader::new(stdout)
            .read_line(&mut line)
            .expect("the HTTPS server's port line");
        let port = line
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("the HTTPS server printed {line:?}, not its port"));
        HttpsServer { child, port }
    }
}

impl Drop for HttpsServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn toml_path(path: &Path) -> String {
    format!("{:?}", path.display().to_string())
}

#[test]
fn https_trusts_the_ca_file_and_nothing_else() {
    let tls = TlsFiles::generate();
    let server = HttpsServer::start(&tls);
    let url = format!("https://127.0.0.1:{}/", server.port);
    let mut cluster = Cluster::new(RedisServer::start());
    let jobs = format!(
        "{}{}",
        http_job(
            "trusted",
            &format!("url = \"{url}\", ca_file = {}", toml_path(&tls.ca())),
            ""
        ),
        http_job(
            "untrusted",
            &format!("url = \"{url}\", ca_file = {}", toml_path(&tls.other_ca())),
            ""
        ),
    );
    cluster.start("a", &jobs);
    cluster.wait_ready();
    let ok = first_with(&cluster, "trusted", "ok");
    let refused = first_with(&cluster, "untrusted", "failed");
    cluster.stop_all();

    assert!(output(&ok).starts_with("HTTP 200"), "{ok:?}");
    assert!(output(&ok).contains("secure hello"), "{ok:?}");
    assert!(output(&refused).contains("request failed"), "{refused:?}");
}

#[test]
fn a_hung_server_is_left_at_the_timeout() {
    let by_job = Receiver::start(200, "late");
    by_job.hold(Duration::from_secs(5));
    let by_request = Receiver::start(200, "late");
    by_request.hold(Duration::from_secs(5));
    let mut cluster = Cluster::new(RedisServer::start());
    let jobs = format!(
        "{}{}",
        http_job(
            "slow",
            &format!("url = \"{}\"", by_job.url("/")),
            "timeout = \"1s\""
        ),
        http_job(
            "slower",
            &format!("url = \"{}\", timeout = \"1s\"", by_request.url("/")),
            ""
        ),
    );
    cluster.start("a", &jobs);
    cluster.wait_ready();
    let slow = first_with(&cluster, "slow", "timeout");
    let slower = first_with(&cluster, "slower", "timeout");
    cluster.stop_all();
    // Answer the requests still queued at once, so that the receivers end.
    by_job.hold(Duration::ZERO);
    by_request.hold(Duration::ZERO);

    assert!(output(&slow).contains("request aborted"), "{slow:?}");
    assert!(output(&slower).contains("http.timeout"), "{slower:?}");
    let took = |o: &Outcome| {
        let field = |name| {
            o.field(name)
                .and_then(|v| v.parse::<i64>().ok())
                .unwrap_or(0)
        };
        field("finished_ms") - field("started_ms")
    };
    assert!(took(&slow) < 5_000, "{slow:?}");
    assert!(took(&slower) < 5_000, "{slower:?}");
}

/// The replica holding the run of `job` whose request `receiver` got
/// first: a run that is waiting for the answer, not one claimed ahead of
/// its tick and not started yet.
fn holder_of_a_request(cluster: &Cluster, receiver: &Receiver, job: &str) -> String {
    let run_id = wait_until(Duration::from_secs(20), "a request of the job", || {
        receiver
            .requests()
            .first()
            .and_then(|r| r.header("cronlease-run-id").map(str::to_string))
    });
    let raw: String = redis::cmd("HGET")
        .arg(format!("cl:{{{job}}}:running"))
        .arg(&run_id)
        .query(&mut cluster.redis.client())
        .expect("the run waiting for its answer is in flight");
    let entry: serde_json::Value = serde_json::from_str(&raw).expect("a running entry is JSON");
    entry["replica"]
        .as_str()
        .expect("a running entry names its replica")
        .to_string()
}

#[test]
fn a_lost_lease_aborts_the_request() {
    let receiver = Receiver::start(200, "too late");
    receiver.hold(Duration::from_secs(15));
    let mut cluster = Cluster::new(RedisServer::start());
    let jobs = http_job("hung", &format!("url = \"{}\"", receiver.url("/")), "");
    for name in ["a", "b"] {
        cluster.start(name, &jobs);
    }
    cluster.wait_ready();
    let victim = holder_of_a_request(&cluster, &receiver, "hung");
    let index = cluster.index_of(&victim);
    cluster.replicas[index].sigstop();
    // Past the lease (2 s) and the others' sweep of a silent replica.
    first_with(&cluster, "hung", "abandoned");
    cluster.replicas[index].sigcont();
    let lost = first_with(&cluster, "hung", "lost_lease");
    cluster.stop_all();
    receiver.hold(Duration::ZERO);

    assert_eq!(
        (lost.replica(), lost.stale()),
        (victim.as_str(), true),
        "{lost:?}"
    );
    assert!(output(&lost).contains("request aborted"), "{lost:?}");
}

#[test]
fn check_names_the_file_line_job_and_field_of_a_bad_request() {
    let job = "[jobs.draw]\nschedule = \"@daily\"\n";
    let cases: Vec<(&str, &str, Vec<&str>)> = vec![
        (
            "command and http",
            "command = [\"true\"]\nhttp = { url = \"https://example.com/\" }",
            vec![
                "jobs.toml:6:",
                "field `http`",
                "both `command` and `http` are set",
                "exactly one",
            ],
        ),
        (
            "ftp scheme",
            "http = { url = \"ftp://example.com/x\" }",
            vec![
                "jobs.toml:5:",
                "field `http.url`",
                "expected http:// or https://",
            ],
        ),
        (
            "reserved header",
            "http = { url = \"https://example.com/\", headers = { Idempotency-Key = \"x\" } }",
            vec!["jobs.toml:5:", "field `http.headers`", "set by cronlease"],
        ),
        (
            "bad expect",
            "http = { url = \"https://example.com/\", expect = \"9xx\" }",
            vec![
                "jobs.toml:5:",
                "field `http.expect`",
                "expected a status class",
            ],
        ),
        (
            "missing ca_file",
            "http = { url = \"https://example.com/\", ca_file = \"/nonexistent/ca.pem\" }",
            vec![
                "jobs.toml:5:",
                "field `http.ca_file`",
                "cannot read /nonexistent/ca.pem",
                "PEM",
            ],
        ),
        (
            "unknown key",
            "http = { url = \"https://example.com/\", verb = \"GET\" }",
            vec!["jobs.toml:5:", "verb"],
        ),
    ];
    for (case, extra, fragments) in cases {
        let file = ConfigFile::new(&format!("{REDIS_SECTION}{job}{extra}\n"));
        let run = cronlease([
            "check".as_ref(),
            "--config".as_ref(),
            file.path().as_os_str(),
        ]);
        let stderr = run.stderr();
        assert_eq!(run.code(), Some(2), "case {case:?}\n{}", run.describe());
        assert!(
            stderr.contains("job \"draw\"") || stderr.contains("jobs.draw"),
            "case {case:?}\n{}",
            run.describe()
        );
        for fragment in fragments {
            assert!(
                stderr.contains(fragment),
                "case {case:?}: no {fragment:?}\n{}",
                run.describe()
            );
        }
    }
}

#[test]
fn a_redirect_is_followed_only_when_the_job_says_so() {
    let target = Receiver::start(200, "moved here");
    let origin = Receiver::start(200, "");
    origin.redirect(&target.url("/new"));
    let mut cluster = Cluster::new(RedisServer::start());
    let jobs = http_job(
        "follows",
        &format!("url = \"{}\", follow_redirects = true", origin.url("/old")),
        "",
    ) + &http_job("stays", &format!("url = \"{}\"", origin.url("/old")), "");
    cluster.start("a", &jobs);
    cluster.wait_ready();
    let followed = first_with(&cluster, "follows", "ok");
    let kept = first_with(&cluster, "stays", "failed");
    cluster.stop_all();

    assert!(output(&followed).starts_with("HTTP 200"), "{followed:?}");
    assert!(output(&followed).contains("moved here"), "{followed:?}");
    let at_target = target.requests();
    let request = at_target
        .iter()
        .find(|r| r.header("cronlease-run-id") == Some(followed.run_id()))
        .unwrap_or_else(|| panic!("the redirect was not followed: {at_target:#?}"));
    assert_eq!(request.path, "/new");
    assert_eq!(
        output(&kept).lines().next(),
        Some("HTTP 302 Found"),
        "{kept:?}"
    );
    assert!(
        !at_target
            .iter()
            .any(|r| r.header("cronlease-run-id") == Some(kept.run_id())),
        "a job without follow_redirects followed one"
    );
}
