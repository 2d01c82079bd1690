//! Failovers under a steady stream of writes from four tasks sharing one client.
//!
//! - A manual `CLUSTER FAILOVER` loses nothing: every acknowledged write is readable
//!   afterwards and every acknowledged `INCR` counted exactly once (script calls included: the
//!   promoted replica has no script cache, so they go through `NOSCRIPT`). The one error a
//!   caller may see is `ReplyLost` for a write the old master answered but the client read only
//!   after it learned of the new master (rare: the outcome is unknown, since a replaced master
//!   may discard what it answered); such a write counts at most once.
//! - `kill -9` of a master: only writes sent to it as it died may fail, and only as "outcome
//!   unknown"; calls to its slots succeed again once its replica is promoted; every
//!   write acknowledged by the surviving masters, or by the promoted one, is readable. (Writes
//!   the killed master acknowledged may be lost: asynchronous replication, `docs/reliability.md`.)

use std::any::TypeId;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use botmesh_redis_core::driver::store::messages;
use botmesh_redis_core::{Access, ClientOptions, Error, Executor, Key, Keyspace, Layout, Request};
use botmesh_redis_tests::conformance::{driver_name, Client, Runtime};
use botmesh_redis_tests::counters::{errorstat, owner};
use botmesh_redis_tests::{
    both_drivers, eventually, unique_prefix, ClusterOptions, RedisCluster, SlotRange, Value,
};
use bytes::Bytes;

const WRITERS: usize = 4;
const COUNTERS: usize = 8;

/// Failovers change the topology: this file owns its clusters, one per driver (a second
/// manual failover on the same shard would promote a node that was a master before, with its
/// script cache, and a second kill would find no replica left). Its tests take turns, so that
/// only one cluster is under load at a time, and work on different shards (the masters of
/// slots 0 and 16383).
fn cluster<R: Runtime>() -> &'static RedisCluster {
    static CLUSTERS: Mutex<BTreeMap<TypeId, &'static RedisCluster>> = Mutex::new(BTreeMap::new());
    let mut clusters = CLUSTERS.lock().unwrap();
    clusters
        .entry(TypeId::of::<R>())
        .or_insert_with(|| Box::leak(Box::new(RedisCluster::start(ClusterOptions::new()))))
}
static TURN: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// What one writer did.
#[derive(Debug, Default)]
struct Report {
    /// Acknowledged `SET key value`, with the time of the acknowledgement.
    sets: Vec<(Key, String, Instant)>,
    /// Acknowledged `INCR`s per counter.
    incrs: BTreeMap<Key, i64>,
    /// Acknowledged new messages per chat.
    saves: BTreeMap<String, i64>,
    /// Failed calls: what, the error, when.
    errors: Vec<(String, Error, Instant)>,
}

struct Load {
    stop: Arc<AtomicBool>,
    progress: Vec<Arc<AtomicU64>>,
    writers: Vec<tokio::task::JoinHandle<Report>>,
}

impl Load {
    /// Starts the writers. Each loops: `SET` a new key; with `scripts`, also `INCR` one of its
    /// counters and save a new message (a script call).
    fn start<R: Runtime>(client: &Client<R>, prefix: &str, scripts: bool) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let mut progress = Vec::new();
        let mut writers = Vec::new();
        for w in 0..WRITERS {
            let done = Arc::new(AtomicU64::new(0));
            progress.push(Arc::clone(&done));
            let (client, stop) = (client.clone(), Arc::clone(&stop));
            let prefix = format!("{prefix}:w{w}");
            writers.push(tokio::spawn(async move {
                let ks = Keyspace::new(Layout::Cluster, prefix.as_str()).unwrap();
                let mut report = Report::default();
                let mut i = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let key = Key::new(format!("{prefix}:{i}"));
                    let set = Request::cmd(Access::Write, "SET")
                        .key(&key)
                        .arg(i)
                        .build()
                        .unwrap();
                    match client.call(set).await {
                        Ok(_) => report.sets.push((key, i.to_string(), Instant::now())),
                        Err(e) => report
                            .errors
                            .push((format!("SET {key}"), e, Instant::now())),
                    }
                    if scripts {
                        let counter = Key::new(format!("{prefix}:c{}", i % COUNTERS as u64));
                        let incr = Request::cmd(Access::Write, "INCR")
                            .key(&counter)
                            .build()
                            .unwrap();
                        match client.call(incr).await {
                            Ok(_) => *report.incrs.entry(counter).or_default() += 1,
                            Err(e) => {
                                report
                                    .errors
                                    .push((format!("INCR {counter}"), e, Instant::now()))
                            }
                        }
                        let chat = format!("{prefix}-chat{}", i % COUNTERS as u64);
                        let id = i.to_string();
                        let payload = Bytes::from(id.clone());
                        let save =
                            messages::save_message(&ks, &chat, &id, i as i64, payload).unwrap();
                        match client.run(save).await {
                            Ok(true) => *report.saves.entry(chat).or_default() += 1,
                            Ok(false) => panic!("message {id} of {chat} was not new"),
                            Err(e) => {
                                report
                                    .errors
                                    .push((format!("save {chat}/{id}"), e, Instant::now()))
                            }
                        }
                    }
                    done.fetch_add(1, Ordering::Relaxed);
                    i += 1;
                }
                report
            }));
        }
        Load {
            stop,
            progress,
            writers,
        }
    }

    fn progress(&self) -> Vec<u64> {
        self.progress
            .iter()
            .map(|p| p.load(Ordering::Relaxed))
            .collect()
    }

    /// Waits until every writer has done `more` iterations beyond `from`.
    async fn advance(&self, from: &[u64], more: u64) {
        eventually(
            Duration::from_secs(30),
            "every writer to make progress",
            || {
                let now = self.progress();
                std::future::ready(
                    now.iter()
                        .zip(from)
                        .all(|(n, f)| *n >= f + more)
                        .then_some(()),
                )
            },
        )
        .await;
    }

    async fn stop(self) -> Vec<Report> {
        self.stop.store(true, Ordering::Relaxed);
        let mut reports = Vec::new();
        for writer in self.writers {
            reports.push(writer.await.unwrap());
        }
        reports
    }
}

/// How many acknowledged `SET`s came after `t`.
fn load_after(reports: &[Report], t: Instant) -> usize {
    reports
        .iter()
        .flat_map(|r| &r.sets)
        .filter(|(_, _, at)| *at > t)
        .count()
}

/// The value of each key, read with admin connections straight from the owner of its slot.
fn read_all(cluster: &RedisCluster, ranges: &[SlotRange], keys: &[&Key]) -> BTreeMap<Key, Value> {
    let mut by_owner: BTreeMap<SocketAddr, Vec<&Key>> = BTreeMap::new();
    for &key in keys {
        by_owner
            .entry(owner(ranges, key.slot()))
            .or_default()
            .push(key);
    }
    let mut values = BTreeMap::new();
    for (master, keys) in by_owner {
        let mut conn = cluster.conn(master).unwrap();
        for chunk in keys.chunks(1000) {
            let commands: Vec<[&[u8]; 2]> =
                chunk.iter().map(|k| [&b"GET"[..], k.as_bytes()]).collect();
            for (key, value) in chunk.iter().zip(conn.pipeline(&commands).unwrap()) {
                values.insert((*key).clone(), value);
            }
        }
    }
    values
}

async fn manual_failover_under_load_loses_no_acknowledged_write<R: Runtime>() {
    let _turn = TURN.lock().await;
    let cluster = tokio::task::spawn_blocking(cluster::<R>).await.unwrap();
    // Default retry settings: a manual failover must fit in them.
    let client = Client::<R>::connect(ClientOptions::cluster(cluster.seeds()))
        .await
        .unwrap();
    let prefix = unique_prefix("failover");
    let old = cluster.master_for_slot(0).unwrap();
    let replica = cluster.replicas_of(old).unwrap()[0];
    let noscript_before = errorstat(&mut cluster.conn(replica).unwrap(), "NOSCRIPT");

    let load = Load::start(&client, &prefix, true);
    load.advance(&[0; WRITERS], 30).await;
    let new = tokio::task::spawn_blocking(move || cluster.failover(old))
        .await
        .unwrap()
        .unwrap();
    let failed_over = Instant::now();
    let at_failover = load.progress();
    load.advance(&at_failover, 30).await;
    let reports = load.stop().await;

    // The one error a manual failover may give: a write the old master answered before it
    // stepped down, whose reply the client read only after its map named the new master. A
    // replaced master's late answer may be discarded (a master cut off answers, then
    // resynchronises), and the client cannot tell the two apart: the outcome is unknown.
    // Never a write answered by the promoted master, nor any other error.
    let mut unknown: BTreeMap<String, i64> = BTreeMap::new();
    for (what, error, _) in reports.iter().flat_map(|r| &r.errors) {
        assert!(
            matches!(error, Error::ReplyLost { addr, reason }
                if addr.to_string() == old.to_string()
                    && reason.contains("answered after the map named")),
            "a manual failover gives no other error: {what}: {error:?}"
        );
        *unknown.entry(what.clone()).or_default() += 1;
    }
    eprintln!(
        "{}, manual failover: {} acknowledged writes, {} of unknown outcome",
        driver_name::<R>(),
        reports.iter().map(|r| r.sets.len()).sum::<usize>(),
        unknown.values().sum::<i64>(),
    );

    let ranges = cluster.slots().unwrap();
    assert_eq!((owner(&ranges, 0), new), (replica, replica));
    assert!(
        errorstat(&mut cluster.conn(new).unwrap(), "NOSCRIPT") > noscript_before,
        "the promoted replica had no script cache: script calls went through NOSCRIPT"
    );
    let sets: Vec<_> = reports.iter().flat_map(|r| &r.sets).collect();
    let served_by_new = sets
        .iter()
        .filter(|(k, _, at)| *at > failed_over && owner(&ranges, k.slot()) == new)
        .count();
    assert!(served_by_new > 0, "the load reached the promoted master");
    let keys: Vec<&Key> = sets.iter().map(|(k, _, _)| k).collect();
    let stored = read_all(cluster, &ranges, &keys);
    for (key, value, _) in &sets {
        assert_eq!(stored[key].as_str(), Some(value.as_str()), "{key}");
    }
    let counters: Vec<(&Key, i64)> = reports
        .iter()
        .flat_map(|r| r.incrs.iter().map(|(k, n)| (k, *n)))
        .collect();
    let stored = read_all(
        cluster,
        &ranges,
        &counters.iter().map(|(k, _)| *k).collect::<Vec<_>>(),
    );
    for (key, acked) in counters {
        // An INCR of unknown outcome ran once or not at all.
        let maybe = unknown.get(&format!("INCR {key}")).copied().unwrap_or(0);
        let count = stored[key].as_int().unwrap_or(-1);
        assert!(
            (acked..=acked + maybe).contains(&count),
            "every INCR of {key} counted once: {count} stored, {acked} acknowledged, {maybe} unknown"
        );
    }
    for (w, report) in reports.iter().enumerate() {
        let ks = Keyspace::new(Layout::Cluster, format!("{prefix}:w{w}")).unwrap();
        for (chat, acked) in &report.saves {
            let log = ks.message_log(chat);
            let mut conn = cluster.conn(owner(&ranges, log.slot())).unwrap();
            let count = conn.cmd(&[&b"ZCARD"[..], log.as_bytes()]).unwrap();
            let count = count.as_int().unwrap_or(-1);
            let maybe = unknown
                .iter()
                .filter(|(what, _)| what.starts_with(&format!("save {chat}/")))
                .map(|(_, n)| n)
                .sum::<i64>();
            assert!(
                (*acked..=acked + maybe).contains(&count),
                "messages of {chat}: {count} stored, {acked} acknowledged, {maybe} unknown"
            );
        }
    }
    client.close().await;
}

async fn killed_master_slots_serve_again_once_its_replica_is_promoted<R: Runtime>() {
    let _turn = TURN.lock().await;
    let cluster = tokio::task::spawn_blocking(cluster::<R>).await.unwrap();
    // After kill -9 every node answers CLUSTERDOWN for about a second and the replica is
    // promoted after 2-3 s, during which calls to the dead master's slots cannot connect.
    // They must wait that out instead of failing: 40 attempts from 10 ms, capped at 500 ms,
    // are about 17.6 s of backoff, and the request deadline is raised above that.
    let options = ClientOptions::cluster(cluster.seeds())
        .cluster_retry(40, Duration::from_millis(10))
        .request_timeout(Duration::from_secs(30));
    let client = Client::<R>::connect(options).await.unwrap();
    let prefix = unique_prefix("kill");
    let victim = cluster.master_for_slot(16383).unwrap();

    let load = Load::start(&client, &prefix, false);
    load.advance(&[0; WRITERS], 30).await;
    let promoted = tokio::task::spawn_blocking(move || cluster.kill_master(victim))
        .await
        .unwrap()
        .unwrap();
    let promoted_at = Instant::now();
    let at_promotion = load.progress();
    load.advance(&at_promotion, 60).await;
    let reports = load.stop().await;

    eprintln!(
        "{}, kill -9: {} acknowledged writes, {} after the promotion, errors: {:?}",
        driver_name::<R>(),
        reports.iter().map(|r| r.sets.len()).sum::<usize>(),
        load_after(&reports, promoted_at),
        reports.iter().flat_map(|r| &r.errors).collect::<Vec<_>>(),
    );
    // Only writes sent to the dying master may fail, as "outcome unknown". Usually that is the
    // one write each writer had in flight, but a killed redis-server can still complete TCP
    // handshakes for a millisecond or so after it reset its connections, so a writer may lose
    // another write on such a connection; both are the same case for a caller.
    for (what, error, at) in reports.iter().flat_map(|r| &r.errors) {
        assert!(
            matches!(error, Error::ReplyLost { addr, .. } if addr.to_string() == victim.to_string()),
            "{what}: {error:?}"
        );
        assert!(error.outcome_unknown());
        assert!(
            *at < promoted_at,
            "{what} failed after the promotion: {error:?}"
        );
    }

    let ranges = cluster.slots().unwrap();
    assert_eq!(owner(&ranges, 16383), promoted);
    let sets: Vec<_> = reports.iter().flat_map(|r| &r.sets).collect();
    // What must be readable: everything the other masters acknowledged, and everything
    // acknowledged in the dead master's slots once its replica had taken over.
    let must_survive: Vec<&(Key, String, Instant)> = sets
        .iter()
        .copied()
        .filter(|(k, _, at)| owner(&ranges, k.slot()) != promoted || *at > promoted_at)
        .collect();
    let after_promotion = must_survive
        .iter()
        .filter(|(k, _, _)| owner(&ranges, k.slot()) == promoted)
        .count();
    assert!(
        after_promotion > 0,
        "calls to the dead master's slots succeeded again"
    );
    let keys: Vec<&Key> = must_survive.iter().map(|(k, _, _)| k).collect();
    let stored = read_all(cluster, &ranges, &keys);
    for (key, value, _) in must_survive {
        assert_eq!(stored[key].as_str(), Some(value.as_str()), "{key}");
    }
    client.close().await;
}

both_drivers!(
    manual_failover_under_load_loses_no_acknowledged_write,
    killed_master_slots_serve_again_once_its_replica_is_promoted,
);
