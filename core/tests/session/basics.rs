//! The plain path: a session finds the cluster, connects once per master, pipelines requests
//! and matches replies in order; a single node needs no topology.

use std::time::Duration;

use crate::support::cluster;
use botmesh_redis_core::driver::session::{Config, Output, Session, TimerReason};
use botmesh_redis_core::driver::{Plan, Reply, Step};
use botmesh_redis_core::testing::sim::{Harness, SimCluster};
use botmesh_redis_core::testing::{get, incr, set, start, Batch};
use botmesh_redis_core::testing::{Ticket, Tickets, Token};
use botmesh_redis_core::Error;
use botmesh_redis_core::NodeAddr;
use botmesh_redis_core::Value;

#[test]
fn cluster_set_then_get() {
    let mut h = cluster();
    let a = h.sim.master(0);
    let key = h.sim.keys_on(&a, 1).remove(0);
    let replies = h.run_batch(vec![set(&key, "v"), get(&key)]);
    assert_eq!(
        replies,
        vec![Ok(Value::Status("OK".into())), Ok(Value::from("v"))]
    );
    assert_eq!(
        h.sim.commands_on(&a),
        vec![
            // The handshake: a connection is used only once the node answered.
            "PING".to_owned(),
            "CLUSTER SLOTS".to_owned(),
            format!("SET {key} v"),
            format!("GET {key}"),
        ]
    );
}

#[test]
fn single_node_needs_no_topology() {
    let sim = SimCluster::single();
    let node = sim.master(0);
    let mut h = Harness::new(start(), sim, Config::single(node.clone()));
    assert_eq!(h.run_one(incr("n")), Ok(Value::Int(1)));
    assert_eq!(h.run_one(incr("n")), Ok(Value::Int(2)));
    assert_eq!(h.written_to(&node), vec!["PING", "INCR n", "INCR n"]);
    assert_eq!(h.connects_to(&node), 1);
}

/// Reads a counter until it reaches `target`, waiting `pause` between reads.
struct PollUntil {
    key: String,
    target: i64,
    pause: Duration,
    reads: u32,
}

impl Plan for PollUntil {
    type Output = u32;

    fn operation(&self) -> &'static str {
        "poll_until"
    }

    fn start(&mut self) -> Step<u32> {
        self.reads += 1;
        Step::Send(get(&self.key).into())
    }

    fn resume(&mut self, replies: Vec<Reply>) -> Step<u32> {
        if replies.is_empty() {
            return self.start();
        }
        match replies.into_iter().next() {
            Some(Ok(v)) if v.as_i64().ok() == Some(self.target) => Step::Done(Ok(self.reads)),
            Some(Ok(_)) => Step::Wait(self.pause),
            Some(Err(e)) => Step::Done(Err(e)),
            None => Step::Done(Err(Error::Closed)),
        }
    }
}

#[test]
fn a_plan_can_wait_between_steps() {
    let sim = SimCluster::single();
    let node = sim.master(0);
    let mut h = Harness::new(start(), sim, Config::single(node));
    h.schedule(Duration::from_millis(250), |sim, _| {
        sim.set_value(b"c", "3")
    });
    let token = h.submit(PollUntil {
        key: "c".into(),
        target: 3,
        pause: Duration::from_millis(100),
        reads: 0,
    });
    // Reads at 0, 100, 200 and 300 ms; the value appears at 250 ms.
    assert_eq!(h.wait_for::<u32>(&token), Ok(4));
    assert_eq!(h.elapsed(), Duration::from_millis(300));
}

/// Sends batches of one, two and one request, and records how each batch's replies came back.
struct Batches {
    key: String,
    sizes: Vec<usize>,
    seen: Vec<(&'static str, Vec<Reply>)>,
}

impl Batches {
    fn next(&mut self) -> Step<Vec<(&'static str, Vec<Reply>)>> {
        match self.sizes.pop() {
            Some(n) => Step::Send((0..n).map(|_| incr(&self.key)).collect()),
            None => Step::Done(Ok(std::mem::take(&mut self.seen))),
        }
    }
}

impl Plan for Batches {
    type Output = Vec<(&'static str, Vec<Reply>)>;

    fn operation(&self) -> &'static str {
        "batches"
    }

    fn start(&mut self) -> Step<Self::Output> {
        self.next()
    }

    fn resume(&mut self, replies: Vec<Reply>) -> Step<Self::Output> {
        self.seen.push(("resume", replies));
        self.next()
    }

    fn resume_one(&mut self, reply: Reply) -> Step<Self::Output> {
        self.seen.push(("resume_one", vec![reply]));
        self.next()
    }
}

#[test]
fn a_batch_of_one_is_resumed_with_its_reply_alone() {
    let sim = SimCluster::single();
    let node = sim.master(0);
    let mut h = Harness::new(start(), sim, Config::single(node));
    let token = h.submit(Batches {
        key: "n".into(),
        sizes: vec![1, 2, 1],
        seen: Vec::new(),
    });
    let n = |v| Ok(Value::Int(v));
    assert_eq!(
        h.wait_for::<Vec<(&'static str, Vec<Reply>)>>(&token),
        Ok(vec![
            ("resume_one", vec![n(1)]),
            ("resume", vec![n(2), n(3)]),
            ("resume_one", vec![n(4)]),
        ])
    );
}

#[test]
fn waits_carry_their_reason() {
    let now = start();
    let mut config = Config::single(NodeAddr::new("h", 1));
    config.request_timeout = Duration::from_secs(3);
    let mut session = Session::<Tickets>::new(config, now);
    assert!(matches!(
        session.poll(),
        Output::Wait {
            until: None,
            reason: TimerReason::Idle
        }
    ));
    session.submit(now, Ticket::new(Token(1)), Batch::new(vec![get("k")]));
    assert!(matches!(session.poll(), Output::Connect { .. }));
    // The connect deadline (2 s) comes before the batch deadline (3 s).
    match session.poll() {
        Output::Wait { until, reason } => {
            assert_eq!(until, Some(now + Duration::from_secs(2)));
            assert_eq!(reason, TimerReason::Connection);
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_cluster_without_root_nodes_fails_requests_at_once() {
    let now = start();
    let mut session = Session::<Tickets>::new(Config::cluster(Vec::new()), now);
    let ticket = Ticket::new(Token(1));
    session.submit(now, ticket.clone(), Batch::new(vec![get("k")]));
    match session.poll() {
        Output::Complete(completion) => {
            assert_eq!(completion.deliver(), Token(1));
            let replies = ticket.take().unwrap().unwrap();
            assert!(matches!(replies[0], Err(Error::Config(_))), "{replies:?}");
        }
        other => panic!("{other:?}"),
    }
}
