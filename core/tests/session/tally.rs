//! What the session counts for the client's metrics and spans: every redirect, retry (by
//! reason), timeout and refresh in its `Tally`, and with every finished plan a `Summary` of
//! its operation, outcome, attempts, slot and node.

use std::time::Duration;

use crate::support::cluster;
use botmesh_redis_core::driver::plan::single;
use botmesh_redis_core::driver::session::{Config, Event, RetryReason};
use botmesh_redis_core::keys::slot;
use botmesh_redis_core::testing::sim::{Harness, Rule, SimCluster};
use botmesh_redis_core::testing::{get, mget, set, start};
use botmesh_redis_core::Value;

fn retries(h: &Harness, reason: RetryReason) -> u64 {
    h.session.tally().get(Event::Retry(reason))
}

#[test]
fn a_moved_reply_is_one_redirect_and_the_summary_names_both_attempts() {
    let mut h = cluster();
    let (a, c) = (h.sim.master(0), h.sim.master(2));
    let key = h.sim.keys_on(&a, 1).remove(0);
    let s = slot(key.as_bytes());
    assert_eq!(h.run_one(set(&key, "v")), Ok(Value::Status("OK".into())));
    assert_eq!(h.session.tally().get(Event::Moved), 0);

    h.sim.move_slot(s, &c);
    let ticket = h.submit(single("read_it", get(&key), Ok));
    assert_eq!(h.wait_for(&ticket), Ok(Value::from("v")));
    assert_eq!(h.session.tally().get(Event::Moved), 1);
    assert_eq!(h.session.tally().get(Event::Ask), 0);
    let summary = h.summary(&ticket).expect("a summary with the completion");
    assert_eq!(summary.operation, "read_it");
    assert_eq!(summary.outcome, "ok");
    assert_eq!(summary.attempts, 2, "the old owner, then the new one");
    assert_eq!(summary.slot(), Some(s));
    assert_eq!(summary.node.as_deref(), Some(&c));
    assert_eq!(summary.elapsed, Duration::ZERO, "no backoff on MOVED");
}

#[test]
fn an_ask_reply_is_counted_apart_from_moved() {
    let mut h = cluster();
    let (a, b) = (h.sim.master(0), h.sim.master(1));
    let tag = h.sim.keys_on(&a, 1).remove(0);
    let (k1, k2) = (format!("{{{tag}}}:1"), format!("{{{tag}}}:2"));
    h.run_batch(vec![set(&k1, "one"), set(&k2, "two")]);
    h.sim.begin_migration(slot(k1.as_bytes()), &b);
    h.sim.migrate_key(k1.as_bytes());

    assert_eq!(h.run_one(get(&k1)), Ok(Value::from("one")));
    assert_eq!(h.run_one(get(&k2)), Ok(Value::from("two")));
    assert_eq!(h.session.tally().get(Event::Ask), 1, "only k1 moved");
    assert_eq!(h.session.tally().get(Event::Moved), 0);
}

#[test]
fn tryagain_retries_are_counted_by_reason_one_per_resend() {
    let mut h = Harness::cluster(3, 0);
    let (a, b) = (h.sim.master(0), h.sim.master(1));
    let tag = h.sim.keys_on(&a, 1).remove(0);
    let (k1, k2) = (format!("{{{tag}}}:1"), format!("{{{tag}}}:2"));
    let s = slot(k1.as_bytes());
    h.run_batch(vec![set(&k1, "one"), set(&k2, "two")]);
    h.sim.begin_migration(s, &b);
    h.sim.migrate_key(k1.as_bytes());
    h.schedule(Duration::from_millis(60), move |sim, _| {
        sim.finish_migration(s)
    });

    let ticket = h.submit(single("both", mget(&[&k1, &k2]), Ok));
    assert!(h.wait_for(&ticket).is_ok());
    let mget_cmd = format!("MGET {k1} {k2}");
    let sends_to_a = h
        .sim
        .data_commands_on(&a)
        .iter()
        .filter(|c| **c == mget_cmd)
        .count() as u64;
    // Every send to a but the last met TRYAGAIN; the last met MOVED after the migration.
    assert_eq!(retries(&h, RetryReason::TryAgain), sends_to_a - 1);
    assert_eq!(h.session.tally().get(Event::Moved), 1);
    assert_eq!(retries(&h, RetryReason::ClusterDown), 0);
    let summary = h.summary(&ticket).unwrap();
    assert_eq!(u64::from(summary.attempts), sends_to_a + 1);
    assert_eq!(summary.node.as_deref(), Some(&b));
    assert!(summary.elapsed >= Duration::from_millis(60), "{summary:?}");
}

#[test]
fn clusterdown_and_loading_are_counted_under_their_own_reasons() {
    let mut h = cluster();
    let a = h.sim.master(0);
    let key = h.sim.keys_on(&a, 1).remove(0);
    h.sim.add_rule(
        Rule::error("CLUSTERDOWN The cluster is down")
            .on(&a)
            .commands(&["GET"])
            .times(2),
    );
    h.sim.add_rule(
        Rule::error("LOADING Redis is loading the dataset in memory")
            .on(&a)
            .commands(&["SET"])
            .times(1),
    );
    assert_eq!(h.run_one(set(&key, "v")), Ok(Value::Status("OK".into())));
    assert_eq!(h.run_one(get(&key)), Ok(Value::from("v")));
    assert_eq!(retries(&h, RetryReason::ClusterDown), 2);
    assert_eq!(retries(&h, RetryReason::Loading), 1);
    assert_eq!(retries(&h, RetryReason::TryAgain), 0);
}

#[test]
fn a_request_timeout_is_counted_and_is_the_outcome() {
    let sim = SimCluster::cluster(3, 0);
    let mut config = Config::cluster(sim.masters());
    config.request_timeout = Duration::from_secs(1);
    config.response_timeout = Duration::from_secs(30);
    let mut h = Harness::new(start(), sim, config);
    let a = h.sim.master(0);
    let key = h.sim.keys_on(&a, 1).remove(0);
    h.run_one(set(&key, "v")).unwrap();
    h.sim.add_rule(Rule::stall().on(&a).commands(&["GET"]));

    let ticket = h.submit(single("stuck", get(&key), Ok));
    assert!(h.wait_for(&ticket).is_err());
    assert_eq!(h.session.tally().get(Event::RequestTimeout), 1);
    assert_eq!(h.session.tally().get(Event::ResponseTimeout), 0);
    let summary = h.summary(&ticket).unwrap();
    assert_eq!(summary.outcome, "timeout");
    assert_eq!(summary.elapsed, Duration::from_secs(1));
}

#[test]
fn every_refresh_round_is_counted_by_how_it_ended() {
    let mut h = cluster();
    let (a, c) = (h.sim.master(0), h.sim.master(2));
    let key = h.sim.keys_on(&a, 1).remove(0);
    h.run_one(set(&key, "v")).unwrap();
    let tally = *h.session.tally();
    assert_eq!(tally.get(Event::RefreshSucceeded), 1, "the first map");
    assert_eq!(tally.get(Event::RefreshFailed), 0);

    // A MOVED asks for a refresh, rate-limited to one per 100 ms.
    h.sim.move_slot(slot(key.as_bytes()), &c);
    h.run_one(get(&key)).unwrap();
    h.run_for(Duration::from_millis(100));
    assert_eq!(h.session.tally().get(Event::RefreshSucceeded), 2);
    assert_eq!(h.session.tally().get(Event::RefreshFailed), 0);
}
