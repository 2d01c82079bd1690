//! Helpers shared by the coordination suites (`coord_*.rs`): the three targets every suite runs
//! on, a monotonic test clock for histories, heartbeat loops and a small seeded generator.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use botmesh_redis_core::Coordinator;
use botmesh_redis_core::{ClientOptions, Keyspace, Layout};
use botmesh_redis_tests::conformance::{Client, Runtime};
use botmesh_redis_tests::{shared_cluster, shared_single, unique_prefix};
use tokio::task::JoinHandle;

/// Where a suite runs: a real single node in either layout, or a real 3 x 1 cluster in the
/// cluster layout.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Target {
    SingleLegacy,
    SingleCluster,
    Cluster,
}

impl Target {
    pub(crate) fn layout(self) -> Layout {
        match self {
            Target::SingleLegacy => Layout::Legacy,
            Target::SingleCluster | Target::Cluster => Layout::Cluster,
        }
    }

    pub(crate) fn options(self) -> ClientOptions {
        match self {
            Target::SingleLegacy | Target::SingleCluster => {
                ClientOptions::url(shared_single().url())
            }
            Target::Cluster => ClientOptions::cluster(shared_cluster().seeds()),
        }
    }

    /// A new client on the driver `R` (a replica of its own: its own session and connections).
    pub(crate) async fn client<R: Runtime>(self) -> Client<R> {
        Client::<R>::connect(self.options()).await.unwrap()
    }

    /// A fresh prefix in this target's layout.
    pub(crate) fn keyspace(self, name: &str) -> Keyspace {
        Keyspace::new(self.layout(), unique_prefix(name)).unwrap()
    }
}

/// The test's monotonic clock: time since the test started.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Clock(Instant);

impl Clock {
    pub(crate) fn new() -> Clock {
        Clock(Instant::now())
    }

    pub(crate) fn now(&self) -> Duration {
        self.0.elapsed()
    }
}

/// A heartbeat loop: beats with `ttl` every `every`, and records when its last beat was sent.
pub(crate) struct Heartbeat {
    pub(crate) task: JoinHandle<()>,
    pub(crate) last_sent: Arc<Mutex<Option<Duration>>>,
}

/// Beats once (so the replica is live when this returns), then keeps beating in a task.
pub(crate) async fn start_heartbeat<R: Runtime>(
    coord: Coordinator<Client<R>>,
    ttl: Duration,
    every: Duration,
    clock: Clock,
) -> Heartbeat {
    let last_sent = Arc::new(Mutex::new(None));
    *last_sent.lock().unwrap() = Some(clock.now());
    coord.heartbeat(ttl).await.unwrap();
    let last = last_sent.clone();
    let task = tokio::spawn(async move {
        loop {
            tokio::time::sleep(every).await;
            *last.lock().unwrap() = Some(clock.now());
            coord.heartbeat(ttl).await.unwrap();
        }
    });
    Heartbeat { task, last_sent }
}

/// xorshift64*: a small seeded generator, so every run makes the same choices.
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    pub(crate) fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// A number in `0..n`.
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Runs one plain command on `key` and returns its reply (the test reads and writes keys
/// directly: an observer, or an operator, not a participant).
pub(crate) async fn key_cmd<R: Runtime>(
    client: &Client<R>,
    name: &'static str,
    key: &botmesh_redis_core::Key,
    args: &[&str],
) -> botmesh_redis_core::Value {
    use botmesh_redis_core::{Access, Executor, Request};
    let mut request = Request::cmd(Access::Write, name).key(key);
    for arg in args {
        request = request.arg(arg.to_string());
    }
    client.call(request.build().unwrap()).await.unwrap()
}

/// The remaining time to live of `key` in ms: -1 without one, -2 when the key does not exist.
pub(crate) async fn pttl<R: Runtime>(client: &Client<R>, key: &botmesh_redis_core::Key) -> i64 {
    key_cmd(client, "PTTL", key, &[]).await.as_i64().unwrap()
}

/// Whether `key` exists (an expired key does not: reading it expires it).
pub(crate) async fn exists<R: Runtime>(client: &Client<R>, key: &botmesh_redis_core::Key) -> bool {
    key_cmd(client, "EXISTS", key, &[]).await.as_i64().unwrap() == 1
}

/// The server's clock in ms (`TIME` on any master; the test servers share the machine's clock).
pub(crate) async fn server_ms<R: Runtime>(client: &Client<R>) -> u64 {
    use botmesh_redis_core::{Access, Executor, Request};
    let reply = client
        .call(Request::cmd(Access::Read, "TIME").build().unwrap())
        .await
        .unwrap();
    let parts = reply.into_array().unwrap();
    let seconds = u64::try_from(parts[0].as_i64().unwrap()).unwrap();
    let micros = u64::try_from(parts[1].as_i64().unwrap()).unwrap();
    seconds * 1000 + micros / 1000
}
