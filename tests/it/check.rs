//! `cronlease check`: the bad-input corpus, DST and weekday semantics, and
//! the example config.

use std::ffi::OsString;
use std::path::Path;

use serde_json::Value;

use crate::support::{ConfigFile, REDIS_SECTION, Run, cronlease};

/// A valid job body that cases modify.
const JOB: &str = "[jobs.draw]\nschedule = \"0 12 * * *\"\ncommand = [\"true\"]\n";

/// Runs `check` on `config` and asserts exit 2 and that stderr holds every
/// fragment.
#[track_caller]
fn check_rejected(case: &str, config: &str, fragments: &[&str]) {
    let file = ConfigFile::new(config);
    let run = check_file(file.path(), &[]);
    assert_eq!(
        run.code(),
        Some(2),
        "case {case:?}: unexpected exit status\n{}",
        run.describe()
    );
    let stderr = run.stderr();
    for fragment in fragments {
        assert!(
            stderr.contains(fragment),
            "case {case:?}: stderr lacks {fragment:?}\n{}",
            run.describe()
        );
    }
    assert!(
        !stderr.contains("panicked"),
        "case {case:?} panicked\n{}",
        run.describe()
    );
}

/// Runs `cronlease check --config PATH EXTRA…`.
fn check_file(path: &Path, extra: &[&str]) -> Run {
    let mut args: Vec<OsString> = vec!["check".into(), "--config".into(), path.into()];
    args.extend(extra.iter().map(OsString::from));
    cronlease(args)
}

#[test]
fn every_bad_input_is_rejected_with_its_place_and_what_is_valid() {
    let with_job = |extra: &str| format!("{REDIS_SECTION}{JOB}{extra}\n");
    let cases: Vec<(&str, String, Vec<&str>)> = vec![
        (
            "malformed toml",
            format!("{REDIS_SECTION}[jobs.draw\nschedule = 1\n"),
            vec!["jobs.toml:3:11", "invalid TOML"],
        ),
        (
            "unknown key",
            with_job("timout = \"5m\""),
            vec![
                "jobs.toml:6:1",
                "job \"draw\"",
                "field `timout`",
                "unknown field `timout`",
                "`timeout`",
            ],
        ),
        (
            "unknown section",
            format!("{REDIS_SECTION}{JOB}[job.x]\n"),
            vec!["jobs.toml:6:2", "unknown section `job`", "`jobs`"],
        ),
        (
            "unknown daemon key",
            format!("{REDIS_SECTION}[daemon]\nleas = \"10s\"\n{JOB}"),
            vec![
                "jobs.toml:4:1",
                "[daemon]",
                "unknown field `leas`",
                "`lease`",
            ],
        ),
        (
            "endless password file",
            format!("{REDIS_SECTION}password_file = \"/dev/zero\"\n{JOB}"),
            vec![
                "field `password_file`",
                "cannot read /dev/zero: larger than 65536 bytes",
            ],
        ),
        (
            "bad memory limit",
            format!(
                "{REDIS_SECTION}[jobs.draw]\nschedule = \"0 12 * * *\"\ncommand = [\"true\"]\nmemory_max = \"lots\"\n"
            ),
            vec![
                "job \"draw\"",
                "field `memory_max`",
                "invalid memory limit \"lots\"",
                "\"512M\"",
            ],
        ),
        (
            "bad cpu limit",
            format!(
                "{REDIS_SECTION}[jobs.draw]\nschedule = \"0 12 * * *\"\ncommand = [\"true\"]\ncpu_max = \"1.5\"\n"
            ),
            vec![
                "field `cpu_max`",
                "invalid CPU limit \"1.5\"",
                "\"200%\" (two CPUs)",
            ],
        ),
        (
            "bad dashboard address",
            format!("{REDIS_SECTION}[daemon]\ndashboard_listen = \"localhost\"\n{JOB}"),
            vec![
                "jobs.toml:4:20",
                "[daemon]",
                "field `dashboard_listen`",
                "invalid address \"localhost\"",
                "\"127.0.0.1:9465\"",
                "\"\" to turn it off",
            ],
        ),
        (
            "both dashboard token sources",
            format!(
                "{REDIS_SECTION}[daemon]\ndashboard_token_env = \"T\"\ndashboard_token_file = \"/etc/t\"\n{JOB}"
            ),
            vec![
                "jobs.toml:5:24",
                "field `dashboard_token_file`",
                "both dashboard_token_env and dashboard_token_file are set",
            ],
        ),
        (
            "inherit_env names the dashboard token's variable",
            format!(
                "{REDIS_SECTION}[daemon]\ndashboard_token_env = \"DASH\"\ninherit_env = [\"PATH\", \"DASH\"]\n{JOB}"
            ),
            vec![
                "[daemon]",
                "field `inherit_env`",
                "DASH holds a secret of the replica's",
                "env_files or env_credentials",
            ],
        ),
        (
            "a job's inherit_env names the Redis URL variable, or no name",
            with_job("inherit_env = [\"CRONLEASE_REDIS_URL\", \"A-B\"]"),
            vec![
                "job \"draw\", field `inherit_env`",
                "CRONLEASE_REDIS_URL holds a secret of the replica's",
                "invalid variable name \"A-B\"",
                "optionally ending in *",
            ],
        ),
        (
            "bad credential name",
            with_job("env_credentials = { API_KEY = \"../key\" }"),
            vec![
                "field `env_credentials`",
                "invalid credential name \"../key\"",
                "LoadCredential=",
            ],
        ),
        (
            "spool cap too small",
            format!("{REDIS_SECTION}[daemon]\nspool_max_bytes = 100\n{JOB}"),
            vec![
                "jobs.toml:4:19",
                "[daemon]",
                "field `spool_max_bytes`",
                "100 is out of range",
                "from 4096 (4 KiB) to 1099511627776 (1 TiB)",
                "268435456 (256 MiB, the default)",
            ],
        ),
        (
            "spool cap not a number",
            format!("{REDIS_SECTION}[daemon]\nspool_max_bytes = \"1G\"\n{JOB}"),
            vec!["field `spool_max_bytes`", "invalid type"],
        ),
        (
            "bad dashboard_read",
            format!(
                "{REDIS_SECTION}[daemon]\ndashboard_token_env = \"T\"\ndashboard_read = \"open\"\n{JOB}"
            ),
            vec![
                "jobs.toml:5:18",
                "[daemon]",
                "field `dashboard_read`",
                "invalid value \"open\"",
                "expected \"token\" or \"public\"",
            ],
        ),
        (
            "dashboard_read token without a token",
            format!("{REDIS_SECTION}[daemon]\ndashboard_read = \"token\"\n{JOB}"),
            vec![
                "field `dashboard_read`",
                "needs a token to log in with",
                "dashboard_token_env or dashboard_token_file",
            ],
        ),
        (
            "bad dashboard host",
            format!(
                "{REDIS_SECTION}[daemon]\ndashboard_hosts = [\"cron.example.com\", \"http://evil:80\"]\n{JOB}"
            ),
            vec![
                "field `dashboard_hosts`",
                "invalid host name \"http://evil:80\"",
                "without a port or scheme",
            ],
        ),
        (
            "bad token variable name",
            format!("{REDIS_SECTION}[daemon]\ndashboard_token_env = \"1-TOKEN\"\n{JOB}"),
            vec![
                "field `dashboard_token_env`",
                "invalid environment variable name \"1-TOKEN\"",
                "CRONLEASE_DASHBOARD_TOKEN",
            ],
        ),
        (
            "bad cron field",
            format!(
                "{REDIS_SECTION}[jobs.draw]\nschedule = \"61 12 * * *\"\ncommand = [\"true\"]\n"
            ),
            vec![
                "jobs.toml:4:12",
                "job \"draw\"",
                "field `schedule`",
                "minute 61 is out of range 0-59",
            ],
        ),
        (
            "bad cron shape",
            format!("{REDIS_SECTION}[jobs.draw]\nschedule = \"every day\"\ncommand = [\"true\"]\n"),
            vec!["field `schedule`", "2 fields", "expected 5 fields"],
        ),
        (
            "unknown macro",
            format!(
                "{REDIS_SECTION}[jobs.draw]\nschedule = \"@fortnightly\"\ncommand = [\"true\"]\n"
            ),
            vec!["unknown macro", "@daily"],
        ),
        (
            "reboot macro",
            format!("{REDIS_SECTION}[jobs.draw]\nschedule = \"@reboot\"\ncommand = [\"true\"]\n"),
            vec!["@reboot is not supported"],
        ),
        (
            "never fires",
            format!(
                "{REDIS_SECTION}[jobs.draw]\nschedule = \"0 0 31 2 *\"\ncommand = [\"true\"]\n"
            ),
            vec!["jobs.toml:4:12", "never fires"],
        ),
        (
            "bad time zone",
            with_job("timezone = \"Asia/Shangai\""),
            vec![
                "jobs.toml:6:12",
                "field `timezone`",
                "unknown time zone \"Asia/Shangai\"",
                "did you mean \"Asia/Shanghai\"",
                "IANA",
            ],
        ),
        (
            "command and shell",
            with_job("shell = \"echo hi\""),
            vec![
                "jobs.toml:6:9",
                "field `shell`",
                "both `command` and `shell`",
                "exactly one",
            ],
        ),
        (
            "neither command nor shell",
            format!("{REDIS_SECTION}[jobs.draw]\nschedule = \"@daily\"\n"),
            vec![
                "job \"draw\"",
                "field `command`",
                "neither `command` nor `shell`",
            ],
        ),
        (
            "empty argv",
            format!("{REDIS_SECTION}[jobs.draw]\nschedule = \"@daily\"\ncommand = []\n"),
            vec!["jobs.toml:5:11", "empty command"],
        ),
        (
            "argv not strings",
            format!(
                "{REDIS_SECTION}[jobs.draw]\nschedule = \"@daily\"\ncommand = \"backup --all\"\n"
            ),
            vec!["jobs.toml:5:11", "field `command`", "expected a sequence"],
        ),
        (
            "zero duration",
            with_job("timeout = \"0s\""),
            vec!["jobs.toml:6:11", "field `timeout`", "is zero", "\"30s\""],
        ),
        (
            "unparsable duration",
            with_job("retry_backoff = \"soon\""),
            vec![
                "field `retry_backoff`",
                "invalid duration \"soon\"",
                "\"500ms\"",
            ],
        ),
        (
            "absurd duration",
            with_job("misfire_grace = \"400d\""),
            vec!["field `misfire_grace`", "too long", "at most 7days"],
        ),
        (
            "absurd lease",
            format!("{REDIS_SECTION}[daemon]\nlease = \"2h\"\n{JOB}"),
            vec!["jobs.toml:4:9", "field `lease`", "too long", "at most 1h"],
        ),
        (
            "lease too short",
            format!("{REDIS_SECTION}[daemon]\nlease = \"500ms\"\n{JOB}"),
            vec!["field `lease`", "too short", "at least 1s"],
        ),
        (
            "lease too short for renewal",
            format!("{REDIS_SECTION}command_timeout = \"2s\"\n[daemon]\nlease = \"4s\"\n{JOB}"),
            vec![
                "field `lease`",
                "too short for its renewal period",
                "above 6s",
            ],
        ),
        (
            "bad overlap",
            with_job("overlap = \"queue\""),
            vec![
                "jobs.toml:6:11",
                "field `overlap`",
                "unknown variant `queue`",
                "`skip`, `allow`, `replace`",
            ],
        ),
        (
            "bad misfire",
            with_job("misfire = \"all\""),
            vec!["field `misfire`", "`run_once`, `skip`, `run_all`"],
        ),
        (
            "bad on_holder_lost",
            with_job("on_holder_lost = \"retry\""),
            vec!["field `on_holder_lost`", "expected `record` or `rerun`"],
        ),
        (
            "negative retries",
            with_job("retries = -1"),
            vec!["field `retries`", "-1 is out of range", "0 to 100"],
        ),
        (
            "bad job name",
            format!(
                "{REDIS_SECTION}[jobs.\"draw at noon\"]\nschedule = \"@daily\"\ncommand = [\"true\"]\n"
            ),
            vec![
                "jobs.toml:3:7",
                "invalid job name \"draw at noon\"",
                "A-Z a-z 0-9 _ . -",
            ],
        ),
        (
            "job name too long",
            format!(
                "{REDIS_SECTION}[jobs.{}]\nschedule = \"@daily\"\ncommand = [\"true\"]\n",
                "x".repeat(129)
            ),
            vec!["invalid job name", "1 to 128 characters"],
        ),
        (
            "missing redis url",
            format!("[redis]\nkey_prefix = \"x\"\n{JOB}"),
            vec!["[redis]", "field `url`", "missing `url`", "redis://"],
        ),
        (
            "missing redis section",
            JOB.to_string(),
            vec!["missing [redis] section"],
        ),
        (
            "bad redis url",
            format!("[redis]\nurl = \"http://user:hunter2@host\"\n{JOB}"),
            vec![
                "jobs.toml:2:7",
                "invalid Redis URL",
                "user:***@host",
                "rediss://",
            ],
        ),
        (
            "bad key prefix",
            format!("{REDIS_SECTION}key_prefix = \"a{{b}}\"\n{JOB}"),
            vec!["field `key_prefix`", "no braces"],
        ),
        (
            "reserved env",
            with_job("env = { CRONLEASE_FENCE = \"1\" }"),
            vec!["field `env`", "CRONLEASE_FENCE is reserved"],
        ),
        ("no jobs", REDIS_SECTION.to_string(), vec!["no jobs"]),
    ];
    for (case, config, fragments) in &cases {
        check_rejected(case, config, fragments);
    }
}

#[test]
fn all_problems_are_reported_at_once() {
    let config = format!(
        "{REDIS_SECTION}[daemon]\nlease = \"0s\"\n[jobs.a]\nschedule = \"0 12 * * *\"\ntimezone = \"Mars/Olympus\"\ncommand = []\ntimout = \"5m\"\noverlap = \"never\"\n"
    );
    let file = ConfigFile::new(&config);
    let run = check_file(file.path(), &[]).expect_code(2);
    let stderr = run.stderr();
    assert!(stderr.contains("5 problems"), "{}", run.describe());
    for fragment in [
        "jobs.toml:4:9",
        "jobs.toml:7:12",
        "jobs.toml:8:11",
        "jobs.toml:9:1",
        "jobs.toml:10:11",
    ] {
        assert!(
            stderr.contains(fragment),
            "lacks {fragment}\n{}",
            run.describe()
        );
    }
}

#[test]
fn unusable_files_are_rejected() {
    let run = cronlease(["check", "--config", "/nonexistent/jobs.toml"]).expect_code(2);
    assert!(
        run.stderr().contains("/nonexistent/jobs.toml") && run.stderr().contains("cannot open"),
        "{}",
        run.describe()
    );

    let dir = tempfile::tempdir().unwrap();
    let run = check_file(dir.path(), &[]).expect_code(2);
    assert!(
        run.stderr().contains("cannot read config file"),
        "{}",
        run.describe()
    );

    let big = ConfigFile::new(&format!(
        "{REDIS_SECTION}{JOB}# {}\n",
        "x".repeat(64 * 1024 * 1024)
    ));
    let run = check_file(big.path(), &[]).expect_code(2);
    assert!(
        run.stderr().contains("larger than 67108864 bytes"),
        "{}",
        run.describe()
    );

    let binary = tempfile::tempdir().unwrap();
    let path = binary.path().join("jobs.toml");
    std::fs::write(&path, b"[redis]\nurl = \"\xff\"\n").unwrap();
    let run = check_file(&path, &[]).expect_code(2);
    assert!(run.stderr().contains("not UTF-8"), "{}", run.describe());
}

/// Runs `check --json --from FROM` on one job and returns its next ticks.
fn next_ticks(schedule: &str, timezone: &str, from: &str, count: u32) -> Vec<String> {
    let file = ConfigFile::new(&format!(
        "{REDIS_SECTION}[jobs.j]\nschedule = \"{schedule}\"\ntimezone = \"{timezone}\"\ncommand = [\"true\"]\n"
    ));
    let run = check_file(
        file.path(),
        &["--json", "--from", from, "--count", &count.to_string()],
    )
    .expect_code(0);
    let json: Value =
        serde_json::from_str(&run.stdout()).unwrap_or_else(|e| panic!("{e}\n{}", run.describe()));
    let job = &json["jobs"][0];
    assert_eq!(job["name"], "j");
    assert_eq!(job["schedule"], schedule);
    assert_eq!(job["timezone"], timezone);
    job["next"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap().to_string())
        .collect()
}

#[test]
fn schedules_fire_as_vixie_cron_across_dst_and_weekdays() {
    // (schedule, zone, from, expected next ticks in UTC)
    let cases: &[(&str, &str, &str, &[&str])] = &[
        // Berlin, 2026-03-29: 02:00 CET jumps to 03:00 CEST. 02:30 does not
        // exist that day and runs at the first instant after the gap.
        (
            "30 2 * * *",
            "Europe/Berlin",
            "2026-03-28T12:00:00Z",
            &["2026-03-29T01:00:00Z", "2026-03-30T00:30:00Z"],
        ),
        // An hourly job keeps its hours on the UTC line through the gap.
        (
            "0 * * * *",
            "Europe/Berlin",
            "2026-03-28T23:30:00Z",
            &[
                "2026-03-29T00:00:00Z",
                "2026-03-29T01:00:00Z",
                "2026-03-29T02:00:00Z",
            ],
        ),
        // Berlin, 2026-10-25: 03:00 CEST falls back to 02:00 CET; 02:30
        // happens twice and the daily job runs once, the first time.
        (
            "30 2 * * *",
            "Europe/Berlin",
            "2026-10-24T12:00:00Z",
            &["2026-10-25T00:30:00Z", "2026-10-26T01:30:00Z"],
        ),
        // An interval job runs in both halves of the repeated hour.
        (
            "*/30 * * * *",
            "Europe/Berlin",
            "2026-10-24T23:45:00Z",
            &[
                "2026-10-25T00:00:00Z",
                "2026-10-25T00:30:00Z",
                "2026-10-25T01:00:00Z",
                "2026-10-25T01:30:00Z",
            ],
        ),
        // POSIX weekdays: 1-5 is Monday to Friday (2026-11-21 is a Saturday).
        (
            "0 9 * * 1-5",
            "UTC",
            "2026-11-21T00:00:00Z",
            &[
                "2026-11-23T09:00:00Z",
                "2026-11-24T09:00:00Z",
                "2026-11-25T09:00:00Z",
                "2026-11-26T09:00:00Z",
                "2026-11-27T09:00:00Z",
                "2026-11-30T09:00:00Z",
            ],
        ),
        // 0 and 7 are both Sunday.
        (
            "0 9 * * 7",
            "UTC",
            "2026-11-21T00:00:00Z",
            &["2026-11-22T09:00:00Z", "2026-11-29T09:00:00Z"],
        ),
        (
            "0 9 * * 0",
            "UTC",
            "2026-11-21T00:00:00Z",
            &["2026-11-22T09:00:00Z", "2026-11-29T09:00:00Z"],
        ),
        // Six fields: leading seconds.
        (
            "*/20 * * * * *",
            "UTC",
            "2026-01-01T00:00:00Z",
            &[
                "2026-01-01T00:00:20Z",
                "2026-01-01T00:00:40Z",
                "2026-01-01T00:01:00Z",
            ],
        ),
        // L, W and #.
        (
            "0 0 L * *",
            "UTC",
            "2026-02-01T00:00:00Z",
            &["2026-02-28T00:00:00Z", "2026-03-31T00:00:00Z"],
        ),
        (
            "0 0 15W * *",
            "UTC",
            "2026-08-01T00:00:00Z",
            &["2026-08-14T00:00:00Z"],
        ),
        (
            "0 0 * * 5#2",
            "UTC",
            "2026-11-01T00:00:00Z",
            &["2026-11-13T00:00:00Z", "2026-12-11T00:00:00Z"],
        ),
        // Macros, and the noon draw in Shanghai (UTC+8, no DST).
        (
            "@hourly",
            "UTC",
            "2026-01-01T00:30:00Z",
            &["2026-01-01T01:00:00Z"],
        ),
        (
            "@weekly",
            "UTC",
            "2026-11-21T00:00:00Z",
            &["2026-11-22T00:00:00Z"],
        ),
        (
            "0 12 * * *",
            "Asia/Shanghai",
            "2026-11-22T00:00:00Z",
            &["2026-11-22T04:00:00Z", "2026-11-23T04:00:00Z"],
        ),
    ];
    for (schedule, zone, from, expected) in cases {
        let next = next_ticks(schedule, zone, from, expected.len() as u32);
        assert_eq!(&next, expected, "{schedule:?} in {zone} from {from}");
    }
}

#[test]
fn the_example_config_is_valid_and_the_text_output_shows_both_zones() {
    let example = crate::support::repository().join("jobs.example.toml");
    let example = example.to_str().expect("a UTF-8 path");
    let run = cronlease([
        "check",
        "--config",
        example,
        "--from",
        "2026-11-22T00:00:00Z",
        "--count",
        "2",
    ])
    .expect_code(0);
    let stdout = run.stdout();
    assert!(stdout.contains("valid, 4 jobs"), "{}", run.describe());
    assert!(
        stdout.contains("2026-11-22 12:00:00 +08:00 Sun  =  2026-11-22T04:00:00Z"),
        "{}",
        run.describe()
    );
}

#[test]
fn help_and_version_work() {
    let run = cronlease(["--help"]).expect_code(0);
    assert!(run.stdout().contains("check"), "{}", run.describe());
    let run = cronlease(["check", "--help"]).expect_code(0);
    for flag in ["--config", "--from", "--count", "--json"] {
        assert!(run.stdout().contains(flag), "{}", run.describe());
    }
    let run = cronlease(["--version"]).expect_code(0);
    assert!(
        run.stdout().contains(env!("CARGO_PKG_VERSION")),
        "{}",
        run.describe()
    );
    let run = cronlease(["check", "--from", "yesterday"]).expect_code(2);
    assert!(run.stderr().contains("RFC 3339"), "{}", run.describe());
}

#[test]
fn a_job_whose_years_have_passed_is_valid_with_a_warning() {
    let file = ConfigFile::new(&format!(
        "{REDIS_SECTION}{JOB}[jobs.once]\nschedule = \"0 0 12 1 6 * 2020\"\ncommand = [\"true\"]\n"
    ));
    let run = check_file(file.path(), &["--from", "2026-11-23T00:00:00Z"]).expect_code(0);
    let stdout = run.stdout();
    for needle in [
        "valid, 2 jobs",
        "warning: job \"once\": schedule \"0 0 12 1 6 * 2020\" has no fire time after 2026-11-23 00:00:00 UTC (its year field ends at 2020)",
        "no fire time after 2026-11-23T00:00:00Z",
    ] {
        assert!(
            stdout.contains(needle),
            "lacks {needle:?}\n{}",
            run.describe()
        );
    }
    let run = check_file(file.path(), &["--json", "--from", "2026-11-23T00:00:00Z"]).expect_code(0);
    let json: Value = serde_json::from_str(&run.stdout()).unwrap();
    assert_eq!(json["jobs"][1]["name"], "once");
    assert_eq!(json["jobs"][1]["ended"], true);
    assert_eq!(json["jobs"][1]["next"], serde_json::json!([]));
    assert_eq!(json["jobs"][0]["ended"], false);
    assert_eq!(json["warnings"].as_array().map(Vec::len), Some(1), "{json}");
    // Before 2020 the same table fires, and has nothing to warn about.
    let run = check_file(file.path(), &["--json", "--from", "2019-01-01T00:00:00Z"]).expect_code(0);
    let json: Value = serde_json::from_str(&run.stdout()).unwrap();
    assert_eq!(json["jobs"][1]["next"][0], "2020-06-01T12:00:00Z");
    assert_eq!(json["warnings"], serde_json::json!([]));
}

#[test]
fn schedule_mistakes_are_named_with_their_place() {
    let job = |lines: &str| format!("{REDIS_SECTION}[jobs.draw]\n{lines}\ncommand = [\"true\"]\n");
    let cases: Vec<(&str, String, Vec<&str>)> = vec![
        (
            "table defined twice",
            format!(
                "{REDIS_SECTION}{JOB}\n[jobs.other]\nschedule = \"@daily\"\ncommand = [\"true\"]\n\n{JOB}"
            ),
            vec![
                "1 problem",
                "jobs.toml:11:1: table [jobs.draw] is defined twice (first at line 3)",
            ],
        ),
        (
            "key set twice",
            job("schedule = \"@daily\"\nschedule = \"@hourly\""),
            vec![
                "1 problem",
                "key `schedule` is set twice in [jobs.draw] (first at line 4)",
            ],
        ),
        (
            "no date at all",
            job("schedule = \"0 0 30 2 *\""),
            vec!["never fires", "day-of-month 30 never occurs in February"],
        ),
        (
            "reversed range",
            job("schedule = \"0 22-2 * * *\""),
            vec!["jobs.toml:4:12", "hour range \"22-2\" runs backwards"],
        ),
        (
            "cronie's random",
            job("schedule = \"0~30 * * * *\""),
            vec!["differ from replica to replica", "use H"],
        ),
        (
            "year beyond the calendar",
            job("schedule = \"0 0 0 1 1 * 10000\""),
            vec!["year 10000 is out of range 1970-9999"],
        ),
        (
            "dst policy on a wall-clock job",
            job("schedule = \"*/15 * * * *\"\ndst_gap = \"skip\""),
            vec![
                "jobs.toml:5:11",
                "field `dst_gap`",
                "applies to fixed-time jobs",
                "runs by the wall clock",
            ],
        ),
        (
            "unknown dst policy",
            job("schedule = \"30 2 * * *\"\ndst_repeat = \"twice\""),
            vec!["field `dst_repeat`", "first", "both"],
        ),
    ];
    for (case, config, fragments) in cases {
        check_rejected(case, &config, &fragments);
    }
}

#[test]
fn hashed_schedules_show_what_they_resolved_to() {
    let file = ConfigFile::new(&format!(
        "{REDIS_SECTION}[jobs.report]\nschedule = \"H H(1-5) * * *\"\ncommand = [\"true\"]\n\
         [jobs.backup]\nschedule = \"H/15 * * * *\"\ncommand = [\"true\"]\n"
    ));
    let resolved = || {
        let run = check_file(file.path(), &["--json"]).expect_code(0);
        let json: Value = serde_json::from_str(&run.stdout()).unwrap();
        let jobs = json["jobs"].as_array().unwrap().clone();
        jobs.iter()
            .map(|j| j["resolved"].as_str().unwrap().to_string())
            .collect::<Vec<_>>()
    };
    let first = resolved();
    assert_eq!(
        first,
        resolved(),
        "every run (every replica) resolves H the same"
    );
    // backup (sorted first): a start within the first 15 minutes, every 15.
    let minute = first[0].split(' ').next().unwrap();
    let start: u32 = minute.strip_suffix("-59/15").unwrap().parse().unwrap();
    assert!(start < 15, "{first:?}");
    // report: one minute and one hour 1-5, fixed time.
    let fields: Vec<u32> = first[1]
        .split(' ')
        .take(2)
        .map(|f| f.parse().unwrap())
        .collect();
    assert!(fields[0] < 60 && (1..=5).contains(&fields[1]), "{first:?}");
    let run = check_file(file.path(), &[]).expect_code(0);
    assert!(
        run.stdout()
            .contains(&format!("report  \"H H(1-5) * * *\" = {:?}", first[1])),
        "{}",
        run.describe()
    );
}

#[test]
fn an_ended_job_is_logged_when_a_replica_starts() {
    // No Redis is needed to see the start-up log: the replica logs the
    // warning before it connects, then keeps retrying until `timeout` stops it.
    let dir = tempfile::tempdir().unwrap();
    let file = ConfigFile::new(&format!(
        "{REDIS_SECTION}[daemon]\nstate_dir = {}\nmetrics_listen = \"\"\n\
         [jobs.once]\nschedule = \"0 0 12 1 6 * 2020\"\ncommand = [\"true\"]\n",
        crate::support::toml_string(&dir.path().to_string_lossy())
    ));
    let output = std::process::Command::new("timeout")
        .args(["--signal=TERM", "3"])
        .arg(crate::support::binary())
        .args(["run", "--config"])
        .arg(file.path())
        .stdin(std::process::Stdio::null())
        .output()
        .expect("coreutils' timeout runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("WARN")
            && stderr
                .contains("job \"once\": schedule \"0 0 12 1 6 * 2020\" has no fire time after"),
        "{stderr}"
    );
}

#[test]
fn a_dashboard_token_that_cannot_be_read_stops_the_replica_with_the_reason() {
    let redis = crate::support::RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    // A token too short to resist guessing is refused like a missing one.
    let short = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(short.path(), "secret\n").unwrap();
    let cases = [
        (
            "dashboard_token_env = \"CRONLEASE_TEST_NO_SUCH_TOKEN\"".to_string(),
            "[daemon] dashboard_token_env: the environment variable CRONLEASE_TEST_NO_SUCH_TOKEN is not set or empty",
        ),
        (
            format!(
                "dashboard_token_file = {}",
                crate::support::toml_string(&short.path().to_string_lossy())
            ),
            "the token is 6 bytes long; expected at least 16",
        ),
    ];
    for (setting, expected) in cases {
        let config = crate::support::write_config(
            dir.path(),
            &redis.url(),
            &format!("metrics_listen = \"\"\ndashboard_listen = \"127.0.0.1:0\"\n{setting}"),
            "[jobs.draw]\nschedule = \"0 12 * * *\"\ncommand = [\"true\"]\n",
        );
        let args = [
            OsString::from("run"),
            "--config".into(),
            config.into_os_string(),
        ];
        let run = crate::support::cronlease_with_env(args, &[]).expect_code(2);
        assert!(run.stderr().contains(expected), "{}", run.describe());
    }
}
