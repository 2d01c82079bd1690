//! A caller that stops waiting (its call's future dropped: a timeout around the call, a
//! `select!` that took another branch): its plan, if nothing of it was written yet, ends
//! unwritten with `NotSent`, wherever it waited (on its way to the session, a connection
//! opening, the first slot map); a plan already written goes to its end, every step of it.

use std::time::Duration;

use crate::support::cluster;
use botmesh_redis_core::driver::session::{Config, Output, Session, TimerReason};
use botmesh_redis_core::testing::sim::{Harness, SimCluster};
use botmesh_redis_core::testing::{get, incr, set, start, Batch, Sequence, Ticket, Tickets, Token};
use botmesh_redis_core::{Error, NodeAddr, Value};

fn single() -> (Harness, NodeAddr) {
    let sim = SimCluster::single();
    let node = sim.master(0);
    let h = Harness::new(start(), sim, Config::single(node.clone()));
    (h, node)
}

fn not_sent() -> Error {
    Error::NotSent {
        reason: "its caller stopped waiting before it was written".into(),
    }
}

#[test]
fn a_plan_given_up_before_it_reaches_the_session_is_not_started() {
    let now = start();
    let node = NodeAddr::new("127.0.0.1", 6379);
    let mut session = Session::<Tickets>::new(Config::single(node), now);
    let ticket = Ticket::new(Token(1));
    ticket.abandon();
    session.submit(now, ticket.clone(), Batch::new(vec![set("k", "late")]));
    // Ended at once: no connection opened for it, no timer armed.
    match session.poll() {
        Output::Complete(completion) => {
            assert_eq!(completion.summary().outcome, "not_sent");
            assert_eq!(completion.deliver(), Token(1));
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(ticket.take(), Some(Err(not_sent())));
    assert!(matches!(
        session.poll(),
        Output::Wait {
            until: None,
            reason: TimerReason::Idle
        }
    ));
}

#[test]
fn a_call_given_up_while_its_connection_opens_is_never_written() {
    let (mut h, node) = single();
    // The connection opens on simulated time: both plans wait in its outbox.
    let given_up = h.submit_batch(vec![set("k", "late")]);
    let kept = h.submit_batch(vec![incr("n")]);
    given_up.abandon();
    assert_eq!(h.wait_for(&kept), Ok(vec![Ok(Value::Int(1))]));
    assert_eq!(h.wait_for(&given_up), Err(not_sent()));
    assert!(!not_sent().outcome_unknown());
    assert_eq!(h.written_to(&node), vec!["PING", "INCR n"]);
    assert_eq!(h.run_one(get("k")), Ok(Value::Nil));
    let summary = h
        .summary(&given_up)
        .expect("a summary of the given-up plan");
    assert_eq!(summary.outcome, "not_sent");
}

#[test]
fn a_batch_given_up_before_the_first_slot_map_is_written_nowhere() {
    let mut h = cluster();
    let masters = h.sim.masters();
    let keys: Vec<String> = masters
        .iter()
        .map(|m| h.sim.keys_on(m, 1).remove(0))
        .collect();
    // Nothing routes before `CLUSTER SLOTS` is answered: the batch waits for the map.
    let given_up = h.submit_batch(keys.iter().map(|k| set(k, "late")).collect());
    given_up.abandon();
    let kept = h.submit_batch(vec![incr(&keys[0])]);
    assert_eq!(h.wait_for(&kept), Ok(vec![Ok(Value::Int(1))]));
    assert_eq!(h.wait_for(&given_up), Err(not_sent()));
    for (master, key) in masters.iter().zip(&keys) {
        let sets: Vec<String> = h
            .sim
            .data_commands_on(master)
            .into_iter()
            .filter(|c| c.starts_with("SET"))
            .collect();
        assert_eq!(sets, Vec::<String>::new(), "{master}");
        assert_eq!(h.sim.value(key.as_bytes()).is_some(), key == &keys[0]);
    }
}

#[test]
fn a_plan_given_up_after_its_first_write_runs_every_step() {
    let (mut h, node) = single();
    h.sim.set_latency(&node, Duration::from_millis(50));
    // The connection is open and idle: the first step is written at once.
    assert_eq!(h.run_one(incr("warm")), Ok(Value::Int(1)));
    let plan = Sequence::new(vec![vec![set("a", "1")], vec![set("b", "2")]]);
    let ticket = h.submit(plan);
    assert_eq!(
        h.written_to(&node).last().map(String::as_str),
        Some("SET a 1")
    );
    ticket.abandon();
    let ok = || Ok(Value::Status("OK".into()));
    assert_eq!(h.wait_for(&ticket), Ok(vec![vec![ok()], vec![ok()]]));
    assert_eq!(h.sim.value(b"b").as_deref(), Some(&b"2"[..]));
}
