//! The routing session: the one state machine a driver talks to.
//!
//! It owns the slot map, one pipelined connection per node, the timers, and every routing and
//! retry decision of design.md section 6. It performs no I/O: the driver feeds it events through
//! the `handle_*` methods and carries out what [`Session::poll`] returns.
//!
//! # The driver contract
//!
//! Methods come in three kinds:
//!
//! - **inputs**: [`Session::submit`], [`Session::handle_connected`],
//!   [`Session::handle_connect_failed`], [`Session::handle_read`], [`Session::handle_closed`],
//!   [`Session::handle_timeout`], [`Session::close`]. Each takes `now`.
//! - **output**: [`Session::poll`] returns one [`Output`] at a time.
//! - **getters**: [`Session::is_closed`], [`Session::slot_owner`], [`Session::in_flight`].
//!
//! **Drain rule:** after every input, call `poll` until it returns [`Output::Wait`]; then sleep
//! until that deadline (or until the next input) and call `handle_timeout`. A `Wait` whose
//! deadline has passed is never returned twice in a row for the same instant: after
//! `handle_timeout(t)` the next deadline is later than `t`, so a driver cannot busy-loop.
//!
//! Writes for one connection are coalesced: every request routed to a connection between two
//! drains leaves in one [`Output::Transmit`]. The driver must write transmits of one
//! connection in the order they come, and report every byte read with `handle_read`.
//!
//! # A request's life
//!
//! ```text
//!  submit ─► route ──no map yet──► wait for topology ─┐
//!              │                                      │
//!              ▼                                      │
//!     connection ready? ─no─► queue on connection ◄───┘
//!              │ yes                │ connected (+AUTH)
//!              ▼                    ▼
//!           encode into the connection's write buffer ─► Transmit (one write per drain)
//!              │
//!              ▼ reply (FIFO)
//!   value / final error ─────────────────────────────► complete
//!   MOVED  ─► patch slot, refresh soon, resend (≤ N redirections)
//!   ASK    ─► ASKING + request, back to back, same write (≤ N redirections)
//!   TRYAGAIN / CLUSTERDOWN / LOADING / MASTERDOWN / READONLY
//!          ─► back off (seeded jitter), resend (≤ attempts) [refresh when stale]
//!   NOSCRIPT ─► EVAL with the source, same node
//!   connection lost ─► write sent: ReplyLost (never resent)
//!                      read sent or not yet sent: back off, resend
//!   deadline ─► Timeout (outcome unknown if a write was in flight)
//! ```

use std::any::Any;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};

use crate::error::Error;
use crate::keys::SLOT_COUNT;
use crate::plan::{Plan, Reply, Step};
use crate::request::{encode_args, Access, Request, Route};
use crate::retry::{classify, Decision, Jitter, RetryPolicy};
use crate::topology::{parse_cluster_slots, NodeAddr, Topology};
use crate::value::{from_frame, Frame, ServerError};

/// Credentials sent with `AUTH` when a connection opens.
#[derive(Clone, PartialEq, Eq)]
pub struct Auth {
    /// An ACL user name; `None` for the default user (`requirepass`).
    pub username: Option<String>,
    /// The password.
    pub password: String,
}

impl fmt::Debug for Auth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Auth")
            .field("username", &self.username)
            .field("password", &"<redacted>")
            .finish()
    }
}

/// Maps an announced node address to the address to dial (Docker, NAT).
pub type AddressMap = Arc<dyn Fn(&NodeAddr) -> NodeAddr + Send + Sync>;

/// What the session connects to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Endpoints {
    /// One node, no cluster: every request goes there.
    Single(NodeAddr),
    /// A cluster, discovered from these root nodes.
    Cluster(Vec<NodeAddr>),
}

/// Session settings. [`Config::single`] and [`Config::cluster`] give the defaults.
#[derive(Clone)]
pub struct Config {
    /// What to connect to.
    pub endpoints: Endpoints,
    /// Credentials for every connection.
    pub auth: Option<Auth>,
    /// `MOVED`/`ASK` redirections one request may follow (default 16).
    pub max_redirections: u32,
    /// Backoff for retryable replies and unreachable nodes.
    pub retry: RetryPolicy,
    /// Overall deadline of one batch of requests (default 10 s).
    pub request_timeout: Duration,
    /// Deadline of a TCP connect plus `AUTH` (default 2 s).
    pub connect_timeout: Duration,
    /// A connection whose oldest request waits this long for a reply is closed (default 5 s).
    pub response_timeout: Duration,
    /// Periodic topology refresh, so a failover without `MOVED` is noticed (default 5 s).
    pub refresh_interval: Duration,
    /// At most one refresh starts per this interval (default 100 ms).
    pub refresh_min_interval: Duration,
    /// A reply larger than this closes the connection (default 512 MiB, Redis' own bulk cap).
    pub max_read_buffer: usize,
    /// Seed of the backoff jitter.
    pub seed: u64,
    /// Remaps announced addresses when dialling.
    pub address_map: Option<AddressMap>,
}

impl fmt::Debug for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Config")
            .field("endpoints", &self.endpoints)
            .field("auth", &self.auth)
            .field("max_redirections", &self.max_redirections)
            .field("retry", &self.retry)
            .field("request_timeout", &self.request_timeout)
            .field("connect_timeout", &self.connect_timeout)
            .field("response_timeout", &self.response_timeout)
            .field("refresh_interval", &self.refresh_interval)
            .field("address_map", &self.address_map.is_some())
            .finish_non_exhaustive()
    }
}

impl Config {
    fn with(endpoints: Endpoints) -> Self {
        Config {
            endpoints,
            auth: None,
            max_redirections: 16,
            retry: RetryPolicy::default(),
            request_timeout: Duration::from_secs(10),
            connect_timeout: Duration::from_secs(2),
            response_timeout: Duration::from_secs(5),
            refresh_interval: Duration::from_secs(5),
            refresh_min_interval: Duration::from_millis(100),
            max_read_buffer: 512 << 20,
            seed: 0x5eed,
            address_map: None,
        }
    }

    /// One node, defaults elsewhere.
    pub fn single(addr: NodeAddr) -> Self {
        Config::with(Endpoints::Single(addr))
    }

    /// A cluster from its root nodes, defaults elsewhere.
    pub fn cluster(root_nodes: Vec<NodeAddr>) -> Self {
        Config::with(Endpoints::Cluster(root_nodes))
    }
}

/// Identifies one connection attempt; a reconnect gets a new id, so late events of a dead
/// connection are recognised and ignored.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ConnId(pub u64);

/// The driver's name for a submitted plan, echoed in [`Output::Complete`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Token(pub u64);

/// The result of a plan, typed by the plan's output; see [`Completion::into_result`].
pub struct Completion(Box<dyn Any + Send>);

impl Completion {
    /// The plan's result. `T` is the `Output` of the submitted plan; asking for another type is
    /// a driver bug, reported as an error rather than a panic.
    pub fn into_result<T: 'static>(self) -> Result<T, Error> {
        match self.0.downcast::<Result<T, Error>>() {
            Ok(result) => *result,
            Err(_) => Err(Error::UnexpectedReply {
                detail: "completion read as the wrong output type".into(),
            }),
        }
    }
}

impl fmt::Debug for Completion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Completion(..)")
    }
}

/// Why the session wants to be woken.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum TimerReason {
    /// A request backs off before its next attempt.
    Backoff,
    /// A plan asked to wait.
    PlanWait,
    /// A batch's deadline.
    RequestDeadline,
    /// A connect or reply deadline of a connection.
    Connection,
    /// A topology refresh is due.
    Refresh,
    /// Nothing is pending.
    Idle,
}

/// What the driver must do next.
#[derive(Debug)]
pub enum Output {
    /// Open a TCP connection to `dial`; report with `handle_connected` or
    /// `handle_connect_failed`. `node` is the cluster's name for it.
    Connect {
        /// The new connection.
        conn: ConnId,
        /// The node's announced address.
        node: NodeAddr,
        /// The address to dial (after the address map).
        dial: NodeAddr,
    },
    /// Write these bytes to the connection, after any earlier transmit of it.
    Transmit {
        /// The connection.
        conn: ConnId,
        /// The bytes.
        bytes: Bytes,
    },
    /// Close the connection; report nothing more for it.
    Close {
        /// The connection.
        conn: ConnId,
    },
    /// A plan finished.
    Complete {
        /// The driver's token.
        token: Token,
        /// Its result.
        result: Completion,
    },
    /// Nothing more to do until `until` (or the next input). `None`: until the next input.
    Wait {
        /// The next deadline.
        until: Option<Instant>,
        /// What it is for.
        reason: TimerReason,
    },
}

/// A plan with its output type erased, so that one session runs plans of every type.
trait ErasedPlan: Send {
    fn start(&mut self) -> Step<()>;
    fn resume(&mut self, replies: Vec<Reply>) -> Step<()>;
    fn into_completion(self: Box<Self>) -> Completion;
    /// Ends the plan with `error` unless it already has a result.
    fn fail(self: Box<Self>, error: Error) -> Completion;
}

struct Erased<P: Plan> {
    plan: P,
    output: Option<Result<P::Output, Error>>,
}

impl<P: Plan> Erased<P> {
    fn erase(&mut self, step: Step<P::Output>) -> Step<()> {
        match step {
            Step::Send(batch) => Step::Send(batch),
            Step::Wait(d) => Step::Wait(d),
            Step::Done(result) => {
                self.output = Some(result);
                Step::Done(Ok(()))
            }
        }
    }
}

impl<P: Plan> ErasedPlan for Erased<P> {
    fn start(&mut self) -> Step<()> {
        let step = self.plan.start();
        self.erase(step)
    }

    fn resume(&mut self, replies: Vec<Reply>) -> Step<()> {
        let step = self.plan.resume(replies);
        self.erase(step)
    }

    fn into_completion(self: Box<Self>) -> Completion {
        let result: Result<P::Output, Error> = self
            .output
            .unwrap_or_else(|| Err(crate::plan::misuse("completed without a result")));
        Completion(Box::new(result))
    }

    fn fail(self: Box<Self>, error: Error) -> Completion {
        let result: Result<P::Output, Error> = self.output.unwrap_or(Err(error));
        Completion(Box::new(result))
    }
}

type NodeId = usize;
type OpId = u64;

/// A request of an op's current batch, at one dispatch: replies to older dispatches are stale.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct ReqRef {
    op: OpId,
    idx: usize,
    seq: u32,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Timer {
    Backoff(ReqRef),
    PlanWait(OpId),
    Deadline(OpId),
    Conn(ConnId),
    Refresh,
}

impl Timer {
    fn reason(&self) -> TimerReason {
        match self {
            Timer::Backoff(_) => TimerReason::Backoff,
            Timer::PlanWait(_) => TimerReason::PlanWait,
            Timer::Deadline(_) => TimerReason::RequestDeadline,
            Timer::Conn(_) => TimerReason::Connection,
            Timer::Refresh => TimerReason::Refresh,
        }
    }
}

#[derive(Debug)]
enum Pending {
    Request { req: ReqRef, asking: bool },
    Asking,
    Auth,
    Topology(u64),
}

#[derive(Debug, PartialEq, Eq)]
enum ConnState {
    Connecting,
    Handshaking,
    Ready,
}

#[derive(Debug)]
struct Conn {
    node: NodeId,
    state: ConnState,
    opened: Instant,
    write_buf: BytesMut,
    read_buf: BytesMut,
    /// Requests written or buffered, in wire order; their replies come in this order.
    in_flight: VecDeque<(Pending, Instant)>,
    /// How many entries at the back of `in_flight` are still in `write_buf`.
    unsent: usize,
    /// Requests routed here before the connection was ready.
    waiting: Vec<(ReqRef, bool)>,
    /// A topology query routed here before the connection was ready.
    waiting_topology: Option<u64>,
    check_at: Option<Instant>,
}

#[derive(Debug)]
struct ReqState {
    request: Request,
    reply: Option<Reply>,
    seq: u32,
    attempts: u32,
    redirects: u32,
    ask: Option<NodeId>,
    pinned: Option<NodeId>,
    with_source: bool,
    in_flight: bool,
}

struct Op {
    token: Token,
    plan: Box<dyn ErasedPlan>,
    reqs: Vec<ReqState>,
    remaining: usize,
    deadline: Option<Instant>,
}

#[derive(Debug, Default)]
struct Refresh {
    round: u64,
    outstanding: usize,
    best: Option<Topology>,
    running: bool,
    last_started: Option<Instant>,
    again: bool,
    failures: u32,
    last_error: Option<Error>,
}

/// The routing session. See the module docs for the driver contract.
pub struct Session {
    config: Config,
    cluster: bool,
    nodes: Vec<NodeAddr>,
    node_ids: BTreeMap<NodeAddr, NodeId>,
    node_conn: BTreeMap<NodeId, ConnId>,
    slots: Vec<Option<NodeId>>,
    map_loaded: bool,
    conns: BTreeMap<ConnId, Conn>,
    next_conn: u64,
    ops: BTreeMap<OpId, Op>,
    next_op: OpId,
    unrouted: Vec<ReqRef>,
    to_dispatch: VecDeque<ReqRef>,
    to_advance: VecDeque<OpId>,
    timers: BTreeSet<(Instant, Timer)>,
    outputs: VecDeque<Output>,
    dirty: BTreeSet<ConnId>,
    refresh: Refresh,
    jitter: Jitter,
    closed: bool,
}

impl fmt::Debug for Session {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Session")
            .field("nodes", &self.nodes)
            .field("conns", &self.conns.len())
            .field("ops", &self.ops.len())
            .field("closed", &self.closed)
            .finish_non_exhaustive()
    }
}

impl Session {
    /// A session that has not connected yet: the first submitted plan (or, for a cluster, the
    /// first topology refresh, which starts at once) opens connections.
    pub fn new(config: Config, now: Instant) -> Self {
        let cluster = matches!(config.endpoints, Endpoints::Cluster(_));
        let mut session = Session {
            jitter: Jitter::new(config.seed),
            config,
            cluster,
            nodes: Vec::new(),
            node_ids: BTreeMap::new(),
            node_conn: BTreeMap::new(),
            slots: Vec::new(),
            map_loaded: false,
            conns: BTreeMap::new(),
            next_conn: 1,
            ops: BTreeMap::new(),
            next_op: 1,
            unrouted: Vec::new(),
            to_dispatch: VecDeque::new(),
            to_advance: VecDeque::new(),
            timers: BTreeSet::new(),
            outputs: VecDeque::new(),
            dirty: BTreeSet::new(),
            refresh: Refresh::default(),
            closed: false,
        };
        match session.config.endpoints.clone() {
            Endpoints::Single(addr) => {
                session.intern(addr);
            }
            Endpoints::Cluster(roots) => {
                session.slots = vec![None; usize::from(SLOT_COUNT)];
                for addr in roots {
                    session.intern(addr);
                }
                session.start_refresh(now);
            }
        }
        session
    }

    // --- getters ----------------------------------------------------------------------------

    /// Whether [`Session::close`] was called.
    pub fn is_closed(&self) -> bool {
        self.closed
    }

    /// The master the session would send `slot` to now, if it knows one.
    pub fn slot_owner(&self, slot: u16) -> Option<&NodeAddr> {
        if self.cluster {
            self.slots
                .get(usize::from(slot))
                .copied()
                .flatten()
                .and_then(|n| self.nodes.get(n))
        } else {
            self.nodes.first()
        }
    }

    /// Plans submitted and not yet complete.
    pub fn in_flight(&self) -> usize {
        self.ops.len()
    }

    // --- inputs -----------------------------------------------------------------------------

    /// Submits a plan; its result comes back as [`Output::Complete`] with `token`.
    pub fn submit<P: Plan>(&mut self, now: Instant, token: Token, plan: P) {
        let plan: Box<dyn ErasedPlan> = Box::new(Erased { plan, output: None });
        if self.closed {
            self.outputs.push_back(Output::Complete {
                token,
                result: Completion(Box::new(Err::<P::Output, Error>(Error::Closed))),
            });
            return;
        }
        let id = self.next_op;
        self.next_op += 1;
        self.ops.insert(
            id,
            Op {
                token,
                plan,
                reqs: Vec::new(),
                remaining: 0,
                deadline: None,
            },
        );
        self.step_op(now, id, None);
        self.pump(now);
    }

    /// The TCP connection `conn` is open.
    pub fn handle_connected(&mut self, now: Instant, conn: ConnId) {
        let auth = self.config.auth.clone();
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        if c.state != ConnState::Connecting {
            return;
        }
        match auth {
            Some(auth) => {
                let mut args = vec![Bytes::from_static(b"AUTH")];
                if let Some(user) = auth.username {
                    args.push(Bytes::from(user));
                }
                args.push(Bytes::from(auth.password));
                encode_args(args, &mut c.write_buf);
                c.in_flight.push_back((Pending::Auth, now));
                c.unsent += 1;
                c.state = ConnState::Handshaking;
                self.dirty.insert(conn);
            }
            None => self.become_ready(now, conn),
        }
        self.pump(now);
    }

    /// The TCP connect of `conn` failed.
    pub fn handle_connect_failed(&mut self, now: Instant, conn: ConnId, reason: &str) {
        let error = self.conns.get(&conn).map(|c| Error::Connect {
            addr: self.dial_addr(c.node).to_string(),
            reason: reason.to_owned(),
        });
        if let Some(error) = error {
            self.drop_conn(now, conn, error, false);
        }
        self.pump(now);
    }

    /// Bytes arrived on `conn`.
    pub fn handle_read(&mut self, now: Instant, conn: ConnId, data: &[u8]) {
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        c.read_buf.extend_from_slice(data);
        loop {
            let Some(c) = self.conns.get_mut(&conn) else {
                break;
            };
            match redis_protocol::resp2::decode::decode_bytes_mut(&mut c.read_buf) {
                Ok(Some((frame, _, _))) => self.on_frame(now, conn, from_frame(frame)),
                Ok(None) => {
                    if c.read_buf.len() > self.config.max_read_buffer {
                        let addr = self.nodes[c.node].to_string();
                        let detail = format!(
                            "a reply exceeds the {} byte read buffer cap",
                            self.config.max_read_buffer
                        );
                        self.protocol_failure(now, conn, addr, detail);
                    }
                    break;
                }
                Err(e) => {
                    let addr = self.nodes[c.node].to_string();
                    self.protocol_failure(now, conn, addr, e.to_string());
                    break;
                }
            }
        }
        self.pump(now);
    }

    /// `conn` was closed by the peer or failed; `reason` says how.
    pub fn handle_closed(&mut self, now: Instant, conn: ConnId, reason: &str) {
        if let Some(c) = self.conns.get(&conn) {
            let addr = self.nodes[c.node].to_string();
            let error = Error::ReplyLost {
                addr,
                reason: reason.to_owned(),
            };
            self.drop_conn(now, conn, error, false);
        }
        self.pump(now);
    }

    /// Time has come to `now`: fires every due timer.
    pub fn handle_timeout(&mut self, now: Instant) {
        while let Some(&(at, timer)) = self.timers.first() {
            if at > now {
                break;
            }
            self.timers.remove(&(at, timer));
            self.fire(now, timer);
            self.pump(now);
        }
        self.pump(now);
    }

    /// Ends every plan (writes in flight as [`Error::ReplyLost`], the rest as
    /// [`Error::Closed`]) and closes every connection.
    pub fn close(&mut self, _now: Instant) {
        if self.closed {
            return;
        }
        self.closed = true;
        let conns: Vec<ConnId> = self.conns.keys().copied().collect();
        for conn in conns {
            self.outputs.push_back(Output::Close { conn });
        }
        self.conns.clear();
        self.node_conn.clear();
        self.dirty.clear();
        self.timers.clear();
        self.unrouted.clear();
        self.to_dispatch.clear();
        self.to_advance.clear();
        let ops = std::mem::take(&mut self.ops);
        for (_, op) in ops {
            let unknown = op.reqs.iter().any(|r| {
                r.reply.is_none() && r.in_flight && r.request.access() == Access::Write
            });
            let error = if unknown {
                Error::ReplyLost {
                    addr: "(client)".into(),
                    reason: "the client was closed".into(),
                }
            } else {
                Error::Closed
            };
            self.outputs.push_back(Output::Complete {
                token: op.token,
                result: op.plan.fail(error),
            });
        }
    }

    // --- output -----------------------------------------------------------------------------

    /// The next thing to do. Call until it returns [`Output::Wait`].
    pub fn poll(&mut self) -> Output {
        if let Some(out) = self.outputs.pop_front() {
            return out;
        }
        while let Some(conn) = self.dirty.pop_first() {
            if let Some(c) = self.conns.get_mut(&conn) {
                if !c.write_buf.is_empty() {
                    c.unsent = 0;
                    return Output::Transmit {
                        conn,
                        bytes: c.write_buf.split().freeze(),
                    };
                }
            }
        }
        match self.timers.first() {
            Some(&(until, timer)) => Output::Wait {
                until: Some(until),
                reason: timer.reason(),
            },
            None => Output::Wait {
                until: None,
                reason: TimerReason::Idle,
            },
        }
    }

    // --- plans ------------------------------------------------------------------------------

    /// Runs an op's plan until it sends, waits or is done.
    fn step_op(&mut self, now: Instant, id: OpId, replies: Option<Vec<Reply>>) {
        let Some(op) = self.ops.get_mut(&id) else {
            return;
        };
        let mut step = match replies {
            None => op.plan.start(),
            Some(replies) => op.plan.resume(replies),
        };
        // A plan that sends empty batches forever would spin here; it gets a bounded number.
        for _ in 0..1024 {
            match step {
                Step::Send(batch) if batch.is_empty() => step = op.plan.resume(Vec::new()),
                Step::Send(batch) => {
                    let deadline = now + self.config.request_timeout;
                    op.remaining = batch.len();
                    op.reqs = batch
                        .into_iter()
                        .map(|request| ReqState {
                            request,
                            reply: None,
                            seq: 0,
                            attempts: 0,
                            redirects: 0,
                            ask: None,
                            pinned: None,
                            with_source: false,
                            in_flight: false,
                        })
                        .collect();
                    op.deadline = Some(deadline);
                    self.timers.insert((deadline, Timer::Deadline(id)));
                    for idx in 0..op.reqs.len() {
                        self.to_dispatch.push_back(ReqRef { op: id, idx, seq: 0 });
                    }
                    return;
                }
                Step::Wait(d) => {
                    // A zero wait would fire within the same `handle_timeout` forever.
                    let at = now + d.max(Duration::from_millis(1));
                    self.timers.insert((at, Timer::PlanWait(id)));
                    return;
                }
                Step::Done(_) => {
                    if let Some(op) = self.ops.remove(&id) {
                        self.outputs.push_back(Output::Complete {
                            token: op.token,
                            result: op.plan.into_completion(),
                        });
                    }
                    return;
                }
            }
        }
        let stuck = crate::plan::misuse("the plan sent 1024 empty batches in a row");
        if let Some(op) = self.ops.remove(&id) {
            self.outputs.push_back(Output::Complete {
                token: op.token,
                result: op.plan.fail(stuck),
            });
        }
    }

    /// Drains the internal work queues; called at the end of every input.
    fn pump(&mut self, now: Instant) {
        loop {
            if let Some(req) = self.to_dispatch.pop_front() {
                self.dispatch(now, req);
            } else if let Some(id) = self.to_advance.pop_front() {
                let replies = self.ops.get_mut(&id).map(|op| {
                    if let Some(deadline) = op.deadline.take() {
                        self.timers.remove(&(deadline, Timer::Deadline(id)));
                    }
                    op.reqs
                        .drain(..)
                        .map(|r| {
                            r.reply
                                .unwrap_or_else(|| Err(crate::plan::misuse("a reply is missing")))
                        })
                        .collect::<Vec<_>>()
                });
                if let Some(replies) = replies {
                    self.step_op(now, id, Some(replies));
                }
            } else {
                break;
            }
        }
    }

    fn req_mut(&mut self, r: ReqRef) -> Option<&mut ReqState> {
        self.ops
            .get_mut(&r.op)?
            .reqs
            .get_mut(r.idx)
            .filter(|s| s.seq == r.seq && s.reply.is_none())
    }

    fn finish(&mut self, r: ReqRef, reply: Reply) {
        let Some(op) = self.ops.get_mut(&r.op) else {
            return;
        };
        let Some(state) = op.reqs.get_mut(r.idx) else {
            return;
        };
        if state.reply.is_some() {
            return;
        }
        state.reply = Some(reply);
        state.in_flight = false;
        op.remaining -= 1;
        if op.remaining == 0 {
            self.to_advance.push_back(r.op);
        }
    }

    /// Schedules another attempt after a backoff, or ends the request when attempts run out.
    fn retry_later(&mut self, now: Instant, r: ReqRef, cause: Error) {
        let attempts_allowed = self.config.retry.attempts;
        let Some(state) = self.req_mut(r) else {
            return;
        };
        state.in_flight = false;
        state.attempts += 1;
        let attempts = state.attempts;
        if attempts > attempts_allowed {
            let error = match cause {
                Error::Server(last) => Error::RetriesExhausted { attempts, last },
                other => other,
            };
            self.finish(r, Err(error));
            return;
        }
        let delay = self.config.retry.delay(attempts, self.jitter.next_factor());
        self.timers.insert((now + delay, Timer::Backoff(r)));
    }

    // --- routing ----------------------------------------------------------------------------

    fn intern(&mut self, addr: NodeAddr) -> NodeId {
        if let Some(&id) = self.node_ids.get(&addr) {
            return id;
        }
        let id = self.nodes.len();
        self.nodes.push(addr.clone());
        self.node_ids.insert(addr, id);
        id
    }

    fn dial_addr(&self, node: NodeId) -> NodeAddr {
        let addr = &self.nodes[node];
        match &self.config.address_map {
            Some(map) => map(addr),
            None => addr.clone(),
        }
    }

    fn masters(&self) -> BTreeSet<NodeId> {
        self.slots.iter().flatten().copied().collect()
    }

    /// Sends one request toward its node, or parks it until the node is known.
    fn dispatch(&mut self, now: Instant, r: ReqRef) {
        let cluster = self.cluster;
        let map_loaded = self.map_loaded;
        let Some(state) = self.req_mut(r) else {
            return;
        };
        state.seq += 1;
        let r = ReqRef {
            seq: state.seq,
            ..r
        };
        let (ask, pinned) = (state.ask.take(), state.pinned.take());
        let route = state.request.route().clone();
        let target = if let Some(node) = ask {
            Some((node, true))
        } else if let Some(node) = pinned {
            Some((node, false))
        } else if !cluster {
            Some((0, false))
        } else {
            match route {
                Route::Slot(slot) => match self.slots[usize::from(slot)] {
                    Some(node) => Some((node, false)),
                    None if !map_loaded => None,
                    None => {
                        self.request_refresh(now);
                        let cause = ServerError::new(format!(
                            "CLUSTERDOWN Hash slot {slot} has no known owner"
                        ));
                        self.retry_later(now, r, Error::Server(cause));
                        return;
                    }
                },
                Route::AnyMaster => {
                    let ready = self.node_conn.iter().find_map(|(&node, conn)| {
                        let is_master = self.slots.contains(&Some(node));
                        let ready = self
                            .conns
                            .get(conn)
                            .is_some_and(|c| c.state == ConnState::Ready);
                        (is_master && ready).then_some(node)
                    });
                    ready
                        .or_else(|| self.masters().into_iter().next())
                        .map(|n| (n, false))
                }
                Route::Node(text) => match NodeAddr::parse(&text, "") {
                    Some(addr) => Some((self.intern(addr), false)),
                    None => {
                        let error = Error::Config(format!("not a node address: {text:?}"));
                        self.finish(r, Err(error));
                        return;
                    }
                },
            }
        };
        match target {
            Some((node, asking)) => self.send_to(now, node, r, asking),
            None => {
                self.unrouted.push(r);
                self.request_refresh(now);
            }
        }
    }

    fn conn_for(&mut self, now: Instant, node: NodeId) -> ConnId {
        if let Some(&conn) = self.node_conn.get(&node) {
            return conn;
        }
        let conn = ConnId(self.next_conn);
        self.next_conn += 1;
        self.conns.insert(
            conn,
            Conn {
                node,
                state: ConnState::Connecting,
                opened: now,
                write_buf: BytesMut::new(),
                read_buf: BytesMut::new(),
                in_flight: VecDeque::new(),
                unsent: 0,
                waiting: Vec::new(),
                waiting_topology: None,
                check_at: None,
            },
        );
        self.node_conn.insert(node, conn);
        self.outputs.push_back(Output::Connect {
            conn,
            node: self.nodes[node].clone(),
            dial: self.dial_addr(node),
        });
        self.schedule_check(conn, now + self.config.connect_timeout);
        conn
    }

    fn send_to(&mut self, now: Instant, node: NodeId, r: ReqRef, asking: bool) {
        let conn = self.conn_for(now, node);
        let ready = self
            .conns
            .get(&conn)
            .is_some_and(|c| c.state == ConnState::Ready);
        if ready {
            self.encode_request(now, conn, r, asking);
        } else if let Some(c) = self.conns.get_mut(&conn) {
            c.waiting.push((r, asking));
        }
    }

    fn encode_request(&mut self, now: Instant, conn: ConnId, r: ReqRef, asking: bool) {
        let Some(state) = self.ops.get_mut(&r.op).and_then(|op| op.reqs.get_mut(r.idx)) else {
            return;
        };
        if state.seq != r.seq || state.reply.is_some() {
            return;
        }
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        // ASKING and its request go into one buffer back to back: nothing can come between
        // them on the wire.
        if asking {
            encode_args(vec![Bytes::from_static(b"ASKING")], &mut c.write_buf);
            c.in_flight.push_back((Pending::Asking, now));
            c.unsent += 1;
        }
        state.request.encode(state.with_source, &mut c.write_buf);
        state.in_flight = true;
        let was_idle = c.in_flight.is_empty();
        c.in_flight
            .push_back((Pending::Request { req: r, asking }, now));
        c.unsent += 1;
        self.dirty.insert(conn);
        if was_idle {
            self.schedule_check(conn, now + self.config.response_timeout);
        }
    }

    fn schedule_check(&mut self, conn: ConnId, at: Instant) {
        if let Some(c) = self.conns.get_mut(&conn) {
            if c.check_at.is_some_and(|t| t <= at) {
                return;
            }
            if let Some(old) = c.check_at.replace(at) {
                self.timers.remove(&(old, Timer::Conn(conn)));
            }
            self.timers.insert((at, Timer::Conn(conn)));
        }
    }

    fn become_ready(&mut self, now: Instant, conn: ConnId) {
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        c.state = ConnState::Ready;
        let waiting = std::mem::take(&mut c.waiting);
        let topology = c.waiting_topology.take();
        for (r, asking) in waiting {
            self.encode_request(now, conn, r, asking);
        }
        if let Some(round) = topology {
            self.encode_topology(now, conn, round);
        }
    }

    // --- replies ----------------------------------------------------------------------------

    fn on_frame(&mut self, now: Instant, conn: ConnId, frame: Frame) {
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        let node = c.node;
        let Some((pending, _)) = c.in_flight.pop_front() else {
            let addr = self.nodes[node].to_string();
            self.protocol_failure(now, conn, addr, "a reply with no request".into());
            return;
        };
        c.unsent = c.unsent.min(c.in_flight.len());
        match pending {
            Pending::Asking => {}
            Pending::Auth => match frame {
                Ok(_) => self.become_ready(now, conn),
                Err(e) => {
                    let error = Error::Auth {
                        addr: self.dial_addr(node).to_string(),
                        reason: e.to_string(),
                    };
                    self.outputs.push_back(Output::Close { conn });
                    self.drop_conn(now, conn, error, true);
                }
            },
            Pending::Topology(round) => self.on_topology(now, round, node, Some(frame)),
            Pending::Request { req, asking } => self.on_reply(now, req, node, asking, frame),
        }
    }

    fn on_reply(&mut self, now: Instant, r: ReqRef, node: NodeId, asking: bool, frame: Frame) {
        let cluster = self.cluster;
        let max_redirections = self.config.max_redirections;
        let host = self.nodes[node].host.clone();
        let Some(state) = self.req_mut(r) else {
            return;
        };
        state.in_flight = false;
        let error = match frame {
            Ok(value) => return self.finish(r, Ok(value)),
            Err(e) => e,
        };
        let decision = match classify(&error, &host) {
            Decision::Moved { .. } | Decision::Ask { .. } if !cluster => Decision::Final,
            d => d,
        };
        match decision {
            Decision::Final => self.finish(r, Err(Error::Server(error))),
            Decision::Moved { .. } | Decision::Ask { .. }
                if state.redirects >= max_redirections =>
            {
                let count = state.redirects;
                self.finish(r, Err(Error::TooManyRedirections { count, last: error }));
            }
            Decision::Moved { slot, addr } => {
                state.redirects += 1;
                tracing::debug!(slot, to = %addr, "MOVED: patching the slot map");
                let target = self.intern(addr);
                self.slots[usize::from(slot)] = Some(target);
                self.request_refresh(now);
                self.to_dispatch.push_back(r);
            }
            Decision::Ask { addr } => {
                state.redirects += 1;
                let target = self.intern(addr);
                if let Some(state) = self.req_mut(r) {
                    state.ask = Some(target);
                }
                self.to_dispatch.push_back(r);
            }
            Decision::Backoff { refresh } => {
                if refresh {
                    self.request_refresh(now);
                }
                self.retry_later(now, r, Error::Server(error));
            }
            Decision::NoScript => {
                if state.with_source || state.request.script_ref().is_none() {
                    self.finish(r, Err(Error::Server(error)));
                } else {
                    state.with_source = true;
                    if asking {
                        state.ask = Some(node);
                    } else {
                        state.pinned = Some(node);
                    }
                    self.to_dispatch.push_back(r);
                }
            }
        }
    }

    fn protocol_failure(&mut self, now: Instant, conn: ConnId, addr: String, detail: String) {
        tracing::warn!(%addr, %detail, "closing a connection after a protocol error");
        self.outputs.push_back(Output::Close { conn });
        let error = Error::ReplyLost {
            addr,
            reason: format!("protocol error: {detail}"),
        };
        self.drop_conn(now, conn, error, false);
    }

    /// Forgets a connection and settles everything that was on it.
    ///
    /// `lost` is what a sent write becomes. Requests never written (queued while connecting,
    /// or still in the write buffer) are retried; sent reads are retried; sent writes end with
    /// `lost`, since they may have run. `fatal` ends the waiting requests too (a refused AUTH
    /// will not get better by retrying).
    fn drop_conn(&mut self, now: Instant, conn: ConnId, lost: Error, fatal: bool) {
        let Some(c) = self.conns.remove(&conn) else {
            return;
        };
        if self.node_conn.get(&c.node) == Some(&conn) {
            self.node_conn.remove(&c.node);
        }
        self.dirty.remove(&conn);
        if let Some(at) = c.check_at {
            self.timers.remove(&(at, Timer::Conn(conn)));
        }
        let addr = self.dial_addr(c.node).to_string();
        let not_sent = match &lost {
            Error::Connect { .. } | Error::Auth { .. } => lost.clone(),
            other => Error::Connect {
                addr: addr.clone(),
                reason: other.to_string(),
            },
        };
        let never_connected = c.state != ConnState::Ready;
        let sent = c.in_flight.len() - c.unsent.min(c.in_flight.len());
        for (i, (pending, _)) in c.in_flight.into_iter().enumerate() {
            match pending {
                Pending::Request { req, .. } => {
                    let write = self
                        .req_mut(req)
                        .is_some_and(|s| s.request.access() == Access::Write);
                    if i < sent && write {
                        self.finish(req, Err(lost.clone()));
                    } else if fatal || (!self.cluster && never_connected) {
                        self.finish(req, Err(not_sent.clone()));
                    } else {
                        self.retry_later(now, req, not_sent.clone());
                    }
                }
                Pending::Topology(round) => self.on_topology(now, round, c.node, None),
                Pending::Asking | Pending::Auth => {}
            }
        }
        for (req, _) in c.waiting {
            // In single-node mode an unreachable server is the answer: fail within the connect
            // timeout instead of retrying for seconds. A cluster node may be failing over.
            if fatal || !self.cluster {
                self.finish(req, Err(not_sent.clone()));
            } else {
                self.retry_later(now, req, not_sent.clone());
            }
        }
        if let Some(round) = c.waiting_topology {
            self.refresh.last_error = Some(not_sent.clone());
            self.on_topology(now, round, c.node, None);
        }
        if self.cluster {
            self.request_refresh(now);
        }
    }

    // --- timers -----------------------------------------------------------------------------

    fn fire(&mut self, now: Instant, timer: Timer) {
        match timer {
            Timer::Backoff(r) => {
                if self.req_mut(r).is_some() {
                    self.to_dispatch.push_back(r);
                }
            }
            Timer::PlanWait(id) => self.step_op(now, id, Some(Vec::new())),
            Timer::Deadline(id) => self.expire(id),
            Timer::Conn(conn) => self.check_conn(now, conn),
            Timer::Refresh => self.start_refresh(now),
        }
    }

    fn expire(&mut self, id: OpId) {
        let Some(op) = self.ops.get_mut(&id) else {
            return;
        };
        op.deadline = None;
        let open: Vec<(ReqRef, bool)> = op
            .reqs
            .iter()
            .enumerate()
            .filter(|(_, s)| s.reply.is_none())
            .map(|(idx, s)| {
                let unknown = s.in_flight && s.request.access() == Access::Write;
                (
                    ReqRef {
                        op: id,
                        idx,
                        seq: s.seq,
                    },
                    unknown,
                )
            })
            .collect();
        for (r, outcome_unknown) in open {
            self.unrouted.retain(|u| *u != r);
            self.finish(r, Err(Error::Timeout { outcome_unknown }));
        }
    }

    fn check_conn(&mut self, now: Instant, conn: ConnId) {
        let (connect_timeout, response_timeout) =
            (self.config.connect_timeout, self.config.response_timeout);
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        c.check_at = None;
        let node = c.node;
        let addr = self.nodes[node].to_string();
        if c.state != ConnState::Ready {
            if now >= c.opened + connect_timeout {
                tracing::warn!(%addr, "connect timed out");
                self.outputs.push_back(Output::Close { conn });
                let error = Error::Connect {
                    addr: self.dial_addr(node).to_string(),
                    reason: format!("no connection within {connect_timeout:?}"),
                };
                self.drop_conn(now, conn, error, false);
            } else {
                let at = c.opened + connect_timeout;
                self.schedule_check(conn, at);
            }
            return;
        }
        let Some(&(_, oldest)) = c.in_flight.front() else {
            return;
        };
        if now >= oldest + response_timeout {
            tracing::warn!(%addr, "no reply within the response timeout; closing the connection");
            self.outputs.push_back(Output::Close { conn });
            let error = Error::ReplyLost {
                addr,
                reason: format!("no reply within {response_timeout:?}"),
            };
            self.drop_conn(now, conn, error, false);
        } else {
            self.schedule_check(conn, oldest + response_timeout);
        }
    }

    // --- topology ---------------------------------------------------------------------------

    /// Asks for a refresh: now if none ran recently, else once the rate limit allows.
    fn request_refresh(&mut self, now: Instant) {
        if !self.cluster || self.closed {
            return;
        }
        if self.refresh.running {
            self.refresh.again = true;
            return;
        }
        let earliest = self
            .refresh
            .last_started
            .map_or(now, |t| t + self.config.refresh_min_interval);
        if earliest <= now {
            self.start_refresh(now);
        } else {
            self.set_refresh_timer(earliest);
        }
    }

    fn set_refresh_timer(&mut self, at: Instant) {
        let existing: Vec<(Instant, Timer)> = self
            .timers
            .iter()
            .filter(|(_, t)| *t == Timer::Refresh)
            .copied()
            .collect();
        if existing.iter().any(|&(t, _)| t <= at) {
            return;
        }
        for entry in existing {
            self.timers.remove(&entry);
        }
        self.timers.insert((at, Timer::Refresh));
    }

    fn start_refresh(&mut self, now: Instant) {
        if !self.cluster || self.closed || self.refresh.running {
            return;
        }
        let stale: Vec<(Instant, Timer)> = self
            .timers
            .iter()
            .filter(|(_, t)| *t == Timer::Refresh)
            .copied()
            .collect();
        for entry in stale {
            self.timers.remove(&entry);
        }
        // Ask two nodes: masters with a live connection first, then other masters, then the
        // root nodes, then anything known. Rotate by round so a dead node is not asked forever.
        let masters = self.masters();
        let mut candidates: Vec<NodeId> = Vec::new();
        let ready = |s: &Self, n: &NodeId| {
            s.node_conn
                .get(n)
                .and_then(|c| s.conns.get(c))
                .is_some_and(|c| c.state == ConnState::Ready)
        };
        candidates.extend(masters.iter().filter(|n| ready(self, n)));
        candidates.extend(masters.iter().filter(|n| !ready(self, n)));
        if let Endpoints::Cluster(roots) = &self.config.endpoints {
            candidates.extend(roots.iter().filter_map(|r| self.node_ids.get(r)));
        }
        candidates.extend(0..self.nodes.len());
        let mut chosen: Vec<NodeId> = Vec::new();
        let offset = usize::try_from(self.refresh.round).unwrap_or(0);
        let mut unique: Vec<NodeId> = Vec::new();
        for n in candidates {
            if !unique.contains(&n) {
                unique.push(n);
            }
        }
        if unique.is_empty() {
            return;
        }
        // Keep the best candidate first; rotate the rest.
        chosen.push(unique[0]);
        if unique.len() > 1 {
            let rest = &unique[1..];
            chosen.push(rest[offset % rest.len()]);
        }
        self.refresh.round += 1;
        self.refresh.running = true;
        self.refresh.again = false;
        self.refresh.best = None;
        self.refresh.last_started = Some(now);
        self.refresh.outstanding = chosen.len();
        let round = self.refresh.round;
        for node in chosen {
            let conn = self.conn_for(now, node);
            let ready = self
                .conns
                .get(&conn)
                .is_some_and(|c| c.state == ConnState::Ready);
            if ready {
                self.encode_topology(now, conn, round);
            } else if let Some(c) = self.conns.get_mut(&conn) {
                c.waiting_topology = Some(round);
            }
        }
    }

    fn encode_topology(&mut self, now: Instant, conn: ConnId, round: u64) {
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        encode_args(
            vec![Bytes::from_static(b"CLUSTER"), Bytes::from_static(b"SLOTS")],
            &mut c.write_buf,
        );
        let was_idle = c.in_flight.is_empty();
        c.in_flight.push_back((Pending::Topology(round), now));
        c.unsent += 1;
        self.dirty.insert(conn);
        if was_idle {
            self.schedule_check(conn, now + self.config.response_timeout);
        }
    }

    fn on_topology(&mut self, now: Instant, round: u64, node: NodeId, answer: Option<Frame>) {
        if round != self.refresh.round || !self.refresh.running {
            return;
        }
        self.refresh.outstanding = self.refresh.outstanding.saturating_sub(1);
        let host = self.nodes[node].host.clone();
        match answer {
            Some(Ok(value)) => match parse_cluster_slots(&value, &host) {
                Ok(topo) if topo.is_complete() => {
                    self.refresh.best = Some(topo);
                    self.refresh.outstanding = 0;
                }
                Ok(topo) => {
                    let better = self
                        .refresh
                        .best
                        .as_ref()
                        .is_none_or(|b| b.coverage() < topo.coverage());
                    if better {
                        self.refresh.best = Some(topo);
                    }
                }
                Err(e) => {
                    self.refresh.last_error = Some(Error::UnexpectedReply {
                        detail: e.to_string(),
                    })
                }
            },
            Some(Err(e)) => self.refresh.last_error = Some(Error::Server(e)),
            None => {}
        }
        if self.refresh.outstanding == 0 {
            self.end_refresh(now);
        }
    }

    fn end_refresh(&mut self, now: Instant) {
        self.refresh.running = false;
        let best = self.refresh.best.take().filter(|t| t.coverage() > 0);
        match best {
            Some(topo) => {
                self.refresh.failures = 0;
                self.apply_topology(&topo);
                let next = now + self.config.refresh_interval;
                self.set_refresh_timer(next);
                if self.refresh.again {
                    self.request_refresh(now);
                }
            }
            None => {
                self.refresh.failures += 1;
                let failures = self.refresh.failures;
                tracing::warn!(failures, "topology refresh failed");
                // Requests waiting for a first map count the failed round as an attempt.
                if !self.map_loaded {
                    let cause = self.refresh.last_error.clone().unwrap_or(Error::NotSent {
                        reason: "no node answered CLUSTER SLOTS".into(),
                    });
                    let waiting = std::mem::take(&mut self.unrouted);
                    for r in waiting {
                        let allowed = self.config.retry.attempts;
                        let exhausted = self
                            .req_mut(r)
                            .map(|s| {
                                s.attempts += 1;
                                s.attempts > allowed
                            })
                            .unwrap_or(false);
                        if exhausted {
                            self.finish(r, Err(cause.clone()));
                        } else if self.req_mut(r).is_some() {
                            self.unrouted.push(r);
                        }
                    }
                }
                let delay = self
                    .config
                    .retry
                    .delay(failures, self.jitter.next_factor())
                    .max(self.config.refresh_min_interval);
                self.set_refresh_timer(now + delay);
            }
        }
    }

    fn apply_topology(&mut self, topo: &Topology) {
        if topo.is_complete() {
            self.slots.iter_mut().for_each(|s| *s = None);
        }
        for shard in &topo.shards {
            let node = self.intern(shard.master.clone());
            for &(start, end) in &shard.ranges {
                for slot in start..=end {
                    self.slots[usize::from(slot)] = Some(node);
                }
            }
        }
        self.map_loaded = true;
        let waiting = std::mem::take(&mut self.unrouted);
        self.to_dispatch.extend(waiting);
    }
}
