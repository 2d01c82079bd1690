//! The session task and each connection's tasks: the one place the client's I/O meets the
//! core's [`Session`].
//!
//! The session's state lives in a [`Hub`], a mutex shared by the session task, the
//! connections' readers and the callers. The session task owns the inboxes and the timer: it
//! gathers concurrent calls into one write per connection (yielding once before it writes, so
//! that the callers its last results woke add theirs), applies what the connections report,
//! and fires due timers. On a cluster each reader decodes its connection's replies where it
//! reads them (a [`ReplyDecoder`] beside the socket), so that the connections' replies are
//! decoded in parallel on a multi-thread runtime and never under the hub's lock
//! ([`Session::readers_decode`]). A reader that finds the hub free, with no earlier event of
//! any connection still queued and at most one plan sending, applies its bytes or replies
//! itself and delivers them from where it runs; a caller that finds the hub free, with no
//! other plan sending and nobody else just woken, submits and writes its call itself. Each
//! saves a task hop and a wake-up, which is most of a call's cost for a lone caller; when the
//! hub is busy, the input goes through the inbox as before. On a runtime of one thread
//! ([`Runtime::one_thread`]) the callers a batch of results woke also submit their next calls
//! themselves, and the last of them writes the batch ([`submit_inline`]). Work done outside the
//! session task that arms a timer sooner than the one the task sleeps on wakes it
//! ([`Msg::Rearm`]).

use std::collections::{HashMap, HashSet};
use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::task::Waker;
use std::time::Instant;

use bytes::BytesMut;
use futures_channel::mpsc::{UnboundedReceiver, UnboundedSender};
use futures_lite::{future, StreamExt};

use botmesh_redis_core::driver::session::{
    Completion, ConnId, Decoded, DialTarget, Output, ReplyDecoder, Session, Submission, Summary,
    Waiters,
};
use botmesh_redis_core::{Error, NodeAddr};

use crate::calls::{self, CallsRx, CallsTx};
use crate::{counted, instruments, tls, Counters, ReadHalf, Runtime, TlsConnector, WriteHalf};

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
pub(crate) struct OneShot;

/// What a call's channel carries: the result, and the session's summary of the plan.
pub(crate) struct Delivery<T> {
    pub(crate) result: Result<T, Error>,
    pub(crate) summary: Option<Summary>,
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
/// The connections' inbox of the session task. Sending never waits: an event is a push and,
/// when the task sleeps, a wake.
type Tx<R> = UnboundedSender<Msg<R>>;
type Rx<R> = UnboundedReceiver<Msg<R>>;

/// The callers' inbox of the session task ([`calls`]): likewise, without an
/// allocation per call.
pub(crate) type Calls<R> = CallsTx<Msg<R>>;
type CallsIn<R> = CallsRx<Msg<R>>;

/// What woke the session task.
enum Woke<R: Runtime> {
    /// A message, or `None` when the connections' inbox ended.
    Msg(Option<Msg<R>>),
    Timer,
}

/// A message to the session task.
pub(crate) enum Msg<R: Runtime> {
    /// A plan boxed by its caller with its waiter: the one allocation of a submission.
    Submit(Submission<OneShot>),
    /// A graceful close, whose grace ends then.
    Shutdown(Instant),
    /// What a connection's tasks observed.
    Conn(ConnId, ConnEvent<R>),
    /// Work done outside the session task armed a timer sooner than the one it sleeps on.
    Rearm,
    Close,
}

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
    tx: Tx<R>,
    queued: Arc<AtomicUsize>,
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
    fn send(&self, conn: ConnId, event: ConnEvent<R>) -> bool {
        self.queued.fetch_add(1, Ordering::SeqCst);
        let sent = self.tx.unbounded_send(Msg::Conn(conn, event)).is_ok();
        if !sent {
            self.queued.fetch_sub(1, Ordering::SeqCst);
        }
        sent
    }

    /// One event taken from the inbox was applied.
    fn applied(&self) {
        self.queued.fetch_sub(1, Ordering::SeqCst);
    }

    fn idle(&self) -> bool {
        self.queued.load(Ordering::SeqCst) == 0
    }

    /// Wakes the session task to look at its timers again.
    fn rearm(&self) {
        let _ = self.tx.unbounded_send(Msg::Rearm);
    }
}

/// The session task's state, shared with the connections' readers and the callers: whoever
/// finds it free applies its own input (a read, a lone call) and carries out what follows,
/// without a hop to the session task. Every critical section is synchronous and bounded (an
/// input, then a drain).
pub(crate) type Hub<R> = Arc<Mutex<SessionTask<R>>>;

/// Locks the hub, even after a panic in another holder. A holder panics only on a bug (a plan
/// whose `start` or `resume` panics); the panic reaches the task it ran in (a caller, a
/// reader), and the other calls go on with the session as it was left, rather than all
/// ending with the client.
fn lock<R: Runtime>(hub: &Mutex<SessionTask<R>>) -> MutexGuard<'_, SessionTask<R>> {
    hub.lock().unwrap_or_else(PoisonError::into_inner)
}

/// On a runtime of one thread, the task that took a result last: a call is a woken
/// caller's only from that task, and any other is a new arrival (a message's handler, a
/// timer's task), which goes through the session task's pass as under any other load. The
/// count of submits since the results ([`SessionTask::awaited`]) cannot tell them apart: once
/// woken callers stopped calling (a handler that ends with its reply), new arrivals were taken
/// for the callers still expected, held back for a submit that never came and written in
/// part-batches (`docs/performance.md`, "Woken callers that do not call again, and the
/// overload").
///
/// A task is known by its waker's data address, which a task started after the last taker
/// ended may reuse: that one task is then taken for a woken caller, until the next result is
/// taken. Its call is written the same, by itself or by the pass the session task is woken
/// for.
#[derive(Clone, Default)]
pub(crate) struct LastTaker(Arc<AtomicUsize>);

/// What a task is known by: its waker's data, the task's address for the runtimes' wakers. A
/// task polls its calls with one waker, so its calls share it. 0 for a waker without data (a
/// no-op waker), which stands for no task.
pub(crate) fn task_address(waker: &Waker) -> usize {
    waker.data().addr()
}

impl LastTaker {
    /// The task woken by `waker` took its result.
    pub(crate) fn took(&self, waker: &Waker) {
        self.0.store(task_address(waker), Ordering::Relaxed);
    }

    /// Whether the task of `waker` is the one that took a result last (never a waker without
    /// data, which names no task: the state after [`LastTaker::forget`]).
    fn is(&self, waker: &Waker) -> bool {
        let task = task_address(waker);
        task != 0 && self.0.load(Ordering::Relaxed) == task
    }

    fn forget(&self) {
        self.0.store(0, Ordering::Relaxed);
    }
}

/// The session task's state: the session (all protocol state) and each connection's I/O.
pub(crate) struct SessionTask<R: Runtime> {
    session: Session<OneShot>,
    conns: HashMap<ConnId, Io<R>>,
    /// The connections' inbox, for their tasks.
    events: Events<R>,
    /// The hub this state lives in, for the readers this task starts.
    hub: Weak<Mutex<SessionTask<R>>>,
    /// Where the client's tasks run, whoever spawns them.
    spawner: R::Spawner,
    counters: Arc<Counters>,
    /// TLS for every connection, or plain TCP.
    tls: Option<TlsConnector>,
    /// The end of a graceful close's grace, once one began.
    grace_until: Option<Instant>,
    /// The nodes dialled so far: a dial to one of them is a reconnect.
    dialled: HashSet<NodeAddr>,
    /// The metric handles (nothing without the `metrics` feature).
    instruments: instruments::Instruments,
    /// Callers the last drains woke (results delivered) that have not submitted since, as far
    /// as the count of submits tells: the ones the yield before a write waits for.
    awaited: usize,
    /// When every task of the client runs on one thread ([`Runtime::one_thread`]), the task
    /// that took a result last: the callers the last results woke add their calls themselves,
    /// and the last of them writes. `None` on other runtimes.
    last_taker: Option<LastTaker>,
    /// A caller added its call without writing and woke the session task, whose next drain
    /// writes it should no later caller; cleared by every drain, which carries out all that
    /// was added before it (a wake-up taken before the drain of its pass must not stand for
    /// calls added after that drain).
    nudged: bool,
    /// The timer the session task sleeps on, as of its last pass or a later [`Msg::Rearm`].
    armed: Option<Instant>,
    /// The session task has ended: everything goes to its (closed) inboxes.
    ended: bool,
    /// Completions held while an input is applied outside the session task, handed to their
    /// callers once the hub is released (see [`Deferred`]); `None` in the session task.
    deferred: Option<Deferred>,
}

/// The completions of an input applied from a caller's or a reader's task. Delivered under
/// the hub's lock, a result woke its caller on another worker thread while the lock was still
/// held, and the caller's next call, finding the hub busy, went through the session task: a
/// lone caller woke it for one call in two (`tests/tests/client/inline.rs`). Usually one.
#[derive(Default)]
struct Deferred {
    one: Option<Completion<OneShot>>,
    more: Vec<Completion<OneShot>>,
}

impl Deferred {
    fn push(&mut self, completion: Completion<OneShot>) {
        match self.one {
            None => self.one = Some(completion),
            Some(_) => self.more.push(completion),
        }
    }

    /// Hands every result to its caller; called with the hub released.
    fn deliver(self) {
        self.one
            .into_iter()
            .chain(self.more)
            .for_each(Completion::deliver);
    }
}

/// Starts a client's session task; yields the hub, the callers' inbox and, on a runtime of one
/// thread, the record of the task that took a result last.
pub(crate) fn start<R: Runtime>(
    session: Session<OneShot>,
    closed: async_channel::Sender<()>,
    counters: Arc<Counters>,
    tls: Option<TlsConnector>,
    instruments: instruments::Instruments,
) -> (Hub<R>, Calls<R>, Option<LastTaker>) {
    // Two inboxes: what the connections report (replies, closes, flushed writes) and what
    // callers ask. Each pass takes the first before the second, so that a backlog of new calls
    // never holds back the replies of earlier ones, nor makes a healthy connection look silent
    // to its response timeout.
    let (tx, events) = futures_channel::mpsc::unbounded();
    let (calls_tx, calls) = calls::inbox();
    let spawner = R::spawner();
    let one_thread = R::one_thread(&spawner);
    let last_taker = one_thread.then(LastTaker::default);
    let hub = Arc::new_cyclic(|hub| {
        Mutex::new(SessionTask::<R> {
            session,
            conns: HashMap::new(),
            events: Events {
                tx,
                queued: Arc::new(AtomicUsize::new(0)),
            },
            hub: hub.clone(),
            spawner: spawner.clone(),
            counters: Arc::clone(&counters),
            tls,
            grace_until: None,
            dialled: HashSet::new(),
            instruments,
            awaited: 0,
            last_taker: last_taker.clone(),
            nudged: false,
            armed: None,
            ended: false,
            deferred: None,
        })
    });
    let task = run::<R>(Arc::clone(&hub), events, calls, closed);
    R::spawn_detached(&spawner, counted(&counters, task));
    (hub, calls_tx, last_taker)
}

/// What one wake of the session task came to.
enum Pass {
    /// A message applied; gather what is queued behind it, after a yield unless `lone`.
    Gather { closing: bool, lone: bool },
    /// Timers fired; sleep until then.
    Slept(Option<Instant>),
    /// The client is closing.
    End,
}

/// The session task: feeds every input to the session and carries out its outputs.
async fn run<R: Runtime>(
    hub: Hub<R>,
    mut events: Rx<R>,
    mut calls: CallsIn<R>,
    _closed: async_channel::Sender<()>,
) {
    let mut deadline: Option<Instant> = None;
    loop {
        let event = async { Woke::Msg(events.next().await) };
        let call = async { Woke::Msg(Some(calls.recv().await)) };
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
        // The hub is held for one synchronous step at a time, never across an await.
        let pass = lock(&hub).wake(woke);
        let closing = match pass {
            Pass::Slept(at) => {
                deadline = at;
                continue;
            }
            Pass::End => break,
            Pass::Gather { closing, lone } => {
                // Take everything already queued before draining, so that all requests
                // submitted meanwhile leave in one write per connection. One yield first lets
                // callers on other worker threads add theirs (those woken by the last results,
                // above all): on a multi-thread runtime the task would otherwise wake for
                // nearly every submit, and send one request per write.
                if !lone {
                    future::yield_now().await;
                }
                closing
            }
        };
        match lock(&hub).gather(closing, &mut events, &mut calls) {
            Some(at) => deadline = at,
            None => break,
        }
    }
    lock(&hub).end(Instant::now());
}

impl<R: Runtime> SessionTask<R> {
    /// The first step of a pass: applies what woke the task.
    fn wake(&mut self, woke: Woke<R>) -> Pass {
        self.counters.passes.fetch_add(1, Ordering::Relaxed);
        let now = Instant::now();
        let msg = match woke {
            Woke::Timer => {
                self.session.handle_timeout(now);
                if self.drained(now) {
                    return Pass::End;
                }
                return Pass::Slept(self.rearm());
            }
            Woke::Msg(Some(msg)) => msg,
            // The hub holds an event sender, and the last `Client` sends `Close` before its
            // sender goes: neither inbox ends while the task runs.
            Woke::Msg(None) => return Pass::End,
        };
        let submit = matches!(msg, Msg::Submit(_));
        let closing = self.apply_taken(msg, now);
        // A submitted plan that is the only one in the session, when the last results woke no
        // other caller, has nobody to wait for (a lone caller, calls arriving one at a time):
        // it is written at once, without the scheduling round of the yield.
        let lone = submit && self.awaited == 0 && self.session.sending_at_most(1);
        Pass::Gather { closing, lone }
    }

    /// The second step of a pass: applies what both inboxes hold, carries out the outputs and
    /// says when to wake; `None` when the client is closing.
    fn gather(
        &mut self,
        closing: bool,
        events: &mut Rx<R>,
        calls: &mut CallsIn<R>,
    ) -> Option<Option<Instant>> {
        let closing = closing | self.apply_queued(events, calls);
        // The callers woken before had their chance to submit; what this pass's drain delivers
        // counts afresh.
        self.awaited = 0;
        if let Some(last_taker) = &self.last_taker {
            last_taker.forget();
        }
        if closing || self.drained(Instant::now()) {
            return None;
        }
        // `future::or` polls the inbox first, so under steady traffic the timer branch may
        // never win: due timers (request deadlines, response timeouts, retry delays, refreshes,
        // plan waits) fire here on every pass, whatever woke the task.
        if let Some(at) = self.armed {
            let now = Instant::now();
            if at <= now {
                self.session.handle_timeout(now);
            }
        }
        Some(self.rearm())
    }

    /// Ends the session: every plan ends, every connection closes, and from now on the hub
    /// takes nothing directly.
    fn end(&mut self, now: Instant) {
        self.ended = true;
        self.session.close(now);
        self.drain();
        // Dropping the I/O cancels the connections' tasks, which hold only a weak handle on
        // the hub.
        self.conns.clear();
    }

    /// Carries out the outputs and records the deadline the session task sleeps on.
    fn rearm(&mut self) -> Option<Instant> {
        self.armed = self.next_deadline();
        self.armed
    }

    /// After an input applied outside the session task: carries out the outputs, and wakes
    /// the task when the session's next timer is sooner than the one it sleeps on.
    fn settle(&mut self) {
        self.counters.inline.fetch_add(1, Ordering::Relaxed);
        let due = self.next_deadline();
        let sooner = match (due, self.armed) {
            (Some(due), Some(armed)) => due < armed,
            (Some(_), None) => true,
            (None, _) => false,
        };
        if sooner {
            self.armed = due;
            self.events.rearm();
        }
    }

    /// Whether an input may be applied outside the session task now: not once it ended, nor
    /// in a graceful close (whose end the task watches).
    fn takes_inline(&self) -> bool {
        !self.ended && self.grace_until.is_none()
    }

    /// Applies what both inboxes hold already, the connections' first (a bounded number from
    /// each, so that neither starves the loop); returns whether the client is closing.
    fn apply_queued(&mut self, events: &mut Rx<R>, calls: &mut CallsIn<R>) -> bool {
        // One clock reading for the messages taken together: they arrived within microseconds.
        let now = Instant::now();
        let mut closing = false;
        for _ in 0..4096 {
            match events.try_recv() {
                Ok(msg) => closing |= self.apply_taken(msg, now),
                Err(_) => break,
            }
        }
        for _ in 0..1024 {
            match calls.try_recv() {
                Some(msg) => closing |= self.apply_taken(msg, now),
                None => break,
            }
        }
        closing
    }

    /// Applies a message taken from an inbox; a connection event (which only the connections'
    /// inbox carries) is then no longer queued ahead of a reader's bytes.
    fn apply_taken(&mut self, msg: Msg<R>, now: Instant) -> bool {
        let conn_event = matches!(msg, Msg::Conn(..));
        let closing = self.apply(msg, now);
        if conn_event {
            self.events.applied();
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
            .is_some_and(|until| self.session.sending_at_most(0) || now >= until)
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
            Msg::Rearm => return false,
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
            ConnEvent::Replies(decoded) => self.session.handle_replies(now, conn, decoded),
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
        self.nudged = false;
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
                    let dialing = Dialing {
                        conn,
                        dial,
                        decoder: self
                            .session
                            .readers_decode()
                            .then(|| self.session.reply_decoder()),
                    };
                    let open = open::<R>(
                        dialing,
                        self.events.clone(),
                        self.hub.clone(),
                        self.spawner.clone(),
                        Arc::clone(&self.counters),
                        self.tls.clone(),
                    );
                    let task = R::spawn(&self.spawner, counted(&self.counters, open));
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
                        R::spawn_detached(&self.spawner, counted(&self.counters, shutdown));
                    }
                }
                Output::Complete(completion) => {
                    // Everything the call caused is exported before its caller hears of it,
                    // so a caller that reads the metrics after its call sees the call in them.
                    self.instruments.completed(completion.summary());
                    self.instruments.observe(&self.session);
                    match &mut self.deferred {
                        Some(deferred) => deferred.push(completion),
                        None => completion.deliver(),
                    }
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

/// A caller's call, submitted from the caller's own task when the hub is free and either the
/// caller is alone (no other plan has requests out, no other caller was just woken) or every
/// task runs on one thread and the last results woke this caller (the task of `waker`,
/// [`LastTaker`]). Yields the submission back when it must go through the callers' inbox.
///
/// A lone caller writes its call at once. On one thread, the callers a batch of results woke
/// run one after another: each adds its call, and the last of them writes the batch, where
/// the session task would have written it only after every task queued meanwhile had run,
/// the callers other lanes' results woke among them. Each lane's batch then leaves as soon as
/// its own callers are back, so the node works on one lane's batch while the client turns the
/// other's around, rather than receiving both together and answering both together, which
/// once it happens keeps the lanes in step (measured with `hops`, one node: 1.25x the calls a
/// second, the node 0.65-0.71 busy instead of 0.59-0.64; `docs/performance.md`).
pub(crate) fn submit_inline<R: Runtime>(
    hub: &Hub<R>,
    submission: Submission<OneShot>,
    waker: &Waker,
) -> Option<Submission<OneShot>> {
    let Ok(mut task) = hub.try_lock() else {
        return Some(submission);
    };
    // The caller itself may be the one caller the last results woke.
    let alone = task.awaited <= 1 && task.session.sending_at_most(0);
    // Asked only when not alone: a lone caller writes at once whoever woke it.
    let woken = !alone && task.last_taker.as_ref().is_some_and(|t| t.is(waker));
    if !task.takes_inline() || !(alone || woken) {
        return Some(submission);
    }
    let now = Instant::now();
    if woken && task.awaited > 1 {
        // Woken with others still to come (a lone caller counts at most one): the last of them
        // writes. The session task is woken once, to write should none of them call again.
        task.apply(Msg::Submit(submission), now);
        task.counters.inline.fetch_add(1, Ordering::Relaxed);
        if !task.nudged {
            task.nudged = true;
            task.events.rearm();
        }
        return None;
    }
    task.deferred = Some(Deferred::default());
    task.apply(Msg::Submit(submission), now);
    task.settle();
    let deferred = task.deferred.take();
    drop(task);
    if let Some(deferred) = deferred {
        deferred.deliver();
    }
    None
}

/// A reader's bytes or replies, applied from the reader's own task when the hub is free, no
/// event of any connection is queued ahead of them, and at most one plan has requests out: the
/// results of more would wake callers on the reader's worker thread, where the session task's
/// yield does not wait for them, and their next calls would leave in several writes instead of
/// one (measured: 17 to 26 calls per write instead of 62 at 64 callers). Yields the event back
/// when it must go through the connections' inbox.
fn read_inline<R: Runtime>(
    hub: &Weak<Mutex<SessionTask<R>>>,
    conn: ConnId,
    event: ConnEvent<R>,
) -> Option<ConnEvent<R>> {
    let Some(hub) = hub.upgrade() else {
        return Some(event);
    };
    let Ok(mut task) = hub.try_lock() else {
        return Some(event);
    };
    if !task.takes_inline() || !task.events.idle() || !task.session.sending_at_most(1) {
        return Some(event);
    }
    task.deferred = Some(Deferred::default());
    task.apply(Msg::Conn(conn, event), Instant::now());
    task.settle();
    let deferred = task.deferred.take();
    drop(task);
    if let Some(deferred) = deferred {
        deferred.deliver();
    }
    None
}

/// A connection to open: its id, where to dial, and the decoder its reader will keep, when
/// the session wants its replies decoded there ([`Session::readers_decode`]).
struct Dialing {
    conn: ConnId,
    dial: DialTarget,
    decoder: Option<ReplyDecoder>,
}

/// Opens one connection and starts its reader. No timer here: the session's connect deadline
/// ends a connect that takes too long, and the driver cancels this task when it does.
async fn open<R: Runtime>(
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

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::task::{Wake, Waker};

    use super::LastTaker;

    struct Task;

    impl Wake for Task {
        fn wake(self: Arc<Self>) {}
    }

    #[test]
    fn a_call_is_a_woken_callers_only_from_the_task_that_took_a_result_last() {
        let (a, b) = (Waker::from(Arc::new(Task)), Waker::from(Arc::new(Task)));
        let last = LastTaker::default();
        assert!(!last.is(&a) && !last.is(&b), "nothing taken yet");
        last.took(&a);
        assert!(last.is(&a));
        assert!(!last.is(&b), "a new task is not a woken caller");
        last.took(&b);
        assert!(last.is(&b) && !last.is(&a));
        // The session task's pass forgets it: the callers woken before had their turn.
        last.forget();
        assert!(!last.is(&a) && !last.is(&b));
        // A waker without data names no task, not the forgotten one.
        assert!(!last.is(Waker::noop()));
        last.took(Waker::noop());
        assert!(!last.is(Waker::noop()));
    }
}
