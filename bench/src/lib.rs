//! What the benchmark binaries share: the figures file that `bench --csv PATH` writes and
//! `charts` reads ([`figures`]), and the clients' names, which `bench` takes and prints and
//! `charts` colors by.
#![allow(clippy::unwrap_used, clippy::expect_used)]

pub mod figures;

/// Concurrent callers of every workload unless `--callers` says otherwise; the charts' bars
/// are at this count.
pub const CALLERS: usize = 64;

/// W1's message payload in bytes unless `--payload` says otherwise; the charts' W1 figures
/// are at this size.
pub const PAYLOAD_LEN: usize = 200;

/// Names of the clients, as the bench's `--client` takes them and its lines print them (ours
/// printed with its driver's name after it: `botmesh-tokio`, `botmesh-async-std`).
pub const CLIENT_NAMES: [&str; 7] = [
    OURS,
    REDIS_RS,
    REDIS_RS_PIPE,
    FRED,
    FRED_PIPE,
    FRED_POOL,
    FRED_POOL_PIPE,
];
/// Our client.
pub const OURS: &str = "botmesh";
/// redis-rs's connection, its cluster-async one on a cluster and its multiplexed one on a node.
pub const REDIS_RS: &str = "redis-rs";
/// redis-rs's pipelined listing (W3 only).
pub const REDIS_RS_PIPE: &str = "redis-rs-pipe";
/// fred's one client.
pub const FRED: &str = "fred";
/// fred's one client, its pipelined listing (W3 only).
pub const FRED_PIPE: &str = "fred-pipe";
/// fred's pool of clients.
pub const FRED_POOL: &str = "fred-pool";
/// fred's pool, its pipelined listing (W3 only).
pub const FRED_POOL_PIPE: &str = "fred-pool-pipe";
