//! `NOSCRIPT` is expected after every failover, restart or `SCRIPT FLUSH`: the call is resent
//! as `EVAL` with the source to the node that said it (which loads it there), also behind
//! `ASKING`. Script calls are routed by their first key.

use botmesh_redis_core::driver::session::Config;
use botmesh_redis_core::keys::slot;
use botmesh_redis_core::testing::sim::{Data, Demotion, Harness, SimCluster};
use botmesh_redis_core::testing::start;
use botmesh_redis_core::Error;
use botmesh_redis_core::Script;
use botmesh_redis_core::{Access, Key, Request, ServerError, Value};
use bytes::Bytes;

static COUNTER: Script = Script::new(
    "counter",
    "-- KEYS[1] a counter; ARGV[1] the step\nreturn redis.call('INCRBY', KEYS[1], ARGV[1])",
);

fn incr_by(
    data: &mut Data,
    keys: &[Bytes],
    args: &[Bytes],
) -> botmesh_redis_core::driver::value::Frame {
    let step: i64 = std::str::from_utf8(&args[0]).unwrap().parse().unwrap();
    let now = data.get(&keys[0]).map_or(0, |v| {
        std::str::from_utf8(v).unwrap().parse::<i64>().unwrap()
    }) + step;
    data.insert(keys[0].clone(), Bytes::from(now.to_string()));
    Ok(Value::Int(now))
}

fn counter(key: &str) -> Request {
    Request::script(
        &COUNTER,
        Access::Write,
        vec![Key::new(key.to_owned())],
        vec![Bytes::from_static(b"1")],
    )
    .unwrap()
}

fn harness() -> Harness {
    let mut sim = SimCluster::cluster(3, 1);
    sim.register_script(&COUNTER, incr_by);
    sim.load_script_everywhere(&COUNTER);
    let config = Config::cluster(sim.masters());
    Harness::new(start(), sim, config)
}

fn sha() -> String {
    String::from_utf8(COUNTER.sha1().to_vec()).unwrap()
}

#[test]
fn after_script_flush_the_call_is_resent_as_eval_on_the_same_node() {
    let mut h = harness();
    let a = h.sim.master(0);
    let key = h.sim.keys_on(&a, 1).remove(0);
    assert_eq!(h.run_one(counter(&key)), Ok(Value::Int(1)));
    h.sim.flush_scripts(Some(&a));
    assert_eq!(h.run_one(counter(&key)), Ok(Value::Int(2)));
    assert_eq!(h.run_one(counter(&key)), Ok(Value::Int(3)));
    let sha = sha();
    assert_eq!(
        h.data_written_to(&a),
        vec![
            format!("EVALSHA {sha} 1 {key} 1"),
            format!("EVALSHA {sha} 1 {key} 1"),
            format!("EVAL <src> 1 {key} 1"),
            // EVAL loaded it: back to EVALSHA.
            format!("EVALSHA {sha} 1 {key} 1"),
        ]
    );
}

#[test]
fn a_promoted_replica_gets_the_source_after_moved() {
    let mut h = harness();
    let a = h.sim.master(0);
    let key = h.sim.keys_on(&a, 1).remove(0);
    assert_eq!(h.run_one(counter(&key)), Ok(Value::Int(1)));
    h.sim.failover(h.now(), &a, Demotion::Moved);
    let promoted = h.sim.master(0);
    assert_eq!(h.run_one(counter(&key)), Ok(Value::Int(2)));
    let sha = sha();
    assert_eq!(
        h.data_written_to(&promoted),
        vec![
            format!("EVALSHA {sha} 1 {key} 1"),
            format!("EVAL <src> 1 {key} 1"),
        ]
    );
    assert_eq!(h.session.slot_owner(slot(key.as_bytes())), Some(&promoted));
}

#[test]
fn noscript_behind_asking_is_resent_behind_asking() {
    let mut h = harness();
    let (a, b) = (h.sim.master(0), h.sim.master(1));
    let tag = h.sim.keys_on(&a, 1).remove(0);
    let key = format!("{{{tag}}}:n");
    let s = slot(key.as_bytes());
    assert_eq!(h.run_one(counter(&key)), Ok(Value::Int(1)));
    h.sim.begin_migration(s, &b);
    h.sim.migrate_key(key.as_bytes());
    h.sim.flush_scripts(Some(&b));
    assert_eq!(h.run_one(counter(&key)), Ok(Value::Int(2)));
    let sha = sha();
    assert_eq!(
        h.data_written_to(&b),
        vec![
            "ASKING".to_owned(),
            format!("EVALSHA {sha} 1 {key} 1"),
            "ASKING".to_owned(),
            format!("EVAL <src> 1 {key} 1"),
        ]
    );
    assert_eq!(h.session.slot_owner(s), Some(&a));
}

#[test]
fn a_script_call_goes_to_the_owner_of_its_first_key() {
    let mut h = harness();
    let c = h.sim.master(2);
    let tag = h.sim.keys_on(&c, 1).remove(0);
    let keys = vec![
        Key::new(format!("{{{tag}}}:a")),
        Key::new(format!("{{{tag}}}:b")),
    ];
    let call = Request::script(
        &COUNTER,
        Access::Write,
        keys,
        vec![Bytes::from_static(b"5")],
    )
    .unwrap();
    assert_eq!(h.run_one(call), Ok(Value::Int(5)));
    let sha = sha();
    // Straight to the owner: no redirect on the way.
    assert_eq!(
        h.data_written_to(&c),
        vec![format!("EVALSHA {sha} 2 {{{tag}}}:a {{{tag}}}:b 5")]
    );
    assert_eq!(
        h.sim
            .received()
            .iter()
            .filter(|r| r.name() == "EVALSHA")
            .count(),
        1
    );
}

#[test]
fn noscript_on_a_plain_command_or_after_eval_is_final() {
    let mut h = harness();
    let a = h.sim.master(0);
    let key = h.sim.keys_on(&a, 1).remove(0);
    let text = "NOSCRIPT No matching script. Please use EVAL.";
    // A node that keeps saying NOSCRIPT even to EVAL gets one EVAL, no more.
    h.sim.add_rule(
        botmesh_redis_core::testing::sim::Rule::error(text)
            .on(&a)
            .commands(&["EVALSHA", "EVAL", "GET"]),
    );
    let reply = h.run_one(counter(&key));
    assert_eq!(reply, Err(Error::Server(ServerError::new(text))));
    assert_eq!(h.data_written_to(&a).len(), 2);
    let reply = h.run_one(botmesh_redis_core::testing::get(&key));
    assert_eq!(reply, Err(Error::Server(ServerError::new(text))));
    assert_eq!(h.data_written_to(&a).len(), 3);
}
