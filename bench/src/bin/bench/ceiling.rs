//! The servers' ceiling: what `redis-benchmark` (Debian's, package `redis-tools`, found on
//! `PATH`) gets out of the bench's own servers with 64 connections and pipelines of 16, for
//! the workloads it can express. A client's `ceiling_share` is its throughput over that.
//!
//! redis-benchmark fills each `__rand_int__` of a command with its own random 12-digit number,
//! so it cannot give the two keys of a W1 call one hash tag by itself. So one redis-benchmark
//! process runs per node that holds data (3 on the cluster, 1 on a standalone server), all at
//! once, each pinned to a hash tag its node owns, and their throughputs add up; the 64
//! connections are shared out among them.
//!
//! - **W1**: `EVALSHA` of the `save_message` script, keys `bench:{m:c<j>}:z` and
//!   `bench:{m:c<j>}:i:m<random>` (the chat `c<j>` the first whose slot the node owns), the
//!   message id and score random, the payload (read from standard input with `-x`, so that a
//!   megabyte fits) of the run's size. One chat per node instead of W1's 10,000: the script
//!   does the same `ZADD` and `SET`, on a longer log.
//! - **W2**: `GET` of existing 100-byte values, keys `bench:k:{k<j>}:<12 digits>` (the tag one
//!   the node owns), loaded beforehand, one set per node: real values, never nils.
//! - **W3** has no ceiling: a listing is 32 `ZRANGE`s over 32 slots as one operation, which
//!   redis-benchmark cannot issue.
//!
//! After each measurement the servers' `total_error_replies` (and for W2 `keyspace_misses`)
//! are checked: redis-benchmark counts an error reply as a reply, so a misrouted command would
//! otherwise pass for speed.

use std::io::Write;
use std::net::SocketAddr;
use std::process::{Command, Stdio};

use botmesh_redis_bench::figures::Kind;
use botmesh_redis_harness::{parse_info, AdminConn};
use botmesh_redis_tokio::{Key, Keyspace};

use crate::sweep::Setting;
use crate::{Bench, Servers};

/// The tool, as found on `PATH`.
const TOOL: &str = "redis-benchmark";
/// Requests per connection in one write.
const PIPELINE: usize = 16;
/// Connections, over all processes.
const CONNECTIONS: usize = 64;
/// Bytes of payload in flight at most: past it (W1 at 1 MB) the pipeline shrinks.
const IN_FLIGHT_BYTES: usize = 64 << 20;
/// Requests of one measurement at least, over all processes (fewer for big payloads).
const MIN_REQUESTS: usize = 50_000;

/// A ceiling measured.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Ceiling {
    pub(crate) ops_per_s: f64,
    pipeline: usize,
}

/// Exits with the usage when the tool is not on `PATH`, naming the package that has it.
pub(crate) fn require_tool() {
    if Command::new(TOOL).arg("--version").output().is_err() {
        crate::usage(&format!(
            "{TOOL} is not on PATH: install Debian's redis-tools package \
             (apt-get install redis-tools), or pass --no-ceiling"
        ));
    }
}

/// One redis-benchmark process: where it connects and the command it repeats.
struct Process {
    /// `-h IP -p PORT`, or `-s PATH` over a Unix socket.
    endpoint: Vec<String>,
    /// The node, for its counters.
    addr: SocketAddr,
    command: Vec<String>,
}

/// The nodes that hold data, each with the first name `name(j)` (j = 0, 1, ...) whose slot the
/// node owns: the hash tag its process is pinned to.
fn pinned(servers: &Servers, name: impl Fn(usize) -> String) -> Vec<(SocketAddr, String)> {
    match servers {
        Servers::Cluster(cluster) => {
            let ranges = cluster.slots().expect("CLUSTER SLOTS");
            let owner = |key: &str| {
                let slot = Key::new(key.to_owned()).slot();
                ranges
                    .iter()
                    .find(|r| (r.start..=r.end).contains(&slot))
                    .map(|r| r.master)
            };
            let masters = cluster.masters().expect("masters");
            masters
                .into_iter()
                .map(|master| {
                    let j = (0..)
                        .find(|&j| owner(&name(j)) == Some(master))
                        .expect("a name in every master's slots");
                    (master, name(j))
                })
                .collect()
        }
        Servers::Standalone { node, .. } => vec![(node.addr(), name(0))],
    }
}

/// How redis-benchmark reaches `addr`: over the node's Unix socket when the clients do.
fn endpoint(servers: &Servers, addr: SocketAddr) -> Vec<String> {
    match servers {
        Servers::Standalone {
            node,
            over_socket: true,
        } => {
            let path = node.server().unix_socket().expect("the node's socket");
            vec!["-s".into(), path.display().to_string()]
        }
        _ => vec![
            "-h".into(),
            addr.ip().to_string(),
            "-p".into(),
            addr.port().to_string(),
        ],
    }
}

/// W1's ceiling at `payload` bytes: `EVALSHA` of the script whose digest is `sha`.
pub(crate) fn w1(servers: &Servers, ks: &Keyspace, sha: &str, payload: usize) -> Option<Ceiling> {
    let processes = pinned(servers, |j| ks.message_log(&format!("c{j}")).to_string())
        .into_iter()
        .map(|(addr, log)| {
            let chat = log_chat(&log);
            let item = format!("{}__rand_int__", ks.message_item(&chat, "m"));
            Process {
                endpoint: endpoint(servers, addr),
                addr,
                command: [
                    "EVALSHA",
                    sha,
                    "2",
                    &log,
                    &item,
                    "m__rand_int__",
                    "__rand_int__",
                ]
                .map(str::to_owned)
                .to_vec(),
            }
        })
        .collect();
    let requests = crate::sweep::w1_calls(MIN_REQUESTS, payload);
    let stdin = vec![b'p'; payload];
    let ceiling = measure(processes, requests, requests, payload, Some(&stdin));
    servers.flush();
    ceiling
}

/// The chat of a W1 log key `bench:{m:<chat>}:z`.
fn log_chat(log: &str) -> String {
    let start = log.find("{m:").expect("a cluster-layout log key") + 3;
    let end = log[start..].find('}').expect("a closed hash tag") + start;
    log[start..end].to_owned()
}

/// W2's ceiling: `GET` of `keys` existing values of `value_len` bytes, loaded here, spread
/// over the nodes.
pub(crate) fn w2(servers: &Servers, keys: usize, value_len: usize) -> Option<Ceiling> {
    let pins = pinned(servers, |j| format!("bench:k:{{k{j}}}:"));
    let per_node = (keys.max(MIN_REQUESTS) / pins.len()).max(1);
    let value = vec![b'v'; value_len];
    let mut processes = Vec::new();
    for (addr, prefix) in pins {
        let mut conn = AdminConn::connect(addr).expect("an admin connection");
        for chunk in (0..per_node).collect::<Vec<_>>().chunks(1_000) {
            let sets: Vec<Vec<Vec<u8>>> = chunk
                .iter()
                .map(|n| {
                    let key = format!("{prefix}{n:012}").into_bytes();
                    vec![b"SET".to_vec(), key, value.clone()]
                })
                .collect();
            let replies = conn.pipeline(&sets).expect("SET of the ceiling's keys");
            assert!(
                replies.iter().all(|r| r.is_ok()),
                "SET of the ceiling's keys"
            );
        }
        processes.push(Process {
            endpoint: endpoint(servers, addr),
            addr,
            command: vec!["GET".into(), format!("{prefix}__rand_int__")],
        });
    }
    let nodes = processes.len();
    measure(processes, per_node * nodes, per_node, value_len, None)
}

/// Runs the processes at once, `requests` in all, random numbers below `range`, and sums
/// their throughputs; `None` (said on stderr) when one fails.
fn measure(
    processes: Vec<Process>,
    requests: usize,
    range: usize,
    payload: usize,
    stdin: Option<&[u8]>,
) -> Option<Ceiling> {
    let pipeline = PIPELINE.min((IN_FLIGHT_BYTES / (CONNECTIONS * payload.max(1))).max(1));
    let count = processes.len();
    let before: Vec<Counters> = processes.iter().map(|p| Counters::of(p.addr)).collect();
    let mut children = Vec::new();
    for (i, process) in processes.iter().enumerate() {
        // The connections shared out: 22, 21, 21 over three nodes.
        let connections = CONNECTIONS / count + usize::from(i < CONNECTIONS % count);
        let mut command = Command::new(TOOL);
        command
            .args(&process.endpoint)
            .args(["-c", &connections.to_string()])
            .args(["-n", &(requests / count).max(1).to_string()])
            .args([
                "-P",
                &pipeline.to_string(),
                "-r",
                &range.to_string(),
                "--csv",
            ])
            .args(stdin.map(|_| "-x"))
            .args(&process.command)
            .stdin(if stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = command.spawn().expect("redis-benchmark starts");
        if let (Some(bytes), Some(mut input)) = (stdin, child.stdin.take()) {
            input
                .write_all(bytes)
                .expect("the payload to redis-benchmark");
        }
        children.push(child);
    }
    let mut ops_per_s = 0.0;
    for child in children {
        let output = child.wait_with_output().expect("redis-benchmark runs");
        match parse_csv(&String::from_utf8_lossy(&output.stdout)) {
            Some(rps) if output.status.success() => ops_per_s += rps,
            _ => {
                eprintln!(
                    "# ceiling: {TOOL} failed ({}): {}{}",
                    output.status,
                    String::from_utf8_lossy(&output.stdout).trim(),
                    String::from_utf8_lossy(&output.stderr).trim()
                );
                return None;
            }
        }
    }
    for (process, before) in processes.iter().zip(before) {
        Counters::of(process.addr).check_since(&before, process.addr);
    }
    Some(Ceiling {
        ops_per_s,
        pipeline,
    })
}

/// The requests per second of redis-benchmark's `--csv` output: the second field of the line
/// after the header (`"test","rps",...`).
fn parse_csv(out: &str) -> Option<f64> {
    let line = out
        .lines()
        .find(|l| !l.is_empty() && !l.starts_with("\"test\""))?;
    let rps = line.split("\",\"").nth(1)?;
    rps.trim_matches('"').parse().ok()
}

/// A node's counters that tell a real reply from an error or a nil.
struct Counters {
    errors: u64,
    misses: u64,
}

impl Counters {
    fn of(addr: SocketAddr) -> Counters {
        let info = AdminConn::connect(addr)
            .and_then(|mut c| c.cmd(&["INFO", "stats"]))
            .expect("INFO stats");
        let info = parse_info(info.as_str().expect("INFO is a bulk string"));
        let count = |name: &str| info.get(name).and_then(|v| v.parse().ok()).unwrap_or(0);
        Counters {
            errors: count("total_error_replies"),
            misses: count("keyspace_misses"),
        }
    }

    /// Says on stderr what went wrong on `addr` since `before`.
    fn check_since(&self, before: &Counters, addr: SocketAddr) {
        let (errors, misses) = (self.errors - before.errors, self.misses - before.misses);
        if errors > 0 || misses > 0 {
            eprintln!(
                "# ceiling: {addr} gave {errors} error replies and {misses} misses: the figure \
                 counts them as replies"
            );
        }
    }
}

/// Prints a workload's ceiling line and records its row.
pub(crate) fn report(bench: &Bench<'_>, setting: &Setting, ceiling: &Ceiling) {
    let setting = Setting {
        callers: CONNECTIONS,
        ceiling: None,
        ..*setting
    };
    let mut out = std::io::stdout().lock();
    let _ = writeln!(
        out,
        "{} ceiling deployment={} runtime={} tool={TOOL} pipeline={} clients={CONNECTIONS} \
         ops_per_s={:.0} {}",
        setting.workload,
        bench.deployment.name(),
        bench.runtime.name(),
        ceiling.pipeline,
        ceiling.ops_per_s,
        setting.fields(ceiling.ops_per_s),
    );
    let _ = out.flush();
    bench.record(bench.row(Kind::Ceiling, &setting, TOOL, ceiling.ops_per_s));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rate_is_read_from_the_csv_line() {
        let out = "\"test\",\"rps\",\"avg_latency_ms\"\n\"GET bench:k:{k1}:__rand_int__\",\"412371.12\",\"1.2\"\n";
        assert_eq!(parse_csv(out), Some(412371.12));
    }

    #[test]
    fn the_chat_is_read_from_a_log_key() {
        assert_eq!(log_chat("bench:{m:c17}:z"), "c17");
    }
}
