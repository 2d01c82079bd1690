//! The routing session: the one state machine a driver talks to.
//!
//! It owns the slot map, one pipelined connection per node, the timers, and every routing and
//! retry decision (`docs/architecture.md`, "Retries, as implemented"). It performs no I/O: the
//! driver feeds it events through the `handle_*` methods and carries out what
//! [`Session::poll`] returns.
//!
//! # The driver contract
//!
//! Methods come in three kinds:
//!
//! - **inputs**: [`Session::submit`], [`Session::handle_connected`],
//!   [`Session::handle_connect_failed`], [`Session::handle_read`], [`Session::handle_closed`],
//!   [`Session::handle_timeout`], [`Session::close`]. Each takes `now`, the driver's clock;
//!   `now` must never go back.
//! - **output**: [`Session::poll`] returns one [`Output`] at a time; a finished plan comes as
//!   [`Output::Complete`], and [`Completion::deliver`] hands its result, typed, to its
//!   [`Waiters::Waiter`].
//! - **getters**: [`Session::is_closed`], [`Session::slot_owner`], [`Session::in_flight`],
//!   [`Session::known_nodes`], [`Session::tally`] (the routing events counted, for a driver
//!   that exports metrics; each [`Completion::summary`] tells what became of its plan).
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
//! The session keeps every piece of protocol state: the plans in flight, each with its caller's
//! waiter (of the driver's family `W`: a channel's sender, a test's ticket), the slot map,
//! the connections' states and buffers, and every deadline, including the connect timeout
//! (a connect that takes too long ends as an [`Output::Close`]; the driver needs no timer of
//! its own).
//!
//! # A driver in a few lines
//!
//! A blocking driver for one node that runs one plan: every output is carried out, every
//! outcome comes back as an input. (`botmesh-redis-client` is the real one: it waits on every
//! socket and on the deadline at once, and runs many plans.)
//!
//! ```no_run
//! use std::collections::BTreeMap;
//! use std::io::{ErrorKind, Read, Write};
//! use std::net::TcpStream;
//! use std::time::Instant;
//!
//! use std::sync::mpsc;
//!
//! use botmesh_redis_core::driver::session::{Config, DialTarget, Output, Session, Waiters};
//! use botmesh_redis_core::driver::plan;
//! use botmesh_redis_core::{Access, Error, NodeAddr, Request};
//!
//! /// The driver's waiters: a channel per plan, typed by the plan's output.
//! struct Channels;
//!
//! impl Waiters for Channels {
//!     type Waiter<T: Send + 'static> = mpsc::Sender<Result<T, Error>>;
//!     type Delivered = ();
//!
//!     fn deliver<T: Send + 'static>(waiter: Self::Waiter<T>, result: Result<T, Error>) {
//!         let _ = waiter.send(result);
//!     }
//! }
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let node = NodeAddr::new("127.0.0.1", 6379);
//! let mut session = Session::<Channels>::new(Config::single(node), Instant::now());
//! let ping = Request::cmd(Access::Read, "PING").build()?;
//! let (waiter, reply) = mpsc::channel();
//! session.submit(Instant::now(), waiter, plan::single("ping", ping, Ok));
//! let mut sockets: BTreeMap<_, TcpStream> = BTreeMap::new();
//! loop {
//!     match session.poll() {
//!         // This driver speaks TCP only (`DialTarget::Unix` is a Unix socket's path).
//!         Output::Connect { conn, dial: DialTarget::Unix(_), .. } => {
//!             session.handle_connect_failed(Instant::now(), conn, "no Unix sockets here");
//!         }
//!         Output::Connect { conn, dial: DialTarget::Tcp(dial), .. } => {
//!             match TcpStream::connect((dial.host.as_str(), dial.port)) {
//!                 Ok(socket) => {
//!                     sockets.insert(conn, socket);
//!                     session.handle_connected(Instant::now(), conn);
//!                 }
//!                 Err(e) => session.handle_connect_failed(Instant::now(), conn, &e.to_string()),
//!             }
//!         }
//!         Output::Transmit { conn, bytes } => {
//!             if let Some(socket) = sockets.get_mut(&conn) {
//!                 if let Err(e) = socket.write_all(&bytes) {
//!                     session.handle_closed(Instant::now(), conn, &e.to_string());
//!                 }
//!             }
//!         }
//!         Output::Close { conn } => {
//!             sockets.remove(&conn);
//!         }
//!         Output::Complete(completion) => {
//!             completion.deliver();
//!             // The plan's own output type: no downcast.
//!             let pong: botmesh_redis_core::Value = reply.recv()??;
//!             println!("ping: {pong:?}");
//!             return Ok(());
//!         }
//!         Output::Wait { until, .. } => {
//!             // Read until the deadline; then tell the session the time has come.
//!             let Some((&conn, socket)) = sockets.iter_mut().next() else {
//!                 // Nothing to read (a node in connect backoff): sleep until the deadline.
//!                 if let Some(until) = until {
//!                     std::thread::sleep(until.saturating_duration_since(Instant::now()));
//!                 }
//!                 session.handle_timeout(Instant::now());
//!                 continue;
//!             };
//!             let left = until.map(|t| t.saturating_duration_since(Instant::now()));
//!             socket.set_read_timeout(left.filter(|d| !d.is_zero()))?;
//!             let mut buf = [0u8; 16 * 1024];
//!             match socket.read(&mut buf) {
//!                 Ok(0) => session.handle_closed(Instant::now(), conn, "closed by the server"),
//!                 Ok(n) => session.handle_read(Instant::now(), conn, &buf[..n]),
//!                 Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
//!                     session.handle_timeout(Instant::now())
//!                 }
//!                 Err(e) => session.handle_closed(Instant::now(), conn, &e.to_string()),
//!             }
//!         }
//!     }
//! }
//! # }
//! ```
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
//!
//! # Rooms
//!
//! This file keeps the [`Session`] itself, its inputs, [`Session::poll`] and the work queues.
//! Each piece of state has one owner, in the file named after it; the session's methods that
//! join two rooms live beside the decision they make:
//!
//! | file | holds |
//! | - | - |
//! | `config.rs` | [`Config`]: endpoints (and so the [`Deployment`]), credentials, timeouts, retry policy |
//! | `plans.rs` | [`Waiters`], [`Submission`] and [`Completion`]: plans with their output type erased, each boxed with its caller's waiter, typed by the plan's output |
//! | `ops.rs` | `Ops`, the one slab of ops in flight (each plan with its caller's waiter and its current batch); stepping a plan, ending a request, the retry of a request |
//! | `nodes.rs` | `Nodes`, the node registry: addresses and their ids (reused after a node is forgotten), the connection each node uses, connect backoff, absence from the topology |
//! | `slots.rs` | `SlotTable`: the owner of every slot, as ranges |
//! | `routing.rs` | where a request goes: `Session::route` decides from the state alone (table-tested), `Session::dispatch` carries the decision out |
//! | `conns.rs` | one `Conn` per connection: state, outbox, replies in flight, read buffer, deadlines, and what a lost connection means for its requests |
//! | `replies.rs` | a reply matched to its dispatch; a value (a grant's `WAIT`, a stale master's answer) and an error (redirections, retries, the end) |
//! | `refresh.rs` | `Refresh`: the topology rounds, their backoff, applying a map, forgetting departed nodes |
//! | `sentinel.rs` | `Sentinels`: a Redis Sentinel deployment's sentinels and the master they named; the questions to them, the `ROLE` check, `+switch-master` |
//! | `timers.rs` | `Timers`, by kind (batch deadlines in a queue in firing order, the rest in a table by instant), and what firing one does |

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fmt;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};

use crate::addr::{DialTarget, NodeAddr};
use crate::error::Error;
use crate::executor::Deployment;
pub use crate::framing::{Decoded, ReplyDecoder};
use crate::plan::{misuse, Plan};
use crate::request::Access;
use crate::retry::Jitter;
use crate::wire::encode_args;

mod config;
mod conns;
mod ids;
mod nodes;
mod ops;
mod plans;
mod refresh;
mod replies;
mod routing;
mod sentinel;
mod slots;
mod tally;
mod timers;

pub use config::{AddressMap, Auth, Config, Endpoints, SentinelEndpoints};
pub use ids::ConnId;
pub use plans::{Completion, Submission, Waiters};
pub use tally::{Event, RetryReason, Summary, Tally};
pub use timers::TimerReason;

use conns::{Conn, ConnState, Loss, Pending};
use ids::{NodeId, OpId, ReqRef};
use nodes::Nodes;
use ops::{Input, Op, Ops, ReqState};
use refresh::Refresh;
use sentinel::Sentinels;
pub use slots::SlotOwners;
use slots::SlotTable;
use timers::Timers;

/// What the driver must do next.
#[derive(Debug)]
pub enum Output<W: Waiters> {
    /// Open a connection to `dial` (TCP, or a Unix socket); report with `handle_connected` or
    /// `handle_connect_failed`. `node` is the cluster's name for it.
    Connect {
        /// The new connection.
        conn: ConnId,
        /// The node's announced address ([`NodeAddr::unix_socket`] for a Unix socket).
        node: NodeAddr,
        /// Where to connect: the address after the address map, or the socket's path.
        dial: DialTarget,
    },
    /// Write these bytes to the connection, after any earlier transmit of it.
    Transmit {
        /// The connection.
        conn: ConnId,
        /// The bytes.
        bytes: Bytes,
    },
    /// Close the connection: stop its tasks and drop its socket. Events of it that still
    /// arrive may be reported; the session ignores them.
    Close {
        /// The connection.
        conn: ConnId,
    },
    /// A plan finished: hand its result to its waiter with [`Completion::deliver`].
    Complete(Completion<W>),
    /// Nothing more to do until `until` (or the next input). `None`: until the next input.
    Wait {
        /// The next deadline.
        until: Option<Instant>,
        /// What it is for.
        reason: TimerReason,
    },
}

/// The shortest timer: durations below it (zero in a config) count as one tick.
const TICK: Duration = Duration::from_millis(1);

/// How many drained request-state vectors the session keeps for the next plans, and up to
/// what capacity: enough for the plans of one busy pass, without holding a listing's size.
const SPARE_REQS: usize = 256;
const SPARE_REQS_CAPACITY: usize = 64;

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

/// The routing session. See the module docs for the driver contract.
pub struct Session<W: Waiters> {
    config: Config,
    /// The time of the latest input; outputs are stamped with it.
    now: Instant,
    /// Every node known, with its connection and its connect backoff.
    nodes: Nodes,
    slots: SlotTable,
    /// Counts the slot map's changes (see [`ReqState::map_gen`]).
    map_gen: u64,
    map_loaded: bool,
    conns: BTreeMap<ConnId, Conn>,
    next_conn: u64,
    /// When a single node's connection was last retired for answering as a replica
    /// ([`Session::retire`]): at most one a second, so a client pointed at a replica on
    /// purpose does not dial again at every refused write.
    last_retire: Option<Instant>,
    ops: Ops<W>,
    /// Drained request-state vectors of finished plans, for the next ones (a vector a call
    /// saved, out of a dozen allocations a `GET` costs).
    spare_reqs: Vec<Vec<ReqState>>,
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
    /// The routing events counted since the session began ([`Session::tally`]).
    tally: Tally,
    /// The sentinels and the master they named, when the endpoints are a Sentinel deployment.
    sentinels: Sentinels,
    jitter: Jitter,
    /// [`Session::stop_accepting`] was called: new plans are refused, those in progress go on.
    stopping: bool,
    closed: bool,
}

impl<W: Waiters> fmt::Debug for Session<W> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Session")
            .field("nodes", &self.nodes)
            .field("conns", &self.conns.len())
            .field("ops", &self.ops.len())
            .field("closed", &self.closed)
            .finish_non_exhaustive()
    }
}

impl<W: Waiters> Session<W> {
    /// A session that has not connected yet: the first submitted plan (or, for a cluster, the
    /// first topology refresh, which starts at once) opens connections.
    pub fn new(config: Config, now: Instant) -> Self {
        let mut session = Session {
            jitter: Jitter::new(config.seed),
            config,
            now,
            nodes: Nodes::default(),
            slots: SlotTable::default(),
            map_gen: 0,
            map_loaded: false,
            conns: BTreeMap::new(),
            next_conn: 1,
            last_retire: None,
            ops: Ops::default(),
            spare_reqs: Vec::new(),
            next_attempt: 1,
            unrouted: Vec::new(),
            to_dispatch: VecDeque::new(),
            to_advance: VecDeque::new(),
            timers: Timers::default(),
            outputs: VecDeque::new(),
            dirty: BTreeSet::new(),
            write_buf: BytesMut::new(),
            refresh: Refresh::default(),
            tally: Tally::default(),
            sentinels: Sentinels::default(),
            stopping: false,
            closed: false,
        };
        match session.config.endpoints.clone() {
            Endpoints::Cluster(roots) => {
                for addr in roots {
                    session.nodes.intern(addr);
                }
                session.start_refresh(now);
            }
            Endpoints::Sentinel(_) => {
                session.sentinels = Sentinels::new(&session.config.endpoints, &mut session.nodes);
                session.start_refresh(now);
            }
            single => {
                if let Some(node) = single.single_node() {
                    session.nodes.intern(node);
                }
            }
        }
        session
    }

    // --- getters ----------------------------------------------------------------------------

    /// Whether [`Session::close`] was called.
    pub fn is_closed(&self) -> bool {
        self.closed
    }

    /// The slot map as numbers, for a driver's callers to read without the session: the
    /// number of each slot's owner, the same for every slot of one node, kept current as the
    /// map changes. Empty on a single node. A client counts its calls out to each node of a
    /// cluster with it (each node's share of its room), before the session routes them.
    pub fn slot_owners(&self) -> SlotOwners {
        self.slots.owners.clone()
    }

    /// The master the session would send `slot` to now, if it knows one.
    pub fn slot_owner(&self, slot: u16) -> Option<&NodeAddr> {
        if self.is_cluster() {
            self.slots.get(slot).and_then(|n| self.nodes.get(n))
        } else {
            self.single_node().and_then(|n| self.nodes.get(n))
        }
    }

    /// Plans with a batch of requests out, sent or queued: what a graceful close waits for. A
    /// plan between its steps, in a wait it asked for (a turn's poll interval, a keeper's
    /// period), has nothing out.
    pub fn sending(&self) -> usize {
        self.ops.iter().filter(|op| op.remaining > 0).count()
    }

    /// Whether at most `most` plans have a batch of requests out ([`Session::sending`]), found
    /// without counting them all: the plans in flight bound the count at no cost, and the walk
    /// (plans between their steps, a keeper's period or a turn's poll interval, do not count)
    /// stops at the first plan past `most`. A driver asks it for every call; a walk of every
    /// plan each time made a backlog of calls quadratic (on one thread, 18,000 calls a second
    /// with a master stopped: 120,000 calls still waiting seconds after the arrivals ended).
    pub fn sending_at_most(&self, most: usize) -> bool {
        self.ops.len() <= most
            || self
                .ops
                .iter()
                .filter(|op| op.remaining > 0)
                .nth(most)
                .is_none()
    }

    /// Plans submitted and not yet complete.
    pub fn in_flight(&self) -> usize {
        self.ops.len()
    }

    /// Nodes the session knows now: the root nodes, the nodes of the topology, and nodes
    /// that left it less than [`FORGET_AFTER`] ago or are still in use.
    pub fn known_nodes(&self) -> usize {
        self.nodes.len()
    }

    /// The routing events counted since the session began: redirects, retries by reason,
    /// timeouts, topology refreshes. Counts only grow.
    pub fn tally(&self) -> &Tally {
        &self.tally
    }

    /// Whether the session talks to a Redis Cluster: its configuration's endpoints say.
    fn is_cluster(&self) -> bool {
        self.config.endpoints.deployment() == Deployment::Cluster
    }

    /// Whether the node in use may change under the session, so that news of a change (a lost
    /// connection, `READONLY`, a stall) asks where it went: a cluster's slot map, a Sentinel
    /// deployment's master.
    fn follows_failovers(&self) -> bool {
        matches!(
            self.config.endpoints,
            Endpoints::Cluster(_) | Endpoints::Sentinel(_)
        )
    }

    /// Where every request of a session without a slot map goes: the one node, or the master
    /// the sentinels named (none before they answered).
    fn single_node(&self) -> Option<NodeId> {
        match self.config.endpoints {
            Endpoints::Sentinel(_) => self.sentinels.master,
            _ => Some(0),
        }
    }

    // --- inputs -----------------------------------------------------------------------------

    /// Submits a plan; its result comes back as [`Output::Complete`], whose
    /// [`Completion::deliver`] hands it to `waiter`. A plan whose caller already stopped
    /// waiting ([`Waiters::abandoned`]) ends at once with [`Error::NotSent`], not started.
    pub fn submit<P: Plan>(&mut self, now: Instant, waiter: W::Waiter<P::Output>, plan: P) {
        self.submit_boxed(now, Submission::new(plan, waiter));
    }

    /// [`Session::submit`] for a plan boxed with its waiter already.
    pub fn submit_boxed(&mut self, now: Instant, submission: Submission<W>) {
        self.now = now;
        let Submission(mut plan) = submission;
        // A call that waited before the session has that wait counted in its request
        // timeout; one whose deadline passed on its way was never written, and says so.
        let held = plan.since().map(|since| since.min(now));
        let refusal = if self.closed || self.stopping {
            Some(Error::Closed)
        } else if plan.abandoned() {
            Some(plans::given_up())
        } else if *plan.expired()
            || held.is_some_and(|since| {
                after(since, self.config.request_timeout).is_some_and(|due| due <= now)
            })
        {
            Some(Error::Timeout {
                outcome_unknown: false,
            })
        } else {
            None
        };
        if let Some(error) = refusal {
            if matches!(error, Error::Timeout { .. }) {
                self.tally.count(Event::RequestTimeout);
            }
            if let Some(since) = held {
                plan.summary_mut().elapsed = now.saturating_duration_since(since);
            }
            plan.fail(error);
            self.outputs.push_back(Output::Complete(Completion(plan)));
            return;
        }
        let id = self.ops.insert(Op::new(plan, held.unwrap_or(now)));
        self.step_op(now, id, Input::Start);
        self.pump(now);
    }

    /// The TCP connection `conn` is open.
    pub fn handle_connected(&mut self, now: Instant, conn: ConnId) {
        self.now = now;
        let Some(c) = self.conns.get(&conn) else {
            return;
        };
        if c.state != ConnState::Connecting {
            return;
        }
        let auth = self.auth_for(c.node);
        let extra = self.handshake_extra(c);
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
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
        if let Some(extra) = extra {
            let pending = match c.subscriber {
                true => Pending::Subscribe,
                false => Pending::Role,
            };
            encode_args(extra, &mut buf);
            c.in_flight.push_back((pending, now));
        }
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
        c.decoder.push(data);
        // Every complete reply is handled; a reply may drop the connection (a refused AUTH).
        while let Some(next) = self
            .conns
            .get_mut(&conn)
            .and_then(|c| c.decoder.next_reply())
        {
            match next {
                Ok(frame) => self.on_frame(now, conn, frame),
                Err(detail) => self.protocol_failure(now, conn, detail),
            }
        }
        self.pump(now);
    }

    /// Whether a driver should decode at its readers ([`Session::reply_decoder`]): on a
    /// cluster, where a session reads from several connections at once and their readers
    /// decode in parallel (a 32-bucket listing, multi-thread: 1.07x the best peer with the
    /// session decoding, 1.3x with the readers). A single node's session reads one
    /// connection: handing decoded replies over only adds to each call's cost there (one node's
    /// listing: about a fifth more client CPU), so the session decodes its bytes itself.
    pub fn readers_decode(&self) -> bool {
        self.is_cluster()
    }

    /// A decoder for a connection's bytes, with this session's caps, for a driver that decodes
    /// where it reads ([`ReplyDecoder`]): its replies go to [`Session::handle_replies`].
    pub fn reply_decoder(&self) -> ReplyDecoder {
        ReplyDecoder::new(self.config.max_read_buffer, self.config.max_reply_elements)
    }

    /// Replies decoded on `conn` by the driver's [`ReplyDecoder`], in wire order, as
    /// [`Session::handle_read_buf`] would have decoded them from the same bytes.
    pub fn handle_replies(&mut self, now: Instant, conn: ConnId, decoded: Decoded) {
        self.now = now;
        for frame in decoded.replies {
            // A reply may drop the connection (a refused AUTH): what follows is for nobody.
            if !self.conns.contains_key(&conn) {
                break;
            }
            self.on_frame(now, conn, frame);
        }
        if let Some(detail) = decoded.failure.filter(|_| self.conns.contains_key(&conn)) {
            self.protocol_failure(now, conn, detail);
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
        while let Some((at, timer)) = self.timers.pop_due(now) {
            self.fire(now, at, timer);
            self.pump(now);
        }
    }

    /// Begins a graceful close: plans submitted from now on end as [`Error::Closed`] at once,
    /// those in progress go on. The driver calls [`Session::close`] once [`Session::sending`]
    /// is zero or its grace period is over.
    pub fn stop_accepting(&mut self) {
        self.stopping = true;
    }

    /// Ends every plan (one with a write sent and unanswered as [`Error::ReplyLost`], the rest
    /// as [`Error::Closed`]) and closes every connection.
    pub fn close(&mut self, now: Instant) {
        self.now = now;
        if self.closed {
            return;
        }
        self.closed = true;
        for &conn in self.conns.keys() {
            self.outputs.push_back(Output::Close { conn });
        }
        self.conns.clear();
        self.nodes.clear_conns();
        self.dirty.clear();
        self.timers.clear();
        self.unrouted.clear();
        self.to_dispatch.clear();
        self.to_advance.clear();
        for op in self.ops.take_all() {
            // The plan ends with an outcome-unknown error when a write of its batch may have
            // run: one sent and unanswered (or granted, its WAIT unanswered), or one that
            // already ended so (lost with its connection) while the rest of the batch waited.
            let unknown = op.reqs.iter().find_map(|r| match (&r.reply, r.sent_on) {
                (None, Some(node)) if r.request.access() == Access::Write => {
                    Some(Error::ReplyLost {
                        addr: self.nodes[node].clone(),
                        reason: "the client was closed before the reply came".into(),
                    })
                }
                (Some(Err(e)), _) if e.outcome_unknown() => Some(e.clone()),
                _ => None,
            });
            let error = unknown.unwrap_or(Error::Closed);
            let mut op = op;
            op.plan.fail(error);
            self.complete(now, op);
        }
    }

    // --- output -----------------------------------------------------------------------------

    /// The next thing to do. Call until it returns [`Output::Wait`].
    pub fn poll(&mut self) -> Output<W> {
        loop {
            // First, and again after every flush: a flush ends the plans whose callers
            // stopped waiting before they were written.
            if let Some(out) = self.outputs.pop_front() {
                return out;
            }
            let Some(conn) = self.dirty.pop_first() else {
                break;
            };
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

    // --- the work queues -------------------------------------------------------------------

    /// Drains the internal work queues; called at the end of every input.
    fn pump(&mut self, now: Instant) {
        loop {
            if let Some(req) = self.to_dispatch.pop_front() {
                self.dispatch(now, req);
            } else if let Some(id) = self.to_advance.pop_front() {
                let input = self.ops.get_mut(id).map(|op| {
                    op.deadline = None;
                    // The replies are taken where they lie: a request's state is larger than
                    // the compiler moves without a call to `memcpy`.
                    let reply = |r: &mut ReqState| {
                        r.reply
                            .take()
                            .unwrap_or_else(|| Err(misuse("a reply is missing")))
                    };
                    // Most batches are one request: its reply goes without a vector.
                    let input = match op.reqs.as_mut_slice() {
                        [only] => Input::Reply(reply(only)),
                        reqs => Input::Replies(reqs.iter_mut().map(reply).collect()),
                    };
                    op.keep_slot_key();
                    op.reqs.clear();
                    input
                });
                if let Some(input) = input {
                    self.prune_deadlines();
                    self.step_op(now, id, input);
                }
            } else {
                break;
            }
        }
    }
}
