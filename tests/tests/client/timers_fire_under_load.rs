//! Timers fire while traffic keeps the driver busy.
//!
//! Open-loop load (a batch of new requests every millisecond, whatever has completed) on a
//! 3-master cluster; one master is stopped (`SIGSTOP`) for six seconds. Replies from the two
//! healthy masters and new submissions keep the session task's inbox busy the whole time, so
//! this checks that request deadlines, response timeouts, connect timeouts and retry delays
//! still fire: every request to the stopped master's slots ends within the request timeout
//! plus a margin, requests to the other masters keep succeeding, and the number of calls
//! waiting stays bounded.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use botmesh_redis_core::{Access, ClientOptions, Error, Executor, Key, Request};
use botmesh_redis_tests::conformance::{Client, Runtime};
use botmesh_redis_tests::{
    both_drivers, on_one_thread, unique_prefix, ClusterOptions, RedisCluster,
};

const REQUEST_TIMEOUT: Duration = Duration::from_millis(2500);
/// Scheduling noise on a loaded 2-core machine, on top of the request timeout.
const MARGIN: Duration = Duration::from_millis(1500);
/// Longer than the request timeout and its margin: a call that waits for the master to come
/// back instead of for its deadline takes longer than the bound.
const STOP: Duration = Duration::from_secs(6);
/// Calls per millisecond (one every 40 µs): a third to the stopped master's slots, the rest to
/// the healthy ones. Fewer leave the driver's inbox idle often enough for timers to win anyway.
const PER_TICK: usize = 18;

#[derive(Debug)]
struct Outcome {
    stopped_slot: bool,
    submitted: Instant,
    took: Duration,
    result: Result<(), Error>,
}

async fn requests_end_in_time_while_a_master_is_stopped<R: Runtime>() {
    // One driver at a time: the load is meant to keep one client busy, not the machine.
    let _turn = botmesh_redis_tests::exclusive().await;
    // No replica, and a node timeout far beyond the test: the stopped master stays the owner
    // of its slots for the whole stop.
    let cluster = RedisCluster::start(
        ClusterOptions::new()
            .replicas_per_master(0)
            .node_timeout(Duration::from_secs(60)),
    );
    let options = ClientOptions::cluster(cluster.seeds())
        .request_timeout(REQUEST_TIMEOUT)
        .response_timeout(Duration::from_millis(1500))
        .connect_timeout(Duration::from_millis(500));
    let client = Client::<R>::connect(options).await.unwrap();
    let prefix = unique_prefix("timers");
    let masters = cluster.masters().unwrap();
    let stopped = masters[0];
    // Keys on every master: each tick sends one call to the stopped master's slots, two to
    // the others'.
    let (mut on_stopped, mut healthy) = (Vec::new(), Vec::new());
    for i in 0.. {
        let key = Key::new(format!("{prefix}:{i}"));
        match cluster.master_for_key(key.as_bytes()).unwrap() == stopped {
            true if on_stopped.len() < 8 => on_stopped.push(key),
            false if healthy.len() < 16 => healthy.push(key),
            _ => {}
        }
        if on_stopped.len() == 8 && healthy.len() == 16 {
            break;
        }
    }

    let outcomes = Arc::new(Mutex::new(Vec::<Outcome>::new()));
    let pending = Arc::new(AtomicU64::new(0));
    let mut max_pending = 0;
    let start = Instant::now();
    let stop_at = start + Duration::from_secs(1);
    let resume_at = stop_at + STOP;
    let end = resume_at + Duration::from_secs(1);
    let mut tick = tokio::time::interval(Duration::from_millis(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let mut n = 0u64;
    let mut paused = false;
    while Instant::now() < end {
        tick.tick().await;
        let now = Instant::now();
        if !paused && now >= stop_at && now < resume_at {
            cluster.server(stopped).unwrap().pause().unwrap();
            paused = true;
        }
        if paused && now >= resume_at {
            cluster.server(stopped).unwrap().resume().unwrap();
            paused = false;
        }
        let stopped_batch = on_stopped.iter().take(PER_TICK / 3).map(|k| (k, true));
        let healthy_batch = healthy.iter().take(2 * PER_TICK / 3).map(|k| (k, false));
        for (key, stopped_slot) in stopped_batch.chain(healthy_batch) {
            n += 1;
            let request = if n.is_multiple_of(2) {
                Request::cmd(Access::Write, "SET").key(key).arg(n)
            } else {
                Request::cmd(Access::Read, "GET").key(key)
            };
            let request = request.build().unwrap();
            let (client, outcomes, pending) = (client.clone(), outcomes.clone(), pending.clone());
            pending.fetch_add(1, Ordering::Relaxed);
            tokio::spawn(async move {
                let submitted = Instant::now();
                let result = client.call(request).await.map(drop);
                let took = submitted.elapsed();
                pending.fetch_sub(1, Ordering::Relaxed);
                outcomes.lock().unwrap().push(Outcome {
                    stopped_slot,
                    submitted,
                    took,
                    result,
                });
            });
        }
        max_pending = max_pending.max(pending.load(Ordering::Relaxed));
    }
    if paused {
        cluster.server(stopped).unwrap().resume().unwrap();
    }
    // Everything submitted ends, within the request timeout of the last submission.
    botmesh_redis_tests::eventually(REQUEST_TIMEOUT + MARGIN, "every call ended", || {
        let left = pending.load(Ordering::Relaxed);
        async move { (left == 0).then_some(()) }
    })
    .await;

    let outcomes = std::mem::take(&mut *outcomes.lock().unwrap());
    let (to_stopped, to_healthy): (Vec<&Outcome>, Vec<&Outcome>) =
        outcomes.iter().partition(|o| o.stopped_slot);
    let during = |o: &&&Outcome| o.submitted >= stop_at && o.submitted < resume_at;
    let slowest = to_stopped.iter().map(|o| o.took).max().unwrap();
    let failed_healthy: Vec<_> = to_healthy.iter().filter(|o| o.result.is_err()).collect();
    let healthy_during = to_healthy.iter().filter(during).count();
    let healthy_fast_during = to_healthy
        .iter()
        .filter(during)
        .filter(|o| o.took < Duration::from_secs(1))
        .count();
    let mut kinds = std::collections::BTreeMap::<String, usize>::new();
    for o in to_stopped.iter().filter(|o| o.result.is_err()) {
        let e = o.result.as_ref().unwrap_err();
        let kind = format!("{e:?}");
        let kind = kind.split([' ', '{', '(']).next().unwrap_or("").to_owned();
        *kinds.entry(kind).or_default() += 1;
    }
    eprintln!(
        "{}: {} calls in {:?}; stopped master: slowest {slowest:?}, errors by kind {kinds:?}; \
         healthy: {} calls during the stop, {} under 1 s, {} failed; max waiting {max_pending}",
        botmesh_redis_tests::driver_name::<R>(),
        outcomes.len(),
        end - start,
        healthy_during,
        healthy_fast_during,
        failed_healthy.len(),
    );
    assert!(
        slowest <= REQUEST_TIMEOUT + MARGIN,
        "a call to the stopped master took {slowest:?}"
    );
    assert!(
        failed_healthy.is_empty(),
        "{} healthy calls failed, the first: {:?}",
        failed_healthy.len(),
        failed_healthy.first()
    );
    assert!(healthy_during > 0);
    // The healthy masters keep answering while the stopped one holds its callers: their
    // calls keep up with the arrivals (a second is far above their usual latency, and far
    // below the request timeout a starved timer would let them wait).
    assert!(
        healthy_fast_during * 100 >= healthy_during * 90,
        "{healthy_fast_during} of {healthy_during} healthy calls under 1 s"
    );
    // Calls waiting: at most what arrives within a request timeout and its margin.
    let per_second = (PER_TICK as u64) * 1000;
    let bound = per_second * (REQUEST_TIMEOUT + MARGIN).as_secs();
    assert!(max_pending <= bound, "{max_pending} calls waiting");
    // Once resumed, the stopped master answers again.
    let key = &on_stopped[0];
    let get = Request::cmd(Access::Read, "GET").key(key).build().unwrap();
    botmesh_redis_tests::eventually(Duration::from_secs(5), "the master answers", || {
        let (client, get) = (client.clone(), get.clone());
        async move { client.call(get).await.ok() }
    })
    .await;
    client.close().await;
}

both_drivers!(exclusive: requests_end_in_time_while_a_master_is_stopped);
on_one_thread!(exclusive: requests_end_in_time_while_a_master_is_stopped);
