//! Real `redis-server` processes for botmesh-redis's integration suites (`botmesh-redis-tests`)
//! and for the CLI's `demo` (a throwaway cluster).
//!
//! The harness starts single nodes, Redis Clusters and Redis Sentinel deployments (a master,
//! its replicas and three sentinels, [`SentinelDeployment`]) on loopback, each node in its own temporary
//! directory, and talks to them through a tiny blocking [`AdminConn`] (RESP2 through
//! `redis-protocol`, never through the client under test). It is test support: it favours clear
//! failure messages over speed, and it never lets a server outlive the process that started it.
//!
//! # What it guarantees
//!
//! - `redis-server` is found through `REDIS_SERVER` or `PATH`; when it is missing, starting a
//!   server fails (or panics) with a message that says how to install it. Nothing passes
//!   silently. Redis 6.2, 7.0 and 7.4 and Valkey 8 and 9 are supported: the harness asks the
//!   binary its version once ([`server_version`]) and adapts the configuration to it.
//! - Ports are chosen at random, outside the kernel's ephemeral range, checked free by binding,
//!   and a server that loses a port race is restarted on other ports. Client ports come from
//!   `20000..30000` with the cluster bus on `port - 10000` (`cluster-port`); servers older than
//!   7.0 have no `cluster-port`, so their bus is the fixed `port + 10000` and their client ports
//!   come from `10000..30000`, keeping only those whose bus port is outside the ephemeral range
//!   too. A server is only used once `INFO server` reports *its* pid.
//! - Every server has a watchdog (`sh`, waiting on a pipe held by the test process) that kills the
//!   server with `SIGKILL` by pid when the test process ends, even if the server sits in a
//!   `static` that is never dropped. Dropping a [`RedisServer`] kills it by pid and deletes its
//!   directory; during a panic the directory is kept and the log path and tail are printed. Set
//!   `BOTMESH_KEEP_REDIS=1` to keep every directory.
//! - Cluster helpers synchronise by polling with an overall deadline, never by fixed sleeps:
//!   [`RedisCluster::wait_ok`] checks `CLUSTER INFO`, `CLUSTER NODES`, `CLUSTER SLOTS` and the
//!   replication links of every live node.
//!
//! Tests that change topology (failover, kill, slot moves) must start their own cluster with
//! [`RedisCluster::start`]; other tests share [`shared_cluster`] and [`shared_single`] and keep
//! their keys apart with [`unique_prefix`].
//!
//! # External mode
//!
//! With `BOTMESH_TEST_CLUSTER` or `BOTMESH_TEST_SINGLE` set ([`external_mode`]), the shared
//! instances are a deployment the user gives, and the harness starts and steers nothing: a test
//! that starts its own servers, or moves slots, fails over, kills or pauses nodes, fails with a
//! message saying it needs servers the harness owns. Tests that only use the shared instances
//! therefore run unchanged against a user's own deployment.

mod admin;
mod cluster;
mod external;
mod sentinel;
mod server;
mod tls;
mod version;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::thread;
use std::time::{Duration, Instant};

pub use admin::{AdminConn, Value};
pub use cluster::{parse_cluster_slots, ClusterOptions, Migration, RedisCluster, SlotRange};
pub use external::{external_mode, EXTERNAL_CLUSTER_VAR, EXTERNAL_SINGLE_VAR};
pub use sentinel::{SentinelDeployment, SentinelOptions};
pub use server::{parse_info, RedisServer, ServerOptions, SingleNode, WITHOUT_TLS};
pub use tls::TlsFiles;
pub use version::{redis_server_path, server_version, Product, ServerVersion, MISSING_SERVER};

use external::{describe_version, external_urls, redact, External};

/// Number of hash slots in a Redis Cluster.
pub const SLOT_COUNT: u16 = 16384;

/// How often the harness polls a server while it waits for a state.
const POLL: Duration = Duration::from_millis(25);

/// The example binary `name` that `cargo test` built beside the running test:
/// `<target>/<profile>/examples/<name>`, the test being `<target>/<profile>/deps/<test>-<hash>`.
/// Panics, saying which command builds it (`build`), when it is missing.
pub fn example_binary(name: &str, build: &str) -> std::path::PathBuf {
    let exe = std::env::current_exe().unwrap_or_else(|e| panic!("the test binary's path: {e}"));
    let Some(profile_dir) = exe.parent().and_then(|deps| deps.parent()) else {
        panic!(
            "the test binary {} is not in <target>/<profile>/deps/",
            exe.display()
        )
    };
    let path = profile_dir
        .join("examples")
        .join(format!("{name}{}", std::env::consts::EXE_SUFFIX));
    assert!(
        path.is_file(),
        "the example binary {} is missing: run `{build}`, which builds the examples",
        path.display()
    );
    path
}

/// Calls `probe` every few milliseconds until it returns `Ok` or `deadline` passes; the error
/// names `what` and the last failure.
pub fn poll_until<T>(
    deadline: Instant,
    what: &str,
    mut probe: impl FnMut() -> Result<T, String>,
) -> Result<T, String> {
    loop {
        match probe() {
            Ok(value) => return Ok(value),
            Err(e) if Instant::now() >= deadline => {
                return Err(format!("timed out waiting for {what}; last: {e}"));
            }
            Err(_) => thread::sleep(POLL * 2),
        }
    }
}

/// Awaits `probe` every 10 ms until it yields `Some`, for at most `within`; panics naming `what`
/// when the time is up. The async [`poll_until`], for conditions that depend on a client that
/// runs meanwhile on the test's tokio runtime.
pub async fn eventually<T, F, Fut>(within: Duration, what: &str, mut probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + within;
    loop {
        if let Some(value) = probe().await {
            return value;
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what} (within {within:?})"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

// ---------------------------------------------------------------------------------------------
// Shared instances
// ---------------------------------------------------------------------------------------------

/// A lazily started 3 x 1 cluster shared by every test of this process. Do not change its
/// topology (no failover, kill or slot move) and do not flush it; keep keys apart with
/// [`unique_prefix`]. Its processes die with the test process.
///
/// In external mode (see [`external_mode`]) it is the cluster given by
/// `BOTMESH_TEST_CLUSTER=redis://[user:password@]host:port[,host:port...]` instead, and the call
/// panics when that variable is not set.
pub fn shared_cluster() -> &'static RedisCluster {
    static CLUSTER: OnceLock<RedisCluster> = OnceLock::new();
    CLUSTER.get_or_init(|| match external_urls() {
        None => RedisCluster::start(ClusterOptions::default()),
        Some(External {
            cluster: Some(urls),
            ..
        }) => {
            let cluster = RedisCluster::external(&urls).unwrap_or_else(|e| {
                panic!(
                    "{EXTERNAL_CLUSTER_VAR}={}: {e}",
                    urls.iter().map(|u| redact(u)).collect::<Vec<_>>().join(",")
                )
            });
            eprintln!(
                "shared cluster: the external deployment {EXTERNAL_CLUSTER_VAR} ({} nodes, {})",
                cluster.nodes().len(),
                describe_version()
            );
            cluster
        }
        Some(External { cluster: None, .. }) => panic!(
            "this test uses the shared cluster, but {EXTERNAL_CLUSTER_VAR} is not set while \
             {EXTERNAL_SINGLE_VAR} is (external mode starts no server): set it too"
        ),
    })
}

/// A lazily started single node (no password) shared by every test of this process. Keep keys
/// apart with [`unique_prefix`]; do not flush it.
///
/// In external mode (see [`external_mode`]) it is the standalone node given by
/// `BOTMESH_TEST_SINGLE=redis://[user:password@]host:port` instead, and the call panics when
/// that variable is not set.
pub fn shared_single() -> &'static SingleNode {
    static NODE: OnceLock<SingleNode> = OnceLock::new();
    NODE.get_or_init(|| match external_urls() {
        None => SingleNode::start(ServerOptions::new()),
        Some(External {
            single: Some(url), ..
        }) => {
            let node = SingleNode::external(&url)
                .unwrap_or_else(|e| panic!("{EXTERNAL_SINGLE_VAR}={}: {e}", redact(&url)));
            eprintln!(
                "shared single node: the external node {EXTERNAL_SINGLE_VAR} ({})",
                describe_version()
            );
            node
        }
        Some(External { single: None, .. }) => panic!(
            "this test uses the shared single node, but {EXTERNAL_SINGLE_VAR} is not set while \
             {EXTERNAL_CLUSTER_VAR} is (external mode starts no server): set it too"
        ),
    })
}

/// `name-PID-N`, unique in this machine's running test processes (N counts calls in this
/// process). `name` is used as given.
pub fn unique_prefix(name: &str) -> String {
    static PREFIXES: AtomicU64 = AtomicU64::new(0);
    format!(
        "{name}-{}-{}",
        std::process::id(),
        PREFIXES.fetch_add(1, Ordering::Relaxed)
    )
}
