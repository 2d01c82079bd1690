//! Properties of the session under arbitrary inputs.
//!
//! - Fed any sequence of inputs (submits, connects, reads of random or plausible bytes,
//!   closes, timeouts at random times), the session never panics, never busy-loops (after
//!   `handle_timeout(t)` the next deadline is later than `t`), completes each plan at most
//!   once, and `close()` completes every plan.
//! - Against the simulated cluster under random faults, a write never runs twice, every
//!   outcome the session reports is true (known-not-run means not run), every plan ends, and
//!   the session recovers once the faults heal.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use botmesh_redis_core::error::Error;
use botmesh_redis_core::keys::SLOT_COUNT;
use botmesh_redis_core::session::{Config, ConnId, Output, Session, Token};
use botmesh_redis_core::testing::{
    encode_reply, get, incr, mget, set, Batch, ConnectMode, Demotion, Harness, Rule, SimCluster,
};
use botmesh_redis_core::topology::NodeAddr;
use botmesh_redis_core::{Reply, ServerError, Value};
use bytes::{Bytes, BytesMut};
use proptest::prelude::*;

#[allow(clippy::disallowed_methods)] // simulated time starts at one real instant
fn start() -> Instant {
    Instant::now()
}

// --- a bare session, arbitrary inputs ---------------------------------------------------------

#[derive(Clone, Debug)]
enum Req {
    Get(u8),
    Set(u8),
    Incr(u8),
    Mget(u8),
}

#[derive(Clone, Debug)]
enum Frame {
    Ok,
    Int(i64),
    Nil,
    Bulk(Vec<u8>),
    Error(String),
    Slots(Vec<(u16, u16, u16)>),
}

#[derive(Clone, Debug)]
enum Input {
    Submit(Vec<Req>),
    Connected(usize),
    ConnectFailed(usize),
    Closed(usize),
    Raw(usize, Vec<u8>),
    Reply(usize, Vec<Frame>, usize),
    Advance(u64),
    Close,
}

fn req() -> impl Strategy<Value = Req> {
    prop_oneof![
        any::<u8>().prop_map(Req::Get),
        any::<u8>().prop_map(Req::Set),
        any::<u8>().prop_map(Req::Incr),
        any::<u8>().prop_map(Req::Mget),
    ]
}

fn error_text() -> impl Strategy<Value = String> {
    let port = 7000u16..7004;
    prop_oneof![
        (0..SLOT_COUNT + 2, port.clone()).prop_map(|(s, p)| format!("MOVED {s} 127.0.0.1:{p}")),
        (0..SLOT_COUNT, port.clone()).prop_map(|(s, p)| format!("ASK {s} :{p}")),
        Just("MOVED 1".to_owned()),
        Just("TRYAGAIN x".to_owned()),
        Just("CLUSTERDOWN x".to_owned()),
        Just("LOADING x".to_owned()),
        Just("READONLY x".to_owned()),
        Just("NOSCRIPT x".to_owned()),
        Just("ERR x".to_owned()),
        Just("WRONGPASS x".to_owned()),
    ]
}

fn frame() -> impl Strategy<Value = Frame> {
    prop_oneof![
        Just(Frame::Ok),
        any::<i64>().prop_map(Frame::Int),
        Just(Frame::Nil),
        proptest::collection::vec(any::<u8>(), 0..8).prop_map(Frame::Bulk),
        error_text().prop_map(Frame::Error),
        proptest::collection::vec((0..SLOT_COUNT, 0..SLOT_COUNT, 7000u16..7004), 0..4)
            .prop_map(Frame::Slots),
        Just(Frame::Slots(vec![(0, 16383, 7000)])),
    ]
}

fn input() -> impl Strategy<Value = Input> {
    prop_oneof![
        3 => proptest::collection::vec(req(), 0..4).prop_map(Input::Submit),
        3 => any::<usize>().prop_map(Input::Connected),
        1 => any::<usize>().prop_map(Input::ConnectFailed),
        1 => any::<usize>().prop_map(Input::Closed),
        1 => (any::<usize>(), proptest::collection::vec(any::<u8>(), 0..24))
            .prop_map(|(c, b)| Input::Raw(c, b)),
        6 => (any::<usize>(), proptest::collection::vec(frame(), 1..4), any::<usize>())
            .prop_map(|(c, f, cut)| Input::Reply(c, f, cut)),
        3 => prop_oneof![0u64..5, 0u64..200, 0u64..20_000].prop_map(Input::Advance),
        0 => Just(Input::Close),
    ]
}

fn value_of(frame: &Frame) -> Result<Value, ServerError> {
    match frame {
        Frame::Ok => Ok(Value::Status(Bytes::from_static(b"OK"))),
        Frame::Int(i) => Ok(Value::Int(*i)),
        Frame::Nil => Ok(Value::Nil),
        Frame::Bulk(b) => Ok(Value::Bulk(Bytes::from(b.clone()))),
        Frame::Error(e) => Err(ServerError::new(e.clone())),
        Frame::Slots(ranges) => Ok(Value::Array(
            ranges
                .iter()
                .map(|&(a, b, port)| {
                    Value::Array(vec![
                        Value::Int(i64::from(a.min(b))),
                        Value::Int(i64::from(a.max(b))),
                        Value::Array(vec![Value::from("127.0.0.1"), Value::Int(i64::from(port))]),
                    ])
                })
                .collect(),
        )),
    }
}

fn request(r: &Req) -> botmesh_redis_core::Request {
    let k = |i: u8| format!("{{t{}}}k{i}", i % 4);
    match r {
        Req::Get(i) => get(&k(*i)),
        Req::Set(i) => set(&k(*i), "v"),
        Req::Incr(i) => incr(&k(*i)),
        Req::Mget(i) => mget(&[&k(*i), &k(i.wrapping_add(4))]),
    }
}

struct Driver {
    session: Session,
    now: Instant,
    conns: Vec<ConnId>,
    submitted: BTreeSet<Token>,
    completed: BTreeSet<Token>,
}

impl Driver {
    fn drain(&mut self) -> Option<Instant> {
        for _ in 0..100_000 {
            match self.session.poll() {
                Output::Connect { conn, .. } => self.conns.push(conn),
                Output::Transmit { .. } | Output::Close { .. } => {}
                Output::Complete { token, result } => {
                    assert!(self.submitted.contains(&token), "{token:?} never submitted");
                    assert!(self.completed.insert(token), "{token:?} completed twice");
                    let _ = result.into_result::<Vec<Reply>>();
                }
                Output::Wait { until, .. } => return until,
            }
        }
        panic!("no Wait after 100000 outputs");
    }

    fn conn(&self, i: usize) -> ConnId {
        if self.conns.is_empty() || i % 7 == 0 {
            ConnId(i as u64 % 5)
        } else {
            self.conns[i % self.conns.len()]
        }
    }

    fn apply(&mut self, input: &Input, next_token: &mut u64) {
        let now = self.now;
        match input {
            Input::Submit(reqs) => {
                let token = Token(*next_token);
                *next_token += 1;
                self.submitted.insert(token);
                let batch = Batch::new(reqs.iter().map(request).collect());
                self.session.submit(now, token, batch);
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
                for f in frames {
                    encode_reply(&value_of(f), &mut buf);
                }
                let at = cut % (buf.len() + 1);
                let conn = self.conn(*i);
                self.session.handle_read(now, conn, &buf[..at]);
                self.drain();
                self.session.handle_read(now, conn, &buf[at..]);
            }
            Input::Advance(ms) => {
                let t = self.now + Duration::from_millis(*ms);
                self.now = t;
                self.session.handle_timeout(t);
                let next = self.drain();
                assert!(
                    next.is_none_or(|n| n > t),
                    "busy loop: after handle_timeout({t:?}) the next deadline is {next:?}"
                );
                return;
            }
            Input::Close => self.session.close(now),
        }
        self.drain();
    }
}

fn config(cluster: bool, short: bool) -> Config {
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
        // Zero and tiny durations: the edge where busy loops hide.
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

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_inputs_never_panic_nor_busy_loop(
        cluster in any::<bool>(),
        short in any::<bool>(),
        inputs in proptest::collection::vec(input(), 0..60),
    ) {
        let now = start();
        let mut d = Driver {
            session: Session::new(config(cluster, short), now),
            now,
            conns: Vec::new(),
            submitted: BTreeSet::new(),
            completed: BTreeSet::new(),
        };
        d.drain();
        let mut next_token = 1;
        for input in &inputs {
            d.apply(input, &mut next_token);
            prop_assert_eq!(
                d.session.in_flight(),
                d.submitted.len() - d.completed.len()
            );
        }
        d.apply(&Input::Close, &mut next_token);
        prop_assert_eq!(&d.completed, &d.submitted, "close() completes every plan");
        prop_assert_eq!(d.session.in_flight(), 0);
        // Closed means closed: nothing more comes out, whatever goes in.
        d.apply(&Input::Submit(vec![Req::Get(1)]), &mut next_token);
        prop_assert_eq!(&d.completed, &d.submitted);
        d.apply(&Input::Advance(100_000), &mut next_token);
        let idle = matches!(d.session.poll(), Output::Wait { until: None, .. });
        prop_assert!(idle, "a closed session has no deadline");
    }
}

// --- the simulated cluster under random faults -----------------------------------------------

#[derive(Clone, Debug)]
enum Fault {
    Error(usize, u8, u32),
    Drop(usize, bool),
    StallCommand(usize),
    StallNode(usize, u64),
    Failover(usize, u8),
    MoveSlot(u8, usize),
    Migrate(u8, usize, u64),
    Latency(usize, u64),
    DropConnections(usize),
    Refuse(usize, bool, u64),
}

fn fault() -> impl Strategy<Value = Fault> {
    prop_oneof![
        (0usize..9, 0u8..7, 1u32..4).prop_map(|(n, e, t)| Fault::Error(n, e, t)),
        (0usize..9, any::<bool>()).prop_map(|(n, a)| Fault::Drop(n, a)),
        (0usize..9).prop_map(Fault::StallCommand),
        (0usize..9, 1u64..8000).prop_map(|(n, d)| Fault::StallNode(n, d)),
        (0usize..3, 0u8..4).prop_map(|(s, d)| Fault::Failover(s, d)),
        (any::<u8>(), 0usize..3).prop_map(|(k, s)| Fault::MoveSlot(k, s)),
        (any::<u8>(), 0usize..3, 1u64..500).prop_map(|(k, s, d)| Fault::Migrate(k, s, d)),
        (0usize..9, 0u64..50).prop_map(|(n, l)| Fault::Latency(n, l)),
        (0usize..9).prop_map(Fault::DropConnections),
        (0usize..9, any::<bool>(), 1u64..6000).prop_map(|(n, h, d)| Fault::Refuse(n, h, d)),
    ]
}

fn nodes(sim: &SimCluster) -> Vec<NodeAddr> {
    let mut all = sim.masters();
    for s in 0..3 {
        all.extend(sim.replicas(s));
    }
    all.sort();
    all
}

fn key(i: u32) -> String {
    format!("w{i}")
}

fn inject(h: &mut Harness, fault: &Fault) {
    let all = nodes(&h.sim);
    let now = h.now();
    let elapsed = h.elapsed();
    let at = |d: u64| elapsed + Duration::from_millis(d);
    match fault.clone() {
        Fault::Error(n, e, times) => {
            let s = botmesh_redis_core::keys::slot(key(n as u32).as_bytes());
            let other = &all[(n + 1) % all.len()];
            let text = match e {
                0 => "TRYAGAIN x".to_owned(),
                1 => "CLUSTERDOWN x".to_owned(),
                2 => "LOADING x".to_owned(),
                3 => "READONLY x".to_owned(),
                4 => format!("MOVED {s} {other}"),
                5 => format!("ASK {s} {other}"),
                _ => "NOSCRIPT x".to_owned(),
            };
            h.sim.add_rule(Rule::error(text).on(&all[n]).times(times));
        }
        Fault::Drop(n, applied) => h
            .sim
            .add_rule(Rule::drop_connection(applied).on(&all[n]).times(1)),
        Fault::StallCommand(n) => h.sim.add_rule(Rule::stall().on(&all[n]).times(1)),
        Fault::StallNode(n, d) => {
            let node = all[n].clone();
            h.sim.stall(&node);
            h.schedule(at(d), move |sim, now| sim.unstall(now, &node));
        }
        Fault::Failover(s, d) => {
            let demotion = [
                Demotion::Moved,
                Demotion::Down,
                Demotion::Stale,
                Demotion::ReadOnly,
            ][usize::from(d)];
            let master = h.sim.master(s);
            h.sim.failover(now, &master, demotion);
        }
        Fault::MoveSlot(k, s) => {
            let to = h.sim.master(s);
            h.sim.move_slot(
                botmesh_redis_core::keys::slot(key(u32::from(k)).as_bytes()),
                &to,
            );
        }
        Fault::Migrate(k, s, d) => {
            let to = h.sim.master(s);
            let name = key(u32::from(k));
            let slot = botmesh_redis_core::keys::slot(name.as_bytes());
            h.sim.begin_migration(slot, &to);
            h.sim.migrate_key(name.as_bytes());
            h.schedule(at(d), move |sim, _| sim.finish_migration(slot));
        }
        Fault::Latency(n, l) => h.sim.set_latency(&all[n], Duration::from_millis(l)),
        Fault::DropConnections(n) => h.sim.drop_connections(now, &all[n], "reset"),
        Fault::Refuse(n, hang, d) => {
            let node = all[n].clone();
            let mode = if hang {
                ConnectMode::Hang
            } else {
                ConnectMode::Refuse
            };
            h.sim.set_connect_mode(&node, mode);
            h.schedule(at(d), move |sim, _| {
                sim.set_connect_mode(&node, ConnectMode::Accept)
            });
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn under_random_faults_writes_run_at_most_once_and_outcomes_are_true(
        steps in proptest::collection::vec((0u64..400, fault(), 1usize..5), 1..12),
        seed in any::<u64>(),
    ) {
        let sim = SimCluster::cluster(3, 2);
        let mut config = Config::cluster(sim.masters());
        config.seed = seed;
        let mut h = Harness::new(start(), sim, config);
        let mut next_key = 0u32;
        let mut writes = Vec::new();
        let mut reads = Vec::new();
        for (pause, fault, n) in &steps {
            inject(&mut h, fault);
            // Every write has a fresh key: if it ever ran twice, the value would be 2.
            let batch: Vec<_> = (0..*n).map(|_| { next_key += 1; incr(&key(next_key)) }).collect();
            let names: Vec<_> = (next_key + 1 - *n as u32..=next_key).map(key).collect();
            writes.push((h.submit_batch(batch), names));
            reads.push(h.submit_batch(vec![get("w1"), get(&key(next_key))]));
            h.run_for(Duration::from_millis(*pause));
        }
        for (token, names) in writes {
            let replies = h.wait_for::<Vec<Reply>>(token).unwrap();
            for (reply, name) in replies.iter().zip(&names) {
                let stored = h.sim.value(name.as_bytes());
                match reply {
                    Ok(v) => {
                        prop_assert_eq!(v, &Value::Int(1), "{}", name);
                        prop_assert_eq!(stored, Some(Bytes::from_static(b"1")), "{}", name);
                    }
                    Err(e) if e.outcome_unknown() => prop_assert!(
                        stored.is_none() || stored == Some(Bytes::from_static(b"1")),
                        "{} ran twice: {:?}", name, stored
                    ),
                    Err(e) => prop_assert_eq!(stored, None, "{} ran but reported {:?}", name, e),
                }
            }
        }
        for token in reads {
            let replies = h.wait_for::<Vec<Reply>>(token).unwrap();
            for reply in replies {
                // A read is never reported as lost: it is retried instead, or ends otherwise.
                prop_assert!(
                    !matches!(reply, Err(Error::ReplyLost { .. }) | Err(Error::Timeout { outcome_unknown: true })),
                    "{:?}", reply
                );
            }
        }
        // Heal everything: the session finds its way back to every master.
        h.sim.clear_rules();
        for node in nodes(&h.sim) {
            h.sim.unstall(h.now(), &node);
            h.sim.set_latency(&node, Duration::ZERO);
            h.sim.set_connect_mode(&node, ConnectMode::Accept);
        }
        for slot in 0..SLOT_COUNT {
            h.sim.finish_migration(slot);
        }
        h.run_for(Duration::from_secs(10));
        for m in h.sim.masters() {
            let fresh = h.sim.keys_on(&m, 1).remove(0);
            let fresh = format!("{{{fresh}}}:healed");
            prop_assert_eq!(h.run_one(incr(&fresh)), Ok(Value::Int(1)), "{}", h.trace());
        }
    }
}
