//! # botmesh-redis-runtime
//!
//! The botmesh-redis client, written once over a small [`Runtime`] trait (quinn style): the
//! session task, the per-connection reader and writer, `connect`, `close`. A runtime supplies
//! only spawning, a timer and TCP; `botmesh-redis-tokio` and `botmesh-redis-async-std` are
//! those few calls each. Every protocol decision is the core's
//! ([`Session`](botmesh_redis_core::session::Session)); the bookkeeping around it is the core's
//! [`Shell`].
//!
//! ## Tasks
//!
//! ```text
//!  callers ──Submit──►┐
//!  readers ──Event───►├─► session task: Shell (core) ──Write──► writer task ──► TCP
//!  timer   ──────────►┘         │
//!                               └──Complete──► caller
//! ```
//!
//! The session task takes every message already queued before it drains the shell, so all
//! requests submitted meanwhile leave in one write per connection.
#![forbid(unsafe_code)]

use std::collections::hash_map::RandomState;
use std::collections::HashMap;
use std::future::Future;
use std::hash::{BuildHasher, Hasher};
use std::io;
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_channel::{Receiver, Sender};
use bytes::{Bytes, BytesMut};
use futures_channel::oneshot;
use futures_lite::future;

use botmesh_redis_core::request::{Access, Request};
use botmesh_redis_core::session::{Completion, ConnId};
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
    /// Writes all of `bytes`.
    fn write_all(&mut self, bytes: &[u8]) -> impl Future<Output = io::Result<()>> + Send;
    /// Flushes and shuts the writing side down.
    fn shutdown(&mut self) -> impl Future<Output = ()> + Send;
}

type Writer = Sender<Bytes>;
type Waiter = oneshot::Sender<Completion>;
type Submit = Box<dyn FnOnce(&mut Shell<Writer, Waiter>, Instant) + Send>;

enum Msg<T> {
    Submit(Submit),
    Event(Event<Writer>),
    /// A connection's reader task, to stop with the connection.
    Reader(ConnId, T),
    Close,
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
    tx: Sender<Msg<R::Task>>,
    closed: Receiver<()>,
    cluster: bool,
    _runtime: PhantomData<fn() -> R>,
}

impl<R: Runtime> Drop for Shared<R> {
    fn drop(&mut self) {
        // The last handle is gone: end the session task, which ends every connection.
        let _ = self.tx.try_send(Msg::Close);
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
        let (tx, rx) = async_channel::unbounded();
        let (closed_tx, closed) = async_channel::bounded(1);
        R::spawn_detached(run::<R>(shell, tx.clone(), rx, closed_tx));
        Ok(Client {
            shared: Arc::new(Shared {
                tx,
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

    /// Ends every pending plan (see [`Error::Closed`]), closes every connection and waits for
    /// the session task to finish. Other clones see [`Error::Closed`] afterwards.
    pub async fn close(&self) {
        let _ = self.shared.tx.send(Msg::Close).await;
        // The session task drops its end when it is done; that is the signal.
        let _ = self.shared.closed.recv().await;
    }
}

impl<R: Runtime> Executor for Client<R> {
    async fn run<P: Plan>(&self, plan: P) -> Result<P::Output, Error> {
        let (done, rx) = oneshot::channel();
        let submit: Submit = Box::new(move |shell, now| shell.submit(now, plan, done));
        self.shared
            .tx
            .send(Msg::Submit(submit))
            .await
            .map_err(|_| Error::Closed)?;
        rx.await.map_err(|_| Error::Closed)?.into_result()
    }
}

/// The session task: feeds events to the shell and carries out its actions.
async fn run<R: Runtime>(
    mut shell: Shell<Writer, Waiter>,
    tx: Sender<Msg<R::Task>>,
    rx: Receiver<Msg<R::Task>>,
    _closed: Sender<()>,
) {
    // The tasks of each connection; dropping a task cancels it.
    let mut tasks: HashMap<ConnId, Vec<R::Task>> = HashMap::new();
    let mut deadline: Option<Instant> = None;
    loop {
        let next = async { Some(rx.recv().await) };
        let msg = match deadline {
            Some(at) => {
                let timer = async {
                    R::sleep_until(at).await;
                    None
                };
                future::or(next, timer).await
            }
            None => next.await,
        };
        let Some(msg) = msg else {
            shell.handle_timeout(Instant::now());
            deadline = drain::<R>(&mut shell, &tx, &mut tasks);
            continue;
        };
        let Ok(msg) = msg else {
            break;
        };
        let mut closing = apply::<R>(&mut shell, &mut tasks, msg);
        // Take everything already queued before draining, so that all requests submitted
        // meanwhile leave in one write per connection. One yield first lets callers on other
        // worker threads add theirs: on a multi-thread runtime the task would otherwise wake
        // for nearly every submit, and send one request per write.
        future::yield_now().await;
        for _ in 0..1024 {
            match rx.try_recv() {
                Ok(msg) => closing |= apply::<R>(&mut shell, &mut tasks, msg),
                Err(_) => break,
            }
        }
        if closing {
            break;
        }
        deadline = drain::<R>(&mut shell, &tx, &mut tasks);
    }
    shell.close(Instant::now());
    drain::<R>(&mut shell, &tx, &mut tasks);
}

/// Applies one message; returns whether the client is closing.
fn apply<R: Runtime>(
    shell: &mut Shell<Writer, Waiter>,
    tasks: &mut HashMap<ConnId, Vec<R::Task>>,
    msg: Msg<R::Task>,
) -> bool {
    match msg {
        Msg::Submit(submit) => submit(shell, Instant::now()),
        Msg::Event(event) => shell.handle(Instant::now(), event),
        Msg::Reader(conn, reader) => {
            // A reader of a connection the session already dropped is cancelled by the drop.
            if shell.is_live(conn) {
                tasks.entry(conn).or_default().push(reader);
            }
        }
        Msg::Close => return true,
    }
    false
}

/// Carries out the shell's actions until it says what to wait for.
fn drain<R: Runtime>(
    shell: &mut Shell<Writer, Waiter>,
    tx: &Sender<Msg<R::Task>>,
    tasks: &mut HashMap<ConnId, Vec<R::Task>>,
) -> Option<Instant> {
    loop {
        match shell.poll() {
            Action::Connect {
                conn,
                dial,
                timeout,
            } => {
                let task = R::spawn(open::<R>(conn, dial, timeout, tx.clone()));
                tasks.entry(conn).or_default().push(task);
            }
            Action::Write { conn, bytes } => {
                if let Some(writer) = shell.writer(conn) {
                    let _ = writer.try_send(bytes);
                }
            }
            Action::Drop { conn, .. } => {
                // Dropping the writer ends the writer task; dropping the others cancels them.
                tasks.remove(&conn);
            }
            Action::Complete { waiter, completion } => {
                let _ = waiter.send(completion);
            }
            Action::Wait { until } => return until,
        }
    }
}

/// Opens one connection and starts its reader and writer.
async fn open<R: Runtime>(
    conn: ConnId,
    dial: NodeAddr,
    timeout: Duration,
    tx: Sender<Msg<R::Task>>,
) {
    let event = |event| Msg::Event(event);
    let connect = async { R::connect(&dial).await.map_err(|e| e.to_string()) };
    let deadline = async {
        R::sleep_until(Instant::now() + timeout).await;
        Err(format!("no connection within {timeout:?}"))
    };
    let (mut read, mut write) = match future::or(connect, deadline).await {
        Ok(halves) => halves,
        Err(reason) => {
            let _ = tx.send(event(Event::ConnectFailed { conn, reason })).await;
            return;
        }
    };
    let (writer, outbox) = async_channel::unbounded::<Bytes>();
    let reader_tx = tx.clone();
    let reader = R::spawn(async move {
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
                        .send(event(Event::Read { conn, bytes }))
                        .await
                        .is_err()
                    {
                        return;
                    }
                }
                Err(e) => break e.to_string(),
            }
        };
        let _ = reader_tx.send(event(Event::Closed { conn, reason })).await;
    });
    let writer_tx = tx.clone();
    // The writer ends by itself when the session drops the connection's writer handle.
    R::spawn_detached(async move {
        while let Ok(first) = outbox.recv().await {
            // Chunks queued while the last write ran leave together, in one syscall.
            let bytes = match outbox.try_recv() {
                Err(_) => first,
                Ok(second) => {
                    let mut joined = BytesMut::with_capacity(first.len() + second.len());
                    joined.extend_from_slice(&first);
                    joined.extend_from_slice(&second);
                    while let Ok(more) = outbox.try_recv() {
                        joined.extend_from_slice(&more);
                    }
                    joined.freeze()
                }
            };
            if let Err(e) = write.write_all(&bytes).await {
                let reason = e.to_string();
                let _ = writer_tx.send(event(Event::Closed { conn, reason })).await;
                return;
            }
        }
        write.shutdown().await;
    });
    let _ = tx.send(Msg::Reader(conn, reader)).await;
    let _ = tx.send(event(Event::Connected { conn, writer })).await;
}
