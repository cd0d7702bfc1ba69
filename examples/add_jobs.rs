//! What `Scheduler::add` costs as a scheduler's job table grows: a private
//! `redis-server`, a started embedded scheduler, and `--jobs` jobs (10,000
//! unless told) added one at a time, each timed on its own.
//!
//! For each checkpoint (100, 1,000, 10,000 jobs, and `--jobs` if it is not
//! one of them) it prints the mean and the median of the 100 adds that end
//! there, in µs, and the ratio of the last checkpoint's mean to the first's:
//! about 1 when an add costs the same whatever the table holds. The jobs
//! share a handful of schedules and zones, as a large table does; each runs
//! yearly, so none is due while the benchmark runs.
//!
//! `cargo run --release --example add_jobs [-- --jobs N]`

#[path = "common/mod.rs"]
#[allow(dead_code)]
mod common;
#[path = "common/measure.rs"]
mod measure;

use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use cronlease::{Cluster, JobBuilder, Misfire, Overlap, RedisSettings, Run};

use common::RedisProcess;

/// How many adds each checkpoint's figures are taken over.
const WINDOW: usize = 100;

/// (schedule, zone) of the jobs, in turn.
const KINDS: &[(&str, &str)] = &[
    ("0 12 1 1 *", "UTC"),
    ("30 2 1 1 *", "Europe/Berlin"),
    ("0 12 1 1 *", "Asia/Shanghai"),
    ("15 3 2 1 *", "America/New_York"),
];

fn main() -> ExitCode {
    let mut jobs = 10_000usize;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match (arg.as_str(), args.next().and_then(|v| v.parse().ok())) {
            ("--jobs", Some(n)) if n >= WINDOW => jobs = n,
            _ => {
                eprintln!("usage: add_jobs [--jobs N (at least {WINDOW})]");
                return ExitCode::from(2);
            }
        }
    }
    measure::run_main(add_jobs(jobs))
}

async fn add_jobs(n_jobs: usize) -> Result<()> {
    let dir = tempfile::tempdir().context("cannot make a temporary directory")?;
    let redis = RedisProcess::start(dir.path())?;
    let cluster = Cluster::connect(RedisSettings::url(&redis.url()).key_prefix("addjobs"))
        .await
        .context("cannot connect to the private redis-server")?;
    let mut scheduler = cluster
        .scheduler()
        .replica_id("add-jobs")
        .state_dir(&dir.path().join("state"))
        .start()
        .context("cannot start the scheduler")?;
    scheduler.ready().await.context("the scheduler refused")?;

    let mut micros: Vec<f64> = Vec::with_capacity(n_jobs);
    let started = Instant::now();
    for job_idx in 0..n_jobs {
        let (schedule, zone) = KINDS[job_idx % KINDS.len()];
        let job = JobBuilder::new(&format!("job-{job_idx:06}"), schedule)
            .timezone(zone)
            .overlap(Overlap::Skip)
            .misfire(Misfire::Skip)
            .timeout(Duration::from_secs(60))
            .retries(1)
            .run(|_run: Run| async { Ok::<(), std::io::Error>(()) });
        let before = Instant::now();
        scheduler
            .add(job)
            .with_context(|| format!("add of job {job_idx}"))?;
        micros.push(before.elapsed().as_secs_f64() * 1e6);
    }
    let total = started.elapsed();
    if scheduler.jobs().len() != n_jobs {
        bail!("{} jobs scheduled, not {n_jobs}", scheduler.jobs().len());
    }

    let mut checkpoints: Vec<usize> = [100, 1_000, 10_000]
        .into_iter()
        .filter(|&n| n <= n_jobs)
        .collect();
    if checkpoints.last() != Some(&n_jobs) {
        checkpoints.push(n_jobs);
    }
    println!("{n_jobs} jobs added one at a time in {total:.2?}");
    println!("jobs   mean µs/add   median µs/add   (the {WINDOW} adds ending there)");
    let mut means = Vec::new();
    for &n in &checkpoints {
        let mut window = micros[n - WINDOW..n].to_vec();
        let mean = window.iter().sum::<f64>() / WINDOW as f64;
        window.sort_by(f64::total_cmp);
        let median = window[WINDOW / 2];
        println!("{n:>6} {mean:>13.1} {median:>15.1}");
        means.push((n, mean));
    }
    if let (Some((first_n, first)), Some((last_n, last))) = (means.first(), means.last()) {
        println!("ratio {last_n}/{first_n} of the means: {:.2}", last / first);
    }

    let shutdown = Instant::now();
    scheduler.shutdown().await.context("the shutdown")?;
    println!("shutdown took {:.2?}", shutdown.elapsed());
    Ok(())
}
