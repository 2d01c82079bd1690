//! Fuzzes the session with arbitrary driver inputs: submits, connects, failed connects,
//! closes, raw bytes, well-formed replies cut anywhere, and time passing, in a single-node or
//! cluster configuration, with normal or degenerate (zero, tiny) durations.
//!
//! The session must never panic, never busy-loop (after `handle_timeout(t)` the next deadline
//! is later than `t`), complete each plan at most once, keep `in_flight` equal to what is
//! pending, and complete every plan on `close()`.
#![no_main]

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use botmesh_redis_core::session::{Config, ConnId, Output, Session, Token};
use botmesh_redis_core::testing::{encode_reply, get, incr, mget, set, Batch};
use botmesh_redis_core::topology::NodeAddr;
use botmesh_redis_core::{Reply, ServerError, Value};
use bytes::{Bytes, BytesMut};
use libfuzzer_sys::arbitrary::{self, Arbitrary};
use libfuzzer_sys::fuzz_target;

#[derive(Arbitrary, Debug)]
enum Req {
    Get(u8),
    Set(u8),
    Incr(u8),
    Mget(u8),
}

#[derive(Arbitrary, Debug)]
enum Frame {
    Ok,
    Int(i64),
    Nil,
    Bulk(Vec<u8>),
    Moved(u16, u8),
    Ask(u16, u8),
    Code(u8),
    Slots(Vec<(u16, u16, u8)>),
    FullSlots,
}

#[derive(Arbitrary, Debug)]
enum Input {
    Submit(Vec<Req>),
    Connected(u8),
    ConnectFailed(u8),
    Closed(u8),
    Raw(u8, Vec<u8>),
    Reply(u8, Vec<Frame>, u16),
    Advance(u16),
    AdvanceLong(u16),
}

#[derive(Arbitrary, Debug)]
struct Case {
    cluster: bool,
    short: bool,
    inputs: Vec<Input>,
}

fn port(p: u8) -> u16 {
    7000 + u16::from(p % 4)
}

fn value_of(frame: &Frame) -> Result<Value, ServerError> {
    let codes = [
        "TRYAGAIN x", "CLUSTERDOWN x", "LOADING x", "READONLY x", "NOSCRIPT x", "ERR x",
        "WRONGPASS x", "MOVED 1", "NOAUTH x",
    ];
    match frame {
        Frame::Ok => Ok(Value::Status(Bytes::from_static(b"OK"))),
        Frame::Int(i) => Ok(Value::Int(*i)),
        Frame::Nil => Ok(Value::Nil),
        Frame::Bulk(b) => Ok(Value::Bulk(Bytes::from(b.clone()))),
        Frame::Moved(s, p) => Err(ServerError::new(format!("MOVED {s} 127.0.0.1:{}", port(*p)))),
        Frame::Ask(s, p) => Err(ServerError::new(format!("ASK {s} :{}", port(*p)))),
        Frame::Code(c) => Err(ServerError::new(codes[usize::from(*c) % codes.len()])),
        Frame::Slots(ranges) => Ok(slots(ranges)),
        Frame::FullSlots => Ok(slots(&[(0, 16383, 0)])),
    }
}

fn slots(ranges: &[(u16, u16, u8)]) -> Value {
    Value::Array(
        ranges
            .iter()
            .map(|&(a, b, p)| {
                Value::Array(vec![
                    Value::Int(i64::from(a.min(b) % 16384)),
                    Value::Int(i64::from(a.max(b) % 16384)),
                    Value::Array(vec![Value::from("127.0.0.1"), Value::Int(i64::from(port(p)))]),
                ])
            })
            .collect(),
    )
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
        assert!(next.is_none_or(|n| n > t), "busy loop at {t:?}: next {next:?}");
    }

    fn apply(&mut self, input: &Input, next_token: &mut u64) {
        let now = self.now;
        match input {
            Input::Submit(reqs) => {
                let token = Token(*next_token);
                *next_token += 1;
                self.submitted.insert(token);
                let batch = Batch::new(reqs.iter().take(4).map(request).collect());
                self.session.submit(now, token, batch);
            }
            Input::Connected(i) => self.session.handle_connected(now, self.conn(*i)),
            Input::ConnectFailed(i) => {
                self.session.handle_connect_failed(now, self.conn(*i), "refused")
            }
            Input::Closed(i) => self.session.handle_closed(now, self.conn(*i), "reset"),
            Input::Raw(i, bytes) => self.session.handle_read(now, self.conn(*i), bytes),
            Input::Reply(i, frames, cut) => {
                let mut buf = BytesMut::new();
                for f in frames.iter().take(4) {
                    encode_reply(&value_of(f), &mut buf);
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
    }
}

fn config(cluster: bool, short: bool) -> Config {
    let nodes = vec![NodeAddr::new("127.0.0.1", 7000), NodeAddr::new("127.0.0.1", 7001)];
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

fuzz_target!(|case: Case| {
    let now = Instant::now();
    let mut d = Driver {
        session: Session::new(config(case.cluster, case.short), now),
        now,
        conns: Vec::new(),
        submitted: BTreeSet::new(),
        completed: BTreeSet::new(),
    };
    d.drain();
    let mut next_token = 1;
    for input in case.inputs.iter().take(80) {
        d.apply(input, &mut next_token);
        assert_eq!(d.session.in_flight(), d.submitted.len() - d.completed.len());
    }
    d.session.close(d.now);
    d.drain();
    assert_eq!(d.completed, d.submitted, "close() completes every plan");
    assert_eq!(d.session.in_flight(), 0);
});
