//! A request ends as not sent, sent with no reply, or replied. A write whose reply is lost is
//! reported as outcome unknown and never re-sent, whether or not it ran; a read whose reply is
//! lost is simply asked again.

use std::time::Duration;

use crate::support::cluster;
use botmesh_redis_core::driver::session::Config;
use botmesh_redis_core::testing::sim::{Harness, Rule, SimCluster};
use botmesh_redis_core::testing::{get, incr, set, start};
use botmesh_redis_core::Error;
use botmesh_redis_core::Value;

fn lost(addr: &str) -> Error {
    Error::ReplyLost {
        addr: botmesh_redis_core::NodeAddr::parse(addr, "").unwrap(),
        reason: "connection reset by peer".to_owned(),
    }
}

#[test]
fn a_write_whose_reply_is_lost_is_outcome_unknown_and_sent_once() {
    for applied in [true, false] {
        let mut h = cluster();
        let a = h.sim.master(0);
        let key = h.sim.keys_on(&a, 1).remove(0);
        h.sim
            .add_rule(Rule::drop_connection(applied).commands(&["INCR"]).times(1));

        let reply = h.run_one(incr(&key));
        assert_eq!(reply, Err(lost("127.0.0.1:7000")), "applied: {applied}");
        assert!(reply.unwrap_err().outcome_unknown());
        // Nothing re-sends it later either: not the reconnect, not a refresh.
        h.run_for(Duration::from_secs(30));
        assert_eq!(h.sim.count(&format!("INCR {key}")), 1);
        let stored = h.sim.value(key.as_bytes());
        assert_eq!(stored, applied.then(|| "1".into()), "applied: {applied}");
        // The node is usable again through a new connection.
        let expected = if applied { 2 } else { 1 };
        assert_eq!(h.run_one(incr(&key)), Ok(Value::Int(expected)));
        assert_eq!(h.connects_to(&a), 2);
    }
}

#[test]
fn a_read_whose_reply_is_lost_is_retried_and_succeeds() {
    let mut h = cluster();
    let a = h.sim.master(0);
    let key = h.sim.keys_on(&a, 1).remove(0);
    h.run_one(set(&key, "v")).unwrap();
    h.sim
        .add_rule(Rule::drop_connection(true).commands(&["GET"]).times(1));

    assert_eq!(h.run_one(get(&key)), Ok(Value::from("v")));
    assert_eq!(h.sim.count(&format!("GET {key}")), 2);
    assert_eq!(h.connects_to(&a), 2);
    // One backoff step (10 ms ± 25 %), then the reconnect and the answer.
    assert!(
        h.elapsed() >= Duration::from_micros(7_500),
        "{:?}",
        h.elapsed()
    );
    assert!(
        h.elapsed() < Duration::from_micros(12_500),
        "{:?}",
        h.elapsed()
    );
}

#[test]
fn everything_written_before_a_drop_is_settled_by_kind() {
    let mut h = cluster();
    let a = h.sim.master(0);
    let keys = h.sim.keys_on(&a, 3);
    h.run_one(set(&keys[2], "r")).unwrap();
    h.sim
        .add_rule(Rule::drop_connection(true).commands(&["INCR"]).times(1));
    // One write: the INCR that drops, an INCR the node never reads, and a GET.
    let replies = h.run_batch(vec![incr(&keys[0]), incr(&keys[1]), get(&keys[2])]);
    assert_eq!(
        replies,
        vec![
            Err(lost("127.0.0.1:7000")),
            Err(lost("127.0.0.1:7000")),
            Ok(Value::from("r"))
        ]
    );
    // The second INCR never reached the node, but the client cannot know that: it was
    // written, so it is reported as unknown, and not re-sent.
    assert_eq!(h.sim.count(&format!("INCR {}", keys[1])), 0);
    assert_eq!(h.sim.value(keys[0].as_bytes()), Some("1".into()));
    assert_eq!(h.sim.count(&format!("GET {}", keys[2])), 1);
    let wires = h.wires_to(&a);
    assert_eq!(
        wires[0].commands()[3..],
        [
            format!("INCR {}", keys[0]),
            format!("INCR {}", keys[1]),
            format!("GET {}", keys[2])
        ]
    );
    assert_eq!(
        wires[1].commands(),
        vec!["PING".to_owned(), format!("GET {}", keys[2])]
    );
}

#[test]
fn single_node_write_lost_is_not_resent_after_reconnect() {
    let sim = SimCluster::single();
    let node = sim.master(0);
    let mut h = Harness::new(start(), sim, Config::single(node.clone()));
    h.sim
        .add_rule(Rule::drop_connection(true).commands(&["INCR"]).times(1));
    assert_eq!(h.run_one(incr("n")), Err(lost("127.0.0.1:7000")));
    assert_eq!(h.run_one(incr("n")), Ok(Value::Int(2)));
    assert_eq!(h.sim.count("INCR n"), 2);
    assert_eq!(
        h.written_to(&node),
        vec!["PING", "INCR n", "PING", "INCR n"]
    );
}
