//! What computing the next tick costs: cronlease's schedule engine against
//! croner 4 (the engine it replaced, a dev-dependency) in the same run.
//!
//! For each (expression, zone) the benchmark walks `--ticks` consecutive
//! ticks with `Schedule::next_after` and with croner's
//! `find_next_occurrence`, several rounds each, and prints the best round's
//! nanoseconds per tick for both and their ratio; then the time to parse,
//! and the resident memory of 10,000 distinct parsed expressions (what a
//! large job table with `H` holds, since `H` makes every job's expression
//! its own).
//!
//! `cargo run --release --example schedule_cost [-- --ticks N --rounds R]`

use std::hint::black_box;
use std::process::ExitCode;
use std::str::FromStr;
use std::time::{Duration, Instant};

use chrono::{TimeZone, Utc};
use croner::Cron;
use croner::parser::{CronParser, Seconds};
use cronlease::schedule::{DstPolicy, Schedule, Zone};

/// (expression, zone): a second-by-second job, a minute job, the lottery
/// draw in a zone without DST and with it, a fixed-time list and a sparse
/// day rule in a DST zone.
const CASES: &[(&str, &str)] = &[
    ("* * * * * *", "UTC"),
    ("*/5 * * * *", "Europe/Berlin"),
    ("0 12 * * *", "Asia/Shanghai"),
    ("0 12 * * *", "America/New_York"),
    ("30 1,13 * * 1-5", "America/New_York"),
    ("0 9 1,15 * mon", "Australia/Lord_Howe"),
];

fn main() -> ExitCode {
    let mut ticks = 20_000usize;
    let mut rounds = 5usize;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let value = args.next().and_then(|v| v.parse::<usize>().ok());
        match (arg.as_str(), value) {
            ("--ticks", Some(v)) if v > 0 => ticks = v,
            ("--rounds", Some(v)) if v > 0 => rounds = v,
            _ => {
                eprintln!("usage: schedule_cost [--ticks N] [--rounds R]");
                return ExitCode::from(2);
            }
        }
    }
    let from = Utc
        .with_ymd_and_hms(2026, 1, 1, 0, 0, 0)
        .single()
        .expect("a valid date");
    println!("next tick, {ticks} consecutive ticks, best of {rounds} rounds (ns per tick)");
    println!(
        "{:<22} {:<20} {:>10} {:>10} {:>8}",
        "expression", "zone", "cronlease", "croner 4", "ratio"
    );
    for &(expression, zone) in CASES {
        let ours = match Zone::parse(zone)
            .and_then(|z| Schedule::parse(expression, z, "bench", DstPolicy::default()))
        {
            Ok(schedule) => schedule,
            Err(e) => {
                eprintln!("error: {expression:?}: {e}");
                return ExitCode::FAILURE;
            }
        };
        let Ok(tz) = chrono_tz::Tz::from_str(zone) else {
            eprintln!("error: chrono-tz has no {zone}");
            return ExitCode::FAILURE;
        };
        let theirs = match croner_parse(expression) {
            Ok(cron) => cron,
            Err(e) => {
                eprintln!("error: croner refuses {expression:?}: {e}");
                return ExitCode::FAILURE;
            }
        };
        let ours_ns = best_of(rounds, ticks, || {
            let mut cursor = from;
            for _ in 0..ticks {
                cursor = ours.next_after(cursor).expect("these schedules never end");
            }
            black_box(cursor);
        });
        let theirs_ns = best_of(rounds, ticks, || {
            let mut cursor = from.with_timezone(&tz);
            for _ in 0..ticks {
                cursor = theirs
                    .find_next_occurrence(&cursor, false)
                    .expect("these schedules never end");
            }
            black_box(cursor);
        });
        println!(
            "{:<22} {:<20} {:>10.0} {:>10.0} {:>7.2}x",
            format!("{expression:?}"),
            zone,
            ours_ns,
            theirs_ns,
            ours_ns / theirs_ns
        );
    }

    let parse_count = 10_000;
    let expressions: Vec<String> = (0..parse_count)
        .map(|i| format!("{} {} * * {}", i % 60, (i / 60) % 24, i % 7))
        .collect();
    let parse_ours = time_per(parse_count, || {
        for expression in &expressions {
            black_box(
                Schedule::parse(expression, Zone::utc(), "bench", DstPolicy::default())
                    .expect("valid"),
            );
        }
    });
    let parse_theirs = time_per(parse_count, || {
        for expression in &expressions {
            black_box(croner_parse(expression).expect("valid"));
        }
    });
    println!(
        "\nparse, {parse_count} expressions (µs each): cronlease {:.1}, croner 4 {:.1}, ratio {:.2}x",
        parse_ours / 1000.0,
        parse_theirs / 1000.0,
        parse_ours / parse_theirs
    );

    let before = rss_kib();
    let held_ours: Vec<Schedule> = expressions
        .iter()
        .map(|e| Schedule::parse(e, Zone::utc(), "bench", DstPolicy::default()).expect("valid"))
        .collect();
    let after_ours = rss_kib();
    let held_theirs: Vec<Cron> = expressions
        .iter()
        .map(|e| croner_parse(e).expect("valid"))
        .collect();
    let after_theirs = rss_kib();
    black_box((&held_ours, &held_theirs));
    match (before, after_ours, after_theirs) {
        (Some(before), Some(ours), Some(theirs)) => {
            let ours_kib = ours.saturating_sub(before);
            let theirs_kib = theirs.saturating_sub(ours);
            println!(
                "resident memory of {parse_count} parsed expressions: cronlease {} KiB ({} B each), croner 4 {} KiB ({} B each)",
                ours_kib,
                ours_kib * 1024 / parse_count as u64,
                theirs_kib,
                theirs_kib * 1024 / parse_count as u64
            );
        }
        _ => println!("resident memory: /proc/self/status unreadable"),
    }
    ExitCode::SUCCESS
}

fn croner_parse(expression: &str) -> Result<Cron, croner::errors::CronError> {
    CronParser::builder()
        .seconds(Seconds::Optional)
        .build()
        .parse(expression)
}

/// Nanoseconds per tick of the fastest of `rounds` runs of `f` (which
/// computes `ticks` ticks): the least disturbed by the rest of the machine.
fn best_of(rounds: usize, ticks: usize, mut f: impl FnMut()) -> f64 {
    f(); // warm-up
    (0..rounds)
        .map(|_| time_per(ticks, &mut f))
        .fold(f64::INFINITY, f64::min)
}

fn time_per(count: usize, mut f: impl FnMut()) -> f64 {
    let start = Instant::now();
    f();
    let elapsed: Duration = start.elapsed();
    elapsed.as_nanos() as f64 / count as f64
}

/// This process's resident set, from /proc.
fn rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}
