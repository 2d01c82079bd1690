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
//!   [`Session::handle_timeout`], [`Session::close`]. Each takes `now`, the driver's clock;
//!   `now` must never go back.
//! - **output**: [`Session::poll`] returns one [`Output`] at a time.
//! - **getters**: [`Session::is_closed`], [`Session::slot_owner`], [`Session::in_flight`],
//!   [`Session::known_nodes`].
//!
//! **Drain rule:** after every input, call `poll` until it returns [`Output::Wait`]; then sleep
//! until that deadline (or until the next input) and call `handle_timeout`. A spurious or
//! early `handle_timeout` is harmless. After `handle_timeout(t)` the next deadline is always
//! later than `t` (every timer is at least a millisecond away when armed), so a driver cannot
//! busy-loop.
//!
//! Requests are encoded when `poll` hands them out, not when they are routed: every request
//! routed to a connection between two drains leaves in one [`Output::Transmit`], and a request
//! that ended before the drain (its deadline passed) is never written. A request counts as
//! *sent* from the moment its bytes are returned by `poll`. The driver must write the
//! transmits of one connection in the order they come and report every byte read with
//! `handle_read`. Events may keep arriving for a connection after [`Output::Close`] (a
//! reader's last read, a connect that completes late): the session is the one place that
//! recognises them by their [`ConnId`] and ignores them, so a driver forwards every event as it
//! comes and keeps no table of its own beyond the I/O it owns.
//!
//! The session keeps every piece of protocol state: the plans in flight with the caller's
//! completion handle `W` (a channel's sender in a driver, a number in a test), the slot map,
//! the connections' states and buffers, and every deadline, including the connect timeout
//! (a connect that takes too long ends as an [`Output::Close`]; the driver needs no timer of
//! its own).
//!
//! # A request's life
//!
//! ```text
//!  submit ─► route ──no map yet──► wait for the topology ──┐
//!              │                                           │
//!              ▼                                           │
//!      node's connection ──not open──► Connect, AUTH ──────┤
//!              │ ready                                     │
//!              ▼                                           ▼
//!      outbox ──next poll──► Transmit (one write per connection per drain) ── sent
//!              ▲                                           │
//!              │                                           ▼ reply (FIFO)
//!              │      value / final error ───────────────────────────────► complete
//!              ├───── MOVED: patch the slot, refresh soon, resend (≤ N redirections)
//!              ├───── ASK: ASKING + request, back to back, one write (≤ N redirections)
//!              ├───── NOSCRIPT: EVAL with the source, to the node that said it
//!    backoff ◄─┴───── TRYAGAIN / CLUSTERDOWN / LOADING / MASTERDOWN / READONLY
//!   (seeded jitter,   (≤ attempts, then RetriesExhausted; refresh unless TRYAGAIN)
//!    then re-route)
//!
//!   connection lost: a sent write ends as ReplyLost and is never resent; a sent read and
//!                    an unsent request back off and are re-routed (the map is refreshed)
//!   batch deadline:  Timeout, outcome unknown exactly when a write was sent unanswered
//! ```
//!
//! Every reply is matched to the dispatch that caused it: a late reply to a request that was
//! re-routed, timed out or belongs to an earlier batch of the plan is recognised and dropped.

use std::any::Any;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};

use crate::error::Error;
use crate::error::ServerError;
use crate::framing::{FrameScan, Scanned};
use crate::keys::SLOT_COUNT;
use crate::plan::{Plan, Reply, Step};
use crate::request::{encode_args, Access, NodeTarget, Request, Route};
use crate::retry::{
    classify, handshake, next_attempt, Decision, Handshake, Jitter, NextAttempt, RetryPolicy,
};
use crate::topology::{parse_cluster_slots, NodeAddr, Topology};
use crate::value::{from_frame, Frame, Value};

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
///
/// Durations below one millisecond count as one millisecond (see the drain rule).
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
    /// A cluster connection whose oldest request waits this long asks for a topology refresh,
    /// and again after each such wait, without closing (default 1 s): a master stopped past
    /// the node timeout is replaced meanwhile, and once the map names its successor, its late
    /// answers to writes are not taken as successes.
    pub stall_refresh: Duration,
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
            .field("stall_refresh", &self.stall_refresh)
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
            stall_refresh: Duration::from_secs(1),
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

/// The result of a plan, typed by the plan's output; see [`Completion::into_result`].
///
/// It is the finished plan itself, holding its result: completing a plan allocates nothing.
pub struct Completion(Box<dyn ErasedPlan>);

impl Completion {
    /// The plan's result. `T` is the `Output` of the submitted plan; asking for another type is
    /// a driver bug, reported as an error rather than a panic.
    pub fn into_result<T: 'static>(mut self) -> Result<T, Error> {
        match self.0.output().downcast_mut::<Option<Result<T, Error>>>() {
            Some(output) => output
                .take()
                .unwrap_or_else(|| Err(crate::plan::misuse("completed without a result"))),
            None => Err(Error::UnexpectedReply {
                detail: "completion read as the wrong output type".into(),
            }),
        }
    }
}

/// A plan boxed for [`Session::submit_boxed`]: a driver that moves plans to its session task
/// boxes each one once, where it is submitted.
pub struct BoxedPlan(Box<dyn ErasedPlan>);

impl BoxedPlan {
    /// Boxes `plan`; its output type is recovered by [`Completion::into_result`].
    pub fn new<P: Plan>(plan: P) -> Self {
        BoxedPlan(Box::new(Erased { plan, output: None }))
    }
}

impl fmt::Debug for BoxedPlan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("BoxedPlan(..)")
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
pub enum Output<W> {
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
        /// The caller's completion handle, as submitted.
        waiter: W,
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
    /// The result slot, an `Option<Result<Output, Error>>`.
    fn output(&mut self) -> &mut dyn Any;
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
        // A plan done without a result reads as a misuse in `into_result`.
        Completion(self)
    }

    fn fail(mut self: Box<Self>, error: Error) -> Completion {
        self.output.get_or_insert(Err(error));
        Completion(self)
    }

    fn output(&mut self) -> &mut dyn Any {
        &mut self.output
    }
}

/// The shortest timer: durations below it (zero in a config) count as one tick.
const TICK: Duration = Duration::from_millis(1);

/// A node absent from every complete topology for this long is forgotten (with its idle
/// connection), so that clients of a cluster whose pods come and go do not grow.
pub const FORGET_AFTER: Duration = Duration::from_secs(60);

/// The instant `d` after `t`, and at least a tick later: a timer armed while handling time
/// `t` never falls due at `t` itself, so `handle_timeout` cannot chase its own tail (a connect
/// timeout of zero would otherwise fail, refresh and reconnect forever within one call).
/// `None` when the instant cannot be represented, which means never.
fn after(t: Instant, d: Duration) -> Option<Instant> {
    t.checked_add(d.max(TICK))
}

type NodeId = usize;

/// The owner of every slot, as ranges. A cluster maps its 16384 slots in a few ranges, so routing
/// finds a request's owner with a binary search over a few cache lines. (A dense table of 16384
/// owners missed the cache at almost every random slot once the servers shared the cores: it
/// was most of `pump`'s time in the W1 and W2 profiles.)
#[derive(Debug, Default)]
struct SlotTable {
    /// Disjoint, sorted, and never two adjacent ranges with one owner; a slot in no range has
    /// no known owner.
    ranges: Vec<SlotRange>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct SlotRange {
    first: u16,
    last: u16,
    owner: NodeId,
}

impl SlotTable {
    fn get(&self, slot: u16) -> Option<NodeId> {
        // The last range that starts at or before `slot`.
        let after = self.ranges.partition_point(|r| r.first <= slot);
        let range = self.ranges.get(after.checked_sub(1)?)?;
        (slot <= range.last).then_some(range.owner)
    }

    fn set(&mut self, slot: u16, node: NodeId) {
        self.set_range(slot, slot, node);
    }

    /// Gives slots `first..=last` to `owner`; slots past the last slot are ignored.
    fn set_range(&mut self, first: u16, last: u16, owner: NodeId) {
        let last = last.min(SLOT_COUNT - 1);
        if first > last {
            return;
        }
        let mut ranges = Vec::with_capacity(self.ranges.len() + 2);
        for r in self.ranges.drain(..) {
            if r.last < first || r.first > last {
                ranges.push(r);
                continue;
            }
            // What is left of an overlapped range on either side.
            if r.first < first {
                ranges.push(SlotRange {
                    last: first - 1,
                    ..r
                });
            }
            if r.last > last {
                ranges.push(SlotRange {
                    first: last + 1,
                    ..r
                });
            }
        }
        ranges.push(SlotRange { first, last, owner });
        ranges.sort_unstable_by_key(|r| r.first);
        for r in ranges {
            match self.ranges.last_mut() {
                Some(prev) if prev.owner == r.owner && prev.last + 1 == r.first => {
                    prev.last = r.last;
                }
                _ => self.ranges.push(r),
            }
        }
    }

    fn clear(&mut self) {
        self.ranges.clear();
    }

    fn owners(&self) -> impl Iterator<Item = NodeId> + '_ {
        self.ranges.iter().map(|r| r.owner)
    }
}

/// An op's id: its submission number, and where it is stored. Ids order by submission, and the
/// id of an ended op never finds a later op stored in its place.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct OpId {
    seq: u64,
    index: usize,
}

/// The ops in progress. A slab rather than a map: ops come and go at the request rate, and a
/// B-tree moved every op (about a hundred bytes) around its nodes on inserts and removals.
struct Ops<W> {
    /// Each op with its submission number.
    table: slab::Slab<(u64, Op<W>)>,
    next_seq: u64,
}

impl<W> Default for Ops<W> {
    fn default() -> Self {
        Ops {
            table: slab::Slab::new(),
            next_seq: 0,
        }
    }
}

impl<W> Ops<W> {
    fn insert(&mut self, op: Op<W>) -> OpId {
        self.next_seq += 1;
        let seq = self.next_seq;
        let index = self.table.insert((seq, op));
        OpId { seq, index }
    }

    fn get_mut(&mut self, id: OpId) -> Option<&mut Op<W>> {
        match self.table.get_mut(id.index) {
            Some((seq, op)) if *seq == id.seq => Some(op),
            _ => None,
        }
    }

    fn remove(&mut self, id: OpId) -> Option<Op<W>> {
        self.get_mut(id)?;
        self.table.try_remove(id.index).map(|(_, op)| op)
    }

    fn len(&self) -> usize {
        self.table.len()
    }

    fn iter(&self) -> impl Iterator<Item = &Op<W>> {
        self.table.iter().map(|(_, (_, op))| op)
    }

    /// Every op, in submission order; the table is left empty.
    fn take_all(&mut self) -> Vec<Op<W>> {
        let mut ops: Vec<(u64, Op<W>)> = std::mem::take(&mut self.table)
            .into_iter()
            .map(|(_, entry)| entry)
            .collect();
        ops.sort_by_key(|&(seq, _)| seq);
        ops.into_iter().map(|(_, op)| op).collect()
    }
}

/// One dispatch of one request of an op's current batch.
///
/// `attempt` is unique in the whole session, so a reply, a timer or a queued write that belongs
/// to an earlier dispatch, or to an earlier batch of the same op (whose requests reuse the same
/// indexes), never matches the request as it is now.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct ReqRef {
    op: OpId,
    idx: usize,
    attempt: u64,
}

/// The session's timers, one armed instant per timer (a request's backoff, a plan's wait, a
/// batch's deadline, a connection's check, the refresh), ordered by when they fire. Arming a
/// timer again moves it, and disarming one finds it by name: nothing scans the table.
#[derive(Debug, Default)]
struct Timers {
    queue: BTreeSet<(Instant, Timer)>,
    armed: BTreeMap<Timer, Instant>,
}

impl Timers {
    /// Arms `timer` for `at`, replacing its earlier instant.
    fn arm(&mut self, at: Instant, timer: Timer) {
        if let Some(old) = self.armed.insert(timer, at) {
            self.queue.remove(&(old, timer));
        }
        self.queue.insert((at, timer));
    }

    /// Disarms `timer`, if armed.
    fn disarm(&mut self, timer: Timer) {
        if let Some(at) = self.armed.remove(&timer) {
            self.queue.remove(&(at, timer));
        }
    }

    /// When `timer` fires, if armed.
    fn armed(&self, timer: Timer) -> Option<Instant> {
        self.armed.get(&timer).copied()
    }

    /// The next timer to fire.
    fn first(&self) -> Option<(Instant, Timer)> {
        self.queue.first().copied()
    }

    /// Takes the next timer due at `now`, if any.
    fn pop_due(&mut self, now: Instant) -> Option<Timer> {
        let (at, timer) = self.first()?;
        if at > now {
            return None;
        }
        self.queue.remove(&(at, timer));
        self.armed.remove(&timer);
        Some(timer)
    }

    fn clear(&mut self) {
        self.queue.clear();
        self.armed.clear();
    }
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

/// Something written on a connection that awaits its reply; replies come in this order.
#[derive(Debug)]
enum Pending {
    Request {
        req: ReqRef,
        asking: bool,
    },
    Asking,
    /// The `WAIT` written right after `req` (see [`Request::then_wait`]).
    Wait {
        req: ReqRef,
    },
    /// `AUTH`, or `PING` without credentials: the connection is usable only once a node
    /// answered, so a listener that never answers fails within the connect timeout.
    Handshake,
    Topology(u64),
}

/// Something routed to a connection and not yet handed to the driver.
///
/// Requests are encoded only when the driver drains [`Session::poll`], so a request that ends
/// before that (its deadline passed in the same `handle_timeout`) is never written, and a
/// request counts as sent exactly when its bytes were handed out.
#[derive(Debug)]
enum Queued {
    Request {
        req: ReqRef,
        asking: bool,
    },
    /// The `WAIT` after `req`'s grant, on the connection that carried it.
    Wait {
        req: ReqRef,
    },
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
    read_buf: BytesMut,
    /// How far the reply at the front of `read_buf` has been framed.
    scan: FrameScan,
    /// Written and unanswered, in wire order, each with the time it was written.
    in_flight: VecDeque<(Pending, Instant)>,
    /// Routed here and not yet written: written at the next drain once the connection is ready.
    outbox: Vec<Queued>,
    check_at: Option<Instant>,
}

/// Why a connection is dropped; decides what its requests become.
#[derive(Debug)]
enum Loss {
    /// The TCP connect failed or timed out.
    Connect(String),
    /// The server refused `AUTH`: no request can succeed on this node, so none is retried.
    Auth(String),
    /// The server answered the handshake with another error (`max number of clients
    /// reached`, `BUSY`, ...): a failed connect that passes, so its requests back off and
    /// retry even on a single node.
    Refused(String),
    /// An open connection died: closed by the peer, a protocol error, a response timeout.
    Lost(String),
}

#[derive(Debug)]
struct ReqState {
    request: Request,
    reply: Option<Reply>,
    /// The current dispatch (see [`ReqRef`]).
    attempt: u64,
    retries: u32,
    redirects: u32,
    ask: Option<NodeId>,
    pinned: Option<NodeId>,
    with_source: bool,
    /// Handed to the driver and not answered: a write in this state may have run.
    sent: bool,
    /// The request's own value while the `WAIT` written after it is unanswered.
    granted: Option<Value>,
    /// The slot map's generation when the request was routed: a write answered after the map
    /// changed is checked against the new owner of its slot.
    map_gen: u64,
}

struct Op<W> {
    /// Whoever waits for the plan's result: the driver's handle, kept here until completion.
    waiter: W,
    plan: Box<dyn ErasedPlan>,
    reqs: Vec<ReqState>,
    remaining: usize,
    deadline: Option<Instant>,
    /// The node of the op's first reply: the host of a later `Route::Node` without one
    /// (`:port`, a master whose endpoint that node's `CLUSTER SLOTS` left unknown).
    answered_by: Option<NodeId>,
}

#[derive(Debug, Default)]
struct Refresh {
    round: u64,
    outstanding: usize,
    best: Option<Topology>,
    running: bool,
    last_started: Option<Instant>,
    /// The map was found stale while a round was running: run another one after it.
    again: bool,
    /// A failed round backs off until then, whatever news asks for a refresh meanwhile.
    not_before: Option<Instant>,
    failures: u32,
    last_error: Option<Error>,
}

/// A node whose connect failed: it is not dialled again before `until`.
#[derive(Clone, Copy, Debug)]
struct Down {
    /// Connect failures in a row; the backoff grows with them.
    failures: u32,
    until: Instant,
}

/// The routing session. See the module docs for the driver contract.
pub struct Session<W> {
    config: Config,
    cluster: bool,
    /// The time of the latest input; outputs are stamped with it.
    now: Instant,
    nodes: Vec<NodeAddr>,
    node_ids: BTreeMap<NodeAddr, NodeId>,
    /// Ids of forgotten nodes, reused by the next new ones.
    free_ids: Vec<NodeId>,
    /// Nodes missing from the complete topologies since then (see [`FORGET_AFTER`]).
    absent: BTreeMap<NodeId, Instant>,
    node_conn: BTreeMap<NodeId, ConnId>,
    /// Nodes in connect backoff: one dial per backoff period, however many requests arrive.
    down: BTreeMap<NodeId, Down>,
    slots: SlotTable,
    /// Counts the slot map's changes (see [`ReqState::map_gen`]).
    map_gen: u64,
    map_loaded: bool,
    conns: BTreeMap<ConnId, Conn>,
    next_conn: u64,
    ops: Ops<W>,
    next_attempt: u64,
    unrouted: Vec<ReqRef>,
    to_dispatch: VecDeque<ReqRef>,
    to_advance: VecDeque<OpId>,
    timers: Timers,
    outputs: VecDeque<Output<W>>,
    dirty: BTreeSet<ConnId>,
    /// Where transmits are encoded: each is split off, and once the driver has written and
    /// dropped them, the next ones reuse the allocation.
    write_buf: BytesMut,
    refresh: Refresh,
    jitter: Jitter,
    closed: bool,
}

impl<W> fmt::Debug for Session<W> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Session")
            .field("nodes", &self.nodes)
            .field("conns", &self.conns.len())
            .field("ops", &self.ops.len())
            .field("closed", &self.closed)
            .finish_non_exhaustive()
    }
}

impl<W> Session<W> {
    /// A session that has not connected yet: the first submitted plan (or, for a cluster, the
    /// first topology refresh, which starts at once) opens connections.
    pub fn new(config: Config, now: Instant) -> Self {
        let cluster = matches!(config.endpoints, Endpoints::Cluster(_));
        let mut session = Session {
            jitter: Jitter::new(config.seed),
            config,
            cluster,
            now,
            nodes: Vec::new(),
            node_ids: BTreeMap::new(),
            free_ids: Vec::new(),
            absent: BTreeMap::new(),
            node_conn: BTreeMap::new(),
            down: BTreeMap::new(),
            slots: SlotTable::default(),
            map_gen: 0,
            map_loaded: false,
            conns: BTreeMap::new(),
            next_conn: 1,
            ops: Ops::default(),
            next_attempt: 1,
            unrouted: Vec::new(),
            to_dispatch: VecDeque::new(),
            to_advance: VecDeque::new(),
            timers: Timers::default(),
            outputs: VecDeque::new(),
            dirty: BTreeSet::new(),
            write_buf: BytesMut::new(),
            refresh: Refresh::default(),
            closed: false,
        };
        match session.config.endpoints.clone() {
            Endpoints::Single(addr) => {
                session.intern(addr);
            }
            Endpoints::Cluster(roots) => {
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
            self.slots.get(slot).and_then(|n| self.nodes.get(n))
        } else {
            self.nodes.first()
        }
    }

    /// Plans submitted and not yet complete.
    pub fn in_flight(&self) -> usize {
        self.ops.len()
    }

    /// Nodes the session knows now: the root nodes, the nodes of the topology, and nodes
    /// that left it less than [`FORGET_AFTER`] ago or are still in use.
    pub fn known_nodes(&self) -> usize {
        self.node_ids.len()
    }

    // --- inputs -----------------------------------------------------------------------------

    /// Submits a plan; its result comes back as [`Output::Complete`] with `waiter`.
    pub fn submit<P: Plan>(&mut self, now: Instant, waiter: W, plan: P) {
        self.submit_boxed(now, waiter, BoxedPlan::new(plan));
    }

    /// [`Session::submit`] for a plan boxed already.
    pub fn submit_boxed(&mut self, now: Instant, waiter: W, plan: BoxedPlan) {
        self.now = now;
        let BoxedPlan(plan) = plan;
        if self.closed {
            self.outputs.push_back(Output::Complete {
                waiter,
                result: plan.fail(Error::Closed),
            });
            return;
        }
        let id = self.ops.insert(Op {
            waiter,
            plan,
            reqs: Vec::new(),
            remaining: 0,
            deadline: None,
            answered_by: None,
        });
        self.step_op(now, id, None);
        self.pump(now);
    }

    /// The TCP connection `conn` is open.
    pub fn handle_connected(&mut self, now: Instant, conn: ConnId) {
        self.now = now;
        let auth = self.config.auth.clone();
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        if c.state != ConnState::Connecting {
            return;
        }
        let args = match auth {
            Some(auth) => {
                let mut args = vec![Bytes::from_static(b"AUTH")];
                if let Some(user) = auth.username {
                    args.push(Bytes::from(user));
                }
                args.push(Bytes::from(auth.password));
                args
            }
            None => vec![Bytes::from_static(b"PING")],
        };
        let mut buf = BytesMut::new();
        encode_args(args, &mut buf);
        c.in_flight.push_back((Pending::Handshake, now));
        c.state = ConnState::Handshaking;
        // Nothing else is written on a connection before it is ready, so the handshake can
        // skip the outbox. The connect deadline also covers its reply.
        self.outputs.push_back(Output::Transmit {
            conn,
            bytes: buf.freeze(),
        });
        self.pump(now);
    }

    /// The TCP connect of `conn` failed.
    pub fn handle_connect_failed(&mut self, now: Instant, conn: ConnId, reason: &str) {
        self.now = now;
        if let Some(c) = self.conns.get(&conn) {
            tracing::warn!(node = %self.nodes[c.node], %reason, "connect failed");
        }
        self.drop_conn(now, conn, Loss::Connect(reason.to_owned()));
        self.pump(now);
    }

    /// Bytes arrived on `conn`.
    pub fn handle_read(&mut self, now: Instant, conn: ConnId, data: &[u8]) {
        self.handle_read_buf(now, conn, BytesMut::from(data));
    }

    /// Bytes arrived on `conn`, in a buffer the session may keep: replies are then decoded
    /// without a copy when the reads are contiguous splits of one buffer (as a reader that
    /// `split`s its read buffer produces).
    pub fn handle_read_buf(&mut self, now: Instant, conn: ConnId, data: BytesMut) {
        self.now = now;
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        if c.read_buf.is_empty() {
            c.read_buf = data;
        } else {
            // Zero-copy when `data` continues the buffer in memory; a copy otherwise.
            c.read_buf.unsplit(data);
        }
        // Every complete frame is handled; a frame may drop the connection (a refused AUTH).
        // The scan finds where a reply ends (resuming after each read, refusing deep nesting)
        // before the decoder sees it, so each reply is decoded once, whatever the cuts.
        while let Some(c) = self.conns.get_mut(&conn) {
            let cap = self.config.max_read_buffer;
            let too_big = || format!("a reply exceeds the {cap} byte read buffer cap");
            let len = match c.scan.scan(&c.read_buf) {
                // The cap holds however the bytes were cut: a reply that arrived whole in one
                // read is refused like one that grew past the cap.
                Scanned::Complete(len) if len > cap => {
                    self.protocol_failure(now, conn, too_big());
                    break;
                }
                Scanned::Complete(len) => len,
                Scanned::Incomplete => {
                    if c.read_buf.len() > cap {
                        self.protocol_failure(now, conn, too_big());
                    }
                    break;
                }
                Scanned::Invalid(detail) => {
                    // Nothing after bytes that are not RESP can be framed: the connection is
                    // useless.
                    self.protocol_failure(now, conn, detail);
                    break;
                }
            };
            match redis_protocol::resp2::decode::decode_bytes_mut(&mut c.read_buf) {
                Ok(Some((frame, used, _))) if used == len => {
                    self.on_frame(now, conn, from_frame(frame))
                }
                Ok(Some((_, used, _))) => {
                    let detail = format!("a reply framed as {len} bytes decoded as {used}");
                    self.protocol_failure(now, conn, detail);
                    break;
                }
                Ok(None) => {
                    let detail = format!("a reply framed as {len} bytes did not decode");
                    self.protocol_failure(now, conn, detail);
                    break;
                }
                Err(e) => {
                    self.protocol_failure(now, conn, e.to_string());
                    break;
                }
            }
        }
        self.pump(now);
    }

    /// `conn` was closed by the peer or failed; `reason` says how.
    pub fn handle_closed(&mut self, now: Instant, conn: ConnId, reason: &str) {
        self.now = now;
        if let Some(c) = self.conns.get(&conn) {
            tracing::warn!(node = %self.nodes[c.node], %reason, "connection lost");
        }
        self.drop_conn(now, conn, Loss::Lost(reason.to_owned()));
        self.pump(now);
    }

    /// Time has come to `now`: fires every due timer.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.now = now;
        while let Some(timer) = self.timers.pop_due(now) {
            self.fire(now, timer);
            self.pump(now);
        }
    }

    /// Ends every plan (one with a write sent and unanswered as [`Error::ReplyLost`], the rest
    /// as [`Error::Closed`]) and closes every connection.
    pub fn close(&mut self, now: Instant) {
        self.now = now;
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
        for op in self.ops.take_all() {
            let unknown = op
                .reqs
                .iter()
                .any(|r| r.reply.is_none() && r.sent && r.request.access() == Access::Write);
            let error = if unknown {
                Error::ReplyLost {
                    addr: "(client)".into(),
                    reason: "the client was closed".into(),
                }
            } else {
                Error::Closed
            };
            self.outputs.push_back(Output::Complete {
                waiter: op.waiter,
                result: op.plan.fail(error),
            });
        }
    }

    // --- output -----------------------------------------------------------------------------

    /// The next thing to do. Call until it returns [`Output::Wait`].
    pub fn poll(&mut self) -> Output<W> {
        if let Some(out) = self.outputs.pop_front() {
            return out;
        }
        while let Some(conn) = self.dirty.pop_first() {
            if let Some(bytes) = self.flush(conn) {
                return Output::Transmit { conn, bytes };
            }
        }
        match self.timers.first() {
            Some((until, timer)) => Output::Wait {
                until: Some(until),
                reason: timer.reason(),
            },
            None => Output::Wait {
                until: None,
                reason: TimerReason::Idle,
            },
        }
    }

    /// Encodes a ready connection's outbox into one write; `None` when nothing is left to
    /// write (every queued request ended meanwhile).
    fn flush(&mut self, conn: ConnId) -> Option<Bytes> {
        let now = self.now;
        let c = self.conns.get_mut(&conn)?;
        if c.state != ConnState::Ready {
            return None;
        }
        let was_idle = c.in_flight.is_empty();
        let buf = &mut self.write_buf;
        // Drained in place: the outbox keeps its capacity for the next batch.
        for queued in c.outbox.drain(..) {
            match queued {
                Queued::Request { req, asking } => {
                    let Some(state) = self
                        .ops
                        .get_mut(req.op)
                        .and_then(|op| op.reqs.get_mut(req.idx))
                        .filter(|s| s.attempt == req.attempt && s.reply.is_none())
                    else {
                        continue;
                    };
                    // ASKING and its request go out in one write, back to back: nothing can
                    // come between them on the wire.
                    if asking {
                        encode_args(vec![Bytes::from_static(b"ASKING")], buf);
                        c.in_flight.push_back((Pending::Asking, now));
                    }
                    state.request.encode(state.with_source, buf);
                    state.sent = true;
                    c.in_flight
                        .push_back((Pending::Request { req, asking }, now));
                }
                Queued::Wait { req } => {
                    let wait = self
                        .ops
                        .get_mut(req.op)
                        .and_then(|op| op.reqs.get_mut(req.idx))
                        .filter(|s| s.attempt == req.attempt && s.granted.is_some())
                        .and_then(|s| s.request.wait());
                    let Some((replicas, ms)) = wait else {
                        continue;
                    };
                    let wait = vec![
                        Bytes::from_static(b"WAIT"),
                        Bytes::from(replicas.to_string()),
                        Bytes::from(ms.to_string()),
                    ];
                    encode_args(wait, buf);
                    c.in_flight.push_back((Pending::Wait { req }, now));
                }
                Queued::Topology(round) => {
                    // A round that ended while this query waited needs no answer.
                    if round != self.refresh.round || !self.refresh.running {
                        continue;
                    }
                    encode_args(
                        vec![Bytes::from_static(b"CLUSTER"), Bytes::from_static(b"SLOTS")],
                        buf,
                    );
                    c.in_flight.push_back((Pending::Topology(round), now));
                }
            }
        }
        if buf.is_empty() {
            return None;
        }
        let bytes = buf.split().freeze();
        if was_idle {
            let first = match self.cluster {
                true => self.config.response_timeout.min(self.config.stall_refresh),
                false => self.config.response_timeout,
            };
            if let Some(at) = after(now, first) {
                self.schedule_check(conn, at);
            }
        }
        Some(bytes)
    }

    // --- plans ------------------------------------------------------------------------------

    /// Runs an op's plan until it sends, waits or is done.
    fn step_op(&mut self, now: Instant, id: OpId, replies: Option<Vec<Reply>>) {
        let Some(op) = self.ops.get_mut(id) else {
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
                    let first = self.next_attempt;
                    self.next_attempt += batch.len() as u64;
                    op.remaining = batch.len();
                    op.reqs = batch
                        .into_iter()
                        .zip(first..)
                        .map(|(request, attempt)| ReqState {
                            request,
                            reply: None,
                            attempt,
                            retries: 0,
                            redirects: 0,
                            ask: None,
                            pinned: None,
                            with_source: false,
                            sent: false,
                            granted: None,
                            map_gen: 0,
                        })
                        .collect();
                    // A deadline too far to represent is no deadline.
                    op.deadline = after(now, self.config.request_timeout);
                    if let Some(deadline) = op.deadline {
                        self.timers.arm(deadline, Timer::Deadline(id));
                    }
                    for (idx, attempt) in (first..).take(op.reqs.len()).enumerate() {
                        self.to_dispatch.push_back(ReqRef {
                            op: id,
                            idx,
                            attempt,
                        });
                    }
                    return;
                }
                Step::Wait(d) => {
                    if let Some(at) = after(now, d) {
                        self.timers.arm(at, Timer::PlanWait(id));
                    }
                    return;
                }
                Step::Done(_) => {
                    if let Some(op) = self.ops.remove(id) {
                        self.outputs.push_back(Output::Complete {
                            waiter: op.waiter,
                            result: op.plan.into_completion(),
                        });
                    }
                    return;
                }
            }
        }
        let stuck = crate::plan::misuse("the plan sent 1024 empty batches in a row");
        if let Some(op) = self.ops.remove(id) {
            self.outputs.push_back(Output::Complete {
                waiter: op.waiter,
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
                let replies = self.ops.get_mut(id).map(|op| {
                    if op.deadline.take().is_some() {
                        self.timers.disarm(Timer::Deadline(id));
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

    /// The request as dispatched by `r`, while it awaits its reply; `None` for anything stale.
    fn req_mut(&mut self, r: ReqRef) -> Option<&mut ReqState> {
        self.ops
            .get_mut(r.op)?
            .reqs
            .get_mut(r.idx)
            .filter(|s| s.attempt == r.attempt && s.reply.is_none())
    }

    fn finish(&mut self, r: ReqRef, reply: Reply) {
        let Some(state) = self.req_mut(r) else {
            return;
        };
        state.reply = Some(reply);
        state.sent = false;
        let Some(op) = self.ops.get_mut(r.op) else {
            return;
        };
        op.remaining -= 1;
        if op.remaining == 0 {
            self.to_advance.push_back(r.op);
        }
    }

    /// Schedules another attempt after a backoff, or ends the request when attempts run out.
    fn retry_later(&mut self, now: Instant, r: ReqRef, cause: Error) {
        let policy = self.config.retry;
        let Some(state) = self.req_mut(r) else {
            return;
        };
        state.sent = false;
        state.retries = state.retries.saturating_add(1);
        let failed = state.retries;
        let jitter = self.jitter.next_factor();
        match next_attempt(cause.clone(), failed, false, &policy, jitter) {
            NextAttempt::GiveUp(error) => self.finish(r, Err(error)),
            NextAttempt::After(delay) => match after(now, delay) {
                Some(at) => self.timers.arm(at, Timer::Backoff(r)),
                None => self.finish(r, Err(cause)),
            },
        }
    }

    // --- routing ----------------------------------------------------------------------------

    fn intern(&mut self, addr: NodeAddr) -> NodeId {
        if let Some(&id) = self.node_ids.get(&addr) {
            return id;
        }
        let id = match self.free_ids.pop() {
            Some(id) => {
                self.nodes[id] = addr.clone();
                id
            }
            None => {
                self.nodes.push(addr.clone());
                self.nodes.len() - 1
            }
        };
        self.node_ids.insert(addr, id);
        id
    }

    /// Whether `node`'s connection has waited at least `stall_refresh` for its oldest reply.
    fn is_stalled(&self, node: NodeId, now: Instant) -> bool {
        self.node_conn
            .get(&node)
            .and_then(|c| self.conns.get(c))
            .and_then(|c| c.in_flight.front())
            .and_then(|&(_, written)| after(written, self.config.stall_refresh))
            .is_some_and(|suspect| suspect <= now)
    }

    /// Whether `node` is a live id (not one freed for reuse).
    fn is_known(&self, node: NodeId) -> bool {
        self.nodes
            .get(node)
            .is_some_and(|addr| self.node_ids.get(addr) == Some(&node))
    }

    /// Marks the nodes missing from a complete topology, and forgets those missing for
    /// [`FORGET_AFTER`]: their idle connection closes, and their id is reused. A root node,
    /// a node with requests on its connection, or one a waiting request is bound to (an
    /// `ASK` target, a `NOSCRIPT` node) stays until it is free.
    fn forget_departed(&mut self, now: Instant, topo: &Topology) {
        let present: BTreeSet<NodeId> = topo
            .shards
            .iter()
            .filter_map(|s| self.node_ids.get(&s.master).copied())
            .collect();
        let roots: Vec<NodeAddr> = match &self.config.endpoints {
            Endpoints::Cluster(roots) => roots.clone(),
            Endpoints::Single(addr) => vec![addr.clone()],
        };
        let known: Vec<NodeId> = self.node_ids.values().copied().collect();
        for node in known {
            if present.contains(&node) || roots.contains(&self.nodes[node]) {
                self.absent.remove(&node);
                continue;
            }
            let since = *self.absent.entry(node).or_insert(now);
            if now.saturating_duration_since(since) < FORGET_AFTER {
                continue;
            }
            let busy_conn = self
                .node_conn
                .get(&node)
                .and_then(|c| self.conns.get(c))
                .is_some_and(|c| !c.in_flight.is_empty() || !c.outbox.is_empty());
            let bound = self.ops.iter().any(|op| {
                op.reqs
                    .iter()
                    .any(|r| r.ask == Some(node) || r.pinned == Some(node))
            });
            if busy_conn || bound {
                continue;
            }
            if let Some(conn) = self.node_conn.get(&node).copied() {
                let reason = "the node left the cluster's topology".to_owned();
                self.drop_conn(now, conn, Loss::Lost(reason));
            }
            tracing::debug!(node = %self.nodes[node], "forgetting a node that left the topology");
            self.node_ids.remove(&self.nodes[node]);
            self.absent.remove(&node);
            self.down.remove(&node);
            self.free_ids.push(node);
        }
    }

    fn dial_addr(&self, node: NodeId) -> NodeAddr {
        let addr = &self.nodes[node];
        match &self.config.address_map {
            Some(map) => map(addr),
            None => addr.clone(),
        }
    }

    fn masters(&self) -> BTreeSet<NodeId> {
        self.slots.owners().collect()
    }

    fn is_ready(&self, node: NodeId) -> bool {
        self.node_conn
            .get(&node)
            .and_then(|c| self.conns.get(c))
            .is_some_and(|c| c.state == ConnState::Ready)
    }

    /// Sends one request toward its node, or parks it until the node is known.
    fn dispatch(&mut self, now: Instant, r: ReqRef) {
        let attempt = self.next_attempt;
        self.next_attempt += 1;
        let (cluster, map_loaded) = (self.cluster, self.map_loaded);
        let (response_timeout, map_gen) = (self.config.response_timeout, self.map_gen);
        let Some(state) = self.req_mut(r) else {
            return;
        };
        if let Some((_, ms)) = state.request.wait() {
            if Duration::from_millis(ms) >= response_timeout {
                let error = Error::Config(format!(
                    "a WAIT of {ms} ms is not below the response timeout of \
                     {response_timeout:?}, which would close the connection under it"
                ));
                self.finish(r, Err(error));
                return;
            }
        }
        state.granted = None;
        state.map_gen = map_gen;
        state.attempt = attempt;
        let r = ReqRef { attempt, ..r };
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
                Route::Slot(slot) => match self.slots.get(slot) {
                    Some(node) => Some((node, false)),
                    None if !map_loaded => None,
                    None => {
                        self.refresh_soon(now);
                        let cause = ServerError::new(format!(
                            "CLUSTERDOWN Hash slot {slot} has no known owner"
                        ));
                        self.retry_later(now, r, Error::Server(cause));
                        return;
                    }
                },
                Route::AnyMaster => {
                    let masters = self.masters();
                    let ready = masters.iter().copied().find(|&n| self.is_ready(n));
                    let up = || {
                        masters
                            .iter()
                            .copied()
                            .find(|n| self.down.get(n).is_none_or(|d| d.until <= now))
                    };
                    ready
                        .or_else(up)
                        .or_else(|| masters.first().copied())
                        .map(|n| (n, false))
                }
                Route::Node(NodeTarget::Addr(addr)) => Some((self.intern(addr), false)),
                Route::Node(NodeTarget::Port(port)) => {
                    let answered = self.ops.get_mut(r.op).and_then(|op| op.answered_by);
                    match answered.map(|node| self.nodes[node].host.clone()) {
                        Some(host) => Some((self.intern(NodeAddr::new(host, port)), false)),
                        None => {
                            let error = Error::Config(format!(
                                "a request to :{port} before any node answered the plan: no \
                                 host to send it to"
                            ));
                            self.finish(r, Err(error));
                            return;
                        }
                    }
                }
            }
        };
        match target {
            Some((node, asking)) => {
                // A node in connect backoff gets no new dial: the request waits for the
                // backoff to end (no attempt counted), then routes again, maybe elsewhere.
                let backoff = self.down.get(&node).map(|d| d.until).filter(|&t| t > now);
                match backoff {
                    Some(until) if !self.node_conn.contains_key(&node) => {
                        if let Some(state) = self.req_mut(r) {
                            if asking {
                                state.ask = Some(node);
                            } else if pinned.is_some() {
                                state.pinned = Some(node);
                            }
                        }
                        self.timers.arm(until, Timer::Backoff(r));
                    }
                    _ => self.send_to(now, node, r, asking),
                }
            }
            None => {
                // The first map is on its way (or will be): a running round is not stale, so
                // it is not followed by another.
                self.unrouted.push(r);
                if !self.refresh.running {
                    self.refresh_when_allowed(now);
                }
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
                read_buf: BytesMut::new(),
                scan: FrameScan::default(),
                in_flight: VecDeque::new(),
                outbox: Vec::new(),
                check_at: None,
            },
        );
        self.node_conn.insert(node, conn);
        tracing::debug!(?conn, node = %self.nodes[node], "connecting");
        self.outputs.push_back(Output::Connect {
            conn,
            node: self.nodes[node].clone(),
            dial: self.dial_addr(node),
        });
        if let Some(at) = after(now, self.config.connect_timeout) {
            self.schedule_check(conn, at);
        }
        conn
    }

    /// Queues a write on the node's connection (opening one if needed).
    fn enqueue(&mut self, now: Instant, node: NodeId, queued: Queued) {
        let conn = self.conn_for(now, node);
        if let Some(c) = self.conns.get_mut(&conn) {
            c.outbox.push(queued);
            if c.state == ConnState::Ready {
                self.dirty.insert(conn);
            }
        }
    }

    fn send_to(&mut self, now: Instant, node: NodeId, req: ReqRef, asking: bool) {
        self.enqueue(now, node, Queued::Request { req, asking });
    }

    /// Arms the connection's check timer for `at`, unless an earlier check is armed: a check
    /// re-arms itself for whatever is due next.
    fn schedule_check(&mut self, conn: ConnId, at: Instant) {
        if let Some(c) = self.conns.get_mut(&conn) {
            if c.check_at.is_some_and(|t| t <= at) {
                return;
            }
            c.check_at = Some(at);
            self.timers.arm(at, Timer::Conn(conn));
        }
    }

    fn become_ready(&mut self, conn: ConnId) {
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        c.state = ConnState::Ready;
        self.down.remove(&c.node);
        if !c.outbox.is_empty() {
            self.dirty.insert(conn);
        }
    }

    // --- replies ----------------------------------------------------------------------------

    fn on_frame(&mut self, now: Instant, conn: ConnId, frame: Frame) {
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        let node = c.node;
        let Some((pending, _)) = c.in_flight.pop_front() else {
            // A server may speak before it is asked, to refuse a client it cannot take:
            // that is a failed connect, not a broken protocol.
            if let (false, Err(e)) = (c.state == ConnState::Ready, &frame) {
                let reason = format!("the handshake was refused: {e}");
                self.drop_conn(now, conn, Loss::Refused(reason));
                return;
            }
            self.protocol_failure(now, conn, "a reply with no request".into());
            return;
        };
        match pending {
            Pending::Asking => {}
            Pending::Handshake => match frame {
                Ok(_) => self.become_ready(conn),
                Err(e) => match handshake(&e, self.config.auth.is_some()) {
                    Handshake::Usable => self.become_ready(conn),
                    Handshake::Refused => self.drop_conn(now, conn, Loss::Auth(e.to_string())),
                    Handshake::Failed => {
                        let reason = format!("the handshake was refused: {e}");
                        self.drop_conn(now, conn, Loss::Refused(reason));
                    }
                },
            },
            Pending::Topology(round) => self.on_topology(now, round, node, Ok(frame)),
            Pending::Request { req, asking } => {
                self.on_reply(now, req, (conn, node), asking, frame)
            }
            Pending::Wait { req } => {
                let wait = match frame {
                    Ok(value) => value,
                    Err(e) => Value::Status(Bytes::from(format!("-{e}"))),
                };
                self.finish_granted(req, wait);
            }
        }
    }

    /// Ends a request that was followed by `WAIT`, once `WAIT` answered (or never will:
    /// `wait` is then nil). A stale `WAIT` reply (its request was redirected, or failed) finds
    /// no granted value and is dropped.
    fn finish_granted(&mut self, r: ReqRef, wait: Value) {
        let Some(granted) = self.req_mut(r).and_then(|s| s.granted.take()) else {
            return;
        };
        self.finish(r, Ok(Value::Array(vec![granted, wait])));
    }

    /// A write answered `OK` by a node that, since the request was routed, the map learned
    /// is no longer its slot's master: a master replaced while the request waited (stopped
    /// past the node timeout, cut off) answers what it had queued once it runs again, then
    /// learns it was replaced and discards its data. Such an answer is not a success: the
    /// outcome is unknown. (Only when the map changed meanwhile is the slot looked up.)
    fn answered_by_former_owner(&mut self, r: ReqRef, node: NodeId, asking: bool) -> Option<Error> {
        if !self.cluster || asking {
            return None;
        }
        let map_gen = self.map_gen;
        let state = self.req_mut(r)?;
        if state.map_gen == map_gen || state.request.access() != Access::Write {
            return None;
        }
        let Route::Slot(slot) = *state.request.route() else {
            return None;
        };
        let owner = self.slots.get(slot)?;
        if owner == node {
            return None;
        }
        Some(Error::ReplyLost {
            addr: self.nodes[node].to_string(),
            reason: format!(
                "answered after the map named {} master of slot {slot}: a replaced master \
                 may discard what it answered",
                self.nodes[owner]
            ),
        })
    }

    fn on_reply(
        &mut self,
        now: Instant,
        r: ReqRef,
        (conn, node): (ConnId, NodeId),
        asking: bool,
        frame: Frame,
    ) {
        let cluster = self.cluster;
        let max_redirections = self.config.max_redirections;
        let error = match frame {
            Ok(value) => {
                if let Some(stale) = self.answered_by_former_owner(r, node, asking) {
                    return self.finish(r, Err(stale));
                }
                // A stale reply is ignored, by `finish` and here. The first answer names the
                // host: later nodes of a `SCAN` are named by that node's `CLUSTER SLOTS`.
                if self.req_mut(r).is_some() {
                    if let Some(op) = self.ops.get_mut(r.op) {
                        op.answered_by.get_or_insert(node);
                    }
                }
                // A grant that asked for WAIT completes with WAIT's reply. WAIT counts the
                // writes of its own connection: it goes on the one that carried the grant, and
                // only after something was granted (after a refusal or an error it would only
                // hold the connection up to its timeout, with nothing to wait for).
                if let Some(state) = self.req_mut(r).filter(|s| s.request.wait().is_some()) {
                    if value == Value::Nil {
                        return self.finish(r, Ok(Value::Array(vec![Value::Nil, Value::Nil])));
                    }
                    state.granted = Some(value);
                    match self.conns.get_mut(&conn) {
                        Some(c) => {
                            c.outbox.push(Queued::Wait { req: r });
                            self.dirty.insert(conn);
                        }
                        None => self.finish_granted(r, Value::Nil),
                    }
                    return;
                }
                // `finish` ignores a stale reply.
                return self.finish(r, Ok(value));
            }
            Err(e) => e,
        };
        // A redirect may name no host; it then means the node that answered.
        let host = self.nodes[node].host.clone();
        let Some(state) = self.req_mut(r) else {
            return;
        };
        state.sent = false;
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
                self.slots.set(slot, target);
                self.map_gen += 1;
                self.refresh_soon(now);
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
                    self.refresh_soon(now);
                }
                self.retry_later(now, r, Error::Server(error));
            }
            Decision::NoScript => {
                if state.with_source || state.request.script_ref().is_none() {
                    self.finish(r, Err(Error::Server(error)));
                } else {
                    // The node that lacks the script gets its source; EVAL also loads it
                    // there for later EVALSHA calls.
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

    fn protocol_failure(&mut self, now: Instant, conn: ConnId, detail: String) {
        let addr = self
            .conns
            .get(&conn)
            .map(|c| self.nodes[c.node].to_string())
            .unwrap_or_default();
        tracing::warn!(%addr, %detail, "closing a connection after a protocol error");
        self.drop_conn(now, conn, Loss::Lost(format!("protocol error: {detail}")));
    }

    /// Forgets a connection, tells the driver to release it, and settles everything that was
    /// on it.
    ///
    /// A sent write ends with [`Error::ReplyLost`]: it may have run, so it is never re-sent. A
    /// sent read is retried. A request never written is retried, except when retrying cannot
    /// help: a refused `AUTH`, or a single node that could not be reached (the answer is then
    /// `Connect` within the connect timeout instead of seconds of retries; a cluster node may
    /// be failing over, so cluster requests retry and the map is refreshed). A node whose
    /// connect failed is not dialled again before its backoff ends.
    fn drop_conn(&mut self, now: Instant, conn: ConnId, loss: Loss) {
        let Some(c) = self.conns.remove(&conn) else {
            return;
        };
        // Every forgotten connection is released by the driver, whoever ended it: its tasks
        // and its socket would otherwise outlive it.
        self.outputs.push_back(Output::Close { conn });
        if self.node_conn.get(&c.node) == Some(&conn) {
            self.node_conn.remove(&c.node);
        }
        self.dirty.remove(&conn);
        if c.check_at.is_some() {
            self.timers.disarm(Timer::Conn(conn));
        }
        let addr = self.nodes[c.node].to_string();
        let connected = c.state == ConnState::Ready;
        let (reason, fatal, passing) = match loss {
            Loss::Connect(reason) | Loss::Lost(reason) => (reason, false, false),
            Loss::Auth(reason) => (reason, true, false),
            Loss::Refused(reason) => (reason, false, true),
        };
        if !connected {
            let failures = self.down.get(&c.node).map_or(0, |d| d.failures) + 1;
            let delay = self.config.retry.delay(failures, self.jitter.next_factor());
            if let Some(until) = after(now, delay) {
                self.down.insert(c.node, Down { failures, until });
            }
        }
        let not_sent = if fatal {
            Error::Auth {
                addr: self.dial_addr(c.node).to_string(),
                reason: reason.clone(),
            }
        } else if connected {
            Error::NotSent {
                reason: format!("the connection to {addr} was lost: {reason}"),
            }
        } else {
            Error::Connect {
                addr: self.dial_addr(c.node).to_string(),
                reason: reason.clone(),
            }
        };
        let lost = Error::ReplyLost { addr, reason };
        let give_up = fatal || (!self.cluster && !connected && !passing);
        for (pending, _) in c.in_flight {
            match pending {
                Pending::Request { req, .. } => {
                    match self.req_mut(req).map(|s| s.request.access()) {
                        Some(Access::Write) => self.finish(req, Err(lost.clone())),
                        Some(Access::Read) => self.retry_later(now, req, lost.clone()),
                        None => {}
                    }
                }
                Pending::Topology(round) => self.on_topology(now, round, c.node, Err(lost.clone())),
                // The request was answered, its WAIT was not: replication unknown.
                Pending::Wait { req } => self.finish_granted(req, Value::Nil),
                Pending::Asking | Pending::Handshake => {}
            }
        }
        for queued in c.outbox {
            match queued {
                Queued::Request { req, .. } if give_up => self.finish(req, Err(not_sent.clone())),
                Queued::Request { req, .. } => self.retry_later(now, req, not_sent.clone()),
                // The grant was answered, its WAIT never written: replication unknown.
                Queued::Wait { req } => self.finish_granted(req, Value::Nil),
                Queued::Topology(round) => {
                    self.on_topology(now, round, c.node, Err(not_sent.clone()))
                }
            }
        }
        // A node that went away may have been failed over: the map is suspect.
        self.refresh_soon(now);
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

    /// Ends every open request of the op's batch with `Timeout`. Their bytes may still be on
    /// a connection; late replies are recognised as stale and dropped.
    fn expire(&mut self, id: OpId) {
        let Some(op) = self.ops.get_mut(id) else {
            return;
        };
        op.deadline = None;
        let open: Vec<(ReqRef, bool)> = op
            .reqs
            .iter()
            .enumerate()
            .filter(|(_, s)| s.reply.is_none())
            .map(|(idx, s)| {
                let r = ReqRef {
                    op: id,
                    idx,
                    attempt: s.attempt,
                };
                (r, s.sent && s.request.access() == Access::Write)
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
        let stall_refresh = self.config.stall_refresh;
        let cluster = self.cluster;
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        c.check_at = None;
        let addr = self.nodes[c.node].to_string();
        // The connect deadline covers the TCP connect and the AUTH exchange.
        let (due, written) = if c.state == ConnState::Ready {
            match c.in_flight.front() {
                Some(&(_, written)) => (after(written, response_timeout), Some(written)),
                None => return,
            }
        } else {
            (after(c.opened, connect_timeout), None)
        };
        let Some(due) = due else {
            return;
        };
        let connecting = written.is_none();
        if now < due {
            // A stall short of the response timeout: refresh the map meanwhile (a replaced
            // master's late answers are then recognised), and look again a while later.
            let next = match written.and_then(|w| after(w, stall_refresh)) {
                Some(suspect) if cluster && suspect <= now => {
                    self.refresh_soon(now);
                    after(now, stall_refresh).map_or(due, |t| t.min(due))
                }
                Some(suspect) if cluster => suspect.min(due),
                _ => due,
            };
            self.schedule_check(conn, next);
            return;
        }
        if connecting {
            tracing::warn!(%addr, "connect timed out");
            let reason = format!("no connection within {connect_timeout:?}");
            self.drop_conn(now, conn, Loss::Connect(reason));
        } else {
            tracing::warn!(%addr, "no reply within the response timeout; closing the connection");
            let reason = format!("no reply within {response_timeout:?}");
            self.drop_conn(now, conn, Loss::Lost(reason));
        }
    }

    // --- topology ---------------------------------------------------------------------------

    /// The map may be stale (`MOVED`, `READONLY`, a lost node): refresh now, or once the rate
    /// limit allows; a running refresh is followed by another, since it may predate the news.
    fn refresh_soon(&mut self, now: Instant) {
        if self.refresh.running {
            self.refresh.again = true;
        } else {
            self.refresh_when_allowed(now);
        }
    }

    /// Starts a refresh now if none started within `refresh_min_interval`, else arms the timer.
    fn refresh_when_allowed(&mut self, now: Instant) {
        if !self.cluster || self.closed {
            return;
        }
        let earliest = self
            .refresh
            .last_started
            .and_then(|t| after(t, self.config.refresh_min_interval))
            .unwrap_or(now)
            .max(self.refresh.not_before.unwrap_or(now));
        if earliest <= now {
            self.start_refresh(now);
        } else {
            self.set_refresh_timer(earliest);
        }
    }

    /// Arms the refresh timer for `at` (not before a failed round's backoff ends), unless it
    /// is armed earlier.
    fn set_refresh_timer(&mut self, at: Instant) {
        let at = at.max(self.refresh.not_before.unwrap_or(at));
        if self.timers.armed(Timer::Refresh).is_some_and(|t| t <= at) {
            return;
        }
        self.timers.arm(at, Timer::Refresh);
    }

    fn start_refresh(&mut self, now: Instant) {
        if !self.cluster || self.closed || self.refresh.running {
            return;
        }
        self.timers.disarm(Timer::Refresh);
        // Ask two nodes: masters with a live connection first, then other masters, then the
        // root nodes, then anything known. The first stays; the second rotates by round, so a
        // dead or stalled node is not the only one asked round after round.
        let masters = self.masters();
        let roots: Vec<NodeId> = match &self.config.endpoints {
            Endpoints::Cluster(roots) => roots
                .iter()
                .filter_map(|r| self.node_ids.get(r).copied())
                .collect(),
            Endpoints::Single(_) => Vec::new(),
        };
        let ready = masters.iter().copied().filter(|&n| self.is_ready(n));
        let idle = masters.iter().copied().filter(|&n| !self.is_ready(n));
        let preferred: Vec<NodeId> = ready.chain(idle).chain(roots).collect();
        // Avoided while another node is left: a node in connect backoff (a round must not
        // dial it again early), and one whose connection has long waited for a reply (the
        // query would queue behind the stall, and so would everything routed there after it).
        let avoid =
            |n: NodeId| self.down.get(&n).is_some_and(|d| d.until > now) || self.is_stalled(n, now);
        let mut unique: Vec<NodeId> = Vec::new();
        for &n in preferred.iter().filter(|&&n| !avoid(n)) {
            if !unique.contains(&n) {
                unique.push(n);
            }
        }
        if unique.is_empty() {
            let known = (0..self.nodes.len()).filter(|&n| self.is_known(n));
            for n in preferred.iter().copied().chain(known) {
                if !unique.contains(&n) {
                    unique.push(n);
                }
            }
        }
        let Some(&first) = unique.first() else {
            // A cluster without a single known node can never get a map.
            let error = Error::Config("a cluster needs at least one root node".into());
            for r in std::mem::take(&mut self.unrouted) {
                self.finish(r, Err(error.clone()));
            }
            return;
        };
        let mut chosen = vec![first];
        let rest = &unique[1..];
        if !rest.is_empty() {
            let offset = usize::try_from(self.refresh.round).unwrap_or(0);
            chosen.push(rest[offset % rest.len()]);
        }
        self.refresh.round += 1;
        self.refresh.running = true;
        self.refresh.again = false;
        self.refresh.best = None;
        self.refresh.last_error = None;
        self.refresh.last_started = Some(now);
        self.refresh.outstanding = chosen.len();
        let round = self.refresh.round;
        for node in chosen {
            self.enqueue(now, node, Queued::Topology(round));
        }
    }

    /// One node's answer to a round, or why there is none.
    fn on_topology(
        &mut self,
        now: Instant,
        round: u64,
        node: NodeId,
        answer: Result<Frame, Error>,
    ) {
        if round != self.refresh.round || !self.refresh.running {
            return;
        }
        self.refresh.outstanding = self.refresh.outstanding.saturating_sub(1);
        let host = self.nodes[node].host.clone();
        match answer {
            Ok(Ok(value)) => match parse_cluster_slots(&value, &host) {
                Ok(topo) if topo.is_complete() => {
                    // A complete answer is the best there can be: the round is over.
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
            Ok(Err(e)) => self.refresh.last_error = Some(Error::Server(e)),
            Err(e) => self.refresh.last_error = Some(e),
        }
        if self.refresh.outstanding == 0 {
            self.end_refresh(now);
        }
    }

    fn end_refresh(&mut self, now: Instant) {
        self.refresh.running = false;
        let best = self.refresh.best.take().filter(|t| t.coverage() > 0);
        if let Some(topo) = best {
            self.refresh.failures = 0;
            self.refresh.not_before = None;
            self.apply_topology(&topo);
            if topo.is_complete() {
                self.forget_departed(now, &topo);
            }
            if let Some(next) = after(now, self.config.refresh_interval) {
                self.set_refresh_timer(next);
            }
            if self.refresh.again {
                self.refresh_when_allowed(now);
            }
            return;
        }
        self.refresh.failures = self.refresh.failures.saturating_add(1);
        let failures = self.refresh.failures;
        tracing::warn!(failures, "topology refresh failed");
        // Requests waiting for a first map count the failed round as an attempt; a refused
        // AUTH ends them at once, since no round will do better.
        if !self.map_loaded {
            let cause = self.refresh.last_error.clone().unwrap_or(Error::NotSent {
                reason: "no node answered CLUSTER SLOTS".into(),
            });
            let fatal = matches!(cause, Error::Auth { .. });
            let policy = self.config.retry;
            for r in std::mem::take(&mut self.unrouted) {
                let Some(state) = self.req_mut(r) else {
                    continue;
                };
                state.retries = state.retries.saturating_add(1);
                // The next round's own backoff paces them: only the verdict is used here, and
                // the round's error (not a reply to the request) is handed on as it is.
                match next_attempt(cause.clone(), state.retries, fatal, &policy, 1.0) {
                    NextAttempt::GiveUp(_) => self.finish(r, Err(cause.clone())),
                    NextAttempt::After(_) => self.unrouted.push(r),
                }
            }
        }
        let delay = self
            .config
            .retry
            .delay(failures, self.jitter.next_factor())
            .max(self.config.refresh_min_interval);
        if let Some(at) = after(now, delay) {
            self.refresh.not_before = Some(at);
            self.set_refresh_timer(at);
        }
    }

    fn apply_topology(&mut self, topo: &Topology) {
        self.map_gen += 1;
        if topo.is_complete() {
            self.slots.clear();
        }
        for shard in &topo.shards {
            let node = self.intern(shard.master.clone());
            for &(start, end) in &shard.ranges {
                self.slots.set_range(start, end, node);
            }
        }
        self.map_loaded = true;
        let waiting = std::mem::take(&mut self.unrouted);
        self.to_dispatch.extend(waiting);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(waiter: u64) -> Op<u64> {
        Op {
            waiter,
            plan: BoxedPlan::new(crate::plan::single(
                Request::cmd(Access::Read, "PING").build().unwrap(),
                |_| Ok(()),
            ))
            .0,
            reqs: Vec::new(),
            remaining: 0,
            deadline: None,
            answered_by: None,
        }
    }

    /// A change to the slot table: give a range to a node, or forget every owner.
    #[derive(Clone, Debug)]
    enum Change {
        Give { first: u16, len: u16, owner: NodeId },
        Clear,
    }

    fn change() -> impl proptest::strategy::Strategy<Value = Change> {
        use proptest::prelude::*;
        // Boundaries from a few points, so that ranges often start or end on each other.
        let point = prop_oneof![
            3 => proptest::sample::select(vec![
                0u16, 1, 2, 100, 101, 5460, 5461, 5462, 16382, 16383, 16384,
            ]),
            1 => 0u16..16_400,
        ];
        let len = prop_oneof![
            3 => proptest::sample::select(vec![0u16, 1, 2, 99, 100, 5360, 5460, 5461]),
            1 => 0u16..17_000,
        ];
        prop_oneof![
            12 => (point, len, 0usize..4)
                .prop_map(|(first, len, owner)| Change::Give { first, len, owner }),
            1 => Just(Change::Clear),
        ]
    }

    proptest::proptest! {
        /// The ranges answer every slot as a dense table of 16384 owners would, and stay
        /// disjoint, sorted and merged.
        #[test]
        fn the_slot_table_agrees_with_a_dense_one(
            changes in proptest::collection::vec(change(), 0..40),
        ) {
            let mut table = SlotTable::default();
            let mut dense: Vec<Option<NodeId>> = vec![None; usize::from(SLOT_COUNT)];
            for change in changes {
                match change {
                    Change::Give { first, len, owner } => {
                        let last = first.saturating_add(len);
                        table.set_range(first, last, owner);
                        for slot in first..=last.min(SLOT_COUNT - 1) {
                            dense[usize::from(slot)] = Some(owner);
                        }
                    }
                    Change::Clear => {
                        table.clear();
                        dense.fill(None);
                    }
                }
                for slot in 0..SLOT_COUNT {
                    proptest::prop_assert_eq!(table.get(slot), dense[usize::from(slot)]);
                }
                for pair in table.ranges.windows(2) {
                    proptest::prop_assert!(pair[0].first <= pair[0].last);
                    proptest::prop_assert!(pair[0].last < pair[1].first);
                    let adjacent = pair[0].last + 1 == pair[1].first;
                    proptest::prop_assert!(!(adjacent && pair[0].owner == pair[1].owner));
                }
            }
            // Past the last slot nothing is owned.
            proptest::prop_assert_eq!(table.get(SLOT_COUNT), None);
            proptest::prop_assert_eq!(table.get(u16::MAX), None);
        }
    }

    #[test]
    fn an_ended_ops_id_never_finds_a_later_op() {
        let mut ops = Ops::default();
        let first = ops.insert(op(1));
        assert_eq!(ops.remove(first).map(|op| op.waiter), Some(1));
        // The place is reused; the old id must not find the new op.
        let second = ops.insert(op(2));
        assert_eq!(second.index, first.index);
        assert!(ops.get_mut(first).is_none());
        assert!(ops.remove(first).is_none());
        assert_eq!(ops.len(), 1);
        let third = ops.insert(op(3));
        assert!(first < second && second < third, "ids order by submission");
        let waiters: Vec<u64> = ops.take_all().into_iter().map(|op| op.waiter).collect();
        assert_eq!(waiters, [2, 3]);
        assert_eq!(ops.len(), 0);
    }
}
