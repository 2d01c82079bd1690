//! Benchmark of issue 4: `botmesh-redis-tokio` against redis-rs's cluster-async client.
//!
//! ```text
//! cargo run --release -p botmesh-redis-bench --bin bench -- [--runtime multi|current] [--quick]
//!     [--only W1,W2,W3] [--client botmesh|redis-rs] [--w3-callers N] [--rounds N]
//! ```
//!
//! The binary starts its own Redis Cluster with the test harness: 3 masters and **no replicas**,
//! so that the numbers measure the clients, not replication. Both clients run in this one
//! process, on one tokio runtime (`--runtime multi`: the multi-thread scheduler with one worker
//! per core, the default; `--runtime current`: the current-thread scheduler), one after the
//! other, against the same cluster.
//!
//! # Workloads
//!
//! - **W1**: the two-key script call `save_message` (`ZADD` of the chat's log and `SET` of the
//!   item, keys `bench:{m:<chat>}:z` and `bench:{m:<chat>}:i:<id>`) over 10,000 chats with
//!   200-byte payloads, 200,000 calls by 64 concurrent callers. Ours runs the
//!   `store::save_message` plan; redis-rs invokes a `redis::Script` with the same Lua source,
//!   keys and arguments. The script is loaded on every master beforehand (neither client pays
//!   `NOSCRIPT`) and the cluster is flushed before each client's run, so both insert new data.
//! - **W2**: `GET` of 100,000 existing keys (`bench:k:<n>`, no hash tag, so over all slots,
//!   100-byte values, preloaded untimed), each once, by 64 concurrent callers.
//! - **W3**: a 32-bucket listing: 32 `ZRANGE idx 0 -1` of 100-member sorted sets
//!   (`bench:{ch:<b>}:idx`, b in 0..32, preloaded untimed) issued together; 2,000 listings by
//!   64 concurrent callers (2,048 requests in flight at most). Ours runs one plan whose single
//!   `Step::Send` holds the 32 requests; redis-rs joins 32 query futures (each on a clone of the
//!   cluster connection) with `join_all`. One operation is one listing.
//!
//! `--rounds N` runs each of W1-W3 N times with both clients (ours first in even rounds,
//! redis-rs first in odd ones) and ends each workload with a ratio line (see below). `--quick`
//! runs a tenth of every count (a smoke test). `--only` and `--client` restrict the run (for
//! profiling one side with `perf`). `--w3-callers N` changes W3's callers: at 64 (2,048
//! requests in flight) redis-rs saturates, its per-node pipelines queue (bounded at 50 by
//! default) and its p99 climbs to hundreds of milliseconds; a smaller N shows both clients
//! unsaturated.
//!
//! # What is printed
//!
//! One line per workload and client on stdout:
//!
//! ```text
//! W1 client=botmesh-tokio runtime=multi ops_per_s=... p50_us=... p99_us=... cpu_s_per_100k=...
//! ```
//!
//! - `ops_per_s`: operations over the wall time from the first call to the last reply.
//! - `p50_us`, `p99_us`: percentiles of the per-call latencies (every call is timed with
//!   `Instant` around its `.await`; all timings are sorted).
//! - `cpu_s_per_100k`: the process's user + system CPU time over the workload, scaled to 100,000
//!   operations. It is read from `/proc/self/stat` (fields 14 `utime` and 15 `stime`, summed over
//!   every thread of the process, in clock ticks of `getconf CLK_TCK`, 100 per second on Linux:
//!   a 10 ms resolution). The Redis servers are other processes and are not counted; the bench's
//!   own caller loops (key formatting, timing) are, equally for both clients.
//!
//! After the rounds of a workload, one line compares the clients:
//!
//! ```text
//! W1 ratio runtime=multi rounds=5 ops_per_s_x=1.12 (1.05-1.20) cpu_per_op_x=0.70 (0.66-0.74)
//! ```
//!
//! Each round gives a ratio (ours / redis-rs) of its two adjacent runs; the line shows their
//! median and range.
//!
//! Progress and notes go to stderr, prefixed with `#`. After each line, a note on stderr gives
//! the servers' side of the same run: the Redis processes' CPU (from `/proc/<pid>/stat`, per
//! 100,000 operations) and their read and write events per operation (`total_reads_processed`
//! and `total_writes_processed` of `INFO stats`; a read event per 12 operations means the
//! servers found 12 commands per read, that is, the client's batches). On a machine where the
//! servers and the client share the cores, the servers' CPU bounds the throughput of any
//! client.
//!
//! A call that fails is counted and reported on stderr after its workload; the line is printed
//! all the same.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::future::Future;
use std::io::Write;
use std::sync::Arc;
use std::time::{Duration, Instant};

use botmesh_redis_async_std::AsyncStd;
use botmesh_redis_runtime::{Client, Runtime};
use botmesh_redis_tests::{parse_info, AdminConn, ClusterOptions, RedisCluster};
use botmesh_redis_tokio::store::{MessageQuery, Store, StoreOptions};
use botmesh_redis_tokio::Tokio;
use botmesh_redis_tokio::{
    store, Access, ClientOptions, Executor, Key, Keyspace, Layout, Plan, Reply, Request, Step,
    Value,
};
use bytes::Bytes;
use redis::cluster_async::ClusterConnection;

/// Concurrent callers of every workload.
const CALLERS: usize = 64;
/// W1: chats the messages are spread over.
const CHATS: usize = 10_000;
/// W1: payload size.
const PAYLOAD_LEN: usize = 200;
/// W2: value size of the preloaded keys.
const VALUE_LEN: usize = 100;
/// W3: buckets of one listing, and members of each bucket's index.
const BUCKETS: usize = 32;
const MEMBERS: usize = 100;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum RuntimeKind {
    Multi,
    Current,
    /// No tokio at all: callers on async-global-executor, the async-std driver only.
    AsyncStd,
}

impl RuntimeKind {
    fn name(self) -> &'static str {
        match self {
            RuntimeKind::Multi => "multi",
            RuntimeKind::Current => "current",
            RuntimeKind::AsyncStd => "async-std",
        }
    }
}

struct Args {
    runtime: RuntimeKind,
    quick: bool,
    only: Option<Vec<String>>,
    client: Option<String>,
    w3_callers: usize,
    rounds: usize,
}

impl Args {
    fn parse() -> Args {
        let mut args = Args {
            runtime: RuntimeKind::Multi,
            quick: false,
            only: None,
            client: None,
            w3_callers: CALLERS,
            rounds: 1,
        };
        let mut it = std::env::args().skip(1);
        while let Some(arg) = it.next() {
            match arg.as_str() {
                "--runtime" => {
                    args.runtime = match it.next().as_deref() {
                        Some("multi") => RuntimeKind::Multi,
                        Some("current") => RuntimeKind::Current,
                        Some("async-std") => RuntimeKind::AsyncStd,
                        other => usage(&format!(
                            "--runtime wants multi, current or async-std, got {other:?}"
                        )),
                    }
                }
                "--quick" => args.quick = true,
                "--only" => {
                    let list = it.next().unwrap_or_else(|| usage("--only wants W1,W2,W3"));
                    args.only = Some(list.split(',').map(|w| w.trim().to_uppercase()).collect());
                }
                "--client" => match it.next().as_deref() {
                    Some(c @ ("botmesh" | "redis-rs")) => args.client = Some(c.to_owned()),
                    other => usage(&format!(
                        "--client wants botmesh or redis-rs, got {other:?}"
                    )),
                },
                "--rounds" => args.rounds = positive(it.next(), "--rounds"),
                "--w3-callers" => args.w3_callers = positive(it.next(), "--w3-callers"),
                "-h" | "--help" => usage(""),
                other => usage(&format!("unknown argument {other:?}")),
            }
        }
        args
    }

    fn runs(&self, workload: &str) -> bool {
        self.only
            .as_ref()
            .is_none_or(|only| only.iter().any(|w| w == workload))
    }

    fn runs_client(&self, client: &str) -> bool {
        self.client.as_deref().is_none_or(|c| c == client)
    }

    /// `n`, or a tenth of it with `--quick`.
    fn scaled(&self, n: usize) -> usize {
        if self.quick {
            n / 10
        } else {
            n
        }
    }
}

/// The positive number that follows `flag`, or the usage and exit.
fn positive(value: Option<String>, flag: &str) -> usize {
    value
        .and_then(|n| n.parse().ok())
        .filter(|&n| n > 0)
        .unwrap_or_else(|| usage(&format!("{flag} wants a positive number")))
}

fn usage(problem: &str) -> ! {
    if !problem.is_empty() {
        eprintln!("bench: {problem}");
    }
    eprintln!(
        "usage: bench [--runtime multi|current|async-std] [--quick] [--only W1,W2,W3] \
         [--client botmesh|redis-rs] [--w3-callers N] [--rounds N]"
    );
    std::process::exit(2)
}

// ---------------------------------------------------------------------------------------------
// Measuring
// ---------------------------------------------------------------------------------------------

/// Clock ticks per second of `/proc/self/stat` (`getconf CLK_TCK`; 100 when that fails).
fn clock_ticks() -> f64 {
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse::<f64>().ok())
        .filter(|&t| t > 0.0)
        .unwrap_or(100.0)
}

/// User + system CPU seconds of process `pid` (`"self"` for this one) so far, every thread,
/// live or ended.
fn cpu_seconds_of(pid: &str, ticks_per_s: f64) -> f64 {
    let path = format!("/proc/{pid}/stat");
    let stat = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {path}: {e}"));
    // The command name (field 2) is in parentheses and may hold spaces: count from the last ')'.
    let rest = &stat[stat.rfind(')').expect("malformed /proc/<pid>/stat") + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // `rest` starts at field 3, so field 14 (utime) is index 11 and field 15 (stime) index 12.
    let ticks = |i: usize| fields[i].parse::<u64>().expect("a tick count");
    (ticks(11) + ticks(12)) as f64 / ticks_per_s
}

/// Where CPU time is read: this process, and the cluster's servers.
struct Probe {
    ticks_per_s: f64,
    servers: Vec<String>,
    nodes: Vec<std::net::SocketAddr>,
}

/// The servers' own counters, summed over the nodes.
#[derive(Clone, Copy, Default)]
struct ServerCounts {
    /// Read events of the servers' event loops (`total_reads_processed`).
    reads: u64,
    /// Write events (`total_writes_processed`).
    writes: u64,
}

impl Probe {
    fn new(cluster: &RedisCluster) -> Probe {
        let servers = cluster
            .nodes()
            .into_iter()
            .map(|addr| {
                cluster
                    .server(addr)
                    .expect("a node of the cluster")
                    .pid()
                    .to_string()
            })
            .collect();
        Probe {
            ticks_per_s: clock_ticks(),
            servers,
            nodes: cluster.nodes(),
        }
    }

    /// `INFO stats` counters of every node, summed.
    fn counts(&self) -> ServerCounts {
        let mut sum = ServerCounts::default();
        for &addr in &self.nodes {
            let info = AdminConn::connect(addr)
                .and_then(|mut c| c.cmd(&["INFO", "stats"]))
                .expect("INFO stats");
            let info = parse_info(info.as_str().expect("INFO is a bulk string"));
            let count = |name: &str| {
                info.get(name)
                    .and_then(|v| v.parse::<u64>().ok())
                    .unwrap_or(0)
            };
            sum.reads += count("total_reads_processed");
            sum.writes += count("total_writes_processed");
        }
        sum
    }

    /// CPU seconds so far: (this process, all servers together).
    fn cpu(&self) -> (f64, f64) {
        let servers = self
            .servers
            .iter()
            .map(|pid| cpu_seconds_of(pid, self.ticks_per_s))
            .sum();
        (cpu_seconds_of("self", self.ticks_per_s), servers)
    }
}

/// One client's operation, run by one caller; every caller owns its worker.
trait Worker: Send + 'static {
    /// Runs operation `n`; an error is described.
    fn op(&mut self, n: usize) -> impl Future<Output = Result<(), String>> + Send;
}

struct Measured {
    ops: usize,
    wall: Duration,
    cpu_s: f64,
    /// CPU of the Redis servers over the same time.
    server_cpu_s: f64,
    /// The servers' read and write events over the same time.
    server_reads: u64,
    server_writes: u64,
    /// Per-call latencies in nanoseconds, sorted.
    latencies: Vec<u64>,
    errors: usize,
    first_error: Option<String>,
}

impl Measured {
    fn percentile_us(&self, p: usize) -> f64 {
        if self.latencies.is_empty() {
            return 0.0;
        }
        let i = (self.latencies.len() - 1) * p / 100;
        self.latencies[i] as f64 / 1000.0
    }
}

/// Spawns a caller on the benchmark's runtime; the handle yields its output.
fn spawn<T: Send + 'static>(
    rt: RuntimeKind,
    task: impl Future<Output = T> + Send + 'static,
) -> std::pin::Pin<Box<dyn Future<Output = T> + Send>> {
    match rt {
        RuntimeKind::AsyncStd => Box::pin(async_global_executor::spawn(task)),
        RuntimeKind::Multi | RuntimeKind::Current => {
            let handle = tokio::spawn(task);
            Box::pin(async move { handle.await.expect("a caller task panicked") })
        }
    }
}

/// Runs operations `0..total` on `callers` concurrent tasks (caller `i` runs `i`,
/// `i + callers`, ...), each with its own worker, and measures them.
async fn drive<W: Worker>(
    rt: RuntimeKind,
    total: usize,
    callers: usize,
    probe: &Probe,
    mut make: impl FnMut() -> W,
) -> Measured {
    let workers: Vec<W> = (0..callers).map(|_| make()).collect();
    let counts_before = probe.counts();
    let cpu_before = probe.cpu();
    let start = Instant::now();
    let mut tasks = Vec::with_capacity(callers);
    for (first, mut worker) in workers.into_iter().enumerate() {
        tasks.push(spawn(rt, async move {
            let mut latencies = Vec::with_capacity(total / callers + 1);
            let mut errors = 0;
            let mut first_error = None;
            let mut n = first;
            while n < total {
                let t = Instant::now();
                let result = worker.op(n).await;
                latencies.push(t.elapsed().as_nanos() as u64);
                if let Err(e) = result {
                    errors += 1;
                    first_error.get_or_insert(e);
                }
                n += callers;
            }
            (latencies, errors, first_error)
        }));
    }
    let mut results = Vec::with_capacity(callers);
    for task in tasks {
        results.push(task.await);
    }
    let wall = start.elapsed();
    let cpu_after = probe.cpu();
    let counts_after = probe.counts();
    let mut measured = Measured {
        ops: total,
        wall,
        cpu_s: cpu_after.0 - cpu_before.0,
        server_cpu_s: cpu_after.1 - cpu_before.1,
        server_reads: counts_after.reads - counts_before.reads,
        server_writes: counts_after.writes - counts_before.writes,
        latencies: Vec::with_capacity(total),
        errors: 0,
        first_error: None,
    };
    for (latencies, errors, first_error) in results {
        measured.latencies.extend(latencies);
        measured.errors += errors;
        if measured.first_error.is_none() {
            measured.first_error = first_error;
        }
    }
    measured.latencies.sort_unstable();
    measured
}

/// The figures a comparison is about.
#[derive(Clone, Copy)]
struct Figures {
    ops_per_s: f64,
    cpu_per_100k: f64,
}

/// One workload's rounds: each round runs both clients, one after the other.
#[derive(Default)]
struct Rounds {
    ours: Vec<Figures>,
    theirs: Vec<Figures>,
}

impl Rounds {
    /// Prints the median of the per-round ratios (ours / redis-rs) and their range. The two runs
    /// of a round are adjacent in time and share the machine's state, so each round's ratio is
    /// fairer than a ratio of two medians taken at different moments.
    fn summarize(&self, workload: &str, runtime: RuntimeKind) {
        let pairs = || self.ours.iter().zip(&self.theirs);
        let speed: Vec<f64> = pairs().map(|(o, t)| o.ops_per_s / t.ops_per_s).collect();
        let cpu: Vec<f64> = pairs()
            .map(|(o, t)| o.cpu_per_100k / t.cpu_per_100k)
            .collect();
        let (Some(speed), Some(cpu)) = (Spread::of(speed), Spread::of(cpu)) else {
            return;
        };
        let mut out = std::io::stdout().lock();
        let _ = writeln!(
            out,
            "{workload} ratio runtime={} rounds={} ops_per_s_x={:.2} ({:.2}-{:.2}) \
             cpu_per_op_x={:.2} ({:.2}-{:.2})",
            runtime.name(),
            self.ours.len().min(self.theirs.len()),
            speed.median,
            speed.min,
            speed.max,
            cpu.median,
            cpu.min,
            cpu.max,
        );
        let _ = out.flush();
    }
}

/// What every comparison shares.
struct Bench<'a> {
    runtime: RuntimeKind,
    rounds: usize,
    probe: &'a Probe,
    /// Our client's name in the lines.
    ours_name: &'a str,
}

/// One workload run by both clients, round after round.
struct Compared<'a> {
    workload: &'static str,
    total: usize,
    callers: usize,
    /// Run before each client's run (W1 empties the cluster).
    before_each: &'a dyn Fn(),
}

impl Compared<'_> {
    /// Runs the rounds (a client given as `None` is skipped), prints a line per run and the
    /// ratio line.
    async fn run<A: Worker, B: Worker>(
        &self,
        bench: &Bench<'_>,
        mut ours: Option<impl FnMut() -> A>,
        mut theirs: Option<impl FnMut() -> B>,
    ) {
        let (rt, probe) = (bench.runtime, bench.probe);
        let mut rounds = Rounds::default();
        for round in 0..bench.rounds {
            for side in Side::order(round) {
                let (make_ours, make_theirs) = match side {
                    Side::Ours => (ours.as_mut(), None),
                    Side::Theirs => (None, theirs.as_mut()),
                };
                if let Some(make) = make_ours {
                    (self.before_each)();
                    let m = drive(rt, self.total, self.callers, probe, make).await;
                    rounds
                        .ours
                        .push(report(self.workload, bench.ours_name, rt, &m));
                }
                if let Some(make) = make_theirs {
                    (self.before_each)();
                    let m = drive(rt, self.total, self.callers, probe, make).await;
                    rounds
                        .theirs
                        .push(report(self.workload, "redis-rs", rt, &m));
                }
            }
        }
        rounds.summarize(self.workload, rt);
    }
}

/// The two clients of a round.
#[derive(Clone, Copy)]
enum Side {
    Ours,
    Theirs,
}

impl Side {
    /// Who runs first alternates, so that neither client always runs on a warmer (or more
    /// fragmented) server.
    fn order(round: usize) -> [Side; 2] {
        if round.is_multiple_of(2) {
            [Side::Ours, Side::Theirs]
        } else {
            [Side::Theirs, Side::Ours]
        }
    }
}

/// Median and range of some figures.
struct Spread {
    median: f64,
    min: f64,
    max: f64,
}

impl Spread {
    fn of(mut values: Vec<f64>) -> Option<Spread> {
        values.sort_by(f64::total_cmp);
        let n = values.len();
        let median = match n {
            0 => return None,
            n if n % 2 == 1 => values[n / 2],
            n => (values[n / 2 - 1] + values[n / 2]) / 2.0,
        };
        Some(Spread {
            median,
            min: values[0],
            max: values[n - 1],
        })
    }
}

fn report(workload: &str, client: &str, runtime: RuntimeKind, m: &Measured) -> Figures {
    let ops_per_s = m.ops as f64 / m.wall.as_secs_f64();
    let cpu_per_100k = m.cpu_s * 100_000.0 / m.ops as f64;
    // A closed stdout (`bench | head -1`) must not panic: a panic keeps the servers' folders.
    let mut out = std::io::stdout().lock();
    let _ = writeln!(
        out,
        "{workload} client={client} runtime={} ops_per_s={ops_per_s:.0} p50_us={:.1} \
         p99_us={:.1} cpu_s_per_100k={cpu_per_100k:.3}",
        runtime.name(),
        m.percentile_us(50),
        m.percentile_us(99),
    );
    let _ = out.flush();
    if m.errors > 0 {
        eprintln!(
            "# {workload} client={client}: {} of {} calls FAILED; first: {}",
            m.errors,
            m.ops,
            m.first_error.as_deref().unwrap_or("?")
        );
    }
    eprintln!(
        "#   ({workload} {client}: {} ops in {:.2} s wall, {:.2} s client cpu, {:.2} s server cpu, \
         {:.3} server cpu s per 100k, {:.2} server reads and {:.2} writes per op)",
        m.ops,
        m.wall.as_secs_f64(),
        m.cpu_s,
        m.server_cpu_s,
        m.server_cpu_s * 100_000.0 / m.ops as f64,
        m.server_reads as f64 / m.ops as f64,
        m.server_writes as f64 / m.ops as f64,
    );
    Figures {
        ops_per_s,
        cpu_per_100k,
    }
}

// ---------------------------------------------------------------------------------------------
// Workers: botmesh
// ---------------------------------------------------------------------------------------------

fn describe(e: impl std::fmt::Display) -> String {
    e.to_string()
}

/// W1 with our client: the `save_message` plan.
struct SaveOurs<R: Runtime> {
    client: Client<R>,
    ks: Keyspace,
    payload: Bytes,
}

impl<R: Runtime> Worker for SaveOurs<R> {
    async fn op(&mut self, n: usize) -> Result<(), String> {
        let chat = format!("c{}", n % CHATS);
        let id = format!("m{n}");
        let plan = store::save_message(&self.ks, &chat, &id, n as i64, self.payload.clone())
            .map_err(describe)?;
        match self.client.run(plan).await.map_err(describe)? {
            true => Ok(()),
            false => Err(format!("message {id} was not new")),
        }
    }
}

/// W2 with our client: one `GET`.
struct GetOurs<R: Runtime> {
    client: Client<R>,
}

impl<R: Runtime> Worker for GetOurs<R> {
    async fn op(&mut self, n: usize) -> Result<(), String> {
        let key = Key::new(format!("bench:k:{n}"));
        let get = Request::cmd(Access::Read, "GET")
            .key(&key)
            .build()
            .map_err(describe)?;
        match self.client.call(get).await.map_err(describe)? {
            Value::Bulk(b) if b.len() == VALUE_LEN => Ok(()),
            other => Err(format!("GET {key}: unexpected {other:?}")),
        }
    }
}

/// W3 with our client: one plan, one batch of 32 `ZRANGE`s; yields the members counted.
struct Listing {
    keys: Arc<Vec<Key>>,
}

impl Plan for Listing {
    type Output = usize;

    fn start(&mut self) -> Step<usize> {
        let batch: Result<Vec<Request>, _> = self
            .keys
            .iter()
            .map(|key| {
                Request::cmd(Access::Read, "ZRANGE")
                    .key(key)
                    .arg(Bytes::from_static(b"0"))
                    .arg(Bytes::from_static(b"-1"))
                    .build()
            })
            .collect();
        match batch {
            Ok(batch) => Step::Send(batch),
            Err(e) => Step::Done(Err(e)),
        }
    }

    fn resume(&mut self, replies: Vec<Reply>) -> Step<usize> {
        let mut members = 0;
        for reply in replies {
            match reply {
                Ok(Value::Array(items)) => members += items.len(),
                Ok(_) => {}
                Err(e) => return Step::Done(Err(e)),
            }
        }
        Step::Done(Ok(members))
    }
}

struct ListOurs<R: Runtime> {
    client: Client<R>,
    keys: Arc<Vec<Key>>,
}

impl<R: Runtime> Worker for ListOurs<R> {
    async fn op(&mut self, _n: usize) -> Result<(), String> {
        let plan = Listing {
            keys: self.keys.clone(),
        };
        match self.client.run(plan).await.map_err(describe)? {
            members if members == BUCKETS * MEMBERS => Ok(()),
            members => Err(format!("listing: {members} members")),
        }
    }
}

/// Untimed loading with our client: one request per operation.
struct Load<R: Runtime, F> {
    client: Client<R>,
    request: Arc<F>,
}

impl<R: Runtime, F: Fn(usize) -> Request + Send + Sync + 'static> Worker for Load<R, F> {
    async fn op(&mut self, n: usize) -> Result<(), String> {
        let request = (self.request)(n);
        self.client.call(request).await.map(drop).map_err(describe)
    }
}

/// S2: chats and messages per chat of the preloaded history.
const S2_CHATS: usize = 200;
const S2_MESSAGES: usize = 100;
/// S3: chats stored.
const S3_CHATS: usize = 10_000;

/// S1: the store's `save_message`.
struct StoreSave<R: Runtime> {
    store: Store<Client<R>>,
    payload: Bytes,
}

impl<R: Runtime> Worker for StoreSave<R> {
    async fn op(&mut self, n: usize) -> Result<(), String> {
        let chat = format!("c{}", n % CHATS);
        let saved = self
            .store
            .save_message(&chat, &format!("m{n}"), n as i64, self.payload.clone())
            .await
            .map_err(describe)?;
        saved
            .then_some(())
            .ok_or_else(|| format!("message {n} was not new"))
    }
}

/// S2 preload: message `n` of chat `n % S2_CHATS`.
struct StoreLoad<R: Runtime> {
    store: Store<Client<R>>,
    payload: Bytes,
}

impl<R: Runtime> Worker for StoreLoad<R> {
    async fn op(&mut self, n: usize) -> Result<(), String> {
        let chat = format!("c{}", n % S2_CHATS);
        self.store
            .save_message(&chat, &format!("m{n:06}"), n as i64, self.payload.clone())
            .await
            .map(drop)
            .map_err(describe)
    }
}

/// S2: the first page of 50 messages of one chat.
struct StoreListMessages<R: Runtime> {
    store: Store<Client<R>>,
}

impl<R: Runtime> Worker for StoreListMessages<R> {
    async fn op(&mut self, n: usize) -> Result<(), String> {
        let chat = format!("c{}", n % S2_CHATS);
        let page = self
            .store
            .list_messages(&chat, &MessageQuery::new().limit(50))
            .await
            .map_err(describe)?;
        match page.messages.len() {
            50 => Ok(()),
            other => Err(format!("{chat}: a page of {other}")),
        }
    }
}

/// S3 preload: chat record `n`.
struct StoreUpsertChat<R: Runtime> {
    store: Store<Client<R>>,
}

impl<R: Runtime> Worker for StoreUpsertChat<R> {
    async fn op(&mut self, n: usize) -> Result<(), String> {
        self.store
            .upsert_chat(
                &format!("chat-{n:05}"),
                Bytes::from_static(b"{\"name\":\"a chat\"}"),
            )
            .await
            .map_err(describe)
    }
}

/// S3: a page of 50 chats after a place spread over the ids.
struct StoreListChats<R: Runtime> {
    store: Store<Client<R>>,
}

impl<R: Runtime> Worker for StoreListChats<R> {
    async fn op(&mut self, n: usize) -> Result<(), String> {
        // Pages start all over the id space, never in the last 50.
        let after = format!("chat-{:05}", (n * 7919) % (S3_CHATS - 50));
        let page = self
            .store
            .list_chats(Some(&after), 50)
            .await
            .map_err(describe)?;
        match page.records.len() {
            50 => Ok(()),
            other => Err(format!("after {after}: a page of {other}")),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Workers: redis-rs
// ---------------------------------------------------------------------------------------------

/// W1 with redis-rs: `redis::Script` with the same source, keys and arguments.
struct SaveRedis {
    conn: ClusterConnection,
    script: Arc<redis::Script>,
    ks: Keyspace,
    payload: Bytes,
}

impl Worker for SaveRedis {
    async fn op(&mut self, n: usize) -> Result<(), String> {
        let chat = format!("c{}", n % CHATS);
        let id = format!("m{n}");
        let log = self.ks.message_log(&chat);
        let item = self.ks.message_item(&chat, &id);
        let added: i64 = self
            .script
            .key(log.as_bytes())
            .key(item.as_bytes())
            .arg(id.as_str())
            .arg(n as i64)
            .arg(&self.payload[..])
            .invoke_async(&mut self.conn)
            .await
            .map_err(describe)?;
        match added {
            1 => Ok(()),
            other => Err(format!("message {id}: script returned {other}")),
        }
    }
}

/// W2 with redis-rs: one `GET`.
struct GetRedis {
    conn: ClusterConnection,
}

impl Worker for GetRedis {
    async fn op(&mut self, n: usize) -> Result<(), String> {
        let key = format!("bench:k:{n}");
        let value: Option<Vec<u8>> = redis::cmd("GET")
            .arg(&key)
            .query_async(&mut self.conn)
            .await
            .map_err(describe)?;
        match value {
            Some(v) if v.len() == VALUE_LEN => Ok(()),
            other => Err(format!("GET {key}: unexpected {other:?}")),
        }
    }
}

/// W3 with redis-rs: 32 `ZRANGE` futures, each on a clone of the connection, joined.
struct ListRedis {
    conn: ClusterConnection,
    keys: Arc<Vec<String>>,
}

impl Worker for ListRedis {
    async fn op(&mut self, _n: usize) -> Result<(), String> {
        let calls = self.keys.iter().map(|key| {
            let mut conn = self.conn.clone();
            let mut cmd = redis::cmd("ZRANGE");
            cmd.arg(key.as_str()).arg(0).arg(-1);
            async move {
                let reply: redis::RedisResult<redis::Value> = cmd.query_async(&mut conn).await;
                reply
            }
        });
        let mut members = 0;
        for reply in futures_util::future::join_all(calls).await {
            match reply.map_err(describe)? {
                redis::Value::Array(items) => members += items.len(),
                other => return Err(format!("ZRANGE: unexpected {other:?}")),
            }
        }
        match members {
            m if m == BUCKETS * MEMBERS => Ok(()),
            m => Err(format!("listing: {m} members")),
        }
    }
}

/// A worker that does nothing but `GET` of keys that do not exist: opens every connection.
struct WarmRedis {
    conn: ClusterConnection,
}

impl Worker for WarmRedis {
    async fn op(&mut self, n: usize) -> Result<(), String> {
        let _: Option<Vec<u8>> = redis::cmd("GET")
            .arg(format!("bench:warm:{n}"))
            .query_async(&mut self.conn)
            .await
            .map_err(describe)?;
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------------
// The run
// ---------------------------------------------------------------------------------------------

fn flush(cluster: &RedisCluster) {
    cluster.flush_all().expect("FLUSHALL on every master");
}

/// Loads `script` on every master, so that neither client pays `NOSCRIPT` while measured.
fn load_script(cluster: &RedisCluster, source: &str) {
    for master in cluster.masters().expect("masters") {
        cluster
            .conn(master)
            .and_then(|mut c| c.cmd(&["SCRIPT", "LOAD", source]))
            .expect("SCRIPT LOAD");
    }
}

async fn warm_up<R: Runtime>(
    rt: RuntimeKind,
    ours: Option<&Client<R>>,
    theirs: Option<&ClusterConnection>,
    probe: &Probe,
) {
    const WARM: usize = 5_000;
    if let Some(client) = ours {
        let get = |n: usize| {
            Request::cmd(Access::Read, "GET")
                .key(&Key::new(format!("bench:warm:{n}")))
                .build()
                .expect("GET")
        };
        let get = Arc::new(get);
        let m = drive(rt, WARM, CALLERS, probe, || Load {
            client: client.clone(),
            request: get.clone(),
        })
        .await;
        assert_eq!(m.errors, 0, "warm-up failed: {:?}", m.first_error);
    }
    if let Some(conn) = theirs {
        let m = drive(rt, WARM, CALLERS, probe, || WarmRedis {
            conn: conn.clone(),
        })
        .await;
        assert_eq!(m.errors, 0, "warm-up failed: {:?}", m.first_error);
    }
}

/// Runs the workloads with our client on runtime `R` (named `name` in the lines) and, when
/// `theirs` is given, with redis-rs.
async fn run<R: Runtime>(
    args: Args,
    cluster: RedisCluster,
    name: &str,
    theirs: Option<ClusterConnection>,
) {
    let rt = args.runtime;
    let probe = &Probe::new(&cluster);
    let bench = Bench {
        runtime: rt,
        rounds: args.rounds,
        probe,
        ours_name: name,
    };
    let seeds = cluster.seeds();
    let ours = Client::<R>::connect(ClientOptions::cluster(seeds.clone()))
        .await
        .expect("botmesh client connects");
    let run_ours = args.runs_client("botmesh");
    let run_theirs = args.runs_client("redis-rs") && theirs.is_some();
    let theirs = theirs.as_ref();
    warm_up(
        rt,
        run_ours.then_some(&ours),
        theirs.filter(|_| run_theirs),
        probe,
    )
    .await;
    let ks = Keyspace::new(Layout::Cluster, "bench").expect("keyspace");
    let payload = Bytes::from(vec![b'p'; PAYLOAD_LEN]);

    if args.runs("W1") {
        let total = args.scaled(200_000);
        load_script(&cluster, botmesh_redis_core::scripts::SAVE_MESSAGE.source());
        let script = Arc::new(redis::Script::new(
            botmesh_redis_core::scripts::SAVE_MESSAGE.source(),
        ));
        eprintln!(
            "# W1: save_message over {CHATS} chats, {PAYLOAD_LEN}-byte payloads, \
             {total} calls, {CALLERS} callers"
        );
        let compared = Compared {
            workload: "W1",
            total,
            callers: CALLERS,
            // Both clients insert new data.
            before_each: &|| flush(&cluster),
        };
        let theirs_worker = theirs.filter(|_| run_theirs).map(|conn| {
            || SaveRedis {
                conn: conn.clone(),
                script: script.clone(),
                ks: ks.clone(),
                payload: payload.clone(),
            }
        });
        let ours_worker = run_ours.then_some(|| SaveOurs {
            client: ours.clone(),
            ks: ks.clone(),
            payload: payload.clone(),
        });
        compared.run(&bench, ours_worker, theirs_worker).await;
    }

    if args.runs("W2") {
        let total = args.scaled(100_000);
        flush(&cluster);
        let value = Bytes::from(vec![b'v'; VALUE_LEN]);
        let set = Arc::new(move |n: usize| {
            Request::cmd(Access::Write, "SET")
                .key(&Key::new(format!("bench:k:{n}")))
                .arg(value.clone())
                .build()
                .expect("SET")
        });
        let loaded = drive(rt, total, CALLERS, probe, || Load {
            client: ours.clone(),
            request: set.clone(),
        })
        .await;
        assert_eq!(loaded.errors, 0, "W2 preload: {:?}", loaded.first_error);
        eprintln!("# W2: GET of {total} existing keys over all slots, {CALLERS} callers");
        let compared = Compared {
            workload: "W2",
            total,
            callers: CALLERS,
            before_each: &|| {},
        };
        let theirs_worker = theirs
            .filter(|_| run_theirs)
            .map(|conn| || GetRedis { conn: conn.clone() });
        let ours_worker = run_ours.then_some(|| GetOurs {
            client: ours.clone(),
        });
        compared.run(&bench, ours_worker, theirs_worker).await;
    }

    if args.runs("W3") {
        let total = args.scaled(2_000);
        let callers = args.w3_callers;
        flush(&cluster);
        let names: Vec<String> = (0..BUCKETS)
            .map(|b| format!("bench:{{ch:{b}}}:idx"))
            .collect();
        let keys: Vec<Key> = names.iter().map(|n| Key::new(n.clone())).collect();
        let keys = Arc::new(keys);
        let index_keys = keys.clone();
        let zadd = Arc::new(move |b: usize| {
            let mut cmd = Request::cmd(Access::Write, "ZADD").key(&index_keys[b]);
            for j in 0..MEMBERS {
                cmd = cmd.arg(j as u64).arg(format!("member-{j:04}"));
            }
            cmd.build().expect("ZADD")
        });
        let loaded = drive(rt, BUCKETS, BUCKETS, probe, || Load {
            client: ours.clone(),
            request: zadd.clone(),
        })
        .await;
        assert_eq!(loaded.errors, 0, "W3 preload: {:?}", loaded.first_error);
        eprintln!(
            "# W3: {total} listings of {BUCKETS} x ZRANGE 0 -1 ({MEMBERS} members each), \
             {callers} callers"
        );
        let names = Arc::new(names);
        let compared = Compared {
            workload: "W3",
            total,
            callers,
            before_each: &|| {},
        };
        let theirs_worker = theirs.filter(|_| run_theirs).map(|conn| {
            || ListRedis {
                conn: conn.clone(),
                keys: names.clone(),
            }
        });
        let ours_worker = run_ours.then_some(|| ListOurs {
            client: ours.clone(),
            keys: keys.clone(),
        });
        compared.run(&bench, ours_worker, theirs_worker).await;
    }

    // Store-level workloads (ours only: they measure the store's plans end to end).
    let store = Store::new(
        ours.clone(),
        StoreOptions::new("bench-store").cluster_client(true),
    )
    .expect("store");
    if args.runs("S1") {
        let total = args.scaled(100_000);
        flush(&cluster);
        eprintln!("# S1: Store::save_message over {CHATS} chats, {PAYLOAD_LEN}-byte payloads");
        let m = drive(rt, total, CALLERS, probe, || StoreSave {
            store: store.clone(),
            payload: payload.clone(),
        })
        .await;
        report("S1", name, rt, &m);
    }
    if args.runs("S2") {
        let total = args.scaled(20_000);
        flush(&cluster);
        let loaded = drive(rt, S2_CHATS * S2_MESSAGES, CALLERS, probe, || StoreLoad {
            store: store.clone(),
            payload: payload.clone(),
        })
        .await;
        assert_eq!(loaded.errors, 0, "S2 preload: {:?}", loaded.first_error);
        eprintln!(
            "# S2: Store::list_messages, first page of 50, of {S2_CHATS} chats holding \
             {S2_MESSAGES} messages each"
        );
        let m = drive(rt, total, CALLERS, probe, || StoreListMessages {
            store: store.clone(),
        })
        .await;
        report("S2", name, rt, &m);
    }
    if args.runs("S3") {
        let total = args.scaled(5_000);
        flush(&cluster);
        let loaded = drive(rt, S3_CHATS, CALLERS, probe, || StoreUpsertChat {
            store: store.clone(),
        })
        .await;
        assert_eq!(loaded.errors, 0, "S3 preload: {:?}", loaded.first_error);
        eprintln!(
            "# S3: Store::list_chats, a page of 50 from a random place, over {S3_CHATS} chats"
        );
        let m = drive(rt, total, CALLERS, probe, || StoreListChats {
            store: store.clone(),
        })
        .await;
        report("S3", name, rt, &m);
    }

    ours.close().await;
}

/// The redis-rs cluster connection of the comparison.
async fn redis_rs(cluster: &RedisCluster) -> ClusterConnection {
    redis::cluster::ClusterClient::new(cluster.seeds().iter().map(|s| format!("redis://{s}")))
        .expect("redis-rs cluster client")
        .get_async_connection()
        .await
        .expect("redis-rs cluster connection")
}

fn main() {
    let args = Args::parse();
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    eprintln!(
        "# cluster: 3 masters, no replicas (measures the clients, not replication); \
         runtime={}; {cores} cores; {}",
        args.runtime.name(),
        if args.quick {
            "quick (1/10)"
        } else {
            "full size"
        }
    );
    let cluster = RedisCluster::start(ClusterOptions::new().masters(3).replicas_per_master(0));
    let runtime = match args.runtime {
        RuntimeKind::AsyncStd => {
            // redis-rs needs tokio: this runtime measures the async-std driver alone.
            let run = run::<AsyncStd>(args, cluster, "botmesh-async-std", None);
            return async_global_executor::block_on(run);
        }
        RuntimeKind::Multi => tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build(),
        RuntimeKind::Current => tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build(),
    }
    .expect("a tokio runtime");
    runtime.block_on(async {
        let theirs = redis_rs(&cluster).await;
        run::<Tokio>(args, cluster, "botmesh-tokio", Some(theirs)).await
    });
}
