//! The client's metrics, read from a recorder of the client's own (`metrics-util`'s
//! `DebuggingRecorder`, given with `Client::connect_recorded`), so each test sees exactly its
//! own client's counts, on both drivers: N calls are N requests of their operation with
//! outcome `ok` (and their latencies), a failed call counts under its error's kind, a request
//! timeout is a timeout, one connection is held per node used, and a `MOVED` after a slot
//! move is one redirect.

use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use botmesh_redis_core::{
    Access, ClientOptions, Error, Executor, Key, Limit, Request, Store, StoreOptions, Value,
};
use botmesh_redis_tests::conformance::{Client, Runtime};
use botmesh_redis_tests::{
    both_drivers, shared_single, unique_prefix, ClusterOptions, RedisCluster, ServerOptions,
    SingleNode,
};
use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};

/// What a recorder counted so far, by `name{label=value,...}` (labels in key order). A
/// `DebuggingRecorder` snapshot takes the values out (it resets them), so each reading is
/// added to the earlier ones: counters and the up-and-down connection gauges add up,
/// histogram samples gather (`ops_waiting` too is moved by differences, so its readings add up
/// the same way).
struct Totals {
    snapshotter: Snapshotter,
    series: BTreeMap<String, DebugValue>,
}

impl Totals {
    fn read(&mut self) -> &BTreeMap<String, DebugValue> {
        for (key, _, _, value) in self.snapshotter.snapshot().into_vec() {
            let key = key.key();
            let mut labels: Vec<String> = key
                .labels()
                .map(|l| format!("{}={}", l.key(), l.value()))
                .collect();
            labels.sort();
            let name = format!("{}{{{}}}", key.name(), labels.join(","));
            let total = self.series.entry(name).or_insert(match &value {
                DebugValue::Counter(_) => DebugValue::Counter(0),
                DebugValue::Gauge(_) => DebugValue::Gauge(0.0.into()),
                DebugValue::Histogram(_) => DebugValue::Histogram(Vec::new()),
            });
            match (total, value) {
                (DebugValue::Counter(t), DebugValue::Counter(n)) => *t += n,
                (DebugValue::Gauge(t), DebugValue::Gauge(v)) => {
                    *t = (t.into_inner() + v.into_inner()).into()
                }
                (DebugValue::Histogram(t), DebugValue::Histogram(v)) => t.extend(v),
                (total, value) => panic!("a series changed kind: {total:?} then {value:?}"),
            }
        }
        &self.series
    }
}

fn counter(series: &BTreeMap<String, DebugValue>, name: &str) -> u64 {
    match series.get(name) {
        Some(DebugValue::Counter(n)) => *n,
        other => panic!("{name}: {other:?}; series: {:#?}", series.keys()),
    }
}

fn gauge(series: &BTreeMap<String, DebugValue>, name: &str) -> f64 {
    match series.get(name) {
        Some(DebugValue::Gauge(v)) => v.into_inner(),
        other => panic!("{name}: {other:?}; series: {:#?}", series.keys()),
    }
}

fn samples(series: &BTreeMap<String, DebugValue>, name: &str) -> Vec<f64> {
    match series.get(name) {
        Some(DebugValue::Histogram(v)) => v.iter().map(|s| s.into_inner()).collect(),
        other => panic!("{name}: {other:?}; series: {:#?}", series.keys()),
    }
}

/// A client whose metrics go to a recorder of its own, and what the recorder counted.
async fn recorded<R: Runtime>(options: ClientOptions) -> (Client<R>, Totals) {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let client = Client::<R>::connect_recorded(options, Arc::new(recorder))
        .await
        .unwrap();
    let totals = Totals {
        snapshotter,
        series: BTreeMap::new(),
    };
    (client, totals)
}

async fn requests_are_counted_by_operation_and_outcome<R: Runtime>() {
    let node = shared_single();
    let options = ClientOptions::url(node.url());
    // `connect` checks each lane, on a connection of its own.
    let (client, mut totals) = recorded::<R>(options).await;
    let lanes = client.lanes();
    let store = Store::open(client.clone(), StoreOptions::new(unique_prefix("metrics")))
        .await
        .unwrap();
    for i in 0..5 {
        let id = format!("m{i}");
        assert!(store
            .save_message("chat", &id, 1_700_000_000_000 + i, "hi".into())
            .await
            .unwrap());
    }
    for i in 0..3 {
        let message = store.get_message("chat", &format!("m{i}")).await.unwrap();
        assert_eq!(message.map(|m| m.payload), Some("hi".into()));
    }
    let page = store.list_messages("chat", .., None, Limit::DEFAULT).await;
    assert_eq!(page.unwrap().items.len(), 5);
    let unknown = Request::cmd(Access::Read, "NOSUCHCOMMAND").build().unwrap();
    assert!(matches!(client.call(unknown).await, Err(Error::Server(_))));

    let s = totals.read();
    let requests = |op: &str, outcome: &str| {
        counter(
            s,
            &format!("botmesh_redis_requests_total{{operation={op},outcome={outcome}}}"),
        )
    };
    assert_eq!(requests("connect_check", "ok"), lanes as u64);
    assert_eq!(requests("save_message", "ok"), 5);
    assert_eq!(requests("get_message", "ok"), 3);
    assert_eq!(requests("list_messages", "ok"), 1);
    assert_eq!(requests("call", "server"), 1);
    assert!(!s.contains_key("botmesh_redis_requests_total{operation=call,outcome=ok}"));
    let latencies = samples(
        s,
        "botmesh_redis_request_duration_seconds{operation=save_message}",
    );
    assert_eq!(latencies.len(), 5, "{latencies:?}");
    assert!(
        latencies.iter().all(|&l| (0.0..10.0).contains(&l)),
        "{latencies:?}"
    );
    let node_label = format!("botmesh_redis_connections{{node={}}}", node.addr());
    assert_eq!(gauge(s, &node_label), lanes as f64);
    assert_eq!(gauge(s, "botmesh_redis_ops_waiting{}"), 0.0);
    // A single node redirects nothing, and nothing here was retried or timed out.
    assert_eq!(counter(s, "botmesh_redis_redirects_total{kind=moved}"), 0);
    assert_eq!(counter(s, "botmesh_redis_retries_total{reason=connect}"), 0);
    assert_eq!(counter(s, "botmesh_redis_timeouts_total{kind=request}"), 0);
    assert_eq!(counter(s, "botmesh_redis_reconnects_total{}"), 0);
    assert_eq!(client.stats().reconnects, 0);

    client.close().await;
    let s = totals.read();
    assert_eq!(
        gauge(s, &node_label),
        0.0,
        "the closed connection is given back"
    );
}

async fn a_request_timeout_is_counted_with_its_outcome<R: Runtime>() {
    let node = shared_single();
    let options = ClientOptions::url(node.url())
        .request_timeout(Duration::from_millis(200))
        .response_timeout(Duration::from_secs(5));
    let (client, mut totals) = recorded::<R>(options).await;
    // A pop that blocks for a second on a list nobody fills: past the request timeout.
    let key = Key::new(format!("{}:empty", unique_prefix("metrics-timeout")));
    let pop = Request::cmd(Access::Write, "BLPOP")
        .key(&key)
        .arg("1")
        .build()
        .unwrap();
    assert_eq!(
        client.call(pop).await,
        Err(Error::Timeout {
            outcome_unknown: true
        })
    );
    let s = totals.read();
    assert_eq!(
        counter(
            s,
            "botmesh_redis_requests_total{operation=call,outcome=timeout}"
        ),
        1
    );
    assert_eq!(counter(s, "botmesh_redis_timeouts_total{kind=request}"), 1);
    assert_eq!(counter(s, "botmesh_redis_timeouts_total{kind=response}"), 0);
    client.close().await;
}

/// A call the node takes 200 µs to answer (it spins in a script; a write, so that one written
/// and not answered in time says its outcome is unknown).
fn slow_call() -> Request {
    const SPIN: &str = "local t = redis.call('TIME') \
        local start = t[1] * 1000000 + t[2] \
        repeat t = redis.call('TIME') until t[1] * 1000000 + t[2] - start >= 200 \
        return 1";
    Request::cmd(Access::Write, "EVAL")
        .arg(SPIN)
        .arg(0u32)
        .build()
        .unwrap()
}

/// Calls parked for room count in `ops_waiting`, and those past their deadline end as `Timeout`,
/// never sent, and are counted as every other call is: one request of outcome `timeout`, one
/// request timeout, and a latency of at least the request timeout (they were ended beside the
/// session, and counted nowhere, before).
async fn calls_parked_past_their_deadline_are_counted<R: Runtime>() {
    let _turn = botmesh_redis_tests::exclusive().await;
    let node = SingleNode::start(ServerOptions::new());
    let timeout = Duration::from_millis(300);
    let options = ClientOptions::url(node.url())
        .request_timeout(timeout)
        .lanes(1);
    let (client, mut totals) = recorded::<R>(options).await;
    // 3,000 calls at 5,000 a second at most: the room (256) fills, the node answers it every
    // 50 ms, and most of the line is past its deadline before its turn.
    let calls: Vec<_> = (0..3_000)
        .map(|_| {
            let client = client.clone();
            tokio::spawn(async move { client.call(slow_call()).await })
        })
        .collect();
    // The calls in line are waiting as much as those in the session: `ops_waiting` counts
    // them, and climbs past the room (it stayed at the room before, whatever the line held).
    // The gauge moves when the lane's session looks (at each batch of replies, every 50 ms):
    // read until it passes a thousand, or the line drained.
    let mut most = 0.0f64;
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while most <= 1_000.0 && std::time::Instant::now() < deadline {
        most = most.max(gauge(totals.read(), "botmesh_redis_ops_waiting{}"));
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    assert!(
        most > 1_000.0,
        "ops_waiting reached {most} at most, {} calls parked so far",
        client.stats().parked
    );
    let (mut answered, mut timed_out) = (0u64, 0u64);
    for call in calls {
        match call.await.unwrap() {
            Ok(value) => {
                assert_eq!(value, Value::Int(1));
                answered += 1;
            }
            Err(Error::Timeout { .. }) => timed_out += 1,
            Err(e) => panic!("a slow call ended with {e:?}"),
        }
    }
    let parked = client.stats().parked;
    assert!(
        parked > 1_000 && timed_out > 1_000,
        "{parked} parked, {timed_out} timed out"
    );
    let s = totals.read();
    assert_eq!(
        counter(s, "botmesh_redis_requests_total{operation=call,outcome=ok}"),
        answered
    );
    assert_eq!(
        counter(
            s,
            "botmesh_redis_requests_total{operation=call,outcome=timeout}"
        ),
        timed_out
    );
    assert_eq!(
        counter(s, "botmesh_redis_timeouts_total{kind=request}"),
        timed_out
    );
    let latencies = samples(s, "botmesh_redis_request_duration_seconds{operation=call}");
    assert_eq!(latencies.len() as u64, answered + timed_out);
    let at_least_the_timeout = latencies
        .iter()
        .filter(|&&l| l >= timeout.as_secs_f64())
        .count() as u64;
    assert!(
        at_least_the_timeout >= timed_out,
        "{at_least_the_timeout} latencies of the request timeout or more, {timed_out} timeouts"
    );
    client.close().await;
}

/// Moving a slot changes the topology: this file owns a cluster for it. The two drivers' runs
/// take turns on it, each moving the slot of its own key.
fn own_cluster() -> &'static RedisCluster {
    static CLUSTER: OnceLock<RedisCluster> = OnceLock::new();
    CLUSTER.get_or_init(|| RedisCluster::start(ClusterOptions::new().replicas_per_master(0)))
}
static TURN: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

async fn a_moved_after_a_slot_move_is_one_redirect<R: Runtime>() {
    let _turn = TURN.lock().await;
    let cluster = tokio::task::spawn_blocking(own_cluster).await.unwrap();
    // No periodic refresh: the client learns of the move from the MOVED reply alone.
    let options =
        ClientOptions::cluster(cluster.seeds()).refresh_interval(Duration::from_secs(600));
    let (client, mut totals) = recorded::<R>(options).await;
    let key = Key::new(format!("{{{}}}:k", unique_prefix("metrics-moved")));
    let slot = key.slot();
    let set = Request::cmd(Access::Write, "SET")
        .key(&key)
        .arg("v")
        .build()
        .unwrap();
    client.call(set).await.unwrap();
    let s = totals.read();
    assert_eq!(counter(s, "botmesh_redis_redirects_total{kind=moved}"), 0);
    let refreshes = counter(s, "botmesh_redis_topology_refreshes_total{outcome=ok}");
    assert!(refreshes >= 1, "the first map came from a refresh");

    let old = cluster.master_for_slot(slot).unwrap();
    let new = cluster
        .masters()
        .unwrap()
        .into_iter()
        .find(|&m| m != old)
        .unwrap();
    let moved = tokio::task::spawn_blocking(move || cluster.move_slot(slot, new))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(moved, 1);
    let get = Request::cmd(Access::Read, "GET").key(&key).build().unwrap();
    assert_eq!(client.call(get.clone()).await, Ok(Value::from("v")));
    assert_eq!(client.call(get).await, Ok(Value::from("v")));

    let s = totals.read();
    assert_eq!(counter(s, "botmesh_redis_redirects_total{kind=moved}"), 1);
    assert_eq!(counter(s, "botmesh_redis_redirects_total{kind=ask}"), 0);
    assert_eq!(
        counter(s, "botmesh_redis_requests_total{operation=call,outcome=ok}"),
        3
    );
    let new_node = format!("botmesh_redis_connections{{node={new}}}");
    assert_eq!(gauge(s, &new_node), 1.0);
    client.close().await;
}

both_drivers!(
    requests_are_counted_by_operation_and_outcome,
    a_request_timeout_is_counted_with_its_outcome,
    a_moved_after_a_slot_move_is_one_redirect
);
both_drivers!(exclusive: calls_parked_past_their_deadline_are_counted);
