//! Starts a throwaway deployment with the harness, for the suites' external mode.
//!
//! ```text
//! cargo run -p botmesh-redis-harness --bin test-servers
//! ```
//!
//! It starts a 3 x 1 Redis Cluster and a standalone node on loopback (`REDIS_SERVER` chooses the
//! binary, as for the suites), prints one line each,
//!
//! ```text
//! BOTMESH_TEST_CLUSTER=redis://127.0.0.1:PORT,127.0.0.1:PORT,...
//! BOTMESH_TEST_SINGLE=redis://127.0.0.1:PORT
//! ```
//!
//! and keeps them until its standard input closes. Then it prints, per node, how many commands
//! it processed since (`total_commands_processed`), so that a caller can check the suites
//! really ran against these servers, and exits; the servers die with it. `scripts/servers
//! selfcheck-external` uses it to test the external mode from another process.
#![allow(clippy::print_stdout)]

use std::io::{BufRead, Write};

use botmesh_redis_harness::{
    parse_info, AdminConn, ClusterOptions, RedisCluster, ServerOptions, SingleNode,
    EXTERNAL_CLUSTER_VAR, EXTERNAL_SINGLE_VAR,
};

fn commands_processed(conn: Result<AdminConn, String>) -> Result<u64, String> {
    let info = conn?.cmd(&["INFO", "stats"])?;
    parse_info(info.as_str().unwrap_or_default())
        .get("total_commands_processed")
        .and_then(|n| n.parse().ok())
        .ok_or_else(|| "INFO stats has no total_commands_processed".to_owned())
}

fn main() -> Result<(), String> {
    let cluster = RedisCluster::try_start(ClusterOptions::new())?;
    let single = SingleNode::try_start(ServerOptions::new())?;
    let nodes = cluster.nodes();
    let before = nodes
        .iter()
        .map(|&node| commands_processed(cluster.conn(node)))
        .collect::<Result<Vec<_>, _>>()?;
    let single_before = commands_processed(single.conn())?;
    let urls: Vec<String> = nodes.iter().map(|a| format!("redis://{a}")).collect();
    {
        let mut out = std::io::stdout().lock();
        writeln!(out, "{EXTERNAL_CLUSTER_VAR}={}", urls.join(",")).map_err(|e| e.to_string())?;
        writeln!(out, "{EXTERNAL_SINGLE_VAR}={}", single.url()).map_err(|e| e.to_string())?;
        out.flush().map_err(|e| e.to_string())?;
    }
    // Blocks until the caller closes our standard input (or sends a line).
    let mut line = String::new();
    let _ = std::io::stdin().lock().read_line(&mut line);
    for (&node, before) in nodes.iter().zip(before) {
        let after = commands_processed(cluster.conn(node))?;
        println!("processed cluster {node} {}", after - before);
    }
    let after = commands_processed(single.conn())?;
    println!(
        "processed single {} {}",
        single.addr(),
        after - single_before
    );
    Ok(())
}
