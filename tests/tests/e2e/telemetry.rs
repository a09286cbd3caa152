//! Traces over OTLP: an in-test collector (a tonic server implementing the OTLP TraceService
//! with `opentelemetry-proto`'s types) receives, for one real call through the real binaries,
//! one connected trace across the broker, the gate and the executor, with the rpc.* and
//! glovebox.* attributes and nothing of the file the call read. With telemetry off, nothing is
//! exported and no service installs the OpenTelemetry layer.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use glovebox_e2e::otlp::{self, Collector};
use glovebox_e2e::{Glovebox, Options, expect_ok};
use opentelemetry_proto::tonic::common::v1::KeyValue;
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use serde_json::json;

/// One received span, flattened.
#[derive(Debug, Clone)]
struct Span {
    service: String,
    name: String,
    trace_id: Vec<u8>,
    span_id: Vec<u8>,
    parent: Vec<u8>,
    /// OTLP's span kind: 2 server, 3 client.
    kind: i32,
    attributes: HashMap<String, String>,
}

fn text(kv: &KeyValue) -> String {
    match kv.value.as_ref().and_then(|v| v.value.as_ref()) {
        Some(Value::StringValue(s)) => s.clone(),
        Some(other) => format!("{other:?}"),
        None => String::new(),
    }
}

fn spans(c: &Collector) -> Vec<Span> {
    let mut out = Vec::new();
    for request in c.traces.lock().unwrap().iter() {
        for rs in &request.resource_spans {
            let service = rs
                .resource
                .as_ref()
                .and_then(|r| r.attributes.iter().find(|kv| kv.key == "service.name"))
                .map(text)
                .unwrap_or_default();
            for ss in &rs.scope_spans {
                for s in &ss.spans {
                    out.push(Span {
                        service: service.clone(),
                        name: s.name.clone(),
                        trace_id: s.trace_id.clone(),
                        span_id: s.span_id.clone(),
                        parent: s.parent_span_id.clone(),
                        kind: s.kind,
                        attributes: s
                            .attributes
                            .iter()
                            .map(|kv| (kv.key.clone(), text(kv)))
                            .collect(),
                    });
                }
            }
        }
    }
    out
}

fn telemetry_on(endpoint: &str) -> Options {
    Options {
        env: vec![
            ("OTEL_EXPORTER_OTLP_ENDPOINT".into(), endpoint.to_owned()),
            (
                "OTEL_RESOURCE_ATTRIBUTES".into(),
                "service.namespace=e2e".into(),
            ),
        ],
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn one_call_is_one_connected_trace_without_content() {
    let (c, endpoint) = otlp::start().await;
    one_connected_trace_and_metrics(c, telemetry_on(&endpoint)).await;
}

/// The same over OTLP/HTTP (protobuf bodies on `/v1/traces` and `/v1/metrics`).
#[tokio::test(flavor = "multi_thread")]
async fn over_otlp_http_one_call_is_one_connected_trace_without_content() {
    let (c, endpoint) = otlp::start_http().await;
    let mut options = telemetry_on(&endpoint);
    options
        .env
        .push(("OTEL_EXPORTER_OTLP_PROTOCOL".into(), "http/protobuf".into()));
    one_connected_trace_and_metrics(c, options).await;
}

/// A collector credential (`OTEL_EXPORTER_OTLP_HEADERS`) reaches the services that export, and
/// nothing an agent's job can read: not its environment, not a service's `/proc/<pid>/environ`.
#[tokio::test(flavor = "multi_thread")]
async fn a_collector_credential_is_out_of_reach_of_jobs() {
    let (_c, endpoint) = otlp::start_http().await;
    let secret = format!("collector-secret-{}", std::process::id());
    let mut options = telemetry_on(&endpoint);
    options.env.extend([
        ("OTEL_EXPORTER_OTLP_PROTOCOL".into(), "http/protobuf".into()),
        (
            "OTEL_EXPORTER_OTLP_HEADERS".into(),
            format!("authorization=Bearer%20{secret}"),
        ),
    ]);
    let g = Glovebox::start_with(options);
    let pids: Vec<i32> = ["broker", "gate", "executor", "pack-host"]
        .iter()
        .flat_map(|s| g.service_pids(s))
        .collect();
    assert!(pids.len() >= 3, "{pids:?}");
    // The services have it (read here as root)...
    let broker_env =
        std::fs::read(format!("/proc/{}/environ", g.service_pids("broker")[0])).unwrap();
    assert!(
        String::from_utf8_lossy(&broker_env).contains(&secret),
        "the broker was not given the collector credential"
    );
    // ...and a job, running hostile code as the executor's user, does not.
    let mut approver = g.connect("approver").await;
    let mut agent = g.connect("agent").await;
    let pid_list: Vec<String> = pids.iter().map(i32::to_string).collect();
    let command = format!(
        "env; for p in {}; do cat /proc/$p/environ; tr '\\0' '\\n' < /proc/$p/cmdline; done 2>&1; true",
        pid_list.join(" ")
    );
    let (_, r) = agent
        .invoke_asked(
            &mut approver,
            "x",
            "exec_run",
            json!({"command": command}),
            "once",
        )
        .await;
    let job = expect_ok(&r)["job_id"].as_str().unwrap().to_owned();
    agent.wait_job(&job).await;
    let out = expect_ok(
        &agent
            .invoke("t", "exec_tail", json!({"job_id": job, "lines": 1000}))
            .await,
    );
    let text = out["stdout"]["text"].as_str().unwrap();
    assert!(text.contains("PATH="), "the job ran: {text}");
    assert!(
        !text.contains(&secret),
        "a job read the collector credential:\n{text}"
    );
}

/// One call through `options`' glovebox reaches `c` as one connected trace with the call's
/// attributes and nothing of its content; metrics follow when glovebox stops.
async fn one_connected_trace_and_metrics(c: Collector, options: Options) {
    let g = Glovebox::start_with(options);
    let marker = format!("glovebox-marker-{}", std::process::id());
    std::fs::write(g.workdir.join("notes.txt"), format!("{marker}\n")).unwrap();
    let mut agent = g.connect("agent").await;
    let r = expect_ok(
        &agent
            .invoke("c1", "file_read", json!({"path": "notes.txt"}))
            .await,
    );
    assert!(r["content"].as_str().unwrap().contains(&marker));

    // The call's trace: its root in the broker, then every hop, exported within a few seconds.
    let deadline = Instant::now() + Duration::from_secs(30);
    let trace = loop {
        let all = spans(&c);
        if let Some(root) = all.iter().find(|s| s.name == "call file_read") {
            let trace: Vec<Span> = all
                .iter()
                .filter(|s| s.trace_id == root.trace_id)
                .cloned()
                .collect();
            let services: HashSet<&str> = trace.iter().map(|s| s.service.as_str()).collect();
            let methods: HashSet<&str> = trace
                .iter()
                .filter_map(|s| s.attributes.get("rpc.method").map(String::as_str))
                .collect();
            if ["glovebox-broker", "glovebox-gate", "glovebox-executor"]
                .iter()
                .all(|s| services.contains(s))
                && ["Run", "Decide"].iter().all(|m| methods.contains(m))
            {
                break trace;
            }
        }
        assert!(
            Instant::now() < deadline,
            "no complete trace was exported; received: {:#?}\nstderr:\n{}",
            spans(&c),
            g.stderr()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };

    // One trace, one root, every other span's parent in the trace: connected across processes.
    let ids: HashSet<&[u8]> = trace.iter().map(|s| s.span_id.as_slice()).collect();
    let roots: Vec<&Span> = trace.iter().filter(|s| s.parent.is_empty()).collect();
    assert_eq!(roots.len(), 1, "one root: {trace:#?}");
    let root = roots[0];
    assert_eq!(root.name, "call file_read");
    assert_eq!(root.service, "glovebox-broker");
    for s in &trace {
        assert!(
            s.parent.is_empty() || ids.contains(s.parent.as_slice()),
            "{} ({}) has a parent outside the trace: {trace:#?}",
            s.name,
            s.service
        );
    }
    // Each server span's parent is the client span of the process that called it, for the
    // same method: the links cross processes.
    let by_id: HashMap<&[u8], &Span> = trace.iter().map(|s| (s.span_id.as_slice(), s)).collect();
    let servers: Vec<&Span> = trace
        .iter()
        .filter(|s| s.kind == 2 && s.service != "glovebox-broker")
        .collect();
    // The executor's `Run` and the gate's `Decide` (messages on streams, a span each).
    assert!(servers.len() >= 2, "{trace:#?}");
    for s in servers {
        let parent = by_id[s.parent.as_slice()];
        assert_eq!(parent.kind, 3, "{s:#?} <- {parent:#?}");
        assert_ne!(parent.service, s.service, "{s:#?} <- {parent:#?}");
        assert_eq!(
            parent.attributes.get("rpc.method"),
            s.attributes.get("rpc.method")
        );
    }

    // The call's attributes.
    let a = &root.attributes;
    assert_eq!(a["glovebox.account"], g.account);
    assert_eq!(a["glovebox.tool"], "file_read");
    assert_eq!(a["glovebox.verdict"], "allow");
    assert_eq!(a["glovebox.outcome"], "ok");
    let decide = trace
        .iter()
        .find(|s| {
            s.service == "glovebox-gate"
                && s.attributes.get("rpc.method").map(String::as_str) == Some("Decide")
        })
        .expect("the gate's decide span");
    assert_eq!(decide.attributes["rpc.system"], "grpc");
    // A built-in call is judged at the executor's request (one hop: a run on `Executor.Runs`).
    assert_eq!(decide.attributes["rpc.service"], "glovebox.v1.ExecutorGate");
    assert_eq!(decide.name, "glovebox.v1.ExecutorGate/Decide");
    let run = trace
        .iter()
        .find(|s| s.service == "glovebox-executor" && s.name == "glovebox.v1.Executor/Run")
        .expect("the executor's run span");
    assert_eq!(run.attributes["rpc.method"], "Run");
    assert_eq!(
        by_id[decide.parent.as_slice()].service,
        "glovebox-executor",
        "the executor asked the gate"
    );
    // A small file is read ahead of its verdict: its rows went with the decide request.
    assert!(
        trace
            .iter()
            .all(|s| s.attributes.get("rpc.method").map(String::as_str) != Some("AppendCall")),
        "{trace:#?}"
    );

    // The resource says which service and namespace.
    let requests = c.traces.lock().unwrap().clone();
    let namespaces: HashSet<String> = requests
        .iter()
        .flat_map(|r| &r.resource_spans)
        .filter_map(|rs| rs.resource.as_ref())
        .flat_map(|r| {
            r.attributes
                .iter()
                .filter(|kv| kv.key == "service.namespace")
        })
        .map(text)
        .collect();
    assert_eq!(namespaces, HashSet::from(["e2e".to_owned()]));

    // Nothing of the file, the token or the path reached the collector, in any attribute,
    // event or resource.
    let everything = format!("{requests:?}");
    assert!(
        !everything.contains(&marker),
        "the file's content was exported"
    );
    assert!(
        !everything.contains(&g.token),
        "the agent token was exported"
    );
    assert!(
        !everything.contains("notes.txt"),
        "the call's parameters were exported"
    );
    for s in &trace {
        for key in s.attributes.keys() {
            assert!(
                key.starts_with("rpc.")
                    || key.starts_with("glovebox.")
                    || key.starts_with("otel.")
                    || key == "busy_ns"
                    || key == "idle_ns",
                "unexpected attribute {key} on {}",
                s.name
            );
        }
    }
    for service in ["gate", "broker", "executor", "pack-host"] {
        assert!(
            g.stderr()
                .contains(&format!("service=\"glovebox-{service}\""))
                || g.stderr().contains(&format!("service=glovebox-{service}")),
            "glovebox-{service} did not say it exports:\n{}",
            g.stderr()
        );
    }

    // Metrics go over OTLP too: a stopping service sends what it measured.
    let mut g = g;
    g.stop();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let names: HashSet<String> = c
            .metrics
            .lock()
            .unwrap()
            .iter()
            .flat_map(|r| &r.resource_metrics)
            .flat_map(|rm| &rm.scope_metrics)
            .flat_map(|sm| &sm.metrics)
            .map(|m| m.name.clone())
            .collect();
        if names.contains("glovebox_calls")
            && names.contains("glovebox_audit_commit_duration_seconds")
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "metrics were not exported: {names:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let everything = format!("{:?}", c.metrics.lock().unwrap());
    assert!(!everything.contains(&marker) && !everything.contains("notes.txt"));
}

#[tokio::test(flavor = "multi_thread")]
async fn telemetry_off_exports_nothing_and_installs_no_layer() {
    let (c, endpoint) = otlp::start().await;
    let mut options = telemetry_on(&endpoint);
    options
        .env
        .push(("OTEL_SDK_DISABLED".into(), "true".into()));
    let g = Glovebox::start_with(options);
    std::fs::write(g.workdir.join("a.txt"), "a\n").unwrap();
    let mut agent = g.connect("agent").await;
    expect_ok(
        &agent
            .invoke("c1", "file_read", json!({"path": "a.txt"}))
            .await,
    );
    // Longer than several span export intervals, then a stop (which would flush metrics).
    tokio::time::sleep(Duration::from_secs(3)).await;
    let mut g = g;
    g.stop();
    assert!(
        c.traces.lock().unwrap().is_empty() && c.metrics.lock().unwrap().is_empty(),
        "something was exported with telemetry off"
    );
    assert!(
        !g.stderr().contains("telemetry: exporting"),
        "a service installed the OpenTelemetry layer:\n{}",
        g.stderr()
    );
}

/// The samples of a Prometheus text page as Prometheus's own parser
/// (`prometheus_client.parser`) reads it: `(name, labels, value)`; panics if it does not parse.
fn parse_prometheus(text: &str) -> Vec<(String, HashMap<String, String>, f64)> {
    use std::io::Write as _;
    let script = "import sys, json\n\
        from prometheus_client.parser import text_string_to_metric_families\n\
        out = []\n\
        for family in text_string_to_metric_families(sys.stdin.read()):\n\
        \x20   for s in family.samples:\n\
        \x20       out.append([s.name, s.labels, s.value])\n\
        print(json.dumps(out))\n";
    let mut child = std::process::Command::new("python3")
        .args(["-c", script])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("python3 (pip install -r tests/mcp/requirements.txt)");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "/metrics did not parse: {}\n{text}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice::<Vec<(String, HashMap<String, String>, f64)>>(&out.stdout).unwrap()
}

fn value(
    samples: &[(String, HashMap<String, String>, f64)],
    name: &str,
    labels: &[(&str, &str)],
) -> f64 {
    samples
        .iter()
        .filter(|(n, l, _)| {
            n == name
                && labels
                    .iter()
                    .all(|(k, v)| l.get(*k).map(String::as_str) == Some(*v))
        })
        .map(|(_, _, v)| *v)
        .sum()
}

async fn scrape(g: &Glovebox, token: &str) -> (u16, String) {
    let auth = format!("Bearer {token}");
    let (status, _, body) = glovebox_e2e::http_request(
        &g.url,
        "GET",
        "/metrics",
        &[("Authorization", auth.as_str())],
        "",
    )
    .await;
    (status, body)
}

#[tokio::test(flavor = "multi_thread")]
async fn metrics_parse_move_with_calls_and_refuse_agents() {
    let g = Glovebox::start();
    let approver = g.credential_of(&g.account, "approver");
    // No credential, or an agent's: no metrics.
    let (status, _, _) = glovebox_e2e::http_request(&g.url, "GET", "/metrics", &[], "").await;
    assert_eq!(status, 401);
    let (status, body) = scrape(&g, &g.token).await;
    assert_eq!(status, 403, "an agent token read /metrics: {body}");
    assert!(!body.contains("glovebox_calls"));

    let (status, body) = scrape(&g, &approver).await;
    assert_eq!(status, 200, "{body}");
    let before = parse_prometheus(&body);
    let ok = [
        ("tool", "file_read"),
        ("verdict", "allow"),
        ("outcome", "ok"),
    ];
    let calls_before = value(&before, "glovebox_calls_total", &ok);
    let handed_before = value(&before, "glovebox_answers_handed_over_total", &[]);

    std::fs::write(g.workdir.join("a.txt"), "a\n").unwrap();
    let _approver_connection = g.connect("approver").await;
    let mut agent = g.connect("agent").await;
    for i in 0..2 {
        expect_ok(
            &agent
                .invoke(&format!("c{i}"), "file_read", json!({"path": "a.txt"}))
                .await,
        );
    }
    // A read outside every root is denied by the gate.
    let denied = agent
        .invoke("c9", "file_read", json!({"path": "/etc/hostname"}))
        .await;
    assert_eq!(denied["ok"], false, "{denied}");

    let (status, body) = scrape(&g, &approver).await;
    assert_eq!(status, 200);
    let after = parse_prometheus(&body);
    assert_eq!(
        value(&after, "glovebox_calls_total", &ok) - calls_before,
        2.0,
        "{body}"
    );
    // Both small reads were made ahead of their verdicts and their answers handed to the broker
    // by the gate; the denied one's was not.
    assert_eq!(
        value(&after, "glovebox_answers_handed_over_total", &[]) - handed_before,
        2.0,
        "{body}"
    );
    assert!(
        value(
            &after,
            "glovebox_calls_total",
            &[
                ("tool", "file_read"),
                ("verdict", "deny"),
                ("outcome", "denied")
            ]
        ) >= 1.0,
        "{body}"
    );
    assert!(
        value(
            &after,
            "glovebox_call_duration_seconds_count",
            &[("tool", "file_read")]
        ) >= 3.0,
        "{body}"
    );
    assert_eq!(
        value(&after, "glovebox_approver_connections", &[]),
        1.0,
        "{body}"
    );
    // The gate's part, over the gate link: audit commits were timed.
    assert!(
        value(&after, "glovebox_audit_commit_duration_seconds_count", &[]) >= 3.0,
        "{body}"
    );
    assert!(
        after
            .iter()
            .any(|(n, _, _)| n == "glovebox_audit_queue_depth"),
        "{body}"
    );
    // Nothing names the account, a path or a token.
    assert!(!body.contains("a.txt") && !body.contains("/etc/hostname"));
    assert!(!body.contains(&g.token) && !body.contains(&approver));
}
