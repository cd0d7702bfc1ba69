//! The dashboard's tokens (`[[dashboard.tokens]]`) against a real replica
//! and its Redis over real HTTP: each role (viewer, operator, an operator
//! limited to some jobs, admin, and the daemon's own token) against every
//! route of the API and every form of the pages, table-driven; actions
//! recorded under the token's name; a SIGHUP that adds, removes or breaks
//! tokens; the viewer's pages without buttons in headless Chromium; and
//! the config's errors.

use std::os::unix::fs::PermissionsExt as _;
use std::time::Duration;

use hmac::{Hmac, KeyInit, Mac};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::Value;
use sha2::Sha256;

use crate::dashboard::{TOKEN, TOKEN_ENV, dashboard_addr, eventually, goto, js};
use crate::support::{Browser, Cluster, ConfigFile, RedisServer, cronlease_with_env, http};

/// A schedule that does not fire while a test runs (midnight, 1 January).
const NEVER: &str = "0 0 1 1 *";

const VIEWER: &str = "viewer-secret-token-0001";
const OPERATOR: &str = "operator-secret-token-0002";
const BILLING: &str = "billing-secret-token-0003";
const ADMIN: &str = "admin-secret-token-0004";
const VIEWER_ENV: &str = "CRONLEASE_TEST_VIEWER_TOKEN";

/// Who a request comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Who {
    Viewer,
    Operator,
    /// An operator whose `jobs = ["billing-*"]`.
    Billing,
    Admin,
    /// `[daemon] dashboard_token_env`: an admin named `dashboard`.
    Daemon,
}

const EVERYONE: [Who; 5] = [
    Who::Viewer,
    Who::Operator,
    Who::Billing,
    Who::Admin,
    Who::Daemon,
];

impl Who {
    fn secret(self) -> &'static str {
        match self {
            Who::Viewer => VIEWER,
            Who::Operator => OPERATOR,
            Who::Billing => BILLING,
            Who::Admin => ADMIN,
            Who::Daemon => TOKEN,
        }
    }

    /// The token's name (its cookie's value).
    fn name(self) -> &'static str {
        match self {
            Who::Viewer => "viewer",
            Who::Operator => "ops",
            Who::Billing => "billing-bot",
            Who::Admin => "root-admin",
            Who::Daemon => "dashboard",
        }
    }

    /// What a bearer action of this token is recorded as, before ` via`.
    fn recorded(self) -> String {
        match self {
            Who::Daemon => "api".to_string(),
            other => format!("token {}", other.name()),
        }
    }
}

/// The jobs: two in the billing scope, one outside it.
fn jobs() -> String {
    format!(
        "[jobs.billing-eu]\nschedule = \"{NEVER}\"\nworkdir = \"/tmp\"\ncommand = [\"true\"]\n\n\
         [jobs.billing-us]\nschedule = \"{NEVER}\"\nworkdir = \"/tmp\"\ncommand = [\"true\"]\n\n\
         [jobs.reports]\nschedule = \"{NEVER}\"\nworkdir = \"/tmp\"\ncommand = [\"true\"]\n"
    )
}

/// Writes `secret` to `path`, readable by its owner only.
fn secret_file(path: &std::path::Path, secret: &str) {
    std::fs::write(path, format!("{secret}\n")).expect("a token file");
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).expect("chmod 600");
}

/// The `[[dashboard.tokens]]` of `who` (files beside the config).
fn entries(cluster: &Cluster, who: &[Who]) -> String {
    let mut text = String::new();
    for w in who {
        let (role, jobs) = match w {
            Who::Viewer => ("viewer", ""),
            Who::Operator => ("operator", ""),
            Who::Billing => ("operator", "jobs = [\"billing-*\"]\n"),
            Who::Admin => ("admin", ""),
            Who::Daemon => continue,
        };
        let secret = match w {
            Who::Viewer => format!("token_env = \"{VIEWER_ENV}\"\n"),
            _ => {
                let file = cluster.path(&format!("{}.token", w.name()));
                secret_file(&file, w.secret());
                format!("token_file = \"{}\"\n", file.display())
            }
        };
        text.push_str(&format!(
            "\n[[dashboard.tokens]]\nname = \"{}\"\nrole = \"{role}\"\n{jobs}{secret}",
            w.name()
        ));
    }
    text
}

fn daemon_section() -> String {
    format!(
        "metrics_listen = \"\"\ndashboard_listen = \"127.0.0.1:0\"\ndashboard_token_env = \"{TOKEN_ENV}\"\n\
         dashboard_read = \"token\"\n"
    )
}

/// One replica `a` with the daemon's token and the four others.
fn start() -> (Cluster, String) {
    let mut cluster = Cluster::new(RedisServer::start());
    cluster.env.push((TOKEN_ENV.into(), TOKEN.into()));
    cluster.env.push((VIEWER_ENV.into(), VIEWER.into()));
    let table = format!(
        "{}{}",
        jobs(),
        entries(
            &cluster,
            &[Who::Viewer, Who::Operator, Who::Billing, Who::Admin]
        )
    );
    cluster.start_with("a", &daemon_section(), &table, None);
    cluster.wait_ready();
    let addr = dashboard_addr(&cluster.replicas[0]);
    (cluster, addr)
}

/// `method path` with a bearer token (or none) and a JSON body.
fn api(addr: &str, method: &str, path: &str, bearer: Option<&str>, body: &str) -> (u16, Value) {
    let auth = bearer.map_or(String::new(), |t| format!("Authorization: Bearer {t}\r\n"));
    let content = if body.is_empty() {
        String::new()
    } else {
        "Content-Type: application/json\r\n".to_string()
    };
    let answer = http::send(
        addr,
        &format!(
            "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n{auth}{content}Content-Length: {}\r\n\r\n",
            body.len()
        ),
        body.as_bytes(),
    );
    let json = serde_json::from_str(&answer.body).unwrap_or(Value::Null);
    (answer.status, json)
}

/// A form POSTed to the pages with `cookies` (and the same origin).
fn form(addr: &str, path: &str, cookies: &str, fields: &str) -> http::Answer {
    http::send(
        addr,
        &format!(
            "POST {path} HTTP/1.1\r\nHost: {addr}\r\nOrigin: http://{addr}\r\nConnection: close\r\n\
             Cookie: {cookies}\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\n\r\n",
            fields.len()
        ),
        fields.as_bytes(),
    )
}

/// Logs in through the form with `secret` as `person`: the cookies, or
/// the refusal's status.
fn login(addr: &str, secret: &str, person: &str) -> Result<String, u16> {
    let body = format!("name={person}&token={secret}&next=%2F");
    let answer = http::post_form(addr, addr, "/login", &body);
    if answer.status != 303 {
        return Err(answer.status);
    }
    Ok(answer
        .headers
        .iter()
        .filter(|(name, _)| name == "set-cookie")
        .filter_map(|(_, value)| value.split(';').next())
        .collect::<Vec<_>>()
        .join("; "))
}

/// The CSRF token of `secret`'s forms, as the pages compute it.
fn csrf(secret: &str) -> String {
    let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(secret.as_bytes()).expect("any key");
    mac.update(b"cronlease dashboard csrf");
    mac.finalize()
        .into_bytes()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Who the newest action on `job` is recorded as.
fn newest_who(addr: &str, job: &str) -> String {
    let (status, body) = api(addr, "GET", &format!("/api/v1/jobs/{job}"), Some(ADMIN), "");
    assert_eq!(status, 200, "{body}");
    body["actions"][0]["who"]
        .as_str()
        .unwrap_or_else(|| panic!("no action on {job}: {body}"))
        .to_string()
}

/// What a role may do to a job: act on it, be refused by its role, or
/// not see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Allowed,
    Forbidden,
    Hidden,
}

/// What `who` gets for a job action on `job`.
fn job_action(who: Who, job: &str) -> Outcome {
    match who {
        Who::Viewer => Outcome::Forbidden,
        Who::Billing if !job.starts_with("billing-") => Outcome::Hidden,
        Who::Operator | Who::Billing | Who::Admin | Who::Daemon => Outcome::Allowed,
    }
}

/// What `who` gets for a replica's drain or undrain.
fn replica_action(who: Who) -> Outcome {
    match who {
        Who::Admin | Who::Daemon => Outcome::Allowed,
        _ => Outcome::Forbidden,
    }
}

/// The API's answer to an action: the status and error code expected.
fn api_expected(outcome: Outcome, allowed: u16) -> (u16, Option<&'static str>) {
    match outcome {
        Outcome::Allowed => (allowed, None),
        Outcome::Forbidden => (403, Some("role_forbidden")),
        Outcome::Hidden => (404, Some("job_not_found")),
    }
}

#[test]
fn every_role_against_every_route_and_every_form() {
    let (cluster, addr) = start();
    let addr = addr.as_str();
    let mut rows = Vec::new();

    // Reads: every route of the API, each token; a job outside the
    // billing token's scope is not found, and absent from its lists.
    for who in EVERYONE {
        let bearer = Some(who.secret());
        for job in ["billing-eu", "reports"] {
            let hidden = job_action(who, job) == Outcome::Hidden;
            for route in ["", "/history", "/explain"] {
                let path = format!("/api/v1/jobs/{job}{route}");
                let (status, body) = api(addr, "GET", &path, bearer, "");
                let expected = if hidden { 404 } else { 200 };
                let row = format!("{who:?} GET {path}: {status} (expected {expected})");
                assert_eq!(status, expected, "{row} {body}");
                rows.push(row);
                if hidden {
                    assert_eq!(body["error"]["code"], "job_not_found", "{body}");
                    let message = body["error"]["message"].as_str().unwrap_or_default();
                    assert!(!message.contains("billing"), "names another job: {body}");
                }
            }
        }
        let (status, body) = api(addr, "GET", "/api/v1/jobs", bearer, "");
        assert_eq!(status, 200, "{who:?}: {body}");
        let names: Vec<&str> = body["jobs"]
            .as_array()
            .expect("the jobs")
            .iter()
            .filter_map(|j| j["name"].as_str())
            .collect();
        let expected: &[&str] = if who == Who::Billing {
            &["billing-eu", "billing-us"]
        } else {
            &["billing-eu", "billing-us", "reports"]
        };
        assert_eq!(names, expected, "{who:?}");
        for path in ["/api/v1/runs", "/api/v1/replicas", "/api/v1/locks"] {
            let (status, body) = api(addr, "GET", path, bearer, "");
            assert_eq!(status, 200, "{who:?} GET {path}: {body}");
        }
    }

    // API actions: pause (then resume), kill (nothing in flight, or the
    // run the trigger before started: 409 or 200 once allowed), trigger,
    // drain and undrain. Each action taken is recorded under the token's
    // name.
    for who in EVERYONE {
        let bearer = Some(who.secret());
        for job in ["billing-eu", "reports"] {
            let outcome = job_action(who, job);
            for (action, body, allowed) in [
                ("pause", r#"{"reason":"roles test"}"#, 200),
                ("resume", "", 200),
                ("kill", "", 409),
                ("trigger", "", 202),
            ] {
                let path = format!("/api/v1/jobs/{job}/{action}");
                let (status, answer) = api(addr, "POST", &path, bearer, body);
                let (expected, code) = api_expected(outcome, allowed);
                let row = format!("{who:?} POST {path}: {status} (expected {expected}) {answer}");
                if action == "kill" && outcome == Outcome::Allowed {
                    assert!([200, 409].contains(&status), "{row}");
                } else {
                    assert_eq!(status, expected, "{row}");
                }
                if let Some(code) = code {
                    assert_eq!(answer["error"]["code"], code, "{row}");
                }
                if outcome == Outcome::Allowed && action != "kill" {
                    let recorded = format!("{} via dashboard on a from 127.0.0.1", who.recorded());
                    assert_eq!(newest_who(addr, job), recorded, "{row}");
                }
                rows.push(row);
            }
        }
        for action in ["drain", "undrain"] {
            let path = format!("/api/v1/replicas/a/{action}");
            let (status, answer) = api(addr, "POST", &path, bearer, "");
            let (expected, code) = api_expected(replica_action(who), 200);
            let row = format!("{who:?} POST {path}: {status} (expected {expected}) {answer}");
            assert_eq!(status, expected, "{row}");
            if let Some(code) = code {
                assert_eq!(answer["error"]["code"], code, "{row}");
            }
            rows.push(row);
        }
    }

    // The pages' forms, logged in with each token (its CSRF token, the
    // same origin): a redirect when allowed, else 403, or 404 for a job
    // the token does not see. And the same forms with a bearer token.
    for who in EVERYONE {
        let cookies = login(addr, who.secret(), "tester")
            .unwrap_or_else(|status| panic!("{who:?} cannot log in: {status}"));
        let csrf = csrf(who.secret());
        for job in ["billing-eu", "reports"] {
            let outcome = job_action(who, job);
            for action in ["pause", "resume"] {
                let path = format!("/jobs/{job}/{action}");
                let answer = form(addr, &path, &cookies, &format!("csrf={csrf}&reason=form"));
                let expected = match outcome {
                    Outcome::Allowed => 303,
                    Outcome::Forbidden => 403,
                    Outcome::Hidden => 404,
                };
                let row = format!(
                    "{who:?} form {path}: {} (expected {expected})",
                    answer.status
                );
                assert_eq!(answer.status, expected, "{row}\n{}", answer.body);
                if outcome == Outcome::Allowed {
                    let recorded = match who {
                        Who::Daemon => "tester via dashboard on a from 127.0.0.1".to_string(),
                        other => format!(
                            "token {} (tester) via dashboard on a from 127.0.0.1",
                            other.name()
                        ),
                    };
                    assert_eq!(newest_who(addr, job), recorded, "{row}");
                }
                rows.push(row);
            }
            for action in ["pause", "resume"] {
                let path = format!("/jobs/{job}/{action}");
                let bearer = http::send(
                    addr,
                    &format!(
                        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\
                         Authorization: Bearer {}\r\nContent-Length: 0\r\n\r\n",
                        who.secret()
                    ),
                    b"",
                );
                let expected = match outcome {
                    Outcome::Allowed => 200,
                    Outcome::Forbidden => 403,
                    Outcome::Hidden => 404,
                };
                let row = format!(
                    "{who:?} script {path}: {} (expected {expected})",
                    bearer.status
                );
                assert_eq!(bearer.status, expected, "{row}\n{}", bearer.body);
                rows.push(row);
            }
        }
        for action in ["drain", "undrain"] {
            let path = format!("/replicas/a/{action}");
            let answer = form(addr, &path, &cookies, &format!("csrf={csrf}"));
            let expected = match replica_action(who) {
                Outcome::Allowed => 303,
                _ => 403,
            };
            let row = format!(
                "{who:?} form {path}: {} (expected {expected})",
                answer.status
            );
            assert_eq!(answer.status, expected, "{row}\n{}", answer.body);
            rows.push(row);
        }
        // The pages a token reads: a job outside its scope is not found.
        let page = http::get(
            addr,
            addr,
            "/jobs/reports",
            &format!("Cookie: {cookies}\r\n"),
        );
        let expected = if who == Who::Billing { 404 } else { 200 };
        assert_eq!(page.status, expected, "{who:?} /jobs/reports");
        let overview = http::get(addr, addr, "/", &format!("Cookie: {cookies}\r\n"));
        assert_eq!(overview.status, 200, "{who:?} /");
        assert_eq!(
            overview.body.contains("/jobs/reports"),
            who != Who::Billing,
            "{who:?}: the overview and the reports job"
        );
    }

    // No action of the viewer's was recorded anywhere.
    for job in ["billing-eu", "reports"] {
        let (_, body) = api(addr, "GET", &format!("/api/v1/jobs/{job}"), Some(ADMIN), "");
        let recorded = body["actions"].to_string();
        assert!(!recorded.contains("viewer"), "{job}: {recorded}");
    }
    let log = cluster.logs();
    for secret in [VIEWER, OPERATOR, BILLING, ADMIN, TOKEN] {
        assert!(!log.contains(secret), "a token's secret is in the log");
    }
    eprintln!("{} checks:\n{}", rows.len(), rows.join("\n"));
}

#[test]
fn a_sighup_adds_and_removes_tokens_and_a_bad_table_keeps_them() {
    let mut cluster = Cluster::new(RedisServer::start());
    cluster.env.push((TOKEN_ENV.into(), TOKEN.into()));
    cluster.env.push((VIEWER_ENV.into(), VIEWER.into()));
    let first = format!("{}{}", jobs(), entries(&cluster, &[Who::Operator]));
    cluster.start_with("a", &daemon_section(), &first, None);
    cluster.wait_ready();
    let addr = dashboard_addr(&cluster.replicas[0]);
    let addr = addr.as_str();
    let pid = Pid::from_raw(cluster.replicas[0].pid() as i32);
    let reloads = |cluster: &Cluster| {
        cluster.replicas[0]
            .log()
            .matches("dashboard tokens reloaded")
            .count()
    };
    let rejections =
        |cluster: &Cluster| cluster.replicas[0].log().matches("reload rejected").count();
    let reload = |cluster: &Cluster, count: &dyn Fn(&Cluster) -> usize| {
        let before = count(cluster);
        kill(pid, Signal::SIGHUP).expect("SIGHUP");
        crate::support::wait_until(Duration::from_secs(20), "the reload", || {
            (count(cluster) > before).then_some(())
        });
    };
    let reads = |secret: &str| api(addr, "GET", "/api/v1/jobs", Some(secret), "").0;
    assert_eq!(reads(OPERATOR), 200);
    assert_eq!(reads(ADMIN), 401, "a token not yet configured");
    let cookies = login(addr, OPERATOR, "tester").expect("the operator logs in");
    let page = |cookies: &str| http::get(addr, addr, "/", &format!("Cookie: {cookies}\r\n")).status;
    assert_eq!(page(&cookies), 200);

    // A token added.
    let both = format!(
        "{}{}",
        jobs(),
        entries(&cluster, &[Who::Operator, Who::Admin])
    );
    cluster.config("a", &daemon_section(), &both);
    reload(&cluster, &reloads);
    assert_eq!(reads(ADMIN), 200, "the added token");
    assert_eq!(reads(OPERATOR), 200);

    // A table that does not validate, and one whose secret cannot be
    // read: refused, the tokens stay.
    let bad_role = both.replace("role = \"admin\"", "role = \"root\"");
    cluster.config("a", &daemon_section(), &bad_role);
    reload(&cluster, &rejections);
    let missing = format!(
        "{both}\n[[dashboard.tokens]]\nname = \"late\"\nrole = \"viewer\"\ntoken_file = \"{}\"\n",
        cluster.path("absent.token").display()
    );
    cluster.config("a", &daemon_section(), &missing);
    reload(&cluster, &rejections);
    let log = cluster.replicas[0].log();
    assert!(log.contains("absent.token"), "the reason names the file");
    assert_eq!(reads(ADMIN), 200, "kept after a bad table");
    assert_eq!(reads(OPERATOR), 200, "kept after a bad table");

    // A token removed: refused at once, its cookie too.
    let admin_only = format!("{}{}", jobs(), entries(&cluster, &[Who::Admin]));
    cluster.config("a", &daemon_section(), &admin_only);
    reload(&cluster, &reloads);
    assert_eq!(reads(OPERATOR), 401, "the removed token");
    assert_eq!(reads(ADMIN), 200);
    let answer = http::get(addr, addr, "/", &format!("Cookie: {cookies}\r\n"));
    assert_eq!(answer.status, 303, "the removed token's cookie: {answer:?}");
    assert!(
        answer
            .header("location")
            .is_some_and(|l| l.starts_with("/login")),
        "{answer:?}"
    );
    let answer = http::get(
        addr,
        addr,
        "/api/v1/jobs",
        &format!("Cookie: {cookies}\r\n"),
    );
    assert_eq!(
        answer.status, 401,
        "the removed token's cookie, API: {answer:?}"
    );
    let form_answer = form(
        addr,
        "/jobs/reports/pause",
        &cookies,
        &format!("csrf={}", csrf(OPERATOR)),
    );
    assert_eq!(form_answer.status, 403, "the removed token's form");
    let log = cluster.replicas[0].log();
    for secret in [OPERATOR, ADMIN, TOKEN] {
        assert!(!log.contains(secret), "a token's secret is in the log");
    }
}

#[test]
fn a_token_a_sighup_adds_is_kept_from_runs_from_then_on() {
    let mut cluster = Cluster::new(RedisServer::start());
    cluster.env.push((TOKEN_ENV.into(), TOKEN.into()));
    cluster.env.push((VIEWER_ENV.into(), VIEWER.into()));
    // A job that inherits every CRONLEASE_TEST_ variable and prints what
    // it holds and a token it learnt some other way.
    let leak = format!(
        "[jobs.leak]\nschedule = \"{NEVER}\"\ninherit_env = [\"CRONLEASE_TEST_*\"]\n\
         shell = 'echo \"env=[${VIEWER_ENV}] known=[{ADMIN}]\"'\n"
    );
    let first = format!("{leak}{}", entries(&cluster, &[Who::Operator]));
    cluster.start_with("a", &daemon_section(), &first, None);
    cluster.wait_ready();
    let output_of_a_run = |cluster: &Cluster, runs: usize| {
        let config = cluster.config_path("a").display().to_string();
        cronlease_with_env(["trigger", "leak", "--config", config.as_str()], &[]).expect_code(0);
        let outcome =
            crate::support::wait_until(Duration::from_secs(20), "the run's outcome", || {
                let outcomes = cluster.outcomes("leak");
                (outcomes.len() == runs).then(|| outcomes[runs - 1].clone())
            });
        outcome
            .field("output")
            .unwrap_or_default()
            .trim()
            .to_owned()
    };
    assert_eq!(
        output_of_a_run(&cluster, 1),
        format!("env=[{VIEWER}] known=[{ADMIN}]"),
        "neither is a token yet"
    );

    let both = format!(
        "{leak}{}",
        entries(&cluster, &[Who::Operator, Who::Viewer, Who::Admin])
    );
    cluster.config("a", &daemon_section(), &both);
    let reloads = |cluster: &Cluster| {
        cluster.replicas[0]
            .log()
            .matches("dashboard tokens reloaded")
            .count()
    };
    let before = reloads(&cluster);
    let pid = Pid::from_raw(cluster.replicas[0].pid() as i32);
    kill(pid, Signal::SIGHUP).expect("SIGHUP");
    crate::support::wait_until(Duration::from_secs(20), "the reload", || {
        (reloads(&cluster) > before).then_some(())
    });
    assert_eq!(
        output_of_a_run(&cluster, 2),
        "env=[] known=[[redacted]]",
        "a token the reload added: its variable is not inherited, its value is redacted"
    );
}

/// Starts replica `name` of `cluster` with the job table `table`, which
/// its start must refuse: the replica's log.
#[track_caller]
fn refused_at_start(cluster: &mut Cluster, name: &str, table: &str) -> String {
    cluster.start_with(
        name,
        "metrics_listen = \"\"\ndashboard_listen = \"127.0.0.1:0\"\n",
        table,
        None,
    );
    let replica = cluster
        .replicas
        .last_mut()
        .expect("the replica just started");
    let status = replica
        .wait_exit(Duration::from_secs(20))
        .expect("the replica stops");
    assert!(!status.success());
    replica.log()
}

#[test]
fn the_viewers_pages_have_no_action_buttons() {
    let (cluster, addr) = start();
    support_browser(&addr, &cluster);
}

/// Logs in as the viewer and then as the operator in Chromium: the
/// viewer's job and replicas pages offer no action, the operator's do.
fn support_browser(addr: &str, _cluster: &Cluster) {
    crate::support::runtime().block_on(async {
        let browser = Browser::start().await;
        let buttons = r#"return document.querySelectorAll(
            '#run-now, #pause, #resume, button.kill, button.drain, button.undrain, form[action$="/trigger"]').length;"#;
        for (who, expected) in [(Who::Viewer, 0usize), (Who::Admin, 1)] {
            goto(&browser, &format!("http://{addr}/login?next=/jobs/reports")).await;
            let name = browser
                .client
                .find(fantoccini::Locator::Id("name"))
                .await
                .expect("#name");
            name.send_keys("tester").await.expect("typing a name");
            let token = browser
                .client
                .find(fantoccini::Locator::Id("token"))
                .await
                .expect("#token");
            token.send_keys(who.secret()).await.expect("typing the token");
            browser
                .client
                .find(fantoccini::Locator::Id("login"))
                .await
                .expect("#login")
                .click()
                .await
                .expect("a click logs in");
            let shown: String = eventually("the job page", async || {
                js(
                    &browser,
                    r#"return document.querySelector('h1')?.textContent === 'reports'
                        ? document.querySelector('section.actions').textContent : null;"#,
                )
                .await
            })
            .await;
            let count: usize = js(&browser, buttons).await;
            if expected == 0 {
                assert_eq!(count, 0, "{who:?}: action buttons on the job page");
                assert!(shown.contains("viewer"), "{who:?}: {shown}");
            } else {
                assert!(count >= expected, "{who:?}: no action button");
            }
            goto(&browser, &format!("http://{addr}/replicas")).await;
            let count: usize = eventually("the replicas page", async || {
                let ready: bool =
                    js(&browser, "return document.querySelector('table.replicas') !== null;").await;
                if ready { Some(js(&browser, buttons).await) } else { None }
            })
            .await;
            assert_eq!(count > 0, expected > 0, "{who:?}: the replicas page's buttons");
            // Log out for the next token.
            browser
                .client
                .execute("document.querySelector('form[action=\"/logout\"]').submit();", Vec::new())
                .await
                .expect("log out");
            eventually("logged out", async || {
                let out: bool = js(
                    &browser,
                    "return document.querySelector('form[action=\"/logout\"]') === null;",
                )
                .await;
                out.then_some(())
            })
            .await;
        }
    });
}

#[test]
fn a_token_table_with_mistakes_is_refused_with_each_place_and_what_is_valid() {
    let jobs = "[jobs.x]\nschedule = \"* * * * *\"\nworkdir = \"/tmp\"\ncommand = [\"true\"]\n";
    let config = ConfigFile::new(&format!(
        "[redis]\nurl = \"redis://127.0.0.1:1/0\"\n\n{jobs}\n\
         [[dashboard.tokens]]\nname = \"deploy-bot\"\nrole = \"root\"\ntoken_env = \"DEPLOY_TOKEN\"\n\n\
         [[dashboard.tokens]]\nname = \"deploy-bot\"\nrole = \"viewer\"\ntoken_env = \"OTHER_TOKEN\"\n\n\
         [[dashboard.tokens]]\nname = \"both\"\nrole = \"operator\"\ntoken_env = \"A_TOKEN\"\ntoken_file = \"/x\"\n\n\
         [[dashboard.tokens]]\nname = \"none\"\nrole = \"viewer\"\n\n\
         [[dashboard.tokens]]\nname = \"scoped-admin\"\nrole = \"admin\"\njobs = [\"billing-*\"]\ntoken_env = \"B_TOKEN\"\n\n\
         [[dashboard.tokens]]\nname = \"same\"\nrole = \"viewer\"\ntoken_env = \"OTHER_TOKEN\"\n\n\
         [[dashboard.tokens]]\nname = \"bad name!\"\nrole = \"viewer\"\ntoken_env = \"C_TOKEN\"\nzz = 1\n"
    ));
    let path = config.path().display().to_string();
    let run = cronlease_with_env(
        ["check", "--config", path.as_str()],
        &[("DEPLOY_TOKEN", "a-secret-that-must-not-show-0001")],
    );
    assert_eq!(run.code(), Some(2), "{}", run.describe());
    let stderr = run.stderr();
    for expected in [
        format!("{path}:11:"),
        "[[dashboard.tokens]] #1 (\"deploy-bot\"), field `role`: unknown role \"root\": expected \"viewer\"".to_string(),
        "[[dashboard.tokens]] #2 (\"deploy-bot\"), field `name`: the name \"deploy-bot\" is also entry #1's".to_string(),
        "[[dashboard.tokens]] #3 (\"both\"), field `token_file`: both token_env and token_file are set".to_string(),
        "[[dashboard.tokens]] #4 (\"none\"), field `token_file`: no secret: expected token_file".to_string(),
        "[[dashboard.tokens]] #5 (\"scoped-admin\"), field `jobs`: an admin acts on the whole cluster".to_string(),
        "[[dashboard.tokens]] #6 (\"same\"), field `token_env`: the same secret as entry #2's".to_string(),
        "[[dashboard.tokens]] #7, field `zz`: unknown field `zz`, expected one of".to_string(),
    ] {
        assert!(stderr.contains(&expected), "missing {expected:?} in\n{stderr}");
    }
    assert!(!run.stdout().contains("a-secret-that-must-not-show"));
    assert!(!stderr.contains("a-secret-that-must-not-show"));

    // A name that is not one, alone (the unknown key hid it above).
    let config = ConfigFile::new(&format!(
        "[redis]\nurl = \"redis://127.0.0.1:1/0\"\n\n{jobs}\n\
         [[dashboard.tokens]]\nname = \"bad name!\"\nrole = \"viewer\"\ntoken_env = \"C_TOKEN\"\njobs = []\n\n\
         [dashboard.other]\nx = 1\n"
    ));
    let path = config.path().display().to_string();
    let run = cronlease_with_env(["check", "--config", path.as_str()], &[]);
    assert_eq!(run.code(), Some(2), "{}", run.describe());
    let stderr = run.stderr();
    for expected in [
        "[[dashboard.tokens]] #1, field `name`: invalid name \"bad name!\": expected 1 to 64 letters",
        "field `jobs`: an empty list",
        "[dashboard], field `other`: unknown field `other`, expected one of `oidc`, `tokens`",
    ] {
        assert!(
            stderr.contains(expected),
            "missing {expected:?} in\n{stderr}"
        );
    }

    // A good table passes `check`, which reads no secret.
    let config = ConfigFile::new(&format!(
        "[redis]\nurl = \"redis://127.0.0.1:1/0\"\n\n{jobs}\n\
         [[dashboard.tokens]]\nname = \"deploy-bot\"\nrole = \"operator\"\njobs = [\"x\", \"billing-*\"]\ntoken_file = \"deploy.token\"\n"
    ));
    let path = config.path().display().to_string();
    let run = cronlease_with_env(["check", "--config", path.as_str()], &[]);
    assert_eq!(run.code(), Some(0), "{}", run.describe());
}

#[test]
fn a_token_file_others_may_read_or_a_shared_secret_stops_the_replica() {
    let mut cluster = Cluster::new(RedisServer::start());
    let loose = cluster.path("loose.token");
    std::fs::create_dir_all(cluster.path("")).expect("the directory");
    std::fs::write(&loose, "a-token-others-may-read-0001\n").expect("a token file");
    std::fs::set_permissions(&loose, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    let table = format!(
        "{}\n[[dashboard.tokens]]\nname = \"loose\"\nrole = \"viewer\"\ntoken_file = \"{}\"\n",
        jobs(),
        loose.display()
    );
    let log = refused_at_start(&mut cluster, "a", &table);
    assert!(
        log.contains("[[dashboard.tokens]] #1 (\"loose\")") && log.contains("mode 644"),
        "{log}"
    );
    assert!(!log.contains("a-token-others-may-read"), "{log}");

    // Two entries whose files hold one secret.
    let (one, two) = (cluster.path("one.token"), cluster.path("two.token"));
    secret_file(&one, "one-secret-in-two-files-0001");
    secret_file(&two, "one-secret-in-two-files-0001");
    let table = format!(
        "{}\n[[dashboard.tokens]]\nname = \"one\"\nrole = \"viewer\"\ntoken_file = \"{}\"\n\
         \n[[dashboard.tokens]]\nname = \"two\"\nrole = \"admin\"\ntoken_file = \"{}\"\n",
        jobs(),
        one.display(),
        two.display()
    );
    let log = refused_at_start(&mut cluster, "b", &table);
    assert!(
        log.contains("[[dashboard.tokens]] #2 (\"two\")")
            && log.contains("the same secret as the token \"one\""),
        "{log}"
    );
    assert!(!log.contains("one-secret-in-two-files"), "{log}");
}
