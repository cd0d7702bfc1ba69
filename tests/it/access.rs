//! Access from the command line: actions are recorded under the operating
//! system's user, and the Redis ACL rules the guide's "Access" page gives
//! viewers, operators and operators of some jobs allow exactly what the
//! page says.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::support::{
    Cluster, RedisServer, Run, cronlease_with_env, repository, toml_string, wait_until,
};

/// The password every ACL user of these tests has.
const PASSWORD: &str = "Acl-test-pw";

/// The variable that hands [`PASSWORD`] to the commands.
const PASSWORD_ENV: &str = "CRONLEASE_TEST_ACL_PASSWORD";

/// A schedule that never comes during a test.
const NEVER: &str = "0 0 1 1 *";

/// The jobs: `beat` every second, `slow` and `billing-eu` that only run
/// when triggered.
fn jobs() -> String {
    format!(
        "[jobs.beat]\nschedule = \"* * * * * *\"\ncommand = [\"true\"]\n\n\
         [jobs.slow]\nschedule = \"{NEVER}\"\ncommand = [\"sleep\", \"30\"]\n\n\
         [jobs.billing-eu]\nschedule = \"{NEVER}\"\ncommand = [\"sleep\", \"30\"]\n"
    )
}

/// The output of `program ARGS…`, trimmed; it must succeed.
fn output_of(program: &str, args: &[&str]) -> String {
    let out = Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {program}: {e}"));
    assert!(out.status.success(), "{program} {args:?} failed: {out:?}");
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// A cluster with the jobs and one replica `a` (the default Redis user),
/// ready.
fn cluster_with_a_replica() -> Cluster {
    let mut cluster = Cluster::new(RedisServer::start());
    cluster.start("a", &jobs());
    cluster.wait_ready();
    cluster
}

/// `cronlease ARGS… --config CONFIG` with the ACL password and `env`.
fn as_user(config: &Path, args: &[&str], env: &[(&str, &str)]) -> Run {
    // The config right after the command: `lock NAME -- COMMAND` takes
    // all that follows `--`.
    let mut all: Vec<&str> = args[..1].to_vec();
    all.extend(["--config", config.to_str().expect("a UTF-8 path")]);
    all.extend(&args[1..]);
    let mut env = env.to_vec();
    env.push((PASSWORD_ENV, PASSWORD));
    cronlease_with_env(all, &env)
}

#[test]
fn actions_are_recorded_under_the_operating_system_user() {
    let cluster = cluster_with_a_replica();
    let config = cluster.config_path("a");
    let expected = format!(
        "{}@{}",
        output_of("id", &["-un"]),
        output_of("hostname", &[])
    );
    let forged = [("USER", "mallory"), ("LOGNAME", "mallory")];
    let paused = as_user(&config, &["pause", "beat"], &forged).expect_code(0);
    assert!(
        paused.stdout().contains(&format!("paused by {expected}")),
        "{}",
        paused.describe()
    );
    let by: String = redis::cmd("HGET")
        .arg("cl:{beat}:state")
        .arg("paused_by")
        .query(&mut cluster.redis.client())
        .expect("HGET paused_by");
    assert_eq!(by, expected);
    assert_eq!(who_acted(&cluster, "beat"), std::slice::from_ref(&expected));
    as_user(&config, &["trigger", "slow"], &forged).expect_code(0);
    assert_eq!(who_acted(&cluster, "slow"), [expected]);
}

/// Who took each action in `job`'s actions stream, oldest first.
fn who_acted(cluster: &Cluster, job: &str) -> Vec<String> {
    let actions: redis::streams::StreamRangeReply = redis::cmd("XRANGE")
        .arg(format!("cl:{{{job}}}:actions"))
        .arg("-")
        .arg("+")
        .query(&mut cluster.redis.client())
        .expect("XRANGE actions");
    actions
        .ids
        .iter()
        .filter_map(|entry| entry.get::<String>("who"))
        .collect()
}

/// The `ACL SETUSER` lines of the guide's "Access" page, with the test's
/// password in place of `PASSWORD`.
fn guide_rules() -> Vec<String> {
    let page = repository().join("docs/src/access.md");
    let text = std::fs::read_to_string(&page)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", page.display()));
    let rules: Vec<String> = text
        .lines()
        .filter(|line| line.starts_with("ACL SETUSER "))
        .map(|line| line.replace(">PASSWORD", &format!(">{PASSWORD}")))
        .collect();
    assert_eq!(rules.len(), 3, "the page's rules: {rules:?}");
    rules
}

/// Creates the guide's users; returns, per user, a config that connects as
/// it (beside replica `a`'s).
fn guide_users(cluster: &Cluster) -> Vec<(String, PathBuf)> {
    let mut admin = cluster.redis.client();
    guide_rules()
        .iter()
        .map(|rule| {
            let words: Vec<&str> = rule.split_whitespace().collect();
            redis::cmd(words[0])
                .arg(&words[1..])
                .query::<()>(&mut admin)
                .unwrap_or_else(|e| panic!("{rule}: {e}"));
            let user = words[2].to_owned();
            let section = format!(
                "url = {}\nusername = {}\npassword_env = {}\n",
                toml_string(&cluster.redis.url()),
                toml_string(&user),
                toml_string(PASSWORD_ENV)
            );
            let dir = cluster.path(&user);
            std::fs::create_dir_all(&dir).expect("cannot create a user's directory");
            let extra = format!("replica_id = \"{user}\"\n");
            let config = crate::support::write_config_section(&dir, &section, &extra, &jobs());
            (user, config)
        })
        .collect()
}

/// Runs `args` as the user of `config`: exit 0 when `allowed`, else the
/// refusal the page shows.
#[track_caller]
fn check(config: &Path, args: &[&str], allowed: Allowed) {
    let run = as_user(config, args, &[]);
    match allowed {
        Allowed::Yes => {
            run.expect_code(0);
        }
        Allowed::No => {
            let run = run.expect_code(1);
            assert!(
                run.stderr().contains("Redis refused it") && run.stderr().contains("\"Access\""),
                "{}",
                run.describe()
            );
        }
    }
}

/// Whether a user may take an action.
#[derive(Clone, Copy)]
enum Allowed {
    Yes,
    No,
}

#[test]
fn redis_acl_rules_of_the_guide_give_each_user_what_it_says() {
    use Allowed::{No, Yes};
    let cluster = cluster_with_a_replica();
    let users = guide_users(&cluster);
    let [(_, viewer), (_, operator), (_, billing)] = &users[..] else {
        panic!("three users: {users:?}");
    };
    for reads in [&["status"][..], &["history", "beat"], &["explain", "beat"]] {
        for config in [viewer, operator, billing] {
            check(config, reads, Yes);
        }
    }
    for action in [
        &["pause", "beat"][..],
        &["trigger", "slow"],
        &["drain", "a"],
        &["pause", "--all"],
    ] {
        check(viewer, action, No);
        check(billing, action, No);
    }

    check(
        billing,
        &["pause", "billing-eu", "--reason", "month end"],
        Yes,
    );
    check(billing, &["resume", "billing-eu"], Yes);
    check(operator, &["pause", "beat", "--until", "1h"], Yes);
    check(operator, &["resume", "beat"], Yes);
    check(operator, &["drain", "a"], Yes);
    check(operator, &["undrain", "a"], Yes);
    check(operator, &["pause", "--all", "--until", "10m"], Yes);
    check(operator, &["resume", "--all"], Yes);
    check(operator, &["lock", "deploy", "--", "true"], Yes);
    // Requests share one stream: operators of some jobs cannot trigger, so
    // an operator triggers the run that the billing user kills.
    for (killer, job) in [(operator, "slow"), (billing, "billing-eu")] {
        let run_id = as_user(operator, &["trigger", job], &[])
            .expect_code(0)
            .stdout()
            .trim()
            .to_owned();
        let running = format!("cl:{{{job}}}:running");
        wait_until(Duration::from_secs(20), "the run started", || {
            redis::cmd("HEXISTS")
                .arg(&running)
                .arg(&run_id)
                .query::<bool>(&mut cluster.redis.client())
                .ok()
                .filter(|started| *started)
        });
        check(killer, &["kill", job], Yes);
    }
    check(billing, &["kill", "beat"], No);
}
