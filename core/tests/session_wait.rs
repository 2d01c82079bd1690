//! A request followed by `WAIT` (`Request::then_wait`): both go in one write on one
//! connection, the reply carries both answers, a lost `WAIT` reply is reported as such, and a
//! `WAIT` that would outlast the response timeout is refused before anything is written.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use botmesh_redis_core::error::Error;
use botmesh_redis_core::testing::{set, Harness, Rule};
use botmesh_redis_core::{Reply, Value};

#[test]
fn wait_goes_in_the_same_write_as_its_request() {
    let mut h = Harness::cluster(3, 1);
    let a = h.sim.master(0);
    let key = h.sim.keys_on(&a, 1).remove(0);
    // Another request shares the connection: nothing may come between SET and its WAIT.
    let token = h.submit_batch(vec![set(&key, "v").then_wait(1, 100), set(&key, "w")]);
    let replies = h.wait_for::<Vec<Reply>>(token).unwrap();
    assert_eq!(
        replies,
        vec![Ok(Value::Array(vec![ok(), Value::Int(1)])), Ok(ok())]
    );
    let wire = &h.wires_to(&a)[0];
    let write = wire
        .writes
        .iter()
        .find(|w| w.windows(4).any(|x| x == b"WAIT"))
        .expect("a write with WAIT");
    let text = String::from_utf8_lossy(write);
    let set_at = text.find("$1\r\nv").expect("SET in the same write");
    let wait_at = text.find("WAIT").unwrap();
    assert!(set_at < wait_at, "{text:?}");
    assert_eq!(
        wire.commands()
            .iter()
            .filter(|c| c.starts_with("SET") || c.starts_with("WAIT"))
            .cloned()
            .collect::<Vec<_>>(),
        vec![
            format!("SET {key} v"),
            "WAIT 1 100".to_owned(),
            format!("SET {key} w")
        ]
    );
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
        Err(Error::Config(text)) => assert!(text.contains("response timeout"), "{text}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(h.sim.value(key.as_bytes()), None);
    assert_eq!(
        h.run_one(set(&key, "v").then_wait(1, 4_999)),
        Ok(Value::Array(vec![ok(), Value::Int(1)]))
    );
}

fn ok() -> Value {
    Value::Status("OK".into())
}
