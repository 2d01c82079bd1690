//! The durable outbox and inbound journal against real servers, on both drivers.
//!
//! 4 instances drain 10,000 enqueued sends; one is killed mid-way (its task aborted while it
//! holds claims, after it made some of those sends). The test keeps two ledgers: every send an
//! instance makes, and every ack the outbox accepted. Each key must be acked exactly once; a
//! key is sent more than once only when its first sender never got its ack in (the killed
//! instance's sends, or a claim that lapsed), and the test accounts for each such duplicate.
//!
//! Durability tables are `{durable:<table>}` in both layouts, so the suite runs once on the
//! single node and once on the cluster (for each driver).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use futures_util::future::join_all;

use botmesh_redis_core::Error;
use botmesh_redis_core::{Acked, Begun};
use botmesh_redis_core::{Durability, Limit};
use botmesh_redis_tests::both_drivers;
use botmesh_redis_tests::conformance::{driver_name, Client, Runtime};
use botmesh_redis_tests::coord::{Clock, Target};

const SENDS: u64 = 10_000;
const INSTANCES: usize = 4;
const BATCH: Limit = Limit::of::<25>();
const VISIBILITY: Duration = Duration::from_millis(1000);
const WINDOW: Duration = Duration::from_secs(600);
/// The killed instance stops after acking this many sends.
const KILL_AFTER: u64 = 1_000;

#[derive(Default)]
struct Ledgers {
    /// Sends made, per key.
    sends: BTreeMap<String, u32>,
    /// Acks the outbox accepted, per key.
    acks: BTreeMap<String, u32>,
    /// Keys whose ack was refused (the claim had lapsed and gone back to the queue).
    refused: BTreeSet<String>,
}

async fn outbox_acks_every_send_once<R: Runtime>(target: Target) {
    let clock = Clock::new();
    let client = target.client::<R>().await;
    let outbox = Durability::new(client.clone(), target.keyspace("coord-outbox"), "out").unwrap();

    // Enqueue, 8 writers in parallel; each key is new.
    let enqueued = join_all((0..8).map(|w| {
        let outbox = outbox.clone();
        async move {
            let mut fresh = 0;
            for i in (w..SENDS).step_by(8) {
                let payload = Bytes::from(format!("payload {i}"));
                fresh += u64::from(
                    outbox
                        .enqueue(&format!("send-{i}"), payload, WINDOW)
                        .await
                        .unwrap(),
                );
            }
            fresh
        }
    }))
    .await;
    assert_eq!(enqueued.iter().sum::<u64>(), SENDS);
    // Enqueue is idempotent by key.
    assert!(!outbox
        .enqueue("send-0", Bytes::from_static(b"again"), WINDOW)
        .await
        .unwrap());

    let ledgers = Arc::new(Mutex::new(Ledgers::default()));
    let acked = Arc::new(AtomicU64::new(0));
    let (killed_tx, killed_rx) = tokio::sync::oneshot::channel::<Vec<String>>();
    let mut killed_tx = Some(killed_tx);
    let mut tasks = Vec::new();
    let mut doomed = None;
    for i in 0..INSTANCES {
        let instance = format!("instance-{i}");
        let is_doomed = i == INSTANCES - 1;
        let (outbox, ledgers, acked) = (outbox.clone(), ledgers.clone(), acked.clone());
        let killed_tx = if is_doomed { killed_tx.take() } else { None };
        let task = tokio::spawn(async move {
            let mut mine = 0;
            let mut killed_tx = killed_tx;
            loop {
                let claimed = outbox.claim(&instance, BATCH, VISIBILITY).await.unwrap();
                if claimed.is_empty() {
                    if acked.load(Ordering::SeqCst) == SENDS {
                        return;
                    }
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
                if mine >= KILL_AFTER {
                    if let Some(tx) = killed_tx.take() {
                        // Send half the batch, then hang holding every claim of it, until the
                        // test aborts this task.
                        let half: Vec<String> = claimed[..claimed.len() / 2]
                            .iter()
                            .map(|c| c.key.clone())
                            .collect();
                        {
                            let mut l = ledgers.lock().unwrap();
                            for key in &half {
                                *l.sends.entry(key.clone()).or_default() += 1;
                            }
                        }
                        let _ = tx.send(half);
                        std::future::pending::<()>().await;
                    }
                }
                {
                    let mut l = ledgers.lock().unwrap();
                    for c in &claimed {
                        assert_eq!(c.payload, Bytes::from(format!("payload {}", &c.key[5..])));
                        *l.sends.entry(c.key.clone()).or_default() += 1;
                    }
                }
                let results = join_all(claimed.iter().map(|c| outbox.ack(&c.key, &instance))).await;
                let mut l = ledgers.lock().unwrap();
                for (c, result) in claimed.iter().zip(results) {
                    match result {
                        Ok(Acked::Now) => {
                            *l.acks.entry(c.key.clone()).or_default() += 1;
                            acked.fetch_add(1, Ordering::SeqCst);
                            mine += 1;
                        }
                        Err(Error::NotHolder { .. }) => {
                            l.refused.insert(c.key.clone());
                        }
                        // Each key is acked once per claim here: "already" would be a second
                        // ack of one claim.
                        Ok(Acked::Already) => panic!("{} acked twice by {instance}", c.key),
                        Err(e) => panic!("ack: {e}"),
                    }
                }
            }
        });
        if is_doomed {
            doomed = Some(task);
        } else {
            tasks.push(task);
        }
    }
    // Kill the doomed instance while it holds claims.
    let unacked = killed_rx.await.unwrap();
    let doomed = doomed.unwrap();
    doomed.abort();
    assert!(doomed.await.unwrap_err().is_cancelled());
    let killed_at = clock.now();
    for task in tasks {
        task.await.unwrap();
    }

    let l = std::mem::take(&mut *ledgers.lock().unwrap());
    let keys: BTreeSet<String> = (0..SENDS).map(|i| format!("send-{i}")).collect();
    // Every send acked exactly once.
    assert_eq!(l.acks.keys().cloned().collect::<BTreeSet<_>>(), keys);
    assert!(l.acks.values().all(|&n| n == 1), "a key acked twice");
    assert_eq!(acked.load(Ordering::SeqCst), SENDS);
    // Every key sent; sent twice exactly when its first sender's ack never got in.
    assert_eq!(l.sends.keys().cloned().collect::<BTreeSet<_>>(), keys);
    let duplicates: BTreeSet<String> = l
        .sends
        .iter()
        .filter(|(_, &n)| n > 1)
        .map(|(k, _)| k.clone())
        .collect();
    let expected: BTreeSet<String> = unacked
        .iter()
        .cloned()
        .chain(l.refused.iter().cloned())
        .collect();
    assert_eq!(duplicates, expected);
    assert!(l.sends.values().all(|&n| n <= 2));
    assert_eq!(unacked.len(), BATCH.get() as usize / 2);
    let driver = driver_name::<R>();
    eprintln!(
        "{target:?} on {driver}: {SENDS} sends acked once each; {} duplicate sends ({} by the \
         killed instance, {} after a lapsed claim); recovered {:?} after the kill; {:?} in all",
        duplicates.len(),
        unacked.len(),
        l.refused.len(),
        clock.now() - killed_at,
        clock.now()
    );
    // Acked keys stay deduplicated within the window.
    assert!(!outbox
        .enqueue("send-1", Bytes::new(), WINDOW)
        .await
        .unwrap());
    client.close().await;
}

/// `recover` puts a stopped instance's claims back at once; its late acks are refused.
async fn recover_requeues_claims_of_a_stopped_instance<R: Runtime>(
    client: Client<R>,
    target: Target,
) {
    let outbox = Durability::new(client, target.keyspace("coord-recover"), "out").unwrap();
    for i in 0..3 {
        assert!(outbox
            .enqueue(&format!("k{i}"), Bytes::from(format!("p{i}")), WINDOW)
            .await
            .unwrap());
    }
    let claimed = outbox
        .claim("x", Limit::of::<10>(), Duration::from_secs(60))
        .await
        .unwrap();
    assert_eq!(claimed.len(), 3);
    assert!(outbox
        .claim("y", Limit::of::<10>(), Duration::from_secs(60))
        .await
        .unwrap()
        .is_empty());
    assert_eq!(outbox.recover("x").await.unwrap(), 3);
    let again = outbox
        .claim("y", Limit::of::<10>(), Duration::from_secs(60))
        .await
        .unwrap();
    let mut keys: Vec<String> = again.iter().map(|c| c.key.clone()).collect();
    keys.sort();
    assert_eq!(keys, ["k0", "k1", "k2"]);
    assert!(matches!(
        outbox.ack("k0", "x").await,
        Err(Error::NotHolder { .. })
    ));
    assert_eq!(outbox.ack("k0", "y").await.unwrap(), Acked::Now);
    assert_eq!(outbox.recover("x").await.unwrap(), 0);
}

/// The inbound journal processes each id once within its window; a forgotten id (failed
/// processing) is processed again.
async fn journal_deduplicates_inbound<R: Runtime>(client: Client<R>, target: Target) {
    let journal = Durability::new(client, target.keyspace("coord-journal"), "in").unwrap();
    let window = Duration::from_secs(60);
    assert_eq!(
        journal.begin("m:1", "a", window).await.unwrap(),
        Begun::First
    );
    assert_eq!(
        journal.begin("m:1", "b", window).await.unwrap(),
        Begun::Duplicate
    );
    // Only the instance that began it forgets it.
    assert!(!journal.forget("m:1", "b").await.unwrap());
    assert!(journal.forget("m:1", "a").await.unwrap());
    assert!(!journal.forget("m:1", "a").await.unwrap());
    assert_eq!(
        journal.begin("m:1", "b", window).await.unwrap(),
        Begun::First
    );
    // 50 concurrent deliveries of one id to 50 instances: exactly one is processed.
    let instances: Vec<String> = (0..50).map(|n| format!("i{n}")).collect();
    let results = join_all(instances.iter().map(|i| journal.begin("m:2", i, window))).await;
    let results: Vec<Begun> = results.into_iter().map(Result::unwrap).collect();
    assert_eq!(results.iter().filter(|b| **b == Begun::First).count(), 1);
    assert_eq!(
        results.iter().filter(|b| **b == Begun::Duplicate).count(),
        49
    );
}

async fn outbox_recover_and_journal_all_targets<R: Runtime>() {
    for target in [Target::SingleLegacy, Target::SingleCluster, Target::Cluster] {
        let client = target.client::<R>().await;
        recover_requeues_claims_of_a_stopped_instance::<R>(client.clone(), target).await;
        journal_deduplicates_inbound::<R>(client.clone(), target).await;
        client.close().await;
    }
}

both_drivers!(outbox_acks_every_send_once {
    outbox_acks_every_send_once_single_node => Target::SingleLegacy,
    outbox_acks_every_send_once_cluster => Target::Cluster,
});

both_drivers!(outbox_recover_and_journal_all_targets,);
