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
//! ## Tasks
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
//! add their requests to the same write; a call that is the only one in the session, with
//! nobody else woken, is written at once instead (a lone caller does not pay the yield's
//! scheduling round).
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

#[cfg(feature = "metrics")]
mod instruments;
#[cfg(not(feature = "metrics"))]
mod no_instruments;
#[cfg(not(feature = "tls"))]
mod no_tls;
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
use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::hash::{BuildHasher, Hasher};
use std::io;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use futures_channel::mpsc::{UnboundedReceiver, UnboundedSender};
use futures_channel::oneshot;
use futures_lite::{future, StreamExt};
use tracing::field::{display, Empty};
use tracing::Instrument;

use botmesh_redis_core::driver::plan::connect_check;
use botmesh_redis_core::driver::session::{
    ConnId, DialTarget, Output, Session, Submission, Summary, Waiters,
};
use botmesh_redis_core::driver::Plan;
use botmesh_redis_core::{
    ClientOptions, Deployment, Error, Executor, NodeAddr, Store, StoreOptions,
};

/// What a runtime supplies: tasks, a timer, and TCP and Unix-socket connections.
pub trait Runtime: Send + Sync + 'static {
    /// A spawned task; dropping it cancels the task.
    type Task: Send + 'static;
    /// The reading half of a TCP connection.
    type Reader: ReadHalf;
    /// The writing half of a TCP connection.
    type Writer: WriteHalf;

    /// Spawns `task`; dropping the handle cancels it.
    fn spawn<F: Future<Output = ()> + Send + 'static>(task: F) -> Self::Task;

    /// Spawns `task` to run to its end on its own.
    fn spawn_detached<F: Future<Output = ()> + Send + 'static>(task: F);

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

/// The writing side of a connection, owned by the session task. Bytes go straight to the
/// socket while it takes them; when it is full, the half goes to a flusher task with the rest,
/// and what the session writes meanwhile waits here, in order, until the half comes back.
enum WriteSide<W> {
    Ready(W),
    Flushing(BytesMut),
}

/// The I/O of one connection, from the session's [`Output::Connect`] to its
/// [`Output::Close`]: the only per-connection state outside the session. Whether the
/// connection is still wanted, and what its events mean, is the session's to say.
struct Io<R: Runtime> {
    /// The writing half, once connected.
    write: Option<WriteSide<R::Writer>>,
    /// The connect task, then the reader; dropping them cancels them.
    tasks: Vec<R::Task>,
    /// The one flusher the connection may have at a time.
    flusher: Option<R::Task>,
    /// The connection's share of its node's connections gauge, given back when it closes.
    _gauge: instruments::ConnGauge,
}

/// The callers' waiters: a one-shot channel per call, typed by the plan's output, so a result
/// reaches its caller with its type, and with what became of the plan for the caller's span.
#[derive(Debug)]
struct OneShot;

/// What a call's channel carries: the result, and the session's summary of the plan.
struct Delivery<T> {
    result: Result<T, Error>,
    summary: Option<Summary>,
}

impl Waiters for OneShot {
    type Waiter<T: Send + 'static> = oneshot::Sender<Delivery<T>>;
    type Delivered = ();

    fn deliver<T: Send + 'static>(waiter: Self::Waiter<T>, result: Result<T, Error>) {
        let summary = None;
        // A caller that stopped waiting (its future dropped) has nothing to be told.
        let _ = waiter.send(Delivery { result, summary });
    }

    fn deliver_summarized<T: Send + 'static>(
        waiter: Self::Waiter<T>,
        result: Result<T, Error>,
        summary: Summary,
    ) {
        let summary = Some(summary);
        let _ = waiter.send(Delivery { result, summary });
    }
}
/// An inbox of the session task (callers', or the connections'). Sending never waits: a
/// submit is a push and, when the task sleeps, a wake.
type Tx<R> = UnboundedSender<Msg<R>>;
type Rx<R> = UnboundedReceiver<Msg<R>>;

/// What woke the session task.
enum Woke<R: Runtime> {
    /// A message, or `None` when an inbox ended.
    Msg(Option<Msg<R>>),
    Timer,
}

enum Msg<R: Runtime> {
    /// A plan boxed by its caller with its waiter: the one allocation of a submission.
    Submit(Submission<OneShot>),
    /// A graceful close, whose grace ends then.
    Shutdown(Instant),
    /// What a connection's tasks observed.
    Conn(ConnId, ConnEvent<R>),
    Close,
}

/// What a connection's tasks report to the session task.
enum ConnEvent<R: Runtime> {
    /// The TCP connect succeeded; the writing half.
    Connected(R::Writer),
    ConnectFailed(String),
    /// Bytes read; splits of one read buffer, so the session decodes them without a copy.
    Read(BytesMut),
    /// The peer closed, or a read or write failed.
    Closed(String),
    /// The reader task, to stop with the connection.
    Reader(R::Task),
    /// A flusher wrote everything it was given (or failed), and hands the half back.
    Flushed(R::Writer, io::Result<()>),
}

/// What a client's driver has done and holds, for monitoring (see [`Client::stats`](crate::Client::stats)).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ClientStats {
    /// TCP connects started since the client was created.
    pub dials: u64,
    /// The client's tasks alive now: the session task, and each connection's connect, reader
    /// and flusher tasks. Bounded by the number of nodes however connections come and go.
    pub tasks: u64,
    /// Connections whose task handles the driver holds (open, opening, or closing).
    pub connections: u64,
    /// The dials (of [`ClientStats::dials`]) to a node that was dialled before: connections
    /// lost or refused and opened again.
    pub reconnects: u64,
    /// Times the session task woke and worked (a reply read, a call submitted, a timer):
    /// calls per pass say how many calls each wake serves.
    pub passes: u64,
    /// Writes to the connections' sockets (each carries every request queued for its
    /// connection when it is made): calls per write say how well requests are batched.
    pub writes: u64,
    /// Reads from the connections' sockets that returned bytes.
    pub reads: u64,
}

#[derive(Debug, Default)]
struct Counters {
    dials: AtomicU64,
    reconnects: AtomicU64,
    tasks: AtomicU64,
    connections: AtomicU64,
    passes: AtomicU64,
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
    tx: Tx<R>,
    counters: Arc<Counters>,
    closed: async_channel::Receiver<()>,
    /// What the session's configuration talks to, kept for [`Executor::deployment`].
    deployment: Deployment,
    _runtime: PhantomData<fn() -> R>,
}

impl<R: Runtime> Drop for Shared<R> {
    fn drop(&mut self) {
        // The last handle is gone: end the session task, which ends every connection.
        let _ = self.tx.unbounded_send(Msg::Close);
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
        let check = connect_check(&options.to_config(0)?.endpoints);
        let client = Self::start_with(options, registry)?;
        match client.run(check).await {
            Ok(()) => Ok(client),
            Err(e) => {
                client.close().await;
                Err(e)
            }
        }
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
        let session = Session::new(config, Instant::now());
        let (tx, calls) = futures_channel::mpsc::unbounded();
        let (closed_tx, closed) = async_channel::bounded(1);
        let counters = Arc::new(Counters::default());
        let instruments = instruments::Instruments::new(registry);
        let task = run::<R>(
            session,
            calls,
            closed_tx,
            Arc::clone(&counters),
            tls,
            instruments,
        );
        R::spawn_detached(counted(&counters, task));
        Ok(Client {
            shared: Arc::new(Shared {
                tx,
                counters,
                closed,
                deployment,
                _runtime: PhantomData,
            }),
        })
    }

    /// Whether this client talks to a cluster.
    pub fn is_cluster(&self) -> bool {
        self.shared.deployment == Deployment::Cluster
    }

    /// What the driver has done and holds now: dials made, tasks alive.
    pub fn stats(&self) -> ClientStats {
        let counters = &self.shared.counters;
        ClientStats {
            dials: counters.dials.load(Ordering::Relaxed),
            tasks: counters.tasks.load(Ordering::Relaxed),
            connections: counters.connections.load(Ordering::Relaxed),
            reconnects: counters.reconnects.load(Ordering::Relaxed),
            passes: counters.passes.load(Ordering::Relaxed),
            writes: counters.writes.load(Ordering::Relaxed),
            reads: counters.reads.load(Ordering::Relaxed),
        }
    }

    /// Closes at once: ends every pending plan (see [`Error::Closed`]; a write sent and
    /// unanswered is [`Error::ReplyLost`]), closes every connection and waits for the session
    /// task to finish. Other clones see [`Error::Closed`] afterwards. [`Client::shutdown`]
    /// lets calls in flight finish first.
    pub async fn close(&self) {
        let _ = self.shared.tx.unbounded_send(Msg::Close);
        // The session task drops its end when it is done; that is the signal.
        let _ = self.shared.closed.recv().await;
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
        let _ = self.shared.tx.unbounded_send(Msg::Shutdown(until));
        let _ = self.shared.closed.recv().await;
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
    if let Some(slot) = summary.slot {
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

impl<R: Runtime> Executor for Client<R> {
    /// Runs the plan inside a span of its own (see [`OPERATION_SPAN`]), a child of the
    /// caller's current span.
    async fn run<P: Plan>(&self, plan: P) -> Result<P::Output, Error> {
        let span = tracing::info_span!(
            OPERATION_SPAN,
            operation = plan.operation(),
            slot = Empty,
            attempts = Empty,
            node = Empty,
            outcome = Empty,
        );
        let (done, rx) = oneshot::channel();
        let call = async {
            self.shared
                .tx
                .unbounded_send(Msg::Submit(Submission::new(plan, done)))
                .map_err(|_| Error::Closed)?;
            rx.await.map_err(|_| Error::Closed)
        };
        // Without a subscriber that wants the span, the call is not wrapped at all.
        if span.is_disabled() {
            return call.await?.result;
        }
        let result = match call.instrument(span.clone()).await {
            Ok(Delivery { result, summary }) => {
                if let Some(summary) = summary {
                    record(&span, &summary);
                }
                result
            }
            Err(closed) => Err(closed),
        };
        span.record(
            "outcome",
            result.as_ref().map_or_else(Error::kind, |_| "ok"),
        );
        result
    }

    fn detach<P: Plan>(&self, plan: P) {
        // The receiver goes at once: the session delivers the result to nobody.
        let (done, _) = oneshot::channel();
        let _ = self
            .shared
            .tx
            .unbounded_send(Msg::Submit(Submission::new(plan, done)));
    }

    async fn shutdown(&self, grace: Duration) {
        Client::shutdown(self, grace).await
    }

    fn deployment(&self) -> Deployment {
        self.shared.deployment
    }
}

/// The session task's state: the session (all protocol state) and each connection's I/O.
struct SessionTask<R: Runtime> {
    session: Session<OneShot>,
    conns: HashMap<ConnId, Io<R>>,
    /// The connections' inbox, for their tasks.
    tx: Tx<R>,
    counters: Arc<Counters>,
    /// TLS for every connection, or plain TCP.
    tls: Option<TlsConnector>,
    /// The end of a graceful close's grace, once one began.
    grace_until: Option<Instant>,
    /// The nodes dialled so far: a dial to one of them is a reconnect.
    dialled: HashSet<NodeAddr>,
    /// The metric handles (nothing without the `metrics` feature).
    instruments: instruments::Instruments,
    /// Callers the last drain woke (results delivered) that have not submitted since, as far
    /// as the count of submits tells: the ones the yield before a drain waits for.
    awaited: usize,
}

/// The session task: feeds every input to the session and carries out its outputs.
async fn run<R: Runtime>(
    session: Session<OneShot>,
    mut calls: Rx<R>,
    _closed: async_channel::Sender<()>,
    counters: Arc<Counters>,
    tls: Option<TlsConnector>,
    instruments: instruments::Instruments,
) {
    // Two inboxes: what the connections report (replies, closes, flushed writes) and what
    // callers ask. Each pass takes the first before the second, so that a backlog of new calls
    // never holds back the replies of earlier ones, nor makes a healthy connection look silent
    // to its response timeout.
    let (tx, mut events) = futures_channel::mpsc::unbounded();
    let mut task = SessionTask::<R> {
        session,
        conns: HashMap::new(),
        tx,
        counters,
        tls,
        grace_until: None,
        dialled: HashSet::new(),
        instruments,
        awaited: 0,
    };
    let mut deadline: Option<Instant> = None;
    loop {
        let event = async { Woke::Msg(events.next().await) };
        let call = async { Woke::Msg(calls.next().await) };
        let inbox = future::or(event, call);
        let woke = match deadline {
            Some(at) => {
                let timer = async {
                    R::sleep_until(at).await;
                    Woke::Timer
                };
                future::or(inbox, timer).await
            }
            None => inbox.await,
        };
        task.counters.passes.fetch_add(1, Ordering::Relaxed);
        let msg = match woke {
            Woke::Timer => {
                let now = Instant::now();
                task.session.handle_timeout(now);
                if task.drained(now) {
                    break;
                }
                deadline = task.next_deadline();
                continue;
            }
            Woke::Msg(Some(msg)) => msg,
            // The session task holds an event sender itself, and the last `Client` sends
            // `Close` before its sender goes: neither inbox ends while the task runs.
            Woke::Msg(None) => break,
        };
        let submit = matches!(msg, Msg::Submit(_));
        let mut closing = task.apply(msg, Instant::now());
        // A submitted plan that is the only one in the session, when the last results woke no
        // other caller, has nobody to wait for (a lone caller, calls arriving one at a time):
        // it is written at once, without the scheduling round of the yield.
        let lone = submit && task.awaited == 0 && task.session.in_flight() <= 1;
        // Take everything already queued before draining, so that all requests submitted
        // meanwhile leave in one write per connection. One yield first lets callers on other
        // worker threads add theirs (those woken by the last results, above all): on a
        // multi-thread runtime the task would otherwise wake for nearly every submit, and send
        // one request per write.
        if !lone {
            future::yield_now().await;
        }
        closing |= task.apply_queued(&mut events, &mut calls);
        // The callers woken before had their chance to submit; what this pass's drain delivers
        // counts afresh.
        task.awaited = 0;
        if closing || task.drained(Instant::now()) {
            break;
        }
        // `future::or` polls the inbox first, so under steady traffic the timer branch may
        // never win: due timers (request deadlines, response timeouts, retry delays, refreshes,
        // plan waits) fire here on every pass, whatever woke the task.
        if let Some(at) = deadline {
            let now = Instant::now();
            if at <= now {
                task.session.handle_timeout(now);
            }
        }
        deadline = task.next_deadline();
    }
    task.session.close(Instant::now());
    task.drain();
}

impl<R: Runtime> SessionTask<R> {
    /// Applies what both inboxes hold already, the connections' first (a bounded number from
    /// each, so that neither starves the loop); returns whether the client is closing.
    fn apply_queued(&mut self, events: &mut Rx<R>, calls: &mut Rx<R>) -> bool {
        // One clock reading for the messages taken together: they arrived within microseconds.
        let now = Instant::now();
        let mut closing = false;
        for (inbox, most) in [(events, 4096), (calls, 1024)] {
            for _ in 0..most {
                match inbox.try_recv() {
                    Ok(msg) => closing |= self.apply(msg, now),
                    Err(_) => break,
                }
            }
        }
        closing
    }
    /// Carries out the session's outputs ([`SessionTask::drain`]) and says when to wake: at
    /// the session's next timer or the end of a graceful close's grace, whichever is first.
    fn next_deadline(&mut self) -> Option<Instant> {
        let due = self.drain();
        match self.grace_until {
            Some(until) => Some(due.map_or(until, |at| at.min(until))),
            None => due,
        }
    }

    /// Whether a graceful close is over: nothing is out, or its grace ran out.
    fn drained(&self, now: Instant) -> bool {
        self.grace_until
            .is_some_and(|until| self.session.sending() == 0 || now >= until)
    }

    /// Applies one message; returns whether the client is closing. Every connection event goes
    /// to the session, which ignores those of connections it closed; the driver only keeps
    /// or drops the I/O the event carries.
    fn apply(&mut self, msg: Msg<R>, now: Instant) -> bool {
        let (conn, event) = match msg {
            Msg::Submit(submission) => {
                self.awaited = self.awaited.saturating_sub(1);
                self.session.submit_boxed(now, submission);
                return false;
            }
            Msg::Close => return true,
            Msg::Shutdown(until) => {
                self.session.stop_accepting();
                // Of two graceful closes, the first to end its grace ends both.
                self.grace_until = Some(self.grace_until.map_or(until, |at| at.min(until)));
                return false;
            }
            Msg::Conn(conn, event) => (conn, event),
        };
        let io = self.conns.get_mut(&conn);
        match event {
            ConnEvent::Connected(half) => {
                // A late connect's half is dropped here, which closes its socket.
                if let Some(io) = io {
                    io.write = Some(WriteSide::Ready(half));
                }
                self.session.handle_connected(now, conn);
            }
            ConnEvent::ConnectFailed(reason) => {
                self.session.handle_connect_failed(now, conn, &reason)
            }
            ConnEvent::Read(bytes) => self.session.handle_read_buf(now, conn, bytes),
            ConnEvent::Closed(reason) => self.session.handle_closed(now, conn, &reason),
            ConnEvent::Reader(task) => {
                // A reader of a closed connection is cancelled by this drop.
                if let Some(io) = io {
                    io.tasks.push(task);
                }
            }
            ConnEvent::Flushed(half, Err(e)) => {
                drop(half);
                if let Some(io) = io {
                    io.flusher = None;
                }
                self.session.handle_closed(now, conn, &e.to_string());
            }
            ConnEvent::Flushed(half, Ok(())) => {
                let Some(io) = io else {
                    return false;
                };
                io.flusher = None;
                let queued = match io.write.replace(WriteSide::Ready(half)) {
                    Some(WriteSide::Flushing(queued)) => queued,
                    _ => BytesMut::new(),
                };
                if !queued.is_empty() {
                    self.write(conn, &queued);
                }
            }
        }
        false
    }

    /// Carries out the session's outputs until it says what to wait for.
    fn drain(&mut self) -> Option<Instant> {
        loop {
            match self.session.poll() {
                Output::Connect { conn, node, dial } => {
                    self.counters.dials.fetch_add(1, Ordering::Relaxed);
                    let reconnect = self.dialled.contains(&node);
                    if reconnect {
                        self.counters.reconnects.fetch_add(1, Ordering::Relaxed);
                    } else {
                        self.dialled.insert(node.clone());
                    }
                    let gauge = self.instruments.connecting(&node, reconnect);
                    let open = open::<R>(
                        conn,
                        dial,
                        self.tx.clone(),
                        Arc::clone(&self.counters),
                        self.tls.clone(),
                    );
                    let task = R::spawn(counted(&self.counters, open));
                    let io = Io {
                        write: None,
                        tasks: vec![task],
                        flusher: None,
                        _gauge: gauge,
                    };
                    self.conns.insert(conn, io);
                }
                Output::Transmit { conn, bytes } => self.write(conn, &bytes),
                Output::Close { conn } => {
                    // Dropping the tasks cancels them; a writing half that is ours is shut
                    // down.
                    if let Some(Io {
                        write: Some(WriteSide::Ready(mut half)),
                        ..
                    }) = self.conns.remove(&conn)
                    {
                        let shutdown = async move { half.shutdown().await };
                        R::spawn_detached(counted(&self.counters, shutdown));
                    }
                }
                Output::Complete(completion) => {
                    // Everything the call caused is exported before its caller hears of it,
                    // so a caller that reads the metrics after its call sees the call in them.
                    self.instruments.completed(completion.summary());
                    self.instruments.observe(&self.session);
                    completion.deliver();
                    self.awaited += 1;
                }
                Output::Wait { until, .. } => {
                    let held = self.conns.len() as u64;
                    self.counters.connections.store(held, Ordering::Relaxed);
                    self.instruments.observe(&self.session);
                    return until;
                }
            }
        }
    }

    /// Writes `bytes` to a connection: straight to the socket while it takes them, else
    /// behind the flusher that owns the socket.
    fn write(&mut self, conn: ConnId, bytes: &[u8]) {
        // The session transmits only on connections it was told are connected.
        let Some(io) = self.conns.get_mut(&conn) else {
            return;
        };
        let half = match &mut io.write {
            Some(WriteSide::Flushing(queued)) => return queued.extend_from_slice(bytes),
            Some(WriteSide::Ready(half)) => half,
            None => return,
        };
        self.counters.writes.fetch_add(1, Ordering::Relaxed);
        let mut written = 0;
        while written < bytes.len() {
            match half.try_write(&bytes[written..]) {
                Ok(0) => break,
                Ok(n) => written += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) => {
                    let event = ConnEvent::Closed(e.to_string());
                    let _ = self.tx.unbounded_send(Msg::Conn(conn, event));
                    return;
                }
            }
        }
        if written == bytes.len() {
            return;
        }
        // The socket is full: a flusher waits for it with the rest, and hands the half back.
        let Some(WriteSide::Ready(mut half)) =
            io.write.replace(WriteSide::Flushing(BytesMut::new()))
        else {
            return;
        };
        let rest = bytes[written..].to_vec();
        let tx = self.tx.clone();
        let flusher = R::spawn(counted(&self.counters, async move {
            let result = half.write_all(&rest).await;
            let _ = tx.unbounded_send(Msg::Conn(conn, ConnEvent::Flushed(half, result)));
        }));
        io.flusher = Some(flusher);
    }
}

/// Opens one connection and starts its reader. No timer here: the session's connect deadline
/// ends a connect that takes too long, and the driver cancels this task when it does.
async fn open<R: Runtime>(
    conn: ConnId,
    dial: DialTarget,
    tx: Tx<R>,
    counters: Arc<Counters>,
    tls: Option<TlsConnector>,
) {
    let event = move |event| Msg::Conn(conn, event);
    // `ClientOptions::tls_settings` refuses TLS over a Unix socket before a client starts.
    let tls = tls.filter(|_| matches!(dial, DialTarget::Tcp(_)));
    let (mut read, write) = match R::connect(&dial, tls.as_ref()).await {
        Ok(halves) => halves,
        Err(e) => {
            let reason = tls::describe_failure(&e);
            let _ = tx.unbounded_send(event(ConnEvent::ConnectFailed(reason)));
            return;
        }
    };
    // Connected goes first: a server that speaks before it is asked (`max number of clients
    // reached` on accept) must not have its words reach the session ahead of the connection.
    let _ = tx.unbounded_send(event(ConnEvent::Connected(write)));
    let reader_tx = tx.clone();
    let reads = Arc::clone(&counters);
    let reader = R::spawn(counted(&counters, async move {
        let mut buf = BytesMut::with_capacity(64 * 1024);
        let reason = loop {
            if buf.capacity() - buf.len() < 16 * 1024 {
                buf.reserve(64 * 1024);
            }
            match read.read(&mut buf).await {
                Ok(0) => break "closed by the server".to_owned(),
                Ok(_) => {
                    reads.reads.fetch_add(1, Ordering::Relaxed);
                    let bytes = buf.split();
                    if reader_tx
                        .unbounded_send(event(ConnEvent::Read(bytes)))
                        .is_err()
                    {
                        return;
                    }
                }
                // A TLS server that refuses the client's certificate says so in an alert read
                // after the handshake (TLS 1.3): the reason names it.
                Err(e) => break tls::describe_failure(&e),
            }
        };
        let _ = reader_tx.unbounded_send(event(ConnEvent::Closed(reason)));
    }));
    let _ = tx.unbounded_send(event(ConnEvent::Reader(reader)));
}
