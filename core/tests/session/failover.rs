//! Failovers, seen three ways: the old master redirects (`MOVED`), answers writes with
//! `READONLY`, or says nothing at all and keeps serving; and a master that dies under load.

use std::time::Duration;

use crate::support::cluster;
use botmesh_redis_core::keys::slot;
use botmesh_redis_core::testing::sim::{Demotion, Harness, Rule};
use botmesh_redis_core::testing::{get, incr, set};
use botmesh_redis_core::Error;
use botmesh_redis_core::Value;

#[test]
fn readonly_from_a_demoted_master_refreshes_and_retries() {
    let mut h = cluster();
    let a = h.sim.master(0);
    let key = h.sim.keys_on(&a, 1).remove(0);
    h.run_one(set(&key, "1")).unwrap();
    h.run_for(Duration::from_secs(1));
    let refreshes = h.sim.count("CLUSTER SLOTS");

    h.sim.failover(h.now(), &a, Demotion::ReadOnly);
    let promoted = h.sim.master(0);
    // Reads from the demoted master are still served: nothing to fix.
    assert_eq!(h.run_one(get(&key)), Ok(Value::from("1")));
    assert_eq!(h.sim.count("CLUSTER SLOTS"), refreshes);
    // A write gets READONLY: refresh at once, retry after the backoff, on the new master.
    assert_eq!(h.run_one(incr(&key)), Ok(Value::Int(2)));
    // The round asks two nodes; the live master answers with a complete map while the
    // connection to the promoted one is still in its handshake, so that query is never sent.
    assert_eq!(h.sim.count("CLUSTER SLOTS"), refreshes + 1);
    assert_eq!(h.data_written_to(&a).last(), Some(&format!("INCR {key}")));
    assert_eq!(h.data_written_to(&promoted), vec![format!("INCR {key}")]);
    assert_eq!(h.session.slot_owner(slot(key.as_bytes())), Some(&promoted));
}

#[test]
fn readonly_inside_a_script_error_is_retried_too() {
    let mut h = cluster();
    let a = h.sim.master(0);
    let key = h.sim.keys_on(&a, 1).remove(0);
    h.run_one(get("warm-up")).unwrap();
    h.sim.add_rule(
        Rule::error(
            "ERR Error running script (call to f_0123): @user_script:1: -READONLY You can't write against a read only replica.",
        )
        .commands(&["INCR"])
        .times(1),
    );
    assert_eq!(h.run_one(incr(&key)), Ok(Value::Int(1)));
    assert_eq!(h.sim.count(&format!("INCR {key}")), 2);
}

#[test]
fn a_silent_failover_is_noticed_by_the_periodic_refresh() {
    let mut h = cluster();
    let a = h.sim.master(0);
    let key = h.sim.keys_on(&a, 1).remove(0);
    h.run_one(set(&key, "0")).unwrap();
    // The old master never learns it was replaced and keeps answering: no MOVED, no error,
    // no broken connection. Only CLUSTER SLOTS (asked of any node) tells.
    h.sim.failover(h.now(), &a, Demotion::Stale);
    let promoted = h.sim.master(0);

    h.run_for(Duration::from_millis(4900));
    assert_eq!(h.run_one(incr(&key)), Ok(Value::Int(1)));
    assert_eq!(h.data_written_to(&promoted), Vec::<String>::new());
    h.run_for(Duration::from_millis(200));
    assert_eq!(h.run_one(incr(&key)), Ok(Value::Int(2)));
    assert_eq!(h.data_written_to(&promoted), vec![format!("INCR {key}")]);
    assert_eq!(h.session.slot_owner(slot(key.as_bytes())), Some(&promoted));
}

#[test]
fn a_master_that_dies_under_load() {
    let mut h = cluster();
    let a = h.sim.master(0);
    let keys = h.sim.keys_on(&a, 4);
    h.run_batch(keys.iter().map(|k| set(k, "7")).collect());
    h.run_for(Duration::from_secs(1));
    // a hangs with a read and a write in flight, then dies; its replica takes over.
    h.sim.stall(&a);
    let token = h.submit_batch(vec![get(&keys[0]), incr(&keys[1])]);
    h.run_for(Duration::from_millis(10));
    h.sim.failover(h.now(), &a, Demotion::Down);
    let promoted = h.sim.master(0);
    let replies = h
        .wait_for::<Vec<botmesh_redis_core::driver::Reply>>(&token)
        .unwrap();
    assert_eq!(replies[0], Ok(Value::from("7")), "the read is asked again");
    assert_eq!(
        replies[1],
        Err(Error::ReplyLost {
            addr: a.clone(),
            reason: "connection reset by peer".into()
        }),
        "the write may have run"
    );
    // It did not run here (the node never read it), and it was not sent again.
    assert_eq!(h.sim.value(keys[1].as_bytes()), Some("7".into()));
    let incr_cmd = format!("INCR {}", keys[1]);
    assert_eq!(
        h.data_written_to(&a)
            .iter()
            .filter(|c| **c == incr_cmd)
            .count(),
        1
    );
    assert_eq!(h.sim.count(&incr_cmd), 0);
    // New work goes to the promoted replica.
    assert_eq!(h.run_one(incr(&keys[2])), Ok(Value::Int(8)));
    assert_eq!(
        h.data_written_to(&promoted),
        vec![format!("GET {}", keys[0]), format!("INCR {}", keys[2])]
    );
}

#[test]
fn a_late_ok_from_a_replaced_master_is_not_a_success() {
    // A master stops with a write queued; its replica is promoted and a refresh says so; then
    // the old master runs again and answers the write it queued, before it learns it was
    // replaced and discards its data. That answer must not count as a success.
    let sim = botmesh_redis_core::testing::sim::SimCluster::cluster(3, 1);
    let mut config = botmesh_redis_core::driver::session::Config::cluster(sim.masters());
    config.response_timeout = Duration::from_secs(30);
    config.request_timeout = Duration::from_secs(60);
    // Only the stalled connection's own refresh (after `stall_refresh`, 1 s) can tell.
    config.refresh_interval = Duration::from_secs(600);
    let mut h = Harness::new(botmesh_redis_core::testing::start(), sim, config);
    let a = h.sim.master(0);
    let key = h.sim.keys_on(&a, 1).remove(0);
    h.run_one(set(&key, "1")).unwrap();
    h.sim.stall(&a);
    let write = h.submit_batch(vec![incr(&key)]);
    let read = h.submit_batch(vec![get(&key)]);
    h.run_for(Duration::from_millis(10));
    h.sim.failover(h.now(), &a, Demotion::Stale);
    let promoted = h.sim.master(0);
    // The stalled connection asks for a refresh every second; the round asks other nodes,
    // and learns the new master.
    h.run_for(Duration::from_millis(1500));
    assert_eq!(h.session.slot_owner(slot(key.as_bytes())), Some(&promoted));
    h.sim.unstall(h.now(), &a);
    h.run_for(Duration::from_millis(10));
    match h.take::<Vec<botmesh_redis_core::driver::Reply>>(&write) {
        Some(Ok(replies)) => match &replies[0] {
            Err(e @ Error::ReplyLost { addr, reason }) => {
                assert!(e.outcome_unknown());
                assert_eq!(addr, &a);
                assert!(reason.contains("answered after the map named"), "{reason}");
            }
            other => panic!("{other:?}"),
        },
        other => panic!("{other:?}"),
    }
    // A read answered by the old master is only stale, not lost: it stands (it sees the
    // write the old master ran and will discard).
    assert_eq!(
        h.take::<Vec<botmesh_redis_core::driver::Reply>>(&read),
        Some(Ok(vec![Ok(Value::from("2"))]))
    );
    // The next write goes to the new master. (The simulated shard keeps one copy of the
    // data, so the count includes the discarded write; a real promoted replica's would not.)
    assert!(matches!(h.run_one(incr(&key)), Ok(Value::Int(_))));
    assert_eq!(
        h.data_written_to(&promoted).last(),
        Some(&format!("INCR {key}"))
    );
}

/// After a failover, a node the news has not reached yet still maps the slot to the old
/// master. Its `CLUSTER SLOTS` answer (in the round the redirect asked for, or in one asked
/// before it) must not undo what the old master said of itself: else the write, resent to
/// the promoted master, is answered there after the map named the old one again, and its
/// success is taken for a reply the old master might discard.
#[test]
fn a_map_older_than_a_moved_does_not_undo_it() {
    let mut h = cluster();
    let a = h.sim.master(0);
    let promoted = h.sim.replicas(0).remove(0);
    let key = h.sim.keys_on(&a, 1).remove(0);
    h.run_one(set(&key, "1")).unwrap();
    h.run_for(Duration::from_secs(1));
    for shard in 1..3 {
        for node in std::iter::once(h.sim.master(shard)).chain(h.sim.replicas(shard)) {
            h.sim.lag(&node);
        }
    }
    // The old master redirects after the lagging nodes have answered the round; the
    // promoted one answers the resent write after that.
    h.sim.set_latency(&a, Duration::from_millis(20));
    h.sim.set_latency(&promoted, Duration::from_millis(100));
    h.sim.failover(h.now(), &a, Demotion::Moved);

    assert_eq!(h.run_one(incr(&key)), Ok(Value::Int(2)));
    assert_eq!(h.data_written_to(&promoted), vec![format!("INCR {key}")]);
    assert_eq!(h.session.slot_owner(slot(key.as_bytes())), Some(&promoted));
    let stale_rounds = h.sim.count("CLUSTER SLOTS");
    assert!(stale_rounds > 0);

    // Once the news has spread, the map follows the nodes again, with no redirect.
    for shard in 1..3 {
        for node in std::iter::once(h.sim.master(shard)).chain(h.sim.replicas(shard)) {
            h.sim.catch_up(&node);
        }
    }
    h.run_for(Duration::from_secs(6));
    assert_eq!(h.run_one(incr(&key)), Ok(Value::Int(3)));
    assert_eq!(h.session.slot_owner(slot(key.as_bytes())), Some(&promoted));
}

/// A failback soon after a failover: the map of the nodes, once the redirect is old news,
/// is taken as it is, even where it names the master the redirect came from.
#[test]
fn a_failback_is_followed_without_a_redirect_per_slot() {
    let mut h = cluster();
    let a = h.sim.master(0);
    let promoted = h.sim.replicas(0).remove(0);
    let keys = h.sim.keys_on(&a, 3);
    h.run_one(set(&keys[0], "1")).unwrap();
    h.sim.failover(h.now(), &a, Demotion::Moved);
    assert_eq!(h.run_one(incr(&keys[0])), Ok(Value::Int(2)));
    assert_eq!(
        h.session.slot_owner(slot(keys[0].as_bytes())),
        Some(&promoted)
    );

    h.run_for(Duration::from_secs(10));
    h.sim.failover(h.now(), &promoted, Demotion::Moved);
    assert_eq!(h.sim.master(0), a);
    let to_promoted = h.data_written_to(&promoted).len();
    let to_a = h.data_written_to(&a).len();
    h.run_for(Duration::from_secs(6));
    for key in &keys {
        assert!(matches!(h.run_one(incr(key)), Ok(Value::Int(_))));
        assert_eq!(h.session.slot_owner(slot(key.as_bytes())), Some(&a));
    }
    // Each INCR went straight to the master: no redirect, no second try.
    assert_eq!(h.data_written_to(&promoted).len(), to_promoted);
    let incrs: Vec<String> = keys.iter().map(|k| format!("INCR {k}")).collect();
    assert_eq!(h.data_written_to(&a)[to_a..], incrs[..]);
}
