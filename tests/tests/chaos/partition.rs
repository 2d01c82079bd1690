//! Partitions under open-loop store and coordination load, with `min-replicas-to-write 1`
//! (`min-replicas-max-lag 2`) on every master (`tests/src/chaos.rs`):
//!
//! 1. a master cut off from its only replica (the replica is `SIGSTOP`ped): once the replica's
//!    lag passes 2 s the master refuses writes with `NOREPLICAS`, a typed server error that
//!    says nothing ran; writes to the other masters go on; nothing acknowledged is lost; after
//!    `SIGCONT` its slots take writes again;
//! 2. a minority master: its cluster bus is cut with `iptables` rules on the loopback interface
//!    (see [`BusPartition`]) while clients still reach it. The majority fails it over to its
//!    replica; the old master keeps a stale view of the slots. Every error is typed, and
//!    nothing it acknowledged is lost, except in the instant of the promotion itself (a write
//!    the master acknowledged before its replica's link closed, that the replica had not
//!    applied when it was promoted: the asynchronous-replication window). The partition heals
//!    and the old master rejoins as a replica.
//!
//! The second test needs `iptables` and root (`.ci/run` installs it); without it, it fails
//! with a message saying so.

use std::sync::Arc;
use std::time::Duration;

use botmesh_redis_core::ClientOptions;
use botmesh_redis_tests::chaos::{
    assert_no_failures, blocking, check_acknowledged_writes, open_loop, owner, promoted, slots_of,
    start_cluster, started_store, BusPartition, Clock, Fault, Kind, Outcome, Recorder, Report,
    Scale, Workload,
};
use botmesh_redis_tests::conformance::{driver_name, Runtime};
use botmesh_redis_tests::{both_drivers, eventually, ClusterOptions};

static TURN: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Cut {
    /// The master's replica is stopped.
    Replica,
    /// The master's cluster bus is cut; clients still reach it.
    Bus,
}

async fn partition<R: Runtime>(cut: Cut) {
    let _turn = TURN.lock().await;
    let scale = Scale::from_env();
    let options = ClusterOptions::new()
        .config("min-replicas-to-write 1")
        .config("min-replicas-max-lag 2");
    let cluster = start_cluster(options).await;
    let request_timeout = Duration::from_secs(10);
    let retry =
        ClientOptions::cluster(cluster.seeds()).cluster_retry(20, Duration::from_millis(10));
    let store = started_store::<R>(retry, request_timeout, "partition").await;
    let clock = Clock::new();
    let recorder = Recorder::new(clock);
    let workload = Workload::new(store, recorder.clone(), 24, request_timeout);
    workload.prepare().await.unwrap();
    let ks = workload.store.keyspace().clone();
    let heartbeat_slot = ks.heartbeat(botmesh_redis_tests::chaos::REPLICA).slot();
    let workload = Arc::new(workload);
    let w = Arc::clone(&workload);
    let load = open_loop(scale, move |n| w.request(n));
    tokio::time::sleep(scale.settle).await;

    // The victim is not the master of the replica's heartbeat: turns everywhere probe it.
    let ranges = blocking(&cluster, |c| c.slots()).await.unwrap();
    let victim = ranges
        .iter()
        .map(|r| r.master)
        .find(|m| *m != owner(&ranges, heartbeat_slot))
        .unwrap();
    let slots = slots_of(&ranges, victim);
    let replica = blocking(&cluster, move |c| c.replicas_of(victim))
        .await
        .unwrap()[0];
    let on_victim = |o: &Outcome| o.slot.is_some_and(|s| slots.contains(&s));

    let at;
    let mut promoted_at = None;
    let healed;
    match cut {
        Cut::Replica => {
            cluster.server(replica).unwrap().pause().unwrap();
            at = clock.now();
            // The master refuses writes once the replica's lag passes min-replicas-max-lag.
            eventually(
                Duration::from_secs(10),
                "the cut-off master to refuse writes with NOREPLICAS",
                || {
                    std::future::ready(
                        recorder
                            .outcomes()
                            .iter()
                            .any(|o| {
                                o.sent >= at && o.kind == Kind::Server && o.detail == "NOREPLICAS"
                            })
                            .then_some(()),
                    )
                },
            )
            .await;
            tokio::time::sleep(scale.settle).await;
            cluster.server(replica).unwrap().resume().unwrap();
            healed = clock.now();
        }
        Cut::Bus => {
            let peers: Vec<u16> = cluster
                .nodes()
                .into_iter()
                .filter(|n| *n != victim)
                .map(|n| cluster.server(n).unwrap().cluster_port().unwrap())
                .collect();
            let bus = cluster.server(victim).unwrap().cluster_port().unwrap();
            let id = cluster.node_id(victim).unwrap();
            let partition = BusPartition::cut(bus, &id, &peers).unwrap();
            at = clock.now();
            promoted_at = Some(promoted(replica, clock, Duration::from_secs(20)).await);
            tokio::time::sleep(scale.settle).await;
            partition.heal().unwrap();
            healed = clock.now();
        }
    }
    blocking(&cluster, |c| c.wait_ok()).await.unwrap();
    let ok_again = clock.now();
    // The master refuses writes until it counts its replica as good again: Redis updates that
    // count on the replica's REPLCONF ACK, sent once a second. Its own count is the only clock
    // that says when refusals end (a write script that happens not to write succeeds earlier).
    let counted = match cut {
        Cut::Replica => {
            eventually(
                Duration::from_secs(15),
                "the victim to count its replica as good again",
                || {
                    let cluster = Arc::clone(&cluster);
                    async move {
                        blocking(&cluster, move |c| good_replicas(c, victim))
                            .await
                            .unwrap()
                            .filter(|n| *n >= 1)
                            .map(|_| clock.now())
                    }
                },
            )
            .await
        }
        Cut::Bus => ok_again,
    };
    // The master takes writes again once its replica acknowledged the stream (Redis counts a
    // replica as good from its first REPLCONF ACK, sent every second).
    eventually(
        Duration::from_secs(15),
        "the victim's slots to take writes again",
        || {
            std::future::ready(
                recorder
                    .first_success(healed, |o| on_victim(o) && o.write)
                    .map(|_| ()),
            )
        },
    )
    .await;
    tokio::time::sleep(scale.settle).await;
    let summary = load.stop().await;
    let outcomes = recorder.outcomes();

    let after = blocking(&cluster, |c| c.slots()).await.unwrap();
    // The only loss a minority master may cause with min-replicas-to-write 1: a write it
    // acknowledged just before its replica, promoted, closed the link.
    let window = Duration::from_millis(200);
    let losses = tokio::task::block_in_place(|| {
        check_acknowledged_writes(&ks, &after, &outcomes, |o| {
            let p = promoted_at?;
            (on_victim(o) && o.ended >= at && o.ended <= p + window).then(|| {
                format!(
                    "acknowledged by the minority master {} ms before its replica was seen promoted",
                    p.as_millis() as i64 - o.ended.as_millis() as i64
                )
            })
        })
    })
    .unwrap();
    let what = match cut {
        Cut::Replica => format!("SIGSTOP of {replica}, the only replica of {victim}"),
        Cut::Bus => format!(
            "cluster bus of {victim} cut with iptables (replica {replica} promoted at {:.3} s)",
            promoted_at.unwrap().as_secs_f64()
        ),
    };
    let faults = [Fault {
        what,
        at,
        healed: Some(healed),
        slots: slots.clone(),
    }];
    let report = Report {
        title: format!(
            "{}, min-replicas-to-write 1, {}",
            match cut {
                Cut::Replica => "master cut off from its replica",
                Cut::Bus => "minority master with a stale view",
            },
            driver_name::<R>()
        ),
        scale,
        load: summary,
        outcomes: &outcomes,
        faults: &faults,
        affected: &on_victim,
        losses: &losses,
    };
    report.print();
    eprintln!("cluster ok again at {:.3} s", ok_again.as_secs_f64());
    if cut == Cut::Replica {
        eprintln!(
            "the victim counted its replica as good again at {:.3} s",
            counted.as_secs_f64()
        );
    }
    if let Some(p) = promoted_at {
        // While the partition lasts, does the client find the promoted replica, or keep asking
        // the minority master?
        let first = recorder.first_success(p, |o| on_victim(o) && o.write && o.sent < healed);
        eprintln!(
            "first acknowledged write on the victim's slots sent after the promotion and before the heal: {}",
            first.map_or("none".into(), |o| format!("{:.3} s after the promotion", (o.ended - p).as_secs_f64()))
        );
    }

    // A master whose replica came back accepts writes again only once the replica's first
    // acknowledgement arrives (up to a second after the link is up): until the master counts
    // it (cut replica) or until its first acknowledged write after the heal (cut bus),
    // refusals are part of the fault.
    let back = recorder.first_success(healed, |o| on_victim(o) && o.write);
    let recovered = match cut {
        Cut::Replica => counted.max(ok_again),
        Cut::Bus => back.as_ref().map_or(ok_again, |o| o.ended.max(ok_again)),
    };
    let mut failures = Vec::new();
    for o in &outcomes {
        let during = o.ended >= at && o.sent <= recovered;
        let fine = match (o.kind, cut) {
            (Kind::Ok, _) => true,
            // Refused before running: the master has no replica in sync.
            (Kind::Server, _) => o.detail == "NOREPLICAS" && o.write && during && on_victim(o),
            // The minority master stops serving (CLUSTERDOWN) and the client's retries run
            // out, or a turn's wait ran out while its chat was refused.
            (Kind::RetriesExhausted | Kind::TimeoutNotRun, Cut::Bus) => during && on_victim(o),
            // A turn whose holder's renewals were refused lost it.
            (Kind::NotHolder, _) => during && on_victim(o),
            // Sent to the minority master as it was demoted: outcome unknown.
            (Kind::ReplyLost | Kind::TimeoutUnknown, Cut::Bus) => during && on_victim(o) && o.write,
            _ => false,
        };
        if !fine {
            failures.push(format!("unexpected outcome: {o:?}"));
        }
    }
    failures.extend(losses.unexplained.iter().map(|l| format!("lost: {l}")));
    let refused = outcomes
        .iter()
        .filter(|o| o.kind == Kind::Server && o.detail == "NOREPLICAS")
        .count();
    eprintln!(
        "NOREPLICAS refusals: {refused}; first acknowledged write on the victim's slots after the heal: {:?}",
        back.map(|o| o.ended - healed)
    );
    if cut == Cut::Replica {
        assert!(refused > 0, "the cut-off master refused writes");
    }
    assert!(
        recorder
            .first_success(ok_again, |o| on_victim(o) && o.write)
            .is_some(),
        "the victim's slots take writes again"
    );
    assert!(losses.checked > 0);
    assert_no_failures(&failures);
    workload.store.executor().close().await;
}

/// The victim's own count of replicas within `min-replicas-max-lag` (`INFO replication`;
/// `None` while the field is missing, as before `min-replicas-to-write` applies).
fn good_replicas(
    cluster: &botmesh_redis_tests::RedisCluster,
    master: std::net::SocketAddr,
) -> Result<Option<u32>, String> {
    let info = cluster.conn(master)?.cmd(&["INFO", "replication"])?;
    let info = botmesh_redis_tests::harness::parse_info(info.as_str().unwrap_or_default());
    Ok(["min_slaves_good_slaves", "min_replicas_good_replicas"]
        .iter()
        .find_map(|field| info.get(*field))
        .and_then(|n| n.parse().ok()))
}

both_drivers!(partition {
    master_cut_off_from_its_replica_refuses_writes_with_noreplicas => Cut::Replica,
    minority_master_acknowledges_nothing_it_does_not_keep => Cut::Bus,
});
