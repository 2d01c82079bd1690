//! A fourth master joins a 3 x 1 cluster and takes a third of the slots, moved one by one with
//! their keys, under open-loop store and coordination load (`tests/src/chaos.rs`). The client's
//! first topology never listed the new node: it learns it from `MOVED` (and `ASK` during each
//! move). No error surfaces, every acknowledged write is stored afterwards, fences, terms and
//! tickets never go backwards, and the new master serves part of the load.
//!
//! Multi-key scripts on a slot whose keys are split between two masters get `TRYAGAIN` until
//! the move ends, so the retry budget (40 attempts, about 18 s) is set above one slot's move.

use std::sync::Arc;
use std::time::Duration;

use botmesh_redis_core::ClientOptions;
use botmesh_redis_core::TurnOptions;
use botmesh_redis_tests::chaos::{
    assert_no_failures, blocking, check_acknowledged_writes, check_monotonic, open_loop, reshard,
    start_cluster, started_store, turn_options, wait_agreement, Clock, ExtraMaster, Fault, Grant,
    Kind, Outcome, Recorder, Report, Scale, Workload,
};
use botmesh_redis_tests::conformance::{driver_name, Runtime};
use botmesh_redis_tests::{both_drivers, parse_info, AdminConn, ClusterOptions, SLOT_COUNT};

static TURN: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Slots moved per harness call; the load advances between two calls.
const SLOTS_PER_STEP: usize = 512;

async fn new_master_takes_a_third_of_the_slots_under_load<R: Runtime>() {
    let _turn = TURN.lock().await;
    let scale = Scale::from_env();
    let cluster = start_cluster(ClusterOptions::new()).await;
    let request_timeout = Duration::from_secs(30);
    let retry =
        ClientOptions::cluster(cluster.seeds()).cluster_retry(40, Duration::from_millis(10));
    let store = started_store::<R>(retry, request_timeout, "reshard").await;
    let clock = Clock::new();
    let recorder = Recorder::new(clock);
    // Turn waits are long enough for queues that grow while both cores move slots.
    let workload = Workload::new(store, recorder.clone(), 64, request_timeout).with_turn_options(
        TurnOptions {
            wait_timeout: Duration::from_secs(20),
            ..turn_options()
        },
    );
    workload.prepare().await.unwrap();
    let ks = workload.store.keyspace().clone();
    let workload = Arc::new(workload);
    let w = Arc::clone(&workload);
    let load = open_loop(scale, move |n| w.request(n));
    tokio::time::sleep(scale.settle).await;

    let joined = clock.now();
    let c = Arc::clone(&cluster);
    let extra = tokio::task::spawn_blocking(move || ExtraMaster::join(&c))
        .await
        .unwrap()
        .unwrap();
    let (new, new_id) = (extra.addr(), extra.id().to_owned());
    let old_masters = blocking(&cluster, |c| c.masters()).await.unwrap();
    let mut masters = old_masters.clone();
    masters.push(new);

    // A third of the slots: the first third of each old master's share.
    let ranges = blocking(&cluster, |c| c.slots()).await.unwrap();
    let mut slots: Vec<u16> = Vec::new();
    for r in &ranges {
        let len = r.end - r.start + 1;
        slots.extend(r.start..r.start + len / 3);
    }
    assert!(slots.len() >= usize::from(SLOT_COUNT) / 3 - 3);
    let started = clock.now();
    let mut keys_moved = 0;
    for chunk in slots.chunks(SLOTS_PER_STEP) {
        let (chunk, masters, new_id) = (chunk.to_vec(), masters.clone(), new_id.clone());
        keys_moved += tokio::task::spawn_blocking(move || reshard(&masters, &chunk, new, &new_id))
            .await
            .unwrap()
            .unwrap();
        load.advance(load.spawned(), 10, Duration::from_secs(10))
            .await;
    }
    let mut everyone = cluster.nodes();
    everyone.push(new);
    let after =
        tokio::task::spawn_blocking(move || wait_agreement(&everyone, Duration::from_secs(30)))
            .await
            .unwrap()
            .unwrap();
    let resharded = clock.now();
    tokio::time::sleep(scale.settle).await;
    let summary = load.stop().await;
    let outcomes = recorder.outcomes();

    let moved: std::collections::BTreeSet<u16> = slots.iter().copied().collect();
    let losses =
        tokio::task::block_in_place(|| check_acknowledged_writes(&ks, &after, &outcomes, |_| None))
            .unwrap();
    let faults = [
        Fault {
            what: format!("CLUSTER MEET of a fourth master {new}"),
            at: joined,
            healed: Some(started),
            slots: std::collections::BTreeSet::new(),
        },
        Fault {
            what: format!(
                "resharding of {} slots ({keys_moved} keys) onto {new}",
                slots.len()
            ),
            at: started,
            healed: Some(resharded),
            slots: moved.clone(),
        },
    ];
    let affected = |o: &Outcome| o.slot.is_some_and(|s| moved.contains(&s));
    let report = Report {
        title: format!("a fourth master and resharding, {}", driver_name::<R>()),
        scale,
        load: summary,
        outcomes: &outcomes,
        faults: &faults,
        affected: &affected,
        losses: &losses,
    };
    report.print();

    // The new master served script calls, and the old ones redirected to it.
    let info = |addr| {
        let text = AdminConn::connect(addr)
            .unwrap()
            .cmd(&["INFO", "all"])
            .unwrap();
        parse_info(text.as_str().unwrap())
    };
    let new_calls = tokio::task::block_in_place(|| info(new))
        .get("cmdstat_evalsha")
        .cloned()
        .unwrap_or_default();
    let moved_replies: Vec<String> = tokio::task::block_in_place(|| {
        old_masters
            .iter()
            .map(|&m| info(m).get("errorstat_MOVED").cloned().unwrap_or_default())
            .collect()
    });
    eprintln!(
        "new master {new}: evalsha {new_calls}; MOVED sent by the old masters: {moved_replies:?}"
    );
    assert!(
        new_calls.starts_with("calls="),
        "the new master served no script call"
    );

    let mut failures: Vec<String> = outcomes
        .iter()
        .filter(|o| o.kind != Kind::Ok)
        .map(|o| format!("an error surfaced: {o:?}"))
        .collect();
    failures.extend(losses.unexplained.iter().cloned());
    let mut grants = Grant::of(&outcomes, "lock");
    grants.extend(Grant::of(&outcomes, "campaign"));
    grants.extend(Grant::of(&outcomes, "turn"));
    let (_, bad) = check_monotonic(&grants, |_, _| false);
    eprintln!(
        "history: {} grants checked, {} went backwards",
        grants.len(),
        bad.len()
    );
    failures.extend(bad);
    assert!(losses.checked > 0);
    assert_no_failures(&failures);
    workload.store.executor().close().await;
    drop(extra);
}

both_drivers!(new_master_takes_a_third_of_the_slots_under_load);
