//! The dashboard in a real browser: three replicas of one private Redis,
//! each serving its dashboard on a free port, and a headless Chromium
//! (`support::Browser`) reading and clicking them as an operator would.
//!
//! Two stories, each on a cluster of its own: what the pages show (jobs and
//! their next ticks, outcomes arriving without a reload, a job's output,
//! runs on every replica's lane of the timeline and a takeover when one
//! replica is killed), and who may act (run now after logging in runs the
//! job exactly once; no session, a forged or cross-site request, a wrong
//! bearer token are refused with 403 and change nothing).
//!
//! Screenshots of the overview and the timeline are written to
//! `target/dashboard-screenshots/`, and to `docs/src/images/` (the user
//! guide's pictures) when `CRONLEASE_UPDATE_SCREENSHOTS=1`.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use fantoccini::Locator;
use serde::Deserialize;
use serde_json::Value;

use crate::support::{self, Browser, Cluster, RedisServer, Replica, http, read_outcomes};

/// The operator token every replica reads from [`TOKEN_ENV`].
pub(crate) const TOKEN: &str = "dashboard-test-token-4815162342";
pub(crate) const TOKEN_ENV: &str = "CRONLEASE_TEST_DASHBOARD_TOKEN";

/// How long anything awaited may take on a loaded machine. The waits end as
/// soon as what they wait for is seen; nothing is timed.
const PATIENCE: Duration = Duration::from_secs(60);

/// The job table: a draw every second that prints a few lines, a warm-up
/// every two seconds that fails one time in three (red cells in its
/// strip), a nightly backup in another time zone and a yearly report that
/// never fires during a test (the one the operator runs by hand). Each
/// replica's config is in a directory of its own, which is a job's default
/// `workdir`: `/tmp` keeps the definitions equal (no drift shown).
const JOBS: &str = r#"
[jobs.lottery-draw]
schedule = "* * * * * *"
workdir = "/tmp"
shell = '''echo "draw for tick $CRONLEASE_TICK_MS on $CRONLEASE_REPLICA"; echo "winners: 4 8 15 16 23 42"; echo "jackpot: rolls over"'''

[jobs.cache-warmup]
schedule = "*/2 * * * * *"
workdir = "/tmp"
shell = '''echo "warming 3 caches"; [ $(( $(date +%s) % 3 )) -ne 0 ]'''

[jobs.nightly-backup]
schedule = "0 30 2 * * *"
timezone = "Europe/Berlin"
workdir = "/tmp"
command = ["true"]

[jobs.yearly-report]
schedule = "0 0 3 1 1 *"
timezone = "UTC"
workdir = "/tmp"
shell = '''echo "annual report requested"; echo "rows: 1234"'''
"#;

/// Three replicas, `a`, `b` and `c`, each with its dashboard on a free
/// port and the operator token.
struct Dashboards {
    cluster: Cluster,
    /// `127.0.0.1:PORT` of each replica's dashboard, in replica order.
    addrs: Vec<String>,
}

impl Dashboards {
    /// With `read` (`"token"` or `"public"`) as `[daemon] dashboard_read`.
    fn start(read: &str) -> Dashboards {
        let mut cluster = Cluster::new(RedisServer::start());
        cluster.env.push((TOKEN_ENV.into(), TOKEN.into()));
        let daemon = format!(
            "metrics_listen = \"\"\ndashboard_listen = \"127.0.0.1:0\"\ndashboard_token_env = \"{TOKEN_ENV}\"\n\
             dashboard_read = \"{read}\"\n"
        );
        for name in ["a", "b", "c"] {
            cluster.start_with(name, &daemon, JOBS, None);
        }
        cluster.wait_ready();
        let addrs = cluster.replicas.iter().map(dashboard_addr).collect();
        Dashboards { cluster, addrs }
    }

    /// `http://ADDR` of replica `index`'s dashboard, then `path`.
    fn url(&self, index: usize, path: &str) -> String {
        format!("http://{}{path}", self.addrs[index])
    }

    /// The outcomes of `job` whose trigger is `manual`.
    fn manual_runs(&self, job: &str) -> Vec<support::Outcome> {
        read_outcomes(&mut self.cluster.redis.client(), "cl", job)
            .into_iter()
            .filter(|o| o.field("trigger") == Some("manual"))
            .collect()
    }
}

/// The address a replica's log says it serves its dashboard on.
pub(crate) fn dashboard_addr(replica: &Replica) -> String {
    replica.logged_address("dashboard on http://", PATIENCE)
}

/// Polls `f` every 200 ms until it returns `Some`, and returns that value.
///
/// # Panics
///
/// After [`PATIENCE`], naming `what` was awaited.
pub(crate) async fn eventually<T>(what: &str, mut f: impl AsyncFnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + PATIENCE;
    loop {
        if let Some(value) = f().await {
            return value;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {PATIENCE:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Runs `script` in the page and returns what it returns, as `T`.
pub(crate) async fn js<T: serde::de::DeserializeOwned>(browser: &Browser, script: &str) -> T {
    let value = browser
        .client
        .execute(script, Vec::new())
        .await
        .unwrap_or_else(|e| panic!("the page cannot run {script:?}: {e}"));
    serde_json::from_value(value.clone())
        .unwrap_or_else(|e| panic!("unexpected answer to {script:?}: {value} ({e})"))
}

/// The status of the page a refused form answered with, and its error
/// paragraph, once both are there.
pub(crate) async fn refusal(browser: &Browser) -> (u16, String) {
    eventually("the refusal", async || {
        js(
            browser,
            r#"const nav = performance.getEntriesByType('navigation')[0];
               const error = document.querySelector('p.error');
               return nav && error ? [nav.responseStatus, error.textContent] : null;"#,
        )
        .await
    })
    .await
}

pub(crate) async fn goto(browser: &Browser, url: &str) {
    browser
        .client
        .goto(url)
        .await
        .unwrap_or_else(|e| panic!("cannot open {url}: {e}"));
}

/// One row of the overview's job table, as the page shows it.
#[derive(Debug, Deserialize)]
struct JobRow {
    job: String,
    /// The next tick's `<time datetime>` (RFC 3339, UTC).
    next: Option<String>,
    countdown: Option<String>,
    /// Outcome cells in the strip, and the newest one's title (its tick).
    cells: usize,
    newest: Option<String>,
}

const JOB_ROWS: &str = r#"
return [...document.querySelectorAll('table.jobs tr[data-job]')].map((tr) => ({
  job: tr.dataset.job,
  next: tr.querySelector('td:nth-of-type(2) time')?.getAttribute('datetime') ?? null,
  countdown: tr.querySelector('td:nth-of-type(2) .countdown')?.textContent ?? null,
  cells: tr.querySelectorAll('.strip .cell').length,
  newest: tr.querySelector('.strip .cell:last-child')?.title ?? null,
}));
"#;

/// Bars on the timeline, per lane: (replica, bars).
const TIMELINE_BARS: &str = r#"
return [...document.querySelectorAll('svg.timeline g.lane')].map((g) =>
  [g.dataset.replica, g.querySelectorAll('rect.bar[data-job]').length]);
"#;

/// Writes the window to `target/dashboard-screenshots/NAME.png`, and to
/// `docs/src/images/dashboard-NAME.png` when `CRONLEASE_UPDATE_SCREENSHOTS=1`.
async fn screenshot(browser: &Browser, name: &str) {
    let root = support::repository();
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target"));
    browser
        .screenshot(
            &target
                .join("dashboard-screenshots")
                .join(format!("{name}.png")),
        )
        .await;
    if updating_screenshots() {
        browser
            .screenshot(
                &root
                    .join("docs/src/images")
                    .join(format!("dashboard-{name}.png")),
            )
            .await;
    }
}

/// Whether `CRONLEASE_UPDATE_SCREENSHOTS=1`: the screenshots are also the
/// user guide's pictures.
fn updating_screenshots() -> bool {
    std::env::var("CRONLEASE_UPDATE_SCREENSHOTS").is_ok_and(|v| v == "1")
}

/// The first instant after now that is 03:00:00 UTC on January 1, as the
/// page writes it.
fn next_new_year_3am() -> String {
    use chrono::{Datelike, TimeZone, Utc};
    let now = Utc::now();
    let this_year = Utc
        .with_ymd_and_hms(now.year(), 1, 1, 3, 0, 0)
        .single()
        .expect("a valid instant");
    let year = if this_year > now {
        now.year()
    } else {
        now.year() + 1
    };
    format!("{year}-01-01T03:00:00.000Z")
}

#[test]
fn pages_show_jobs_outcomes_output_and_runs_on_every_replica_live() {
    // Public to read: these pages are looked at without logging in.
    let mut dashboards = Dashboards::start("public");
    support::runtime().block_on(async {
        let browser = Browser::start().await;

        // The overview lists every job with its next tick and countdown.
        goto(&browser, &dashboards.url(0, "/")).await;
        let rows: Vec<JobRow> = js(&browser, JOB_ROWS).await;
        let names: Vec<&str> = rows.iter().map(|r| r.job.as_str()).collect();
        assert_eq!(
            names,
            ["cache-warmup", "lottery-draw", "nightly-backup", "yearly-report"],
            "{rows:?}"
        );
        for row in &rows {
            assert!(row.next.is_some(), "no next tick shown: {row:?}");
            let countdown = row.countdown.as_deref().unwrap_or_default();
            assert!(
                countdown.starts_with("in ") || countdown == "due now",
                "no countdown: {row:?}"
            );
        }
        let yearly = rows.iter().find(|r| r.job == "yearly-report").unwrap();
        assert_eq!(yearly.next.as_deref(), Some(next_new_year_3am().as_str()));
        assert!(
            yearly.countdown.as_deref().unwrap_or_default().contains(" d "),
            "a tick months away counts down in days: {yearly:?}"
        );

        // New outcomes arrive without a reload: the script swaps in a
        // fresh table and the draw's strip gains a newer cell. A mark left
        // in the page's window shows it was never reloaded.
        let _: Value = js(&browser, "window.notReloaded = true; return null;").await;
        let draw = |rows: &[JobRow]| {
            let row = rows.iter().find(|r| r.job == "lottery-draw").unwrap();
            (row.cells, row.newest.clone())
        };
        let before = draw(&rows);
        let after = eventually("a newer outcome of lottery-draw on the open page", async || {
            let rows: Vec<JobRow> = js(&browser, JOB_ROWS).await;
            let now = draw(&rows);
            (now.0 > before.0 || (now.1.is_some() && now.1 != before.1)).then_some(now)
        })
        .await;
        let refreshed: Value = js(
            &browser,
            "return [window.notReloaded === true, document.body.dataset.refreshedAt ?? null];",
        )
        .await;
        assert_eq!(refreshed[0], Value::Bool(true), "the page was reloaded");
        assert!(refreshed[1].is_string(), "the script did not refresh: {refreshed}");
        assert!(after.0 >= 1, "no outcome cell: {after:?}");

        // A job's page shows the tail of what a run printed.
        goto(&browser, &dashboards.url(0, "/jobs/lottery-draw")).await;
        let output = eventually("a run's output, opened by a click", async || {
            let summary = browser
                .client
                .find(Locator::Css("table.history tr[data-run] details summary"))
                .await
                .ok()?;
            summary.click().await.ok()?;
            let text: Option<String> = js(
                &browser,
                "return document.querySelector('table.history details[open] pre.output')?.innerText ?? null;",
            )
            .await;
            text.filter(|t| !t.is_empty())
        })
        .await;
        assert!(output.contains("winners: 4 8 15 16 23 42"), "{output:?}");
        assert!(output.contains("draw for tick "), "{output:?}");

        // The timeline shows runs in every replica's lane.
        goto(&browser, &dashboards.url(0, "/replicas")).await;
        let lanes: Vec<(String, usize)> = eventually("bars in the lanes of a, b and c", async || {
            let lanes: Vec<(String, usize)> = js(&browser, TIMELINE_BARS).await;
            (lanes.iter().filter(|(_, bars)| *bars > 0).count() >= 3).then_some(lanes)
        })
        .await;
        let ids: Vec<&str> = lanes.iter().map(|(id, _)| id.as_str()).collect();
        assert_eq!(ids, ["a", "b", "c"], "{lanes:?}");
        goto(&browser, &dashboards.url(0, "/")).await;
        if updating_screenshots() {
            // The user guide's pictures: strips with something in them.
            eventually("20 outcomes in the draw's strip", async || {
                let rows: Vec<JobRow> = js(&browser, JOB_ROWS).await;
                (draw(&rows).0 >= 20).then_some(())
            })
            .await;
        }
        screenshot(&browser, "overview").await;

        // A takeover, seen without a reload: c is killed; its row turns
        // dead and a and b keep running the jobs.
        goto(&browser, &dashboards.url(0, "/replicas")).await;
        let _: Value = js(&browser, "window.notReloaded = true; return null;").await;
        let c = dashboards.cluster.index_of("c");
        dashboards.cluster.replicas[c].kill9();
        let lanes_at_kill: Vec<(String, usize)> = js(&browser, TIMELINE_BARS).await;
        let survivors = |lanes: &[(String, usize)]| -> usize {
            lanes
                .iter()
                .filter(|(id, _)| id != "c")
                .map(|(_, bars)| bars)
                .sum()
        };
        eventually("c shown dead and more runs on a and b", async || {
            let dead: bool = js(
                &browser,
                r#"const row = document.querySelector('table.replicas tr[data-replica="c"]');
                   return !!row && row.textContent.includes('dead');"#,
            )
            .await;
            let lanes: Vec<(String, usize)> = js(&browser, TIMELINE_BARS).await;
            (dead && survivors(&lanes) >= survivors(&lanes_at_kill) + 3).then_some(())
        })
        .await;
        let not_reloaded: bool = js(&browser, "return window.notReloaded === true;").await;
        assert!(not_reloaded, "the replicas page was reloaded");
        screenshot(&browser, "timeline").await;
    });
}

/// A page on another origin of the same site (another port of
/// 127.0.0.1, which the session cookie's `SameSite=Strict` does not stop)
/// that posts a form to the dashboard as soon as it loads. It answers every
/// request with that page until dropped.
struct AttackerPage {
    addr: String,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl AttackerPage {
    fn serve(action: &str, csrf: &str) -> AttackerPage {
        let listener = TcpListener::bind("127.0.0.1:0").expect("a free loopback port");
        let addr = listener.local_addr().expect("a bound address").to_string();
        let page = format!(
            "<!doctype html><form method=post action=\"{action}\">\
             <input type=hidden name=csrf value=\"{csrf}\"></form>\
             <script>document.forms[0].submit()</script>"
        );
        let stop = Arc::new(AtomicBool::new(false));
        let thread = std::thread::spawn({
            let stop = stop.clone();
            move || {
                for stream in listener.incoming() {
                    if stop.load(Ordering::SeqCst) {
                        return;
                    }
                    let Ok(mut stream) = stream else { continue };
                    let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
                    let mut request = [0u8; 4096];
                    let _ = stream.read(&mut request);
                    let _ = write!(
                        stream,
                        "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{page}",
                        page.len()
                    );
                }
            }
        });
        AttackerPage {
            addr,
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for AttackerPage {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wakes the accept loop so it sees the flag.
        let _ = std::net::TcpStream::connect(&self.addr);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The status and the error line of the page the browser shows, once it
/// has left `from`.
async fn refused_page(browser: &Browser, from: &str) -> (u16, String) {
    eventually("the form's answer", async || {
        let url = browser.client.current_url().await.ok()?;
        if url.as_str().starts_with(from) {
            return None;
        }
        let answer: Option<(u16, String)> = js(
            browser,
            r#"const nav = performance.getEntriesByType('navigation')[0];
               const error = document.querySelector('p.error');
               return nav && error ? [nav.responseStatus, error.textContent] : null;"#,
        )
        .await;
        answer
    })
    .await
}

/// POSTs `form` to `url` with `headers` (no cookie): the status code.
fn post(url: &str, headers: &[(&str, &str)], form: &[(&str, &str)]) -> u16 {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .proxy(None)
        .timeout_global(Some(Duration::from_secs(20)))
        .build()
        .into();
    let mut request = agent.post(url);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = request
        .send_form(form.iter().copied())
        .unwrap_or_else(|e| panic!("POST {url} failed: {e}"));
    response.status().as_u16()
}

#[test]
fn run_now_needs_a_session_its_csrf_token_and_the_same_origin_and_runs_once() {
    let dashboards = Dashboards::start("token");
    let job_page = dashboards.url(0, "/jobs/yearly-report");
    let trigger = dashboards.url(0, "/jobs/yearly-report/trigger");
    support::runtime().block_on(async {
        let browser = Browser::start().await;

        // Without logging in there is no button, only a way to log in
        // (reading needs the login too: the job page leads to it).
        goto(&browser, &job_page).await;
        let (buttons, login_links): (usize, usize) = js(
            &browser,
            r#"return [document.querySelectorAll('#run-now, #pause, #resume').length,
                       document.querySelectorAll('a[href^="/login"]').length];"#,
        )
        .await;
        assert_eq!(buttons, 0, "actions offered to a visitor who has not logged in");
        assert!(login_links > 0, "no way to log in");

        // A forged POST without the session, and a wrong bearer token.
        assert_eq!(post(&trigger, &[], &[("csrf", "00ff")]), 403);
        assert_eq!(
            post(
                &trigger,
                &[("Authorization", "Bearer not-the-token-but-long-enough")],
                &[]
            ),
            403
        );

        // Logging in through the form. What is typed survives the page's
        // refresh (a refresh every 3 s must not wipe a half-typed token).
        goto(&browser, &dashboards.url(0, "/login?next=/jobs/yearly-report")).await;
        let name = browser.client.find(Locator::Id("name")).await.expect("#name");
        name.send_keys("tester").await.expect("typing a name");
        let token = browser.client.find(Locator::Id("token")).await.expect("#token");
        token.send_keys(TOKEN).await.expect("typing the token");
        tokio::time::sleep(Duration::from_millis(4_000)).await;
        let typed: (String, String) = js(
            &browser,
            "return [document.getElementById('name').value, document.getElementById('token').value];",
        )
        .await;
        assert_eq!(typed, ("tester".to_string(), TOKEN.to_string()), "the form was wiped");
        browser
            .client
            .find(Locator::Id("login"))
            .await
            .expect("#login")
            .click()
            .await
            .expect("a click logs in");
        let csrf: String = eventually("the job page with its actions", async || {
            js(
                &browser,
                r#"const button = document.getElementById('run-now');
                   return button ? button.form.querySelector('input[name=csrf]').value : null;"#,
            )
            .await
        })
        .await;
        assert!(
            browser.client.current_url().await.unwrap().as_str().starts_with(&job_page),
            "login did not lead back to the job"
        );

        // While logged in, a page of another site posts the form, even
        // with the right CSRF token: refused (no cookie is sent from it).
        let form = format!(
            "<form method=post action=\"{trigger}\"><input type=hidden name=csrf value=\"{csrf}\"></form>\
             <script>document.forms[0].submit()</script>"
        );
        let data_url = format!("data:text/html,{}", percent_encode(&form));
        goto(&browser, &data_url).await;
        let (status, error) = refused_page(&browser, "data:").await;
        assert_eq!(status, 403, "{error}");
        assert!(error.contains("nothing changed"), "{error}");

        // And from another origin of the same site, where the cookie is
        // sent: the Origin check refuses it.
        let attacker = AttackerPage::serve(&trigger, &csrf);
        let attacker_url = format!("http://{}/", attacker.addr);
        goto(&browser, &attacker_url).await;
        let (status, error) = refused_page(&browser, &attacker_url).await;
        assert_eq!(status, 403, "{error}");
        assert!(error.contains("another site"), "{error}");
        drop(attacker);

        // Run now: exactly one manual run, and the action is recorded.
        assert!(
            dashboards.manual_runs("yearly-report").is_empty(),
            "a refused request ran the job"
        );
        goto(&browser, &job_page).await;
        browser
            .client
            .find(Locator::Id("run-now"))
            .await
            .expect("#run-now once logged in")
            .click()
            .await
            .expect("a click runs it");
        let run_id: String = eventually("the notice naming the queued run", async || {
            js(&browser, "return document.querySelector('p.notice code')?.textContent ?? null;")
                .await
        })
        .await;
        let runs = eventually("the manual run's outcome", async || {
            let runs = dashboards.manual_runs("yearly-report");
            (!runs.is_empty()).then_some(runs)
        })
        .await;
        assert_eq!(runs.len(), 1, "{runs:?}");
        assert_eq!(runs[0].run_id(), run_id);
        assert_eq!(runs[0].status(), "ok", "{runs:?}");
        // No second run comes later (a replay of the queue, a second
        // replica picking it up).
        tokio::time::sleep(Duration::from_secs(4)).await;
        let all = read_outcomes(&mut dashboards.cluster.redis.client(), "cl", "yearly-report");
        assert_eq!(all.len(), 1, "the yearly job ran more than once: {all:?}");
        // The page shows the run and who asked for it, refreshed in place.
        eventually("the manual run and the action on the job page", async || {
            let shown: bool = js(
                &browser,
                &format!(
                    r#"const row = document.querySelector('tr[data-run="{run_id}"]');
                       const log = document.querySelector('ul.actions-log')?.textContent ?? '';
                       return !!row && row.textContent.includes('manual')
                         && log.includes('trigger') && log.includes('tester via dashboard on a');"#
                ),
            )
            .await;
            shown.then_some(())
        })
        .await;
    });
}

/// `text` with everything but letters and digits percent-encoded (a
/// `data:` URL's body).
fn percent_encode(text: &str) -> String {
    text.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() {
                char::from(b).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

#[test]
fn with_a_token_reading_needs_the_login_which_is_throttled_and_leads_only_here() {
    let mut cluster = Cluster::new(RedisServer::start());
    cluster.env.push((TOKEN_ENV.into(), TOKEN.into()));
    let daemon = format!(
        "metrics_listen = \"\"\ndashboard_listen = \"127.0.0.1:0\"\ndashboard_token_env = \"{TOKEN_ENV}\"\n"
    );
    let jobs =
        "[jobs.nightly]\nschedule = \"0 0 3 * * *\"\nworkdir = \"/tmp\"\ncommand = [\"true\"]\n";
    cluster.start_with("guarded", &daemon, jobs, None);
    cluster.start_with(
        "open",
        &format!("{daemon}dashboard_read = \"public\"\n"),
        jobs,
        None,
    );
    cluster.wait_ready();
    let guarded = dashboard_addr(&cluster.replicas[0]);
    let open = dashboard_addr(&cluster.replicas[1]);
    let get = |addr: &str, path: &str, extra: &str| http::get(addr, addr, path, extra);

    // With a token and no `dashboard_read`, pages lead to the login and
    // back; the login page and the assets are there for everyone.
    for (path, next) in [
        ("/", "%2F"),
        ("/jobs/nightly", "%2Fjobs%2Fnightly"),
        ("/replicas?minutes=5", "%2Freplicas%3Fminutes%3D5"),
    ] {
        let answer = get(&guarded, path, "");
        assert_eq!(answer.status, 303, "{path}: {answer:?}");
        assert_eq!(
            answer.header("location"),
            Some(format!("/login?next={next}").as_str()),
            "{path}"
        );
    }
    for path in ["/login?next=%2F", "/assets/style.css", "/assets/app.js"] {
        assert_eq!(get(&guarded, path, "").status, 200, "{path}");
    }
    // With `dashboard_read = "public"` the pages are read without it.
    for path in ["/", "/jobs/nightly", "/replicas"] {
        let answer = get(&open, path, "");
        assert_eq!(answer.status, 200, "{path}: {answer:?}");
    }

    // The right token leads back only to a path of this site.
    let login = |addr: &str, token: &str, next: &str| {
        let form = format!(
            "name=tester&token={}&next={}",
            percent_encode(token),
            percent_encode(next)
        );
        http::post_form(addr, addr, "/login", &form)
    };
    for (next, to) in [
        ("/\\evil.example", "/"),
        ("//evil.example", "/"),
        ("https://evil.example/", "/"),
        ("/jobs/nightly", "/jobs/nightly"),
    ] {
        let answer = login(&guarded, TOKEN, next);
        assert_eq!(answer.status, 303, "next={next}: {answer:?}");
        assert_eq!(
            answer.header("location"),
            Some(to),
            "next={next}: {answer:?}"
        );
    }
    // The session it sets reads the pages.
    let answer = login(&guarded, TOKEN, "/");
    let session = answer
        .headers
        .iter()
        .filter(|(name, _)| name == "set-cookie")
        .filter_map(|(_, value)| value.split(';').next())
        .collect::<Vec<_>>()
        .join("; ");
    assert!(session.contains("cronlease_session="), "{answer:?}");
    let page = get(&guarded, "/", &format!("Cookie: {session}\r\n"));
    assert_eq!(page.status, 200, "{page:?}");
    assert!(page.body.contains("nightly"), "{page:?}");

    // Five wrong tokens within a minute are refused; the sixth attempt is
    // throttled (429 with Retry-After), and so is the right token then.
    for attempt in 1..=5 {
        let answer = login(&guarded, "not-the-token-but-long-enough", "/");
        assert_eq!(answer.status, 403, "wrong token {attempt}: {answer:?}");
    }
    let answer = login(&guarded, "not-the-token-but-long-enough", "/");
    assert_eq!(answer.status, 429, "{answer:?}");
    let wait: u64 = answer
        .header("retry-after")
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no Retry-After in seconds: {answer:?}"));
    assert!((1..=60).contains(&wait), "{answer:?}");
    assert_eq!(login(&guarded, TOKEN, "/").status, 429);
    // Another replica keeps its own count.
    assert_eq!(login(&open, TOKEN, "/").status, 303);
}
