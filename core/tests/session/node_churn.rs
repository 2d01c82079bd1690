//! Pod churn: a master that comes back under a new address again and again. The session
//! forgets each old address once it has been absent from the topology for a while, closes
//! its idle connection, and reuses its slot: nothing grows with the churn.

use std::sync::Arc;
use std::time::Duration;

use botmesh_redis_core::driver::session::{Config, FORGET_AFTER};
use botmesh_redis_core::testing::sim::{Harness, SimCluster};
use botmesh_redis_core::testing::{get, start};
use botmesh_redis_core::NodeAddr;
use botmesh_redis_core::Value;

#[test]
fn nodes_that_left_the_topology_are_forgotten() {
    let sim = SimCluster::cluster(3, 0);
    let real = sim.master(0);
    let mut config = Config::cluster(sim.masters());
    // Every `pod-N` address is the same simulated node under a new name.
    let dial = real.clone();
    config.address_map = Some(Arc::new(move |addr: &NodeAddr| {
        if addr.host.starts_with("pod-") {
            dial.clone()
        } else {
            addr.clone()
        }
    }));
    let mut h = Harness::new(start(), sim, config);
    let key = h.sim.keys_on(&real, 1).remove(0);
    assert_eq!(h.run_one(get(&key)), Ok(Value::Nil));
    let baseline = h.session.known_nodes();
    assert_eq!(baseline, 3);

    // A new address every 10 s for 20 minutes; each is used, then left behind.
    let mut most = 0;
    for i in 0..120 {
        h.sim
            .announce_as(&real, NodeAddr::new(format!("pod-{i}"), 7000));
        // The periodic refresh (every 5 s) finds the new name; calls then go to it.
        h.run_for(Duration::from_secs(10));
        assert_eq!(h.run_one(get(&key)), Ok(Value::Nil), "churn {i}");
        most = most.max(h.session.known_nodes());
    }
    // The roots (3, one of them the real address), plus the addresses of the last
    // FORGET_AFTER and the refreshes around it.
    let window = (FORGET_AFTER.as_secs() / 10 + 2) as usize;
    assert!(most <= 3 + window, "{most} nodes known at the most");
    // Connections to forgotten names were closed: the open ones are few.
    let open = h.wires().values().filter(|w| !w.closed).count();
    assert!(open <= 3 + window, "{open} connections open");
    assert!(h.wires().len() > 100, "a connection per name was made");
}
