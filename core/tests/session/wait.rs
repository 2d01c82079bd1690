//! A grant followed by `WAIT` (`Request::then_wait`): `WAIT` goes on the connection that
//! carried the grant, only once something was granted; the reply carries both answers; a lost
//! `WAIT` reply is reported as such; and a `WAIT` that would outlast the response timeout is
//! refused before anything is written.

use botmesh_redis_core::driver::Reply;
use botmesh_redis_core::testing::sim::{Harness, Rule};
use botmesh_redis_core::testing::{get, set};
use botmesh_redis_core::Value;
use botmesh_redis_core::{ConfigError, Error};

fn ok() -> Value {
    Value::Status("OK".into())
}

#[test]
fn wait_follows_its_grant_on_the_same_connection() {
    let mut h = Harness::cluster(3, 1);
    let a = h.sim.master(0);
    let key = h.sim.keys_on(&a, 1).remove(0);
    let token = h.submit_batch(vec![set(&key, "v").then_wait(1, 100), set(&key, "w")]);
    let replies = h.wait_for::<Vec<Reply>>(&token).unwrap();
    assert_eq!(
        replies,
        vec![Ok(Value::Array(vec![ok(), Value::Int(1)])), Ok(ok())]
    );
    let wires = h.wires_to(&a);
    assert_eq!(wires.len(), 1, "one connection to the master");
    let commands: Vec<String> = wires[0]
        .commands()
        .into_iter()
        .filter(|c| c.starts_with("SET") || c.starts_with("WAIT"))
        .collect();
    assert_eq!(
        commands,
        vec![
            format!("SET {key} v"),
            format!("SET {key} w"),
            "WAIT 1 100".to_owned()
        ]
    );
}

#[test]
fn nothing_granted_sends_no_wait() {
    let mut h = Harness::cluster(3, 1);
    let a = h.sim.master(0);
    let key = h.sim.keys_on(&a, 1).remove(0);
    // A nil answer: nothing was granted.
    assert_eq!(
        h.run_one(get(&key).then_wait(1, 100)),
        Ok(Value::Array(vec![Value::Nil, Value::Nil]))
    );
    // An error reply: nothing ran.
    h.sim.add_rule(
        Rule::error("NOREPLICAS Not enough good replicas to write.")
            .commands(&["SET"])
            .times(1),
    );
    match h.run_one(set(&key, "v").then_wait(1, 100)) {
        Err(Error::Server(e)) => assert_eq!(e.code(), "NOREPLICAS"),
        other => panic!("{other:?}"),
    }
    assert_eq!(h.sim.count("WAIT 1 100"), 0);
}

#[test]
fn a_lost_wait_reply_keeps_the_answer_and_says_replication_is_unknown() {
    let mut h = Harness::cluster(3, 1);
    let a = h.sim.master(0);
    let key = h.sim.keys_on(&a, 1).remove(0);
    h.sim
        .add_rule(Rule::drop_connection(true).commands(&["WAIT"]).times(1));
    let reply = h.run_one(set(&key, "v").then_wait(1, 100));
    assert_eq!(reply, Ok(Value::Array(vec![ok(), Value::Nil])));
    assert_eq!(h.sim.value(key.as_bytes()), Some("v".into()));
}

#[test]
fn a_wait_as_long_as_the_response_timeout_is_refused_before_sending() {
    let mut h = Harness::cluster(3, 1);
    let a = h.sim.master(0);
    let key = h.sim.keys_on(&a, 1).remove(0);
    // The default response timeout is 5 s.
    match h.run_one(set(&key, "v").then_wait(1, 5_000)) {
        Err(Error::Config(ConfigError::WaitNotBelowResponseTimeout {
            wait_ms,
            response_timeout,
        })) => {
            assert_eq!(wait_ms, 5_000);
            assert_eq!(response_timeout, std::time::Duration::from_secs(5));
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(h.sim.value(key.as_bytes()), None);
    assert_eq!(
        h.run_one(set(&key, "v").then_wait(1, 4_999)),
        Ok(Value::Array(vec![ok(), Value::Int(1)]))
    );
}
