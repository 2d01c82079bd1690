//! Helpers shared by the coordination suites (`coord_*.rs`): the three targets every suite runs
//! on, a monotonic test clock for histories, heartbeat loops and a small seeded generator.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::conformance::{Client, Runtime};
use crate::{shared_cluster, shared_single, unique_prefix};
use botmesh_redis_core::{ClientOptions, Keyspace, Layout};
use botmesh_redis_core::{Coordinator, Executor};
use tokio::task::JoinHandle;

/// Takes `key` for `owner` (for `ttl`) as soon as it is free, within 5 s, and yields its
/// fence; panics naming `what` it waited for. A test of a hold that must end (given back by a
/// drop, expired) waits for the lock rather than asking once: a guard's release goes out in the
/// background, and a TTL runs on the server's clock. Every TTL a test holds past that is far
/// longer, so a hold that did not end fails it.
pub async fn lock_when_free<E: Executor>(
    coord: &Coordinator<E>,
    key: &str,
    owner: &str,
    ttl: Duration,
    what: &str,
) -> u64 {
    crate::eventually(Duration::from_secs(5), what, || async move {
        coord.lock(key, owner, ttl).await.unwrap()
    })
    .await
}

/// Where a suite runs: a real single node in either layout, or a real 3 x 1 cluster in the
/// cluster layout.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    /// The shared single node, legacy layout.
    SingleLegacy,
    /// The shared single node, cluster layout.
    SingleCluster,
    /// The shared 3 x 1 cluster, cluster layout.
    Cluster,
}

impl Target {
    /// The layout the setup runs in.
    pub fn layout(self) -> Layout {
        match self {
            Target::SingleLegacy => Layout::Legacy,
            Target::SingleCluster | Target::Cluster => Layout::Cluster,
        }
    }

    /// The client options that reach the target's servers.
    pub fn options(self) -> ClientOptions {
        match self {
            Target::SingleLegacy | Target::SingleCluster => {
                ClientOptions::url(shared_single().url())
            }
            Target::Cluster => ClientOptions::cluster(shared_cluster().seeds()),
        }
    }

    /// A new client on the driver `R` (a replica of its own: its own session and connections).
    pub async fn client<R: Runtime>(self) -> Client<R> {
        Client::<R>::connect(self.options()).await.unwrap()
    }

    /// A fresh prefix in this target's layout.
    pub fn keyspace(self, name: &str) -> Keyspace {
        Keyspace::new(self.layout(), unique_prefix(name)).unwrap()
    }
}

/// The test's monotonic clock: time since the test started.
#[derive(Clone, Copy, Debug)]
pub struct Clock(Instant);

impl Default for Clock {
    fn default() -> Self {
        Clock::new()
    }
}

impl Clock {
    /// A clock starting now.
    pub fn new() -> Clock {
        Clock(Instant::now())
    }

    /// The time since the clock started.
    pub fn now(&self) -> Duration {
        self.0.elapsed()
    }
}

/// A heartbeat loop: beats with `ttl` every `every`, and records when its last beat was sent.
pub struct Heartbeat {
    /// The beating task.
    pub task: JoinHandle<()>,
    /// When the last beat was sent, on the test clock.
    pub last_sent: Arc<Mutex<Option<Duration>>>,
}

/// Beats once (so the replica is live when this returns), then keeps beating in a task.
pub async fn start_heartbeat<R: Runtime>(
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

/// Runs one plain command on `key` and returns its reply (the test reads and writes keys
/// directly: an observer, or an operator, not a participant).
pub async fn key_cmd<E: botmesh_redis_core::Executor>(
    client: &E,
    name: &'static str,
    key: &botmesh_redis_core::Key,
    args: &[&str],
) -> botmesh_redis_core::Value {
    use botmesh_redis_core::{Access, Request};
    let mut request = Request::cmd(Access::Write, name).key(key);
    for arg in args {
        request = request.arg(arg.to_string());
    }
    client.call(request.build().unwrap()).await.unwrap()
}

/// The remaining time to live of `key` in ms: -1 without one, -2 when the key does not exist.
pub async fn pttl<R: Runtime>(client: &Client<R>, key: &botmesh_redis_core::Key) -> i64 {
    key_cmd(client, "PTTL", key, &[]).await.as_i64().unwrap()
}

/// Whether `key` exists (an expired key does not: reading it expires it).
pub async fn exists<R: Runtime>(client: &Client<R>, key: &botmesh_redis_core::Key) -> bool {
    key_cmd(client, "EXISTS", key, &[]).await.as_i64().unwrap() == 1
}

/// The server's clock in ms (`TIME` on any master; the test servers share the machine's clock).
pub async fn server_ms<E: botmesh_redis_core::Executor>(client: &E) -> u64 {
    use botmesh_redis_core::{Access, Request};
    let reply = client
        .call(Request::cmd(Access::Read, "TIME").build().unwrap())
        .await
        .unwrap();
    let parts = reply.into_array().unwrap();
    let seconds = u64::try_from(parts[0].as_i64().unwrap()).unwrap();
    let micros = u64::try_from(parts[1].as_i64().unwrap()).unwrap();
    seconds * 1000 + micros / 1000
}
