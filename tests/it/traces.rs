//! Traces end to end: replicas with `[daemon.telemetry]` export the spans
//! of their runs and claims over OTLP (`http/json`) to a receiver in the
//! test, which reads them as the OTLP JSON encoding defines them; the
//! process a run starts sees the run's span as `$TRACEPARENT`, an HTTP job
//! sends it as `traceparent`, a JSON log line written inside a run carries
//! its ids, an API trigger with a `traceparent` continues that trace, and
//! a replica without the table hands nothing on. Over gRPC, a tonic
//! receiver on the published trace service gets the same spans. In
//! process, an embedding service's own subscriber sees the `cronlease.run`
//! spans with their fields, and the handler's spans as their children.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use serde_json::Value;
use tracing::span::{Attributes, Id, Record};
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;

use crate::dashboard::{TOKEN, TOKEN_ENV, dashboard_addr};
use crate::support::{
    Cluster, Receiver, RedisServer, start_scheduler, toml_string, wait_until_or_show,
};

/// How long anything awaited may take on a loaded machine.
const PATIENCE: Duration = Duration::from_secs(60);

/// A schedule that does not fire while a test runs (midnight, 1 January).
const NEVER: &str = "0 0 1 1 *";

/// One span as the receiver got it.
#[derive(Debug, Clone)]
struct Span {
    name: String,
    trace_id: String,
    span_id: String,
    parent_span_id: String,
    attributes: BTreeMap<String, String>,
}

impl Span {
    fn attr(&self, key: &str) -> &str {
        self.attributes.get(key).map_or("", String::as_str)
    }
}

/// An OTLP/JSON attribute value as text (an `intValue` is a string or a
/// number there).
fn any_value(value: &Value) -> String {
    for kind in ["stringValue", "intValue", "boolValue", "doubleValue"] {
        match &value[kind] {
            Value::String(s) => return s.clone(),
            Value::Null => {}
            other => return other.to_string(),
        }
    }
    value.to_string()
}

/// Every span of every request to `/v1/traces`, and the service name of
/// their resources.
fn spans(receiver: &Receiver) -> (Vec<Span>, Vec<String>) {
    let mut spans = Vec::new();
    let mut services = Vec::new();
    for request in receiver.requests() {
        assert_eq!(request.path, "/v1/traces", "{request:?}");
        let body = request.json();
        for resource in body["resourceSpans"].as_array().into_iter().flatten() {
            for attribute in resource["resource"]["attributes"]
                .as_array()
                .into_iter()
                .flatten()
            {
                if attribute["key"] == "service.name" {
                    services.push(any_value(&attribute["value"]));
                }
            }
            for scope in resource["scopeSpans"].as_array().into_iter().flatten() {
                for span in scope["spans"].as_array().into_iter().flatten() {
                    let attributes = span["attributes"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .map(|a| {
                            (
                                a["key"].as_str().unwrap_or("").to_string(),
                                any_value(&a["value"]),
                            )
                        })
                        .collect();
                    let text = |key: &str| span[key].as_str().unwrap_or("").to_string();
                    spans.push(Span {
                        name: text("name"),
                        trace_id: text("traceId"),
                        span_id: text("spanId"),
                        parent_span_id: text("parentSpanId"),
                        attributes,
                    });
                }
            }
        }
    }
    (spans, services)
}

/// The first span `wanted` accepts, waiting for it.
fn span_where(
    cluster: &Cluster,
    receiver: &Receiver,
    what: &str,
    wanted: impl Fn(&Span) -> bool,
) -> Span {
    wait_until_or_show(
        PATIENCE,
        what,
        || cluster.logs(),
        || spans(receiver).0.into_iter().find(|s| wanted(s)),
    )
}

/// `[daemon.telemetry]` exporting to `receiver` as `http/json`.
fn telemetry(receiver: &Receiver, extra: &str) -> String {
    format!(
        "[daemon.telemetry]\nendpoint = {}\nprotocol = \"http/json\"\nservice_name = \"traces-test\"\n{extra}\n\n",
        toml_string(&receiver.url(""))
    )
}

/// A job that appends its `$TRACEPARENT` (`none` without one) to `file`.
fn recording_job(name: &str, schedule: &str, file: &Path) -> String {
    format!(
        "[jobs.{name}]\nschedule = \"{schedule}\"\nworkdir = \"/tmp\"\nshell = 'printf \"%s\\n\" \"${{TRACEPARENT:-none}}\" >> {}'\n\n",
        file.display()
    )
}

/// The lines `file` holds so far.
fn lines(file: &Path) -> Vec<String> {
    std::fs::read_to_string(file)
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}

/// The first `$TRACEPARENT` a run of `cluster` wrote to `file`, waiting
/// for it.
fn first_traceparent(cluster: &Cluster, file: &Path) -> String {
    wait_until_or_show(
        PATIENCE,
        "a run's TRACEPARENT",
        || cluster.logs(),
        || lines(file).into_iter().find(|l| l != "none"),
    )
}

/// Bytes in lowercase hex, as a traceparent writes its ids.
fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A cluster whose replicas export every 100 ms (the batch processor's
/// delay, from its standard variable).
fn exporting_cluster() -> Cluster {
    let mut cluster = Cluster::new(RedisServer::start());
    cluster
        .env
        .push(("OTEL_BSP_SCHEDULE_DELAY".into(), "100".into()));
    cluster
}

#[test]
fn runs_and_claims_arrive_over_otlp_and_what_a_run_starts_joins_its_trace() {
    let receiver = Receiver::start(200, "{}");
    let http_receiver = Receiver::start(200, "done");
    let mut cluster = exporting_cluster();
    cluster
        .env
        .push(("OTLP_TEST_KEY".into(), "key-from-the-environment".into()));
    let file = cluster.path("traceparents");
    let jobs = format!(
        "{}{}[jobs.flaky]\nschedule = \"* * * * * *\"\nworkdir = \"/tmp\"\ncommand = [\"false\"]\nretries = 1\nretry_backoff = \"100ms\"\n\n\
         [jobs.ping]\nschedule = \"* * * * * *\"\nhttp = {{ url = {} }}\n",
        telemetry(
            &receiver,
            "headers = { x-plain = \"in-the-file\" }\nheaders_env = { x-api-key = \"OTLP_TEST_KEY\" }"
        ),
        recording_job("traced", "* * * * * *", &file),
        toml_string(&http_receiver.url("/ping")),
    );
    cluster.start_with("a", "log_format = \"json\"\n", &jobs, None);
    cluster.wait_ready();

    // The process's $TRACEPARENT names the run's span as its parent.
    let seen = first_traceparent(&cluster, &file);
    let parts: Vec<&str> = seen.split('-').collect();
    assert_eq!(parts.len(), 4, "{seen}");
    assert_eq!((parts[0], parts[3]), ("00", "01"), "{seen}");
    let run = span_where(&cluster, &receiver, "the run span of that process", |s| {
        s.name == "cronlease.run" && s.span_id == parts[2]
    });
    assert_eq!(run.trace_id, parts[1], "{run:?}");
    assert_eq!(
        run.parent_span_id, "",
        "a run of the schedule starts a trace: {run:?}"
    );
    assert_eq!(run.attr("job"), "traced", "{run:?}");
    assert_eq!(run.attr("replica"), "a", "{run:?}");
    assert_eq!(run.attr("trigger"), "schedule", "{run:?}");
    assert_eq!(run.attr("outcome"), "ok", "{run:?}");
    assert_eq!(run.attr("attempt"), "1", "{run:?}");
    assert!(
        run.attr("fence").parse::<u64>().is_ok_and(|f| f > 0),
        "{run:?}"
    );
    assert!(run.attr("lateness_ms").parse::<i64>().is_ok(), "{run:?}");
    assert!(run.attr("tick").ends_with('Z'), "{run:?}");
    let run_id = run.attr("run_id").to_string();
    assert!(!run_id.is_empty(), "{run:?}");

    // Its claim: a span of its own, with the answer and the same run.
    let claim = span_where(&cluster, &receiver, "the claim of that run", |s| {
        s.name == "cronlease.claim" && s.attr("run_id") == run_id
    });
    assert_eq!(claim.attr("job"), "traced", "{claim:?}");
    assert_eq!(claim.attr("tick"), run.attr("tick"), "{claim:?}");
    assert_eq!(claim.attr("result"), "claimed", "{claim:?}");
    assert_eq!(claim.attr("fence"), run.attr("fence"), "{claim:?}");

    // An HTTP job's request carries its run's span as `traceparent`.
    let ping = span_where(&cluster, &receiver, "a run span of the HTTP job", |s| {
        s.name == "cronlease.run" && s.attr("job") == "ping" && s.attr("outcome") == "ok"
    });
    let requests = http_receiver.requests();
    let header = format!("00-{}-{}-01", ping.trace_id, ping.span_id);
    assert!(
        requests
            .iter()
            .any(|r| r.header("traceparent") == Some(header.as_str())),
        "no request with traceparent {header}: {requests:#?}"
    );

    // A retried run: one span, its attempts counted; the log line of the
    // retry, written inside it, carries its ids.
    let flaky = span_where(&cluster, &receiver, "a retried run's span", |s| {
        s.name == "cronlease.run" && s.attr("job") == "flaky" && s.attr("outcome") == "failed"
    });
    assert_eq!(flaky.attr("attempt"), "2", "{flaky:?}");
    let log = cluster.logs();
    let retry_lines: Vec<Value> = log
        .lines()
        .filter(|l| l.contains("attempt failed, retrying"))
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    assert!(
        retry_lines
            .iter()
            .any(|l| l["trace_id"] == flaky.trace_id.as_str()
                && l["span_id"] == flaky.span_id.as_str()),
        "no retry line with the ids of {flaky:?}: {retry_lines:#?}"
    );
    // A line outside any run has none, and no span reaches the log.
    assert!(
        log.lines()
            .filter(|l| l.contains("\"ready\""))
            .all(|l| !l.contains("trace_id")),
        "{log}"
    );
    assert!(!log.contains("cronlease.run"), "a span in the log: {log}");

    cluster.stop_all();
    let (_, services) = spans(&receiver);
    assert!(services.iter().all(|s| s == "traces-test"), "{services:?}");
    let requests = receiver.requests();
    assert!(
        requests
            .iter()
            .all(|r| r.header("x-plain") == Some("in-the-file")
                && r.header("x-api-key") == Some("key-from-the-environment")
                && r.header("content-type") == Some("application/json")),
        "{:#?}",
        requests.iter().map(|r| &r.headers).collect::<Vec<_>>()
    );
}

#[test]
fn a_trigger_with_a_traceparent_continues_that_trace() {
    let receiver = Receiver::start(200, "{}");
    let mut cluster = exporting_cluster();
    cluster.env.push((TOKEN_ENV.into(), TOKEN.into()));
    let file = cluster.path("traceparents");
    let jobs = format!(
        "{}{}",
        telemetry(&receiver, ""),
        recording_job("by-hand", NEVER, &file)
    );
    let daemon =
        format!("dashboard_listen = \"127.0.0.1:0\"\ndashboard_token_env = \"{TOKEN_ENV}\"\n");
    cluster.start_with("a", &daemon, &jobs, None);
    cluster.wait_ready();
    let addr = dashboard_addr(&cluster.replicas[0]);
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .proxy(None)
        .timeout_global(Some(Duration::from_secs(20)))
        .build()
        .into();
    let url = format!("http://{addr}/api/v1/jobs/by-hand/trigger");
    let post = |traceparent: &str| {
        let mut response = agent
            .post(&url)
            .header("Authorization", format!("Bearer {TOKEN}"))
            .header("traceparent", traceparent)
            .send("")
            .unwrap_or_else(|e| panic!("{url}: {e}"));
        let status = response.status().as_u16();
        let body = response.body_mut().read_to_string().unwrap_or_default();
        (
            status,
            serde_json::from_str::<Value>(&body).unwrap_or(Value::Null),
        )
    };

    // Not a W3C trace context: refused, nothing queued.
    for bad in [
        "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
        "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        "not a traceparent",
    ] {
        let (status, body) = post(bad);
        assert_eq!(status, 400, "{bad}: {body}");
        assert_eq!(
            body["error"]["code"], "invalid_traceparent",
            "{bad}: {body}"
        );
    }

    let trace_id = "4bf92f3577b34da6a3ce929d0e0e4736";
    let parent = "00f067aa0ba902b7";
    let (status, body) = post(&format!("00-{trace_id}-{parent}-01"));
    assert_eq!(status, 202, "{body}");
    let run_id = body["run_id"].as_str().expect("a run id").to_string();
    let run = span_where(&cluster, &receiver, "the triggered run's span", |s| {
        s.name == "cronlease.run" && s.attr("run_id") == run_id
    });
    assert_eq!(run.trace_id, trace_id, "{run:?}");
    assert_eq!(run.parent_span_id, parent, "{run:?}");
    assert_eq!(run.attr("trigger"), "manual", "{run:?}");
    let seen = wait_until_or_show(
        PATIENCE,
        "the process's TRACEPARENT",
        || cluster.logs(),
        || lines(&file).into_iter().next(),
    );
    assert_eq!(seen, format!("00-{trace_id}-{}-01", run.span_id), "{run:?}");

    // The command line's --traceparent takes the same way.
    let config = cluster.config_path("a");
    let other = "0af7651916cd43dd8448eb211c80319c";
    let out = crate::support::cronlease([
        "trigger",
        "--config",
        &config.display().to_string(),
        "--traceparent",
        &format!("00-{other}-b7ad6b7169203331-01"),
        "by-hand",
    ]);
    let cli_run = out.stdout().trim().to_string();
    assert!(!cli_run.is_empty(), "{}", out.describe());
    let run = span_where(&cluster, &receiver, "the CLI-triggered run's span", |s| {
        s.name == "cronlease.run" && s.attr("run_id") == cli_run
    });
    assert_eq!(
        (run.trace_id.as_str(), run.parent_span_id.as_str()),
        (other, "b7ad6b7169203331")
    );

    // And $TRACEPARENT when no --traceparent is given; one that is not
    // valid is left out with a warning, and the trigger still queues.
    let inherited = "4bf92f3577b34da6a3ce929d0e0e4736";
    for (value, parent) in [
        (
            format!("00-{inherited}-00f067aa0ba902b7-01"),
            Some(inherited),
        ),
        ("00-not-a-trace-context".to_string(), None),
    ] {
        let out = crate::support::cronlease_with_env(
            [
                "trigger",
                "--config",
                &config.display().to_string(),
                "by-hand",
            ],
            &[("TRACEPARENT", &value)],
        )
        .expect_code(0);
        let env_run = out.stdout().trim().to_string();
        assert_eq!(
            out.stderr().contains("warning: $TRACEPARENT left out"),
            parent.is_none(),
            "{}",
            out.describe()
        );
        let run = span_where(&cluster, &receiver, "the env-triggered run's span", |s| {
            s.name == "cronlease.run" && s.attr("run_id") == env_run
        });
        match parent {
            Some(trace_id) => assert_eq!(run.trace_id, trace_id, "{run:?}"),
            None => assert!(run.parent_span_id.is_empty(), "{run:?}"),
        }
    }
    cluster.stop_all();
}

#[test]
fn without_telemetry_nothing_is_handed_on() {
    let mut cluster = Cluster::new(RedisServer::start());
    // Even with a trace context in the replica's own environment.
    cluster.env.push((
        "TRACEPARENT".into(),
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".into(),
    ));
    let file = cluster.path("traceparents");
    cluster.start_with(
        "a",
        "log_format = \"json\"\n",
        &recording_job("plain", "* * * * * *", &file),
        None,
    );
    cluster.wait_ready();
    let seen = wait_until_or_show(
        PATIENCE,
        "two runs",
        || cluster.logs(),
        || {
            let seen = lines(&file);
            (seen.len() >= 2).then_some(seen)
        },
    );
    cluster.stop_all();
    assert!(seen.iter().all(|l| l == "none"), "{seen:?}");
    let log = cluster.logs();
    assert!(!log.contains("trace_id"), "{log}");
}

/// A span an embedding service's subscriber saw: its name, parent and
/// fields (recorded later ones included).
#[derive(Debug, Clone)]
struct Seen {
    id: u64,
    name: String,
    parent: Option<u64>,
    fields: BTreeMap<String, String>,
}

/// A `tracing` layer that keeps every span it is told of.
#[derive(Clone, Default)]
struct Capture(Arc<Mutex<Vec<Seen>>>);

struct Fields<'a>(&'a mut BTreeMap<String, String>);

impl tracing::field::Visit for Fields<'_> {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        self.0
            .insert(field.name().to_string(), format!("{value:?}"));
    }

    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        self.0.insert(field.name().to_string(), value.to_string());
    }
}

impl<S> tracing_subscriber::Layer<S> for Capture
where
    S: tracing::Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let mut fields = BTreeMap::new();
        attrs.record(&mut Fields(&mut fields));
        let parent = ctx
            .span(id)
            .and_then(|s| s.parent())
            .map(|p| p.id().into_u64());
        self.0.lock().expect("no holder panics").push(Seen {
            id: id.into_u64(),
            name: attrs.metadata().name().to_string(),
            parent,
            fields,
        });
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, _ctx: Context<'_, S>) {
        let mut seen = self.0.lock().expect("no holder panics");
        if let Some(span) = seen.iter_mut().rev().find(|s| s.id == id.into_u64()) {
            values.record(&mut Fields(&mut span.fields));
        }
    }
}

#[test]
fn an_embedding_services_subscriber_sees_the_run_spans_and_the_handlers_under_them() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().expect("a temporary directory");
    let capture = Capture::default();
    let subscriber = tracing_subscriber::registry().with(capture.clone());
    // This thread's subscriber: the runtime below runs every task on it.
    let _default = tracing::subscriber::set_default(subscriber);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    runtime.block_on(async {
        let job = cronlease::JobBuilder::new("report", "* * * * * *").run(
            |run: cronlease::Run| async move {
                let work = tracing::info_span!("report.query", rows = 3);
                let _entered = work.enter();
                // No OpenTelemetry layer in this subscriber: no trace context.
                assert_eq!(run.traceparent(), None);
                Ok::<(), std::io::Error>(())
            },
        );
        let scheduler = start_scheduler(&redis, &dir, "shop-1", vec![job]).await;
        let deadline = tokio::time::Instant::now() + PATIENCE;
        loop {
            let done = capture.0.lock().expect("no holder panics").iter().any(|s| {
                s.name == "cronlease.run" && s.fields.get("outcome").is_some_and(|o| o == "ok")
            });
            if done || tokio::time::Instant::now() > deadline {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        scheduler.shutdown().await.expect("a clean shutdown");
    });
    let seen = capture.0.lock().expect("no holder panics").clone();
    let run = seen
        .iter()
        .find(|s| s.name == "cronlease.run" && s.fields.get("outcome").is_some_and(|o| o == "ok"))
        .unwrap_or_else(|| panic!("no finished run span: {seen:#?}"));
    for field in [
        "run_id",
        "job",
        "tick",
        "fence",
        "replica",
        "trigger",
        "attempt",
        "lateness_ms",
    ] {
        assert!(run.fields.contains_key(field), "no {field}: {run:?}");
    }
    assert_eq!(run.fields["job"], "report", "{run:?}");
    assert_eq!(run.fields["replica"], "shop-1", "{run:?}");
    assert_eq!(run.fields["trigger"], "schedule", "{run:?}");
    assert_eq!(run.parent, None, "{run:?}");
    let query = seen
        .iter()
        .find(|s| s.name == "report.query" && s.parent == Some(run.id))
        .unwrap_or_else(|| panic!("no handler span under the run {run:?}: {seen:#?}"));
    assert_eq!(query.fields["rows"], "3");
    let claim = seen
        .iter()
        .find(|s| s.name == "cronlease.claim" && s.fields.get("run_id") == run.fields.get("run_id"))
        .unwrap_or_else(|| panic!("no claim span of the run: {seen:#?}"));
    assert_eq!(claim.fields["result"], "claimed", "{claim:?}");
}

#[test]
fn http_protobuf_exports_decode_with_the_published_definitions_and_lost_ones_are_logged() {
    use opentelemetry_proto::tonic::common::v1::any_value::Value as Any;
    use prost::Message;

    let receiver = Receiver::start(200, "");
    let mut cluster = exporting_cluster();
    let file = cluster.path("traceparents");
    let jobs = format!(
        "[daemon.telemetry]\nendpoint = {}\n\n{}",
        toml_string(&receiver.url("/v1/traces")),
        recording_job("binary", "* * * * * *", &file)
    );
    cluster.start("a", &jobs);
    cluster.wait_ready();
    let seen = first_traceparent(&cluster, &file);
    let decoded = |request: &crate::support::Request| {
        ExportTraceServiceRequest::decode(request.body.as_slice())
            .unwrap_or_else(|e| panic!("not an ExportTraceServiceRequest ({e}): {request:?}"))
    };
    let run = wait_until_or_show(
        PATIENCE,
        "the run's span, as protobuf",
        || cluster.logs(),
        || {
            receiver.requests().iter().find_map(|request| {
                assert_eq!(
                    request.header("content-type"),
                    Some("application/x-protobuf"),
                    "{request:?}"
                );
                decoded(request)
                    .resource_spans
                    .into_iter()
                    .flat_map(|r| r.scope_spans)
                    .flat_map(|s| s.spans)
                    .find(|s| s.name == "cronlease.run" && seen.contains(&hex(&s.span_id)))
            })
        },
    );
    assert_eq!(
        seen,
        format!("00-{}-{}-01", hex(&run.trace_id), hex(&run.span_id))
    );
    let job = run
        .attributes
        .iter()
        .find(|a| a.key == "job")
        .and_then(|a| a.value.as_ref()?.value.clone());
    assert_eq!(job, Some(Any::StringValue("binary".into())), "{run:?}");
    cluster.stop_all();

    let unused = unused_port();
    // Over HTTP to no collector: the lost exports are logged, the runs go on.
    let mut lost = exporting_cluster();
    let file = lost.path("lost-traceparents");
    let jobs = format!(
        "[daemon.telemetry]\nendpoint = \"http://127.0.0.1:{unused}\"\ntimeout = \"1s\"\n\n{}",
        recording_job("unheard", "* * * * * *", &file)
    );
    lost.start("h", &jobs);
    lost.replicas[0].wait_for_log("cannot export spans", PATIENCE);
    assert!(!lines(&file).is_empty(), "{}", lost.logs());
    lost.stop_all();
    let log = lost.logs();
    assert_eq!(
        log.matches("cannot export spans").count(),
        1,
        "once a minute at most: {log}"
    );
}

/// A port nothing listens on.
fn unused_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// A gRPC OTLP receiver in the test: the trace service of the protocol's
/// published definitions, served by tonic on a port of its own; each
/// request kept with its `x-team` metadata.
struct GrpcReceiver {
    runtime: Option<tokio::runtime::Runtime>,
    addr: std::net::SocketAddr,
    requests: Arc<Mutex<Vec<GrpcExport>>>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

/// One export as the gRPC receiver got it.
#[derive(Debug, Clone)]
struct GrpcExport {
    team: Option<String>,
    request: ExportTraceServiceRequest,
}

/// The receiver's side of the trace service.
struct Collecting(Arc<Mutex<Vec<GrpcExport>>>);

#[tonic::async_trait]
impl TraceService for Collecting {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        let team = request
            .metadata()
            .get("x-team")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let request = request.into_inner();
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(GrpcExport { team, request });
        Ok(tonic::Response::new(ExportTraceServiceResponse {
            partial_success: None,
        }))
    }
}

impl GrpcReceiver {
    fn start() -> GrpcReceiver {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("a runtime for the receiver");
        let listener = runtime
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .expect("the receiver binds a loopback port");
        let addr = listener.local_addr().expect("a bound port");
        let requests = Arc::new(Mutex::new(Vec::new()));
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let service = TraceServiceServer::new(Collecting(requests.clone()));
        runtime.spawn(
            tonic::transport::Server::builder()
                .timeout(Duration::from_secs(10))
                .add_service(service)
                .serve_with_incoming_shutdown(
                    tokio_stream::wrappers::TcpListenerStream::new(listener),
                    async {
                        let _ = stopped.await;
                    },
                ),
        );
        GrpcReceiver {
            runtime: Some(runtime),
            addr,
            requests,
            stop: Some(stop),
        }
    }

    fn exports(&self) -> Vec<GrpcExport> {
        self.requests
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }
}

impl Drop for GrpcReceiver {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        // The server's task ends with the runtime, which waits for no
        // connection longer than this.
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_timeout(Duration::from_secs(5));
        }
    }
}

#[test]
fn grpc_exports_reach_a_receiver_built_on_the_published_service_and_lost_ones_are_logged() {
    use opentelemetry_proto::tonic::common::v1::any_value::Value as Any;

    let receiver = GrpcReceiver::start();
    let mut cluster = exporting_cluster();
    let file = cluster.path("grpc-traceparents");
    let jobs = format!(
        "[daemon.telemetry]\nendpoint = \"http://{}\"\nprotocol = \"grpc\"\nservice_name = \"grpc-test\"\nheaders = {{ x-team = \"ops\" }}\n\n{}",
        receiver.addr,
        recording_job("over-grpc", "* * * * * *", &file)
    );
    cluster.start("g", &jobs);
    cluster.wait_ready();
    let seen = first_traceparent(&cluster, &file);
    let (export, resource, run) = wait_until_or_show(
        PATIENCE,
        "the run's span, over gRPC",
        || cluster.logs(),
        || {
            receiver.exports().into_iter().find_map(|export| {
                let found = export.request.resource_spans.iter().find_map(|r| {
                    r.scope_spans
                        .iter()
                        .flat_map(|s| &s.spans)
                        .find(|s| s.name == "cronlease.run" && seen.contains(&hex(&s.span_id)))
                        .map(|span| (r.resource.clone(), span.clone()))
                })?;
                Some((export.clone(), found.0, found.1))
            })
        },
    );
    assert_eq!(
        seen,
        format!("00-{}-{}-01", hex(&run.trace_id), hex(&run.span_id))
    );
    let attribute = |attributes: &[opentelemetry_proto::tonic::common::v1::KeyValue], key: &str| {
        attributes
            .iter()
            .find(|a| a.key == key)
            .and_then(|a| a.value.as_ref()?.value.clone())
    };
    assert_eq!(
        attribute(&run.attributes, "job"),
        Some(Any::StringValue("over-grpc".into())),
        "{run:?}"
    );
    let service = resource.map(|r| attribute(&r.attributes, "service.name"));
    assert_eq!(
        service,
        Some(Some(Any::StringValue("grpc-test".into()))),
        "{export:?}"
    );
    assert_eq!(
        export.team.as_deref(),
        Some("ops"),
        "the header as metadata"
    );
    cluster.stop_all();
    drop(receiver);

    // To a port where nothing listens: the lost exports are logged, the
    // runs go on, and the shutdown gives the flush its timeout, no more.
    let mut lost = exporting_cluster();
    let file = lost.path("lost-traceparents");
    let jobs = format!(
        "[daemon.telemetry]\nendpoint = \"http://127.0.0.1:{}\"\nprotocol = \"grpc\"\ntimeout = \"1s\"\n\n{}",
        unused_port(),
        recording_job("unheard", "* * * * * *", &file)
    );
    lost.start("h", &jobs);
    lost.replicas[0].wait_for_log("cannot export spans", PATIENCE);
    assert!(!lines(&file).is_empty(), "{}", lost.logs());
    let stopping = std::time::Instant::now();
    lost.stop_all();
    assert!(
        stopping.elapsed() < Duration::from_secs(15),
        "{}",
        lost.logs()
    );
    let log = lost.logs();
    assert_eq!(
        log.matches("cannot export spans").count(),
        1,
        "once a minute at most: {log}"
    );
}
