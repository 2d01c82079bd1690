//! A batch retries only its failed requests, never ones that already ran; replies come back
//! in the batch's order whatever order the nodes answer in.

use std::time::Duration;

use crate::support::cluster;
use botmesh_redis_core::keys::slot;
use botmesh_redis_core::testing::sim::Rule;
use botmesh_redis_core::testing::{get, incr, set};
use botmesh_redis_core::Error;
use botmesh_redis_core::Value;

#[test]
fn only_the_failed_requests_of_a_batch_are_retried() {
    let mut h = cluster();
    let (a, b, c) = (h.sim.master(0), h.sim.master(1), h.sim.master(2));
    let ka = h.sim.keys_on(&a, 2);
    let kb = h.sim.keys_on(&b, 1).remove(0);
    let kc = h.sim.keys_on(&c, 1).remove(0);
    h.run_one(get("warm-up")).unwrap();
    h.run_for(Duration::from_secs(1));
    // b is loading for a moment, a slot of a moved to c, c answers at once.
    h.sim.add_rule(
        Rule::error("LOADING Redis is loading the dataset in memory")
            .on(&b)
            .times(1),
    );
    h.sim.move_slot(slot(ka[1].as_bytes()), &c);
    let replies = h.run_batch(vec![incr(&ka[0]), incr(&kb), incr(&kc), incr(&ka[1])]);
    assert_eq!(replies, vec![Ok(Value::Int(1)); 4]);
    assert_eq!(h.sim.count(&format!("INCR {}", ka[0])), 1);
    assert_eq!(h.sim.count(&format!("INCR {}", kb)), 2);
    assert_eq!(h.sim.count(&format!("INCR {}", kc)), 1);
    assert_eq!(h.sim.count(&format!("INCR {}", ka[1])), 2);
    let on_c = h.sim.data_commands_on(&c);
    assert_eq!(
        on_c[on_c.len() - 2..],
        [format!("INCR {kc}"), format!("INCR {}", ka[1])]
    );
}

#[test]
fn a_lost_write_does_not_fail_its_batch_neighbours() {
    let mut h = cluster();
    let (a, b) = (h.sim.master(0), h.sim.master(1));
    let ka = h.sim.keys_on(&a, 1).remove(0);
    let kb = h.sim.keys_on(&b, 1).remove(0);
    h.run_one(set(&kb, "b")).unwrap();
    h.sim.add_rule(
        Rule::drop_connection(true)
            .on(&a)
            .commands(&["INCR"])
            .times(1),
    );
    let replies = h.run_batch(vec![incr(&ka), get(&kb), incr(&kb)]);
    assert!(matches!(replies[0], Err(Error::ReplyLost { .. })));
    assert_eq!(replies[1], Ok(Value::from("b")));
    assert!(replies[2].as_ref().unwrap_err().server().is_some());
}

#[test]
fn replies_keep_the_batch_order() {
    let mut h = cluster();
    let (a, b) = (h.sim.master(0), h.sim.master(1));
    let ka = h.sim.keys_on(&a, 3);
    let kb = h.sim.keys_on(&b, 3);
    let mut setup = Vec::new();
    for (i, k) in ka.iter().chain(&kb).enumerate() {
        setup.push(set(k, &i.to_string()));
    }
    h.run_batch(setup);
    // b answers first, a later.
    h.sim.set_latency(&a, Duration::from_millis(5));
    let batch = vec![
        get(&ka[0]),
        get(&kb[0]),
        get(&ka[1]),
        get(&kb[1]),
        get(&ka[2]),
        get(&kb[2]),
    ];
    let replies = h.run_batch(batch);
    let want: Vec<_> = ["0", "3", "1", "4", "2", "5"]
        .iter()
        .map(|v| Ok(Value::from(*v)))
        .collect();
    assert_eq!(replies, want);
}
