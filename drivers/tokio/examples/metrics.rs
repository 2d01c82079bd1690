//! The client's metrics served for Prometheus while a bot's load runs: the application
//! installs the exporter it likes (here `metrics-exporter-prometheus`, serving `/metrics`)
//! before the client starts, and the client's `metrics` feature does the counting. Three
//! replicas work through a few chats: each round, per chat, a replica takes the chat's lock,
//! saves a message, reads it back, records the chat, gives the lock back, and lists the chat.
//! Then the example checks that what it serves counts exactly the calls it made, and keeps
//! serving for `BOTMESH_METRICS_HOLD_SECS` (a Prometheus, or a test, scrapes it meanwhile).
//!
//! ```text
//! cargo run -p botmesh-redis-tokio --features metrics --example metrics
//! BOTMESH_URL=redis://127.0.0.1:6379  or  BOTMESH_CLUSTER=127.0.0.1:7000,127.0.0.1:7001
//! BOTMESH_PREFIX=mybot                 (default botmesh-example-metrics)
//! BOTMESH_METRICS_ADDR=127.0.0.1:9091  where /metrics is served (the default)
//! BOTMESH_METRICS_ROUNDS=20            rounds of the load (the default)
//! BOTMESH_METRICS_HOLD_SECS=0          how long to keep serving after the load (the default)
//! ```
//!
//! `docs/operations.md` ("Metrics and spans") names every series and gives the PromQL of a
//! Grafana dashboard over them.
mod common;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use botmesh_redis_tokio::{Client, Limit, Released, Store, StoreOptions};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use tokio::sync::Mutex;

const REPLICAS: usize = 3;
const CHATS: usize = 4;
/// Latency buckets (seconds): Prometheus histograms, so that `histogram_quantile` works.
const BUCKETS: [f64; 12] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
];

/// The calls each operation made, by the library's operation names.
type Calls = Arc<Mutex<BTreeMap<&'static str, u64>>>;

/// What can end the example: a library error, or a check that did not hold.
type Result<T> = std::result::Result<T, Box<dyn std::error::Error + Send + Sync>>;

/// A check the example makes of its own outcome.
fn check(holds: bool, what: impl FnOnce() -> String) -> Result<()> {
    match holds {
        true => Ok(()),
        false => Err(what().into()),
    }
}

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> Result<T> {
    match std::env::var(name) {
        Ok(text) => text
            .parse()
            .map_err(|_| format!("{name}={text:?} does not parse").into()),
        Err(_) => Ok(default),
    }
}

/// Installs the Prometheus recorder as the global one and serves `/metrics` at `addr`.
fn serve_metrics(addr: SocketAddr) -> Result<PrometheusHandle> {
    let (recorder, exporter) = PrometheusBuilder::new()
        .with_http_listener(addr)
        .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), &BUCKETS)?
        .build()?;
    let handle = recorder.handle();
    metrics::set_global_recorder(recorder).map_err(|e| e.to_string())?;
    tokio::spawn(exporter);
    Ok(handle)
}

/// One replica's share of a round.
async fn replica(store: Store<Client>, n: usize, round: usize, calls: Calls) -> Result<()> {
    let coordinator = store.coordinator(format!("replica-{n}"))?;
    let owner = format!("replica-{n}-round-{round}");
    let count = |op: &'static str| {
        let calls = Arc::clone(&calls);
        async move { *calls.lock().await.entry(op).or_default() += 1 }
    };
    for chat in (n..CHATS).step_by(REPLICAS) {
        let chat = format!("chat-{chat}");
        // The lock is the chat's for this round: taken at once, no one else wants it.
        let lock = format!("{chat}:round-{round}");
        let fence = coordinator
            .lock(&lock, &owner, Duration::from_secs(30))
            .await?;
        count("lock_acquire").await;
        check(fence.is_some(), || format!("{lock} was taken"))?;
        let id = format!("m{round}");
        let time = 1_700_000_000_000 + round as i64;
        let saved = store.save_message(&chat, &id, time, "hello".into()).await?;
        count("save_message").await;
        check(saved, || format!("{chat}/{id} was there already"))?;
        let read = store.get_message(&chat, &id).await?;
        count("get_message").await;
        let payload = read.map(|m| m.payload);
        check(payload.as_deref() == Some(b"hello"), || {
            format!("{chat}/{id} read back as {payload:?}")
        })?;
        let record = format!("{{\"round\":{round}}}");
        store.upsert_chat(&chat, record.into()).await?;
        count("upsert_record").await;
        let released = coordinator.unlock(&lock, &owner).await?;
        count("lock_release").await;
        check(released == Released::Held, || format!("{lock} was lost"))?;
        let page = store.list_messages(&chat, .., None, Limit::DEFAULT).await?;
        count("list_messages").await;
        let listed = page.items.len();
        check(listed == round + 1, || {
            format!("{chat} lists {listed} messages")
        })?;
    }
    Ok(())
}

/// The value of the series `name{labels}` in Prometheus's text format, if served.
fn served(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' '))
        .and_then(|value| value.trim().parse().ok())
}

#[tokio::main]
async fn main() -> Result<()> {
    let addr: SocketAddr = env_or("BOTMESH_METRICS_ADDR", ([127, 0, 0, 1], 9091).into())?;
    let rounds: usize = env_or("BOTMESH_METRICS_ROUNDS", 20)?;
    let hold = Duration::from_secs(env_or("BOTMESH_METRICS_HOLD_SECS", 0)?);
    let prefix =
        std::env::var("BOTMESH_PREFIX").unwrap_or_else(|_| "botmesh-example-metrics".into());
    // The recorder first: the client registers its series when it starts.
    let handle = serve_metrics(addr)?;
    println!("serving: http://{addr}/metrics");
    let client = common::connect().await?;
    let store = Store::open(client.clone(), StoreOptions::new(prefix.as_str())).await?;
    for chat in 0..CHATS {
        store.delete_chat(&format!("chat-{chat}")).await?;
    }

    let calls: Calls = Arc::default();
    println!("load: {REPLICAS} replicas, {CHATS} chats, {rounds} rounds");
    for round in 0..rounds {
        let replicas: Vec<_> = (0..REPLICAS)
            .map(|n| tokio::spawn(replica(store.clone(), n, round, Arc::clone(&calls))))
            .collect();
        for replica in replicas {
            replica.await??;
        }
    }

    // What is served counts exactly the calls made, each with outcome ok.
    let text = handle.render();
    let calls = calls.lock().await.clone();
    let mut line = String::new();
    for (op, made) in &calls {
        let series = format!("botmesh_redis_requests_total{{operation=\"{op}\",outcome=\"ok\"}}");
        let counted = served(&text, &series);
        check(counted == Some(*made as f64), || {
            format!("{series} is {counted:?}, {made} calls were made:\n{text}")
        })?;
        line.push_str(&format!(" {op}={made}"));
    }
    println!("calls:{line}");
    let total: u64 = calls.values().sum();
    println!("summary: {total} calls over {rounds} rounds, each counted once at {addr}");
    tokio::time::sleep(hold).await;
    store.close().await;
    Ok(())
}
