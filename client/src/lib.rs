//! # botmesh-redis-client
//!
//! The botmesh-redis client, written once over a small [`Runtime`] trait (quinn style): the
//! session task, the per-connection reader and flusher, `connect`, `close`. A runtime supplies
//! only spawning, a timer and sockets (TCP, and Unix sockets for a single node);
//! `botmesh-redis-tokio` and `botmesh-redis-async-std` are those few calls each. Every protocol decision and every piece of protocol state is the
//! core's [`Session`]: the plans in flight and who waits for each, the connections' states, the
//! deadlines (the connect timeout included), and which late events of a closed connection to
//! ignore. The driver keeps, per connection, only what is I/O: its writing half and its tasks.
//!
//! ## Lanes and tasks
//!
//! A client runs [`ClientOptions::lanes`] lanes (on one node the runtime's
//! [`Runtime::one_node_lanes`], 1 on a cluster): each a [`Session`] with its own session task
//! and its own connection to every node. A call goes to the lane of the task that polls it
//! (its waker's address, hashed), so a task's calls stay in one lane, in the order they were
//! first polled, whether awaited in turn or joined (`join!`, `zip`); futures that a combinator
//! polls with wakers of their own (`FuturesUnordered`, `buffered`) are each their own
//! "task" and keep no order among them. Lanes to one
//! node overlap the node's work on one lane's batch with the client's turnaround of the
//! others'. Detached plans take the first lane. A call first takes a place in its lane's room
//! (on one node at most its share of 256 calls out at once; on a cluster of 1,024 to all the
//! nodes, at most half of them to one node; the plans of the calls beyond it wait in line, see
//! the `admission` module and `docs/operations.md`, "One node's room for calls").
//! Everything below is per lane.
//!
//! ```text
//!  callers ──Submit──►┐                              ┌──try_write──► TCP
//!  readers ──Read────►├─► session task: Session ─────┤
//!  flushers ─Flushed─►│   (+ each connection's I/O)  └──► flusher task ──► TCP (socket full)
//!  timer   ──────────►┘         │
//!                               └──Complete──► caller
//! ```
//!
//! The session task takes every message already queued before it drains the session, so all
//! requests submitted meanwhile leave in one write per connection, which it makes itself while
//! the socket takes the bytes. It keeps two inboxes and takes the connections' (replies,
//! closes, flushed writes) before the callers', so a backlog of new calls never delays the
//! replies of earlier ones; and it fires due timers on every pass, whatever woke it. Before it
//! writes, it yields once, so that callers its last results woke (on other worker threads too)
//! add their requests to the same write.
//!
//! The session and the connections' I/O live in a hub (a mutex) the session task shares with
//! the readers and the callers: a lone call (no other plan sending, nobody else just woken)
//! is submitted and written by its caller, and a reader applies its bytes itself when at most
//! one plan is sending, each without waking the session task (see the `task` module). Every
//! task of the client is spawned with the [`Runtime::Spawner`] taken where the client started.
//!
//! ## TLS
//!
//! With `rediss://` URLs or [`ClientOptions::tls`], every connection is TLS (rustls, on the
//! `ring` provider), when the crate's default feature `tls` is on. Without it, rustls, ring and
//! webpki-roots are not built, [`TlsConnector`] is a type without values, and a client asked
//! for TLS refuses to start with
//! [`ConfigError::TlsNotBuilt`](botmesh_redis_core::ConfigError::TlsNotBuilt).
//!
//! The [`TlsConnector`] (the rustls configuration) is built once when the client starts and
//! handed to [`Runtime::connect`], which runs the handshake over its TCP
//! stream. A TLS stream cannot take bytes without possibly waiting (rustls buffers what the
//! socket does not take, and only a later poll sends it), so a TLS writer answers `WouldBlock`
//! to [`WriteHalf::try_write`]: each batch goes through a flusher task's `write_all` and flush.
//! Batching is unchanged (what the session writes meanwhile joins the next batch); the cost is
//! one task hop per batch. Plain TCP keeps its direct writes.
#![forbid(unsafe_code)]

mod admission;
mod calls;
#[cfg(feature = "metrics")]
mod instruments;
#[cfg(not(feature = "metrics"))]
mod no_instruments;
#[cfg(not(feature = "tls"))]
mod no_tls;
mod task;
#[cfg(feature = "tls")]
mod tls;

#[cfg(not(feature = "metrics"))]
use no_instruments as instruments;

#[cfg(not(feature = "tls"))]
use no_tls as tls;
#[cfg(not(feature = "tls"))]
pub use no_tls::TlsConnector;
#[cfg(feature = "tls")]
pub use tls::{rustls, TlsConnector};

use std::collections::hash_map::RandomState;
use std::future::Future;
use std::hash::{BuildHasher, Hasher};
use std::io;
use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::{Duration, Instant};

use bytes::BytesMut;
use tracing::field::{display, Empty};

use botmesh_redis_core::driver::plan::connect_check;
use botmesh_redis_core::driver::session::{DialTarget, Session, SlotOwners, Submission, Summary};
use botmesh_redis_core::driver::Plan;
use botmesh_redis_core::{ClientOptions, Deployment, Error, Executor, Store, StoreOptions};

use task::{Calls, Delivery, Hub, Msg};

/// What a runtime supplies: tasks, a timer, and TCP and Unix-socket connections.
pub trait Runtime: Send + Sync + 'static {
    /// A spawned task; dropping it cancels the task.
    type Task: Send + 'static;
    /// The reading half of a TCP connection.
    type Reader: ReadHalf;
    /// The writing half of a TCP connection.
    type Writer: WriteHalf;

    /// Where a client's tasks run: taken once, where the client starts, so that every task
    /// of the client (its connections' readers, flushers) runs on that runtime, whichever
    /// thread does the client's work (a caller that writes its own call may run on another
    /// runtime, or none).
    type Spawner: Clone + Send + Sync + 'static;

    /// The spawner of the runtime this is called on (the client's start).
    fn spawner() -> Self::Spawner;

    /// Spawns `task` with `spawner`; dropping the handle cancels it.
    fn spawn<F: Future<Output = ()> + Send + 'static>(
        spawner: &Self::Spawner,
        task: F,
    ) -> Self::Task;

    /// Spawns `task` with `spawner`, to run to its end on its own.
    fn spawn_detached<F: Future<Output = ()> + Send + 'static>(spawner: &Self::Spawner, task: F);

    /// Whether `spawner` runs every task on one thread (tokio's current-thread runtime). There
    /// the callers a batch of results woke run one after another, never beside the session,
    /// so each adds its next call to the session itself and the last of them writes the
    /// batch (see the `task::inline` module). `false` by default: on several threads those
    /// callers would contend for the session's lock.
    fn one_thread(spawner: &Self::Spawner) -> bool {
        let _ = spawner;
        false
    }

    /// How many lanes a client of one node runs on `spawner`'s runtime unless its options say
    /// ([`ClientOptions::lanes`]): enough that the node always has a lane's batch to work on
    /// while the client turns the others' replies around, and no more, since each lane splits
    /// the batches further. The count depends on how the runtime runs the lanes' tasks (on one
    /// thread or several), so each driver measures and states its own (`docs/performance.md`,
    /// "Four lanes to one node" and "Three lanes on one thread").
    fn one_node_lanes(spawner: &Self::Spawner) -> usize;

    /// Completes at `at`.
    fn sleep_until(at: Instant) -> impl Future<Output = ()> + Send;

    /// Opens a connection to `target` and splits it: over TCP (with `TCP_NODELAY`), running
    /// the TLS handshake over it when `tls` is given (checking the certificate against
    /// `TlsConnector::server_name`), or to a Unix socket, which is never given `tls` (the
    /// options refuse TLS there). A handshake failure is an error whose inner error is the
    /// `rustls::Error`, as tokio-rustls and futures-rustls report it. A runtime without Unix
    /// sockets (not on Unix) answers `Unsupported`.
    fn connect(
        target: &DialTarget,
        tls: Option<&TlsConnector>,
    ) -> impl Future<Output = io::Result<(Self::Reader, Self::Writer)>> + Send;
}

/// The error a runtime without Unix sockets (not on Unix) answers to a connect to `path`,
/// the same from every driver.
pub fn unix_sockets_unsupported(path: &std::path::Path) -> io::Error {
    io::Error::new(
        io::ErrorKind::Unsupported,
        format!("{}: Unix sockets exist only on Unix", path.display()),
    )
}

/// Reads from a connection.
pub trait ReadHalf: Send + 'static {
    /// Reads what is available into `buf`'s spare capacity; `Ok(0)` at the end of the stream.
    fn read(&mut self, buf: &mut BytesMut) -> impl Future<Output = io::Result<usize>> + Send;
}

/// Writes to a connection.
pub trait WriteHalf: Send + 'static {
    /// Writes what the socket takes now without waiting: `Ok(n)` for `n` bytes written (maybe
    /// fewer than given), `WouldBlock` when it takes none. A TLS writer always answers
    /// `WouldBlock` (see the crate's TLS section).
    fn try_write(&mut self, bytes: &[u8]) -> io::Result<usize>;
    /// Writes all of `bytes` (and, on TLS, flushes them out of the TLS buffer).
    fn write_all(&mut self, bytes: &[u8]) -> impl Future<Output = io::Result<()>> + Send;
    /// Flushes and shuts the writing side down.
    fn shutdown(&mut self) -> impl Future<Output = ()> + Send;
}

/// What a client's driver has done and holds, for monitoring (see [`Client::stats`](crate::Client::stats)),
/// summed over its lanes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ClientStats {
    /// TCP connects started since the client was created.
    pub dials: u64,
    /// The client's tasks alive now: each lane's session task and its line keeper (which
    /// wakes while calls wait for room), and each connection's connect, reader and flusher
    /// tasks. Bounded by the number of nodes and lanes however connections come
    /// and go.
    pub tasks: u64,
    /// Connections whose task handles the driver holds (open, opening, or closing).
    pub connections: u64,
    /// The dials (of [`ClientStats::dials`]) to a node that was dialled before: connections
    /// lost or refused and opened again.
    pub reconnects: u64,
    /// Times a session task woke and worked (a reply read, a call submitted, a timer):
    /// calls per pass say how many calls each wake serves.
    pub passes: u64,
    /// Inputs applied where they arose, without waking the session task: a reader's bytes
    /// applied by the reader, a lone caller's call written by the caller.
    pub inline: u64,
    /// Writes to the connections' sockets (each carries every request queued for its
    /// connection when it is made): calls per write say how well requests are batched.
    pub writes: u64,
    /// Reads from the connections' sockets that returned bytes.
    pub reads: u64,
    /// Calls that waited for room before they were sent, so far: a client lets a bounded
    /// number of calls out at once (to one node, or to a cluster's nodes with at most half of
    /// them to one), and the plans of the calls beyond it wait in line (`docs/operations.md`,
    /// "One node's room for calls").
    pub parked: u64,
    /// Calls waiting in line for room now: a depth that stays up says the bot keeps more
    /// calls out than the room, or a node stopped answering.
    pub in_line: u64,
}

#[derive(Debug, Default)]
struct Counters {
    dials: AtomicU64,
    reconnects: AtomicU64,
    tasks: AtomicU64,
    connections: AtomicU64,
    passes: AtomicU64,
    inline: AtomicU64,
    writes: AtomicU64,
    reads: AtomicU64,
}

/// Counts a task as alive from its spawning until it ends or is cancelled.
struct Alive(Arc<Counters>);

impl Drop for Alive {
    fn drop(&mut self) {
        self.0.tasks.fetch_sub(1, Ordering::Relaxed);
    }
}

fn counted<F: Future<Output = ()> + Send + 'static>(
    counters: &Arc<Counters>,
    task: F,
) -> impl Future<Output = ()> + Send + 'static {
    counters.tasks.fetch_add(1, Ordering::Relaxed);
    let alive = Alive(Arc::clone(counters));
    async move {
        let _alive = alive;
        task.await;
    }
}

/// A connection to a Redis node or cluster: runs plans, shared by cloning.
pub struct Client<R: Runtime> {
    shared: Arc<Shared<R>>,
}

impl<R: Runtime> Clone for Client<R> {
    fn clone(&self) -> Self {
        Client {
            shared: self.shared.clone(),
        }
    }
}

struct Shared<R: Runtime> {
    /// The client's lanes ([`ClientOptions::lanes`]): at least one.
    lanes: Box<[Lane<R>]>,
    /// What the session's configuration talks to, kept for [`Executor::deployment`].
    deployment: Deployment,
    _runtime: PhantomData<fn() -> R>,
}

/// One lane: a session task with its own connection to each node.
struct Lane<R: Runtime> {
    /// The callers' inbox of the session task.
    tx: Calls<R>,
    /// On a runtime of one thread, the task that took a result last.
    last_taker: Option<task::inline::LastTaker>,
    /// The session task's state, for a lone call that submits itself.
    hub: Hub<R>,
    counters: Arc<Counters>,
    closed: async_channel::Receiver<()>,
    /// The lane's room (see [`admission`]): on one node its share of the node's bound, on a
    /// cluster its share of the cluster's, each node at most half of it.
    admission: Arc<admission::Admission>,
    /// On a cluster, the session's slot map as node numbers: a call's node in the room, found
    /// by its plan's first slot before the session routes it.
    owners: Option<SlotOwners>,
}

impl<R: Runtime> Lane<R> {
    /// A call's node in the lane's room: 0 on one node; on a cluster the owner of `slot`, the
    /// plan's first, as the session last mapped it. `None` when it is not known (no map yet,
    /// a plan that names no slot before it starts): the call goes out uncounted.
    fn node(&self, slot: Option<u16>) -> Option<admission::Node> {
        match &self.owners {
            None => Some(0),
            Some(owners) => owners.owner(slot?),
        }
    }
}

impl<R: Runtime> Shared<R> {
    /// The lane of the task whose waker is `waker` ([`task::task_address`]): a task's calls
    /// stay in one lane, in order. A task's address has low bits that alignment fixes:
    /// Fibonacci hashing spreads the high ones.
    fn lane(&self, waker: &std::task::Waker) -> usize {
        let hash = (task::task_address(waker) as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        (hash >> 32) as usize % self.lanes.len()
    }

    /// Sends `msg` to every lane's session task.
    fn tell_all(&self, msg: impl Fn() -> Msg<R>) {
        for lane in &self.lanes {
            let _ = lane.tx.send(msg());
        }
    }

    /// Waits until every lane's session task has ended, then ends the lanes' line keepers.
    async fn all_closed(&self) {
        for lane in &self.lanes {
            // The session task drops its end when it is done; that is the signal.
            let _ = lane.closed.recv().await;
        }
        self.close_lines();
    }

    /// Ends the line keepers of the lanes' rooms ([`admission::keep`]).
    fn close_lines(&self) {
        for lane in self.lanes.iter() {
            lane.admission.close();
        }
    }
}

impl<R: Runtime> Drop for Shared<R> {
    fn drop(&mut self) {
        // The last handle is gone: end the session tasks, which end every connection, and
        // the line keepers.
        self.tell_all(|| Msg::Close);
        self.close_lines();
    }
}

impl<R: Runtime> std::fmt::Debug for Client<R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("deployment", &self.shared.deployment)
            .finish_non_exhaustive()
    }
}

impl<R: Runtime> Client<R> {
    /// Starts the client and checks that a node answers (with the credentials given) and is
    /// what the options name, so a mistake fails here, with a typed error, before any request
    /// ran:
    ///
    /// - a wrong address or password: [`Error::Connect`] or [`Error::Auth`], within the
    ///   connect timeout;
    /// - a URL ([`ClientOptions::url`]) that names a Redis Cluster node (`INFO cluster` says
    ///   `cluster_enabled:1`):
    ///   [`ConfigError::ClusterNodeForSingleClient`](botmesh_redis_core::ConfigError::ClusterNodeForSingleClient),
    ///   which says to use [`ClientOptions::cluster`];
    /// - root nodes ([`ClientOptions::cluster`]) of which one is a single node and none gives
    ///   the slot map:
    ///   [`ConfigError::SingleNodeForClusterClient`](botmesh_redis_core::ConfigError::SingleNodeForClusterClient),
    ///   at once, which says to use [`ClientOptions::url`];
    /// - root nodes none of which gives the slot map within the retries
    ///   ([`ClientOptions::cluster_retry`]): [`Error::Discovery`], with each seed's answer;
    /// - sentinels ([`ClientOptions::sentinel`]) none of which names a master within the
    ///   retries: [`Error::SentinelDiscovery`], with each sentinel's answer.
    ///
    /// A node that refuses `INFO` (an ACL user without it) is taken at its word.
    pub async fn connect(options: ClientOptions) -> Result<Self, Error> {
        Self::connect_with(options, instruments::Registry::global()).await
    }

    async fn connect_with(
        options: ClientOptions,
        registry: instruments::Registry,
    ) -> Result<Self, Error> {
        let endpoints = options.to_config(0)?.endpoints;
        let client = Self::start_with(options, registry)?;
        // Every lane's connection is checked, so none is left to fail on a first call.
        for lane in 0..client.shared.lanes.len() {
            let check = Running::new(&client.shared, Some(lane), connect_check(&endpoints));
            if let Err(e) = check.await {
                client.close().await;
                return Err(e);
            }
        }
        Ok(client)
    }

    /// Starts the client without waiting for any node: the first request connects. Checks
    /// the options only ([`Client::connect`] also checks the node); fails with
    /// [`ConfigError::TlsNotBuilt`](botmesh_redis_core::ConfigError::TlsNotBuilt) when TLS is
    /// asked for and the `tls` feature is off.
    pub fn start(options: ClientOptions) -> Result<Self, Error> {
        Self::start_with(options, instruments::Registry::global())
    }

    fn start_with(options: ClientOptions, registry: instruments::Registry) -> Result<Self, Error> {
        let mut seed = RandomState::new().build_hasher();
        seed.write_u64(0);
        let config = options.to_config(seed.finish())?;
        let deployment = config.endpoints.deployment();
        let tls = tls::connector(&options)?;
        let spawner = R::spawner();
        let lane_count = options.lane_count(R::one_node_lanes(&spawner));
        let request_timeout = config.request_timeout;
        // The room is shared out over the lanes; a cluster's node takes half a lane's at most.
        let (lane_bound, share, nodes) = if deployment == Deployment::Cluster {
            let bound = admission::CLUSTER_BOUND.div_ceil(lane_count.max(1));
            (bound, bound.div_ceil(2), admission::CLUSTER_NODES)
        } else {
            let bound = admission::ONE_NODE_BOUND.div_ceil(lane_count.max(1));
            (bound, bound, 1)
        };
        let lanes = (0..lane_count as u64)
            .map(|lane| {
                let mut config = config.clone();
                // Each lane's retries jitter apart, even from a seed the options fixed.
                config.seed = config.seed.wrapping_add(lane);
                let session = Session::new(config, Instant::now());
                let owners = (deployment == Deployment::Cluster).then(|| session.slot_owners());
                let (closed_tx, closed) = async_channel::bounded(1);
                let counters = Arc::new(Counters::default());
                // Calls parked for room: the room counts them, the metrics show them.
                let lined = Arc::new(AtomicUsize::new(0));
                let instruments =
                    instruments::Instruments::new(registry.clone(), Arc::clone(&lined));
                let (hub, tx, last_taker) = task::start::<R>(
                    session,
                    closed_tx,
                    Arc::clone(&counters),
                    tls.clone(),
                    instruments,
                );
                let inbox = tx.clone();
                let handoff: admission::Handoff = Box::new(move |submission| {
                    // A closed session drops the plan: its caller sees `Error::Closed`.
                    let _ = inbox.send(Msg::Submit(submission));
                });
                let admission = Arc::new(admission::Admission::new(
                    lane_bound,
                    share,
                    nodes,
                    request_timeout,
                    handoff,
                    lined,
                ));
                let keeper = admission::keep::<R>(Arc::clone(&admission));
                R::spawn_detached(&spawner, counted(&counters, keeper));
                Lane {
                    tx,
                    last_taker,
                    hub,
                    counters,
                    closed,
                    admission,
                    owners,
                }
            })
            .collect();
        Ok(Client {
            shared: Arc::new(Shared {
                lanes,
                deployment,
                _runtime: PhantomData,
            }),
        })
    }

    /// How many lanes this client runs ([`ClientOptions::lanes`]).
    pub fn lanes(&self) -> usize {
        self.shared.lanes.len()
    }

    /// Whether this client talks to a cluster.
    pub fn is_cluster(&self) -> bool {
        self.shared.deployment == Deployment::Cluster
    }

    /// What the driver has done and holds now: dials made, tasks alive.
    pub fn stats(&self) -> ClientStats {
        let mut stats = ClientStats::default();
        for lane in &self.shared.lanes {
            let counters = &lane.counters;
            stats.dials += counters.dials.load(Ordering::Relaxed);
            stats.tasks += counters.tasks.load(Ordering::Relaxed);
            stats.connections += counters.connections.load(Ordering::Relaxed);
            stats.reconnects += counters.reconnects.load(Ordering::Relaxed);
            stats.passes += counters.passes.load(Ordering::Relaxed);
            stats.inline += counters.inline.load(Ordering::Relaxed);
            stats.writes += counters.writes.load(Ordering::Relaxed);
            stats.reads += counters.reads.load(Ordering::Relaxed);
            stats.parked += lane.admission.parked_so_far();
            stats.in_line += lane.admission.in_line();
        }
        stats
    }

    /// Closes at once: ends every pending plan (see [`Error::Closed`]; a write sent and
    /// unanswered is [`Error::ReplyLost`]), closes every connection and waits for the session
    /// tasks to finish. Other clones see [`Error::Closed`] afterwards. [`Client::shutdown`]
    /// lets calls in flight finish first.
    pub async fn close(&self) {
        self.shared.tell_all(|| Msg::Close);
        self.shared.all_closed().await;
    }
}

/// With the `metrics` feature, a client registers its metrics in the global recorder (the
/// exporter the application installed, before the client starts) unless it is given one of
/// its own: for a process that exports several clients apart, or a test that reads one
/// client's counts.
#[cfg(feature = "metrics")]
impl<R: Runtime> Client<R> {
    /// [`Client::connect`], with this client's metrics registered in `recorder` rather than
    /// the global recorder.
    pub async fn connect_recorded(
        options: ClientOptions,
        recorder: Arc<dyn metrics::Recorder + Send + Sync>,
    ) -> Result<Self, Error> {
        Self::connect_with(options, instruments::Registry::new(Some(recorder))).await
    }

    /// [`Client::start`], with this client's metrics registered in `recorder` rather than
    /// the global recorder.
    pub fn start_recorded(
        options: ClientOptions,
        recorder: Arc<dyn metrics::Recorder + Send + Sync>,
    ) -> Result<Self, Error> {
        Self::start_with(options, instruments::Registry::new(Some(recorder)))
    }
}

impl<R: Runtime> Client<R> {
    /// Closes gracefully, as [`Executor::shutdown`] says: new calls are refused, calls with
    /// requests out finish within `grace`, then the client closes as [`Client::close`] does.
    pub async fn shutdown(&self, grace: Duration) {
        let until = Instant::now().checked_add(grace).unwrap_or_else(far_future);
        self.shared.tell_all(|| Msg::Shutdown(until));
        self.shared.all_closed().await;
    }
}

/// The name of the span each call of the API runs in ([`Executor::run`]), at level `INFO`
/// with the target `botmesh_redis_client`: a child of the caller's span, so a bot's own traces
/// show where the time goes. Its fields:
///
/// | field | value |
/// | - | - |
/// | `operation` | the plan's [`operation`](Plan::operation): `save_message`, `lock_acquire`, `call`, ... |
/// | `slot` | the slot of its first request routed by slot (none for a single node's keyless call) |
/// | `attempts` | requests handed to a connection, each resend (retry, redirect) counted |
/// | `node` | the node its last request went to (`host:port`) |
/// | `outcome` | `ok`, or the error's [`kind`](Error::kind) (`timeout`, `reply_lost`, ...) |
///
/// The last four are recorded when the plan ends.
pub const OPERATION_SPAN: &str = "botmesh_redis.operation";

/// Records on a call's span what the session saw of its plan.
fn record(span: &tracing::Span, summary: &Summary) {
    if let Some(slot) = summary.slot() {
        span.record("slot", slot);
    }
    span.record("attempts", summary.attempts);
    if let Some(node) = &summary.node {
        span.record("node", display(&**node));
    }
}

/// An instant beyond any grace a caller means: a day from now.
fn far_future() -> Instant {
    Instant::now() + Duration::from_secs(86_400)
}

/// Connects a client and opens a store on it ([`Store::open`]: built, then its start guard
/// run): the driver crates' one entry point, `connect`. The store's layout follows the client
/// (the cluster layout on a cluster, else legacy unless the options choose). The client is
/// closed again when the store cannot open; [`Store::executor`] reaches it otherwise.
pub async fn connect<R: Runtime>(
    client: ClientOptions,
    store: StoreOptions,
) -> Result<Store<Client<R>>, Error> {
    let client = Client::<R>::connect(client).await?;
    match Store::open(client.clone(), store).await {
        Ok(store) => Ok(store),
        Err(e) => {
            client.close().await;
            Err(e)
        }
    }
}

/// A call, from its plan to its result: one future, polled by the calling task. The plan is
/// boxed for its session with its caller's receiver when the call is made, so it is moved once,
/// into its box, rather than into each future that waits for it (a plan is larger than the
/// compiler moves without a call to `memcpy`). The first poll opens the call's span, takes its
/// place in its lane's room on one node (see the `admission` module) and submits the plan, in
/// the lane of the calling task unless one is given; later polls wait for its delivery. One
/// hand-written state where nested `async` blocks (the call, its lane, its span) each kept one
/// and were each polled in turn.
struct Running<'a, R: Runtime, T> {
    shared: &'a Shared<R>,
    operation: &'static str,
    /// The call's span (see [`OPERATION_SPAN`]), opened at the first poll so that its parent is
    /// the span the caller polls in; disabled when no subscriber wants it, and then neither
    /// entered nor recorded.
    span: Option<tracing::Span>,
    /// The plan until the first poll submits it.
    submission: Option<Submission<task::OneShot>>,
    /// The lane to submit in; the calling task's when `None`, until the first poll fixes it.
    lane: Option<usize>,
    rx: oneshot::AsyncReceiver<Delivery<T>>,
    /// The call's place in its lane's room ([`admission`]); `Out` from the start for a plan
    /// that may wait by design, which is not counted.
    gate: admission::Gate,
    /// On a cluster, the slot of the plan's first request, when the plan names it before it
    /// starts: its node in the room. A call whose node is not known yet goes out uncounted.
    slot: Option<u16>,
}

impl<'a, R: Runtime, T: Send + 'static> Running<'a, R, T> {
    fn new<P: Plan<Output = T>>(shared: &'a Shared<R>, lane: Option<usize>, plan: P) -> Self {
        let (done, rx) = oneshot::channel();
        let gate = if plan.may_wait() {
            admission::Gate::Out
        } else {
            admission::Gate::Before
        };
        // Only a cluster's room counts by node: one node's client does not hash the key.
        let slot = (shared.deployment == Deployment::Cluster)
            .then(|| plan.first_slot())
            .flatten();
        Running {
            shared,
            operation: plan.operation(),
            span: None,
            submission: Some(Submission::new(plan, Some(done))),
            lane,
            rx: std::future::IntoFuture::into_future(rx),
            gate,
            slot,
        }
    }
}

impl<R: Runtime, T: Send + 'static> Future for Running<'_, R, T> {
    type Output = Result<T, Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let Running {
            shared,
            operation,
            span,
            submission,
            lane,
            rx,
            gate,
            slot,
        } = self.get_mut();
        let span = span.get_or_insert_with(|| {
            tracing::info_span!(
                OPERATION_SPAN,
                operation = *operation,
                slot = Empty,
                attempts = Empty,
                node = Empty,
                outcome = Empty,
            )
        });
        let traced = !span.is_disabled();
        let _entered = traced.then(|| span.enter());
        if submission.is_some() {
            let index = *lane.get_or_insert_with(|| shared.lane(cx.waker()));
            let lane = &shared.lanes[index];
            // A call goes out only when its lane and its node have room; parked, its plan
            // waits in line and goes to the session when room comes (see `admission`).
            if *gate == admission::Gate::Before {
                *gate = match lane.node(*slot) {
                    Some(node) => lane.admission.enter(node, submission),
                    None => admission::Gate::Out,
                };
            }
            if let Some(submission) = submission.take() {
                // Written at once by this task when the session is free, else through the
                // lane's inbox.
                if let Some(submission) =
                    task::inline::submit_inline(&lane.hub, submission, cx.waker())
                {
                    if lane.tx.send(Msg::Submit(submission)).is_err() {
                        leave_room(shared, Some(index), gate);
                        return Poll::Ready(ended(span, traced, Err(Error::Closed)));
                    }
                }
            }
        }
        let result = match ready!(Pin::new(rx).poll(cx)) {
            Ok(Delivery { result, summary }) => {
                // Submitted, so the lane is fixed.
                if let Some(last_taker) = lane.and_then(|i| shared.lanes[i].last_taker.as_ref()) {
                    last_taker.took(cx.waker());
                }
                if let Some(summary) = summary.filter(|_| traced) {
                    record(span, &summary);
                }
                result
            }
            Err(_) => Err(Error::Closed),
        };
        // Done with: its room goes to the next call (after the delivery is unpacked where it
        // lies, rather than moved past this call).
        leave_room(shared, *lane, gate);
        Poll::Ready(ended(span, traced, result))
    }
}

impl<R: Runtime, T> Drop for Running<'_, R, T> {
    /// A call dropped before its end gives its place in its lane's room back: parked, it
    /// leaves the line; admitted, its room goes to the next caller (its request, if written,
    /// may still be out: the bound counts callers, not requests).
    fn drop(&mut self) {
        leave_room(self.shared, self.lane, &mut self.gate);
    }
}

/// Ends a call's place in its lane's room (see [`admission`]), once.
fn leave_room<R: Runtime>(shared: &Shared<R>, lane: Option<usize>, gate: &mut admission::Gate) {
    let Some(lane) = lane.and_then(|lane| shared.lanes.get(lane)) else {
        return;
    };
    match std::mem::replace(gate, admission::Gate::Out) {
        admission::Gate::In(node) => lane.admission.exit(node),
        admission::Gate::Parked(node, ticket) => lane.admission.leave(node, ticket),
        admission::Gate::Before | admission::Gate::Out => {}
    }
}

/// Records a call's outcome on its span, when traced, and yields its result.
fn ended<T>(span: &tracing::Span, traced: bool, result: Result<T, Error>) -> Result<T, Error> {
    if traced {
        span.record(
            "outcome",
            result.as_ref().map_or_else(Error::kind, |_| "ok"),
        );
    }
    result
}

impl<R: Runtime> Executor for Client<R> {
    /// Runs the plan in the lane of the calling task ([`ClientOptions::lanes`]), inside a span
    /// of its own (see [`OPERATION_SPAN`]), a child of the caller's current span.
    fn run<P: Plan>(&self, plan: P) -> impl Future<Output = Result<P::Output, Error>> + Send {
        Running::new(&self.shared, None, plan)
    }

    fn detach<P: Plan>(&self, plan: P) {
        // No waiter: the session delivers the result to nobody, and writes the plan however
        // long it waits for its connection. No task to follow here: detached plans take the
        // first lane.
        let submission = Submission::new(plan, None);
        let _ = self.shared.lanes[0].tx.send(Msg::Submit(submission));
    }

    async fn shutdown(&self, grace: Duration) {
        Client::shutdown(self, grace).await
    }

    fn deployment(&self) -> Deployment {
        self.shared.deployment
    }
}
