//! # botmesh-redis-tokio
//!
//! The tokio driver of botmesh-redis: it runs the core's routing session over raw TCP
//! connections. All protocol logic (routing, redirects, retries, topology) lives in
//! `botmesh-redis-core`; this crate moves bytes, sleeps and spawns.
//!
//! ```no_run
//! use botmesh_redis_tokio::{Client, ClientOptions, Executor, Request, Access, Key};
//!
//! # async fn demo() -> Result<(), botmesh_redis_tokio::Error> {
//! let client = Client::connect(ClientOptions::cluster(["127.0.0.1:7000"])).await?;
//! let key = Key::new("greeting");
//! client.call(Request::cmd(Access::Write, "SET").key(&key).arg("hello").build()?).await?;
//! client.close().await;
//! # Ok(()) }
//! ```
//!
//! ## Tasks
//!
//! One task owns the [`Session`](botmesh_redis_core::session::Session). Each connection has a
//! reader task (bytes in) and a writer task (bytes out). Everything else is the session's
//! decision; the session task only carries out its outputs, in order.
#![forbid(unsafe_code)]

use std::collections::hash_map::RandomState;
use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

pub use botmesh_redis_core::*;

use botmesh_redis_core::session::{Completion, ConnId, Output, Session, Token};

type Submit = Box<dyn FnOnce(&mut Session, Instant) + Send>;

enum Msg {
    Submit {
        token: Token,
        done: oneshot::Sender<Completion>,
        submit: Submit,
    },
    Connected {
        conn: ConnId,
        writer: mpsc::UnboundedSender<Bytes>,
        reader: JoinHandle<()>,
    },
    ConnectFailed {
        conn: ConnId,
        reason: String,
    },
    Read {
        conn: ConnId,
        bytes: Bytes,
    },
    Closed {
        conn: ConnId,
        reason: String,
    },
    Close,
}

/// A connection to a Redis node or cluster: runs plans, shared by cloning.
#[derive(Clone)]
pub struct Client {
    shared: Arc<Shared>,
}

struct Shared {
    tx: mpsc::UnboundedSender<Msg>,
    next_token: AtomicU64,
    task: Mutex<Option<JoinHandle<()>>>,
    cluster: bool,
}

impl Drop for Shared {
    fn drop(&mut self) {
        let _ = self.tx.send(Msg::Close);
    }
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("cluster", &self.shared.cluster)
            .finish_non_exhaustive()
    }
}

impl Client {
    /// Starts the client and checks that a node answers `PING` (with the credentials given), so
    /// a wrong address or password fails here, with a typed error, within the connect timeout.
    pub async fn connect(options: ClientOptions) -> Result<Client, Error> {
        let client = Client::start(options)?;
        let ping = Request::cmd(Access::Read, "PING").build()?;
        match client.call(ping).await {
            Ok(_) => Ok(client),
            Err(e) => {
                client.close().await;
                Err(e)
            }
        }
    }

    /// Starts the client without waiting for any node: the first request connects. Must be
    /// called within a tokio runtime.
    pub fn start(options: ClientOptions) -> Result<Client, Error> {
        let mut seed = RandomState::new().build_hasher();
        seed.write_u64(0);
        let config = options.to_config(seed.finish())?;
        let session = Session::new(config.clone(), Instant::now());
        let (tx, rx) = mpsc::unbounded_channel();
        let task = tokio::spawn(run_session(session, config, tx.clone(), rx));
        Ok(Client {
            shared: Arc::new(Shared {
                tx,
                next_token: AtomicU64::new(1),
                task: Mutex::new(Some(task)),
                cluster: options.is_cluster(),
            }),
        })
    }

    /// Whether this client talks to a cluster.
    pub fn is_cluster(&self) -> bool {
        self.shared.cluster
    }

    /// Ends every pending plan, closes every connection and waits for the client's tasks to
    /// finish. Other clones see [`Error::Closed`] afterwards.
    pub async fn close(&self) {
        let _ = self.shared.tx.send(Msg::Close);
        let task = self.shared.task.lock().ok().and_then(|mut t| t.take());
        if let Some(task) = task {
            let _ = task.await;
        }
    }
}

impl Executor for Client {
    async fn run<P: Plan>(&self, plan: P) -> Result<P::Output, Error> {
        let token = Token(self.shared.next_token.fetch_add(1, Ordering::Relaxed));
        let (done, rx) = oneshot::channel();
        let submit: Submit = Box::new(move |session, now| session.submit(now, token, plan));
        self.shared
            .tx
            .send(Msg::Submit {
                token,
                done,
                submit,
            })
            .map_err(|_| Error::Closed)?;
        rx.await.map_err(|_| Error::Closed)?.into_result()
    }
}

struct Conn {
    writer: Option<mpsc::UnboundedSender<Bytes>>,
    tasks: Vec<JoinHandle<()>>,
}

impl Drop for Conn {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

/// The session task: feeds events to the session and carries out its outputs.
async fn run_session(
    mut session: Session,
    config: botmesh_redis_core::session::Config,
    tx: mpsc::UnboundedSender<Msg>,
    mut rx: mpsc::UnboundedReceiver<Msg>,
) {
    let mut conns: HashMap<ConnId, Conn> = HashMap::new();
    let mut waiters: HashMap<Token, oneshot::Sender<Completion>> = HashMap::new();
    let mut deadline: Option<Instant> = None;
    loop {
        let msg = match deadline {
            Some(at) => tokio::select! {
                msg = rx.recv() => msg,
                _ = tokio::time::sleep_until(at.into()) => {
                    session.handle_timeout(Instant::now());
                    deadline = drain(&mut session, &config, &tx, &mut conns, &mut waiters);
                    continue;
                }
            },
            None => rx.recv().await,
        };
        let Some(msg) = msg else {
            break;
        };
        let mut closing = handle(&mut session, &mut conns, &mut waiters, msg);
        // Take everything already queued before draining, so that all requests submitted
        // meanwhile leave in one write per connection.
        for _ in 0..1024 {
            match rx.try_recv() {
                Ok(msg) => closing |= handle(&mut session, &mut conns, &mut waiters, msg),
                Err(_) => break,
            }
        }
        deadline = drain(&mut session, &config, &tx, &mut conns, &mut waiters);
        if closing {
            break;
        }
    }
    session.close(Instant::now());
    drain(&mut session, &config, &tx, &mut conns, &mut waiters);
    conns.clear();
}

/// Applies one event; returns whether the client is closing.
fn handle(
    session: &mut Session,
    conns: &mut HashMap<ConnId, Conn>,
    waiters: &mut HashMap<Token, oneshot::Sender<Completion>>,
    msg: Msg,
) -> bool {
    let now = Instant::now();
    match msg {
        Msg::Submit {
            token,
            done,
            submit,
        } => {
            waiters.insert(token, done);
            submit(session, now);
        }
        Msg::Connected {
            conn,
            writer,
            reader,
        } => match conns.get_mut(&conn) {
            Some(c) => {
                c.writer = Some(writer);
                c.tasks.push(reader);
                session.handle_connected(now, conn);
            }
            // The session gave up on this connection while it was opening.
            None => reader.abort(),
        },
        Msg::ConnectFailed { conn, reason } => {
            if conns.remove(&conn).is_some() {
                tracing::warn!(?conn, %reason, "connect failed");
                session.handle_connect_failed(now, conn, &reason);
            }
        }
        Msg::Read { conn, bytes } => {
            if conns.contains_key(&conn) {
                session.handle_read(now, conn, &bytes);
            }
        }
        Msg::Closed { conn, reason } => {
            if conns.remove(&conn).is_some() {
                tracing::warn!(?conn, %reason, "connection lost");
                session.handle_closed(now, conn, &reason);
            }
        }
        Msg::Close => return true,
    }
    false
}

/// Carries out the session's outputs until it says what to wait for.
fn drain(
    session: &mut Session,
    config: &botmesh_redis_core::session::Config,
    tx: &mpsc::UnboundedSender<Msg>,
    conns: &mut HashMap<ConnId, Conn>,
    waiters: &mut HashMap<Token, oneshot::Sender<Completion>>,
) -> Option<Instant> {
    loop {
        match session.poll() {
            Output::Connect { conn, node, dial } => {
                tracing::debug!(?conn, %node, %dial, "connecting");
                let task = tokio::spawn(open(conn, dial, config.connect_timeout, tx.clone()));
                conns.insert(
                    conn,
                    Conn {
                        writer: None,
                        tasks: vec![task],
                    },
                );
            }
            Output::Transmit { conn, bytes } => {
                if let Some(writer) = conns.get(&conn).and_then(|c| c.writer.as_ref()) {
                    let _ = writer.send(bytes);
                }
            }
            Output::Close { conn } => {
                conns.remove(&conn);
            }
            Output::Complete { token, result } => {
                if let Some(done) = waiters.remove(&token) {
                    let _ = done.send(result);
                }
            }
            Output::Wait { until, .. } => return until,
        }
    }
}

/// Opens one connection and starts its reader and writer.
async fn open(
    conn: ConnId,
    dial: NodeAddr,
    timeout: std::time::Duration,
    tx: mpsc::UnboundedSender<Msg>,
) {
    let connect = TcpStream::connect((dial.host.as_str(), dial.port));
    let stream = match tokio::time::timeout(timeout, connect).await {
        Ok(Ok(stream)) => stream,
        Ok(Err(e)) => {
            let _ = tx.send(Msg::ConnectFailed {
                conn,
                reason: e.to_string(),
            });
            return;
        }
        Err(_) => {
            let _ = tx.send(Msg::ConnectFailed {
                conn,
                reason: format!("no connection within {timeout:?}"),
            });
            return;
        }
    };
    let _ = stream.set_nodelay(true);
    let (mut read, mut write) = stream.into_split();
    let (writer, mut outbox) = mpsc::unbounded_channel::<Bytes>();
    let reader_tx = tx.clone();
    let reader = tokio::spawn(async move {
        let mut buf = BytesMut::with_capacity(64 * 1024);
        let reason = loop {
            if buf.capacity() - buf.len() < 16 * 1024 {
                buf.reserve(64 * 1024);
            }
            match read.read_buf(&mut buf).await {
                Ok(0) => break "closed by the server".to_owned(),
                Ok(_) => {
                    let bytes = buf.split().freeze();
                    if reader_tx.send(Msg::Read { conn, bytes }).is_err() {
                        return;
                    }
                }
                Err(e) => break e.to_string(),
            }
        };
        let _ = reader_tx.send(Msg::Closed { conn, reason });
    });
    let writer_tx = tx.clone();
    let write_task = tokio::spawn(async move {
        while let Some(bytes) = outbox.recv().await {
            if let Err(e) = write.write_all(&bytes).await {
                let _ = writer_tx.send(Msg::Closed {
                    conn,
                    reason: e.to_string(),
                });
                return;
            }
        }
        let _ = write.shutdown().await;
    });
    // The writer ends by itself when the session drops the connection's sender.
    drop(write_task);
    let _ = tx.send(Msg::Connected {
        conn,
        writer,
        reader,
    });
}
