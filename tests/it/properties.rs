//! Property tests (proptest) of every reader of outside input: the config
//! loader, the schedule parser, the Redis reply readers, the heartbeat
//! record and the spool. The same readers are fuzzed with coverage guidance
//! by `fuzz/` (the guide, "Guarantees and failure modes"); these run in every `cargo test`, on
//! stable, and check what a fuzzer cannot see: that what is written reads
//! back unchanged, and that schedules built from valid fields parse and
//! tick forwards. Inputs are drawn at random around the fuzz seeds
//! (`fuzz/seeds/`); a failure prints the smallest input proptest found.

use std::collections::BTreeMap;
use std::path::Path;

use chrono::DateTime;
use cronlease::config::Config;
use cronlease::membership::{Heartbeat, RunInFlight};
use cronlease::outcome::{Outcome, Status, Trigger};
use cronlease::schedule::{DstPolicy, Schedule, Zone};
use cronlease::spool::{DEFAULT_MAX_BYTES, Spool};
use cronlease::store::fuzzing;
use cronlease::store::{ClaimReply, Recorded, StateCheck};
use cronlease::{DstGap, DstRepeat};
use proptest::prelude::*;
use redis::Value;

/// Configs the mutations start from: the example and the fuzz seeds.
const CONFIG_SEEDS: [&str; 5] = [
    include_str!("../../jobs.example.toml"),
    include_str!("../../fuzz/seeds/config/sentinel.toml"),
    include_str!("../../fuzz/seeds/config/quorum-tls.toml"),
    include_str!("../../fuzz/seeds/config/cluster-dst.toml"),
    include_str!("../../fuzz/seeds/config/bad-lease-too-short-for-renewal.toml"),
];

/// Words the scripts answer with, so random replies reach every branch.
const WORDS: [&str; 20] = [
    "claimed",
    "early",
    "taken",
    "paused",
    "busy",
    "wait",
    "expired",
    "lapsed",
    "corrupt",
    "current",
    "stale",
    "duplicate",
    "acquired",
    "reentered",
    "held",
    "job",
    "run_id",
    "requested_by",
    "1767268900000-0",
    "-1",
];

const ZONES: [&str; 6] = [
    "UTC",
    "Europe/Berlin",
    "America/New_York",
    "Australia/Lord_Howe",
    "Pacific/Chatham",
    "Asia/Kathmandu",
];

fn config_path() -> &'static Path {
    Path::new("/etc/cronlease/jobs.toml")
}

/// A seed config with `insert` put in at `at` (a char boundary at or
/// before it) and `cut` bytes removed there.
fn mutated_config() -> impl Strategy<Value = String> {
    (
        prop::sample::select(&CONFIG_SEEDS[..]),
        any::<prop::sample::Index>(),
        "(\\PC|[\\[\\]=\"'{},.\n#]){0,12}",
        0usize..16,
    )
        .prop_map(|(seed, at, insert, cut)| {
            let mut at = at.index(seed.len() + 1);
            while !seed.is_char_boundary(at) {
                at -= 1;
            }
            let mut end = (at + cut).min(seed.len());
            while !seed.is_char_boundary(end) {
                end -= 1;
            }
            format!("{}{insert}{}", &seed[..at], &seed[end..])
        })
}

/// Any Redis value, nested a few levels, with the scripts' words and
/// numbers (as integers and as text) more likely than noise.
fn reply() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Nil),
        Just(Value::Okay),
        any::<i64>().prop_map(Value::Int),
        prop_oneof![
            Just(0i64),
            Just(1),
            Just(-1),
            Just(i64::MAX),
            Just(i64::MIN)
        ]
        .prop_map(Value::Int),
        prop::sample::select(&WORDS[..]).prop_map(|w| Value::BulkString(w.as_bytes().to_vec())),
        any::<i64>().prop_map(|n| Value::BulkString(n.to_string().into_bytes())),
        prop::collection::vec(any::<u8>(), 0..12).prop_map(Value::BulkString),
        "\\PC{0,12}".prop_map(Value::SimpleString),
        any::<f64>().prop_map(Value::Double),
        any::<bool>().prop_map(Value::Boolean),
    ];
    leaf.prop_recursive(4, 48, 8, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..8).prop_map(Value::Array),
            prop::collection::vec((inner.clone(), inner.clone()), 0..4).prop_map(Value::Map),
            prop::collection::vec(inner, 0..4).prop_map(Value::Set),
        ]
    })
}

fn bulk(text: &str) -> Value {
    Value::BulkString(text.as_bytes().to_vec())
}

/// Every reply reader on `reply`: none may panic.
fn read_everywhere(reply: &Value) {
    let _ = fuzzing::claim(reply.clone());
    let _ = fuzzing::finish(reply.clone());
    let _ = fuzzing::sweep(reply.clone());
    let _ = fuzzing::manual(reply.clone());
    let _ = fuzzing::backfill_plan(reply.clone());
    let _ = fuzzing::backfill_take(reply.clone());
    let _ = fuzzing::lock(reply.clone());
    let _ = fuzzing::lock_holder("report", reply.clone());
    let _ = fuzzing::time(reply.clone());
    let _ = fuzzing::trigger_entry(reply.clone()).map(|r| r.requested_ms());
    let _ = fuzzing::trigger_read(reply.clone());
    let _ = fuzzing::trigger_auto_claim(reply.clone());
    if let Value::Array(items) = reply {
        let _ = fuzzing::renewals(items);
    }
}

/// One cron field of a valid shape in `low..=high`: `*`, a value, a range,
/// a step, or a list of those.
fn cron_field(low: u32, high: u32) -> impl Strategy<Value = String> {
    let one = prop_oneof![
        Just("*".to_string()),
        (low..=high).prop_map(|n| n.to_string()),
        (low..=high, low..=high).prop_map(|(a, b)| format!("{}-{}", a.min(b), a.max(b))),
        (1..=high.max(1)).prop_map(|step| format!("*/{step}")),
        (low..=high, 1..=high.max(1)).prop_map(move |(a, step)| format!("{a}-{high}/{step}")),
    ];
    prop::collection::vec(one, 1..3).prop_map(|parts| parts.join(","))
}

fn heartbeat() -> impl Strategy<Value = Heartbeat> {
    let run = ("\\PC{0,8}", "\\PC{0,8}", any::<i64>(), any::<u64>()).prop_map(
        |(job, run_id, tick_ms, fence)| RunInFlight {
            job,
            run_id,
            tick_ms,
            fence,
        },
    );
    (
        ("\\PC{0,12}", any::<u64>(), "\\PC{0,8}"),
        (any::<i64>(), any::<i64>(), any::<i64>(), any::<i64>()),
        prop::collection::btree_map("\\PC{0,8}", "[0-9a-f]{16}", 0..3),
        prop::collection::vec(run, 0..3),
    )
        .prop_map(
            |(
                (host, pid, version),
                (started_ms, last_seen_ms, heartbeat_ms, lease_ms),
                config_hash,
                runs,
            )| {
                Heartbeat {
                    host,
                    pid,
                    version,
                    started_ms,
                    last_seen_ms,
                    heartbeat_ms,
                    lease_ms,
                    config_hash: BTreeMap::from_iter(config_hash),
                    runs,
                    containment: (pid % 2 == 0).then(|| "cgroup".to_string()),
                    cluster_pause: None,
                    drain: None,
                    tags: Vec::new(),
                    max_runs: (pid % 3 == 0).then_some(2),
                }
            },
        )
}

fn outcome() -> impl Strategy<Value = Outcome> {
    let status = prop::sample::select(Status::ALL.to_vec());
    let trigger = prop::sample::select(vec![
        Trigger::Schedule,
        Trigger::Misfire,
        Trigger::Rerun,
        Trigger::Manual,
    ]);
    (
        (
            "\\PC{0,12}",
            any::<i64>(),
            any::<u64>(),
            prop_oneof!["\\PC{0,40}", "\\PC{200,300}"],
        ),
        ("\\PC{0,8}", "\\PC{0,8}", any::<i64>(), any::<i64>()),
        (
            status,
            any::<Option<i32>>(),
            any::<Option<i32>>(),
            any::<u32>(),
        ),
        ("\\PC{0,40}", trigger, "\\PC{0,12}"),
    )
        .prop_map(
            |(
                (job, tick_ms, fence, run_id),
                (replica, host, started_ms, finished_ms),
                (status, exit_code, signal, attempts),
                (output, trigger, lease_key),
            )| Outcome {
                job,
                tick_ms,
                fence,
                run_id,
                replica,
                host,
                started_ms,
                finished_ms,
                status,
                exit_code,
                signal,
                attempts,
                output,
                trigger,
                lease_key,
                // The usage fields, present or not, from the other values.
                cpu_ms: (attempts % 2 == 0).then_some(u64::from(attempts)),
                peak_memory_kb: (fence % 3 == 0).then_some(fence),
                oom_kills: (attempts % 5 == 0).then_some(1),
                upstream: None,
                params: Default::default(),
            },
        )
}

proptest! {
    #[test]
    fn any_text_as_a_config_is_loaded_or_refused_with_problems(text in "\\PC{0,200}") {
        if let Err(error) = Config::parse(&text, config_path()) {
            prop_assert!(!error.problems.is_empty());
        }
    }

    #[test]
    fn any_bytes_as_a_config_are_loaded_or_refused(bytes in prop::collection::vec(any::<u8>(), 0..300)) {
        let _ = Config::parse(&String::from_utf8_lossy(&bytes), config_path());
    }

    #[test]
    fn mutated_configs_are_loaded_or_refused_with_problems(text in mutated_config()) {
        match Config::parse(&text, config_path()) {
            Ok(config) => {
                let now = DateTime::from_timestamp(1_767_225_600, 0).unwrap();
                let _ = config.warnings(now);
                for job in config.jobs.values() {
                    let _ = job.schedule.as_ref().map(|s| s.describe());
                }
            }
            Err(error) => {
                prop_assert!(!error.problems.is_empty());
                let _ = error.to_string();
            }
        }
    }

    #[test]
    fn any_text_as_a_schedule_parses_or_is_refused(
        expression in "([0-9*/,\\-?LW#H() A-Za-z@]|\\PC){0,40}",
        zone in prop::sample::select(&ZONES[..]),
        after in -2_208_988_800i64..7_258_118_400,
    ) {
        let zone = Zone::parse(zone).unwrap();
        if let Ok(schedule) = Schedule::parse(&expression, zone, "job", DstPolicy::default()) {
            let _ = schedule.describe();
            let after = DateTime::from_timestamp(after, 0).unwrap();
            if let Some(tick) = schedule.next_after(after) {
                prop_assert!(tick > after);
            }
        }
    }

    #[test]
    fn schedules_from_valid_fields_parse_and_tick_strictly_forwards(
        fields in (
            cron_field(0, 59),
            cron_field(0, 23),
            prop_oneof![Just("*".to_string()), cron_field(1, 28)],
            cron_field(1, 12),
            cron_field(0, 6),
        ),
        zone in prop::sample::select(&ZONES[..]),
        job in "[a-z]{1,8}",
        skip in any::<bool>(),
        both in any::<bool>(),
        after in 0i64..4_102_444_800,
    ) {
        let (minute, hour, day, month, weekday) = fields;
        let expression = format!("{minute} {hour} {day} {month} {weekday}");
        let dst = DstPolicy {
            gap: if skip { DstGap::Skip } else { DstGap::RunAfter },
            repeat: if both { DstRepeat::Both } else { DstRepeat::First },
        };
        let schedule = Schedule::parse(&expression, Zone::parse(zone).unwrap(), &job, dst);
        let schedule = match schedule {
            Ok(schedule) => schedule,
            Err(e) => return Err(TestCaseError::fail(format!("{expression:?} in {zone}: {e}"))),
        };
        prop_assert!(!schedule.describe().is_empty());
        let after = DateTime::from_timestamp(after, 0).unwrap();
        let mut cursor = after;
        let ticks = schedule.upcoming(after, 3);
        prop_assert!(!ticks.is_empty(), "{expression:?} in {zone}: no tick after {after}");
        for tick in ticks {
            prop_assert!(tick > cursor, "{expression:?} in {zone}: {tick} not after {cursor}");
            cursor = tick;
        }
    }

    #[test]
    fn any_reply_is_read_or_refused_by_every_reader(reply in reply()) {
        read_everywhere(&reply);
    }

    #[test]
    fn script_shaped_replies_are_read_or_refused_by_every_reader(
        word in prop::sample::select(&WORDS[..]),
        rest in prop::collection::vec(reply(), 0..8),
    ) {
        let mut items = vec![bulk(word)];
        items.extend(rest);
        read_everywhere(&Value::Array(items));
    }

    #[test]
    fn a_claimed_reply_reads_back_as_written(
        fence in 0..=i64::MAX,
        started_ms in any::<i64>(),
        lease_key in "\\PC{0,20}",
        expired in any::<u32>(),
        regressed in any::<bool>(),
        previous in any::<i64>(),
        redis_now_us in any::<i64>(),
    ) {
        let reply = Value::Array(vec![
            bulk("claimed"),
            Value::Int(fence),
            Value::Int(started_ms),
            bulk(&lease_key),
            Value::Int(i64::from(expired)),
            Value::Int(i64::from(regressed)),
            Value::Int(previous),
            Value::Int(redis_now_us),
        ]);
        prop_assert_eq!(
            fuzzing::claim(reply).unwrap(),
            ClaimReply::Claimed {
                fence: fence as u64,
                started_ms,
                lease_key,
                expired,
                state: if regressed { StateCheck::Behind } else { StateCheck::Sound },
                previous,
                acked: None,
                redis_now_us,
            }
        );
    }

    #[test]
    fn a_negative_fence_is_refused_never_wrapped(fence in i64::MIN..0) {
        let claimed = Value::Array(vec![bulk("claimed"), Value::Int(fence), Value::Int(1), bulk("k")]);
        prop_assert!(fuzzing::claim(claimed).is_err());
        prop_assert!(fuzzing::lock(Value::Int(fence)).is_err());
        let reentered = Value::Array(vec![bulk("reentered"), Value::Int(fence), Value::Int(2)]);
        prop_assert!(fuzzing::lock(reentered).is_err());
    }

    #[test]
    fn a_finish_reply_with_its_rerun_reads_back_as_written(
        kind in prop::sample::select(vec![("current", Recorded::Current), ("restored", Recorded::Restored), ("stale", Recorded::Stale), ("duplicate", Recorded::Duplicate)]),
        id in "[0-9]{1,13}-[0-9]{1,3}",
        rerun in proptest::option::of((any::<i64>(), 0..=i64::MAX, "\\PC{0,20}", any::<i64>())),
    ) {
        let mut items = vec![bulk(kind.0), bulk(&id)];
        if let Some((tick_ms, fence, lease_key, started_ms)) = &rerun {
            items.extend([Value::Int(*tick_ms), Value::Int(*fence), bulk(lease_key), Value::Int(*started_ms)]);
        }
        let read = fuzzing::finish(Value::Array(items)).unwrap();
        prop_assert_eq!(read.recorded, kind.1);
        prop_assert_eq!(read.id, id);
        prop_assert_eq!(
            read.rerun.map(|r| (r.tick_ms, r.fence as i64, r.lease_key, r.started_ms)),
            rerun
        );
    }

    #[test]
    fn a_trigger_entry_reads_back_in_any_field_order(
        id in "[0-9]{1,13}-[0-9]{1,3}",
        job in "\\PC{0,12}",
        run_id in "\\PC{0,12}",
        requested_by in "\\PC{0,12}",
        order in Just(vec![0usize, 1, 2]).prop_shuffle(),
        extra in proptest::option::of(("[a-z]{1,6}", "\\PC{0,6}")),
    ) {
        let values = [("job", &job), ("run_id", &run_id), ("requested_by", &requested_by)];
        let mut fields = Vec::new();
        for i in order {
            fields.extend([bulk(values[i].0), bulk(values[i].1)]);
        }
        if let Some((name, value)) = &extra
            && !["job", "run_id", "requested_by"].contains(&name.as_str())
        {
            fields.extend([bulk(name), bulk(value)]);
        }
        let entry = Value::Array(vec![bulk(&id), Value::Array(fields)]);
        let request = fuzzing::trigger_entry(entry).unwrap();
        prop_assert_eq!(request.requested_ms(), id.split('-').next().unwrap().parse::<i64>().unwrap());
        prop_assert_eq!(
            (request.id.as_str(), request.job, request.run_id, request.requested_by),
            (id.as_str(), job, run_id, requested_by)
        );
    }

    #[test]
    fn any_text_as_a_heartbeat_is_read_or_refused(text in "\\PC{0,120}") {
        if let Ok(record) = Heartbeat::parse(&text) {
            let _ = record.is_alive(0);
        }
    }

    #[test]
    fn a_heartbeat_reads_back_as_written_and_is_judged_at_any_time(
        record in heartbeat(),
        now_ms in any::<i64>(),
        own_heartbeat_ms in any::<i64>(),
    ) {
        prop_assert_eq!(Heartbeat::parse(&record.to_json()).unwrap(), record.clone());
        let _ = record.is_alive(now_ms);
        let _ = record.sweep_until_ms(own_heartbeat_ms);
    }
}

proptest! {
    // File I/O each case: fewer cases.
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn an_outcome_reads_back_from_the_spool_as_written(outcome in outcome()) {
        let dir = tempfile::tempdir().unwrap();
        let spool = Spool::open(dir.path(), DEFAULT_MAX_BYTES).unwrap();
        let _ = outcome.stream_fields();
        let path = spool.save(&outcome).unwrap();
        let in_spool = dir.path().join("spool");
        prop_assert_eq!(path.parent(), Some(in_spool.as_path()));
        let pending = spool.pending().unwrap();
        prop_assert_eq!(pending.len(), 1);
        prop_assert_eq!(&pending[0].0, &path);
        prop_assert_eq!(pending[0].1.as_ref().unwrap(), &outcome);
    }

    #[test]
    fn a_spool_file_of_any_bytes_is_read_or_refused(
        bytes in prop_oneof![
            prop::collection::vec(any::<u8>(), 0..200),
            outcome().prop_flat_map(|o| {
                let json = serde_json::to_vec(&o).unwrap();
                let len = json.len();
                (Just(json), 0..=len).prop_map(|(json, cut)| json[..cut].to_vec())
            }),
        ],
    ) {
        let dir = tempfile::tempdir().unwrap();
        let spool = Spool::open(dir.path(), DEFAULT_MAX_BYTES).unwrap();
        std::fs::write(dir.path().join("spool").join("run.json"), &bytes).unwrap();
        let pending = spool.pending().unwrap();
        prop_assert_eq!(pending.len(), 1);
        if let Ok(outcome) = &pending[0].1 {
            let _ = outcome.stream_fields();
        }
    }
}
