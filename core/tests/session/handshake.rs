//! The handshake's error replies: only refused credentials are an `Auth` error; a node that is
//! busy, full or loading is a failed connect that backs off and is dialled again, on a single
//! node too.

use std::time::Duration;

use botmesh_redis_core::driver::session::{Auth, Config};
use botmesh_redis_core::testing::sim::{Harness, Rule, SimCluster};
use botmesh_redis_core::testing::{get, incr, start};
use botmesh_redis_core::Error;
use botmesh_redis_core::Value;

fn single_with(rule: Rule, auth: bool) -> Harness {
    let mut sim = SimCluster::single();
    let node = sim.master(0);
    let mut config = Config::single(node);
    if auth {
        sim.require_password(None, "pw");
        config.auth = Some(Auth {
            username: None,
            password: "pw".into(),
        });
    }
    sim.add_rule(rule);
    Harness::new(start(), sim, config)
}

#[test]
fn max_clients_on_a_single_node_is_retried_with_backoff() {
    let full = Rule::error("ERR max number of clients reached")
        .commands(&["PING"])
        .times(3);
    let mut h = single_with(full, false);
    assert_eq!(h.run_one(incr("n")), Ok(Value::Int(1)));
    let node = h.sim.master(0);
    // Three refused handshakes, each followed by a backoff (10, 20, 40 ms, jittered), then
    // one that passes; the request was written once, on the connection that passed.
    assert_eq!(h.connects_to(&node), 4, "{}", h.trace());
    assert!(
        h.elapsed() >= Duration::from_millis(50),
        "{:?}",
        h.elapsed()
    );
    assert_eq!(h.sim.count("INCR n"), 1);
    assert!(h.wires_to(&node)[..3].iter().all(|w| w.closed));
}

#[test]
fn busy_and_loading_during_auth_are_failed_connects() {
    for text in [
        "BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE.",
        "LOADING Redis is loading the dataset in memory",
    ] {
        let rule = Rule::error(text).commands(&["AUTH"]).times(2);
        let mut h = single_with(rule, true);
        assert_eq!(h.run_one(get("k")), Ok(Value::Nil), "{text}");
        assert_eq!(h.connects_to(&h.sim.master(0)), 3, "{text}");
    }
}

#[test]
fn a_handshake_that_stays_refused_ends_as_a_connect_error_after_the_retries() {
    let full = Rule::error("ERR max number of clients reached").commands(&["PING"]);
    let mut h = single_with(full, false);
    let reply = h.run_one(get("k"));
    assert_eq!(
        reply,
        Err(Error::Connect {
            addr: botmesh_redis_core::NodeAddr::new("127.0.0.1", 7000),
            reason: "the handshake was refused: ERR max number of clients reached".into(),
        })
    );
    assert!(!reply.unwrap_err().outcome_unknown());
    // The first dial and one per retry: the default policy's ten.
    assert_eq!(h.connects_to(&h.sim.master(0)), 11);
    assert_eq!(h.sim.count("GET k"), 0);
}

#[test]
fn a_loading_node_answering_ping_is_usable() {
    let loading = Rule::error("LOADING Redis is loading the dataset in memory")
        .commands(&["PING"])
        .times(1);
    let mut h = single_with(loading, false);
    assert_eq!(h.run_one(get("k")), Ok(Value::Nil));
    assert_eq!(h.connects_to(&h.sim.master(0)), 1);
}
