//! What the dashboard's overview costs with 10,000 jobs, against the same
//! page with 100 jobs measured in the same run, in a real headless Chromium.
//!
//! Starts one private `redis-server` and two replicas (this example started
//! again as `cronlease run`, so nothing else needs building), each with its
//! dashboard on a free port and its own key prefix: `big` with `--jobs`
//! jobs, `small` with `--baseline-jobs`, all yearly (none is due during the
//! run). The first 20 jobs of each get 3 manual runs each (through the
//! dashboard's bearer-token API), so the first page has outcome strips.
//! Then, in Chromium (`tests/it/support/browser.rs`), for the overview
//! (`/`) and a filtered view (`/?q=…`, 10 jobs) of each replica:
//!
//! - **cold**: the first navigation (the replica's status snapshot not yet
//!   read, the browser's cache empty);
//! - **warm**: the median of `--runs` navigations in a row (the snapshot
//!   is shared for 2 s, so most are served from it);
//! - **expired**: the median of `--runs` navigations each 2.5 s after the
//!   previous, so that every one reads the status of every job again;
//!
//! each from navigation start to the end of the load event
//! (`performance.getEntriesByType('navigation')`), and the page's size:
//! the HTML body's bytes as transferred and the DOM's `outerHTML` length.
//! Prints the figures and the big/small ratios; nothing is asserted.
//!
//! `cargo run --release --example dashboard_cost [-- --jobs N --runs R]`

#[path = "../tests/it/support/browser.rs"]
#[allow(dead_code)]
mod browser;
#[path = "common/mod.rs"]
#[allow(dead_code)]
mod common;
#[path = "common/measure.rs"]
mod measure;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use clap::Parser;
use common::{RedisProcess, detach_and_tie_to_parent, print_table, tail, toml_string};

use browser::Browser;

#[derive(Parser)]
struct Args {
    /// Jobs of the measured replica.
    #[arg(long, default_value_t = 10_000)]
    jobs: usize,
    /// Jobs of the baseline replica.
    #[arg(long, default_value_t = 100)]
    baseline_jobs: usize,
    /// Navigations per warm and expired figure.
    #[arg(long, default_value_t = 7)]
    runs: usize,
}

/// The operator token both replicas read (the triggers that give the
/// first page its outcomes use it).
const TOKEN: &str = "dashboard-cost-token-0123456789";
const TOKEN_ENV: &str = "CRONLEASE_DASHBOARD_COST_TOKEN";
/// Jobs given manual runs, and runs each.
const JOBS_WITH_RUNS: usize = 20;
const RUNS_PER_JOB: usize = 3;
/// A little longer than the dashboard's shared snapshot lives (2 s).
const SNAPSHOT_EXPIRED: Duration = Duration::from_millis(2_500);

fn main() -> ExitCode {
    // Started again as a replica: `dashboard_cost replica run --config F`.
    if std::env::args().nth(1).as_deref() == Some("replica") {
        let cli = cronlease::cli::Cli::parse_from(std::env::args().skip(1));
        return cronlease::cli::run(cli).into();
    }
    measure::run_main(run(Args::parse()))
}

/// A replica of this example: its process, its log, its dashboard.
struct Replica {
    child: Child,
    log: PathBuf,
    addr: String,
}

impl Replica {
    /// Starts a replica with `jobs` yearly jobs under key prefix `prefix`
    /// and waits for its dashboard.
    fn start(dir: &Path, redis: &RedisProcess, prefix: &str, jobs: usize) -> Result<Replica> {
        let dir = dir.join(prefix);
        std::fs::create_dir_all(dir.join("state")).context("cannot create a replica directory")?;
        let mut config = format!(
            "[redis]\nurl = {url}\nkey_prefix = \"{prefix}\"\n\n\
             [daemon]\nreplica_id = \"{prefix}\"\nstate_dir = {state}\nmetrics_listen = \"\"\n\
             dashboard_listen = \"127.0.0.1:0\"\ndashboard_token_env = \"{TOKEN_ENV}\"\n\
             dashboard_read = \"public\"\n\n",
            url = toml_string(&redis.url()),
            state = toml_string(&dir.join("state").to_string_lossy()),
        );
        for i in 0..jobs {
            config.push_str(&format!(
                "[jobs.job-{i:05}]\nschedule = \"0 0 3 1 1 *\"\ntimezone = \"UTC\"\nworkdir = \"/tmp\"\ncommand = [\"true\"]\n"
            ));
        }
        let config_path = dir.join("jobs.toml");
        std::fs::write(&config_path, config).context("cannot write a config")?;
        let log = dir.join("replica.log");
        let log_file = std::fs::File::create(&log).context("cannot create a replica log")?;
        let mut command = Command::new(std::env::current_exe()?);
        command
            .args(["replica", "run", "--config"])
            .arg(&config_path)
            .env(TOKEN_ENV, TOKEN)
            .env("RUST_LOG", "warn,cronlease::daemon=info")
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(log_file.try_clone()?)
            .stderr(log_file);
        detach_and_tie_to_parent(&mut command);
        let mut child = command.spawn().context("cannot start a replica")?;
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            if text.contains("ready")
                && let Some(rest) = text.split("dashboard on http://").nth(1)
            {
                let addr = rest.split('/').next().unwrap_or_default().to_string();
                return Ok(Replica { child, log, addr });
            }
            if let Some(status) = child.try_wait()? {
                bail!("replica {prefix} exited with {status}:\n{}", tail(&log, 20));
            }
            if Instant::now() >= deadline {
                bail!(
                    "replica {prefix} not ready within 120 s:\n{}",
                    tail(&log, 20)
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Gives the first [`JOBS_WITH_RUNS`] jobs of `replica` their manual runs
/// and waits until every outcome is recorded.
fn give_outcomes(replica: &Replica, redis: &RedisProcess, prefix: &str) -> Result<()> {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .proxy(None)
        .timeout_global(Some(Duration::from_secs(60)))
        .build()
        .into();
    for round in 0..RUNS_PER_JOB {
        for i in 0..JOBS_WITH_RUNS {
            let url = replica.url(&format!("/jobs/job-{i:05}/trigger"));
            agent
                .post(&url)
                .header("Authorization", &format!("Bearer {TOKEN}"))
                .send_empty()
                .with_context(|| format!("POST {url} failed"))?;
        }
        // One round at a time: a trigger while the last run of the job is
        // still in flight could be skipped as an overlap.
        wait_outcomes(redis, prefix, (round + 1) * JOBS_WITH_RUNS, &replica.log)?;
    }
    Ok(())
}

fn wait_outcomes(redis: &RedisProcess, prefix: &str, expected: usize, log: &Path) -> Result<()> {
    let mut connection = redis.connect(Duration::from_secs(5))?;
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let mut recorded = 0;
        for i in 0..JOBS_WITH_RUNS {
            let n: usize = redis::cmd("XLEN")
                .arg(format!("{prefix}:{{job-{i:05}}}:runs"))
                .query(&mut connection)?;
            recorded += n;
        }
        if recorded >= expected {
            return Ok(());
        }
        if Instant::now() >= deadline {
            bail!(
                "{recorded} of {expected} manual runs of {prefix} recorded after 120 s:\n{}",
                tail(log, 20)
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// What one navigation measured.
#[derive(Debug, Clone, Copy)]
struct Navigation {
    /// Navigation start to the end of the load event, ms.
    load_ms: f64,
    /// The HTML as transferred (no compression is used), bytes.
    body_bytes: u64,
    /// `document.documentElement.outerHTML.length`.
    dom_chars: u64,
    /// Job rows on the page.
    rows: u64,
}

const MEASURE: &str = r#"
const e = performance.getEntriesByType('navigation')[0];
if (!e || e.loadEventEnd <= 0) return null;
return [e.loadEventEnd - e.startTime, e.encodedBodySize,
        document.documentElement.outerHTML.length,
        document.querySelectorAll('table.jobs tr[data-job]').length];
"#;

async fn navigate(browser: &Browser, url: &str) -> Result<Navigation> {
    browser
        .client
        .goto(url)
        .await
        .with_context(|| format!("cannot open {url}"))?;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let value = browser
            .client
            .execute(MEASURE, Vec::new())
            .await
            .context("cannot read the navigation timing")?;
        if let Some([load, body, dom, rows]) = value.as_array().map(Vec::as_slice) {
            return Ok(Navigation {
                load_ms: load.as_f64().unwrap_or(0.0),
                body_bytes: body.as_u64().unwrap_or(0),
                dom_chars: dom.as_u64().unwrap_or(0),
                rows: rows.as_u64().unwrap_or(0),
            });
        }
        if Instant::now() >= deadline {
            bail!("{url} did not finish loading within 60 s");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The figures of one page.
struct Figures {
    cold: Navigation,
    warm_ms: f64,
    expired_ms: f64,
}

async fn measure_page(browser: &Browser, url: &str, runs: usize) -> Result<Figures> {
    let cold = navigate(browser, url).await?;
    let mut warm = Vec::new();
    for _ in 0..runs {
        warm.push(navigate(browser, url).await?.load_ms);
    }
    let mut expired = Vec::new();
    for _ in 0..runs {
        tokio::time::sleep(SNAPSHOT_EXPIRED).await;
        expired.push(navigate(browser, url).await?.load_ms);
    }
    Ok(Figures {
        cold,
        warm_ms: median(warm),
        expired_ms: median(expired),
    })
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied().unwrap_or(0.0)
}

async fn run(args: Args) -> Result<()> {
    let dir = tempfile::tempdir().context("cannot create a temporary directory")?;
    let redis = RedisProcess::start(dir.path())?;
    println!(
        "starting replicas: big ({} jobs) and small ({} jobs) on one redis-server…",
        args.jobs, args.baseline_jobs
    );
    let big = Replica::start(dir.path(), &redis, "big", args.jobs)?;
    let small = Replica::start(dir.path(), &redis, "small", args.baseline_jobs)?;
    give_outcomes(&big, &redis, "big")?;
    give_outcomes(&small, &redis, "small")?;
    // Every snapshot the triggers left behind has expired: the first
    // navigation is cold.
    tokio::time::sleep(SNAPSHOT_EXPIRED).await;
    let browser = Browser::start().await;
    let pages = [
        ("overview", &big, "/", args.jobs),
        ("overview", &small, "/", args.baseline_jobs),
        ("filtered ?q=job-0999", &big, "/?q=job-0999", args.jobs),
        (
            "filtered ?q=job-0009",
            &small,
            "/?q=job-0009",
            args.baseline_jobs,
        ),
    ];
    let mut rows = Vec::new();
    let mut figures = Vec::new();
    for (name, replica, path, jobs) in pages {
        println!("measuring {name} with {jobs} jobs…");
        let f = measure_page(&browser, &replica.url(path), args.runs).await?;
        rows.push(vec![
            name.to_string(),
            jobs.to_string(),
            f.cold.rows.to_string(),
            format!("{:.0}", f.cold.load_ms),
            format!("{:.0}", f.warm_ms),
            format!("{:.0}", f.expired_ms),
            f.cold.body_bytes.to_string(),
            f.cold.dom_chars.to_string(),
        ]);
        figures.push(f);
    }
    for (label, big, small) in [("overview", 0, 1), ("filtered", 2, 3)] {
        let (b, s) = (&figures[big], &figures[small]);
        rows.push(vec![
            format!("{label}: big/small"),
            format!("{:.0}×", args.jobs as f64 / args.baseline_jobs as f64),
            String::new(),
            format!("{:.2}×", b.cold.load_ms / s.cold.load_ms),
            format!("{:.2}×", b.warm_ms / s.warm_ms),
            format!("{:.2}×", b.expired_ms / s.expired_ms),
            format!(
                "{:.2}×",
                b.cold.body_bytes as f64 / s.cold.body_bytes as f64
            ),
            format!("{:.2}×", b.cold.dom_chars as f64 / s.cold.dom_chars as f64),
        ]);
    }
    println!();
    print_table(
        &[
            "page",
            "jobs",
            "rows",
            "cold ms",
            "warm ms (median)",
            "expired ms (median)",
            "HTML bytes",
            "DOM chars",
        ]
        .map(String::from),
        &rows,
    );
    println!(
        "\n(navigation start → load event end in headless Chromium; warm: {} navigations in a row, \
         expired: {} navigations each {} ms after the last, past the 2 s shared snapshot; \
         target: ≤ 1000 ms for the {}-job overview)",
        args.runs,
        args.runs,
        SNAPSHOT_EXPIRED.as_millis(),
        args.jobs
    );
    drop(browser);
    drop(small);
    drop(big);
    Ok(())
}
