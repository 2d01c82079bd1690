//! The client benchmark: `botmesh-redis-tokio` against the strongest Rust peers, redis-rs and
//! fred, on a Redis Cluster and on a standalone server.
//!
//! ```text
//! cargo run --release -p botmesh-redis-bench --bin bench --
//!     [--deployment cluster|standalone|standalone-unix]
//!     [--runtime multi|current|async-std] [--quick] [--only W1,W2,W3,S1,S2,S3] [--client LIST]
//!     [--w3-callers N] [--rounds N] [--round-seconds S] [--fred-pool N]
//!     [--callers LIST] [--payload LIST] [--no-ceiling] [--open-loop] [--offer LIST]
//!     [--stall MS] [--timeline] [--drain S] [--lanes N] [--csv PATH]
//! ```
//!
//! The charts of `docs/performance.md` (`docs/img/*.svg`) are drawn from this binary's
//! `--csv` figures by the `charts` binary; one command runs the bench runs they need and draws
//! them: `scripts/charts` (`scripts/charts --quick` for a smoke run).
//!
//! The binary starts its own servers with the test harness: with `--deployment cluster` (the
//! default) a Redis Cluster of 3 masters and **no replicas**, so that the numbers measure the
//! clients, not replication; with `--deployment standalone` one `redis-server` without cluster
//! mode, same configuration; with `--deployment standalone-unix` the same server, which also
//! listens on a Unix socket, and every client (ours, redis-rs, fred) connects over the socket
//! (`unix://PATH`; fred with its `unix-sockets` feature): its lines beside a `standalone` run's
//! show what the socket saves over loopback TCP. Every client runs in this one process, on one runtime
//! (`--runtime multi`: tokio's multi-thread scheduler with one worker per core, the default;
//! `--runtime current`: tokio's current-thread scheduler; `--runtime async-std`: no tokio at
//! all, our async-std driver and redis-rs on smol), one after the other, against the same
//! servers.
//!
//! # Clients
//!
//! Each client is built once and shared by every caller (a clone each), the way a bot's tasks
//! share one client:
//!
//! - `botmesh-tokio` (ours; `botmesh-async-std` on `--runtime async-std`): on the cluster
//!   `ClientOptions::cluster` with the nodes as seeds, on the standalone server
//!   `ClientOptions::url` with the node's URL.
//! - `redis-rs` (redis 1.8): on the cluster its cluster-async connection
//!   (`ClusterClient::get_async_connection`), on the standalone server its multiplexed
//!   connection (`Client::get_multiplexed_async_connection`), which is what redis-rs offers
//!   many concurrent callers of one node (its `ConnectionManager` is the same connection with
//!   reconnection on top). Default settings.
//! - `fred` (fred 10): one `fred::clients::Client` built by `Builder::from_config` with a
//!   clustered or a centralized `ServerConfig`, fred's default performance and connection
//!   settings except `TCP_NODELAY`, which fred's own README example turns on (ours sets it too).
//! - `fred-pool`: a `fred::clients::Pool` of 2 such clients (`--fred-pool N` sets the size,
//!   `--fred-pool 0` leaves the pool out), which sends each command to the next client in turn:
//!   the form fred's own benchmark uses for many tasks. Measured against one client on this
//!   2-core machine, neither won everywhere, so both run and the ratio line takes the better.
//! - W3 only: `redis-rs-pipe`, `fred-pipe` and `fred-pool-pipe`, the peers' pipelined listing
//!   (see W3).
//!
//! `--client` takes a comma-separated list of client names: `botmesh`, `redis-rs`,
//! `redis-rs-pipe`, `fred`, `fred-pipe`, `fred-pool`, `fred-pool-pipe`; a name also selects
//! the forms named after it (`fred` selects all four of fred's, `redis-rs` both of
//! redis-rs's). Without it every client runs. On `--runtime async-std` fred does not run (it
//! needs tokio); redis-rs does, on smol's executor (its `smol-comp`: smol is async-io and
//! async-executor, the crates async-std runs on), which it takes when no tokio runtime runs.
//! A `--client` list of fred's forms alone is refused there, before any server starts.
//!
//! # Workloads
//!
//! - **W1**: the two-key script call `save_message` (`ZADD` of the chat's log and `SET` of the
//!   item, keys `bench:{m:<chat>}:z` and `bench:{m:<chat>}:i:<id>`) over 10,000 chats with
//!   200-byte payloads, 200,000 calls by 64 concurrent callers. Ours runs the
//!   `store::save_message` plan; redis-rs invokes a `redis::Script` with the same Lua source,
//!   keys and arguments; fred sends `EVALSHA` with the script's SHA-1
//!   (`LuaInterface::evalsha`), same keys and arguments. The script is loaded on every master
//!   (or the node) beforehand, so no client pays `NOSCRIPT`, and the data is flushed before each
//!   client's run, so every client inserts new data. The keys keep their hash tags on the
//!   standalone server, where they are harmless.
//! - **W2**: `GET` of 100,000 existing keys (`bench:k:<n>`, no hash tag, so over all slots of
//!   a cluster, 100-byte values, preloaded untimed), each once, by 64 concurrent callers.
//! - **W3**: a 32-bucket listing: 32 `ZRANGE idx 0 -1` of 100-member sorted sets
//!   (`bench:{ch:<b>}:idx`, b in 0..32, preloaded untimed) issued together; 2,000 listings by
//!   64 concurrent callers (2,048 requests in flight at most). One operation is one listing.
//!   - ours runs one plan whose single `Step::Send` holds the 32 requests;
//!   - `redis-rs` joins 32 query futures, each on a clone of the connection, with `join_all`;
//!     `fred` and `fred-pool` join 32 `zrange` futures on the client or pool the same way;
//!   - `redis-rs-pipe` sends one `redis::pipe()` of the 32 `ZRANGE`s, `fred-pipe` one
//!     `Client::pipeline()` of them (`Pipeline::all`), `fred-pool-pipe` the same on the pool's
//!     next client.
//!
//!   On the cluster `redis-rs-pipe` is left out: redis-rs's async cluster connection sends a
//!   pipeline whole to the node of its first key's slot and refuses one whose keys hash to
//!   several slots (`CROSSSLOT`, "Received crossed slots in pipeline"); the 32 keys hash to 32
//!   slots. The bench sends such a pipeline once before W3 and says on stderr what redis-rs
//!   answered (and runs the form, should a later redis-rs accept it). fred's pipeline routes
//!   each command to its own node, so `fred-pipe` runs on both deployments.
//!
//! # Sweeps, the ceiling and the open loop
//!
//! - `--callers LIST` (default `64`; e.g. `--callers 1,8,64,512`) runs each of W1-W3 at each
//!   caller count, one comparison (and ratio line) per count; `--w3-callers N`, when given,
//!   keeps W3 at N.
//! - `--payload LIST` (bytes, default `200`; e.g. `--payload 100,10000,1000000`) runs W1 at
//!   each message payload size. Past 512 MiB of payload per client's run the calls are scaled
//!   down (at 1 MB: 536 calls instead of 200,000, 53 with `--quick`), so that a run stays
//!   within seconds and the servers' memory within half a gigabyte.
//! - The servers' ceiling (see `ceiling.rs`): before a workload's runs, `redis-benchmark -P 16
//!   -c 64` (Debian's, package `redis-tools`, on `PATH`) against the same servers, for W1 (the
//!   same script, keys of the same shape, the run's payload) and W2 (`GET` of existing 100-byte
//!   values); W3 has none. It prints a `ceiling` line, and every client's line and the ratio
//!   line of the workload then end with `ceiling_share`, the throughput over the ceiling
//!   (ours, the median of the rounds, on the ratio line). `--no-ceiling` skips it.
//! - `--open-loop` (see `open_loop.rs`): after a workload's closed-loop runs, each client is
//!   offered 25%, 50% and 80% of its closed-loop peak as a fixed arrival rate, each call on its
//!   own task, its latency measured from its scheduled start, for 2 s per level (0.5 s with
//!   `--quick`). `--offer LIST` (calls a second, comma-separated; implies `--open-loop`)
//!   offers every client the same rates instead, so that the clients' lines compare at equal
//!   load. A level's line gives `achieved_per_s` (calls ended a second, failed or not) and
//!   `ok_per_s` (calls that succeeded): a client that sheds load by timing calls out shows it
//!   in the gap. `--stall MS` (implies `--open-loop`) blocks the thread that starts the calls
//!   for MS milliseconds once a quarter of each level's calls have started, as a stall of the
//!   process would (the machine's other work, a page-fault storm): the calls due meanwhile then
//!   start together, and the level's line (which gives `stall_ms`) shows whether the client
//!   drains that backlog and returns to the offered rate or stays behind it. `--timeline`
//!   prints, every 50 ms of each level, the calls started and ended in it and the calls in
//!   flight, and for our client its session tasks' passes, writes, reads and calls parked
//!   for room (`ClientStats`): how a level's rate moves, and where a backlog goes. `--drain S`
//!   (20 by default) is how long past its last arrival a level waits for its calls: a client
//!   that has not answered them all by then has its calls still out dropped and counted in
//!   `unfinished=` (measured at the cut, so its percentiles are lower bounds), and is offered
//!   no higher rate (a line says which were skipped). Our
//!   client's level lines end with `parked=`, and its closed-loop summaries with the calls
//!   parked for room in the run (one node's room for calls, `docs/operations.md`).
//! - `--lanes N` runs our client with N lanes (`ClientOptions::lanes`) instead of its
//!   driver's default (`Runtime::one_node_lanes` on one node, 1 on a cluster): how the count
//!   is measured.
//! - `--csv PATH` writes every figure line (closed loop, open loop, ceiling) as a row of a
//!   CSV file as well (`bench/src/figures.rs` holds the format), which `charts` reads.
//!
//! `--rounds N` runs each of W1-W3 N times with every client, in an order that rotates by
//! round (round r starts with the client after the one that started round r - 1), so that no
//! client always runs first or last on the servers; each workload ends with a ratio line (see
//! below). `--round-seconds S` makes each of those runs last S seconds, as many operations
//! as the callers start in that time (W2's keys wrap at its 100,000; where W1's payload is
//! so large that its count is cut to bound the bytes a run writes, that count stays a bound),
//! instead of the workload's count: every client then runs for the same time, where with a
//! count the faster client's runs are the shorter ones, and a pause of the machine (another
//! process, the hypervisor) is a larger share of them, so its rounds spread wider for the
//! same pauses. With more than one round, a workload's ceiling is measured again before each
//! round (see `ceiling_spread` below). `--quick` runs a tenth of every count (a smoke test).
//! `--only` and `--client` restrict the run (for profiling one client with `perf`).
//! `--w3-callers N` changes W3's callers: at 64 (2,048 requests in flight) redis-rs's joined
//! form saturates, its per-node pipelines queue (bounded at 50 by default) and its p99 climbs
//! to hundreds of milliseconds; a smaller N shows every client unsaturated.
//!
//! # What is printed
//!
//! One line per workload and client run on stdout:
//!
//! ```text
//! W1 client=botmesh-tokio deployment=cluster runtime=multi ops_per_s=... p50_us=... p99_us=... cpu_s_per_100k=... p999_us=... callers=64 payload=200 ceiling_share=0.81 server_busy=0.52 machine_busy=0.84
//! ```
//!
//! The fields after `cpu_s_per_100k` are newer than the others and come last, so that readers
//! of the older lines keep working: `p999_us`, the setting (`callers`, and `payload`, W1's
//! message or W2's value size, `-` for W3), where the workload has a ceiling,
//! `ceiling_share`, `server_busy`, the servers' mean busy share of a core over the run
//! (their CPU seconds over the wall time and the number of servers: 1.0 is every server flat
//! out), and `machine_busy`, the machine's (the client's and the servers' CPU seconds over the
//! wall time and the cores). The ceiling and the open-loop levels get lines of their own:
//!
//! ```text
//! W2 ceiling deployment=standalone runtime=multi tool=redis-benchmark pipeline=16 clients=64 ops_per_s=... callers=64 payload=100
//! W2 open-loop client=fred deployment=standalone runtime=multi offered_per_s=... achieved_per_s=... ok_per_s=... p50_us=... p99_us=... p999_us=... cpu_s_per_100k=... callers=open payload=100
//! ```
//!
//! - `ops_per_s`: operations over the wall time from the first call to the last reply.
//! - `p50_us`, `p99_us`, `p999_us`: percentiles of the per-call latencies (every call is timed with
//!   `Instant` around its `.await`; all timings are sorted).
//! - `cpu_s_per_100k`: the process's user + system CPU time over the workload, scaled to 100,000
//!   operations. It is the time on a CPU of every thread of the process, from the scheduler's
//!   `/proc/self/task/<tid>/schedstat`, to the nanosecond (`/proc/self/stat` counts in 10 ms
//!   ticks, a twentieth of a `GET` workload's client CPU). The Redis servers are other processes
//!   and are not counted (theirs is read the same way); the bench's own caller loops (key
//!   formatting, timing) are, equally for every client.
//!
//! After the rounds of a workload, one line compares ours with the best peer:
//!
//! ```text
//! W1 ratio deployment=cluster runtime=multi rounds=5 best_peer=fred ops_per_s_x=1.41 (1.30-1.52) cpu_per_op_x=0.55 (0.50-0.60) callers=64 payload=200 ceiling_share=0.81 server_busy=0.52 peer_server_busy=0.40 server_bound_x=2.71 machine_busy=0.84 machine_bound_x=1.62 spread=1.12 peer_spread=1.20 ceiling_spread=1.25
//! ```
//!
//! In each round the best peer is the peer's run (any form: `fred-pipe` is one) with the highest
//! `ops_per_s`; the round's ratios are ours / that run, for throughput and for CPU per
//! operation alike. The runs of a round are close in time and share the machine's state, so a
//! ratio per round is fairer than a ratio of medians taken at different moments. The line shows
//! the median and range of the rounds' ratios, and the best peer: its name when every round
//! agrees, else each name with the count of rounds it was best in, most first
//! (`best_peer=fred:4,redis-rs:1`). It ends with where the servers stand: `server_busy` and
//! `peer_server_busy` (medians over the rounds, ours and the best peer's) and
//! `server_bound_x`, the median of each round's ours / our `server_busy` / the best peer's
//! throughput: how far ours could go beyond the best peer if the servers ran flat out at our
//! server cost per call. Where it is below the goal's 1.3, the servers are the bound of that
//! row and no change of the client alone reaches the goal (on a cluster, a mean over the
//! masters: the hottest one is the bound sooner). Last come `machine_busy` (ours, the median)
//! and `machine_bound_x`, the median of each round's bound where the client and the servers
//! share the cores: the cores over our servers' CPU per call (what a client that took no CPU
//! at all would reach at our server cost per call) over the best peer's throughput. Three
//! masters on two cores are that case: each has headroom, the machine has none, and a row
//! whose `machine_bound_x` is below 1.3 is out of any client's reach on this machine at that
//! server cost. Last, `spread` and `peer_spread`: how far apart the rounds were, the fastest
//! round's throughput over the slowest's, ours and the best peer's (each round's best), and,
//! where the workload has a ceiling, `ceiling_spread`, the same of the ceilings measured
//! before each round: the same tool on the same servers, so the machine's own spread. The
//! `ceiling_share` of the ratio line is our median over the rounds' median ceiling. Our
//! goal (`docs/performance.md`) is at least 1.3 for `ops_per_s_x` and at most 0.7 for
//! `cpu_per_op_x`, on every workload, cluster and standalone, with `spread` no wider than
//! `peer_spread`.
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
//!
//! S1-S3 measure the store's plans end to end, ours only (no peer has a store), in the layout a
//! user of the deployment gets by default: the cluster layout on the cluster, the legacy one on
//! the standalone server.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod ceiling;
mod cli;
mod open_loop;
mod sweep;

use std::cell::RefCell;
use std::collections::HashMap;
use std::future::Future;
use std::io::Write;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use botmesh_redis_async_std::runtime::AsyncStd;
use botmesh_redis_bench::figures::{self, Kind, Row};
use botmesh_redis_bench::{CALLERS, CLIENT_NAMES, PAYLOAD_LEN};
use botmesh_redis_bench::{
    FRED, FRED_PIPE, FRED_POOL, FRED_POOL_PIPE, OURS, REDIS_RS, REDIS_RS_PIPE,
};
use botmesh_redis_client::{Client, ClientStats, Runtime};
// The real-server harness.
use botmesh_redis_harness::{
    parse_info, AdminConn, ClusterOptions, RedisCluster, ServerOptions, SingleNode,
};
use botmesh_redis_tokio::driver::{store::messages, Batch, Plan, Reply, Step};
use botmesh_redis_tokio::runtime::Tokio;
use botmesh_redis_tokio::{Access, ClientOptions, Executor, Key, Keyspace, Layout, Request, Value};
use botmesh_redis_tokio::{Limit, RecordCursor, Store, StoreOptions};
use bytes::Bytes;
use cli::{usage, Args, Deployment, RuntimeKind};
use fred::interfaces::{ClientLike, KeysInterface, LuaInterface, SortedSetsInterface};
use redis::aio::MultiplexedConnection;
use redis::cluster_async::ClusterConnection;
use sweep::Setting;

/// W1: chats the messages are spread over.
const CHATS: usize = 10_000;
/// W2: value size of the preloaded keys.
const VALUE_LEN: usize = 100;
/// W3: buckets of one listing, and members of each bucket's index.
const BUCKETS: usize = 32;
const MEMBERS: usize = 100;

/// Clients of fred's pool by default (`--fred-pool`).
const FRED_POOL_SIZE: usize = 2;

// ---------------------------------------------------------------------------------------------
// The servers
// ---------------------------------------------------------------------------------------------

/// The servers of the run, started by the harness and stopped when dropped.
enum Servers {
    Cluster(RedisCluster),
    /// One node (boxed: it is twice the cluster's handle); the clients connect over its Unix
    /// socket when `over_socket`.
    Standalone {
        node: Box<SingleNode>,
        over_socket: bool,
    },
}

impl Servers {
    fn start(deployment: Deployment) -> Servers {
        match deployment {
            Deployment::Cluster => Servers::Cluster(RedisCluster::start(
                ClusterOptions::new().masters(3).replicas_per_master(0),
            )),
            Deployment::Standalone => Servers::Standalone {
                node: Box::new(SingleNode::start(ServerOptions::new())),
                over_socket: false,
            },
            Deployment::StandaloneUnix => Servers::Standalone {
                node: Box::new(SingleNode::start(ServerOptions::new().unix_socket())),
                over_socket: true,
            },
        }
    }

    fn deployment(&self) -> Deployment {
        match self {
            Servers::Cluster(_) => Deployment::Cluster,
            Servers::Standalone {
                over_socket: false, ..
            } => Deployment::Standalone,
            Servers::Standalone {
                over_socket: true, ..
            } => Deployment::StandaloneUnix,
        }
    }

    /// Client addresses of every node.
    fn nodes(&self) -> Vec<SocketAddr> {
        match self {
            Servers::Cluster(cluster) => cluster.nodes(),
            Servers::Standalone { node, .. } => vec![node.addr()],
        }
    }

    /// Process ids of every node.
    fn pids(&self) -> Vec<String> {
        match self {
            Servers::Cluster(cluster) => cluster
                .nodes()
                .into_iter()
                .map(|addr| {
                    cluster
                        .server(addr)
                        .expect("a node of the cluster")
                        .pid()
                        .to_string()
                })
                .collect(),
            Servers::Standalone { node, .. } => vec![node.server().pid().to_string()],
        }
    }

    /// Admin connections to the nodes that hold data: the masters, or the node.
    fn data_nodes(&self) -> Vec<AdminConn> {
        match self {
            Servers::Cluster(cluster) => cluster
                .masters()
                .expect("masters")
                .into_iter()
                .map(|master| cluster.conn(master).expect("a master's admin connection"))
                .collect(),
            Servers::Standalone { node, .. } => {
                vec![node.conn().expect("the node's admin connection")]
            }
        }
    }

    /// Empties every node.
    fn flush(&self) {
        for mut node in self.data_nodes() {
            node.cmd(&["FLUSHALL"]).expect("FLUSHALL");
        }
    }

    /// Loads `script` on every node that holds data, so that no client pays `NOSCRIPT` while
    /// measured; yields the SHA-1 digest the servers answered.
    fn load_script(&self, source: &str) -> String {
        let mut digest = String::new();
        for mut node in self.data_nodes() {
            let reply = node.cmd(&["SCRIPT", "LOAD", source]).expect("SCRIPT LOAD");
            digest = reply
                .as_str()
                .expect("SCRIPT LOAD answers the digest")
                .to_owned();
        }
        digest
    }

    /// Our client's options for these servers.
    fn our_options(&self) -> ClientOptions {
        match self {
            Servers::Cluster(cluster) => ClientOptions::cluster(cluster.seeds()),
            Servers::Standalone { node, over_socket } => {
                ClientOptions::url(node_url(node, *over_socket))
            }
        }
    }
}

/// The URL the clients use for `node`: its Unix socket's (`unix://PATH`, which redis-rs reads
/// too) when `over_socket`, else its TCP one.
fn node_url(node: &SingleNode, over_socket: bool) -> String {
    match over_socket {
        true => node.unix_url().expect("the node listens on a socket"),
        false => node.url(),
    }
}

// ---------------------------------------------------------------------------------------------
// Measuring
// ---------------------------------------------------------------------------------------------

/// CPU time of one process so far, thread by thread: nanoseconds on a CPU, by thread id, from
/// the first field of `/proc/<pid>/task/<tid>/schedstat`, which the scheduler keeps to the
/// nanosecond. `/proc/<pid>/stat` counts in clock ticks (10 ms on Linux), a twentieth of a
/// `GET` workload's client CPU on this machine, which made its CPU ratios step by 5%.
struct ThreadTimes(HashMap<u32, u64>);

impl ThreadTimes {
    /// Reads every thread of process `pid` (`"self"` for this one).
    fn of(pid: &str) -> ThreadTimes {
        let dir = format!("/proc/{pid}/task");
        let entries = std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("read {dir}: {e}"));
        let mut times = HashMap::new();
        for entry in entries.flatten() {
            let Some(tid) = entry.file_name().to_str().and_then(|t| t.parse().ok()) else {
                continue;
            };
            // A thread that ended since the directory was listed has no file left: it is
            // counted as it would be had it ended before.
            let Ok(stat) = std::fs::read_to_string(entry.path().join("schedstat")) else {
                continue;
            };
            let ns = stat.split_whitespace().next().and_then(|f| f.parse().ok());
            times.insert(
                tid,
                ns.unwrap_or_else(|| panic!("malformed {dir}/{tid}/schedstat")),
            );
        }
        ThreadTimes(times)
    }

    /// CPU seconds spent since `before`, by the threads alive now. A thread that ended in
    /// between loses what it ran after `before`; the threads measured (the runtime's workers,
    /// the clients' tasks on them, a server's event loop) live through a run.
    fn seconds_since(&self, before: &ThreadTimes) -> f64 {
        let ns: u64 = self
            .0
            .iter()
            .map(|(tid, &now)| now.saturating_sub(before.0.get(tid).copied().unwrap_or(0)))
            .sum();
        ns as f64 / 1e9
    }
}

/// CPU times read at one instant: this process's, and each server's.
struct CpuSample {
    client: ThreadTimes,
    servers: Vec<ThreadTimes>,
}

impl CpuSample {
    /// CPU seconds since `before`: (this process, all servers together).
    fn since(&self, before: &CpuSample) -> (f64, f64) {
        let servers = self
            .servers
            .iter()
            .zip(&before.servers)
            .map(|(now, then)| now.seconds_since(then))
            .sum();
        (self.client.seconds_since(&before.client), servers)
    }
}

/// Where CPU time is read: this process, and the servers.
struct Probe {
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
    fn new(servers: &Servers) -> Probe {
        Probe {
            servers: servers.pids(),
            nodes: servers.nodes(),
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

    /// The CPU times of this process and of the servers, now.
    fn cpu(&self) -> CpuSample {
        CpuSample {
            client: ThreadTimes::of("self"),
            servers: self
                .servers
                .iter()
                .map(|pid| ThreadTimes::of(pid))
                .collect(),
        }
    }
}

/// One client's operation, run by one caller; every caller owns its worker.
trait Worker: Send + 'static {
    /// Runs operation `n`; an error is described.
    fn op(&mut self, n: usize) -> impl Future<Output = Result<(), String>> + Send;

    /// Our client's counters, for the open loop's timeline; `None` for a peer's worker.
    fn stats(&self) -> Option<Stats> {
        None
    }
}

/// Reads a client's counters, from a run and from the timeline's thread.
type Stats = Arc<dyn Fn() -> ClientStats + Send + Sync>;

/// Our client's counters, read through a handle of its own.
fn stats_of<R: Runtime>(client: &Client<R>) -> Option<Stats> {
    let client = client.clone();
    Some(Arc::new(move || client.stats()))
}

/// Our client's calls parked for room ([`ClientStats::parked`]) since a run started.
struct ParkedSince {
    stats: Stats,
    before: u64,
}

impl ParkedSince {
    /// Counts from now, for our client (a worker with `stats`); `None` for a peer.
    fn now(stats: Option<Stats>) -> Option<Self> {
        stats.map(|stats| {
            let before = stats().parked;
            ParkedSince { stats, before }
        })
    }

    fn count(&self) -> u64 {
        (self.stats)().parked - self.before
    }
}

struct Measured {
    ops: usize,
    /// Our client's callers parked for room ([`ClientStats::parked`]); `None` for a peer.
    parked: Option<u64>,
    wall: Duration,
    cpu_s: f64,
    /// CPU of the Redis servers over the same time.
    server_cpu_s: f64,
    /// How many Redis servers that CPU is summed over (the node, or the masters).
    servers: usize,
    /// The servers' read and write events over the same time.
    server_reads: u64,
    server_writes: u64,
    /// Per-call latencies in nanoseconds, sorted.
    latencies: Vec<u64>,
    errors: usize,
    first_error: Option<String>,
    /// Open-loop calls still out when the level stopped waiting (`--drain`), left out of
    /// `ops` and measured at the cut; 0 in a closed loop.
    unfinished: usize,
}

impl Measured {
    /// p50, p99 and p999 of the latencies, in microseconds.
    fn percentiles_us(&self) -> (f64, f64, f64) {
        (
            self.percentile_us(0.5),
            self.percentile_us(0.99),
            self.percentile_us(0.999),
        )
    }

    /// The latency below which a share `q` (0.5, 0.99, 0.999) of the calls stayed.
    fn percentile_us(&self, q: f64) -> f64 {
        if self.latencies.is_empty() {
            return 0.0;
        }
        let i = ((self.latencies.len() - 1) as f64 * q) as usize;
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

/// How long a closed-loop run lasts.
#[derive(Clone, Copy, Debug)]
enum Length {
    /// Operations `0..n`.
    Ops(usize),
    /// As many operations as the callers start within `run`, numbered from 0 and wrapping at
    /// `wrap` (a workload's keyspace, see [`Compared::keyspace`]), `most` at most. Every
    /// client then runs for the same time, so that a pause of the machine weighs the same in
    /// each client's throughput; with a count of operations, the faster client's runs are
    /// shorter and the same pause is a larger share of them.
    Time {
        run: Duration,
        wrap: usize,
        most: usize,
    },
}

/// Runs operations `0..total` on `callers` concurrent tasks (caller `i` runs `i`,
/// `i + callers`, ...), each with its own worker, and measures them.
async fn drive<W: Worker>(
    rt: RuntimeKind,
    total: usize,
    callers: usize,
    probe: &Probe,
    make: impl FnMut() -> W,
) -> Measured {
    drive_for(rt, Length::Ops(total), callers, probe, make).await
}

/// Runs operations for `length` on `callers` concurrent tasks (caller `i` runs `i`,
/// `i + callers`, ...), each with its own worker, and measures them.
async fn drive_for<W: Worker>(
    rt: RuntimeKind,
    length: Length,
    callers: usize,
    probe: &Probe,
    mut make: impl FnMut() -> W,
) -> Measured {
    let workers: Vec<W> = (0..callers).map(|_| make()).collect();
    // Our client's callers parked for room during the run (its workers share one client).
    let parked = ParkedSince::now(workers.first().and_then(Worker::stats));
    let counts_before = probe.counts();
    let cpu_before = probe.cpu();
    let start = Instant::now();
    // A caller starts an operation while it is below the count or before the deadline.
    let (total, deadline, wrap) = match length {
        Length::Ops(total) => (total, None, usize::MAX),
        Length::Time { run, wrap, most } => (most, Some(start + run), wrap.max(1)),
    };
    let mut tasks = Vec::with_capacity(callers);
    for (first, mut worker) in workers.into_iter().enumerate() {
        tasks.push(spawn(rt, async move {
            let expected = match length {
                Length::Ops(total) => total / callers + 1,
                Length::Time { .. } => 1024,
            };
            let mut latencies = Vec::with_capacity(expected);
            let mut errors = 0;
            let mut first_error = None;
            let mut n = first;
            while n < total {
                let t = Instant::now();
                if deadline.is_some_and(|at| t >= at) {
                    break;
                }
                let result = worker.op(n % wrap).await;
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
    let (cpu_s, server_cpu_s) = probe.cpu().since(&cpu_before);
    let counts_after = probe.counts();
    let ops = results
        .iter()
        .map(|(latencies, _, _)| latencies.len())
        .sum();
    let mut measured = Measured {
        ops,
        wall,
        cpu_s,
        server_cpu_s,
        servers: probe.servers.len(),
        server_reads: counts_after.reads - counts_before.reads,
        server_writes: counts_after.writes - counts_before.writes,
        latencies: Vec::with_capacity(ops),
        errors: 0,
        first_error: None,
        parked: parked.as_ref().map(ParkedSince::count),
        unfinished: 0,
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
    /// The servers' mean busy share of a core over the run: at 1.0 every server ran flat out,
    /// and no client could have been faster at the same server cost per call.
    server_busy: f64,
    /// The servers' CPU seconds per operation, all of them together.
    server_cpu_per_op: f64,
    /// The machine's busy share over the run: the client's and the servers' CPU over the wall
    /// time and the cores. Near 1.0 the client and the servers compete for the cores, and a
    /// client's CPU per call is taken from the servers' throughput.
    machine_busy: f64,
}

/// What every comparison shares.
struct Bench<'a> {
    runtime: RuntimeKind,
    deployment: Deployment,
    rounds: usize,
    /// How long each closed-loop run lasts (`--round-seconds`), when not its workload's count.
    round: Option<Duration>,
    probe: &'a Probe,
    /// Whether the runs are a tenth of their size (`--quick`).
    quick: bool,
    /// The open loop's stall, timeline and drain (`--stall`, `--timeline`, `--drain`).
    stall: Option<Duration>,
    timeline: bool,
    drain: Duration,
    /// Where the figures go besides stdout (`--csv PATH`).
    figures: Option<RefCell<figures::Writer>>,
}

impl Bench<'_> {
    /// A row of the figures file for this run's deployment and runtime.
    fn row(&self, kind: Kind, setting: &Setting, client: &str, ops_per_s: f64) -> Row {
        Row {
            kind,
            workload: setting.workload.to_owned(),
            deployment: self.deployment.name().to_owned(),
            runtime: self.runtime.name().to_owned(),
            client: client.to_owned(),
            callers: setting.callers,
            payload: setting.payload,
            offered_per_s: None,
            ops_per_s,
            p50_us: None,
            p99_us: None,
            p999_us: None,
            cpu_s_per_100k: None,
        }
    }

    /// Adds `row` to the figures file, if there is one.
    fn record(&self, row: Row) {
        if let Some(figures) = &self.figures {
            if let Err(e) = figures.borrow_mut().write(&row) {
                eprintln!("# {e}");
            }
        }
    }
}

/// A run of one workload by one client, measured; boxed so that clients whose workers differ
/// in type sit in one list.
type RunFn<'a> = Box<dyn Fn() -> Pin<Box<dyn Future<Output = Measured> + 'a>> + 'a>;

/// An open-loop level of one workload by one client at an arrival rate (calls per second).
type OfferFn<'a> = Box<dyn Fn(f64) -> Pin<Box<dyn Future<Output = Measured> + 'a>> + 'a>;

/// One client in a workload's comparison.
struct Contender<'a> {
    /// Its name in the lines.
    name: String,
    /// A peer, or ours.
    peer: bool,
    run: RunFn<'a>,
    offer: OfferFn<'a>,
}

/// One workload run by several clients, round after round.
#[derive(Clone, Copy)]
struct Compared<'a> {
    /// The workload and its callers, payload and ceiling.
    setting: Setting,
    total: usize,
    /// Operation numbers of the open loop and of timed runs (`--round-seconds`) wrap at this
    /// count (W2 has `total` keys); W1's do not wrap, so that every message is new.
    keyspace: usize,
    /// The most operations a timed run makes: W1's count where its payloads' bytes cut it
    /// ([`sweep::w1_calls`]), so that the servers' memory stays bounded; else no bound.
    most: usize,
    /// Run before each client's run (W1 empties the servers).
    before_each: &'a dyn Fn(),
    /// The servers' ceiling measured again, before each round but the first (whose ceiling
    /// is `setting.ceiling`); `None` where the workload has none. Each round's lines are a
    /// share of their own round's ceiling, and the ratio line gives the ceilings' spread: the
    /// same tool on the same servers, so how far apart the machine's rounds were, whatever
    /// the client.
    ceiling_again: &'a dyn Fn() -> Option<f64>,
}

impl<'a> Compared<'a> {
    /// A contender whose callers each get a worker from `make`.
    fn contender<W: Worker>(
        &self,
        bench: &Bench<'a>,
        name: &str,
        peer: bool,
        make: impl Fn() -> W + 'a,
    ) -> Contender<'a> {
        let (rt, probe) = (bench.runtime, bench.probe);
        let length = match bench.round {
            Some(run) => Length::Time {
                run,
                wrap: self.keyspace,
                most: self.most,
            },
            None => Length::Ops(self.total),
        };
        let callers = self.setting.callers;
        let level = open_loop::Level {
            runtime: rt,
            seconds: open_loop::seconds(bench.quick),
            keyspace: self.keyspace,
            stall: bench.stall,
            timeline: bench.timeline,
            drain: bench.drain,
        };
        // Each run gets its own handle on `make`, so that the run's future owns what it uses.
        let make = std::rc::Rc::new(make);
        let offered = make.clone();
        Contender {
            name: name.to_owned(),
            peer,
            run: Box::new(move || {
                let make = make.clone();
                Box::pin(drive_for(rt, length, callers, probe, move || make()))
            }),
            offer: Box::new(move |rate| {
                let make = offered.clone();
                Box::pin(level.offer(rate, probe, move || make()))
            }),
        }
    }

    /// Runs the rounds, prints a line per run and the ratio line; yields each contender's
    /// highest throughput over the rounds (its closed-loop peak).
    async fn run(&self, bench: &Bench<'_>, contenders: &[Contender<'_>]) -> Vec<f64> {
        let count = contenders.len();
        let mut rounds = Vec::with_capacity(bench.rounds);
        let mut ceilings = Vec::new();
        for round in 0..bench.rounds {
            let setting = Setting {
                ceiling: match round {
                    0 => self.setting.ceiling,
                    _ => (self.ceiling_again)(),
                },
                ..self.setting
            };
            ceilings.extend(setting.ceiling);
            // The order rotates by one client per round: with two clients, who goes first
            // alternates; with more, each is first, second, ... in turn, so that none always runs
            // on the warmest (or most fragmented) servers.
            let mut figures = vec![None; count];
            for k in 0..count {
                let i = (round + k) % count;
                let contender = &contenders[i];
                (self.before_each)();
                let m = (contender.run)().await;
                figures[i] = Some(report(bench, &setting, &contender.name, &m));
            }
            rounds.push(figures);
        }
        summarize(bench, &self.setting, contenders, &rounds, ceilings);
        (0..count)
            .map(|i| {
                rounds
                    .iter()
                    .filter_map(|figures| figures[i].map(|f| f.ops_per_s))
                    .fold(0.0, f64::max)
            })
            .collect()
    }
}

/// Prints the ratio line of a workload: each round's ours / best peer, their median and range.
fn summarize(
    bench: &Bench<'_>,
    setting: &Setting,
    contenders: &[Contender<'_>],
    rounds: &[Vec<Option<Figures>>],
    ceilings: Vec<f64>,
) {
    let Some(ours) = contenders.iter().position(|c| !c.peer) else {
        return;
    };
    let mut speed = Vec::new();
    let mut cpu = Vec::new();
    let mut ours_per_s = Vec::new();
    let mut best_per_s = Vec::new();
    let mut busy = Vec::new();
    let mut peer_busy = Vec::new();
    let mut bound = Vec::new();
    let mut machine_busy = Vec::new();
    let mut machine_bound = Vec::new();
    // How many rounds each peer was the best of, in the order of first being best.
    let mut best_counts: Vec<(&str, usize)> = Vec::new();
    for figures in rounds {
        let Some(our) = figures[ours] else { continue };
        let best = contenders
            .iter()
            .zip(figures)
            .filter(|(c, _)| c.peer)
            .filter_map(|(c, f)| f.map(|f| (c.name.as_str(), f)))
            .max_by(|a, b| a.1.ops_per_s.total_cmp(&b.1.ops_per_s));
        let Some((name, best)) = best else { continue };
        speed.push(our.ops_per_s / best.ops_per_s);
        ours_per_s.push(our.ops_per_s);
        best_per_s.push(best.ops_per_s);
        cpu.push(our.cpu_per_100k / best.cpu_per_100k);
        busy.push(our.server_busy);
        peer_busy.push(best.server_busy);
        // Ours with the servers flat out at our server cost per call, over the best peer:
        // the most any change of the client alone could give on this row.
        bound.push(our.ops_per_s / our.server_busy.max(f64::EPSILON) / best.ops_per_s);
        // A client that took no CPU at all, with the machine's cores spent on the servers at
        // our server cost per call, over the best peer: the bound where the client and the
        // servers share the cores (a cluster's nodes on two cores).
        machine_busy.push(our.machine_busy);
        let per_op = our.server_cpu_per_op.max(f64::EPSILON);
        machine_bound.push(cores() as f64 / per_op / best.ops_per_s);
        match best_counts.iter_mut().find(|(n, _)| *n == name) {
            Some((_, count)) => *count += 1,
            None => best_counts.push((name, 1)),
        }
    }
    let compared = speed.len();
    let (Some(speed), Some(cpu), Some(ours_per_s), Some(busy), Some(peer_busy), Some(bound)) = (
        Spread::of(speed),
        Spread::of(cpu),
        Spread::of(ours_per_s),
        Spread::of(busy),
        Spread::of(peer_busy),
        Spread::of(bound),
    ) else {
        return;
    };
    let (Some(machine_busy), Some(machine_bound), Some(best_per_s)) = (
        Spread::of(machine_busy),
        Spread::of(machine_bound),
        Spread::of(best_per_s),
    ) else {
        return;
    };
    let best_peer = match best_counts.as_slice() {
        [(name, _)] => (*name).to_owned(),
        _ => {
            // Most rounds first; a stable sort keeps ties in the order they were first best.
            best_counts.sort_by_key(|(_, count)| std::cmp::Reverse(*count));
            let names: Vec<String> = best_counts
                .iter()
                .map(|(name, count)| format!("{name}:{count}"))
                .collect();
            names.join(",")
        }
    };
    // Our median against the rounds' median ceiling; the ceilings' spread closes the line.
    let ceilings = Spread::of(ceilings);
    let setting = Setting {
        ceiling: ceilings.as_ref().map(|c| c.median),
        ..*setting
    };
    let ceiling_spread =
        ceilings.map_or_else(String::new, |c| format!(" ceiling_spread={:.2}", c.ratio()));
    let mut out = std::io::stdout().lock();
    let _ = writeln!(
        out,
        "{} ratio deployment={} runtime={} rounds={compared} best_peer={best_peer} \
         ops_per_s_x={:.2} ({:.2}-{:.2}) cpu_per_op_x={:.2} ({:.2}-{:.2}) {} \
         server_busy={:.2} peer_server_busy={:.2} server_bound_x={:.2} machine_busy={:.2} \
         machine_bound_x={:.2} spread={:.2} peer_spread={:.2}{ceiling_spread}",
        setting.workload,
        bench.deployment.name(),
        bench.runtime.name(),
        speed.median,
        speed.min,
        speed.max,
        cpu.median,
        cpu.min,
        cpu.max,
        setting.fields(ours_per_s.median),
        busy.median,
        peer_busy.median,
        bound.median,
        machine_busy.median,
        machine_bound.median,
        ours_per_s.ratio(),
        best_per_s.ratio(),
    );
    let _ = out.flush();
}

/// Median and range of some figures.
struct Spread {
    median: f64,
    min: f64,
    max: f64,
}

impl Spread {
    /// The largest over the smallest: how far apart the rounds were.
    fn ratio(&self) -> f64 {
        self.max / self.min.max(f64::EPSILON)
    }

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

/// Prints the line of a closed-loop run, records its row and the servers' side on stderr.
fn report(bench: &Bench<'_>, setting: &Setting, client: &str, m: &Measured) -> Figures {
    let workload = setting.workload;
    let ops_per_s = m.ops as f64 / m.wall.as_secs_f64();
    let cpu_per_100k = m.cpu_s * 100_000.0 / m.ops as f64;
    let (p50, p99, p999) = m.percentiles_us();
    let server_busy = m.server_cpu_s / (m.wall.as_secs_f64() * m.servers.max(1) as f64);
    let machine_busy = (m.cpu_s + m.server_cpu_s) / (m.wall.as_secs_f64() * cores() as f64);
    // A closed stdout (`bench | head -1`) must not panic: a panic keeps the servers' folders.
    // New fields go after the old ones, so that readers of the old lines keep working.
    let mut out = std::io::stdout().lock();
    let _ = writeln!(
        out,
        "{workload} client={client} deployment={} runtime={} ops_per_s={ops_per_s:.0} \
         p50_us={p50:.1} p99_us={p99:.1} cpu_s_per_100k={cpu_per_100k:.3} p999_us={p999:.1} {} \
         server_busy={server_busy:.2} machine_busy={machine_busy:.2}",
        bench.deployment.name(),
        bench.runtime.name(),
        setting.fields(ops_per_s),
    );
    let _ = out.flush();
    bench.record(Row {
        p50_us: Some(p50),
        p99_us: Some(p99),
        p999_us: Some(p999),
        cpu_s_per_100k: Some(cpu_per_100k),
        ..bench.row(Kind::Closed, setting, client, ops_per_s)
    });
    if m.errors > 0 {
        eprintln!(
            "# {workload} client={client}: {} of {} calls FAILED; first: {}",
            m.errors,
            m.ops,
            m.first_error.as_deref().unwrap_or("?")
        );
    }
    let parked = m
        .parked
        .map(|parked| format!(", {parked} callers parked for room"))
        .unwrap_or_default();
    eprintln!(
        "#   ({workload} {client}: {} ops in {:.2} s wall, {:.2} s client cpu, {:.2} s server cpu, \
         {:.3} server cpu s per 100k, {:.2} server reads and {:.2} writes per op{parked})",
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
        server_busy,
        server_cpu_per_op: m.server_cpu_s / m.ops as f64,
        machine_busy,
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
    fn stats(&self) -> Option<Stats> {
        stats_of(&self.client)
    }

    async fn op(&mut self, n: usize) -> Result<(), String> {
        let chat = format!("c{}", n % CHATS);
        let id = format!("m{n}");
        let plan = messages::save_message(&self.ks, &chat, &id, n as i64, self.payload.clone())
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
    fn stats(&self) -> Option<Stats> {
        stats_of(&self.client)
    }

    async fn op(&mut self, n: usize) -> Result<(), String> {
        // The key given by value, as the peers' `GET`s take theirs.
        let get = Request::cmd(Access::Read, "GET")
            .key(Key::new(format!("bench:k:{n}")))
            .build()
            .map_err(describe)?;
        match self.client.call(get).await.map_err(describe)? {
            Value::Bulk(b) if b.len() == VALUE_LEN => Ok(()),
            other => Err(format!("GET bench:k:{n}: unexpected {other:?}")),
        }
    }
}

/// W3 with our client: one plan, one batch of 32 `ZRANGE`s; yields the members counted.
struct Listing {
    keys: Arc<Vec<Key>>,
}

impl Plan for Listing {
    type Output = usize;

    fn operation(&self) -> &'static str {
        "listing"
    }

    fn start(&mut self) -> Step<usize> {
        let batch: Result<Batch, _> = self
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
    fn stats(&self) -> Option<Stats> {
        stats_of(&self.client)
    }

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
            .list_messages(&chat, .., None, Limit::of::<50>())
            .await
            .map_err(describe)?;
        match page.items.len() {
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
        let after = RecordCursor::after(format!("chat-{:05}", (n * 7919) % (S3_CHATS - 50)));
        let page = self
            .store
            .list_chats(Some(&after), Limit::of::<50>())
            .await
            .map_err(describe)?;
        match page.items.len() {
            50 => Ok(()),
            other => Err(format!("after {}: a page of {other}", after.id())),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Workers: redis-rs
// ---------------------------------------------------------------------------------------------

/// redis-rs's connection on either deployment. One type for both lets each worker be written
/// once; the calls go straight through (each returns the inner connection's own boxed
/// future), so the wrapper adds no allocation.
#[derive(Clone)]
enum RedisConn {
    Cluster(ClusterConnection),
    Standalone(MultiplexedConnection),
}

impl redis::aio::ConnectionLike for RedisConn {
    fn req_packed_command<'a>(
        &'a mut self,
        cmd: &'a redis::Cmd,
    ) -> redis::RedisFuture<'a, redis::Value> {
        match self {
            RedisConn::Cluster(conn) => conn.req_packed_command(cmd),
            RedisConn::Standalone(conn) => conn.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> redis::RedisFuture<'a, Vec<redis::Value>> {
        match self {
            RedisConn::Cluster(conn) => conn.req_packed_commands(pipeline, offset, count),
            RedisConn::Standalone(conn) => conn.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            RedisConn::Cluster(conn) => conn.get_db(),
            RedisConn::Standalone(conn) => conn.get_db(),
        }
    }
}

/// W1 with redis-rs: `redis::Script` with the same source, keys and arguments.
struct SaveRedis {
    conn: RedisConn,
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
    conn: RedisConn,
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

/// Members counted over the replies of one listing, or what was wrong.
fn count_redis_members(replies: impl IntoIterator<Item = redis::Value>) -> Result<(), String> {
    let mut members = 0;
    for reply in replies {
        match reply {
            redis::Value::Array(items) => members += items.len(),
            other => return Err(format!("ZRANGE: unexpected {other:?}")),
        }
    }
    match members {
        m if m == BUCKETS * MEMBERS => Ok(()),
        m => Err(format!("listing: {m} members")),
    }
}

/// W3 with redis-rs: 32 `ZRANGE` futures, each on a clone of the connection, joined.
struct ListRedis {
    conn: RedisConn,
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
        let replies: Result<Vec<redis::Value>, _> = futures_util::future::join_all(calls)
            .await
            .into_iter()
            .collect();
        count_redis_members(replies.map_err(describe)?)
    }
}

/// The pipeline of one listing: 32 `ZRANGE`s.
fn listing_pipe(keys: &[String]) -> redis::Pipeline {
    let mut pipe = redis::pipe();
    for key in keys {
        pipe.cmd("ZRANGE").arg(key.as_str()).arg(0).arg(-1);
    }
    pipe
}

/// W3 with redis-rs's pipeline: one `redis::pipe()` of the 32 `ZRANGE`s.
struct ListRedisPipe {
    conn: RedisConn,
    keys: Arc<Vec<String>>,
}

impl Worker for ListRedisPipe {
    async fn op(&mut self, _n: usize) -> Result<(), String> {
        let replies: Vec<redis::Value> = listing_pipe(&self.keys)
            .query_async(&mut self.conn)
            .await
            .map_err(describe)?;
        count_redis_members(replies)
    }
}

/// A worker that does nothing but `GET` of keys that do not exist: opens every connection.
struct WarmRedis {
    conn: RedisConn,
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
// Workers: fred
// ---------------------------------------------------------------------------------------------

/// fred's client: one `Client` (`fred`), or a `Pool` of them (`fred-pool`). The methods are the
/// calls of W1-W3, each straight through to fred's own.
#[derive(Clone)]
enum FredConn {
    One(fred::clients::Client),
    Pool(fred::clients::Pool),
}

type FredResult<T> = Result<T, fred::error::Error>;

impl FredConn {
    /// Builds and connects fred's client for these servers.
    async fn connect(servers: &Servers, pool: usize) -> FredConn {
        use fred::types::config::{Config, ServerConfig, TcpConfig};
        let host = |addr: SocketAddr| (addr.ip().to_string(), addr.port());
        let server = match servers {
            Servers::Cluster(_) => {
                ServerConfig::new_clustered(servers.nodes().into_iter().map(host).collect())
            }
            Servers::Standalone {
                node,
                over_socket: false,
            } => {
                let (ip, port) = host(node.addr());
                ServerConfig::new_centralized(ip, port)
            }
            Servers::Standalone {
                node,
                over_socket: true,
            } => ServerConfig::new_unix_socket(
                node.server()
                    .unix_socket()
                    .expect("the node listens on a socket"),
            ),
        };
        let mut builder = fred::types::Builder::from_config(Config {
            server,
            ..Config::default()
        });
        // fred leaves TCP_NODELAY to the OS (off) unless told; its README's example turns it
        // on, as ours does.
        builder.with_connection_config(|connection| {
            connection.tcp = TcpConfig {
                nodelay: Some(true),
                ..TcpConfig::default()
            };
        });
        let conn = if pool > 1 {
            FredConn::Pool(builder.build_pool(pool).expect("a fred pool"))
        } else {
            FredConn::One(builder.build().expect("a fred client"))
        };
        // The connection tasks run on the runtime until `quit`; their handles are not needed.
        match &conn {
            FredConn::One(client) => drop(client.init().await.expect("fred connects")),
            FredConn::Pool(pool) => drop(pool.init().await.expect("fred's pool connects")),
        }
        conn
    }

    async fn evalsha(
        &self,
        sha: fred::bytes_utils::Str,
        keys: [fred::types::Key; 2],
        args: [fred::types::Value; 3],
    ) -> FredResult<i64> {
        match self {
            FredConn::One(client) => client.evalsha(sha, keys.to_vec(), args).await,
            FredConn::Pool(pool) => pool.evalsha(sha, keys.to_vec(), args).await,
        }
    }

    async fn get(&self, key: String) -> FredResult<Option<Bytes>> {
        match self {
            FredConn::One(client) => client.get(key).await,
            FredConn::Pool(pool) => pool.get(key).await,
        }
    }

    /// `ZRANGE key 0 -1`.
    async fn zrange_all(&self, key: fred::types::Key) -> FredResult<fred::types::Value> {
        match self {
            FredConn::One(client) => {
                client
                    .zrange(key, 0_i64, -1_i64, None, false, None, false)
                    .await
            }
            FredConn::Pool(pool) => {
                pool.zrange(key, 0_i64, -1_i64, None, false, None, false)
                    .await
            }
        }
    }

    /// A pipeline on the client, or on the pool's next client.
    fn pipeline(&self) -> fred::clients::Pipeline<fred::clients::Client> {
        match self {
            FredConn::One(client) => client.pipeline(),
            FredConn::Pool(pool) => pool.next().pipeline(),
        }
    }

    async fn quit(&self) {
        let quit = match self {
            FredConn::One(client) => client.quit().await,
            FredConn::Pool(pool) => pool.quit().await,
        };
        if let Err(e) = quit {
            eprintln!("# fred: QUIT failed: {e}");
        }
    }
}

/// W1 with fred: `EVALSHA` of the same script, keys and arguments.
struct SaveFred {
    conn: FredConn,
    sha: fred::bytes_utils::Str,
    ks: Keyspace,
    payload: Bytes,
}

impl Worker for SaveFred {
    async fn op(&mut self, n: usize) -> Result<(), String> {
        use fred::types::{Key as FredKey, Value as FredValue};
        let chat = format!("c{}", n % CHATS);
        let id = format!("m{n}");
        let log = self.ks.message_log(&chat);
        let item = self.ks.message_item(&chat, &id);
        let added = self
            .conn
            .evalsha(
                self.sha.clone(),
                [
                    FredKey::from(log.as_bytes()),
                    FredKey::from(item.as_bytes()),
                ],
                [
                    FredValue::from(id.as_str()),
                    FredValue::Integer(n as i64),
                    FredValue::Bytes(self.payload.clone()),
                ],
            )
            .await
            .map_err(describe)?;
        match added {
            1 => Ok(()),
            other => Err(format!("message {id}: script returned {other}")),
        }
    }
}

/// W2 with fred: one `GET`.
struct GetFred {
    conn: FredConn,
}

impl Worker for GetFred {
    async fn op(&mut self, n: usize) -> Result<(), String> {
        let key = format!("bench:k:{n}");
        match self.conn.get(key).await.map_err(describe)? {
            Some(v) if v.len() == VALUE_LEN => Ok(()),
            other => Err(format!("GET bench:k:{n}: unexpected {other:?}")),
        }
    }
}

/// Members counted over the replies of one listing, or what was wrong.
fn count_fred_members(replies: impl IntoIterator<Item = fred::types::Value>) -> Result<(), String> {
    let mut members = 0;
    for reply in replies {
        match reply {
            fred::types::Value::Array(items) => members += items.len(),
            other => return Err(format!("ZRANGE: unexpected {other:?}")),
        }
    }
    match members {
        m if m == BUCKETS * MEMBERS => Ok(()),
        m => Err(format!("listing: {m} members")),
    }
}

/// W3 with fred: 32 `zrange` futures on the client, joined.
struct ListFred {
    conn: FredConn,
    keys: Arc<Vec<fred::types::Key>>,
}

impl Worker for ListFred {
    async fn op(&mut self, _n: usize) -> Result<(), String> {
        let calls = self
            .keys
            .iter()
            .map(|key| self.conn.zrange_all(key.clone()));
        let replies: Result<Vec<fred::types::Value>, _> = futures_util::future::join_all(calls)
            .await
            .into_iter()
            .collect();
        count_fred_members(replies.map_err(describe)?)
    }
}

/// W3 with fred's pipeline: the 32 `ZRANGE`s queued on one `Pipeline`, sent with `all`.
struct ListFredPipe {
    conn: FredConn,
    keys: Arc<Vec<fred::types::Key>>,
}

impl Worker for ListFredPipe {
    async fn op(&mut self, _n: usize) -> Result<(), String> {
        let pipeline = self.conn.pipeline();
        for key in self.keys.iter() {
            // Queues the command in memory; nothing is sent yet.
            let () = pipeline
                .zrange(key.clone(), 0_i64, -1_i64, None, false, None, false)
                .await
                .map_err(describe)?;
        }
        match pipeline.all().await.map_err(describe)? {
            fred::types::Value::Array(replies) => count_fred_members(replies),
            other => Err(format!("pipeline: unexpected {other:?}")),
        }
    }
}

/// A worker that does nothing but `GET` of keys that do not exist: opens every connection.
struct WarmFred {
    conn: FredConn,
}

impl Worker for WarmFred {
    async fn op(&mut self, n: usize) -> Result<(), String> {
        self.conn
            .get(format!("bench:warm:{n}"))
            .await
            .map(drop)
            .map_err(describe)
    }
}

// ---------------------------------------------------------------------------------------------
// The run
// ---------------------------------------------------------------------------------------------

/// The peers' connections, each present when one of its forms runs.
struct Peers {
    redis: Option<RedisConn>,
    /// fred's one client.
    fred: Option<FredConn>,
    /// fred's pool.
    fred_pool: Option<FredConn>,
}

async fn warm_up<R: Runtime>(
    rt: RuntimeKind,
    ours: Option<&Client<R>>,
    peers: &Peers,
    probe: &Probe,
) {
    const WARM: usize = 5_000;
    if let Some(client) = ours {
        let get = |n: usize| {
            Request::cmd(Access::Read, "GET")
                .key(Key::new(format!("bench:warm:{n}")))
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
    if let Some(conn) = &peers.redis {
        let m = drive(rt, WARM, CALLERS, probe, || WarmRedis {
            conn: conn.clone(),
        })
        .await;
        assert_eq!(m.errors, 0, "redis-rs warm-up failed: {:?}", m.first_error);
    }
    for conn in [&peers.fred, &peers.fred_pool].into_iter().flatten() {
        let m = drive(rt, WARM, CALLERS, probe, || WarmFred { conn: conn.clone() }).await;
        assert_eq!(m.errors, 0, "fred warm-up failed: {:?}", m.first_error);
    }
}

/// Runs the workloads with our client on runtime `R` (named `name` in the lines) and with the
/// peers given; the figures also go to `figures` (`--csv`).
async fn run<R: Runtime>(
    args: Args,
    servers: Servers,
    name: &str,
    peers: Peers,
    figures: Option<figures::Writer>,
) {
    let rt = args.runtime;
    let probe = &Probe::new(&servers);
    let bench = Bench {
        runtime: rt,
        deployment: servers.deployment(),
        rounds: args.rounds,
        round: args.round,
        probe,
        quick: args.quick,
        stall: args.stall,
        timeline: args.timeline,
        drain: args.drain,
        figures: figures.map(RefCell::new),
    };
    let options = match args.lanes {
        Some(lanes) => servers.our_options().lanes(lanes),
        None => servers.our_options(),
    };
    let ours = Client::<R>::connect(options)
        .await
        .expect("botmesh client connects");
    let run_ours = args.runs_client(OURS);
    warm_up(rt, run_ours.then_some(&ours), &peers, probe).await;
    let ks = Keyspace::new(Layout::Cluster, "bench").expect("keyspace");

    let workloads = Workloads {
        args: &args,
        servers: &servers,
        bench: &bench,
        ours: &ours,
        name,
        peers: &peers,
        ks,
    };
    if args.runs("W1") {
        workloads.w1().await;
    }
    if args.runs("W2") {
        workloads.w2().await;
    }
    if args.runs("W3") {
        workloads.w3().await;
    }

    workloads.stores().await;

    ours.close().await;
    for fred in [&peers.fred, &peers.fred_pool].into_iter().flatten() {
        fred.quit().await;
    }
}

/// What the workloads of a run share.
struct Workloads<'a, R: Runtime> {
    args: &'a Args,
    servers: &'a Servers,
    bench: &'a Bench<'a>,
    ours: &'a Client<R>,
    /// Ours in the lines.
    name: &'a str,
    peers: &'a Peers,
    ks: Keyspace,
}

impl<'a, R: Runtime> Workloads<'a, R> {
    /// Whether ours runs.
    fn ours(&self) -> bool {
        self.args.runs_client(OURS)
    }

    /// redis-rs's connection when its `form` is selected.
    fn redis(&self, form: &str) -> Option<&'a RedisConn> {
        self.peers
            .redis
            .as_ref()
            .filter(|_| self.args.runs_client(form))
    }

    /// fred's client or pool when its `form` is selected.
    fn fred(&self, form: &str) -> Option<&'a FredConn> {
        match form.starts_with(FRED_POOL) {
            true => self.peers.fred_pool.as_ref(),
            false => self.peers.fred.as_ref(),
        }
        .filter(|_| self.args.runs_client(form))
    }

    /// The ceiling of a setting, measured and printed, unless `--no-ceiling`.
    fn ceiling(
        &self,
        setting: &Setting,
        measure: impl FnOnce() -> Option<ceiling::Ceiling>,
    ) -> Option<f64> {
        if !self.args.ceiling {
            return None;
        }
        let measured = measure()?;
        ceiling::report(self.bench, setting, &measured);
        Some(measured.ops_per_s)
    }

    /// S1-S3: the store's plans end to end (ours only), in the layout a user of the
    /// deployment gets by default.
    async fn stores(&self) {
        let (rt, probe, bench, name) = (self.args.runtime, self.bench.probe, self.bench, self.name);
        let payload = Bytes::from(vec![b'p'; PAYLOAD_LEN]);
        let store = Store::new(self.ours.clone(), StoreOptions::new("bench-store")).expect("store");
        if self.args.runs("S1") {
            let total = self.args.scaled(100_000);
            self.servers.flush();
            eprintln!("# S1: Store::save_message over {CHATS} chats, {PAYLOAD_LEN}-byte payloads");
            let m = drive(rt, total, CALLERS, probe, || StoreSave {
                store: store.clone(),
                payload: payload.clone(),
            })
            .await;
            report(bench, &Setting::store("S1", Some(PAYLOAD_LEN)), name, &m);
        }
        if self.args.runs("S2") {
            let total = self.args.scaled(20_000);
            self.servers.flush();
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
            report(bench, &Setting::store("S2", Some(PAYLOAD_LEN)), name, &m);
        }
        if self.args.runs("S3") {
            let total = self.args.scaled(5_000);
            self.servers.flush();
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
            report(bench, &Setting::store("S3", None), name, &m);
        }
    }

    /// W1 at each payload size and caller count.
    async fn w1(&self) {
        let source = botmesh_redis_core::driver::scripts::SAVE_MESSAGE.source();
        let digest = self.servers.load_script(source);
        // fred is given the digest as the servers computed it (redis-rs's `Script` and our
        // client compute the same one themselves).
        let sha = fred::bytes_utils::Str::from(digest.as_str());
        let script = Arc::new(redis::Script::new(source));
        let flush = || self.servers.flush();
        for &size in &self.args.payloads {
            let total = self.args.scaled(sweep::w1_calls(200_000, size));
            let payload = Bytes::from(vec![b'p'; size]);
            eprintln!("# W1: save_message over {CHATS} chats, {size}-byte payloads, {total} calls");
            let setting = Setting {
                workload: "W1",
                callers: CALLERS,
                payload: Some(size),
                ceiling: None,
            };
            let measure_ceiling = || {
                self.ceiling(&setting, || {
                    ceiling::w1(self.servers, &self.ks, &digest, size)
                })
            };
            let compared = Compared {
                setting: Setting {
                    ceiling: measure_ceiling(),
                    ..setting
                },
                total,
                keyspace: usize::MAX,
                most: if sweep::w1_calls(200_000, size) < 200_000 {
                    total
                } else {
                    usize::MAX
                },
                // Every client inserts new data.
                before_each: &flush,
                ceiling_again: &measure_ceiling,
            };
            self.sweep(compared, &self.args.callers, |compared| {
                let mut list = Vec::new();
                if self.ours() {
                    list.push(
                        compared.contender(self.bench, self.name, false, || SaveOurs {
                            client: self.ours.clone(),
                            ks: self.ks.clone(),
                            payload: payload.clone(),
                        }),
                    );
                }
                if let Some(conn) = self.redis(REDIS_RS) {
                    list.push(
                        compared.contender(self.bench, REDIS_RS, true, || SaveRedis {
                            conn: conn.clone(),
                            script: script.clone(),
                            ks: self.ks.clone(),
                            payload: payload.clone(),
                        }),
                    );
                }
                for form in [FRED, FRED_POOL] {
                    let Some(conn) = self.fred(form) else {
                        continue;
                    };
                    list.push(compared.contender(self.bench, form, true, || SaveFred {
                        conn: conn.clone(),
                        sha: sha.clone(),
                        ks: self.ks.clone(),
                        payload: payload.clone(),
                    }));
                }
                list
            })
            .await;
        }
    }

    /// W2 at each caller count.
    async fn w2(&self) {
        let total = self.args.scaled(100_000);
        self.servers.flush();
        let value = Bytes::from(vec![b'v'; VALUE_LEN]);
        let set = Arc::new(move |n: usize| {
            Request::cmd(Access::Write, "SET")
                .key(Key::new(format!("bench:k:{n}")))
                .arg(value.clone())
                .build()
                .expect("SET")
        });
        let rt = self.args.runtime;
        let loaded = drive(rt, total, CALLERS, self.bench.probe, || Load {
            client: self.ours.clone(),
            request: set.clone(),
        })
        .await;
        assert_eq!(loaded.errors, 0, "W2 preload: {:?}", loaded.first_error);
        eprintln!("# W2: GET of {total} existing keys");
        let setting = Setting {
            workload: "W2",
            callers: CALLERS,
            payload: Some(VALUE_LEN),
            ceiling: None,
        };
        let measure_ceiling =
            || self.ceiling(&setting, || ceiling::w2(self.servers, total, VALUE_LEN));
        let compared = Compared {
            setting: Setting {
                ceiling: measure_ceiling(),
                ..setting
            },
            total,
            keyspace: total,
            most: usize::MAX,
            before_each: &|| {},
            ceiling_again: &measure_ceiling,
        };
        self.sweep(compared, &self.args.callers, |compared| {
            let mut list = Vec::new();
            if self.ours() {
                list.push(
                    compared.contender(self.bench, self.name, false, || GetOurs {
                        client: self.ours.clone(),
                    }),
                );
            }
            if let Some(conn) = self.redis(REDIS_RS) {
                list.push(compared.contender(self.bench, REDIS_RS, true, || GetRedis {
                    conn: conn.clone(),
                }));
            }
            for form in [FRED, FRED_POOL] {
                let Some(conn) = self.fred(form) else {
                    continue;
                };
                list.push(
                    compared.contender(self.bench, form, true, || GetFred { conn: conn.clone() }),
                );
            }
            list
        })
        .await;
    }

    /// W3's indexes, loaded: our keys and their names.
    async fn w3_indexes(&self) -> (Arc<Vec<Key>>, Vec<String>) {
        self.servers.flush();
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
        let rt = self.args.runtime;
        let loaded = drive(rt, BUCKETS, BUCKETS, self.bench.probe, || Load {
            client: self.ours.clone(),
            request: zadd.clone(),
        })
        .await;
        assert_eq!(loaded.errors, 0, "W3 preload: {:?}", loaded.first_error);
        (keys, names)
    }

    /// redis-rs's pipelined listing where redis-rs accepts the listing's pipeline: tried
    /// once, and the answer said.
    async fn w3_redis_pipe(&self, names: &[String]) -> Option<&'a RedisConn> {
        let conn = self.redis(REDIS_RS_PIPE)?;
        let tried: Result<Vec<redis::Value>, _> =
            listing_pipe(names).query_async(&mut conn.clone()).await;
        match tried.map_err(describe).and_then(count_redis_members) {
            Ok(()) => Some(conn),
            Err(e) => {
                eprintln!(
                    "# W3: {REDIS_RS_PIPE} left out on this deployment: redis-rs refused the \
                     listing's pipeline of {BUCKETS} ZRANGEs over {BUCKETS} slots: {e}"
                );
                None
            }
        }
    }

    /// W3 at each caller count (or at `--w3-callers`).
    async fn w3(&self) {
        let total = self.args.scaled(2_000);
        let (keys, names) = self.w3_indexes().await;
        eprintln!("# W3: {total} listings of {BUCKETS} x ZRANGE 0 -1 ({MEMBERS} members each)");
        if self.args.ceiling {
            eprintln!(
                "# W3: no ceiling: a listing is {BUCKETS} ZRANGEs over {BUCKETS} slots as one \
                 operation, which redis-benchmark cannot issue"
            );
        }
        let fred_keys: Arc<Vec<fred::types::Key>> =
            Arc::new(names.iter().map(fred::types::Key::from).collect());
        let redis_pipe = self.w3_redis_pipe(&names).await;
        let names = Arc::new(names);
        let compared = Compared {
            setting: Setting {
                workload: "W3",
                callers: CALLERS,
                payload: None,
                ceiling: None,
            },
            total,
            keyspace: usize::MAX,
            most: usize::MAX,
            before_each: &|| {},
            ceiling_again: &|| None,
        };
        let callers = match self.args.w3_callers {
            Some(n) => vec![n],
            None => self.args.callers.clone(),
        };
        self.sweep(compared, &callers, |compared| {
            let mut list = Vec::new();
            if self.ours() {
                list.push(
                    compared.contender(self.bench, self.name, false, || ListOurs {
                        client: self.ours.clone(),
                        keys: keys.clone(),
                    }),
                );
            }
            if let Some(conn) = self.redis(REDIS_RS) {
                list.push(
                    compared.contender(self.bench, REDIS_RS, true, || ListRedis {
                        conn: conn.clone(),
                        keys: names.clone(),
                    }),
                );
            }
            if let Some(conn) = redis_pipe {
                list.push(
                    compared.contender(self.bench, REDIS_RS_PIPE, true, || ListRedisPipe {
                        conn: conn.clone(),
                        keys: names.clone(),
                    }),
                );
            }
            for (joined, piped) in [(FRED, FRED_PIPE), (FRED_POOL, FRED_POOL_PIPE)] {
                if let Some(conn) = self.fred(joined) {
                    list.push(compared.contender(self.bench, joined, true, || ListFred {
                        conn: conn.clone(),
                        keys: fred_keys.clone(),
                    }));
                }
                if let Some(conn) = self.fred(piped) {
                    list.push(
                        compared.contender(self.bench, piped, true, || ListFredPipe {
                            conn: conn.clone(),
                            keys: fred_keys.clone(),
                        }),
                    );
                }
            }
            list
        })
        .await;
    }

    /// Runs `compared` at each caller count with the contenders `contenders` builds for it,
    /// then, with `--open-loop`, offers each contender the open-loop levels of its peak over
    /// those runs.
    async fn sweep<'c>(
        &self,
        compared: Compared<'c>,
        callers: &[usize],
        contenders: impl Fn(&Compared<'c>) -> Vec<Contender<'c>>,
    ) where
        'a: 'c,
    {
        let mut peaks: Vec<f64> = Vec::new();
        let mut last = None;
        for &n in callers {
            let compared = Compared {
                setting: Setting {
                    callers: n,
                    ..compared.setting
                },
                ..compared
            };
            eprintln!("# {}: {n} callers", compared.setting.workload);
            let list = contenders(&compared);
            let run = compared.run(self.bench, &list).await;
            peaks.resize(run.len(), 0.0);
            for (peak, ops) in peaks.iter_mut().zip(run) {
                *peak = peak.max(ops);
            }
            last = Some((compared, list));
        }
        if let (true, Some((compared, list))) = (self.args.open_loop, last) {
            match &self.args.offer {
                Some(rates) => eprintln!(
                    "# {}: open loop at {rates:?} calls a second",
                    compared.setting.workload
                ),
                None => eprintln!(
                    "# {}: open loop at 25%, 50% and 80% of each client's peak",
                    compared.setting.workload
                ),
            }
            let offer = self.args.offer.as_deref();
            open_loop::run(self.bench, &compared, &list, &peaks, offer).await;
        }
    }
}

/// redis-rs's connection for the servers, when either of its forms runs: its cluster-async
/// connection on the cluster, its multiplexed connection on the standalone server. On tokio
/// where a tokio runtime runs, else on smol's executor (redis-rs's own choice).
async fn redis_rs(args: &Args, servers: &Servers) -> Option<RedisConn> {
    if !args.runs_client(REDIS_RS) && !args.runs_client(REDIS_RS_PIPE) {
        return None;
    }
    Some(match servers {
        Servers::Cluster(cluster) => RedisConn::Cluster(
            redis::cluster::ClusterClient::new(
                cluster.seeds().iter().map(|s| format!("redis://{s}")),
            )
            .expect("redis-rs cluster client")
            .get_async_connection()
            .await
            .expect("redis-rs cluster connection"),
        ),
        Servers::Standalone { node, over_socket } => RedisConn::Standalone(
            redis::Client::open(node_url(node, *over_socket))
                .expect("redis-rs client")
                .get_multiplexed_async_connection()
                .await
                .expect("redis-rs multiplexed connection"),
        ),
    })
}

fn main() {
    let args = Args::from_env();
    let cores = cores();
    eprintln!(
        "# {}; runtime={}; {cores} cores; {}",
        match args.deployment {
            Deployment::Cluster =>
                "cluster: 3 masters, no replicas (measures the clients, not replication)",
            Deployment::Standalone => "standalone: one redis-server, no cluster mode",
            Deployment::StandaloneUnix =>
                "standalone-unix: one redis-server, no cluster mode, clients on its Unix socket",
        },
        args.runtime.name(),
        if args.quick {
            "quick (1/10)"
        } else {
            "full size"
        }
    );
    if args.ceiling && (args.runs("W1") || args.runs("W2")) {
        ceiling::require_tool();
    }
    // Before the servers: an exit past their start would leave their folders behind.
    let figures = args
        .csv
        .as_deref()
        .map(|path| figures::Writer::create(path).unwrap_or_else(|e| usage(&e)));
    let servers = Servers::start(args.deployment);
    let runtime = match args.runtime {
        RuntimeKind::AsyncStd => {
            // fred needs tokio; redis-rs finds no tokio runtime here and runs on smol's
            // executor, the one async-std's family offers a library.
            let run = async {
                let peers = Peers {
                    redis: redis_rs(&args, &servers).await,
                    fred: None,
                    fred_pool: None,
                };
                run::<AsyncStd>(args, servers, "botmesh-async-std", peers, figures).await
            };
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
        let redis = redis_rs(&args, &servers).await;
        let fred = if args.runs_client(FRED) || args.runs_client(FRED_PIPE) {
            Some(FredConn::connect(&servers, 1).await)
        } else {
            None
        };
        let fred_pool = if args.fred_pool > 1
            && (args.runs_client(FRED_POOL) || args.runs_client(FRED_POOL_PIPE))
        {
            eprintln!("# fred-pool: a Pool of {} Clients", args.fred_pool);
            Some(FredConn::connect(&servers, args.fred_pool).await)
        } else {
            None
        };
        let peers = Peers {
            redis,
            fred,
            fred_pool,
        };
        run::<Tokio>(args, servers, "botmesh-tokio", peers, figures).await
    });
}

/// The cores this process may run on, which the client and the servers share.
fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_spread_is_its_median_range_and_ratio() {
        let spread = Spread::of(vec![300.0, 450.0, 360.0, 400.0]).expect("four rounds");
        assert_eq!(
            (spread.median, spread.min, spread.max),
            (380.0, 300.0, 450.0)
        );
        assert_eq!(spread.ratio(), 1.5);
        let one = Spread::of(vec![2.0]).expect("one round");
        assert_eq!((one.median, one.ratio()), (2.0, 1.0));
        assert!(Spread::of(Vec::new()).is_none());
    }
}
