//! The dashboard's JSON API (`/api/v1/`) against two real replicas of one
//! private Redis, each serving its dashboard on a free port: every route
//! the OpenAPI document lists is called here (and the document is checked
//! by `openapi-spec-validator`); the actions (run now once across the
//! replicas, pause with until and reason, resume, kill, drain and
//! undrain) change what the pages and Redis show; each kind of error has
//! its code and status.

use std::collections::BTreeSet;
use std::process::Command;
use std::time::Duration;

use serde_json::{Value, json};

use crate::dashboard::{TOKEN, TOKEN_ENV, dashboard_addr};
use crate::support::{Cluster, RedisServer, http, wait_until};

/// How long anything awaited may take on a loaded machine.
const PATIENCE: Duration = Duration::from_secs(60);

/// A schedule that does not fire while a test runs (midnight, 1 January).
const NEVER: &str = "0 0 1 1 *";

/// The job table: a report run by hand with a `region` parameter, a
/// ticker every second (a history to page through) and a long job run by
/// hand (a run to kill).
fn jobs() -> String {
    format!(
        "[jobs.report]\nschedule = \"{NEVER}\"\nworkdir = \"/tmp\"\n\
         params = {{ region = {{ default = \"eu\", allowed = [\"eu\", \"us\"] }} }}\n\
         shell = 'echo \"report for $CRONLEASE_PARAM_REGION\"'\n\n\
         [jobs.ticker]\nschedule = \"* * * * * *\"\nworkdir = \"/tmp\"\ncommand = [\"true\"]\n\n\
         [jobs.long]\nschedule = \"{NEVER}\"\nworkdir = \"/tmp\"\nshell = 'sleep 60'\n"
    )
}

/// An answer: its status and its body as JSON (`null` when not JSON).
#[derive(Debug)]
struct Answer {
    status: u16,
    body: Value,
}

impl Answer {
    /// The error code of an error answer.
    fn code(&self) -> &str {
        self.body["error"]["code"]
            .as_str()
            .unwrap_or_else(|| panic!("not an error body: {} {}", self.status, self.body))
    }

    /// Asserts an error answer with `status` and `code` (and a message).
    #[track_caller]
    fn error(&self, status: u16, code: &str) {
        assert_eq!((self.status, self.code()), (status, code), "{}", self.body);
        assert!(
            self.body["error"]["message"]
                .as_str()
                .is_some_and(|m| !m.is_empty()),
            "no message: {}",
            self.body
        );
    }
}

/// Who a request says it is.
#[derive(Debug, Clone, Copy)]
enum Auth {
    None,
    Token,
    Wrong,
}

/// A client of one replica's API that notes every route it calls (by the
/// document's path template).
struct Api {
    addr: String,
    agent: ureq::Agent,
    called: BTreeSet<(String, String)>,
    /// Every answer: `{method, path, status, body}`, the path as the
    /// document's template.
    answers: Vec<Value>,
}

impl Api {
    fn new(addr: String) -> Api {
        let agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .proxy(None)
            .timeout_global(Some(Duration::from_secs(20)))
            .build()
            .into();
        Api {
            addr,
            agent,
            called: BTreeSet::new(),
            answers: Vec::new(),
        }
    }

    /// `template` with each `{name}` of `args` replaced, then `query`.
    fn url(&mut self, method: &str, template: &str, args: &[(&str, &str)], query: &str) -> String {
        self.called
            .insert((method.to_string(), format!("/api/v1{template}")));
        let mut path = template.to_string();
        for (name, value) in args {
            path = path.replace(&format!("{{{name}}}"), value);
        }
        format!("http://{}/api/v1{path}{query}", self.addr)
    }

    fn get(&mut self, template: &str, args: &[(&str, &str)], query: &str, auth: Auth) -> Answer {
        let url = self.url("GET", template, args, query);
        let request = with_auth(self.agent.get(&url), auth);
        self.noted("GET", template, answer(&url, request.call()))
    }

    /// `answer` of `method template`, noted for [`answers_match_the_document`].
    fn noted(&mut self, method: &str, template: &str, answer: Answer) -> Answer {
        self.answers.push(serde_json::json!({
            "method": method,
            "path": format!("/api/v1{template}"),
            "status": answer.status,
            "body": answer.body,
        }));
        answer
    }

    /// POSTs `body` (raw, with `content_type` when given).
    fn post_raw(
        &mut self,
        template: &str,
        args: &[(&str, &str)],
        body: &str,
        content_type: Option<&str>,
        auth: Auth,
    ) -> Answer {
        let url = self.url("POST", template, args, "");
        let mut request = with_auth(self.agent.post(&url), auth);
        if let Some(content_type) = content_type {
            request = request.header("Content-Type", content_type);
        }
        self.noted("POST", template, answer(&url, request.send(body)))
    }

    fn post(&mut self, template: &str, args: &[(&str, &str)], body: &Value, auth: Auth) -> Answer {
        self.post_raw(
            template,
            args,
            &body.to_string(),
            Some("application/json"),
            auth,
        )
    }
}

fn with_auth<B>(request: ureq::RequestBuilder<B>, auth: Auth) -> ureq::RequestBuilder<B> {
    match auth {
        Auth::None => request,
        Auth::Token => request.header("Authorization", format!("Bearer {TOKEN}")),
        Auth::Wrong => request.header("Authorization", "Bearer not-the-token-but-long-enough"),
    }
}

fn answer(url: &str, response: Result<ureq::http::Response<ureq::Body>, ureq::Error>) -> Answer {
    let mut response = response.unwrap_or_else(|e| panic!("{url}: {e}"));
    let status = response.status().as_u16();
    let text = response.body_mut().read_to_string().unwrap_or_default();
    let body = serde_json::from_str(&text).unwrap_or(Value::Null);
    Answer { status, body }
}

/// The (method, path) of every operation `doc` lists.
fn documented(doc: &Value) -> BTreeSet<(String, String)> {
    let paths = doc["paths"].as_object().expect("the document's paths");
    let mut routes = BTreeSet::new();
    for (path, item) in paths {
        for method in item.as_object().expect("a path item").keys() {
            routes.insert((method.to_uppercase(), path.clone()));
        }
    }
    routes
}

/// The outcomes of `job` whose trigger is `manual`.
fn manual_runs(cluster: &Cluster, job: &str) -> Vec<crate::support::Outcome> {
    cluster
        .outcomes(job)
        .into_iter()
        .filter(|o| o.field("trigger") == Some("manual"))
        .collect()
}

#[test]
fn every_documented_route_reads_and_acts_as_the_pages_do() {
    let mut cluster = Cluster::new(RedisServer::start());
    cluster.env.push((TOKEN_ENV.into(), TOKEN.into()));
    let daemon = format!(
        "metrics_listen = \"\"\ndashboard_listen = \"127.0.0.1:0\"\ndashboard_token_env = \"{TOKEN_ENV}\"\n\
         dashboard_read = \"token\"\n"
    );
    for name in ["a", "b"] {
        cluster.start_with(name, &daemon, &jobs(), None);
    }
    cluster.wait_ready();
    let mut api = Api::new(dashboard_addr(&cluster.replicas[0]));
    let mut other = Api::new(dashboard_addr(&cluster.replicas[1]));

    // The document: served to anyone, OpenAPI 3.1, valid.
    let doc = api.get("/openapi.json", &[], "", Auth::None);
    assert_eq!(doc.status, 200, "{}", doc.body);
    assert_eq!(doc.body["openapi"], "3.1.0");
    let file = cluster.path("openapi.json");
    std::fs::write(&file, doc.body.to_string()).unwrap();
    let validated = Command::new("openapi-spec-validator")
        .arg(&file)
        .output()
        .expect("openapi-spec-validator (scripts/install-deps installs it)");
    assert!(
        validated.status.success(),
        "the document is not valid OpenAPI:\n{}{}",
        String::from_utf8_lossy(&validated.stdout),
        String::from_utf8_lossy(&validated.stderr)
    );

    // Reads need the token here (dashboard_read = "token").
    api.get("/jobs", &[], "", Auth::None)
        .error(401, "token_missing");
    api.get("/jobs", &[], "", Auth::Wrong)
        .error(401, "token_invalid");
    let jobs = api.get("/jobs", &[], "", Auth::Token);
    assert_eq!(jobs.status, 200, "{}", jobs.body);
    let names: BTreeSet<&str> = jobs.body["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, BTreeSet::from(["long", "report", "ticker"]));
    assert_eq!(jobs.body["total"], 3);
    let filtered = api.get("/jobs", &[], "?q=REP&state=active", Auth::Token);
    assert_eq!(
        filtered.body["jobs"].as_array().unwrap().len(),
        1,
        "{}",
        filtered.body
    );
    // A page at a time, by name.
    let mut paged = Vec::new();
    let mut after = String::new();
    loop {
        let query = format!("?limit=2{after}");
        let page = api.get("/jobs", &[], &query, Auth::Token);
        assert_eq!(page.status, 200, "{}", page.body);
        paged.extend(
            page.body["jobs"]
                .as_array()
                .unwrap()
                .iter()
                .map(|j| j["name"].as_str().unwrap().to_string()),
        );
        match page.body["next_after"].as_str() {
            Some(next) => after = format!("&after={next}"),
            None => break,
        }
    }
    assert_eq!(paged, ["long", "report", "ticker"]);
    api.get("/jobs", &[], "?limit=0", Auth::Token)
        .error(400, "invalid_query");
    api.get("/jobs", &[], "?state=sleepy", Auth::Token)
        .error(400, "invalid_query");
    api.get("/jobs", &[], "?sate=paused", Auth::Token)
        .error(400, "invalid_query");

    // A browser logged in to the pages reads with its login cookie, and
    // takes no action with it alone (the pages' forms carry a CSRF token).
    let login = http::post_form(
        &api.addr,
        &api.addr,
        "/login",
        &format!("token={TOKEN}&name=reader&next=/"),
    );
    assert_eq!(login.status, 303, "{login:?}");
    let cookies: Vec<&str> = login
        .headers
        .iter()
        .filter(|(name, _)| name == "set-cookie")
        .filter_map(|(_, value)| value.split(';').next())
        .collect();
    let cookie = format!("Cookie: {}\r\n", cookies.join("; "));
    let read = http::get(&api.addr, &api.addr, "/api/v1/jobs", &cookie);
    assert_eq!(read.status, 200, "{}", read.body);
    let acted = http::send(
        &api.addr,
        &format!(
            "POST /api/v1/jobs/report/trigger HTTP/1.1\r\nHost: {0}\r\nConnection: close\r\n{cookie}Content-Length: 0\r\n\r\n",
            api.addr
        ),
        b"",
    );
    assert_eq!(acted.status, 401, "{}", acted.body);
    assert!(acted.body.contains("token_missing"), "{}", acted.body);

    // A job: its state, next ticks and settings.
    let report = api.get("/jobs/{name}", &[("name", "report")], "", Auth::Token);
    assert_eq!(report.status, 200, "{}", report.body);
    assert_eq!(report.body["job"]["name"], "report");
    assert_eq!(report.body["job"]["paused"], false);
    assert_eq!(
        report.body["settings"]["params"]["region"],
        json!({"default": "eu", "allowed": ["eu", "us"]})
    );
    assert!(
        report.body["next_ticks"][0]["at"]
            .as_str()
            .is_some_and(|t| t.contains("-01-01T00:00:00")),
        "{}",
        report.body
    );
    api.get("/jobs/{name}", &[("name", "nope")], "", Auth::Token)
        .error(404, "job_not_found");

    // Run now with a parameter: one run across both replicas, recorded as
    // the pages' bearer actions are.
    let trigger = "/jobs/{name}/trigger";
    let report_job = [("name", "report")];
    let body = json!({"params": {"region": "us"}});
    api.post(trigger, &report_job, &body, Auth::None)
        .error(401, "token_missing");
    api.post(trigger, &report_job, &body, Auth::Wrong)
        .error(401, "token_invalid");
    api.post(
        trigger,
        &report_job,
        &json!({"params": {"region": "mars"}}),
        Auth::Token,
    )
    .error(400, "invalid_params");
    api.post(trigger, &report_job, &json!({"parms": {}}), Auth::Token)
        .error(400, "invalid_body");
    api.post_raw(
        trigger,
        &report_job,
        "region=us",
        Some("application/x-www-form-urlencoded"),
        Auth::Token,
    )
    .error(415, "unsupported_media_type");
    let huge = json!({"params": {"region": "x".repeat(20_000)}});
    api.post(trigger, &report_job, &huge, Auth::Token)
        .error(413, "payload_too_large");
    api.post(trigger, &[("name", "nope")], &json!({}), Auth::Token)
        .error(404, "job_not_found");
    assert!(
        manual_runs(&cluster, "report").is_empty(),
        "a refused request ran the job"
    );
    let queued = api.post(trigger, &report_job, &body, Auth::Token);
    assert_eq!(queued.status, 202, "{}", queued.body);
    let run_id = queued.body["run_id"].as_str().unwrap().to_string();
    let runs = wait_until(PATIENCE, "the manual run's outcome", || {
        let runs = manual_runs(&cluster, "report");
        (!runs.is_empty()).then_some(runs)
    });
    assert_eq!(runs[0].run_id(), run_id);
    assert_eq!(runs[0].status(), "ok", "{runs:?}");
    assert_eq!(runs[0].field("param.region"), Some("us"), "{runs:?}");
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(
        manual_runs(&cluster, "report").len(),
        1,
        "run more than once"
    );
    let report = api.get("/jobs/{name}", &report_job, "", Auth::Token);
    let action = &report.body["actions"][0];
    assert_eq!(action["action"], "trigger", "{}", report.body);
    assert_eq!(action["detail"], run_id.as_str());
    assert_eq!(action["who"], "api via dashboard on a from 127.0.0.1");

    // Pause with an end and a reason; a paused job's run now is a 409.
    let pause = "/jobs/{name}/pause";
    api.post(
        pause,
        &report_job,
        &json!({"until": "yesterday"}),
        Auth::Token,
    )
    .error(400, "invalid_pause");
    let paused = api.post(
        pause,
        &report_job,
        &json!({"until": "1h", "reason": "quarter close"}),
        Auth::Token,
    );
    assert_eq!(paused.status, 200, "{}", paused.body);
    let (at_ms, until_ms) = (
        paused.body["at_ms"].as_i64().unwrap(),
        paused.body["until_ms"].as_i64().unwrap(),
    );
    // An hour from Redis time when it was read, just before the pause.
    assert!(
        (until_ms - at_ms - 3_600_000).abs() < 5_000,
        "{}",
        paused.body
    );
    // Read on the other replica: the same state.
    let seen = other.get("/jobs/{name}", &report_job, "", Auth::Token);
    assert_eq!(seen.body["job"]["paused"], true, "{}", seen.body);
    assert_eq!(seen.body["job"]["paused_reason"], "quarter close");
    assert_eq!(seen.body["job"]["paused_until_ms"], until_ms);
    api.post(trigger, &report_job, &json!({}), Auth::Token)
        .error(409, "job_paused");
    let resumed = api.post_raw("/jobs/{name}/resume", &report_job, "", None, Auth::Token);
    assert_eq!(resumed.status, 200, "{}", resumed.body);
    let seen = api.get("/jobs/{name}", &report_job, "", Auth::Token);
    assert_eq!(seen.body["job"]["paused"], false, "{}", seen.body);

    // Kill a run in flight, seen in /runs; a second kill finds none.
    let long_job = [("name", "long")];
    let queued = api.post_raw(trigger, &long_job, "", None, Auth::Token);
    assert_eq!(queued.status, 202, "{}", queued.body);
    let run_id = queued.body["run_id"].as_str().unwrap().to_string();
    wait_until(PATIENCE, "the long run in /runs", || {
        let runs = api.get("/runs", &[], "", Auth::Token);
        runs.body["runs"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["run_id"] == run_id.as_str() && r["job"] == "long")
            .then_some(())
    });
    let killed = api.post(
        "/jobs/{name}/kill",
        &long_job,
        &json!({"run_id": run_id}),
        Auth::Token,
    );
    assert_eq!(killed.status, 200, "{}", killed.body);
    assert_eq!(killed.body["run_ids"], json!([run_id]));
    let outcome = wait_until(PATIENCE, "the killed run's outcome", || {
        manual_runs(&cluster, "long").into_iter().next()
    });
    assert_eq!(outcome.status(), "killed", "{outcome:?}");
    assert_eq!(
        outcome.field("killed_by"),
        Some("api via dashboard on a from 127.0.0.1"),
        "{outcome:?}"
    );
    api.post("/jobs/{name}/kill", &long_job, &json!({}), Auth::Token)
        .error(409, "not_in_flight");

    // The ticker's history, page by page.
    let ticker = [("name", "ticker")];
    let history = "/jobs/{name}/history";
    wait_until(PATIENCE, "five outcomes of the ticker", || {
        (cluster.outcomes("ticker").len() >= 5).then_some(())
    });
    let first = api.get(history, &ticker, "?limit=2", Auth::Token);
    assert_eq!(first.status, 200, "{}", first.body);
    let first_ids: Vec<&str> = first.body["outcomes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["id"].as_str().unwrap())
        .collect();
    assert_eq!(first_ids.len(), 2, "{}", first.body);
    let before = first.body["next_before"].as_str().unwrap();
    assert_eq!(before, first_ids[1]);
    let second = api.get(
        history,
        &ticker,
        &format!("?limit=2&before={before}"),
        Auth::Token,
    );
    let second_ticks: Vec<i64> = second.body["outcomes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["tick_ms"].as_i64().unwrap())
        .collect();
    assert_eq!(second_ticks.len(), 2, "{}", second.body);
    let first_oldest = first.body["outcomes"][1]["tick_ms"].as_i64().unwrap();
    assert!(
        second_ticks.iter().all(|t| *t < first_oldest),
        "{}",
        second.body
    );
    api.get(history, &ticker, "?limit=0", Auth::Token)
        .error(400, "invalid_query");
    api.get(history, &ticker, "?limit=501", Auth::Token)
        .error(400, "invalid_query");
    api.get(history, &ticker, "?before=yesterday", Auth::Token)
        .error(400, "invalid_query");
    api.get(history, &[("name", "nope")], "", Auth::Token)
        .error(404, "job_not_found");

    // A tick explained as `cronlease explain --json` does.
    let explain = "/jobs/{name}/explain";
    let explained = api.get(explain, &ticker, "", Auth::Token);
    assert_eq!(explained.status, 200, "{}", explained.body);
    assert_eq!(explained.body["job"], "ticker");
    assert!(explained.body["verdict"].is_string(), "{}", explained.body);
    api.get(explain, &ticker, "?tick=noon", Auth::Token)
        .error(400, "invalid_query");

    // Replicas: drain b, then undrain it.
    let replicas = api.get("/replicas", &[], "", Auth::Token);
    let ids: BTreeSet<&str> = replicas.body["replicas"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, BTreeSet::from(["a", "b"]), "{}", replicas.body);
    let b = [("id", "b")];
    let drained = api.post_raw(
        "/replicas/{id}/drain",
        &b,
        "{}",
        Some("application/json"),
        Auth::Token,
    );
    assert_eq!(drained.status, 200, "{}", drained.body);
    assert_eq!(drained.body["changed"], true);
    wait_until(PATIENCE, "b drained in /replicas", || {
        let replicas = other.get("/replicas", &[], "", Auth::Token);
        replicas.body["replicas"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| {
                r["id"] == "b"
                    && r["drained_by"]["by"]
                        .as_str()
                        .is_some_and(|w| w.starts_with("api via dashboard on a"))
            })
            .then_some(())
    });
    let undrained = api.post_raw("/replicas/{id}/undrain", &b, "", None, Auth::Token);
    assert_eq!(undrained.status, 200, "{}", undrained.body);
    api.post_raw(
        "/replicas/{id}/drain",
        &[("id", "nope")],
        "",
        None,
        Auth::Token,
    )
    .error(404, "replica_not_found");

    // Locks: none held.
    let locks = api.get("/locks", &[], "", Auth::Token);
    assert_eq!(
        (locks.status, &locks.body["locks"]),
        (200, &json!([])),
        "{}",
        locks.body
    );

    // Outside the routes.
    let url = format!("http://{}/api/v1/cron", api.addr);
    answer(&url, api.agent.get(&url).call()).error(404, "route_not_found");
    let url = format!("http://{}/api/v1/jobs/report/trigger", api.addr);
    answer(&url, api.agent.get(&url).call()).error(405, "method_not_allowed");

    // Every route the document lists was called above.
    let documented = documented(&doc.body);
    let called: BTreeSet<(String, String)> = api.called.union(&other.called).cloned().collect();
    let missed: Vec<_> = documented.difference(&called).collect();
    assert!(
        missed.is_empty(),
        "documented routes no test calls: {missed:?}"
    );
    let undocumented: Vec<_> = called.difference(&documented).collect();
    assert!(
        undocumented.is_empty(),
        "routes called that the document lacks: {undocumented:?}"
    );

    // Redis gone: 503 (once the shared snapshot is older than its 2 s).
    cluster.redis.stop();
    std::thread::sleep(Duration::from_millis(2_500));
    api.get("/jobs", &[], "", Auth::Token)
        .error(503, "redis_unavailable");

    let answers: Vec<Value> = api.answers.into_iter().chain(other.answers).collect();
    answers_match_the_document(&cluster, &doc.body, &answers);
}

/// Every answer's body matches the schema the document gives for its
/// route and status, and names no property the schema leaves out
/// (tests/it/support/openapi_answers.py, with the validator
/// `openapi-spec-validator` brings).
#[track_caller]
fn answers_match_the_document(cluster: &Cluster, doc: &Value, answers: &[Value]) {
    let doc_file = cluster.path("openapi-answers-doc.json");
    let answers_file = cluster.path("openapi-answers.json");
    std::fs::write(&doc_file, doc.to_string()).expect("write the document");
    std::fs::write(&answers_file, Value::from(answers.to_vec()).to_string())
        .expect("write the answers");
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../tests/it/support/openapi_answers.py"
    );
    let checked = Command::new("python3")
        .arg(script)
        .arg(&doc_file)
        .arg(&answers_file)
        .output()
        .expect("python3 (scripts/install-deps installs it with openapi-spec-validator)");
    let printed = format!(
        "{}{}",
        String::from_utf8_lossy(&checked.stdout),
        String::from_utf8_lossy(&checked.stderr)
    );
    assert!(
        checked.status.success(),
        "answers that do not match the document:\n{printed}"
    );
    eprintln!("{printed}");
}

#[test]
fn without_a_token_reads_are_open_and_actions_off() {
    let mut cluster = Cluster::new(RedisServer::start());
    let daemon = "metrics_listen = \"\"\ndashboard_listen = \"127.0.0.1:0\"\n";
    cluster.start_with("a", daemon, &jobs(), None);
    cluster.wait_ready();
    let mut api = Api::new(dashboard_addr(&cluster.replicas[0]));
    let jobs = api.get("/jobs", &[], "", Auth::None);
    assert_eq!(
        (jobs.status, &jobs.body["total"]),
        (200, &json!(3)),
        "{}",
        jobs.body
    );
    api.post(
        "/jobs/{name}/trigger",
        &[("name", "report")],
        &json!({}),
        Auth::None,
    )
    .error(403, "actions_disabled");
    api.post(
        "/jobs/{name}/pause",
        &[("name", "report")],
        &json!({}),
        Auth::Token,
    )
    .error(403, "actions_disabled");
    std::thread::sleep(Duration::from_secs(2));
    assert!(manual_runs(&cluster, "report").is_empty());
}
