//! Benchmark of the migration between layouts: a legacy keyspace of at least a million keys on one
//! node migrated into a 3-master Redis Cluster, against `redis-cli --cluster import` copying
//! the same keyspace as a raw-copy reference, in the same run.
//!
//! ```text
//! cargo run --release -p botmesh-redis-bench --bin migrate-bench -- [--chats N] [--messages M]
//! ```
//!
//! The binary starts its own servers with the test harness: one single node (the source) and a
//! 3-master cluster with no replicas (the target), all on this machine. The keyspace is
//! generated on the source by a server-side script (untimed): per chat a log of `M` messages
//! (20 by default) with their items, a chat record, a contact record, a checkpoint with a TTL and
//! a user-data entry; 40,000 chats by default, so `N * (M + 5)` = 1,000,000 keys.
//!
//! Printed on stdout, one line per copy:
//!
//! ```text
//! migrate keys=1000000 seconds=... keys_per_s=... peak_rss_mb=... client_cpu_s=...
//! import  keys=1000000 seconds=... keys_per_s=...
//! ```
//!
//! - `keys`: keys under the source prefix, `keys_per_s`: keys over the wall time of the copy.
//! - `peak_rss_mb`: the bench process's peak resident memory (`VmHWM` of `/proc/self/status`),
//!   which holds the client during the migration; the generation runs on the server.
//! - `client_cpu_s`: the process's user + system CPU time during the migration.
//! - `import`: `redis-cli --cluster import <target> --cluster-from <source> --cluster-copy`
//!   into the flushed cluster: a raw copy of the legacy keys (no layout change, no indexes).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;
use std::time::Instant;

use botmesh_redis_core::migrate::{migrate_to_cluster_layout, MarkerOutcome, MigrateOptions};
use botmesh_redis_harness::{
    parse_info, AdminConn, ClusterOptions, RedisCluster, ServerOptions, SingleNode,
};
use botmesh_redis_tokio::{Client, ClientOptions};

/// Generates chats `ARGV[2]..=ARGV[3]` of prefix `ARGV[1]`, each with `ARGV[4]` messages.
const GENERATE: &str = r#"
local p, from, to, n = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local payload = string.rep('x', 100)
for c = from, to do
  local chat = 'chat-' .. c
  for m = 1, n do
    redis.call('SET', p .. ':msg:' .. chat .. ':m' .. m, payload)
    redis.call('ZADD', p .. ':msgs:' .. chat, 1700000000000 + m, 'm' .. m)
  end
  redis.call('SET', p .. ':chat:' .. chat, 'chat record')
  redis.call('SET', p .. ':contact:u' .. c, 'contact record')
  redis.call('SET', p .. ':checkpoint:cp' .. c, 'offset', 'PX', 3600000)
  redis.call('SET', p .. ':user:u' .. c .. ':prefs:lang', 'pt')
end
return 1
"#;

/// A legacy keyspace migrated into a cluster, against `redis-cli --cluster import`.
#[derive(Debug, clap::Parser)]
#[command(name = "migrate-bench")]
struct Args {
    /// Chats generated on the source.
    #[arg(long, default_value_t = 40_000, value_parser = clap::value_parser!(u64).range(1..))]
    chats: u64,
    /// Messages a chat.
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u64).range(1..))]
    messages: u64,
}

fn proc_status(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with(field))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest.split_whitespace().collect())
        .unwrap_or_default();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    // utime and stime are fields 14 and 15 of the whole line, 12 and 13 after the name.
    (ticks(11) + ticks(12)) / 100.0
}

/// CPU seconds (user + system) a server has used, from `INFO cpu`.
fn server_cpu(conn: &mut AdminConn) -> f64 {
    let info = conn.cmd(&["INFO", "cpu"]).unwrap();
    let info = parse_info(info.as_str().unwrap());
    let field = |name: &str| {
        info.get(name)
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    field("used_cpu_user") + field("used_cpu_sys")
}

fn main() {
    let Args { chats, messages } = clap::Parser::parse();
    let source = SingleNode::start(ServerOptions::new());
    let cluster = RedisCluster::start(ClusterOptions::new().masters(3).replicas_per_master(0));
    let prefix = "bench";

    let generated = Instant::now();
    let mut admin = source.server().connect().unwrap();
    let step = 1000;
    let mut from = 0;
    while from < chats {
        let to = (from + step).min(chats) - 1;
        admin
            .cmd(&[
                "EVAL",
                GENERATE,
                "0",
                prefix,
                &from.to_string(),
                &to.to_string(),
                &messages.to_string(),
            ])
            .unwrap();
        from = to + 1;
    }
    let keys = admin.cmd(&["DBSIZE"]).unwrap().as_int().unwrap();
    eprintln!(
        "generated {keys} keys in {:.1}s",
        generated.elapsed().as_secs_f64()
    );

    let mut masters: Vec<AdminConn> = cluster
        .masters()
        .unwrap()
        .into_iter()
        .map(|addr| AdminConn::connect(addr).unwrap())
        .collect();
    let source_cpu = server_cpu(&mut admin);
    let target_cpu: f64 = masters.iter_mut().map(server_cpu).sum();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let (seconds, cpu, report) = runtime.block_on(async {
        let from = Client::connect(ClientOptions::url(source.url()))
            .await
            .unwrap();
        let to = Client::connect(ClientOptions::cluster(cluster.seeds()))
            .await
            .unwrap();
        let mut options = MigrateOptions::new(prefix);
        options.scan_count = 5000;
        let cpu = cpu_seconds();
        let started = Instant::now();
        let mut last = Instant::now();
        let report = migrate_to_cluster_layout(&from, &to, &options, &mut |p| {
            if last.elapsed().as_secs() >= 5 {
                eprintln!("  {} / {} keys", p.scanned, p.total);
                last = Instant::now();
            }
        })
        .await
        .unwrap();
        (started.elapsed().as_secs_f64(), cpu_seconds() - cpu, report)
    });
    assert_eq!(report.marker, MarkerOutcome::Written);
    assert_eq!(report.scanned, keys as u64, "{report:#?}");
    println!(
        "migrate keys={keys} seconds={seconds:.2} keys_per_s={:.0} peak_rss_mb={:.1} client_cpu_s={cpu:.2}",
        keys as f64 / seconds,
        proc_status("VmHWM:") as f64 / 1024.0,
    );
    eprintln!(
        "servers' cpu during the migration: source {:.2}s, target masters {:.2}s",
        server_cpu(&mut admin) - source_cpu,
        masters.iter_mut().map(server_cpu).sum::<f64>() - target_cpu
    );
    eprintln!("{report:#?}");

    cluster.flush_all().unwrap();
    let target = cluster.seeds()[0].clone();
    let started = Instant::now();
    let output = Command::new("redis-cli")
        .args([
            "--cluster",
            "import",
            &target,
            "--cluster-from",
            &source.addr().to_string(),
            "--cluster-copy",
        ])
        .output()
        .expect("redis-cli (Debian's redis-tools) on the PATH");
    let seconds = started.elapsed().as_secs_f64();
    assert!(
        output.status.success(),
        "redis-cli --cluster import failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    println!(
        "import  keys={keys} seconds={seconds:.2} keys_per_s={:.0}",
        keys as f64 / seconds
    );
}
