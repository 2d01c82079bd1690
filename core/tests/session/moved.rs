//! `MOVED`: go straight to the address in the error, patch that slot, refresh in the
//! background (one refresh at a time, rate-limited), keep other slots flowing, and give up
//! after the redirection limit instead of bouncing forever.

use std::time::Duration;

use crate::support::cluster;
use botmesh_redis_core::driver::session::Config;
use botmesh_redis_core::keys::slot;
use botmesh_redis_core::testing::sim::{Harness, Rule, SimCluster};
use botmesh_redis_core::testing::{get, set, start};
use botmesh_redis_core::Error;
use botmesh_redis_core::{ServerError, Value};

fn count(commands: &[String], wanted: &str) -> usize {
    commands.iter().filter(|c| *c == wanted).count()
}

#[test]
fn moved_patches_the_slot_and_later_requests_go_straight_to_the_new_owner() {
    let mut h = cluster();
    let (a, c) = (h.sim.master(0), h.sim.master(2));
    let key = h.sim.keys_on(&a, 1).remove(0);
    let s = slot(key.as_bytes());
    assert_eq!(h.run_one(set(&key, "v")), Ok(Value::Status("OK".into())));

    h.sim.move_slot(s, &c);
    assert_eq!(h.run_one(get(&key)), Ok(Value::from("v")));
    // Patched from the MOVED itself, before any refresh answered.
    assert_eq!(h.session.slot_owner(s), Some(&c));
    assert_eq!(h.run_one(get(&key)), Ok(Value::from("v")));

    let get_cmd = format!("GET {key}");
    assert_eq!(
        count(&h.written_to(&a), &get_cmd),
        1,
        "one GET bounced off the old owner"
    );
    assert_eq!(
        count(&h.written_to(&c), &get_cmd),
        2,
        "then both went to the new owner"
    );
    assert_eq!(h.elapsed(), Duration::ZERO, "no backoff on MOVED");
}

#[test]
fn moved_schedules_one_rate_limited_refresh() {
    let mut h = cluster();
    let (a, c) = (h.sim.master(0), h.sim.master(2));
    let keys = h.sim.keys_on(&a, 5);
    h.run_batch(keys.iter().map(|k| set(k, "v")).collect());
    let refreshes = |h: &Harness| h.sim.count("CLUSTER SLOTS");
    assert_eq!(refreshes(&h), 2, "the first refresh asks two nodes");

    for k in &keys {
        h.sim.move_slot(slot(k.as_bytes()), &c);
    }
    // Five MOVED replies at t=0: the first refresh was just now, so one more is due after
    // `refresh_min_interval` (100 ms), not five.
    let replies = h.run_batch(keys.iter().map(|k| get(k)).collect());
    assert!(
        replies.iter().all(|r| r == &Ok(Value::from("v"))),
        "{replies:?}"
    );
    assert_eq!(refreshes(&h), 2);
    h.run_for(Duration::from_millis(99));
    assert_eq!(refreshes(&h), 2);
    h.run_for(Duration::from_millis(1));
    assert_eq!(refreshes(&h), 4, "one round, asking two nodes");
    h.run_for(Duration::from_millis(4999));
    assert_eq!(refreshes(&h), 4, "nothing more until the periodic refresh");
    h.run_for(Duration::from_millis(1));
    assert_eq!(
        refreshes(&h),
        6,
        "the periodic refresh, 5 s after the last round"
    );
}

#[test]
fn a_moved_storm_ends_in_too_many_redirections() {
    let mut h = cluster();
    let (a, b) = (h.sim.master(0), h.sim.master(1));
    let key = h.sim.keys_on(&a, 1).remove(0);
    let s = slot(key.as_bytes());
    h.run_one(set(&key, "v")).unwrap();
    // a and b send the slot to each other forever.
    h.sim.add_rule(
        Rule::error(format!("MOVED {s} {b}"))
            .on(&a)
            .commands(&["GET"]),
    );
    h.sim.add_rule(
        Rule::error(format!("MOVED {s} {a}"))
            .on(&b)
            .commands(&["GET"]),
    );

    let reply = h.run_one(get(&key));
    // The 17th write goes to a (the odd ones do), which sends it to b.
    let last = format!("MOVED {s} {b}");
    assert_eq!(
        reply,
        Err(Error::TooManyRedirections {
            count: 16,
            last: ServerError::new(last)
        })
    );
    assert!(!reply.unwrap_err().outcome_unknown());
    let get_cmd = format!("GET {key}");
    let sent = count(&h.written_to(&a), &get_cmd) + count(&h.written_to(&b), &get_cmd);
    assert_eq!(sent, 17, "the first send and 16 redirections");
    assert_eq!(h.session.in_flight(), 0);
}

#[test]
fn the_redirection_limit_is_configurable() {
    let sim = SimCluster::cluster(3, 0);
    let mut config = Config::cluster(sim.masters());
    config.max_redirections = 2;
    let mut h = Harness::new(start(), sim, config);
    let a = h.sim.master(0);
    let key = h.sim.keys_on(&a, 1).remove(0);
    let s = slot(key.as_bytes());
    h.sim
        .add_rule(Rule::error(format!("MOVED {s} {a}")).commands(&["GET"]));
    let reply = h.run_one(get(&key));
    assert_eq!(
        reply,
        Err(Error::TooManyRedirections {
            count: 2,
            last: ServerError::new(format!("MOVED {s} {a}"))
        })
    );
    assert_eq!(h.sim.count(&format!("GET {key}")), 3);
}

#[test]
fn other_slots_keep_flowing_while_a_refresh_is_pending() {
    let mut h = Harness::cluster(4, 0);
    let masters = h.sim.masters();
    let mut setup = Vec::new();
    for m in &masters {
        setup.extend(h.sim.keys_on(m, 2).iter().map(|k| set(k, "v")));
    }
    h.run_batch(setup);

    // The periodic refresh at 5 s asks two nodes; both take the query and never answer.
    h.sim
        .add_rule(Rule::stall().commands(&["CLUSTER"]).times(2));
    h.run_for(Duration::from_secs(5));
    let asked: Vec<_> = h
        .sim
        .received()
        .iter()
        .filter(|r| r.name() == "CLUSTER" && r.at == h.now())
        .map(|r| r.node.clone())
        .collect();
    assert_eq!(asked.len(), 2, "{}", h.trace());
    let free: Vec<_> = masters
        .iter()
        .filter(|m| !asked.contains(m))
        .cloned()
        .collect();
    let (from, to) = (&free[0], &free[1]);
    let refreshes = h.sim.count("CLUSTER SLOTS");

    // A slot moves between the two nodes that still answer.
    let keys_from = h.sim.keys_on(from, 2);
    let keys_to = h.sim.keys_on(to, 2);
    let moved = &keys_from[0];
    let s = slot(moved.as_bytes());
    h.sim.move_slot(s, to);
    let t0 = h.elapsed();
    let replies = h.run_batch(vec![
        get(moved),
        get(&keys_from[1]),
        get(&keys_to[0]),
        get(&keys_to[1]),
    ]);
    assert_eq!(replies, vec![Ok(Value::from("v")); 4]);
    assert_eq!(h.elapsed(), t0, "nothing waited for the refresh");
    assert_eq!(h.session.slot_owner(s), Some(to), "patched from the MOVED");

    // The MOVED asked for a refresh; one is running, so none starts beside it.
    h.run_for(Duration::from_secs(1));
    assert_eq!(h.sim.count("CLUSTER SLOTS"), refreshes);
    assert_eq!(h.run_one(get(moved)), Ok(Value::from("v")));

    // The stalled connections close at the response timeout (5 s after the query); the
    // failed round backs off (at least 100 ms), then is followed by one that answers.
    h.run_for(Duration::from_millis(4200));
    assert!(h.sim.count("CLUSTER SLOTS") > refreshes);
    let on_asked = h.sim.keys_on(&asked[0], 1).remove(0);
    assert_eq!(h.run_one(get(&on_asked)), Ok(Value::from("v")));
    assert_eq!(h.session.slot_owner(s), Some(to));
}
