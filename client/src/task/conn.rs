//! Each connection's I/O beside the session: its writing half (written by the session task,
//! or by a flusher while the socket is full), the task that opens it and its reader, and the
//! connections' inbox that carries what they observe to the session task.

use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};

use bytes::BytesMut;
use futures_channel::mpsc::{UnboundedReceiver, UnboundedSender};

use botmesh_redis_core::driver::session::{ConnId, Decoded, DialTarget, ReplyDecoder};

use super::inline::read_inline;
use super::{Msg, SessionTask};
use crate::{counted, instruments, tls, Counters, ReadHalf, Runtime, TlsConnector, WriteHalf};

/// The writing side of a connection, owned by the session task. Bytes go straight to the
/// socket while it takes them; when it is full, the half goes to a flusher task with the rest,
/// and what the session writes meanwhile waits here, in order, until the half comes back.
pub(super) enum WriteSide<W> {
    Ready(W),
    Flushing(BytesMut),
}

/// The I/O of one connection, from the session's [`Output::Connect`] to its
/// [`Output::Close`]: the only per-connection state outside the session. Whether the
/// connection is still wanted, and what its events mean, is the session's to say.
///
/// [`Output::Connect`]: botmesh_redis_core::driver::session::Output::Connect
/// [`Output::Close`]: botmesh_redis_core::driver::session::Output::Close
pub(super) struct Io<R: Runtime> {
    /// The writing half, once connected.
    pub(super) write: Option<WriteSide<R::Writer>>,
    /// The connect task, then the reader; dropping them cancels them.
    pub(super) tasks: Vec<R::Task>,
    /// The one flusher the connection may have at a time.
    pub(super) flusher: Option<R::Task>,
    /// The connection's share of its node's connections gauge, given back when it closes.
    pub(super) _gauge: instruments::ConnGauge,
}

/// The connections' inbox of the session task. Sending never waits: an event is a push and,
/// when the task sleeps, a wake.
pub(super) type Tx<R> = UnboundedSender<Msg<R>>;
pub(super) type Rx<R> = UnboundedReceiver<Msg<R>>;

/// What a connection's tasks report to the session task.
pub(crate) enum ConnEvent<R: Runtime> {
    /// The TCP connect succeeded; the writing half.
    Connected(R::Writer),
    ConnectFailed(String),
    /// Bytes read, for the session to decode; splits of one read buffer, so it decodes them
    /// without a copy.
    Read(BytesMut),
    /// Replies the reader decoded (and the protocol failure that stopped it, if one did).
    Replies(Decoded),
    /// The peer closed, or a read or write failed.
    Closed(String),
    /// The reader task, to stop with the connection.
    Reader(R::Task),
    /// A flusher wrote everything it was given (or failed), and hands the half back.
    Flushed(R::Writer, io::Result<()>),
}

/// The connections' inbox, counted: how many of its connection events are sent and not yet
/// applied. A reader applies its bytes itself only when none is, so that no event of a
/// connection (its `Connected`, an earlier read) is overtaken by a later one.
pub(crate) struct Events<R: Runtime> {
    pub(super) tx: Tx<R>,
    pub(super) queued: Arc<AtomicUsize>,
}

// Derived, it would ask `R: Clone`.
impl<R: Runtime> Clone for Events<R> {
    fn clone(&self) -> Self {
        Events {
            tx: self.tx.clone(),
            queued: Arc::clone(&self.queued),
        }
    }
}

impl<R: Runtime> Events<R> {
    /// Sends what a connection's task observed; false when the session task is gone.
    pub(super) fn send(&self, conn: ConnId, event: ConnEvent<R>) -> bool {
        self.queued.fetch_add(1, Ordering::SeqCst);
        let sent = self.tx.unbounded_send(Msg::Conn(conn, event)).is_ok();
        if !sent {
            self.queued.fetch_sub(1, Ordering::SeqCst);
        }
        sent
    }

    /// One event taken from the inbox was applied.
    pub(super) fn applied(&self) {
        self.queued.fetch_sub(1, Ordering::SeqCst);
    }

    /// Whether every connection event sent has been applied.
    pub(super) fn idle(&self) -> bool {
        self.queued.load(Ordering::SeqCst) == 0
    }

    /// Wakes the session task to look at its timers again.
    pub(super) fn rearm(&self) {
        let _ = self.tx.unbounded_send(Msg::Rearm);
    }
}

/// A connection to open: its id, where to dial, and the decoder its reader will keep, when
/// the session wants its replies decoded there
/// ([`Session::readers_decode`](botmesh_redis_core::driver::session::Session::readers_decode)).
pub(super) struct Dialing {
    pub(super) conn: ConnId,
    pub(super) dial: DialTarget,
    pub(super) decoder: Option<ReplyDecoder>,
}

/// Opens one connection and starts its reader. No timer here: the session's connect deadline
/// ends a connect that takes too long, and the driver cancels this task when it does.
pub(super) async fn open<R: Runtime>(
    Dialing {
        conn,
        dial,
        mut decoder,
    }: Dialing,
    events: Events<R>,
    hub: Weak<Mutex<SessionTask<R>>>,
    spawner: R::Spawner,
    counters: Arc<Counters>,
    tls: Option<TlsConnector>,
) {
    // `ClientOptions::tls_settings` refuses TLS over a Unix socket before a client starts.
    let tls = tls.filter(|_| matches!(dial, DialTarget::Tcp(_)));
    let (mut read, write) = match R::connect(&dial, tls.as_ref()).await {
        Ok(halves) => halves,
        Err(e) => {
            let reason = tls::describe_failure(&e);
            events.send(conn, ConnEvent::ConnectFailed(reason));
            return;
        }
    };
    // Connected goes first: a server that speaks before it is asked (`max number of clients
    // reached` on accept) must not have its words reach the session ahead of the connection.
    // It is counted in the inbox before the reader starts, so the reader's first bytes go
    // behind it.
    events.send(conn, ConnEvent::Connected(write));
    let reader_events = events.clone();
    let reads = Arc::clone(&counters);
    let reader = R::spawn(
        &spawner,
        counted(&counters, async move {
            let mut buf = BytesMut::with_capacity(64 * 1024);
            let reason = loop {
                if buf.capacity() - buf.len() < 16 * 1024 {
                    buf.reserve(64 * 1024);
                }
                match read.read(&mut buf).await {
                    Ok(0) => break "closed by the server".to_owned(),
                    Ok(_) => {
                        reads.reads.fetch_add(1, Ordering::Relaxed);
                        let event = match decoder.as_mut() {
                            Some(decoder) => {
                                // Part of a reply is kept until the rest arrives: nothing to
                                // hand on.
                                let decoded = decoder.decode(buf.split());
                                if decoded.is_empty() {
                                    continue;
                                }
                                ConnEvent::Replies(decoded)
                            }
                            None => ConnEvent::Read(buf.split()),
                        };
                        let Some(event) = read_inline(&hub, conn, event) else {
                            continue;
                        };
                        if !reader_events.send(conn, event) {
                            return;
                        }
                    }
                    // A TLS server that refuses the client's certificate says so in an alert read
                    // after the handshake (TLS 1.3): the reason names it.
                    Err(e) => break tls::describe_failure(&e),
                }
            };
            reader_events.send(conn, ConnEvent::Closed(reason));
        }),
    );
    events.send(conn, ConnEvent::Reader(reader));
}

impl<R: Runtime> SessionTask<R> {
    /// Writes `bytes` to a connection: straight to the socket while it takes them, else
    /// behind the flusher that owns the socket.
    pub(super) fn write(&mut self, conn: ConnId, bytes: &[u8]) {
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
                    self.events.send(conn, ConnEvent::Closed(e.to_string()));
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
        let events = self.events.clone();
        let flusher = R::spawn(
            &self.spawner,
            counted(&self.counters, async move {
                let result = half.write_all(&rest).await;
                events.send(conn, ConnEvent::Flushed(half, result));
            }),
        );
        io.flusher = Some(flusher);
    }
}
