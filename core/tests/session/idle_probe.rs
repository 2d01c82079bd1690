//! An idle connection is sent a `PING` once quiet for `Config::idle_probe`: a peer that
//! answers keeps it; one that went silent (a host gone, a NAT or load balancer that forgot the
//! connection) has it closed by the response timeout, so the next write dials again instead of
//! meeting the dead connection and ending as `ReplyLost` after the response timeout.

use std::time::Duration;

use botmesh_redis_core::driver::session::Config;
use botmesh_redis_core::testing::sim::{Harness, SimCluster};
use botmesh_redis_core::testing::{incr, start};
use botmesh_redis_core::Value;

fn harness(probe: Option<Duration>) -> (Harness, botmesh_redis_core::NodeAddr) {
    let sim = SimCluster::single();
    let node = sim.master(0);
    let mut config = Config::single(node.clone());
    config.idle_probe = probe;
    (Harness::new(start(), sim, config), node)
}

#[test]
fn an_answering_idle_connection_is_kept() {
    let (mut h, node) = harness(Some(Duration::from_secs(30)));
    assert_eq!(h.run_one(incr("n")), Ok(Value::Int(1)));
    h.run_for(Duration::from_secs(29));
    assert_eq!(h.written_to(&node), vec!["PING", "INCR n"]);
    h.run_for(Duration::from_secs(32));
    // One probe a quiet 30 s, each answered.
    assert_eq!(h.written_to(&node), vec!["PING", "INCR n", "PING", "PING"]);
    assert_eq!(h.run_one(incr("n")), Ok(Value::Int(2)));
    assert_eq!(h.connects_to(&node), 1);
}

#[test]
fn a_silent_idle_connection_is_closed_before_the_next_write() {
    let (mut h, node) = harness(Some(Duration::from_secs(30)));
    assert_eq!(h.run_one(incr("n")), Ok(Value::Int(1)));
    h.sim.stall(&node);
    // The probe at 30 s goes unanswered; the response timeout (5 s) closes the connection.
    h.run_for(Duration::from_secs(36));
    let wires = h.wires_to(&node);
    assert_eq!(wires.len(), 1);
    assert!(
        wires[0].closed,
        "the silent connection is closed: {wires:#?}"
    );
    h.sim.unstall(h.now(), &node);
    // The next write dials again and is answered at once (it met the dead connection and
    // ended as `ReplyLost` after 5 s before).
    let submitted = h.elapsed();
    let write = h.submit_batch(vec![incr("n")]);
    assert_eq!(h.wait_for(&write), Ok(vec![Ok(Value::Int(2))]));
    let took = h.completed_after(&write).unwrap() - submitted;
    assert!(took < Duration::from_secs(1), "{took:?}");
    assert_eq!(h.connects_to(&node), 2);
}

#[test]
fn no_probe_when_turned_off() {
    let (mut h, node) = harness(None);
    assert_eq!(h.run_one(incr("n")), Ok(Value::Int(1)));
    h.run_for(Duration::from_secs(120));
    assert_eq!(h.written_to(&node), vec!["PING", "INCR n"]);
}
