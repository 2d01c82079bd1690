//! Opening connections: a refused or hanging connect, `AUTH` first on every connection, a
//! refused password, and requests queued on a connection that never opened.

use std::time::Duration;

use botmesh_redis_core::driver::session::{Auth, Config};
use botmesh_redis_core::testing::sim::{ConnectMode, Harness, SimCluster};
use botmesh_redis_core::testing::{get, incr, set, start};
use botmesh_redis_core::Error;
use botmesh_redis_core::NodeAddr;
use botmesh_redis_core::Value;

fn single(mode: ConnectMode) -> (Harness, NodeAddr) {
    let mut sim = SimCluster::single();
    let node = sim.master(0);
    sim.set_connect_mode(&node, mode);
    (
        Harness::new(start(), sim, Config::single(node.clone())),
        node,
    )
}

#[test]
fn a_refused_single_node_fails_at_once_with_connect() {
    let (mut h, node) = single(ConnectMode::Refuse);
    let reply = h.run_one(incr("n"));
    assert_eq!(
        reply,
        Err(Error::Connect {
            addr: node.clone(),
            reason: "connection refused".into()
        })
    );
    assert!(!reply.unwrap_err().outcome_unknown());
    assert_eq!(h.elapsed(), Duration::ZERO);
    assert_eq!(h.connects_to(&node), 1);
}

#[test]
fn a_hanging_single_node_fails_at_the_connect_timeout() {
    let (mut h, node) = single(ConnectMode::Hang);
    let replies = h.run_batch(vec![incr("n"), get("m")]);
    let error = Error::Connect {
        addr: node.clone(),
        reason: "no connection within 2s".into(),
    };
    assert_eq!(replies, vec![Err(error.clone()), Err(error)]);
    assert_eq!(h.elapsed(), Duration::from_secs(2));
    assert!(
        h.wires_to(&node)[0].closed,
        "the session closed the attempt"
    );
    // The next request tries again.
    h.sim.set_connect_mode(&node, ConnectMode::Accept);
    assert_eq!(h.run_one(incr("n")), Ok(Value::Int(1)));
}

#[test]
fn auth_goes_first_on_every_connection() {
    let sim = SimCluster::cluster(3, 0);
    let mut config = Config::cluster(sim.masters());
    config.auth = Some(Auth {
        username: Some("bot".into()),
        password: "s3cret".into(),
    });
    let mut h = Harness::new(start(), sim, config);
    h.sim.require_password(Some("bot"), "s3cret");
    let masters = h.sim.masters();
    let mut batch = Vec::new();
    for m in &masters {
        batch.push(set(&h.sim.keys_on(m, 1)[0], "v"));
    }
    let replies = h.run_batch(batch);
    assert_eq!(replies, vec![Ok(Value::Status("OK".into())); 3]);
    for m in &masters {
        let wires = h.wires_to(m);
        assert_eq!(wires.len(), 1);
        assert_eq!(wires[0].commands()[0], "AUTH bot s3cret", "{m}");
    }
}

#[test]
fn a_wrong_password_is_an_auth_error_on_a_single_node() {
    let mut sim = SimCluster::single();
    let node = sim.master(0);
    sim.require_password(None, "right");
    let mut config = Config::single(node.clone());
    config.auth = Some(Auth {
        username: None,
        password: "wrong".into(),
    });
    let mut h = Harness::new(start(), sim, config);
    let replies = h.run_batch(vec![incr("n"), get("n")]);
    let error = Error::Auth {
        addr: node.clone(),
        reason: "WRONGPASS invalid username-password pair or user is disabled.".into(),
    };
    assert_eq!(replies, vec![Err(error.clone()), Err(error)]);
    assert!(h.wires_to(&node)[0].closed);
    assert_eq!(h.written_to(&node), vec!["AUTH wrong"]);
    assert_eq!(h.sim.count("INCR n"), 0);
}

#[test]
fn a_wrong_password_fails_cluster_requests_without_retrying_for_seconds() {
    let mut sim = SimCluster::cluster(3, 0);
    sim.require_password(None, "right");
    let mut config = Config::cluster(sim.masters());
    config.auth = Some(Auth {
        username: None,
        password: "wrong".into(),
    });
    let mut h = Harness::new(start(), sim, config);
    // The first refresh asks two roots; the request fails with the last refusal, at once.
    let reply = h.run_one(get("k"));
    assert_eq!(
        reply,
        Err(Error::Auth {
            addr: NodeAddr::new("127.0.0.1", 7001),
            reason: "WRONGPASS invalid username-password pair or user is disabled.".into(),
        })
    );
    assert_eq!(h.elapsed(), Duration::ZERO);
}

#[test]
fn without_auth_a_protected_node_answers_noauth() {
    let mut sim = SimCluster::single();
    let node = sim.master(0);
    sim.require_password(None, "pw");
    let mut h = Harness::new(start(), sim, Config::single(node));
    // The handshake PING is refused, so the request is never sent, and the error says why.
    let reply = h.run_one(get("k"));
    assert_eq!(
        reply,
        Err(Error::Auth {
            addr: NodeAddr::new("127.0.0.1", 7000),
            reason: "NOAUTH Authentication required.".into(),
        })
    );
    assert_eq!(h.sim.count("GET k"), 0);
}

#[test]
fn cluster_requests_queued_on_a_dead_node_are_retried_after_a_refresh() {
    // A master dies; its connection is gone, so requests for its slots queue on a new
    // connection that hangs. At the connect timeout they are retried, and by then the
    // refresh has found the promoted replica.
    let mut h = Harness::cluster(3, 1);
    let a = h.sim.master(0);
    let keys = h.sim.keys_on(&a, 2);
    h.run_batch(vec![set(&keys[0], "x"), set(&keys[1], "y")]);

    h.sim.drop_connections(h.now(), &a, "killed");
    h.sim.set_connect_mode(&a, ConnectMode::Hang);
    h.run_for(Duration::from_millis(1));
    let t0 = h.elapsed();
    let token = h.submit_batch(vec![get(&keys[0]), incr(&keys[1])]);
    // The replica takes over 500 ms later.
    h.schedule(t0 + Duration::from_millis(500), {
        let a = a.clone();
        move |sim, now| sim.failover(now, &a, botmesh_redis_core::testing::sim::Demotion::Down)
    });
    let replies = h
        .wait_for::<Vec<botmesh_redis_core::driver::Reply>>(&token)
        .unwrap();
    assert_eq!(
        replies,
        vec![
            Ok(Value::from("x")),
            Err(Error::Server(botmesh_redis_core::ServerError::new(
                "ERR value is not an integer or out of range"
            )))
        ]
    );
    let promoted = h.sim.master(0);
    assert_ne!(promoted, a);
    assert_eq!(
        h.session
            .slot_owner(botmesh_redis_core::keys::slot(keys[0].as_bytes())),
        Some(&promoted)
    );
    // Both were written once, to the new master, after the connect timeout.
    assert_eq!(h.sim.count(&format!("INCR {}", keys[1])), 1);
    assert!(
        h.elapsed() - t0 >= Duration::from_secs(2),
        "{:?}",
        h.elapsed() - t0
    );
}

#[test]
fn a_stalled_auth_ends_at_the_connect_timeout() {
    let mut sim = SimCluster::single();
    let node = sim.master(0);
    sim.require_password(None, "pw");
    sim.add_rule(
        botmesh_redis_core::testing::sim::Rule::stall()
            .commands(&["AUTH"])
            .times(1),
    );
    let mut config = Config::single(node.clone());
    config.auth = Some(Auth {
        username: None,
        password: "pw".into(),
    });
    let mut h = Harness::new(start(), sim, config);
    let reply = h.run_one(get("k"));
    assert_eq!(
        reply,
        Err(Error::Connect {
            addr: node.clone(),
            reason: "no connection within 2s".into()
        })
    );
    assert_eq!(h.elapsed(), Duration::from_secs(2));
    assert!(h.wires_to(&node)[0].closed);
    // The next connection authenticates.
    assert_eq!(h.run_one(get("k")), Ok(Value::Nil));
    assert_eq!(h.written_to(&node), vec!["AUTH pw", "AUTH pw", "GET k"]);
}
