//! The `metrics` example of `botmesh-redis-tokio` (`drivers/tokio/examples/metrics.rs`), run
//! against the shared single node and the shared cluster and scraped over HTTP on loopback, as
//! Prometheus would: while its load runs, `/metrics` serves every documented series with its
//! type; once the load is done, the requests counter of each operation equals the calls the
//! example says it made, the latency histogram counted each of them, and the connections are
//! labelled by node. (`docs/operations.md` documents these names.)
//!
//! The binary is the one `cargo test --workspace --all-features` (or `cargo build -p
//! botmesh-redis-tokio --features metrics --examples`) built into `<target>/debug/examples/`.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use botmesh_redis_tests::harness::example_binary;
use botmesh_redis_tests::{shared_cluster, shared_single, unique_prefix};

/// Far above what the example's load takes.
const TIMEOUT: Duration = Duration::from_secs(120);

/// The series every scrape serves, with their Prometheus types.
const DOCUMENTED: [(&str, &str); 9] = [
    ("botmesh_redis_requests_total", "counter"),
    ("botmesh_redis_request_duration_seconds", "histogram"),
    ("botmesh_redis_redirects_total", "counter"),
    ("botmesh_redis_retries_total", "counter"),
    ("botmesh_redis_timeouts_total", "counter"),
    ("botmesh_redis_topology_refreshes_total", "counter"),
    ("botmesh_redis_reconnects_total", "counter"),
    ("botmesh_redis_connections", "gauge"),
    ("botmesh_redis_ops_waiting", "gauge"),
];

/// The example's process, killed when the test ends however it ends.
struct Example(Child);

impl Drop for Example {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A loopback port nobody listens on now.
fn free_port() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").expect("a free port");
    listener.local_addr().expect("its address")
}

/// Reads the example's output until a line starting with `prefix`; that line.
fn line_starting(out: &mut BufReader<ChildStdout>, prefix: &str, seen: &mut String) -> String {
    loop {
        let mut line = String::new();
        let read = out.read_line(&mut line).expect("the example's output");
        assert!(
            read > 0,
            "the example ended before `{prefix}`; it printed:\n{seen}"
        );
        seen.push_str(&line);
        if line.starts_with(prefix) {
            return line.trim_end().to_owned();
        }
    }
}

/// `GET /metrics` over plain HTTP/1.1; the body of a 200 answer. The exporter starts with the
/// example, so the first scrape may wait for its listener.
fn scrape(addr: SocketAddr) -> String {
    let started = Instant::now();
    let mut stream = loop {
        match TcpStream::connect_timeout(&addr, Duration::from_secs(1)) {
            Ok(stream) => break stream,
            Err(e) if started.elapsed() < Duration::from_secs(10) => {
                let _ = e;
                std::thread::sleep(Duration::from_millis(50));
            }
            Err(e) => panic!("nothing serves {addr}: {e}"),
        }
    };
    stream.set_read_timeout(Some(TIMEOUT)).unwrap();
    let request = format!("GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    let (head, body) = answer.split_once("\r\n\r\n").expect("an HTTP answer");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    body.to_owned()
}

/// The value of `series` (a name with its labels, as served).
fn value(body: &str, series: &str) -> Option<f64> {
    body.lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' '))
        .map(|v| v.trim().parse().expect("a number"))
}

fn assert_documented(body: &str) {
    for (name, kind) in DOCUMENTED {
        let type_line = format!("# TYPE {name} {kind}");
        assert!(body.contains(&type_line), "no `{type_line}` in:\n{body}");
    }
}

/// Runs the example against `target_env` (its connection variable and value), scrapes it
/// during and after the load; the scrape after it, and the calls it reported.
fn run_and_scrape(target_env: (&str, String)) -> (String, BTreeMap<String, f64>) {
    let addr = free_port();
    let binary = example_binary(
        "metrics",
        "cargo test --workspace --all-features` or `cargo build -p botmesh-redis-tokio \
         --features metrics --examples",
    );
    let mut command = Command::new(&binary);
    for var in ["BOTMESH_URL", "BOTMESH_CLUSTER"] {
        command.env_remove(var);
    }
    command
        .env(target_env.0, target_env.1)
        .env("BOTMESH_PREFIX", unique_prefix("example-metrics"))
        .env("BOTMESH_METRICS_ADDR", addr.to_string())
        .env("BOTMESH_METRICS_ROUNDS", "30")
        .env("BOTMESH_METRICS_HOLD_SECS", TIMEOUT.as_secs().to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    let mut example = Example(command.spawn().expect("starting the example"));
    let mut out = BufReader::new(example.0.stdout.take().expect("its output"));
    let mut seen = String::new();

    line_starting(&mut out, "serving: ", &mut seen);
    line_starting(&mut out, "load: ", &mut seen);
    // While the load runs: every series is served, with its type.
    assert_documented(&scrape(addr));

    let calls_line = line_starting(&mut out, "calls: ", &mut seen);
    line_starting(&mut out, "summary: ", &mut seen);
    let calls: BTreeMap<String, f64> = calls_line["calls: ".len()..]
        .split_whitespace()
        .map(|pair| {
            let (op, n) = pair.split_once('=').expect("op=count");
            (op.to_owned(), n.parse().expect("a count"))
        })
        .collect();
    assert_eq!(
        calls.keys().map(String::as_str).collect::<Vec<_>>(),
        [
            "get_message",
            "list_messages",
            "lock_acquire",
            "lock_release",
            "save_message",
            "upsert_record"
        ],
        "{seen}"
    );
    let body = scrape(addr);
    assert_documented(&body);
    for (op, made) in &calls {
        assert_eq!(*made, 120.0, "30 rounds of 4 chats: {seen}");
        let requests = format!("botmesh_redis_requests_total{{operation=\"{op}\",outcome=\"ok\"}}");
        assert_eq!(value(&body, &requests), Some(*made), "{requests}:\n{body}");
        let latencies =
            format!("botmesh_redis_request_duration_seconds_count{{operation=\"{op}\"}}");
        assert_eq!(
            value(&body, &latencies),
            Some(*made),
            "{latencies}:\n{body}"
        );
    }
    assert_eq!(
        value(&body, "botmesh_redis_ops_waiting"),
        Some(0.0),
        "{body}"
    );
    assert_eq!(
        value(&body, "botmesh_redis_timeouts_total{kind=\"request\"}"),
        Some(0.0),
        "{body}"
    );
    drop(example);
    (body, calls)
}

#[test]
fn metrics_example_on_single_node() {
    let _turn = botmesh_redis_tests::conformance::shared_turn_blocking();
    let node = shared_single();
    let (body, _) = run_and_scrape(("BOTMESH_URL", node.url()));
    let connections = format!("botmesh_redis_connections{{node=\"{}\"}}", node.addr());
    // One connection per lane: the example runs on tokio's multi-thread runtime
    // (`#[tokio::main]`), where a client of one node runs four.
    let lanes = 4.0;
    assert_eq!(value(&body, &connections), Some(lanes), "{body}");
    assert_eq!(
        value(&body, "botmesh_redis_redirects_total{kind=\"moved\"}"),
        Some(0.0),
        "a single node redirects nothing:\n{body}"
    );
}

#[test]
fn metrics_example_on_cluster() {
    let _turn = botmesh_redis_tests::conformance::shared_turn_blocking();
    let cluster = shared_cluster();
    let (body, _) = run_and_scrape(("BOTMESH_CLUSTER", cluster.seeds().join(",")));
    // The four chats' keys spread over the masters: one connection to each master used, and
    // the map came from at least one refresh round.
    let held: f64 = body
        .lines()
        .filter(|l| l.starts_with("botmesh_redis_connections{node=\""))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    assert!(held >= 1.0, "{body}");
    for master in cluster.masters().unwrap() {
        let series = format!("botmesh_redis_connections{{node=\"{master}\"}}");
        if let Some(n) = value(&body, &series) {
            assert_eq!(n, 1.0, "one connection per node: {series}");
        }
    }
    let refreshes = value(
        &body,
        "botmesh_redis_topology_refreshes_total{outcome=\"ok\"}",
    );
    assert!(refreshes.is_some_and(|n| n >= 1.0), "{body}");
}
