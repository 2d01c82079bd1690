//! Helpers shared by the driver suites (run on both drivers): reading a node's counters
//! (`INFO errorstats`, `INFO commandstats`, `CLIENT LIST`) and a small seeded generator. Each
//! suite uses a few of them; polling for a condition is `crate::eventually`.

use std::collections::BTreeMap;
use std::net::SocketAddr;

use crate::{parse_info, AdminConn, RedisCluster, SlotRange};

/// The `INFO <section>` fields of a node.
pub fn info(conn: &mut AdminConn, section: &str) -> BTreeMap<String, String> {
    let text = conn.cmd(&["INFO", section]).unwrap();
    parse_info(text.as_str().unwrap())
}

/// How many error replies starting with `code` (`MOVED`, `ASK`, `TRYAGAIN`, `NOSCRIPT`) the
/// node has sent since it started (`INFO errorstats`).
pub fn errorstat(conn: &mut AdminConn, code: &str) -> u64 {
    info(conn, "errorstats")
        .get(&format!("errorstat_{code}"))
        .map(|v| field(v, "count"))
        .unwrap_or(0)
}

/// The counters of one command in `INFO commandstats`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CmdStat {
    /// Executions (including those that failed while running, e.g. `NOSCRIPT`).
    pub calls: u64,
    /// Executions that ended in an error reply.
    pub failed: u64,
    /// Refusals before execution (e.g. `MOVED`, `TRYAGAIN`).
    pub rejected: u64,
}

/// The counters of `command` (lowercase, e.g. `evalsha`) on the node.
pub fn cmdstat(conn: &mut AdminConn, command: &str) -> CmdStat {
    info(conn, "commandstats")
        .get(&format!("cmdstat_{command}"))
        .map(|v| CmdStat {
            calls: field(v, "calls"),
            failed: field(v, "failed_calls"),
            rejected: field(v, "rejected_calls"),
        })
        .unwrap_or_default()
}

/// `name=value` out of a comma-separated stats line such as `calls=3,usec=10,...`.
fn field(line: &str, name: &str) -> u64 {
    line.split(',')
        .filter_map(|kv| kv.split_once('='))
        .find(|(k, _)| *k == name)
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0)
}

/// One line of `CLIENT LIST`, as `field -> value`.
pub type ClientInfo = BTreeMap<String, String>;

/// Every connection the node has open (`CLIENT LIST`), by client id.
pub fn client_list(conn: &mut AdminConn) -> BTreeMap<u64, ClientInfo> {
    let text = conn.cmd(&["CLIENT", "LIST"]).unwrap();
    text.as_str()
        .unwrap()
        .lines()
        .map(|line| {
            let fields: ClientInfo = line
                .split_whitespace()
                .filter_map(|kv| kv.split_once('='))
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .collect();
            (fields["id"].parse().unwrap(), fields)
        })
        .collect()
}

/// The master of `slot` in a `CLUSTER SLOTS` answer.
pub fn owner(ranges: &[SlotRange], slot: u16) -> SocketAddr {
    ranges
        .iter()
        .find(|r| (r.start..=r.end).contains(&slot))
        .map(|r| r.master)
        .unwrap()
}

/// One admin connection per master of `cluster`.
pub fn master_conns(cluster: &RedisCluster) -> BTreeMap<SocketAddr, AdminConn> {
    cluster
        .masters()
        .unwrap()
        .into_iter()
        .map(|m| (m, cluster.conn(m).unwrap()))
        .collect()
}

/// SplitMix64: a seeded generator, so that a failing input can be reproduced.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    /// A generator with this seed.
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (`n > 0`).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }
}
