//! The retry table of `docs/architecture.md` ("Retries, as implemented"), row by row, at the session: what each reply or
//! outcome leads to, how many times the request is written, and whether the map is refreshed.

use std::time::Duration;

use botmesh_redis_core::driver::retry::RetryPolicy;
use botmesh_redis_core::driver::session::Config;
use botmesh_redis_core::testing::sim::{Harness, Rule, SimCluster};
use botmesh_redis_core::testing::{get, incr, start};
use botmesh_redis_core::Error;
use botmesh_redis_core::{ServerError, Value};

fn cluster_with(config: impl FnOnce(&mut Config)) -> Harness {
    let sim = SimCluster::cluster(3, 1);
    let mut c = Config::cluster(sim.masters());
    config(&mut c);
    let mut h = Harness::new(start(), sim, c);
    h.run_one(get("warm-up")).unwrap();
    // Past the refresh rate limit, so a refresh that a reply asks for starts at once.
    h.run_for(Duration::from_secs(1));
    h
}

#[test]
fn one_retryable_reply_then_success() {
    // reply, writes of the request, whether a refresh round ran
    let table = [
        (
            "TRYAGAIN Multiple keys request during rehashing of slot",
            2,
            false,
        ),
        ("CLUSTERDOWN The cluster is down", 2, true),
        ("LOADING Redis is loading the dataset in memory", 2, true),
        (
            "MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'.",
            2,
            true,
        ),
        (
            "READONLY You can't write against a read only replica.",
            2,
            true,
        ),
        ("ERR wrong number of arguments for 'incr' command", 1, false),
        (
            "WRONGTYPE Operation against a key holding the wrong kind of value",
            1,
            false,
        ),
        (
            "CROSSSLOT Keys in request don't hash to the same slot",
            1,
            false,
        ),
        ("MOVED nonsense", 1, false),
    ];
    for (reply, writes, refreshed) in table {
        let mut h = cluster_with(|_| {});
        let a = h.sim.master(0);
        let key = h.sim.keys_on(&a, 1).remove(0);
        let refreshes = h.sim.count("CLUSTER SLOTS");
        h.sim
            .add_rule(Rule::error(reply).commands(&["INCR"]).times(1));
        let result = h.run_one(incr(&key));
        if writes == 2 {
            assert_eq!(result, Ok(Value::Int(1)), "{reply}");
        } else {
            assert_eq!(
                result,
                Err(Error::Server(ServerError::new(reply))),
                "{reply}"
            );
            assert!(!result.unwrap_err().outcome_unknown());
        }
        assert_eq!(h.sim.count(&format!("INCR {key}")), writes, "{reply}");
        assert_eq!(
            h.sim.count("CLUSTER SLOTS") > refreshes,
            refreshed,
            "{reply}"
        );
    }
}

#[test]
fn clusterdown_for_a_second_then_success() {
    let mut h = cluster_with(|_| {});
    let a = h.sim.master(0);
    let key = h.sim.keys_on(&a, 1).remove(0);
    let t0 = h.elapsed();
    h.sim.add_rule(
        Rule::error("CLUSTERDOWN The cluster is down")
            .commands(&["INCR", "GET", "SET"])
            .until(h.now() + Duration::from_secs(1)),
    );
    assert_eq!(h.run_one(incr(&key)), Ok(Value::Int(1)));
    let took = h.elapsed() - t0;
    // 10, 20, 40, ... ms (±25 %): the first retry after 1 s is the 7th or 8th.
    let writes = h.sim.count(&format!("INCR {key}"));
    assert!((7..=9).contains(&writes), "{writes} writes");
    assert!(took >= Duration::from_secs(1), "{took:?}");
    assert!(took < Duration::from_millis(1700), "{took:?}");
}

#[test]
fn retries_exhausted_carry_the_last_reply() {
    let mut h = cluster_with(|_| {});
    let a = h.sim.master(0);
    let key = h.sim.keys_on(&a, 1).remove(0);
    let t0 = h.elapsed();
    h.sim
        .add_rule(Rule::error("LOADING Redis is loading the dataset in memory").on(&a));
    let result = h.run_one(incr(&key));
    assert_eq!(
        result,
        Err(Error::RetriesExhausted {
            attempts: 11,
            last: ServerError::new("LOADING Redis is loading the dataset in memory"),
        })
    );
    assert!(!result.unwrap_err().outcome_unknown());
    assert_eq!(
        h.sim.count(&format!("INCR {key}")),
        11,
        "the first write and 10 retries"
    );
    // About 2.6 s of backoff in all (10 delays, jittered ±25 %).
    let took = h.elapsed() - t0;
    assert!(
        took > Duration::from_millis(1970) && took < Duration::from_millis(3290),
        "{took:?}"
    );
}

#[test]
fn the_retry_policy_is_configurable() {
    let mut h = cluster_with(|c| {
        c.retry = RetryPolicy {
            attempts: 2,
            base: Duration::from_millis(100),
            cap: Duration::from_millis(100),
        };
    });
    let a = h.sim.master(0);
    let key = h.sim.keys_on(&a, 1).remove(0);
    let t0 = h.elapsed();
    h.sim.add_rule(Rule::error(
        "TRYAGAIN Multiple keys request during rehashing of slot",
    ));
    let result = h.run_one(get(&key));
    assert!(
        matches!(result, Err(Error::RetriesExhausted { attempts: 3, .. })),
        "{result:?}"
    );
    assert_eq!(h.sim.count(&format!("GET {key}")), 3);
    let took = h.elapsed() - t0;
    assert!(
        took >= Duration::from_millis(150) && took <= Duration::from_millis(250),
        "{took:?}"
    );
}

#[test]
fn the_session_jitter_is_seeded() {
    // Two sessions with one seed retry at the same instants; another seed differs.
    let run = |seed: u64| {
        let mut h = cluster_with(|c| c.seed = seed);
        let a = h.sim.master(0);
        let key = h.sim.keys_on(&a, 1).remove(0);
        h.sim
            .add_rule(Rule::error("TRYAGAIN x").commands(&["GET"]).times(5));
        h.run_one(get(&key)).unwrap();
        h.sim
            .received()
            .iter()
            .filter(|r| r.name() == "GET")
            .map(|r| r.at - h.at(Duration::ZERO))
            .collect::<Vec<_>>()
    };
    assert_eq!(run(1), run(1));
    assert_ne!(run(1), run(2));
}
