//! Where a call's time goes in our driver: a closed loop of `GET`s against servers this binary
//! starts, with what the client's counters ([`ClientStats`]) say per call, beside throughput
//! and client CPU.
//!
//! ```text
//! cargo run --release -p botmesh-redis-bench --bin hops --
//!     [--deployment standalone|cluster] [--runtime multi|current] [--callers N] [--seconds S]
//! ```
//!
//! Prints one line:
//!
//! ```text
//! hops deployment=standalone runtime=multi callers=64 calls_per_s=... cpu_us_per_call=...
//!     calls_per_pass=... calls_per_write=... calls_per_read=... switches_per_call=...
//!     server_busy=... inline_per_call=...
//! ```
//!
//! - `calls_per_pass`: calls served by each wake of the session task (a read, a submit, a
//!   timer); the fewer passes per call, the fewer task hand-offs.
//! - `calls_per_write`, `calls_per_read`: how many requests one socket write carries and how
//!   many replies one read brings (the batching the server sees).
//! - `server_busy`: the servers' CPU seconds per second of the run (1.00: one server never
//!   idle); what a client leaves of the server's time is what it loses.
//! - `inline_per_call`: inputs applied where they arose, without waking the session task (a
//!   lone caller's submit, a reader's bytes: two a call for a lone caller, none under load).
//! - `switches_per_call`: the process's context switches (voluntary and not, every thread,
//!   from `/proc/self/task/*/status`) per call: a thread that parks for want of work and is
//!   woken again costs two.
//!
//! The values are 100 bytes, 100,000 keys preloaded; each caller loops `GET`s of the next key
//! for `--seconds` (5 by default) after one second of warm-up. A benchmark stops at its first
//! failure, so it unwraps.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use botmesh_redis_client::{Client, ClientStats};
use botmesh_redis_core::{Access, ClientOptions, Executor, Key, Request, Value};
use botmesh_redis_harness::{ClusterOptions, RedisCluster, ServerOptions, SingleNode};
use botmesh_redis_tokio::runtime::Tokio;

const KEYS: usize = 100_000;
const VALUE_LEN: usize = 100;
/// Each caller reads every `STRIDE`-th key from its own start, so callers do not read the
/// same keys in step.
const STRIDE: usize = 7919;

/// Where a call's time goes in our driver (see the module documentation).
#[derive(Debug, clap::Parser)]
#[command(name = "hops")]
struct Args {
    /// One node, or a cluster of three masters.
    #[arg(long, value_parser = ["standalone", "cluster"], default_value = "standalone")]
    deployment: String,
    /// Tokio's multi-thread or current-thread runtime.
    #[arg(long, value_parser = ["multi", "current"], default_value = "multi")]
    runtime: String,
    /// Concurrent callers.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u64).range(1..))]
    callers: u64,
    /// Seconds measured, after one of warm-up.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..))]
    seconds: u64,
}

impl Args {
    fn cluster(&self) -> bool {
        self.deployment == "cluster"
    }

    fn multi(&self) -> bool {
        self.runtime == "multi"
    }
}

/// Context switches of every thread of this process so far.
fn switches() -> u64 {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return 0;
    };
    tasks
        .flatten()
        .filter_map(|task| std::fs::read_to_string(task.path().join("status")).ok())
        .flat_map(|status| {
            status
                .lines()
                .filter(|l| l.contains("ctxt_switches:"))
                .filter_map(|l| l.split_whitespace().last()?.parse::<u64>().ok())
                .collect::<Vec<_>>()
        })
        .sum()
}

/// The user + system CPU seconds so far of the process `pid` (`self` for this one).
fn cpu_seconds(pid: &str) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map_or("", |(_, rest)| rest)
        .split_whitespace()
        .collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    // Fields 14 and 15 of the file; 12 and 13 after the name's closing parenthesis.
    (ticks(11) + ticks(12)) / 100.0
}

async fn get(client: &Client<Tokio>, n: usize) {
    let get = Request::cmd(Access::Read, "GET")
        .key(Key::new(format!("bench:k:{n}")))
        .build()
        .expect("a GET");
    match client.call(get).await {
        Ok(Value::Bulk(b)) if b.len() == VALUE_LEN => {}
        other => panic!("GET bench:k:{n}: {other:?}"),
    }
}

/// The servers' CPU seconds so far, summed.
fn servers_cpu(pids: &[String]) -> f64 {
    pids.iter().map(|pid| cpu_seconds(pid)).sum()
}

async fn measure(options: ClientOptions, args: &Args, pids: &[String]) -> String {
    let client = Client::<Tokio>::connect(options).await.expect("connect");
    let (calls, stop) = (
        Arc::new(AtomicU64::new(0)),
        Arc::new(AtomicBool::new(false)),
    );
    let mut callers = Vec::new();
    for c in 0..args.callers as usize {
        let (client, calls, stop) = (client.clone(), calls.clone(), stop.clone());
        callers.push(tokio::spawn(async move {
            let mut n = c;
            while !stop.load(Ordering::Relaxed) {
                get(&client, n % KEYS).await;
                calls.fetch_add(1, Ordering::Relaxed);
                n += STRIDE;
            }
        }));
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let before = Snapshot::take(&client, &calls, pids);
    tokio::time::sleep(Duration::from_secs(args.seconds)).await;
    let after = Snapshot::take(&client, &calls, pids);
    stop.store(true, Ordering::Relaxed);
    for caller in callers {
        caller.await.expect("a caller");
    }
    client.close().await;
    after.since(&before)
}

/// What the counters say at one moment.
struct Snapshot {
    stats: ClientStats,
    calls: u64,
    cpu: f64,
    switches: u64,
    servers_cpu: f64,
    at: Instant,
}

impl Snapshot {
    fn take(client: &Client<Tokio>, calls: &AtomicU64, pids: &[String]) -> Snapshot {
        Snapshot {
            stats: client.stats(),
            calls: calls.load(Ordering::Relaxed),
            cpu: cpu_seconds("self"),
            switches: switches(),
            servers_cpu: servers_cpu(pids),
            at: Instant::now(),
        }
    }

    /// The line's figures, from `before` to this snapshot.
    fn since(&self, before: &Snapshot) -> String {
        let n = (self.calls - before.calls) as f64;
        let per = |a: u64, b: u64| n / (b - a).max(1) as f64;
        let (now, then) = (&self.stats, &before.stats);
        let seconds = (self.at - before.at).as_secs_f64();
        format!(
            "calls_per_s={:.0} cpu_us_per_call={:.2} calls_per_pass={:.2} calls_per_write={:.2} \
             calls_per_read={:.2} switches_per_call={:.3} server_busy={:.2} \
             inline_per_call={:.2}",
            n / seconds,
            (self.cpu - before.cpu) * 1e6 / n,
            per(then.passes, now.passes),
            per(then.writes, now.writes),
            per(then.reads, now.reads),
            (self.switches - before.switches) as f64 / n,
            (self.servers_cpu - before.servers_cpu) / seconds,
            (now.inline - then.inline) as f64 / n,
        )
    }
}

fn main() {
    let args = <Args as clap::Parser>::parse();
    let (cluster, node);
    let (options, pids) = if args.cluster() {
        cluster = RedisCluster::start(ClusterOptions::new().masters(3).replicas_per_master(0));
        let pids = cluster
            .nodes()
            .into_iter()
            .map(|addr| cluster.server(addr).expect("a node").pid().to_string());
        (ClientOptions::cluster(cluster.seeds()), pids.collect())
    } else {
        node = SingleNode::start(ServerOptions::new());
        let pids = vec![node.server().pid().to_string()];
        (ClientOptions::url(node.url()), pids)
    };
    let runtime = match args.multi() {
        true => tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build(),
        false => tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build(),
    }
    .expect("a tokio runtime");
    let line = runtime.block_on(async {
        preload(options.clone()).await;
        measure(options, &args, &pids).await
    });
    println!(
        "hops deployment={} runtime={} callers={} {line}",
        if args.cluster() {
            "cluster"
        } else {
            "standalone"
        },
        if args.multi() { "multi" } else { "current" },
        args.callers,
    );
}

/// Writes the keys the callers read.
async fn preload(options: ClientOptions) {
    let client = Client::<Tokio>::connect(options).await.expect("connect");
    let value = "v".repeat(VALUE_LEN);
    for chunk in (0..KEYS).collect::<Vec<_>>().chunks(1000) {
        let sets = chunk.iter().map(|n| {
            let set = Request::cmd(Access::Write, "SET")
                .key(Key::new(format!("bench:k:{n}")))
                .arg(value.as_str())
                .build()
                .expect("a SET");
            client.call(set)
        });
        for set in futures_util::future::join_all(sets).await {
            set.expect("SET");
        }
    }
    client.close().await;
}
