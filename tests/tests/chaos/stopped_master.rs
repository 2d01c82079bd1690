//! A master `SIGSTOP`ped past `cluster-node-timeout` under open-loop store and coordination
//! load, then `SIGCONT`ed (`tests/src/chaos.rs` has the load and the report).
//!
//! Two clients run the load at once, on the same cluster: one with the default timeouts, so
//! that the stopped master's late answers reach it once it resumes (a paused master answers the
//! requests it queued, then learns it was replaced and discards its data), and one that closes
//! a silent connection after one second. What must hold, for both:
//!
//! - no call hangs: each ends within its steps times the request timeout, plus a second;
//! - every error is one the library documents for the case (outcome unknown for writes on the
//!   stopped master, a retryable reply that ran out, a timeout); calls on other masters succeed;
//! - the stopped master's slots are served again within node timeout + promotion + the retry
//!   budget, before the master is resumed;
//! - every acknowledged write is stored afterwards, except one kind that `docs/reliability.md` names as the
//!   asynchronous-replication loss: a write to the stopped master's slots, still unanswered when
//!   it resumed and acknowledged after (the stale master's late `OK`). The session reports such
//!   an `OK` as `ReplyLost` once its map names the new master (a stalled connection refreshes
//!   the map every second); only one that arrives before that refresh can be taken, and the
//!   report counts them.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use botmesh_redis_core::ClientOptions;
use botmesh_redis_core::TurnOptions;
use botmesh_redis_tests::chaos::{
    assert_no_failures, blocking, check_acknowledged_writes, is_master, open_loop, owner, slots_of,
    start_cluster, started_store, turn_options, Clock, Fault, Kind, Outcome, Recorder, Report,
    Scale, Workload, REPLICA,
};
use botmesh_redis_tests::conformance::{driver_name, Client, Runtime};
use botmesh_redis_tests::{both_drivers, eventually, ClusterOptions};

static TURN: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

const NODE_TIMEOUT: Duration = Duration::from_millis(1000);
/// With a 1 s node timeout a dead master's replica is promoted 2-3 s after the fault (one
/// timeout to flag it failing, then the replicas' election delay).
const PROMOTION: Duration = Duration::from_secs(3);

/// The most a client's retries wait: 10 ms doubling to 500 ms, times the largest jitter.
fn retry_budget(attempts: u32) -> Duration {
    let mut total = Duration::ZERO;
    for i in 0..attempts {
        total += Duration::from_millis((10u64 << i.min(16)).min(500));
    }
    total.mul_f64(1.25)
}

/// One client's load: its options, workload and recorder.
struct Run<R: Runtime> {
    name: &'static str,
    request_timeout: Duration,
    retry_attempts: u32,
    workload: Arc<Workload<Client<R>>>,
    recorder: Recorder,
}

async fn run<R: Runtime>(
    name: &'static str,
    options: ClientOptions,
    request_timeout: Duration,
    retry_attempts: u32,
    clock: Clock,
) -> Run<R> {
    let store = started_store::<R>(options, request_timeout, &format!("stop-{name}")).await;
    let recorder = Recorder::new(clock);
    // Turn waits outlast the pause, so that a turn fails only with its lost requests.
    let workload = Workload::new(store, recorder.clone(), 24, request_timeout).with_turn_options(
        TurnOptions {
            wait_timeout: Duration::from_secs(20),
            ..turn_options()
        },
    );
    workload.prepare().await.unwrap();
    Run {
        name,
        request_timeout,
        retry_attempts,
        workload: Arc::new(workload),
        recorder,
    }
}

/// One pause of a master: which, its slots, and when.
struct Pause {
    victim: SocketAddr,
    slots: BTreeSet<u16>,
    /// Once the signal was delivered: a request sent later certainly met it.
    paused: Duration,
    promoted: Duration,
    resumed: Duration,
}

async fn stopped_master_is_replaced_and_only_its_late_acks_are_lost<R: Runtime>() {
    let _turn = TURN.lock().await;
    let scale = Scale::from_env();
    let cluster = start_cluster(ClusterOptions::new().node_timeout(NODE_TIMEOUT)).await;
    let clock = Clock::new();
    let seeds = cluster.seeds();
    let runs = [
        run::<R>(
            "default",
            ClientOptions::cluster(seeds.clone()),
            Duration::from_secs(10),
            10,
            clock,
        )
        .await,
        run::<R>(
            "fast",
            ClientOptions::cluster(seeds).response_timeout(Duration::from_secs(1)),
            Duration::from_secs(10),
            10,
            clock,
        )
        .await,
    ];
    // Two clients share the host: each gets half the scale's rate.
    let half = Scale {
        interval: scale.interval * 2,
        ..scale
    };
    let loads: Vec<_> = runs
        .iter()
        .map(|r| {
            let w = Arc::clone(&r.workload);
            open_loop(half, move |n| w.request(n))
        })
        .collect();
    tokio::time::sleep(scale.settle).await;

    let mut pauses: Vec<Pause> = Vec::new();
    for _ in 0..scale.faults.min(3) {
        let ranges = blocking(&cluster, |c| c.slots()).await.unwrap();
        // A shard not stopped before: stopping the promoted replica of an earlier pause would
        // hand the slots back to the master stopped then.
        let victim = ranges
            .iter()
            .map(|r| r.master)
            .find(|m| {
                let slots = slots_of(&ranges, *m);
                pauses.iter().all(|p| p.slots.is_disjoint(&slots))
            })
            .unwrap();
        let slots = slots_of(&ranges, victim);
        let replica = blocking(&cluster, move |c| c.replicas_of(victim))
            .await
            .unwrap()[0];
        cluster.server(victim).unwrap().pause().unwrap();
        // Taken once the signal is delivered: requests sent before may still have been answered.
        let paused = clock.now();
        let promoted = eventually(
            PROMOTION + Duration::from_secs(5),
            "the stopped master's replica to be promoted",
            || async move {
                tokio::task::spawn_blocking(move || is_master(replica))
                    .await
                    .unwrap()
                    .then(|| clock.now())
            },
        )
        .await;
        // Each client serves the stopped master's slots again, while it is still stopped.
        for r in &runs {
            let bound = NODE_TIMEOUT + PROMOTION + retry_budget(r.retry_attempts);
            let waited = bound.saturating_sub(clock.now() - paused);
            let slots = &slots;
            eventually(
                waited,
                &format!("the {} client to serve the stopped master's slots", r.name),
                || {
                    std::future::ready(
                        r.recorder
                            .first_success(paused, |o| o.slot.is_some_and(|s| slots.contains(&s)))
                            .map(|_| ()),
                    )
                },
            )
            .await;
        }
        let resumed = clock.now();
        cluster.server(victim).unwrap().resume().unwrap();
        blocking(&cluster, |c| c.wait_ok()).await.unwrap();
        let now = blocking(&cluster, |c| c.slots()).await.unwrap();
        assert_ne!(
            owner(&now, *slots.iter().next().unwrap()),
            victim,
            "the resumed master rejoined as a replica"
        );
        pauses.push(Pause {
            victim,
            slots,
            paused,
            promoted,
            resumed,
        });
        tokio::time::sleep(scale.settle).await;
    }
    let mut summaries = Vec::new();
    for load in &loads {
        load.halt();
    }
    for load in loads {
        summaries.push(load.stop().await);
    }

    let ranges = blocking(&cluster, |c| c.slots()).await.unwrap();
    let faults: Vec<Fault> = pauses
        .iter()
        .map(|p| Fault {
            what: format!(
                "SIGSTOP {} (replica promoted at {:.3} s)",
                p.victim,
                p.promoted.as_secs_f64()
            ),
            at: p.paused,
            healed: Some(p.resumed),
            slots: p.slots.clone(),
        })
        .collect();
    let on_victim = |o: &Outcome| {
        pauses.iter().any(|p| {
            o.slot.is_some_and(|s| p.slots.contains(&s))
                && o.sent < p.resumed + Duration::from_secs(6)
        })
    };
    let mut failures = Vec::new();
    for (r, summary) in runs.iter().zip(summaries) {
        let outcomes = r.recorder.outcomes();
        let ks = r.workload.store.keyspace().clone();
        // A turn waiter probes its predecessor's heartbeat, a key in another slot: when that
        // slot was on the stopped master, turns on every chat wait for it.
        let heartbeat_slot = ks.heartbeat(REPLICA).slot();
        let heartbeat_stopped = pauses.iter().any(|p| p.slots.contains(&heartbeat_slot));
        eprintln!(
            "{} client: the replica's heartbeat (slot {heartbeat_slot}) {} on a stopped master",
            r.name,
            if heartbeat_stopped { "was" } else { "was not" }
        );
        let late_ack = |o: &Outcome| {
            pauses.iter().find_map(|p| {
                // Still unanswered when the master was resumed, acknowledged after: only the
                // stale master can have answered it (a written request is never resent, and one
                // written to the promoted replica instead is kept there). On a loaded host it
                // may have been sent a little before the pause.
                (o.slot.is_some_and(|s| p.slots.contains(&s))
                    && o.sent < p.resumed
                    && o.ended >= p.resumed)
                    .then(|| {
                        format!(
                            "acknowledged by the stale master {} after SIGCONT",
                            p.victim
                        )
                    })
            })
        };
        let losses = tokio::task::block_in_place(|| {
            check_acknowledged_writes(&ks, &ranges, &outcomes, late_ack)
        })
        .unwrap();
        let report = Report {
            title: format!(
                "stopped master, {} client (response timeout {}), {}",
                r.name,
                if r.name == "fast" { "1 s" } else { "5 s" },
                driver_name::<R>()
            ),
            scale: half,
            load: summary,
            outcomes: &outcomes,
            faults: &faults,
            affected: &|o: &Outcome| {
                o.slot
                    .is_some_and(|s| pauses.iter().any(|p| p.slots.contains(&s)))
            },
            losses: &losses,
        };
        report.print();

        for o in &outcomes {
            let fine = match o.kind {
                Kind::Ok => true,
                Kind::Hang => false,
                // A write on the stopped master: sent, unanswered.
                Kind::ReplyLost | Kind::TimeoutUnknown if on_victim(o) || o.slot.is_none() => true,
                // A response timeout of 1 s also closes a healthy connection whose reply is
                // late by more than that (a loaded host): the price of never taking a stale
                // master's late answer.
                Kind::ReplyLost => r.name == "fast" && o.detail.contains("no reply within"),
                // A read or not-yet-sent request that ran out of time or retries while the
                // slot had no reachable master.
                Kind::TimeoutNotRun | Kind::RetriesExhausted => {
                    on_victim(o) || o.slot.is_none() || (o.op == "turn" && heartbeat_stopped)
                }
                // A turn or lock given up by its holder's deadline on the stopped master.
                Kind::NotHolder => on_victim(o),
                _ => false,
            };
            if !fine {
                failures.push(format!("{} client: {o:?}", r.name));
            }
        }
        for l in &losses.unexplained {
            failures.push(format!("{} client lost an acknowledged write: {l}", r.name));
        }
        assert!(losses.checked > 0);
        assert!(r.request_timeout > Duration::ZERO);
    }
    assert_no_failures(&failures);
    for r in &runs {
        r.workload.store.executor().close().await;
    }
}

both_drivers!(stopped_master_is_replaced_and_only_its_late_acks_are_lost);
