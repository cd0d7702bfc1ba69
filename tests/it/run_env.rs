//! What a run gets of its replica's environment: an allowlist, never the
//! replica's secrets; secrets of its own from env files and systemd
//! credentials, read at each run; and every secret it was given, or the
//! replica holds, redacted from its output and the log. Real replicas and
//! `cronlease lock` against a private Redis with a password.

use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

use crate::support::{Cluster, RedisServer, cronlease_with_env, toml_string, wait_until};

const REDIS_PASSWORD: &str = "redis-secret-pw-123";
const DASHBOARD_TOKEN: &str = "the-dashboard-token-0123456789";
const FILE_SECRET: &str = "file-secret-456";
const CREDENTIAL: &str = "cred-secret-789";

#[test]
fn a_job_dumping_its_environment_finds_no_secret_and_printed_secrets_are_redacted() {
    // The replicas' user has a password; the test's own client stays the
    // default user.
    let redis = RedisServer::start();
    redis::cmd("ACL")
        .arg(&[
            "SETUSER",
            "cronlease",
            "on",
            &format!(">{REDIS_PASSWORD}"),
            "~*",
            "&*",
            "+@all",
        ])
        .query::<()>(&mut redis.client())
        .expect("ACL SETUSER");
    let section = format!(
        "url = {}\nusername = \"cronlease\"\npassword_env = \"REDIS_PASSWORD\"\n",
        toml_string(&redis.url())
    );
    let mut cluster = Cluster::with_section(redis, &section);
    let env_file = cluster.path("db.env");
    std::fs::write(
        &env_file,
        format!("# the job's database\nDB_PASSWORD={FILE_SECRET}\n"),
    )
    .expect("write the env file");
    std::fs::set_permissions(&env_file, PermissionsExt::from_mode(0o600)).expect("chmod");
    let credentials = cluster.path("credentials");
    std::fs::create_dir_all(&credentials).expect("mkdir");
    std::fs::write(credentials.join("api-key"), format!("{CREDENTIAL}\n")).expect("write");
    let redis_url = format!("redis://:{REDIS_PASSWORD}@127.0.0.1:1/0");
    cluster.env = [
        ("REDIS_PASSWORD", REDIS_PASSWORD),
        ("DASH_TOKEN", DASHBOARD_TOKEN),
        ("CRONLEASE_REDIS_URL", redis_url.as_str()),
        ("CREDENTIALS_DIRECTORY", &credentials.to_string_lossy()),
        ("UNLISTED_VAR", "not-for-jobs"),
        ("KEPT_VAR", "kept"),
    ]
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .to_vec();
    let dump = cluster.path("env-dump");
    let jobs = format!(
        "[jobs.dump]\nschedule = \"* * * * * *\"\n\
         shell = '''env > {dump}; echo \"$DB_PASSWORD $API_KEY {REDIS_PASSWORD} {DASHBOARD_TOKEN} $KEPT_VAR\"'''\n\
         env_files = [{file}]\n\
         env_credentials = {{ API_KEY = \"api-key\" }}\n\
         inherit_env = [\"KEPT_*\"]\n",
        dump = dump.display(),
        file = toml_string(&env_file.to_string_lossy()),
    );
    cluster.start_with(
        "a",
        "metrics_listen = \"\"\ndashboard_listen = \"127.0.0.1:0\"\ndashboard_token_env = \"DASH_TOKEN\"\n",
        &jobs,
        None,
    );
    cluster.wait_ready();
    let outcome = wait_until(Duration::from_secs(20), "an outcome", || {
        cluster.outcomes("dump").into_iter().next()
    });
    cluster.stop_all();
    let log = cluster.logs();
    assert_eq!(outcome.status(), "ok", "{outcome:?}\n{log}");
    let output = outcome.field("output").unwrap_or_default();
    assert!(
        output.contains("[redacted] [redacted] [redacted] [redacted] kept"),
        "{output:?}"
    );
    let dumped = std::fs::read_to_string(&dump).expect("the job wrote its environment");
    for secret in [REDIS_PASSWORD, DASHBOARD_TOKEN] {
        assert!(
            !dumped.contains(secret),
            "a replica secret reached the job:\n{dumped}"
        );
        assert!(!log.contains(secret), "a secret reached the log:\n{log}");
    }
    for absent in [
        "REDIS_PASSWORD=",
        "DASH_TOKEN=",
        "CRONLEASE_REDIS_URL=",
        "UNLISTED_VAR=",
        "CREDENTIALS_DIRECTORY=",
    ] {
        assert!(
            !dumped.contains(absent),
            "{absent} reached the job:\n{dumped}"
        );
    }
    for present in [
        "KEPT_VAR=kept".to_string(),
        format!("DB_PASSWORD={FILE_SECRET}"),
        format!("API_KEY={CREDENTIAL}"),
        "CRONLEASE_JOB=dump".to_string(),
        "PATH=".to_string(),
    ] {
        assert!(
            dumped.lines().any(|l| l.starts_with(&present)),
            "{present} missing:\n{dumped}"
        );
    }
    for secret in [FILE_SECRET, CREDENTIAL] {
        assert!(
            !log.contains(secret),
            "a job's secret reached the log:\n{log}"
        );
    }
    // The replica said once which variables runs no longer inherit, by name.
    let line = log
        .lines()
        .find(|l| l.contains("no run inherits these variables"))
        .unwrap_or_else(|| panic!("no start-up line about the environment\n{log}"));
    assert!(
        line.contains("UNLISTED_VAR") && !line.contains("not-for-jobs"),
        "{line}"
    );
    assert!(!line.contains("KEPT_VAR"), "{line}");
}

#[test]
fn an_env_file_others_can_write_is_refused_and_the_run_says_why() {
    let mut cluster = Cluster::new(RedisServer::start());
    let env_file = cluster.path("shared.env");
    std::fs::write(&env_file, "TOKEN=abcdef\n").expect("write");
    std::fs::set_permissions(&env_file, PermissionsExt::from_mode(0o666)).expect("chmod");
    let jobs = format!(
        "[jobs.guarded]\nschedule = \"* * * * * *\"\ncommand = [\"true\"]\nenv_files = [{}]\n",
        toml_string(&env_file.to_string_lossy())
    );
    cluster.start("a", &jobs);
    cluster.wait_ready();
    let outcome = wait_until(Duration::from_secs(20), "an outcome", || {
        cluster.outcomes("guarded").into_iter().next()
    });
    cluster.stop_all();
    assert_eq!(outcome.status(), "failed", "{outcome:?}");
    let output = outcome.field("output").unwrap_or_default();
    assert!(
        output.contains("writable by its group or others"),
        "{output}"
    );
    assert!(!output.contains("abcdef"), "{output}");
}

#[test]
fn the_lock_commands_command_gets_the_allowlist_and_never_the_redis_url() {
    let redis = RedisServer::start();
    let url = redis.url();
    let run = cronlease_with_env(
        [
            "lock",
            "--redis-url",
            url.as_str(),
            "--inherit-env",
            "EXTRA_*",
            "job-lock",
            "--",
            "/usr/bin/env",
        ],
        &[
            ("CRONLEASE_REDIS_URL", url.as_str()),
            ("EXTRA_ONE", "1"),
            ("OTHER_VAR", "2"),
        ],
    )
    .expect_code(0);
    let out = run.stdout();
    assert!(out.contains("EXTRA_ONE=1"), "{}", run.describe());
    assert!(
        out.contains("CRONLEASE_LOCK=job-lock"),
        "{}",
        run.describe()
    );
    assert!(!out.contains("OTHER_VAR"), "{}", run.describe());
    assert!(!out.contains("CRONLEASE_REDIS_URL"), "{}", run.describe());
}

#[test]
fn a_run_keeps_the_open_files_limit_the_replica_started_with() {
    let mut cluster = Cluster::new(RedisServer::start());
    let file = cluster.path("limit");
    let jobs = format!(
        "[jobs.limit]\nschedule = \"* * * * * *\"\nshell = 'ulimit -n > {}'\n",
        file.display()
    );
    // The replica raises its own soft limit to the hard one for its servers;
    // a run gets the 1,024 it started with (what `select` needs).
    let wrapper = ["prlimit", "--nofile=1024:8192", "--"]
        .map(String::from)
        .to_vec();
    cluster.start_with("a", "", &jobs, Some(wrapper));
    cluster.wait_ready();
    let limit = wait_until(Duration::from_secs(20), "a run", || {
        std::fs::read_to_string(&file)
            .ok()
            .filter(|s| !s.is_empty())
    });
    cluster.stop_all();
    assert_eq!(limit.trim(), "1024");
    assert!(
        cluster
            .logs()
            .contains("raised the soft limit on open files"),
        "{}",
        cluster.logs()
    );
}
