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
//! themselves, and the last of them writes the batch ([`inline::submit_inline`]). Work done
//! outside the session task that arms a timer sooner than the one the task sleeps on wakes it
//! ([`Msg::Rearm`]).
//!
//! The connections' I/O is in [`conn`], the inputs applied outside the session task in
//! [`inline`].
//!
//! [`ReplyDecoder`]: botmesh_redis_core::driver::session::ReplyDecoder

use std::collections::{HashMap, HashSet};
use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::task::Waker;
use std::time::Instant;

use bytes::BytesMut;
use futures_lite::{future, StreamExt};

use botmesh_redis_core::driver::session::{ConnId, Output, Session, Submission, Summary, Waiters};
use botmesh_redis_core::{Error, NodeAddr};

use crate::calls::{self, CallsRx, CallsTx, Unapplied};
use crate::{counted, instruments, Counters, Runtime, TlsConnector, WriteHalf};

mod conn;
pub(crate) mod inline;

use conn::{open, ConnEvent, Dialing, Events, Io, Rx, WriteSide};
use inline::{Deferred, LastTaker};

/// The callers' waiters: a one-shot channel per call, typed by the plan's output, so a result
/// reaches its caller with its type, and with what became of the plan for the caller's span.
/// A detached plan ([`Executor::detach`](botmesh_redis_core::Executor::detach): a guard's
/// release, a keeper) has no channel: nobody was meant to wait for it, so it is written
/// whatever happens to the task that started it.
#[derive(Debug)]
pub(crate) struct OneShot;

/// What a call's channel carries: the result, and the session's summary of the plan.
pub(crate) struct Delivery<T> {
    pub(crate) result: Result<T, Error>,
    pub(crate) summary: Option<Summary>,
}

impl Waiters for OneShot {
    type Waiter<T: Send + 'static> = Option<oneshot::Sender<Delivery<T>>>;
    type Delivered = ();

    fn deliver<T: Send + 'static>(waiter: Self::Waiter<T>, result: Result<T, Error>) {
        if let Some(waiter) = waiter {
            let summary = None;
            // A caller that stopped waiting (its future dropped) has nothing to be told.
            let _ = waiter.send(Delivery { result, summary });
        }
    }

    #[inline]
    fn deliver_summarized<T: Send + 'static>(
        waiter: Self::Waiter<T>,
        result: Result<T, Error>,
        summary: Summary,
    ) {
        if let Some(waiter) = waiter {
            let summary = Some(summary);
            let _ = waiter.send(Delivery { result, summary });
        }
    }

    /// The caller's receiver is gone: its future was dropped before the result came.
    #[inline]
    fn abandoned<T: Send + 'static>(waiter: &Self::Waiter<T>) -> bool {
        waiter.as_ref().is_some_and(oneshot::Sender::is_closed)
    }
}

/// The callers' inbox of the session task ([`calls`]): likewise, without an
/// allocation per call.
pub(crate) type Calls<R> = CallsTx<Msg<R>>;
type CallsIn<R> = CallsRx<Msg<R>>;

/// What woke the session task.
enum Woke<R: Runtime> {
    /// A message, or `None` when the connections' inbox ended.
    Msg(Option<Msg<R>>),
    /// A message from the callers' inbox, counted until applied ([`Unapplied`]).
    Call(Msg<R>),
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

/// The session task's state, shared with the connections' readers and the callers: whoever
/// finds it free applies its own input (a read, a lone call) and carries out what follows,
/// without a hop to the session task. Every critical section is synchronous and bounded (an
/// input, then a drain).
pub(crate) type Hub<R> = Arc<Mutex<SessionTask<R>>>;

/// Locks the hub, even after a panic in another holder. A holder panics only on a bug in the client
/// (a plan's own panic is caught where it runs, and ends its call with `Error::PlanPanicked`); the
/// panic reaches the task it ran in (a caller, a reader), and the other calls go on with the
/// session as it was left, rather than all ending with the client. The results that holder had
/// taken to hand on once it let go of the hub ([`Deferred`]) go to their callers now, and the lock
/// is cleared of the panic, so that the next results are handed on as they come and the callers'
/// own paths ([`inline`]) take the hub again.
fn lock<R: Runtime>(hub: &Mutex<SessionTask<R>>) -> MutexGuard<'_, SessionTask<R>> {
    hub.lock().unwrap_or_else(|poisoned| {
        hub.clear_poison();
        let mut task = poisoned.into_inner();
        if let Some(deferred) = task.deferred.take() {
            deferred.deliver();
        }
        task
    })
}

/// Runs one synchronous step of the session task on the hub. Should it panic (a bug in the
/// client: a plan's own panic is caught where it runs), the session ends first, so that every
/// call of the lane ends (`Closed`) instead of waiting for a task that is gone, and the panic
/// goes on.
fn step<R: Runtime, T>(hub: &Mutex<SessionTask<R>>, f: impl FnOnce(&mut SessionTask<R>) -> T) -> T {
    match panic::catch_unwind(AssertUnwindSafe(|| f(&mut lock(hub)))) {
        Ok(done) => done,
        Err(panicked) => {
            lock(hub).end(Instant::now());
            panic::resume_unwind(panicked)
        }
    }
}

/// What a task is known by: its waker's data, the task's address for the runtimes' wakers. A
/// task polls its calls with one waker, so its calls share it. 0 for a waker without data (a
/// no-op waker), which stands for no task.
pub(crate) fn task_address(waker: &Waker) -> usize {
    waker.data().addr()
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
    /// Calls sent into the callers' inbox and not yet applied: while there are any, a call
    /// goes behind them rather than past them ([`inline::submit_inline`]).
    unapplied: Unapplied,
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
    let (calls_tx, calls, unapplied) = calls::inbox();
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
            unapplied,
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
        let call = async { Woke::Call(calls.recv().await) };
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
        let pass = step(&hub, |task| task.wake(woke));
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
        match step(&hub, |task| task.gather(closing, &mut events, &mut calls)) {
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
            Woke::Msg(Some(msg)) => (msg, false),
            Woke::Call(msg) => (msg, true),
            // The hub holds an event sender, and the last `Client` sends `Close` before its
            // sender goes: neither inbox ends while the task runs.
            Woke::Msg(None) => return Pass::End,
        };
        let (msg, call) = msg;
        let submit = matches!(msg, Msg::Submit(_));
        let closing = self.apply_taken(msg, now);
        if call {
            self.unapplied.applied();
        }
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
                Some(msg) => {
                    closing |= self.apply_taken(msg, now);
                    self.unapplied.applied();
                }
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
}
