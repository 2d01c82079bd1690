//! Deadlines: every batch has an overall deadline, reported as `Timeout` with an honest
//! `outcome_unknown`; a connection that stops answering is closed after the response
//! timeout; a connect that hangs ends at the connect timeout.

use std::time::Duration;

use botmesh_redis_core::driver::session::{Config, Event};
use botmesh_redis_core::driver::Reply;
use botmesh_redis_core::testing::sim::{ConnectMode, Harness, Rule, SimCluster};
use botmesh_redis_core::testing::{get, incr, set, start, Batch};
use botmesh_redis_core::Error;
use botmesh_redis_core::Value;

fn cluster_with(config: impl FnOnce(&mut Config)) -> Harness {
    let sim = SimCluster::cluster(3, 1);
    let mut c = Config::cluster(sim.masters());
    config(&mut c);
    Harness::new(start(), sim, c)
}

#[test]
fn a_stalled_node_is_closed_after_the_response_timeout() {
    let mut h = cluster_with(|_| {});
    let a = h.sim.master(0);
    let keys = h.sim.keys_on(&a, 2);
    h.run_one(set(&keys[1], "v")).unwrap();
    h.sim.stall(&a);
    h.schedule(Duration::from_secs(6), {
        let a = a.clone();
        move |sim, now| sim.unstall(now, &a)
    });
    let t0 = h.elapsed();
    let replies = h.run_batch(vec![incr(&keys[0]), get(&keys[1])]);
    // The write is lost at the response timeout (5 s); the read is asked again on a new
    // connection, which the stalled node takes and does not answer either, until it wakes.
    assert_eq!(
        replies[0],
        Err(Error::ReplyLost {
            addr: a.clone(),
            reason: "no reply within 5s".into()
        })
    );
    assert_eq!(replies[1], Ok(Value::from("v")));
    let closed: Vec<bool> = h.wires_to(&a).iter().map(|w| w.closed).collect();
    assert_eq!(closed, vec![true, false]);
    assert_eq!(h.elapsed() - t0, Duration::from_secs(6));
    // The stalled connection was closed, so the node never ran the write.
    assert_eq!(h.sim.value(keys[0].as_bytes()), None);
}

#[test]
fn a_request_deadline_reports_whether_a_write_was_sent() {
    let mut h = cluster_with(|c| {
        c.request_timeout = Duration::from_secs(1);
        c.response_timeout = Duration::from_secs(30);
    });
    let (a, b) = (h.sim.master(0), h.sim.master(1));
    let on_a = h.sim.keys_on(&a, 2);
    let on_b = h.sim.keys_on(&b, 1).remove(0);
    h.run_batch(vec![set(&on_a[1], "v"), set(&on_b, "w")]);
    h.sim.stall(&a);
    let replies = h.run_batch(vec![incr(&on_a[0]), get(&on_a[1]), get(&on_b)]);
    assert_eq!(
        replies,
        vec![
            Err(Error::Timeout {
                outcome_unknown: true
            }),
            Err(Error::Timeout {
                outcome_unknown: false
            }),
            Ok(Value::from("w")),
        ]
    );
    assert_eq!(h.elapsed(), Duration::from_secs(1));
}

#[test]
fn a_call_held_back_before_the_session_has_the_wait_counted_in_its_deadline() {
    let mut h = cluster_with(|c| {
        c.request_timeout = Duration::from_secs(1);
        c.response_timeout = Duration::from_secs(30);
    });
    let a = h.sim.master(0);
    let key = h.sim.keys_on(&a, 1).remove(0);
    h.run_one(set(&key, "v")).unwrap();
    h.sim.stall(&a);
    // Parked for room 600 ms before the session: 400 ms of its request timeout are left.
    let t0 = h.elapsed();
    let held = h.submit_waited(Batch::new(vec![incr(&key)]), Duration::from_millis(600));
    assert_eq!(
        h.wait_for(&held),
        Ok(vec![Err(Error::Timeout {
            outcome_unknown: true
        })])
    );
    assert_eq!(h.elapsed() - t0, Duration::from_millis(400));
    // Its summary's time is the call's, the wait included.
    let summary = h.summary(&held).expect("a summary of the held call");
    assert_eq!(summary.elapsed, Duration::from_secs(1));
}

#[test]
fn a_call_whose_deadline_passed_before_the_session_is_refused_unwritten() {
    let mut h = cluster_with(|c| c.request_timeout = Duration::from_secs(1));
    let a = h.sim.master(0);
    let key = h.sim.keys_on(&a, 1).remove(0);
    h.run_one(set(&key, "1")).unwrap();
    let before = h.written_to(&a);
    let late = h.submit_waited(Batch::new(vec![incr(&key)]), Duration::from_secs(1));
    assert_eq!(
        h.wait_for(&late),
        Err(Error::Timeout {
            outcome_unknown: false
        })
    );
    assert_eq!(
        h.written_to(&a),
        before,
        "a call past its deadline was written"
    );
    assert_eq!(h.run_one(get(&key)), Ok(Value::from("1")));
}

/// A call its driver found past its deadline is refused unwritten, counted as a request
/// timeout with its time, even when the session's clock (read before the driver's) says it
/// still had some: the driver handed it on because its deadline passed, and written now it
/// could only end as a timeout whose outcome is unknown.
#[test]
fn a_call_its_driver_found_expired_is_refused_unwritten_whatever_the_clock() {
    let mut h = cluster_with(|c| c.request_timeout = Duration::from_secs(1));
    let a = h.sim.master(0);
    let key = h.sim.keys_on(&a, 1).remove(0);
    h.run_one(set(&key, "1")).unwrap();
    let before = h.written_to(&a);
    let timeouts = h.session.tally().get(Event::RequestTimeout);
    // Held 999 ms by the session's clock, its deadline 1 ms away.
    let late = h.submit_expired(Batch::new(vec![incr(&key)]), Duration::from_millis(999));
    assert_eq!(
        h.wait_for(&late),
        Err(Error::Timeout {
            outcome_unknown: false
        })
    );
    assert_eq!(h.written_to(&a), before, "an expired call was written");
    assert_eq!(h.session.tally().get(Event::RequestTimeout), timeouts + 1);
    let summary = h.summary(&late).expect("a summary of the expired call");
    assert_eq!(summary.elapsed, Duration::from_millis(999));
    assert_eq!(summary.outcome, "timeout");
}

#[test]
fn a_write_never_written_times_out_with_a_known_outcome() {
    // The node's connection never opens; the cluster session keeps retrying (the node may be
    // failing over) until the batch deadline.
    let mut h = cluster_with(|c| c.request_timeout = Duration::from_secs(1));
    let a = h.sim.master(0);
    let key = h.sim.keys_on(&a, 1).remove(0);
    h.run_one(get("warm-up")).unwrap();
    h.sim.drop_connections(h.now(), &a, "restart");
    h.sim.set_connect_mode(&a, ConnectMode::Hang);
    // Let the session see the close first: a write on a connection the peer has closed but
    // the client has not noticed yet is lost, not unsent.
    h.run_for(Duration::from_millis(1));
    let reply = h.run_one(incr(&key));
    assert_eq!(
        reply,
        Err(Error::Timeout {
            outcome_unknown: false
        })
    );
    assert!(!reply.unwrap_err().outcome_unknown());
    assert_eq!(h.sim.count(&format!("INCR {key}")), 0);
}

#[test]
fn a_late_reply_of_a_timed_out_batch_is_not_taken_for_the_next_one() {
    // One plan, two batches on the same node: the first times out, its reply arrives while
    // the second waits, and must not be mistaken for the second's.
    let mut h = cluster_with(|c| {
        c.request_timeout = Duration::from_millis(1500);
        c.response_timeout = Duration::from_secs(30);
    });
    let a = h.sim.master(0);
    let keys = h.sim.keys_on(&a, 2);
    h.run_batch(vec![set(&keys[0], "first"), set(&keys[1], "second")]);
    h.sim.set_latency(&a, Duration::from_secs(2));
    h.schedule(Duration::from_secs(1), {
        let a = a.clone();
        move |sim, _| sim.set_latency(&a, Duration::ZERO)
    });
    let token = h.submit(botmesh_redis_core::testing::Sequence::new(vec![
        vec![get(&keys[0])],
        vec![get(&keys[1])],
    ]));
    let replies = h.wait_for::<Vec<Vec<Reply>>>(&token).unwrap();
    assert_eq!(
        replies,
        vec![
            vec![Err(Error::Timeout {
                outcome_unknown: false
            })],
            vec![Ok(Value::from("second"))]
        ]
    );
    assert_eq!(h.elapsed(), Duration::from_secs(2));
}

#[test]
fn a_request_that_ends_before_it_is_written_is_never_written() {
    // The retry and the batch deadline fall due at the same instant, the retry first: the
    // request is routed, then ends, and its bytes must not go out afterwards.
    let mut h = cluster_with(|c| {
        c.request_timeout = Duration::ZERO;
        c.retry.base = Duration::ZERO;
    });
    let a = h.sim.master(0);
    let key = h.sim.keys_on(&a, 1).remove(0);
    h.run_one(get("warm-up")).unwrap();
    let clusterdown = "CLUSTERDOWN The cluster is down";
    h.sim
        .add_rule(Rule::error(clusterdown).commands(&["INCR"]).times(1));
    let reply = h.run_one(incr(&key));
    assert_eq!(
        reply,
        Err(Error::Timeout {
            outcome_unknown: false
        })
    );
    h.run_for(Duration::from_secs(1));
    assert_eq!(h.sim.count(&format!("INCR {key}")), 1, "{}", h.trace());
    assert_eq!(h.sim.value(key.as_bytes()), None);
}
