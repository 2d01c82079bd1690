//! Topology refresh: one at a time, rate-limited, never blocking traffic; two nodes asked, a
//! complete answer preferred; periodic, and whenever a connection fails; failed rounds back
//! off, and requests waiting for a first map count them as attempts.

use std::time::Duration;

use crate::support::cluster;
use botmesh_redis_core::driver::session::Config;
use botmesh_redis_core::testing::sim::{encode_reply, ConnectMode, Harness, Rule, SimCluster};
use botmesh_redis_core::testing::{get, set, start};
use botmesh_redis_core::Error;
use botmesh_redis_core::{ServerError, Value};
use bytes::BytesMut;

fn refresh_times(h: &Harness) -> Vec<Duration> {
    h.sim
        .received()
        .iter()
        .filter(|r| r.name() == "CLUSTER")
        .map(|r| r.at - h.at(Duration::ZERO))
        .collect()
}

#[test]
fn requests_before_the_first_map_wait_for_the_one_round() {
    let mut h = cluster();
    let replies = h.run_batch(vec![get("a"), get("b"), get("c")]);
    assert_eq!(replies, vec![Ok(Value::Nil); 3]);
    h.run_for(Duration::from_secs(1));
    // One round of two queries: waiting for the map is no reason to ask again.
    assert_eq!(refresh_times(&h), vec![Duration::ZERO; 2]);
}

#[test]
fn the_periodic_refresh_follows_the_interval() {
    let sim = SimCluster::cluster(3, 0);
    let mut config = Config::cluster(sim.masters());
    config.refresh_interval = Duration::from_secs(2);
    let mut h = Harness::new(start(), sim, config);
    h.run_for(Duration::from_millis(6500));
    let s = Duration::from_secs;
    // At 2 s the second node asked has no connection yet: the first complete answer ends
    // the round while its handshake runs. Later rounds find both connections open.
    assert_eq!(
        refresh_times(&h),
        vec![s(0), s(0), s(2), s(4), s(4), s(6), s(6)]
    );
}

#[test]
fn a_complete_answer_wins_over_a_partial_one() {
    let mut sim = SimCluster::cluster(3, 0);
    let (a, c) = (sim.master(0), sim.master(2));
    // a answers first, with a view that covers only slots 0-100 and gives them to c.
    let partial = Value::Array(vec![Value::Array(vec![
        Value::Int(0),
        Value::Int(100),
        Value::Array(vec![
            Value::from(c.host.as_str()),
            Value::Int(i64::from(c.port)),
            Value::from("id"),
        ]),
    ])]);
    let mut bytes = BytesMut::new();
    encode_reply(&Ok(partial), &mut bytes);
    sim.add_rule(
        Rule::raw(bytes.freeze())
            .on(&a)
            .commands(&["CLUSTER"])
            .times(1),
    );
    let config = Config::cluster(sim.masters());
    let mut h = Harness::new(start(), sim, config);
    h.run_one(set("k", "v")).unwrap();
    assert_eq!(h.session.slot_owner(0), Some(&a));
    assert_eq!(h.session.slot_owner(16383), Some(&c));
}

#[test]
fn a_failed_connection_triggers_a_refresh() {
    let mut h = cluster();
    h.run_one(get("k")).unwrap();
    h.run_for(Duration::from_secs(1));
    let a = h.sim.master(0);
    h.sim.drop_connections(h.now(), &a, "restart");
    h.run_for(Duration::from_millis(1));
    let times = refresh_times(&h);
    // The new connection's query waits for its handshake; the other node's complete answer
    // ends the round first, so one query of the round is sent.
    assert_eq!(times.len(), 3, "{times:?}");
    assert_eq!(times[2..], [Duration::from_secs(1)]);
}

#[test]
fn failed_rounds_back_off_and_end_waiting_requests() {
    let mut sim = SimCluster::cluster(3, 0);
    sim.add_rule(
        Rule::error("ERR This instance has cluster support disabled").commands(&["CLUSTER"]),
    );
    let config = Config::cluster(sim.masters());
    let mut h = Harness::new(start(), sim, config);
    let reply = h.run_one(get("k"));
    assert_eq!(
        reply,
        Err(Error::Server(ServerError::new(
            "ERR This instance has cluster support disabled"
        )))
    );
    let times = refresh_times(&h);
    // 11 rounds of two: the first, and one per allowed retry.
    assert_eq!(times.len(), 22, "{times:?}");
    for pair in times.chunks(2).collect::<Vec<_>>().windows(2) {
        let gap = pair[1][0] - pair[0][0];
        assert!(gap >= Duration::from_millis(100), "{times:?}");
    }
    assert!(h.elapsed() < Duration::from_secs(5), "{:?}", h.elapsed());
}

#[test]
fn unreachable_roots_end_waiting_requests_with_connect() {
    let mut sim = SimCluster::cluster(3, 0);
    for m in sim.masters() {
        sim.set_connect_mode(&m, ConnectMode::Refuse);
    }
    let config = Config::cluster(sim.masters());
    let mut h = Harness::new(start(), sim, config);
    let reply = h.run_one(get("k"));
    assert!(
        matches!(&reply, Err(Error::Connect { reason, .. }) if reason == "connection refused"),
        "{reply:?}"
    );
    // A root that comes back gives the map, and serves its slots.
    let a = h.sim.master(0);
    h.sim.set_connect_mode(&a, ConnectMode::Accept);
    h.run_for(Duration::from_secs(1));
    let key = h.sim.keys_on(&a, 1).remove(0);
    assert_eq!(h.run_one(get(&key)), Ok(Value::Nil));
    assert_eq!(h.session.slot_owner(0), Some(&a));
}
