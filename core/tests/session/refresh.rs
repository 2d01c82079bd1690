//! Topology refresh: one at a time, rate-limited, never blocking traffic; two nodes asked, a
//! complete answer preferred; periodic, and whenever a connection fails; failed rounds back
//! off, and requests waiting for a first map count them as attempts.

use std::time::Duration;

use crate::support::cluster;
use botmesh_redis_core::driver::session::Config;
use botmesh_redis_core::testing::sim::{encode_reply, ConnectMode, Harness, Rule, SimCluster};
use botmesh_redis_core::testing::{get, set, start};
use botmesh_redis_core::{ConfigError, Error};
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
    sim.add_rule(Rule::error("CLUSTERDOWN The cluster is down").commands(&["CLUSTER"]));
    let masters = sim.masters();
    let config = Config::cluster(masters.clone());
    let mut h = Harness::new(start(), sim, config);
    let reply = h.run_one(get("k"));
    // Discovery failed, and the error says which seeds were asked and what each answered:
    // rounds of two rotate over the roots, so all three were.
    let down = Error::Server(ServerError::new("CLUSTERDOWN The cluster is down"));
    let Err(Error::Discovery { tried }) = &reply else {
        panic!("not a discovery error: {reply:?}");
    };
    let mut seeds: Vec<_> = tried.iter().map(|t| t.seed.clone()).collect();
    seeds.sort();
    assert_eq!(seeds, masters);
    assert!(tried.iter().all(|t| t.answer == down), "{tried:?}");
    assert!(!reply.as_ref().unwrap_err().outcome_unknown());
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
fn unreachable_roots_end_waiting_requests_with_a_discovery_error() {
    let mut sim = SimCluster::cluster(3, 0);
    for m in sim.masters() {
        sim.set_connect_mode(&m, ConnectMode::Refuse);
    }
    let config = Config::cluster(sim.masters());
    let mut h = Harness::new(start(), sim, config);
    let reply = h.run_one(get("k"));
    let Err(Error::Discovery { tried }) = &reply else {
        panic!("not a discovery error: {reply:?}");
    };
    assert_eq!(tried.len(), 3, "{tried:?}");
    for t in tried {
        assert_eq!(
            t.answer,
            Error::Connect {
                addr: t.seed.clone(),
                reason: "connection refused".into()
            }
        );
    }
    let shown = reply.as_ref().unwrap_err().to_string();
    assert!(shown.starts_with("cluster discovery failed"), "{shown}");
    assert!(
        shown.contains("127.0.0.1:7000 (could not connect"),
        "{shown}"
    );
    // A root that comes back gives the map, and serves its slots.
    let a = h.sim.master(0);
    h.sim.set_connect_mode(&a, ConnectMode::Accept);
    h.run_for(Duration::from_secs(1));
    let key = h.sim.keys_on(&a, 1).remove(0);
    assert_eq!(h.run_one(get(&key)), Ok(Value::Nil));
    assert_eq!(h.session.slot_owner(0), Some(&a));
}

#[test]
fn a_seed_without_cluster_support_is_refused_at_once() {
    // A cluster client aimed at a single node: its CLUSTER SLOTS answers that cluster support
    // is disabled, which no retry changes.
    let sim = SimCluster::single();
    let node = sim.master(0);
    let mut h = Harness::new(start(), sim, Config::cluster(vec![node.clone()]));
    let reply = h.run_one(get("k"));
    assert_eq!(
        reply,
        Err(Error::Config(ConfigError::SingleNodeForClusterClient {
            addr: node.clone()
        }))
    );
    assert_eq!(h.elapsed(), Duration::ZERO);
    assert_eq!(refresh_times(&h).len(), 1, "one round, no retry");
    assert_eq!(h.sim.count("GET k"), 0);
    let shown = reply.unwrap_err().to_string();
    assert!(
        shown.contains("use ClientOptions::url(\"redis://127.0.0.1:7000\")"),
        "{shown}"
    );
}

#[test]
fn a_single_node_among_cluster_seeds_does_not_stop_discovery() {
    // One seed is a single node by mistake, the other a cluster node: the map wins.
    let mut sim = SimCluster::cluster(3, 0);
    let (a, b) = (sim.master(0), sim.master(1));
    sim.add_rule(
        Rule::error("ERR This instance has cluster support disabled")
            .on(&a)
            .commands(&["CLUSTER"]),
    );
    let mut h = Harness::new(start(), sim, Config::cluster(vec![a, b]));
    assert_eq!(h.run_one(get("k")), Ok(Value::Nil));
}

#[test]
fn a_map_without_slots_is_what_the_seed_answered() {
    // A fresh node whose cluster was never set up answers CLUSTER SLOTS with an empty list.
    let mut sim = SimCluster::cluster(1, 0);
    let node = sim.master(0);
    let mut bytes = BytesMut::new();
    encode_reply(&Ok(Value::Array(vec![])), &mut bytes);
    sim.add_rule(Rule::raw(bytes.freeze()).commands(&["CLUSTER"]));
    let mut config = Config::cluster(vec![node.clone()]);
    config.retry.attempts = 1;
    let mut h = Harness::new(start(), sim, config);
    let reply = h.run_one(get("k"));
    let Err(Error::Discovery { tried }) = &reply else {
        panic!("not a discovery error: {reply:?}");
    };
    assert_eq!(tried.len(), 1);
    assert_eq!(tried[0].seed, node);
    assert!(
        matches!(&tried[0].answer, Error::UnexpectedReply { detail } if detail.contains("no slot")),
        "{tried:?}"
    );
}
