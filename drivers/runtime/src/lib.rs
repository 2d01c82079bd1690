//! # botmesh-redis-runtime
//!
//! The botmesh-redis client, written once over a small [`Runtime`] trait (quinn style): the
//! session task, the per-connection reader and flusher, `connect`, `close`. A runtime supplies
//! only spawning, a timer and TCP; `botmesh-redis-tokio` and `botmesh-redis-async-std` are
//! those few calls each. Every protocol decision is the core's
//! ([`Session`](botmesh_redis_core::session::Session)); the bookkeeping around it is the core's
//! [`Shell`].
//!
//! ## Tasks
//!
//! ```text
//!  callers ──Submit──►┐                               ┌──try_write──► TCP
//!  readers ──Event───►├─► session task: Shell (core) ─┤
//!  flushers ─Flushed─►│         │                     └──► flusher task ──► TCP (socket full)
//!  timer   ──────────►┘         └──Complete──► caller
//! ```
//!
//! The session task takes every message already queued before it drains the shell, so all
//! requests submitted meanwhile leave in one write per connection, which it makes itself while
//! the socket takes the bytes. It keeps two inboxes and takes the connections' (replies,
//! closes, flushed writes) before the callers', so a backlog of new calls never delays the
//! replies of earlier ones; and it fires due timers on every pass, whatever woke it.
#![forbid(unsafe_code)]

use std::collections::hash_map::RandomState;
use std::collections::HashMap;
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

use botmesh_redis_core::request::{Access, Request};
use botmesh_redis_core::session::{BoxedPlan, Completion, ConnId};
use botmesh_redis_core::shell::{Action, Event, Shell};
use botmesh_redis_core::{ClientOptions, Error, Executor, NodeAddr, Plan};

/// What a runtime supplies: tasks, a timer and TCP.
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

    /// Opens a TCP connection (with `TCP_NODELAY`) and splits it.
    fn connect(
        addr: &NodeAddr,
    ) -> impl Future<Output = io::Result<(Self::Reader, Self::Writer)>> + Send;
}

/// Reads from a connection.
pub trait ReadHalf: Send + 'static {
    /// Reads what is available into `buf`'s spare capacity; `Ok(0)` at the end of the stream.
    fn read(&mut self, buf: &mut BytesMut) -> impl Future<Output = io::Result<usize>> + Send;
}

/// Writes to a connection.
pub trait WriteHalf: Send + 'static {
    /// Writes what the socket takes now without waiting: `Ok(n)` for `n` bytes written (maybe
    /// fewer than given), `WouldBlock` when it takes none.
    fn try_write(&mut self, bytes: &[u8]) -> io::Result<usize>;
    /// Writes all of `bytes`.
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

type Side<R> = WriteSide<<R as Runtime>::Writer>;
type Waiter = oneshot::Sender<Completion>;
type SessionShell<R> = Shell<Side<R>, Waiter>;
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
    /// A plan boxed by its caller (the one allocation of a submission) and its waiter.
    Submit(BoxedPlan, Waiter),
    Event(Event<Side<R>>),
    /// A connection's reader task, to stop with the connection.
    Reader(ConnId, R::Task),
    /// A flusher wrote everything it was given (or failed), and hands the half back.
    Flushed(ConnId, R::Writer, io::Result<()>),
    Close,
}

/// What a client's driver has done and holds, for monitoring (see [`Client::stats`]).
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
}

#[derive(Debug, Default)]
struct Counters {
    dials: AtomicU64,
    tasks: AtomicU64,
    connections: AtomicU64,
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

/// The tasks of the session's connections; dropping a task cancels it.
struct Tasks<R: Runtime> {
    /// Connect and reader tasks, per connection.
    conns: HashMap<ConnId, Vec<R::Task>>,
    /// The one flusher a connection may have at a time.
    flushers: HashMap<ConnId, R::Task>,
    counters: Arc<Counters>,
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
    cluster: bool,
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
            .field("cluster", &self.shared.cluster)
            .finish_non_exhaustive()
    }
}

impl<R: Runtime> Client<R> {
    /// Starts the client and checks that a node answers `PING` (with the credentials given), so
    /// a wrong address or password fails here, with a typed error, within the connect timeout.
    pub async fn connect(options: ClientOptions) -> Result<Self, Error> {
        let client = Self::start(options)?;
        let ping = Request::cmd(Access::Read, "PING").build()?;
        match client.call(ping).await {
            Ok(_) => Ok(client),
            Err(e) => {
                client.close().await;
                Err(e)
            }
        }
    }

    /// Starts the client without waiting for any node: the first request connects.
    pub fn start(options: ClientOptions) -> Result<Self, Error> {
        let mut seed = RandomState::new().build_hasher();
        seed.write_u64(0);
        let config = options.to_config(seed.finish())?;
        let shell = Shell::new(config, Instant::now());
        let (tx, calls) = futures_channel::mpsc::unbounded();
        let (closed_tx, closed) = async_channel::bounded(1);
        let counters = Arc::new(Counters::default());
        let session = run::<R>(shell, calls, closed_tx, Arc::clone(&counters));
        R::spawn_detached(counted(&counters, session));
        Ok(Client {
            shared: Arc::new(Shared {
                tx,
                counters,
                closed,
                cluster: options.is_cluster(),
                _runtime: PhantomData,
            }),
        })
    }

    /// Whether this client talks to a cluster.
    pub fn is_cluster(&self) -> bool {
        self.shared.cluster
    }

    /// What the driver has done and holds now: dials made, tasks alive.
    pub fn stats(&self) -> ClientStats {
        let counters = &self.shared.counters;
        ClientStats {
            dials: counters.dials.load(Ordering::Relaxed),
            tasks: counters.tasks.load(Ordering::Relaxed),
            connections: counters.connections.load(Ordering::Relaxed),
        }
    }

    /// Ends every pending plan (see [`Error::Closed`]), closes every connection and waits for
    /// the session task to finish. Other clones see [`Error::Closed`] afterwards.
    pub async fn close(&self) {
        let _ = self.shared.tx.unbounded_send(Msg::Close);
        // The session task drops its end when it is done; that is the signal.
        let _ = self.shared.closed.recv().await;
    }
}

impl<R: Runtime> Executor for Client<R> {
    async fn run<P: Plan>(&self, plan: P) -> Result<P::Output, Error> {
        let (done, rx) = oneshot::channel();
        self.shared
            .tx
            .unbounded_send(Msg::Submit(BoxedPlan::new(plan), done))
            .map_err(|_| Error::Closed)?;
        rx.await.map_err(|_| Error::Closed)?.into_result()
    }
}

/// The session task: feeds events to the shell and carries out its actions.
async fn run<R: Runtime>(
    mut shell: SessionShell<R>,
    mut calls: Rx<R>,
    _closed: async_channel::Sender<()>,
    counters: Arc<Counters>,
) {
    let mut tasks = Tasks::<R> {
        conns: HashMap::new(),
        flushers: HashMap::new(),
        counters,
    };
    // Two inboxes: what the connections report (replies, closes, flushed writes) and what
    // callers ask. Each pass takes the first before the second, so that a backlog of new calls
    // never holds back the replies of earlier ones, nor makes a healthy connection look silent
    // to its response timeout.
    let (tx, mut events) = futures_channel::mpsc::unbounded();
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
        let msg = match woke {
            Woke::Timer => {
                shell.handle_timeout(Instant::now());
                deadline = drain(&mut shell, &tx, &mut tasks);
                continue;
            }
            Woke::Msg(Some(msg)) => msg,
            // The session task holds an event sender itself, and the last `Client` sends
            // `Close` before its sender goes: neither inbox ends while the task runs.
            Woke::Msg(None) => break,
        };
        let mut closing = apply(&mut shell, &tx, &mut tasks, msg, Instant::now());
        // Take everything already queued before draining, so that all requests submitted
        // meanwhile leave in one write per connection. One yield first lets callers on other
        // worker threads add theirs: on a multi-thread runtime the task would otherwise wake
        // for nearly every submit, and send one request per write.
        future::yield_now().await;
        // One clock reading for the messages taken together: they arrived within microseconds.
        let now = Instant::now();
        for _ in 0..4096 {
            match events.try_recv() {
                Ok(msg) => closing |= apply(&mut shell, &tx, &mut tasks, msg, now),
                Err(_) => break,
            }
        }
        for _ in 0..1024 {
            match calls.try_recv() {
                Ok(msg) => closing |= apply(&mut shell, &tx, &mut tasks, msg, now),
                Err(_) => break,
            }
        }
        if closing {
            break;
        }
        // `future::or` polls the inbox first, so under steady traffic the timer branch may
        // never win: due timers (request deadlines, response timeouts, retry delays, refreshes,
        // plan waits) fire here on every pass, whatever woke the task.
        if let Some(at) = deadline {
            let now = Instant::now();
            if at <= now {
                shell.handle_timeout(now);
            }
        }
        deadline = drain(&mut shell, &tx, &mut tasks);
    }
    shell.close(Instant::now());
    drain(&mut shell, &tx, &mut tasks);
}

/// Applies one message; returns whether the client is closing.
fn apply<R: Runtime>(
    shell: &mut SessionShell<R>,
    tx: &Tx<R>,
    tasks: &mut Tasks<R>,
    msg: Msg<R>,
    now: Instant,
) -> bool {
    match msg {
        Msg::Submit(plan, waiter) => shell.submit_boxed(now, plan, waiter),
        Msg::Event(event) => shell.handle(now, event),
        Msg::Reader(conn, reader) => {
            // A reader of a connection the session already dropped is cancelled by the drop.
            if shell.is_live(conn) {
                tasks.conns.entry(conn).or_default().push(reader);
            }
        }
        Msg::Flushed(conn, half, result) => {
            tasks.flushers.remove(&conn);
            match result {
                Err(e) => {
                    let reason = e.to_string();
                    shell.handle(now, Event::Closed { conn, reason });
                }
                Ok(()) => {
                    if let Some(side) = shell.writer_mut(conn) {
                        let queued = match std::mem::replace(side, WriteSide::Ready(half)) {
                            WriteSide::Flushing(queued) => queued,
                            WriteSide::Ready(_) => BytesMut::new(),
                        };
                        if !queued.is_empty() {
                            write(conn, side, &queued, tx, tasks);
                        }
                    }
                }
            }
        }
        Msg::Close => return true,
    }
    false
}

/// Writes `bytes` to a connection: straight to the socket while it takes them, else behind
/// the flusher that owns the socket.
fn write<R: Runtime>(
    conn: ConnId,
    side: &mut Side<R>,
    bytes: &[u8],
    tx: &Tx<R>,
    tasks: &mut Tasks<R>,
) {
    let half = match side {
        WriteSide::Flushing(queued) => return queued.extend_from_slice(bytes),
        WriteSide::Ready(half) => half,
    };
    let mut written = 0;
    while written < bytes.len() {
        match half.try_write(&bytes[written..]) {
            Ok(0) => break,
            Ok(n) => written += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
            Err(e) => {
                let reason = e.to_string();
                let _ = tx.unbounded_send(Msg::Event(Event::Closed { conn, reason }));
                return;
            }
        }
    }
    if written == bytes.len() {
        return;
    }
    // The socket is full: a flusher waits for it with the rest, and hands the half back.
    let WriteSide::Ready(mut half) = std::mem::replace(side, WriteSide::Flushing(BytesMut::new()))
    else {
        return;
    };
    let rest = bytes[written..].to_vec();
    let tx = tx.clone();
    let flusher = R::spawn(counted(&tasks.counters, async move {
        let result = half.write_all(&rest).await;
        let _ = tx.unbounded_send(Msg::Flushed(conn, half, result));
    }));
    tasks.flushers.insert(conn, flusher);
}

/// Carries out the shell's actions until it says what to wait for.
fn drain<R: Runtime>(
    shell: &mut SessionShell<R>,
    tx: &Tx<R>,
    tasks: &mut Tasks<R>,
) -> Option<Instant> {
    loop {
        match shell.poll() {
            Action::Connect {
                conn,
                dial,
                timeout,
            } => {
                tasks.counters.dials.fetch_add(1, Ordering::Relaxed);
                let open = open::<R>(conn, dial, timeout, tx.clone(), Arc::clone(&tasks.counters));
                let task = R::spawn(counted(&tasks.counters, open));
                tasks.conns.entry(conn).or_default().push(task);
            }
            Action::Write { conn, bytes } => {
                if let Some(side) = shell.writer_mut(conn) {
                    write(conn, side, &bytes, tx, tasks);
                }
            }
            Action::Drop { conn, writer } => {
                // Dropping the tasks cancels them; a writing side that is ours is shut down.
                tasks.conns.remove(&conn);
                tasks.flushers.remove(&conn);
                if let Some(WriteSide::Ready(mut half)) = writer {
                    let shutdown = async move { half.shutdown().await };
                    R::spawn_detached(counted(&tasks.counters, shutdown));
                }
            }
            Action::Complete { waiter, completion } => {
                let _ = waiter.send(completion);
            }
            Action::Wait { until } => {
                let held = tasks.conns.len() as u64;
                tasks.counters.connections.store(held, Ordering::Relaxed);
                return until;
            }
        }
    }
}

/// Opens one connection and starts its reader.
async fn open<R: Runtime>(
    conn: ConnId,
    dial: NodeAddr,
    timeout: Duration,
    tx: Tx<R>,
    counters: Arc<Counters>,
) {
    let event = |event| Msg::Event(event);
    let connect = async { R::connect(&dial).await.map_err(|e| e.to_string()) };
    let deadline = async {
        R::sleep_until(Instant::now() + timeout).await;
        Err(format!("no connection within {timeout:?}"))
    };
    let (mut read, write) = match future::or(connect, deadline).await {
        Ok(halves) => halves,
        Err(reason) => {
            let _ = tx.unbounded_send(event(Event::ConnectFailed { conn, reason }));
            return;
        }
    };
    // Connected goes first: a server that speaks before it is asked (`max number of clients
    // reached` on accept) must not have its words reach the session ahead of the connection.
    let writer = WriteSide::Ready(write);
    let _ = tx.unbounded_send(event(Event::Connected { conn, writer }));
    let reader_tx = tx.clone();
    let reader = R::spawn(counted(&counters, async move {
        let mut buf = BytesMut::with_capacity(64 * 1024);
        let reason = loop {
            if buf.capacity() - buf.len() < 16 * 1024 {
                buf.reserve(64 * 1024);
            }
            match read.read(&mut buf).await {
                Ok(0) => break "closed by the server".to_owned(),
                Ok(_) => {
                    let bytes = buf.split();
                    if reader_tx
                        .unbounded_send(event(Event::Read { conn, bytes }))
                        .is_err()
                    {
                        return;
                    }
                }
                Err(e) => break e.to_string(),
            }
        };
        let _ = reader_tx.unbounded_send(event(Event::Closed { conn, reason }));
    }));
    let _ = tx.unbounded_send(Msg::Reader(conn, reader));
}
