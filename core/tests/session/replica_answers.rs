//! A plain single node that answers as a replica (`READONLY`, `MASTERDOWN`) is dialled again:
//! behind a name a failover moved to the new master (a managed service's endpoint, a
//! Kubernetes Service), the connection open to the old master was answered `READONLY` until
//! the process restarted, since a name is looked up only when it is dialled. The connection
//! takes no more requests and closes once the replies written on it are in.

use botmesh_redis_core::driver::session::Config;
use botmesh_redis_core::testing::sim::{Harness, Rule, SimCluster};
use botmesh_redis_core::testing::{get, incr, start};
use botmesh_redis_core::{NodeAddr, Value};

/// A single node with one write answered, whose next `INCR`s (`times` of them, or all) are
/// answered `READONLY`.
fn demoted(times: Option<u32>) -> (Harness, NodeAddr) {
    let sim = SimCluster::single();
    let node = sim.master(0);
    let mut h = Harness::new(start(), sim, Config::single(node.clone()));
    assert_eq!(h.run_one(incr("n")), Ok(Value::Int(1)));
    let rule = Rule::error("READONLY You can't write against a read only replica.")
        .on(&node)
        .commands(&["INCR"]);
    h.sim.add_rule(match times {
        Some(n) => rule.times(n),
        None => rule,
    });
    (h, node)
}

#[test]
fn a_single_node_that_answers_as_a_replica_is_dialled_again() {
    // The first write after the failover meets the demoted node; a read written behind it on
    // the same connection is still answered there.
    let (mut h, node) = demoted(Some(1));
    let write = h.submit_batch(vec![incr("n")]);
    let read = h.submit_batch(vec![get("n")]);
    assert_eq!(h.wait_for(&read), Ok(vec![Ok(Value::from("1"))]));
    // The write's retry goes on a new connection, dialled after the replica's answer.
    assert_eq!(h.wait_for(&write), Ok(vec![Ok(Value::Int(2))]));
    assert_eq!(h.connects_to(&node), 2);
    let wires = h.wires_to(&node);
    assert_eq!(wires.len(), 2);
    assert!(
        wires[0].closed,
        "the replica's connection is closed: {wires:#?}"
    );
    assert!(!wires[1].closed);
    assert_eq!(h.run_one(incr("n")), Ok(Value::Int(3)));
    assert_eq!(h.connects_to(&node), 2, "the new connection stays");
}

/// A client pointed at a replica on purpose (or a node whose `MASTERDOWN` lasts) dials again
/// at most once a second while its writes are refused, not at every refusal.
#[test]
fn a_node_that_stays_a_replica_is_dialled_again_once_a_second() {
    let (mut h, node) = demoted(None);
    let t0 = h.elapsed();
    let write = h.submit_batch(vec![incr("n")]);
    let refused = h.wait_for(&write).unwrap();
    assert!(
        matches!(
            &refused[..],
            [Err(botmesh_redis_core::Error::RetriesExhausted { .. })]
        ),
        "{refused:?}"
    );
    let seconds = (h.elapsed() - t0).as_secs();
    // The first connection, and one a second after its first refusal at most.
    let dials = h.connects_to(&node);
    assert!(
        dials >= 2 && dials as u64 <= 2 + seconds,
        "{dials} dials in {seconds} s of refusals"
    );
}
