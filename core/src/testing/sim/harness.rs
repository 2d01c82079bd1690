//! Steps a [`Session`] and a [`SimCluster`] together on simulated time, as a driver would.
//!
//! The harness keeps the driver contract to the letter: after every input it drains
//! [`Session::poll`] until `Wait`; `Connect` dials the simulator, whose answer comes back as
//! `handle_connected` / `handle_connect_failed`; `Transmit` hands the bytes to the node, whose
//! replies come back through `handle_read`, cut into chunks as [`Chunking`] says; `Close`
//! forgets the connection (nothing more is reported for it); when nothing is due, time jumps
//! to the next event or deadline and `handle_timeout` runs.
//!
//! It also checks the contract's promise: after `handle_timeout(t)` the next deadline is later
//! than `t` (no busy loop), and time never goes back. Every connection's writes are kept, so
//! tests can assert on the exact bytes and the order of commands.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};

use super::cluster::{render_args, SimCluster, SimEvent};
use crate::addr::{DialTarget, NodeAddr};
use crate::error::Error;
use crate::plan::{Plan, Reply};
use crate::request::Request;
use crate::session::{Config, ConnId, Output, ReplyDecoder, Session, Submission, Summary};
use crate::testing::Batch;
use crate::testing::{Ticket, Tickets, Token};

/// How reply bytes are cut before `handle_read`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Chunking {
    /// One read per reply write of the node.
    Whole,
    /// One read per byte.
    Bytewise,
    /// Random cuts from a seeded generator.
    Random(u64),
}

/// What the session did on one connection.
#[derive(Clone, Debug)]
pub struct Wire {
    /// The node, as the session names it.
    pub node: NodeAddr,
    /// Where the session connected.
    pub dial: DialTarget,
    /// Every transmit, in order.
    pub writes: Vec<Bytes>,
    /// Whether the session closed it.
    pub closed: bool,
}

impl Wire {
    /// The commands written, decoded and rendered (see
    /// [`render_args`]), in wire order.
    pub fn commands(&self) -> Vec<String> {
        let mut all = Vec::new();
        for write in &self.writes {
            let mut rest: &[u8] = write;
            while let Ok(Some((frame, used))) = redis_protocol::resp2::decode::decode(rest) {
                rest = &rest[used..];
                if let redis_protocol::resp2::types::OwnedFrame::Array(items) = frame {
                    let args: Vec<Bytes> = items
                        .into_iter()
                        .filter_map(|i| match i {
                            redis_protocol::resp2::types::OwnedFrame::BulkString(b) => {
                                Some(Bytes::from(b))
                            }
                            _ => None,
                        })
                        .collect();
                    all.push(render_args(&args));
                }
            }
        }
        all
    }
}

type Action = Box<dyn FnOnce(&mut SimCluster, Instant)>;

/// The session, the simulated cluster and the simulated clock. See the module docs.
pub struct Harness {
    /// The session under test.
    pub session: Session<Tickets>,
    /// The simulated deployment; change it freely between runs.
    pub sim: SimCluster,
    start: Instant,
    now: Instant,
    /// Events from the simulator by delivery time, then arrival order.
    queue: BTreeMap<(Instant, u64), SimEvent>,
    next_event: u64,
    /// The latest delivery per connection: a TCP stream never reorders.
    last_delivery: BTreeMap<ConnId, Instant>,
    actions: Vec<(Instant, u64, Action)>,
    /// When each plan completed, by name.
    completions: BTreeMap<Token, Instant>,
    /// What became of each completed plan, as the session summed it up.
    summaries: BTreeMap<Token, Summary>,
    next_token: u64,
    chunking: Chunking,
    /// With [`Harness::decode_at_readers`]: each connection's decoder, as a driver that
    /// decodes where it reads keeps one.
    decoders: Option<BTreeMap<ConnId, ReplyDecoder>>,
    rng: u64,
    wires: BTreeMap<ConnId, Wire>,
    closed: BTreeSet<ConnId>,
    wait: Option<Instant>,
    /// The latest lines of the trace (older ones are dropped: long runs would grow it
    /// without bound).
    trace: std::collections::VecDeque<String>,
}

/// How many trace lines a harness keeps.
const TRACE_LINES: usize = 400;

impl std::fmt::Debug for Harness {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Harness")
            .field("elapsed", &self.elapsed())
            .field("session", &self.session)
            .field("sim", &self.sim)
            .finish_non_exhaustive()
    }
}

/// How long [`Harness::wait_for`] lets simulated time run before calling it a hang.
pub const HANG: Duration = Duration::from_secs(600);

impl Harness {
    /// A session with `config` created at `start`, facing `sim`.
    pub fn new(start: Instant, sim: SimCluster, config: Config) -> Self {
        let mut harness = Harness {
            session: Session::new(config, start),
            sim,
            start,
            now: start,
            queue: BTreeMap::new(),
            next_event: 0,
            last_delivery: BTreeMap::new(),
            actions: Vec::new(),
            completions: BTreeMap::new(),
            summaries: BTreeMap::new(),
            next_token: 1,
            chunking: Chunking::Whole,
            decoders: None,
            rng: 0x9E37_79B9,
            wires: BTreeMap::new(),
            closed: BTreeSet::new(),
            wait: None,
            trace: std::collections::VecDeque::new(),
        };
        harness.drain();
        harness
    }

    /// Cuts reply bytes as `chunking` says from now on.
    pub fn set_chunking(&mut self, chunking: Chunking) {
        if let Chunking::Random(seed) = chunking {
            self.rng = seed | 1;
        }
        self.chunking = chunking;
    }

    /// Decodes replies as a driver's readers do, one [`ReplyDecoder`] per connection, and gives
    /// the session the replies (`handle_replies`) instead of the bytes (`handle_read`).
    pub fn decode_at_readers(&mut self) {
        self.decoders.get_or_insert_with(BTreeMap::new);
    }

    // --- time -------------------------------------------------------------------------------

    /// The simulated time.
    pub fn now(&self) -> Instant {
        self.now
    }

    /// Simulated time since the start.
    pub fn elapsed(&self) -> Duration {
        self.now - self.start
    }

    /// The instant `after` the start.
    pub fn at(&self, after: Duration) -> Instant {
        self.start + after
    }

    /// Runs `action` on the simulator when simulated time reaches `after` the start.
    pub fn schedule(
        &mut self,
        after: Duration,
        action: impl FnOnce(&mut SimCluster, Instant) + 'static,
    ) {
        let seq = self.next_event;
        self.next_event += 1;
        self.actions
            .push((self.start + after, seq, Box::new(action)));
        self.actions.sort_by_key(|&(at, seq, _)| (at, seq));
    }

    // --- plans ------------------------------------------------------------------------------

    /// Submits a plan now; its ticket.
    pub fn submit<P: Plan>(&mut self, plan: P) -> Ticket<P::Output> {
        self.submit_waited(plan, Duration::ZERO)
    }

    /// Submits a plan now whose call waited `waited` before it reached the session (a driver
    /// held it back for room: [`Submission::waited_since`]); its ticket.
    pub fn submit_waited<P: Plan>(&mut self, plan: P, waited: Duration) -> Ticket<P::Output> {
        let since = self.now - waited;
        self.submit_with(plan, |submission| match waited.is_zero() {
            true => submission,
            false => submission.waited_since(since),
        })
    }

    /// Submits a plan whose driver found its deadline passed before the session
    /// ([`Submission::expired`]), having held it `waited`; its ticket.
    pub fn submit_expired<P: Plan>(&mut self, plan: P, waited: Duration) -> Ticket<P::Output> {
        let since = self.now - waited;
        self.submit_with(plan, |submission| submission.waited_since(since).expired())
    }

    fn submit_with<P: Plan>(
        &mut self,
        plan: P,
        shape: impl FnOnce(Submission<Tickets>) -> Submission<Tickets>,
    ) -> Ticket<P::Output> {
        let token = Token(self.next_token);
        self.next_token += 1;
        self.log(format!("{:>8?} submit {token:?}", self.elapsed()));
        let ticket = Ticket::new(token);
        let submission = shape(Submission::new(plan, ticket.clone()));
        self.session.submit_boxed(self.now, submission);
        self.drain();
        ticket
    }

    /// Submits one batch of requests as a plan; its result is a `Vec<Reply>`.
    pub fn submit_batch(&mut self, requests: Vec<Request>) -> Ticket<Vec<Reply>> {
        self.submit(Batch::new(requests))
    }

    /// Runs until the plan of `ticket` completes and returns its result; panics after
    /// [`HANG`] of simulated time, with the trace.
    pub fn wait_for<T>(&mut self, ticket: &Ticket<T>) -> Result<T, Error> {
        let end = self.now + HANG;
        let token = ticket.token();
        self.run_until(end, |_| ticket.is_delivered());
        match self.take(ticket) {
            Some(result) => result,
            None => panic!(
                "{token:?} did not complete within {HANG:?}\n{}",
                self.trace()
            ),
        }
    }

    /// Submits a batch and waits for its replies.
    pub fn run_batch(&mut self, requests: Vec<Request>) -> Vec<Reply> {
        let ticket = self.submit_batch(requests);
        match self.wait_for(&ticket) {
            Ok(replies) => replies,
            Err(e) => panic!("a batch plan cannot fail as a whole, got {e:?}"),
        }
    }

    /// Submits one request and waits for its reply.
    pub fn run_one(&mut self, request: Request) -> Reply {
        self.run_batch(vec![request])
            .pop()
            .unwrap_or_else(|| Err(crate::plan::misuse("no reply")))
    }

    /// The result of a completed plan, once.
    pub fn take<T>(&mut self, ticket: &Ticket<T>) -> Option<Result<T, Error>> {
        ticket.take()
    }

    /// Whether the plan completed (and its result was not taken yet).
    pub fn is_complete<T>(&self, ticket: &Ticket<T>) -> bool {
        ticket.is_delivered()
    }

    /// When the plan completed, relative to the start.
    pub fn completed_after<T>(&self, ticket: &Ticket<T>) -> Option<Duration> {
        self.completions
            .get(&ticket.token())
            .map(|at| *at - self.start)
    }

    /// What became of a completed plan: the session's [`Summary`] handed out with it.
    pub fn summary<T>(&self, ticket: &Ticket<T>) -> Option<&Summary> {
        self.summaries.get(&ticket.token())
    }

    /// Closes the session and drains its outputs.
    pub fn close(&mut self) {
        self.log(format!("{:>8?} close", self.elapsed()));
        self.session.close(self.now);
        self.drain();
    }

    // --- running ----------------------------------------------------------------------------

    /// Runs for `d` of simulated time.
    pub fn run_for(&mut self, d: Duration) {
        let end = self.now + d;
        self.run_until(end, |_| false);
    }

    /// Runs until `stop` holds or simulated time reaches `end`; whether `stop` held.
    pub fn run_until(&mut self, end: Instant, mut stop: impl FnMut(&Self) -> bool) -> bool {
        self.drain();
        loop {
            self.collect();
            if stop(self) {
                return true;
            }
            if let Some((&(at, seq), _)) = self.queue.first_key_value() {
                if at <= self.now {
                    if let Some(event) = self.queue.remove(&(at, seq)) {
                        self.deliver(event);
                    }
                    continue;
                }
            }
            if self
                .actions
                .first()
                .is_some_and(|&(at, _, _)| at <= self.now)
            {
                let (_, _, action) = self.actions.remove(0);
                self.log(format!("{:>8?} sim action", self.elapsed()));
                action(&mut self.sim, self.now);
                continue;
            }
            let next = [
                self.queue.first_key_value().map(|(&(at, _), _)| at),
                self.actions.first().map(|&(at, _, _)| at),
                self.wait,
            ]
            .into_iter()
            .flatten()
            .min();
            let Some(next) = next else {
                return false;
            };
            if next > end {
                self.now = self.now.max(end);
                return false;
            }
            self.now = self.now.max(next);
            if self.wait.is_some_and(|w| w <= self.now) {
                let now = self.now;
                self.log(format!("{:>8?} timeout", self.elapsed()));
                self.session.handle_timeout(now);
                self.drain();
                if let Some(w) = self.wait.filter(|&w| w <= now) {
                    panic!(
                        "busy loop: after handle_timeout({:?}) the session waits until {:?}\n{}",
                        now - self.start,
                        w - self.start,
                        self.trace()
                    );
                }
            }
        }
    }

    fn collect(&mut self) {
        for (at, event) in self.sim.take_events() {
            let conn = event_conn(&event);
            let at = at
                .max(self.now)
                .max(self.last_delivery.get(&conn).copied().unwrap_or(self.now));
            self.last_delivery.insert(conn, at);
            self.queue.insert((at, self.next_event), event);
            self.next_event += 1;
        }
    }

    fn deliver(&mut self, event: SimEvent) {
        let now = self.now;
        let t = self.elapsed();
        match event {
            SimEvent::Connected(conn) if !self.closed.contains(&conn) => {
                self.log(format!("{t:>8?} connected {conn:?}"));
                self.session.handle_connected(now, conn);
            }
            SimEvent::ConnectFailed(conn, reason) if !self.closed.contains(&conn) => {
                self.log(format!("{t:>8?} connect failed {conn:?}: {reason}"));
                self.closed.insert(conn);
                self.session.handle_connect_failed(now, conn, &reason);
            }
            SimEvent::Read(conn, mut bytes) if !self.closed.contains(&conn) => {
                // A socket read returns whatever has arrived: replies due together come
                // together, as long as nothing else happened on the connection between them.
                while let Some((&key, SimEvent::Read(next, more))) = self
                    .queue
                    .iter()
                    .find(|(_, e)| event_conn(e) == conn)
                    .filter(|(&(at, _), _)| at <= now)
                {
                    if *next != conn {
                        break;
                    }
                    let mut joined = bytes::BytesMut::from(&bytes[..]);
                    joined.extend_from_slice(more);
                    bytes = joined.freeze();
                    self.queue.remove(&key);
                }
                self.log(format!("{t:>8?} read {conn:?} {}", short(&bytes)));
                for chunk in self.cut(bytes) {
                    match &mut self.decoders {
                        None => self.session.handle_read(now, conn, &chunk),
                        Some(decoders) => {
                            let decoder = decoders
                                .entry(conn)
                                .or_insert_with(|| self.session.reply_decoder());
                            let decoded = decoder.decode(BytesMut::from(&chunk[..]));
                            if !decoded.is_empty() {
                                self.session.handle_replies(now, conn, decoded);
                            }
                        }
                    }
                    self.drain();
                }
            }
            SimEvent::Closed(conn, reason) if !self.closed.contains(&conn) => {
                self.log(format!("{t:>8?} closed by node {conn:?}: {reason}"));
                self.closed.insert(conn);
                self.session.handle_closed(now, conn, &reason);
            }
            _ => {}
        }
        self.drain();
    }

    fn cut(&mut self, bytes: Bytes) -> Vec<Bytes> {
        match self.chunking {
            Chunking::Whole => vec![bytes],
            Chunking::Bytewise => (0..bytes.len()).map(|i| bytes.slice(i..i + 1)).collect(),
            Chunking::Random(_) => {
                let mut out = Vec::new();
                let mut rest = bytes;
                while !rest.is_empty() {
                    // xorshift64
                    self.rng ^= self.rng << 13;
                    self.rng ^= self.rng >> 7;
                    self.rng ^= self.rng << 17;
                    let len = (self.rng % 7) as usize + 1;
                    out.push(rest.split_to(len.min(rest.len())));
                }
                out
            }
        }
    }

    /// Drains the session's outputs until `Wait`, carrying each out.
    fn drain(&mut self) {
        let now = self.now;
        for _ in 0..1_000_000 {
            let t = now - self.start;
            match self.session.poll() {
                Output::Connect { conn, node, dial } => {
                    self.log(format!("{t:>8?} connect {conn:?} {node} via {dial}"));
                    self.wires.insert(
                        conn,
                        Wire {
                            node,
                            dial: dial.clone(),
                            writes: Vec::new(),
                            closed: false,
                        },
                    );
                    // The simulator's nodes are TCP addresses; a Unix socket's node is found
                    // by its identity, which names the socket.
                    let at = match &dial {
                        DialTarget::Tcp(addr) => addr,
                        DialTarget::Unix(_) => &self.wires[&conn].node,
                    };
                    self.sim.connect(now, conn, at);
                }
                Output::Transmit { conn, bytes } => {
                    self.log(format!("{t:>8?} write {conn:?} {}", short(&bytes)));
                    if let Some(wire) = self.wires.get_mut(&conn) {
                        wire.writes.push(bytes.clone());
                    }
                    if !self.closed.contains(&conn) {
                        self.sim.receive(now, conn, &bytes);
                    }
                }
                Output::Close { conn } => {
                    self.log(format!("{t:>8?} close {conn:?}"));
                    if let Some(wire) = self.wires.get_mut(&conn) {
                        wire.closed = true;
                    }
                    self.closed.insert(conn);
                    self.sim.close(conn);
                }
                Output::Complete(completion) => {
                    let summary = completion.summary().clone();
                    let token = completion.deliver();
                    self.summaries.insert(token, summary);
                    self.log(format!("{t:>8?} complete {token:?}"));
                    self.completions.insert(token, now);
                }
                Output::Wait { until, .. } => {
                    self.wait = until;
                    return;
                }
            }
        }
        panic!(
            "the session produced a million outputs without waiting\n{}",
            self.trace()
        );
    }

    // --- the wire ---------------------------------------------------------------------------

    /// Every connection the session opened, by id.
    pub fn wires(&self) -> &BTreeMap<ConnId, Wire> {
        &self.wires
    }

    /// The connections opened to a node, in order.
    pub fn wires_to(&self, node: &NodeAddr) -> Vec<&Wire> {
        self.wires.values().filter(|w| &w.node == node).collect()
    }

    /// Every command written to a node, over all its connections, in order.
    pub fn written_to(&self, node: &NodeAddr) -> Vec<String> {
        self.wires_to(node)
            .into_iter()
            .flat_map(Wire::commands)
            .collect()
    }

    /// Every command written to a node but the topology queries (`CLUSTER ...`) and the
    /// connection handshakes (`AUTH ...`, `PING`), in order.
    pub fn data_written_to(&self, node: &NodeAddr) -> Vec<String> {
        self.written_to(node)
            .into_iter()
            .filter(|c| !c.starts_with("CLUSTER ") && !c.starts_with("AUTH ") && c != "PING")
            .collect()
    }

    /// How many connections were opened to a node.
    pub fn connects_to(&self, node: &NodeAddr) -> usize {
        self.wires_to(node).len()
    }

    /// The latest lines of what happened, one per input and output.
    pub fn trace(&self) -> String {
        self.trace.iter().map(|l| format!("{l}\n")).collect()
    }

    fn log(&mut self, line: String) {
        if self.trace.len() == TRACE_LINES {
            self.trace.pop_front();
        }
        self.trace.push_back(line);
    }
}

fn event_conn(event: &SimEvent) -> ConnId {
    match event {
        SimEvent::Connected(c)
        | SimEvent::ConnectFailed(c, _)
        | SimEvent::Read(c, _)
        | SimEvent::Closed(c, _) => *c,
    }
}

fn short(bytes: &[u8]) -> String {
    let shown = &bytes[..bytes.len().min(120)];
    let mut s = shown.escape_ascii().to_string();
    if bytes.len() > shown.len() {
        s.push_str(&format!("…(+{})", bytes.len() - shown.len()));
    }
    s
}
