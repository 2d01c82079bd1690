//! A master that stays down while requests keep arriving: one dial per backoff period however
//! many requests arrive, refresh rounds that back off, and every connection the session
//! forgets handed back to the driver to release.

use std::time::Duration;

use botmesh_redis_core::testing::get;
use botmesh_redis_core::testing::sim::{ConnectMode, Harness};
use botmesh_redis_core::Value;

#[test]
fn a_master_down_for_thirty_seconds_is_dialled_once_per_backoff() {
    let mut h = Harness::cluster(3, 0);
    let dead = h.sim.master(0);
    let alive = h.sim.master(1);
    let dead_key = h.sim.keys_on(&dead, 1).remove(0);
    let alive_key = h.sim.keys_on(&alive, 1).remove(0);
    assert_eq!(h.run_one(get(&dead_key)), Ok(Value::Nil));
    let refreshes = h.sim.count("CLUSTER SLOTS");

    // The master goes away and stays away; the topology keeps naming it (no replica).
    h.sim.drop_connections(h.now(), &dead, "killed");
    h.sim.set_connect_mode(&dead, ConnectMode::Refuse);
    // Open-loop load for 30 s: a request to each master every millisecond.
    let mut tokens = Vec::new();
    for _ in 0..30_000 {
        tokens.push(h.submit_batch(vec![get(&dead_key)]));
        tokens.push(h.submit_batch(vec![get(&alive_key)]));
        h.run_for(Duration::from_millis(1));
    }
    let dials = h.connects_to(&dead);
    let queries = h.sim.count("CLUSTER SLOTS") - refreshes;
    // The backoff grows to its cap (500 ms, jittered down to 375 ms): about 80 dials in 30 s
    // at most. Without a per-node backoff every request would dial: 30,000.
    assert!((20..=90).contains(&dials), "{dials} dials");
    // Each failed dial may ask for one refresh round (two queries, never to the dead node),
    // beside the periodic ones every 5 s, and no more.
    assert!(
        queries <= 2 * (dials + 7),
        "{queries} queries for {dials} dials"
    );
    // The session handed back every connection it forgot: only live ones stay open.
    let open: Vec<_> = h.wires().values().filter(|w| !w.closed).collect();
    assert!(
        open.iter().all(|w| w.node != dead),
        "a dead connection was never released"
    );
    // Requests to the live master never waited on the dead one.
    h.run_for(Duration::from_secs(11));
    let alive_ok = tokens
        .iter()
        .skip(1)
        .step_by(2)
        .filter(|t| h.take(*t) == Some(Ok(vec![Ok(Value::Nil)])))
        .count();
    assert_eq!(alive_ok, 30_000);
}

#[test]
fn a_failed_refresh_round_backs_off_whatever_asks_for_another() {
    let mut h = Harness::cluster(3, 0);
    let masters = h.sim.masters();
    let key = h.sim.keys_on(&masters[0], 1).remove(0);
    assert_eq!(h.run_one(get(&key)), Ok(Value::Nil));
    // Every node goes away: rounds fail, and each failed dial asks for a refresh.
    for m in &masters {
        h.sim.drop_connections(h.now(), m, "killed");
        h.sim.set_connect_mode(m, ConnectMode::Refuse);
    }
    let before = h.sim.count("CLUSTER SLOTS");
    let dials_before: usize = masters.iter().map(|m| h.connects_to(m)).sum();
    for _ in 0..10_000 {
        h.submit_batch(vec![get(&key)]);
        h.run_for(Duration::from_millis(1));
    }
    // No node accepts, so no CLUSTER SLOTS is ever written; dials show the rounds. At the
    // 100 ms floor they would be 100 rounds x 2 nodes in 10 s; backing off to 500 ms, far fewer.
    assert_eq!(h.sim.count("CLUSTER SLOTS"), before);
    let dials: usize = masters.iter().map(|m| h.connects_to(m)).sum::<usize>() - dials_before;
    assert!(dials <= 90, "{dials} dials in 10 s");
}
