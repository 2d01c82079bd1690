//! Address remapping (Docker, NAT): the cluster's announced address stays the node's identity
//! in the map and in redirects; the map applies only when dialling.

use std::sync::Arc;

use botmesh_redis_core::driver::session::{Config, DialTarget};
use botmesh_redis_core::keys::slot;
use botmesh_redis_core::testing::sim::{Harness, SimCluster};
use botmesh_redis_core::testing::{get, set, start};
use botmesh_redis_core::NodeAddr;
use botmesh_redis_core::Value;

#[test]
fn announced_addresses_are_identities_and_dial_addresses_are_mapped() {
    let mut sim = SimCluster::cluster(3, 0);
    let masters = sim.masters();
    let announced = |m: &NodeAddr| NodeAddr::new("10.9.0.1", m.port + 100);
    for m in &masters {
        sim.announce_as(m, announced(m));
    }
    // Roots are given by their real addresses; everything learnt is announced.
    let mut config = Config::cluster(masters.clone());
    config.address_map = Some(Arc::new(|a: &NodeAddr| {
        if a.host == "10.9.0.1" {
            NodeAddr::new("127.0.0.1", a.port - 100)
        } else {
            a.clone()
        }
    }));
    let mut h = Harness::new(start(), sim, config);
    let (a, c) = (masters[0].clone(), masters[2].clone());
    let key = h.sim.keys_on(&a, 1).remove(0);
    let s = slot(key.as_bytes());
    assert_eq!(h.run_one(set(&key, "v")), Ok(Value::Status("OK".into())));
    assert_eq!(h.session.slot_owner(s), Some(&announced(&a)));
    let data_wire = h
        .wires()
        .values()
        .find(|w| w.commands().contains(&format!("SET {key} v")))
        .unwrap();
    assert_eq!(data_wire.node, announced(&a));
    assert_eq!(data_wire.dial, DialTarget::Tcp(a.clone()));

    // A redirect names the announced address; it is dialled through the map.
    h.sim.move_slot(s, &c);
    assert_eq!(h.run_one(get(&key)), Ok(Value::from("v")));
    assert_eq!(h.session.slot_owner(s), Some(&announced(&c)));
    let to_c = h
        .wires()
        .values()
        .find(|w| {
            w.commands().contains(&format!("GET {key}")) && w.dial == DialTarget::Tcp(c.clone())
        })
        .unwrap();
    assert_eq!(to_c.node, announced(&c));
}
