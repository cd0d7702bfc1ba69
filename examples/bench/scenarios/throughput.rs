//! (b) throughput: 10,000 jobs every second, 3 replicas. Targets: every
//! due tick started, no duplicate, p99 lateness ≤ 100 ms, claim attempts
//! per tick ≤ 1.1, replica CPU ≤ 25 µs per run (all replicas summed over
//! the runs), redis-server CPU ≤ 25 µs per run, peak RSS ≤ 60 MB per
//! replica. The EVALSHA ceiling is printed as context, not a target. With
//! BullMQ where Node is found: the peer row.

use anyhow::{Result, bail};
use serde_json::{Value, json};

use super::{
    Report, SingleRun, SingleShape, all_started_target, duplicates_target, finish_single,
    lateness_target, peak_rss_target, single_window,
};
use crate::Env;
use crate::cluster::{PLACEMENT_GROUPS, Placement, ReplicaKind};
use crate::common::print_table;
use crate::figures::{Figures, show_us_per_run};
use crate::peer;
use crate::targets::Target;
use crate::ticks::Schedule;

/// CPU per run, µs: of all replicas summed, and of redis-server.
const CPU_PER_RUN_US: f64 = 25.0;

pub fn run(env: &Env) -> Result<Report> {
    let k = env.jobs(10_000);
    let r = 3;
    let seconds = env.seconds(30);
    let shape = |placement| SingleShape {
        k,
        r,
        seconds,
        schedule: Schedule::EverySecond,
        placement,
    };
    let title = |placed: &str| {
        format!(
            "(b) throughput: {k} jobs every second{placed}, {r} {} replicas, {seconds} s window, \
             job kind {}",
            env.kind.replica_kind().name(),
            env.kind.name()
        )
    };
    if env.telemetry {
        return telemetry(
            env,
            shape(Placement::None),
            shape(Placement::None),
            title(""),
        );
    }
    match env.placement {
        Placement::None => {
            let run = single_window(env, "throughput", shape(Placement::None))?;
            let targets = targets(&run);
            let mut report = finish_single(env, "throughput", &title(""), &run, targets);
            peer::attach(env, "throughput", &run, k, &mut report);
            Ok(report)
        }
        Placement::GroupsAndTags => {
            if env.kind.replica_kind() != ReplicaKind::Daemon {
                bail!("--placement measures daemon replicas: groups are a `cronlease run` setting");
            }
            let plain = single_window(env, "throughput", shape(Placement::None))?;
            let without = finish_single(env, "throughput", &title(""), &plain, targets(&plain));
            let placed = single_window(env, "throughput-placed", shape(Placement::GroupsAndTags))?;
            let with_title = title(&format!(
                " in {PLACEMENT_GROUPS} concurrency groups, run on a tag"
            ));
            let with = finish_single(env, "throughput", &with_title, &placed, targets(&placed));
            let sides = Sides {
                title: format!(
                    "(b) throughput, placement: {PLACEMENT_GROUPS} concurrency groups and a tag \
                     against none, same build, same run"
                ),
                with: "with groups and tags",
                what: json!({"groups": PLACEMENT_GROUPS, "tags": true}),
                key: "placement",
            };
            Ok(compare(
                &sides,
                &plain.figures,
                &placed.figures,
                without,
                with,
            ))
        }
    }
}

/// `--telemetry`: a window with no `[daemon.telemetry]`, then one whose
/// replicas export every span (`http/protobuf`, all sampled) to a sink in
/// the bench; the cost per run of both and their ratios.
fn telemetry(env: &Env, off: SingleShape, on: SingleShape, title: String) -> Result<Report> {
    if env.kind.replica_kind() != ReplicaKind::Daemon {
        bail!(
            "--telemetry measures daemon replicas: [daemon.telemetry] is a `cronlease run` setting"
        );
    }
    let plain = single_window(env, "throughput", off)?;
    let without = finish_single(env, "throughput", &title, &plain, targets(&plain));
    let sink = crate::sink::Sink::start()?;
    let traced_env = Env {
        daemon_lines: format!(
            "\n[daemon.telemetry]\nendpoint = \"{}\"\nprotocol = \"http/protobuf\"\n",
            sink.url()
        ),
        ..env.clone()
    };
    let traced = single_window(&traced_env, "throughput-traced", on)?;
    let (requests, bytes) = sink.counts();
    drop(sink);
    println!(
        "  the sink took {requests} OTLP requests, {:.1} MB of spans",
        bytes as f64 / 1e6
    );
    let with_title = format!("{title}, spans exported over OTLP (http/protobuf) to a local sink");
    let with = finish_single(env, "throughput", &with_title, &traced, targets(&traced));
    let sides = Sides {
        title:
            "(b) throughput, telemetry: every span exported over OTLP against none, same build, \
                same run"
                .to_string(),
        with: "with telemetry",
        what: json!({"protocol": "http/protobuf", "sampling": 1.0, "requests": requests, "bytes": bytes}),
        key: "telemetry",
    };
    Ok(compare(
        &sides,
        &plain.figures,
        &traced.figures,
        without,
        with,
    ))
}

/// What a two-window comparison compares: its table's title, the second
/// column's name, and what its report says of the second window.
struct Sides {
    title: String,
    with: &'static str,
    what: Value,
    key: &'static str,
}

/// The cost per run of the first window and the second, side by side with
/// their ratios (second / first), printed and in the report; it passes when
/// both windows met their targets.
fn compare(
    sides: &Sides,
    plain: &Figures,
    placed: &Figures,
    without: Report,
    with: Report,
) -> Report {
    let lateness = |f: &Figures, pick: fn(&crate::ticks::Percentiles) -> i64| {
        f.lateness.as_ref().map(|l| pick(l) as f64)
    };
    let rows: [(&str, Option<f64>, Option<f64>); 7] = [
        (
            "replica CPU per run (all replicas), µs",
            plain.cpu_per_run_us(),
            placed.cpu_per_run_us(),
        ),
        (
            "redis-server CPU per run, µs",
            plain.redis_cpu_per_run_us(),
            placed.redis_cpu_per_run_us(),
        ),
        (
            "Redis commands per run",
            plain.commands_per_run(),
            placed.commands_per_run(),
        ),
        (
            "claim attempts per tick",
            plain.claims_per_tick,
            placed.claims_per_tick,
        ),
        (
            "p50 lateness, ms",
            lateness(plain, |l| l.p50),
            lateness(placed, |l| l.p50),
        ),
        (
            "p99 lateness, ms",
            lateness(plain, |l| l.p99),
            lateness(placed, |l| l.p99),
        ),
        (
            "runs started",
            Some(plain.ticks.runs_started as f64),
            Some(placed.ticks.runs_started as f64),
        ),
    ];
    let show = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.2}"));
    let ratio = |a: Option<f64>, b: Option<f64>| match (a, b) {
        (Some(a), Some(b)) if a > 0.0 => Some(b / a),
        _ => None,
    };
    println!("\n{}", sides.title);
    let table: Vec<Vec<String>> = rows
        .iter()
        .map(|(name, a, b)| {
            let r = ratio(*a, *b).map_or("-".to_string(), |r| format!("{r:.2}x"));
            vec![name.to_string(), show(*a), show(*b), r]
        })
        .collect();
    print_table(
        &["metric", "without", sides.with, "ratio"].map(String::from),
        &table,
    );
    let ratios: serde_json::Map<String, Value> = rows
        .iter()
        .map(|(name, a, b)| (name.to_string(), json!(ratio(*a, *b))))
        .collect();
    Report {
        pass: without.pass && with.pass,
        json: json!({
            "scenario": "throughput",
            sides.key: sides.what,
            "without": without.json,
            "with": with.json,
            "ratios": ratios,
        }),
    }
}

fn targets(run: &SingleRun) -> Vec<Target> {
    let f = &run.figures;
    let claims = f.claims_per_tick;
    let cpu = |name: &str, us: Option<f64>| {
        Target::new(
            name,
            show_us_per_run(us),
            &format!("≤ {CPU_PER_RUN_US} µs"),
            us.is_some_and(|us| us <= CPU_PER_RUN_US),
        )
    };
    vec![
        all_started_target(f),
        duplicates_target(f),
        lateness_target(f, 100),
        Target::new(
            "claim attempts per tick",
            claims.map_or("no tick".to_string(), |c| format!("{c:.3}")),
            "≤ 1.1",
            claims.is_some_and(|c| c <= 1.1),
        ),
        cpu("replica CPU per run (all replicas)", f.cpu_per_run_us()),
        cpu("redis-server CPU per run", f.redis_cpu_per_run_us()),
        peak_rss_target(&run.replicas, 60.0),
    ]
}
