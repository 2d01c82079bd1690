//! Random driver inputs and random faults, shared by the property tests and the fuzz targets:
//! the types, what they do to a session or a simulated cluster, and the checks that must hold
//! whatever they were.
//!
//! - [`BareSession`] feeds a [`Session`] with no simulated cluster behind it arbitrary
//!   [`Input`]s and checks it never panics, never busy-loops, completes each plan at most once
//!   and every plan on `close()`.
//! - [`inject`] applies a [`Fault`] to a [`Harness`]; [`Model`] submits fresh writes between
//!   faults and checks that every outcome the session reported is true, then that the session
//!   recovers once the faults heal.
//!
//! Indexes are taken modulo what exists, so any value is a valid input.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};

use crate::addr::NodeAddr;
use crate::error::Error;
use crate::error::ServerError;
use crate::keys::{slot, SLOT_COUNT};
use crate::plan::Reply;
use crate::request::Request;
use crate::session::{Config, ConnId, Output, Session};
use crate::testing::{Ticket, Tickets, Token};
use crate::value::Value;

use super::sim::{encode_reply, ConnectMode, Demotion, Harness, Rule, SimCluster};
use super::{get, incr, mget, set, Batch};

/// A request of a random batch, on one of a few keys in four slots.
#[derive(Clone, Debug)]
#[cfg_attr(feature = "fuzzing", derive(arbitrary::Arbitrary))]
pub enum Req {
    /// `GET`.
    Get(u8),
    /// `SET`.
    Set(u8),
    /// `INCR`.
    Incr(u8),
    /// `MGET` of two keys of one slot.
    Mget(u8),
}

impl Req {
    /// The request.
    pub fn request(&self) -> Request {
        let k = |i: u8| format!("{{t{}}}k{i}", i % 4);
        match self {
            Req::Get(i) => get(&k(*i)),
            Req::Set(i) => set(&k(*i), "v"),
            Req::Incr(i) => incr(&k(*i)),
            Req::Mget(i) => mget(&[&k(*i), &k(i.wrapping_add(4))]),
        }
    }
}

/// A reply frame a random input feeds the session.
#[derive(Clone, Debug)]
#[cfg_attr(feature = "fuzzing", derive(arbitrary::Arbitrary))]
pub enum Frame {
    /// `+OK`.
    Ok,
    /// An integer.
    Int(i64),
    /// A nil.
    Nil,
    /// A bulk string.
    Bulk(Vec<u8>),
    /// `MOVED slot addr` to one of four ports.
    Moved(u16, u8),
    /// `ASK slot :port`.
    Ask(u16, u8),
    /// One of the error codes the session classifies, picked by index.
    Code(u8),
    /// A `CLUSTER SLOTS` answer of these ranges and ports.
    Slots(Vec<(u16, u16, u8)>),
    /// A complete `CLUSTER SLOTS` answer: one node serves everything.
    FullSlots,
}

/// The error texts of [`Frame::Code`].
pub const CODES: [&str; 10] = [
    "TRYAGAIN x",
    "CLUSTERDOWN x",
    "LOADING x",
    "READONLY x",
    "NOSCRIPT x",
    "ERR x",
    "WRONGPASS x",
    "MOVED 1",
    "NOAUTH x",
    "MASTERDOWN x",
];

fn port(p: u8) -> u16 {
    7000 + u16::from(p % 4)
}

impl Frame {
    /// The reply it stands for.
    pub fn reply(&self) -> Result<Value, ServerError> {
        let slots = |ranges: &[(u16, u16, u8)]| {
            Value::Array(
                ranges
                    .iter()
                    .map(|&(a, b, p)| {
                        Value::Array(vec![
                            Value::Int(i64::from(a.min(b) % SLOT_COUNT)),
                            Value::Int(i64::from(a.max(b) % SLOT_COUNT)),
                            Value::Array(vec![
                                Value::from("127.0.0.1"),
                                Value::Int(i64::from(port(p))),
                            ]),
                        ])
                    })
                    .collect(),
            )
        };
        match self {
            Frame::Ok => Ok(Value::Status(Bytes::from_static(b"OK"))),
            Frame::Int(i) => Ok(Value::Int(*i)),
            Frame::Nil => Ok(Value::Nil),
            Frame::Bulk(b) => Ok(Value::Bulk(Bytes::from(b.clone()))),
            Frame::Moved(s, p) => Err(ServerError::new(format!(
                "MOVED {} 127.0.0.1:{}",
                s % (SLOT_COUNT + 2),
                port(*p)
            ))),
            Frame::Ask(s, p) => Err(ServerError::new(format!(
                "ASK {} :{}",
                s % SLOT_COUNT,
                port(*p)
            ))),
            Frame::Code(c) => Err(ServerError::new(CODES[usize::from(*c) % CODES.len()])),
            Frame::Slots(ranges) => Ok(slots(ranges)),
            Frame::FullSlots => Ok(slots(&[(0, SLOT_COUNT - 1, 0)])),
        }
    }
}

/// One thing a driver can do to a session.
#[derive(Clone, Debug)]
#[cfg_attr(feature = "fuzzing", derive(arbitrary::Arbitrary))]
pub enum Input {
    /// Submit a batch (the first four requests).
    Submit(Vec<Req>),
    /// Report a connection open (by index among the connections asked for, or a stray id).
    Connected(u8),
    /// Report a connect failure.
    ConnectFailed(u8),
    /// Report a connection closed.
    Closed(u8),
    /// Read raw bytes.
    Raw(u8, Vec<u8>),
    /// Read well-formed replies (the first four), cut in two reads at `cut`.
    Reply(u8, Vec<Frame>, u16),
    /// Let this many milliseconds (modulo 300) pass.
    Advance(u16),
    /// Let ten times this many milliseconds pass.
    AdvanceLong(u16),
}

/// A session configuration for random inputs: single node or cluster, normal or degenerate
/// (zero and tiny durations, the edge where busy loops hide).
pub fn config(cluster: bool, short: bool) -> Config {
    let nodes = vec![
        NodeAddr::new("127.0.0.1", 7000),
        NodeAddr::new("127.0.0.1", 7001),
    ];
    let mut c = if cluster {
        Config::cluster(nodes)
    } else {
        Config::single(nodes[0].clone())
    };
    if short {
        c.request_timeout = Duration::from_millis(3);
        c.connect_timeout = Duration::ZERO;
        c.response_timeout = Duration::from_millis(1);
        c.refresh_interval = Duration::ZERO;
        c.refresh_min_interval = Duration::ZERO;
        c.retry.base = Duration::ZERO;
        c.max_read_buffer = 16;
    }
    c
}

/// A bare session driven by random inputs, checking its invariants after each one.
#[derive(Debug)]
pub struct BareSession {
    /// The session under test.
    pub session: Session<Tickets>,
    now: Instant,
    conns: Vec<ConnId>,
    submitted: BTreeSet<Token>,
    completed: BTreeSet<Token>,
    next_token: u64,
}

impl BareSession {
    /// A session of `config` at `now`, drained once.
    pub fn new(config: Config, now: Instant) -> BareSession {
        let mut d = BareSession {
            session: Session::new(config, now),
            now,
            conns: Vec::new(),
            submitted: BTreeSet::new(),
            completed: BTreeSet::new(),
            next_token: 1,
        };
        d.drain();
        d
    }

    /// Drains the outputs; panics on a plan completed twice or never submitted, or on a drain
    /// that never ends.
    pub fn drain(&mut self) -> Option<Instant> {
        for _ in 0..100_000 {
            match self.session.poll() {
                Output::Connect { conn, .. } => self.conns.push(conn),
                Output::Transmit { .. } | Output::Close { .. } => {}
                Output::Complete(completion) => {
                    let token = completion.deliver();
                    assert!(self.submitted.contains(&token), "{token:?} never submitted");
                    assert!(self.completed.insert(token), "{token:?} completed twice");
                }
                Output::Wait { until, .. } => return until,
            }
        }
        panic!("no Wait after 100000 outputs");
    }

    fn conn(&self, i: u8) -> ConnId {
        if self.conns.is_empty() || i % 7 == 0 {
            ConnId(u64::from(i % 5))
        } else {
            self.conns[usize::from(i) % self.conns.len()]
        }
    }

    fn advance(&mut self, by: Duration) {
        let t = self.now + by;
        self.now = t;
        self.session.handle_timeout(t);
        let next = self.drain();
        assert!(
            next.is_none_or(|n| n > t),
            "busy loop: after handle_timeout({t:?}) the next deadline is {next:?}"
        );
    }

    /// Applies one input and checks the invariants.
    pub fn apply(&mut self, input: &Input) {
        let now = self.now;
        match input {
            Input::Submit(reqs) => {
                let token = Token(self.next_token);
                self.next_token += 1;
                self.submitted.insert(token);
                let batch = Batch::new(reqs.iter().take(4).map(Req::request).collect());
                self.session.submit(now, Ticket::new(token), batch);
            }
            Input::Connected(i) => self.session.handle_connected(now, self.conn(*i)),
            Input::ConnectFailed(i) => {
                self.session
                    .handle_connect_failed(now, self.conn(*i), "refused")
            }
            Input::Closed(i) => self.session.handle_closed(now, self.conn(*i), "reset"),
            Input::Raw(i, bytes) => self.session.handle_read(now, self.conn(*i), bytes),
            Input::Reply(i, frames, cut) => {
                let mut buf = BytesMut::new();
                for f in frames.iter().take(4) {
                    encode_reply(&f.reply(), &mut buf);
                }
                let at = usize::from(*cut) % (buf.len() + 1);
                let conn = self.conn(*i);
                self.session.handle_read(now, conn, &buf[..at]);
                self.drain();
                self.session.handle_read(now, conn, &buf[at..]);
            }
            Input::Advance(ms) => return self.advance(Duration::from_millis(u64::from(*ms % 300))),
            Input::AdvanceLong(ms) => {
                return self.advance(Duration::from_millis(u64::from(*ms) * 10))
            }
        }
        self.drain();
        assert_eq!(
            self.session.in_flight(),
            self.submitted.len() - self.completed.len()
        );
    }

    /// Closes the session and checks that every plan completed, and that a closed session
    /// takes no more work and has no deadline.
    pub fn close_and_check(&mut self) {
        self.session.close(self.now);
        self.drain();
        assert_eq!(
            self.completed, self.submitted,
            "close() completes every plan"
        );
        assert_eq!(self.session.in_flight(), 0);
        self.apply(&Input::Submit(vec![Req::Get(1)]));
        assert_eq!(
            self.completed, self.submitted,
            "a closed session completes at once"
        );
        self.advance(Duration::from_secs(100));
        let idle = matches!(self.session.poll(), Output::Wait { until: None, .. });
        assert!(idle, "a closed session has no deadline");
    }
}

/// A fault injected into the simulated cluster.
#[derive(Clone, Debug)]
#[cfg_attr(feature = "fuzzing", derive(arbitrary::Arbitrary))]
pub enum Fault {
    /// An error reply (picked by the second index) from a node, this many times (1 to 3).
    Error(u8, u8, u8),
    /// Drop a node's connection on its next command, after running it or not.
    Drop(u8, bool),
    /// Never answer a node's next command.
    StallCommand(u8),
    /// Stall a node for this many milliseconds (modulo 8000).
    StallNode(u8, u16),
    /// Fail a shard over, with one of four demotions of the old master.
    Failover(u8, u8),
    /// Move the slot of key `w<k>` to a shard.
    MoveSlot(u8, u8),
    /// Migrate that slot to a shard, ending after this many milliseconds (modulo 500).
    Migrate(u8, u8, u16),
    /// Delay a node's replies by this many milliseconds (modulo 50).
    Latency(u8, u8),
    /// Drop every connection of a node.
    DropConnections(u8),
    /// Refuse (or hang) connects to a node for this many milliseconds (modulo 8000).
    Refuse(u8, bool, u16),
}

/// Every node of the simulated cluster, masters and replicas, sorted.
pub fn nodes(sim: &SimCluster) -> Vec<NodeAddr> {
    let mut all = sim.masters();
    for s in 0..sim.masters().len() {
        all.extend(sim.replicas(s));
    }
    all.sort();
    all
}

/// The key of the model's `n`th write.
pub fn key(n: u32) -> String {
    format!("w{n}")
}

/// Applies `fault` to the harness's cluster now.
pub fn inject(h: &mut Harness, fault: &Fault) {
    let all = nodes(&h.sim);
    let pick = |n: u8| all[usize::from(n) % all.len()].clone();
    let shards = h.sim.masters().len();
    let shard = |s: u8| usize::from(s) % shards;
    let now = h.now();
    let elapsed = h.elapsed();
    let at = |d: u64| elapsed + Duration::from_millis(d + 1);
    match fault.clone() {
        Fault::Error(n, e, times) => {
            let s = slot(key(u32::from(n)).as_bytes());
            let other = pick(n.wrapping_add(1));
            let text = match e % 7 {
                0 => "TRYAGAIN x".to_owned(),
                1 => "CLUSTERDOWN x".to_owned(),
                2 => "LOADING x".to_owned(),
                3 => "READONLY x".to_owned(),
                4 => format!("MOVED {s} {other}"),
                5 => format!("ASK {s} {other}"),
                _ => "NOSCRIPT x".to_owned(),
            };
            let times = u32::from(times % 3) + 1;
            h.sim.add_rule(Rule::error(text).on(&pick(n)).times(times));
        }
        Fault::Drop(n, applied) => h
            .sim
            .add_rule(Rule::drop_connection(applied).on(&pick(n)).times(1)),
        Fault::StallCommand(n) => h.sim.add_rule(Rule::stall().on(&pick(n)).times(1)),
        Fault::StallNode(n, d) => {
            let node = pick(n);
            h.sim.stall(&node);
            h.schedule(at(u64::from(d % 8000)), move |sim, now| {
                sim.unstall(now, &node)
            });
        }
        Fault::Failover(s, d) => {
            let demotion = [
                Demotion::Moved,
                Demotion::Down,
                Demotion::Stale,
                Demotion::ReadOnly,
            ][usize::from(d % 4)];
            let master = h.sim.master(shard(s));
            h.sim.failover(now, &master, demotion);
        }
        Fault::MoveSlot(k, s) => {
            let to = h.sim.master(shard(s));
            h.sim.move_slot(slot(key(u32::from(k)).as_bytes()), &to);
        }
        Fault::Migrate(k, s, d) => {
            let to = h.sim.master(shard(s));
            let name = key(u32::from(k));
            let moving = slot(name.as_bytes());
            h.sim.begin_migration(moving, &to);
            h.sim.migrate_key(name.as_bytes());
            h.schedule(at(u64::from(d % 500)), move |sim, _| {
                sim.finish_migration(moving)
            });
        }
        Fault::Latency(n, l) => h
            .sim
            .set_latency(&pick(n), Duration::from_millis(u64::from(l % 50))),
        Fault::DropConnections(n) => h.sim.drop_connections(now, &pick(n), "reset"),
        Fault::Refuse(n, hang, d) => {
            let node = pick(n);
            let mode = if hang {
                ConnectMode::Hang
            } else {
                ConnectMode::Refuse
            };
            h.sim.set_connect_mode(&node, mode);
            h.schedule(at(u64::from(d % 8000)), move |sim, _| {
                sim.set_connect_mode(&node, ConnectMode::Accept)
            });
        }
    }
}

/// The model of the fault test: fresh writes between faults, some given up by their callers,
/// and what must hold of them.
#[derive(Debug, Default)]
pub struct Model {
    next_key: u32,
    writes: Vec<(Ticket<Vec<Reply>>, Vec<String>)>,
    reads: Vec<Ticket<Vec<Reply>>>,
}

impl Model {
    /// Submits `n` writes (at least one), each an `INCR` of a fresh key, and a read.
    pub fn submit(&mut self, h: &mut Harness, n: u8) {
        let n = u32::from(n % 4) + 1;
        let names: Vec<String> = (0..n)
            .map(|_| {
                self.next_key += 1;
                key(self.next_key)
            })
            .collect();
        let batch = names.iter().map(|k| incr(k)).collect();
        self.writes.push((h.submit_batch(batch), names));
        let last = key(self.next_key);
        self.reads.push(h.submit_batch(vec![get("w1"), get(&last)]));
    }

    /// Gives up the last writes submitted, as a caller that drops its call's future: written
    /// already, they run as any write; not yet (a connection opening, a slot map awaited), they
    /// never run.
    pub fn abandon_last(&mut self) {
        if let Some((ticket, _)) = self.writes.last() {
            ticket.abandon();
        }
    }

    /// Checks every outcome against the cluster: a success ran exactly once, an unknown
    /// outcome at most once, another error not at all, a batch given up unwritten (`NotSent`
    /// as a whole) nowhere; a read is never reported lost. Then heals every fault and checks
    /// that each master serves a fresh write.
    pub fn check(self, h: &mut Harness) {
        for (token, names) in self.writes {
            let replies = match h.wait_for(&token) {
                Ok(replies) => replies,
                Err(e @ Error::NotSent { .. }) => {
                    for name in &names {
                        let stored = h.sim.value(name.as_bytes());
                        assert_eq!(stored, None, "{name} ran but its batch reported {e:?}");
                    }
                    continue;
                }
                Err(e) => panic!("a batch failed as a whole: {e}"),
            };
            assert_eq!(replies.len(), names.len(), "a batch lost replies");
            for (reply, name) in replies.iter().zip(&names) {
                let stored = h.sim.value(name.as_bytes());
                let once = Some(Bytes::from_static(b"1"));
                match reply {
                    Ok(v) => {
                        assert_eq!(v, &Value::Int(1), "{name}");
                        assert_eq!(stored, once, "{name}");
                    }
                    Err(e) if e.outcome_unknown() => assert!(
                        stored.is_none() || stored == once,
                        "{name} ran twice: {stored:?}"
                    ),
                    Err(e) => assert_eq!(stored, None, "{name} ran but reported {e:?}"),
                }
            }
        }
        for token in self.reads {
            let replies = match h.wait_for(&token) {
                Ok(replies) => replies,
                Err(e) => panic!("a batch failed as a whole: {e}"),
            };
            for reply in replies {
                assert!(
                    !matches!(
                        reply,
                        Err(Error::ReplyLost { .. })
                            | Err(Error::Timeout {
                                outcome_unknown: true
                            })
                    ),
                    "a read reported lost: {reply:?}"
                );
            }
        }
        h.sim.clear_rules();
        for node in nodes(&h.sim) {
            h.sim.unstall(h.now(), &node);
            h.sim.set_latency(&node, Duration::ZERO);
            h.sim.set_connect_mode(&node, ConnectMode::Accept);
        }
        for s in 0..SLOT_COUNT {
            h.sim.finish_migration(s);
        }
        h.run_for(Duration::from_secs(10));
        for m in h.sim.masters() {
            let fresh = format!("{{{}}}:healed", h.sim.keys_on(&m, 1).remove(0));
            assert_eq!(h.run_one(incr(&fresh)), Ok(Value::Int(1)), "{}", h.trace());
        }
    }
}
