//! `kill -9` of a master under open-loop store and coordination load
//! (`tests/src/chaos.rs` has the load, the report and the history checker).
//!
//! - Plain replication: only calls in flight on the killed master fail, and only as "outcome
//!   unknown"; everything else rides out the `CLUSTERDOWN` second and the promotion. An
//!   acknowledged write may be missing afterwards only if the killed master acknowledged it
//!   (asynchronous replication, `docs/reliability.md`); fences, terms and tickets never go
//!   backwards, except a number the killed master handed out that the promoted replica never
//!   saw (the same loss).
//! - `min-replicas-to-write 1` and `WAIT` on grants: no acknowledged grant is lost: the promoted
//!   master's fence and term counters are at least every number acknowledged before the kill,
//!   and no number goes backwards at all. The promoted master has no replica left, so writes to
//!   its slots are refused with `NOREPLICAS`, a typed server error.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use botmesh_redis_core::ClientOptions;
use botmesh_redis_core::TurnOptions;
use botmesh_redis_tests::chaos::{
    assert_no_failures, blocking, check_acknowledged_writes, check_monotonic, open_loop, owner,
    promoted, slots_of, start_cluster, started_store, turn_options, Clock, Fault, Grant, Kind, Op,
    Outcome, Recorder, Report, Scale, Workload,
};
use botmesh_redis_tests::conformance::{driver_name, Client, Runtime};
use botmesh_redis_tests::{both_drivers, AdminConn, ClusterOptions};

static TURN: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Replication {
    /// Asynchronous replication, no `WAIT`.
    Plain,
    /// `min-replicas-to-write 1` on every master and `WAIT 1` on lock and leadership grants.
    MinReplicasAndWait,
}

/// One kill: the master, its slots, when, and the replica that took over.
struct Kill {
    victim: SocketAddr,
    slots: BTreeSet<u16>,
    killed: Duration,
    promoted: SocketAddr,
    promoted_at: Duration,
}

/// `GET key` on `addr`, as a number (0 when missing).
fn counter(addr: SocketAddr, key: &[u8]) -> u64 {
    let value = AdminConn::connect(addr)
        .unwrap()
        .cmd(&[b"GET".as_slice(), key])
        .unwrap();
    value.as_int().map(|v| v as u64).unwrap_or(0)
}

async fn killed_master<R: Runtime>(replication: Replication) {
    let _turn = TURN.lock().await;
    let scale = Scale::from_env();
    let mut options = ClusterOptions::new();
    if replication == Replication::MinReplicasAndWait {
        options = options
            .config("min-replicas-to-write 1")
            .config("min-replicas-max-lag 10");
    }
    let cluster = start_cluster(options).await;
    // After kill -9 every node answers CLUSTERDOWN for about a second and the replica is
    // promoted 2-3 s later: 40 retries from 10 ms (about 17.6 s of backoff) ride that out.
    let request_timeout = Duration::from_secs(30);
    let retry =
        ClientOptions::cluster(cluster.seeds()).cluster_retry(40, Duration::from_millis(10));
    let store = started_store::<R>(retry, request_timeout, "kill").await;
    let clock = Clock::new();
    let recorder = Recorder::new(clock);
    // Turn waits outlast the outage, so that a turn fails only with its lost requests.
    let mut workload = Workload::new(store, recorder.clone(), 24, request_timeout)
        .with_turn_options(TurnOptions {
            wait_timeout: Duration::from_secs(20),
            ..turn_options()
        });
    if replication == Replication::MinReplicasAndWait {
        workload.wait_replicas = Some((1, Duration::from_millis(200)));
        workload.mix = vec![
            Op::Lock,
            Op::Save,
            Op::Leader,
            Op::Save,
            Op::Lock,
            Op::Upsert,
            Op::Leader,
            Op::Heartbeat,
        ];
    }
    workload.prepare().await.unwrap();
    let ks = workload.store.keyspace().clone();
    let workload = Arc::new(workload);

    let w = Arc::clone(&workload);
    let load = open_loop(scale, move |n| w.request(n));
    tokio::time::sleep(scale.settle).await;

    // The first victim serves the first lock key, so that some fences live on it; the long run
    // kills one master per shard (a promoted replica has no replica left to fail over to).
    let first = blocking(&cluster, {
        let key = ks.lock(&Workload::<Client<R>>::lock_key(0));
        move |c| c.master_for_slot(key.slot())
    })
    .await
    .unwrap();
    let mut kills: Vec<Kill> = Vec::new();
    for i in 0..scale.faults.min(3) {
        let ranges = blocking(&cluster, |c| c.slots()).await.unwrap();
        let candidates: Vec<SocketAddr> = ranges
            .iter()
            .map(|r| r.master)
            .filter(|m| !kills.iter().any(|k| k.promoted == *m))
            .collect();
        let victim = if i == 0 { first } else { candidates[0] };
        let slots = slots_of(&ranges, victim);
        let replica = blocking(&cluster, move |c| c.replicas_of(victim))
            .await
            .unwrap()[0];
        cluster.server(victim).unwrap().kill();
        let killed = clock.now();
        let promoted_at = promoted(replica, clock, Duration::from_secs(15)).await;
        blocking(&cluster, |c| c.wait_ok()).await.unwrap();
        kills.push(Kill {
            victim,
            slots,
            killed,
            promoted: replica,
            promoted_at,
        });
        tokio::time::sleep(scale.settle * 2).await;
    }
    let summary = load.stop().await;
    let outcomes = recorder.outcomes();
    let ranges = blocking(&cluster, |c| c.slots()).await.unwrap();
    for k in &kills {
        assert_eq!(owner(&ranges, *k.slots.iter().next().unwrap()), k.promoted);
    }

    let kill_of = |o: &Outcome| {
        kills
            .iter()
            .find(|k| o.slot.is_some_and(|s| k.slots.contains(&s)))
    };
    let on_victim = |o: &Outcome| kill_of(o).is_some();
    // What a killed master acknowledged before it died may be missing (asynchronous
    // replication).
    let losses = tokio::task::block_in_place(|| {
        check_acknowledged_writes(&ks, &ranges, &outcomes, |o| {
            let k = kill_of(o)?;
            (o.ended <= k.killed).then(|| {
                format!(
                    "acknowledged by the killed master {} ms before the kill",
                    (k.killed - o.ended).as_millis()
                )
            })
        })
    })
    .unwrap();
    let faults: Vec<Fault> = kills
        .iter()
        .map(|k| Fault {
            what: format!(
                "kill -9 {} (replica {} promoted at {:.3} s)",
                k.victim,
                k.promoted,
                k.promoted_at.as_secs_f64()
            ),
            at: k.killed,
            healed: Some(k.promoted_at),
            slots: k.slots.clone(),
        })
        .collect();
    let title = format!(
        "killed master, {}, {}",
        match replication {
            Replication::Plain => "asynchronous replication",
            Replication::MinReplicasAndWait => "min-replicas-to-write 1 and WAIT 1 on grants",
        },
        driver_name::<R>()
    );
    let report = Report {
        title,
        scale,
        load: summary,
        outcomes: &outcomes,
        faults: &faults,
        affected: &on_victim,
        losses: &losses,
    };
    report.print();

    let mut failures: Vec<String> = Vec::new();
    for o in &outcomes {
        let k = kill_of(o);
        let fine = match (o.kind, replication, k) {
            (Kind::Ok, _, _) => true,
            // In flight on the killed master: outcome unknown, and only until the promotion; a
            // lock's grant is given back first (once the promoted master took the release), so
            // its call may end after the promotion.
            (Kind::ReplyLost, _, Some(k)) => {
                let given_back = o.op == "lock" && o.sent <= k.promoted_at;
                o.write
                    && (o.ended <= k.promoted_at || given_back)
                    && o.detail.starts_with(&k.victim.to_string())
            }
            (Kind::TimeoutUnknown, _, Some(k)) => o.write && o.sent <= k.promoted_at,
            // A turn whose wait spanned the kill of its chat's master: the queue stalled until
            // the promotion, and the wait (measured on the server's clock) may run out.
            (Kind::TimeoutNotRun, _, Some(k)) => {
                o.op == "turn" && o.sent <= k.promoted_at && o.ended >= k.killed
            }
            // A lock or turn the failover lost: its holder's release finds it gone.
            (Kind::NotHolder, _, Some(k)) => o.sent >= k.killed,
            // The promoted master has no replica left: it refuses writes, before running them.
            (Kind::Server, Replication::MinReplicasAndWait, Some(k)) => {
                o.detail == "NOREPLICAS" && o.ended >= k.killed
            }
            // WAIT could not reach the replica of a grant made just before the kill: the grant
            // was given back.
            (Kind::NotReplicated, Replication::MinReplicasAndWait, Some(_)) => true,
            // Granted by the master as it died, its WAIT's reply lost with the connection: the
            // grant's replication is unknown, and it was given back (once the promoted master
            // took the release, so the call may end after the promotion).
            (Kind::ReplicationUnknown, Replication::MinReplicasAndWait, Some(k)) => {
                o.sent <= k.promoted_at && o.ended >= k.killed
            }
            _ => false,
        };
        if !fine {
            failures.push(format!("unexpected outcome: {o:?}"));
        }
    }
    for l in &losses.unexplained {
        failures.push(format!("lost outside the window: {l}"));
    }

    // Fences, terms and tickets never go backwards, except a number a killed master handed
    // out and its promoted replica never saw (plain replication only).
    let mut grants = Grant::of(&outcomes, "lock");
    grants.extend(Grant::of(&outcomes, "campaign"));
    grants.extend(Grant::of(&outcomes, "turn"));
    let slot_of: BTreeMap<String, u16> = outcomes
        .iter()
        .filter_map(|o| Some((o.target.clone(), o.slot?)))
        .collect();
    let (allowed, bad) = check_monotonic(&grants, |earlier, _later| {
        replication == Replication::Plain
            && kills
                .iter()
                .any(|k| k.slots.contains(&slot_of[&earlier.name]) && earlier.granted <= k.killed)
    });
    eprintln!(
        "history: {} grants checked, {} went backwards inside the replication window, {} outside",
        grants.len(),
        allowed.len(),
        bad.len()
    );
    for b in allowed.iter().take(5) {
        eprintln!("  allowed: {b}");
    }
    failures.extend(bad.into_iter().map(|b| format!("went backwards: {b}")));

    if replication == Replication::MinReplicasAndWait {
        // Every grant acknowledged through WAIT survived the kill: the promoted master's
        // counters are at least the largest number acknowledged for each name.
        let mut largest: BTreeMap<(SocketAddr, &str, String), u64> = BTreeMap::new();
        for o in outcomes.iter().filter(|o| o.ok()) {
            let Some(k) = kill_of(o) else { continue };
            if o.ended > k.killed {
                continue;
            }
            if let (Some(v), "lock" | "campaign") = (o.value, o.op) {
                let e = largest
                    .entry((k.promoted, o.op, o.target.clone()))
                    .or_default();
                *e = (*e).max(v);
            }
        }
        assert!(!largest.is_empty(), "grants were made on the killed master");
        for ((promoted, op, name), acked) in largest {
            let key = if op == "lock" {
                ks.lock_fence(&name)
            } else {
                ks.leader_term(&name)
            };
            let stored = tokio::task::block_in_place(|| counter(promoted, key.as_bytes()));
            eprintln!("{op} {name}: largest acknowledged {acked}, promoted master has {stored}");
            if stored < acked {
                failures.push(format!(
                    "{op} {name}: {acked} was acknowledged through WAIT, the promoted master's counter is {stored}"
                ));
            }
        }
    }
    assert!(losses.checked > 0);
    assert_no_failures(&failures);
    workload.store.executor().close().await;
}

both_drivers!(killed_master {
    killed_master_fails_only_in_flight_writes_as_outcome_unknown => Replication::Plain,
    killed_master_with_min_replicas_and_wait_loses_no_grant => Replication::MinReplicasAndWait,
});
