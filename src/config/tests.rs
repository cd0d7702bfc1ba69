use std::path::Path;

use super::checker::line_col;
use super::*;

fn parse(text: &str) -> Result<Config, ConfigError> {
    Config::parse(text, Path::new("/etc/cronlease/jobs.toml"))
}

#[test]
fn durations() {
    let check = |text: &str, expected: Result<u64, &str>| {
        let got = parse_duration(text, Duration::from_secs(3600)).map(|d| d.as_millis() as u64);
        match (got, expected) {
            (Ok(ms), Ok(want)) => assert_eq!(ms, want, "{text}"),
            (Err(message), Err(fragment)) => {
                assert!(message.contains(fragment), "{text}: {message}")
            }
            (got, want) => panic!("{text}: got {got:?}, want {want:?}"),
        }
    };
    check("500ms", Ok(500));
    check("30s", Ok(30_000));
    check("5m", Ok(300_000));
    check("1h", Ok(3_600_000));
    check("1m 30s", Ok(90_000));
    check("0s", Err("is zero"));
    check("2h", Err("too long"));
    check("5", Err("invalid duration"));
    check("soon", Err("invalid duration"));
}

#[test]
fn line_and_column() {
    let text = "a\nbc\n\u{e9}x";
    assert_eq!(line_col(text, 0), (1, 1));
    assert_eq!(line_col(text, 3), (2, 2));
    assert_eq!(line_col(text, 7), (3, 2));
}

#[test]
fn urls_are_redacted() {
    assert_eq!(
        redact_url("redis://u:secret@h:6379/0"),
        "redis://u:***@h:6379/0"
    );
    assert_eq!(redact_url("rediss://:secret@h/0"), "rediss://:***@h/0");
    assert_eq!(redact_url("redis://token@h"), "redis://***@h");
    assert_eq!(redact_url("redis://h:6379/0"), "redis://h:6379/0");
    assert_eq!(
        redact_url("redis://u:pa/ss?w@rd@h:6379/0"),
        "redis://u:***@h:6379/0"
    );
    assert_eq!(
        redact_url("redis+unix:///run/redis.sock?db=0&pass=s3cret"),
        "redis+unix:///run/redis.sock?db=0&pass=***"
    );
}

#[test]
fn defaults_and_resolution() {
    let config = parse(
        "[redis]\nurl = \"redis://127.0.0.1:6390/2\"\n[jobs.a]\nschedule = \"@hourly\"\nshell = \"echo hi\"\nworkdir = \"work\"\n",
    )
    .unwrap();
    assert_eq!(config.redis.key_prefix, "cronlease");
    assert_eq!(config.daemon.lease, Duration::from_secs(30));
    assert_eq!(config.daemon.state_dir, PathBuf::from(DEFAULT_STATE_DIR));
    assert_eq!(config.daemon.history, 1000);
    let job = &config.jobs["a"];
    assert_eq!(job.command, Command::Shell("echo hi".into()));
    assert_eq!(job.workdir, PathBuf::from("/etc/cronlease/work"));
    assert_eq!(job.overlap, Overlap::Skip);
    assert_eq!(job.misfire, Misfire::RunOnce);
    assert_eq!(job.on_holder_lost, OnHolderLost::Record);
    assert_eq!(job.timeout, None);
    assert_eq!(job.retries, 0);
}

#[test]
fn the_password_never_appears_in_errors_or_debug() {
    let err = parse("[redis]\nurl = \"ftp://u:hunter2@h\"\n[jobs.a]\nschedule = \"@daily\"\ncommand = [\"x\"]\n").unwrap_err();
    assert!(!err.to_string().contains("hunter2"), "{err}");
    let config = parse("[redis]\nurl = \"redis://u:hunter2@h\"\n[jobs.a]\nschedule = \"@daily\"\ncommand = [\"x\"]\n").unwrap();
    assert!(!format!("{config:?}").contains("hunter2"));
}

#[test]
fn redis_deployments_are_checked_with_the_field_that_is_wrong() {
    let redis = |section: &str| {
        let text =
            format!("[redis]\n{section}\n[jobs.a]\nschedule = \"@daily\"\ncommand = [\"x\"]\n");
        parse(&text).map(|c| c.redis).map_err(|e| e.to_string())
    };
    let expect_error = |section: &str, fragment: &str| {
        let err = redis(section).expect_err(section);
        assert!(err.contains(fragment), "{section}: {err}");
    };
    expect_error(
        "url = \"redis://h\"\ncluster = [\"redis://h:7000\"]",
        "`cluster` and `url` are both set",
    );
    expect_error(
        "sentinels = [\"redis://h:26379\"]",
        "field `master_name`: missing `master_name`",
    );
    expect_error(
        "quorum = [\"redis://a\", \"redis://b\"]",
        "field `quorum`: `quorum` has 2 URL(s): expected at least 3",
    );
    expect_error(
        "quorum = [\"redis://a\", \"redis://b\", \"redis://a/\"]",
        "`quorum` names one server twice",
    );
    expect_error(
        "quorum = [\"redis://a\", \"redis://b\", \"redis://c\"]\nmin_replicas_ack = 1",
        "min_replicas_ack does not apply to `quorum`",
    );
    assert!(matches!(
        redis("quorum = [\"redis://a\", \"redis://b\", \"redis://c\"]").map(|r| r.topology),
        Ok(Topology::Quorum(nodes)) if nodes.len() == 3
    ));
    let rerun = parse(
        "[redis]\nquorum = [\"redis://a\", \"redis://b\", \"redis://c\"]\n\
         [jobs.draw]\nschedule = \"@daily\"\ncommand = [\"x\"]\non_holder_lost = \"rerun\"\n",
    )
    .expect_err("rerun with quorum");
    assert!(
        rerun
            .to_string()
            .contains("job \"draw\", field `on_holder_lost`: on_holder_lost = \"rerun\" is not available with `[redis] quorum`"),
        "{rerun}"
    );
    let limited = parse(
        "[redis]\nquorum = [\"redis://a\", \"redis://b\", \"redis://c\"]\n\
         [jobs.draw]\nschedule = \"@daily\"\ncommand = [\"x\"]\nmax_runs = 3\n",
    )
    .expect_err("max_runs with quorum");
    assert!(
        limited.to_string().contains(
            "job \"draw\", field `max_runs`: max_runs is not available with `[redis] quorum`"
        ),
        "{limited}"
    );
    expect_error(
        "url = \"redis://h\"\npassword_env = \"CRONLEASE_SURELY_UNSET_VAR\"",
        "environment variable \"CRONLEASE_SURELY_UNSET_VAR\" is not set",
    );
    expect_error(
        "url = \"redis://h\"\ninsecure_skip_verify = true",
        "TLS settings need rediss:// URLs",
    );
    expect_error(
        "url = \"rediss://h\"\nca_file = \"/nonexistent/ca.pem\"",
        "field `ca_file`: cannot read /nonexistent/ca.pem",
    );
    expect_error(
        "url = \"redis://h\"\nmin_replicas_ack = 1\nack_timeout = \"3s\"",
        "ack_timeout 3s must be shorter than command_timeout 2s",
    );
    let sentinel = redis(
        "sentinels = [\"redis://:pw@h:26379\"]\nmaster_name = \"mymaster\"\nmin_replicas_ack = 1",
    )
    .unwrap();
    assert_eq!(sentinel.min_replicas_ack, 1);
    assert_eq!(
        sentinel.describe(),
        "master \"mymaster\" via sentinels redis://:***@h:26379"
    );
    let cluster = redis("cluster = [\"redis://a:7000\", \"redis://b:7000\"]").unwrap();
    assert_eq!(cluster.describe(), "cluster redis://a:7000, redis://b:7000");
}

#[test]
fn a_reload_of_the_same_file_changes_no_restart_setting_whatever_the_command_line_overrides() {
    let text = |heartbeat: &str| {
        format!(
            "[redis]\nurl = \"redis://127.0.0.1:1\"\n[daemon]\nreplica_id = \"from-file\"\nheartbeat = \"{heartbeat}\"\n\
             [jobs.a]\nschedule = \"* * * * *\"\ncommand = [\"true\"]\n"
        )
    };
    let mut running = parse(&text("5s")).expect("valid");
    assert_eq!(running.replica_id(), Some("from-file"));
    assert!(!running.restart_settings_differ(&parse(&text("5s")).expect("valid")));
    running.replica_id_flag = Some("from-flag".into());
    assert_eq!(running.replica_id(), Some("from-flag"));
    assert!(!running.restart_settings_differ(&parse(&text("5s")).expect("valid")));
    assert!(running.restart_settings_differ(&parse(&text("7s")).expect("valid")));
}

#[test]
fn params_are_checked_with_the_job_and_field_that_is_wrong() {
    let job = |settings: &str| {
        let text = format!(
            "[redis]\nurl = \"redis://127.0.0.1:1\"\n[jobs.report]\nschedule = \"@daily\"\n{settings}\n"
        );
        parse(&text).map_err(|e| e.to_string())
    };
    let expect_error = |settings: &str, fragment: &str| {
        let err = job(settings).expect_err(settings);
        assert!(err.contains(fragment), "{settings}: {err}");
    };
    expect_error(
        "command = [\"x\"]\nparams = { Region = { default = \"eu\" } }",
        "jobs.toml:6:12: job \"report\", field `params`: invalid parameter name \"Region\": expected 1 to 64 characters from a-z 0-9 _",
    );
    expect_error(
        "command = [\"x\"]\nparams = { region = { allowed = [\"eu\"] } }",
        "field `params.region`: no `default`: every tick of the job's schedule runs with the defaults",
    );
    expect_error(
        "command = [\"x\"]\nparams = { region = { default = \"mars\", allowed = [\"eu\", \"us\"] } }",
        "field `params.region`: the default \"mars\" is not in `allowed`: expected one of \"eu\", \"us\"",
    );
    expect_error(
        "command = [\"x\"]\nparams = { region = { default = \"eu\", allowed = [] } }",
        "empty `allowed`",
    );
    expect_error(
        "command = [\"x\"]\nparams = { note = { default = \"a\\nb\" } }",
        "field `params.note`: the default holds a control character",
    );
    expect_error(
        "command = [\"x\"]\nparams = { note = { default = \"a\", choices = [] } }",
        "unknown field `choices`, expected `default` or `allowed`",
    );
    expect_error(
        "http = { url = \"https://example.com/{param.region}\" }",
        "field `http.url`: {param.region} names no parameter of the job: the job declares no parameters",
    );
    expect_error(
        "http = { url = \"https://example.com/\", body = \"{param.size}\" }\nparams = { region = { default = \"eu\" } }",
        "field `http.body`: {param.size} names no parameter of the job: expected one of region",
    );
    expect_error(
        "http = { url = \"https://{param.region}.example.com/\" }\nparams = { region = { default = \"eu\" } }",
        "a {param.<name>} in the URL's host",
    );
    let config = job(
        "http = { url = \"https://example.com/r/{param.region}\", body = \"{param.region}\" }\n\
         params = { region = { default = \"eu\", allowed = [\"eu\", \"us\"] }, note = { default = \"\" } }",
    )
    .expect("valid");
    let params = &config.jobs["report"].params;
    assert_eq!(
        params.defaults().get("region").map(String::as_str),
        Some("eu")
    );
    assert_eq!(params.0.len(), 2);
}

#[test]
fn a_job_without_params_keeps_its_definition_hash() {
    let text = |params: &str| {
        format!(
            "[redis]\nurl = \"redis://127.0.0.1:1\"\n[jobs.a]\nschedule = \"@daily\"\ncommand = [\"x\"]\n{params}\n"
        )
    };
    let plain = parse(&text("")).expect("valid");
    let job = &plain.jobs["a"];
    // The hash reads the Debug form with this part taken out: what it was
    // before params existed, so replicas of both releases agree.
    let debug = format!("{job:?}");
    assert!(debug.contains(", params: Params({})"), "{debug}");
    let with = parse(&text("params = { region = { default = \"eu\" } }")).expect("valid");
    assert_ne!(job.definition_hash(), with.jobs["a"].definition_hash());
}

#[test]
fn several_schedules_a_window_and_max_runs_are_read_and_checked() {
    let job = |settings: &str| {
        let text = format!(
            "[redis]\nurl = \"redis://127.0.0.1:1\"\n[jobs.draw]\ncommand = [\"x\"]\ntimezone = \"Asia/Shanghai\"\n{settings}\n"
        );
        parse(&text).map_err(|e| e.to_string())
    };
    let config = job("schedule = [\"0 12 * * 1-5\", \"0 20 * * 6\"]\n\
         active_from = 2026-12-01\nactive_until = \"2027-01-01T00:00:00+08:00\"\nmax_runs = 30")
    .expect("valid");
    let draw = &config.jobs["draw"];
    let timetable = draw.schedule.as_ref().expect("a schedule");
    assert_eq!(timetable.schedules().len(), 2);
    let window = timetable.window();
    // A date is its midnight in the job's zone.
    assert_eq!(
        window.from.map(|t| t.to_rfc3339()),
        Some("2026-11-30T16:00:00+00:00".to_string())
    );
    assert_eq!(
        window.until.map(|t| t.to_rfc3339()),
        Some("2026-12-31T16:00:00+00:00".to_string())
    );
    assert_eq!(draw.max_runs, Some(30));
    // A local date-time, in the job's zone, as a TOML value.
    let local = job("schedule = \"@daily\"\nactive_from = 2026-12-01T08:00:00").expect("valid");
    let from = local.jobs["draw"]
        .schedule
        .as_ref()
        .and_then(|t| t.window().from);
    assert_eq!(
        from.map(|t| t.to_rfc3339()),
        Some("2026-12-01T00:00:00+00:00".to_string())
    );

    let expect_error = |settings: &str, fragment: &str| {
        let err = job(settings).expect_err(settings);
        assert!(err.contains(fragment), "{settings}: {err}");
    };
    expect_error(
        "schedule = []",
        "field `schedule`: an empty list: expected at least one cron expression",
    );
    expect_error(
        "schedule = [\"@daily\", \"0 0 31 2 *\"]",
        "job \"draw\", field `schedule[1]`: \"0 0 31 2 *\" never fires",
    );
    expect_error(
        "schedule = [\"@daily\", \"@daily\"]",
        "field `schedule[1]`: \"@daily\" is listed twice",
    );
    expect_error(
        "schedule = [\"@daily\", 5]",
        "invalid type: integer `5`, expected a string",
    );
    expect_error(
        "schedule = \"@daily\"\nactive_from = 2027-01-01\nactive_until = 2026-12-01",
        "field `active_until`: 2026-11-30T16:00:00+00:00 is not after active_from 2026-12-31T16:00:00+00:00",
    );
    expect_error(
        "schedule = \"@daily\"\nactive_from = \"soon\"",
        "field `active_from`: \"soon\" is not a date-time: expected a date-time such as",
    );
    expect_error(
        "schedule = \"@daily\"\nactive_until = 12:00:00",
        "field `active_until`: \"12:00:00\" has no date",
    );
    expect_error(
        "schedule = \"@daily\"\nmax_runs = 0",
        "field `max_runs`: 0 is out of range: expected 1 to 1000000000",
    );
}

#[test]
fn a_job_without_the_new_timing_settings_keeps_its_definition_hash() {
    let plain = parse(
        "[redis]\nurl = \"redis://127.0.0.1:1\"\n[jobs.a]\nschedule = \"@daily\"\ncommand = [\"x\"]\n",
    )
    .expect("valid");
    let debug = format!("{:?}", plain.jobs["a"]);
    // What `definition_hash` takes out, so that replicas of releases
    // before these settings agree on the jobs that do not use them.
    assert!(
        debug.contains("schedule: Some(Schedule(\"@daily\" in UTC)), max_runs: None,"),
        "{debug}"
    );
}

#[test]
fn a_job_without_placement_keeps_its_definition_hash_and_one_with_it_differs() {
    let job = |extra: &str| {
        let text = format!(
            "[redis]\nurl = \"redis://127.0.0.1:1\"\n[jobs.a]\nschedule = \"@daily\"\ncommand = [\"x\"]\nworkdir = \"/tmp\"\n{extra}"
        );
        parse(&text).unwrap_or_else(|e| panic!("{e}")).jobs["a"].clone()
    };
    let plain = job("");
    let debug = format!("{plain:?}");
    // What `definition_hash` takes out, so that replicas of releases
    // before these settings agree on the jobs that do not use them.
    assert!(
        debug.ends_with(", run_on: [], mode: One, group: None }"),
        "{debug}"
    );
    let without = debug.replacen(", run_on: [], mode: One", "", 1);
    assert!(!without.contains("run_on") && !without.contains("mode:"));
    assert_eq!(
        plain.definition_hash(),
        job("run_on = []").definition_hash()
    );
    assert_eq!(
        plain.definition_hash(),
        job("mode = \"one\"").definition_hash()
    );
    assert_ne!(
        plain.definition_hash(),
        job("run_on = [\"gpu\"]").definition_hash()
    );
    assert_ne!(
        plain.definition_hash(),
        job("mode = \"every_replica\"").definition_hash()
    );
    let tagged = job("run_on = [\"gpu\", \"eu\", \"gpu\"]");
    assert_eq!(tagged.run_on, ["eu", "gpu"], "sorted, without repeats");
}

#[test]
fn dashboard_tokens_are_read_with_their_roles_scopes_and_secrets() {
    let config = parse(
        "[redis]\nurl = \"redis://127.0.0.1:1/0\"\n\n\
         [jobs.x]\nschedule = \"* * * * *\"\nworkdir = \"/tmp\"\ncommand = [\"true\"]\n\n\
         [[dashboard.tokens]]\nname = \"deploy-bot\"\nrole = \"operator\"\njobs = [\"billing-*\"]\ntoken_file = \"deploy.token\"\n\n\
         [[dashboard.tokens]]\nname = \"oncall\"\nrole = \"admin\"\ntoken_env = \"ONCALL_TOKEN\"\n",
    )
    .expect("a valid table");
    let tokens = &config.dashboard.tokens;
    assert_eq!(tokens.len(), 2);
    assert_eq!(
        (tokens[0].name.as_str(), tokens[0].role, tokens[0].line),
        ("deploy-bot", DashboardRole::Operator, 9)
    );
    assert_eq!(
        tokens[0].source,
        TokenSource::File("/etc/cronlease/deploy.token".into()),
        "relative to the config's directory"
    );
    let scope = tokens[0].jobs.as_ref().expect("a scope");
    assert!(scope[0].matches("billing-eu") && !scope[0].matches("reports"));
    assert_eq!(tokens[1].jobs, None);
    assert!(
        config
            .secret_env_names()
            .contains(&"ONCALL_TOKEN".to_string()),
        "a token's variable reaches no run"
    );
    // No `[dashboard]`: no tokens.
    let plain = parse(
        "[redis]\nurl = \"redis://127.0.0.1:1/0\"\n\n\
         [jobs.x]\nschedule = \"* * * * *\"\nworkdir = \"/tmp\"\ncommand = [\"true\"]\n",
    )
    .expect("a valid table");
    assert!(plain.dashboard.tokens.is_empty());
    // `dashboard_read = "token"` with named tokens only is taken.
    parse(
        "[redis]\nurl = \"redis://127.0.0.1:1/0\"\n\n[daemon]\ndashboard_read = \"token\"\n\n\
         [jobs.x]\nschedule = \"* * * * *\"\nworkdir = \"/tmp\"\ncommand = [\"true\"]\n\n\
         [[dashboard.tokens]]\nname = \"v\"\nrole = \"viewer\"\ntoken_env = \"V_TOKEN\"\n",
    )
    .expect("a login to read with");
    // A name or secret shared with `dashboard_token_*`.
    let error = parse(
        "[redis]\nurl = \"redis://127.0.0.1:1/0\"\n\n[daemon]\ndashboard_token_env = \"T\"\n\n\
         [jobs.x]\nschedule = \"* * * * *\"\nworkdir = \"/tmp\"\ncommand = [\"true\"]\n\n\
         [[dashboard.tokens]]\nname = \"dashboard\"\nrole = \"viewer\"\ntoken_env = \"T\"\n",
    )
    .expect_err("shared with [daemon]")
    .to_string();
    assert!(
        error.contains("the same secret as [daemon] dashboard_token_*"),
        "{error}"
    );
    assert!(
        error.contains("the name \"dashboard\" is the token of [daemon]"),
        "{error}"
    );
}

#[test]
fn dashboard_oidc_is_read_with_its_defaults_and_role_mapping() {
    let config = parse(
        "[redis]\nurl = \"redis://127.0.0.1:1/0\"\n\n[daemon]\ndashboard_read = \"token\"\n\n\
         [jobs.x]\nschedule = \"* * * * *\"\nworkdir = \"/tmp\"\ncommand = [\"true\"]\n\n\
         [dashboard.oidc]\nissuer = \"https://id.example.com/realms/main/\"\nclient_id = \"cronlease\"\n\
         client_secret_file = \"oidc.secret\"\npublic_url = \"https://cron.example.com\"\n\n\
         [[dashboard.oidc.roles]]\nvalue = \"cron-admins\"\nrole = \"admin\"\n\n\
         [[dashboard.oidc.roles]]\nvalue = \"billing team\"\nrole = \"operator\"\njobs = [\"billing-*\"]\n",
    )
    .expect("a valid table: single sign-on is a login to read with");
    let oidc = config.dashboard.oidc.as_ref().expect("[dashboard.oidc]");
    assert_eq!(
        oidc.issuer, "https://id.example.com/realms/main",
        "no trailing /"
    );
    assert_eq!(
        oidc.client_secret,
        TokenSource::File("/etc/cronlease/oidc.secret".into())
    );
    assert_eq!(oidc.scopes, ["openid", "email", "profile"]);
    assert_eq!(oidc.role_claim, "groups");
    assert_eq!(oidc.identity_claim, None);
    assert_eq!(oidc.lifetime, std::time::Duration::from_secs(8 * 3600));
    assert_eq!(oidc.line, 12, "the section's line");
    assert_eq!(
        oidc.roles
            .iter()
            .map(|r| (r.value.as_str(), r.role))
            .collect::<Vec<_>>(),
        [
            ("cron-admins", DashboardRole::Admin),
            ("billing team", DashboardRole::Operator)
        ]
    );
    let scope = oidc.roles[1].jobs.as_ref().expect("a scope");
    assert!(scope[0].matches("billing-eu") && !scope[0].matches("reports"));
    // A variable for the secret reaches no run; no role entry is refused.
    let env = parse(
        "[redis]\nurl = \"redis://127.0.0.1:1/0\"\n\n\
         [jobs.x]\nschedule = \"* * * * *\"\nworkdir = \"/tmp\"\ncommand = [\"true\"]\n\n\
         [dashboard.oidc]\nissuer = \"http://127.0.0.1:5556\"\nclient_id = \"c\"\n\
         client_secret_env = \"OIDC_SECRET\"\npublic_url = \"http://localhost:9465\"\n\n\
         [[dashboard.oidc.roles]]\nvalue = \"v\"\nrole = \"viewer\"\n",
    )
    .expect("http on loopback");
    assert!(env.secret_env_names().contains(&"OIDC_SECRET".to_string()));
    let error = parse(
        "[redis]\nurl = \"redis://127.0.0.1:1/0\"\n\n\
         [jobs.x]\nschedule = \"* * * * *\"\nworkdir = \"/tmp\"\ncommand = [\"true\"]\n\n\
         [dashboard.oidc]\nissuer = \"https://id.example.com\"\nclient_id = \"c\"\n\
         client_secret_env = \"S\"\npublic_url = \"https://cron.example.com\"\n",
    )
    .expect_err("no roles")
    .to_string();
    assert!(
        error.contains("no [[dashboard.oidc.roles]] entry"),
        "{error}"
    );
}
