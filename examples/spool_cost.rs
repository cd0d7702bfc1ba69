//! What spooling an outcome costs with 1 and with 10,000 files already in
//! the spool: `Spool::save` (temporary file, fsync, rename, fsync of the
//! directory, the size cap checked against the count kept in memory) in a
//! spool prefilled with 1 and with `--files` outcomes, the median and best
//! of `--saves` saves each, and their ratio. For scale, what one listing of
//! the fuller spool costs (a delivery reads the directory so), and a full
//! reread of it (`Spool::pending`: every file listed and read).
//!
//! `cargo run --release --example spool_cost [-- --files N --saves S --dir DIR]`
//! (`DIR`: where the spools are made, default the temporary directory; the
//! fsyncs cost what that file system makes them cost).

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use cronlease::outcome::{Outcome, Status, Trigger};
use cronlease::spool::{DEFAULT_MAX_BYTES, Spool};

fn outcome(run_id: String) -> Outcome {
    Outcome {
        job: "draw".into(),
        tick_ms: 1_767_225_600_000,
        fence: 42,
        run_id,
        replica: "bench".into(),
        host: "localhost".into(),
        started_ms: 1_767_225_600_000,
        finished_ms: 1_767_225_600_250,
        status: Status::Ok,
        exit_code: Some(0),
        signal: None,
        attempts: 1,
        output: "winners: 4 8 15 16 23 42\n".repeat(20),
        trigger: Trigger::Schedule,
        lease_key: "cronlease:{draw}:lease".into(),
        cpu_ms: None,
        peak_memory_kb: None,
        oom_kills: None,
        upstream: None,
        params: Default::default(),
    }
}

/// The per-save times of `saves` saves into a spool that holds `files`.
fn measure(base: &std::path::Path, files: usize, saves: usize) -> (Vec<Duration>, Spool) {
    let state = tempfile::Builder::new()
        .prefix("spool-cost-")
        .tempdir_in(base)
        .expect("a temporary directory");
    let state = state.keep();
    let spool = Spool::open(&state, DEFAULT_MAX_BYTES).expect("the spool opens");
    // Prefilled without fsync (only the measured saves need it), then
    // opened again so that the spool counts what is there.
    let body = serde_json::to_vec(&outcome("prefill".into())).expect("an outcome serializes");
    for i in 0..files {
        std::fs::write(spool.dir().join(format!("prefill-{i:06}.json")), &body)
            .expect("a prefilled file");
    }
    let spool = Spool::open(&state, DEFAULT_MAX_BYTES).expect("the spool opens again");
    assert_eq!(spool.len(), files);
    let mut times = Vec::with_capacity(saves);
    for i in 0..saves {
        let outcome = outcome(format!("measured-{i:06}"));
        let start = Instant::now();
        spool.save(&outcome).expect("the outcome is saved");
        times.push(start.elapsed());
    }
    times.sort();
    (times, spool)
}

fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

fn main() -> ExitCode {
    let mut files = 10_000usize;
    let mut saves = 200usize;
    let mut dir = std::env::temp_dir();
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let value = args.next();
        match (arg.as_str(), value) {
            ("--files", Some(v)) if v.parse::<usize>().is_ok_and(|n| n > 1) => {
                files = v.parse().expect("checked")
            }
            ("--saves", Some(v)) if v.parse::<usize>().is_ok_and(|n| n > 0) => {
                saves = v.parse().expect("checked")
            }
            ("--dir", Some(v)) => dir = PathBuf::from(v),
            _ => {
                eprintln!("usage: spool_cost [--files N (>1)] [--saves S] [--dir DIR]");
                return ExitCode::from(2);
            }
        }
    }
    println!(
        "Spool::save, {saves} saves each, in {} (µs per save)",
        dir.display()
    );
    println!("{:>14} {:>10} {:>10}", "files before", "median", "best");
    let mut medians = Vec::new();
    let mut spools = Vec::new();
    for n in [1, files] {
        let (times, spool) = measure(&dir, n, saves);
        let median = times[times.len() / 2];
        println!(
            "{n:>14} {:>10.1} {:>10.1}",
            micros(median),
            micros(times[0])
        );
        medians.push(median);
        spools.push(spool);
    }
    println!(
        "ratio of the medians ({files} files / 1 file): {:.2}",
        medians[1].as_secs_f64() / medians[0].as_secs_f64()
    );
    let spool = &spools[1];
    let start = Instant::now();
    let listed = spool.listing().expect("the spool lists").len();
    let listing = start.elapsed();
    let start = Instant::now();
    let read = spool.pending().expect("the spool reads").len();
    let reread = start.elapsed();
    println!(
        "for scale, at {listed} files: one listing (each delivery) {:.1} ms; a full reread of {read} files {:.1} ms",
        micros(listing) / 1e3,
        micros(reread) / 1e3
    );
    for spool in &spools {
        if let Some(state) = spool.dir().parent() {
            let _ = std::fs::remove_dir_all(state);
        }
    }
    ExitCode::SUCCESS
}
