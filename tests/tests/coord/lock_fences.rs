//! Locks and leaderships against real servers, on both drivers, history-checked.
//!
//! Every grant and release is recorded with the test's monotonic clock; the checks then hold
//! the history to what the primitives promise while Redis loses no acknowledged write:
//!
//! - no two holders at once. Each grant has an interval in which it was *certainly* the holder
//!   on the server: from its grant reply to its release request when the release found it still
//!   held (the key was its own from the grant's execution, which came before the reply, to the
//!   release's execution, which came after the request); and for a holder whose TTL ran out
//!   before its release, from its grant reply to its acquire request plus the TTL (the key
//!   expires TTL after the grant ran, which was after the request). Those intervals must not
//!   overlap;
//! - fences (terms) are unique, exactly the numbers 1..=n, and strictly increasing in grant
//!   order: a grant whose request was sent after another grant's reply came has a larger fence.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use botmesh_redis_core::{ConfigError, Error};
use botmesh_redis_core::{Coordinator, Released};
use botmesh_redis_tests::both_drivers;
use botmesh_redis_tests::conformance::{driver_name, Runtime};
use botmesh_redis_tests::coord::{Clock, Target};
use botmesh_redis_tests::counters::Rng;
use botmesh_redis_tests::eventually;

/// One grant of a lock or leadership, as the test saw it.
#[derive(Clone, Debug)]
struct Grant {
    holder: String,
    fence: u64,
    acquire_sent: Duration,
    granted: Duration,
    release_sent: Duration,
    /// Whether the release found the grant still held (its TTL had not run out).
    released: bool,
}

impl Grant {
    /// The interval in which this grant certainly held the key on the server.
    fn certain(&self, ttl: Duration) -> (Duration, Duration) {
        let end = if self.released {
            self.release_sent
        } else {
            self.release_sent.min(self.acquire_sent + ttl)
        };
        (self.granted, end)
    }
}

/// Checks the two history properties; returns how many grants expired before their release.
fn check_history(history: &[Grant], ttl: Duration, n: usize) -> usize {
    assert_eq!(history.len(), n);
    // Fences: exactly 1..=n, each once.
    let mut by_fence = history.to_vec();
    by_fence.sort_by_key(|g| g.fence);
    let fences: Vec<u64> = by_fence.iter().map(|g| g.fence).collect();
    assert_eq!(fences, (1..=n as u64).collect::<Vec<_>>());
    // Strictly increasing in grant order: every grant with a smaller fence had its request
    // sent before this grant's reply came.
    let mut latest_request = Duration::ZERO;
    for g in &by_fence {
        latest_request = latest_request.max(g.acquire_sent);
        assert!(
            latest_request <= g.granted,
            "fence {} was granted (reply at {:?}) before a smaller fence was requested (at {:?})",
            g.fence,
            g.granted,
            latest_request
        );
    }
    // No two certain intervals overlap.
    let mut intervals: Vec<(Duration, Duration, u64, &str)> = history
        .iter()
        .map(|g| {
            let (a, b) = g.certain(ttl);
            (a, b, g.fence, g.holder.as_str())
        })
        .filter(|(a, b, _, _)| a < b)
        .collect();
    intervals.sort();
    for pair in intervals.windows(2) {
        let (a, b) = (&pair[0], &pair[1]);
        assert!(
            b.0 >= a.1,
            "two holders at once: fence {} ({}) held until {:?}, fence {} ({}) from {:?}",
            a.2,
            a.3,
            a.1,
            b.2,
            b.3,
            b.0
        );
    }
    history.iter().filter(|g| !g.released).count()
}

const CONTENDERS: u64 = 16;
const LOCK_OPERATIONS: u64 = 2_000;
const LOCK_TTL: Duration = Duration::from_millis(100);

/// 16 contenders take one lock 2,000 times in total: acquire with a short TTL, hold briefly
/// (sometimes extending), release.
async fn contended_lock<R: Runtime>(target: Target) {
    let clock = Clock::new();
    let ks = target.keyspace("coord-lock");
    let client = target.client::<R>().await;
    let coord = Coordinator::new(client.clone(), ks, "lock-test").unwrap();
    let history = Arc::new(Mutex::new(Vec::new()));
    let busy = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for c in 0..CONTENDERS {
        let (coord, history, busy) = (coord.clone(), history.clone(), busy.clone());
        tasks.push(tokio::spawn(async move {
            let mut rng = Rng::new(c);
            let mut n = 0;
            while n < LOCK_OPERATIONS / CONTENDERS {
                // An owner unique per acquisition, as the docs ask.
                let owner = format!("c{c}#{n}");
                let acquire_sent = clock.now();
                let Some(fence) = coord.lock("the-lock", &owner, LOCK_TTL).await.unwrap() else {
                    busy.fetch_add(1, Ordering::Relaxed);
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    continue;
                };
                let got = clock.now();
                n += 1;
                match rng.below(4) {
                    0 => tokio::task::yield_now().await,
                    1 => {
                        // The holder may extend (unless this task stalled past the TTL).
                        match coord.extend_lock("the-lock", &owner, LOCK_TTL).await {
                            Ok(()) | Err(Error::NotHolder { .. }) => {}
                            Err(e) => panic!("extend: {e}"),
                        }
                        tokio::time::sleep(Duration::from_millis(1)).await;
                    }
                    _ => tokio::time::sleep(Duration::from_millis(1)).await,
                }
                let release_sent = clock.now();
                let released = coord.unlock("the-lock", &owner).await.unwrap() == Released::Held;
                history.lock().unwrap().push(Grant {
                    holder: owner,
                    fence,
                    acquire_sent,
                    granted: got,
                    release_sent,
                    released,
                });
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let history = history.lock().unwrap().clone();
    let n = LOCK_OPERATIONS as usize;
    let expired = check_history(&history, LOCK_TTL, n);
    // A lock released by its holder is free again: the next acquire gets the next fence.
    let next = coord.lock("the-lock", "after", LOCK_TTL).await.unwrap();
    assert_eq!(next, Some(n as u64 + 1));
    // Release and extend only by the holder.
    assert_eq!(
        coord.unlock("the-lock", "someone-else").await.unwrap(),
        Released::Lost
    );
    assert_eq!(
        coord
            .extend_lock("the-lock", "someone-else", LOCK_TTL)
            .await
            .unwrap_err(),
        Error::NotHolder {
            what: "lock \"the-lock\"".into()
        }
    );
    assert_eq!(
        coord.unlock("the-lock", "after").await.unwrap(),
        Released::Held
    );
    let driver = driver_name::<R>();
    eprintln!(
        "{target:?} on {driver}: {n} grants, {} busy answers, {expired} expired before \
         release, {:?}",
        busy.load(Ordering::Relaxed),
        clock.now()
    );
    client.close().await;
}

const CAMPAIGNERS: u64 = 8;
const LEADERSHIPS: u64 = 200;
const LEADER_TTL: Duration = Duration::from_millis(200);

/// 8 campaigners win a leadership 200 times in total; each leader renews it a few times and
/// resigns.
async fn contended_leadership<R: Runtime>(target: Target) {
    let clock = Clock::new();
    let ks = target.keyspace("coord-leader");
    let client = target.client::<R>().await;
    let history = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for c in 0..CAMPAIGNERS {
        let coord = Coordinator::new(client.clone(), ks.clone(), format!("candidate-{c}")).unwrap();
        let history = history.clone();
        tasks.push(tokio::spawn(async move {
            let mut rng = Rng::new(100 + c);
            let mut won = 0;
            while won < LEADERSHIPS / CAMPAIGNERS {
                let sent = clock.now();
                let Some(term) = coord.campaign("scheduler", LEADER_TTL).await.unwrap() else {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    continue;
                };
                let got = clock.now();
                won += 1;
                for _ in 0..rng.below(3) {
                    match coord.renew("scheduler", LEADER_TTL).await {
                        Ok(()) | Err(Error::NotHolder { .. }) => {}
                        Err(e) => panic!("renew: {e}"),
                    }
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
                let release_sent = clock.now();
                let released = coord.resign("scheduler").await.unwrap() == Released::Held;
                history.lock().unwrap().push(Grant {
                    holder: coord.replica().to_owned(),
                    fence: term,
                    acquire_sent: sent,
                    granted: got,
                    release_sent,
                    released,
                });
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let history = history.lock().unwrap().clone();
    let n = LEADERSHIPS as usize;
    // Terms 1..=n, each won once (so at most one leader per term), in grant order, and no two
    // leaders at once.
    let expired = check_history(&history, LEADER_TTL, n);
    // Renew and resign only by the leader.
    let outsider = Coordinator::new(client.clone(), ks.clone(), "outsider").unwrap();
    let leader = Coordinator::new(client.clone(), ks, "last").unwrap();
    let long = Duration::from_secs(10);
    assert_eq!(
        leader.campaign("scheduler", long).await.unwrap(),
        Some(n as u64 + 1)
    );
    // A leader that campaigns again keeps its term.
    assert_eq!(
        leader.campaign("scheduler", long).await.unwrap(),
        Some(n as u64 + 1)
    );
    assert_eq!(
        outsider.campaign("scheduler", LEADER_TTL).await.unwrap(),
        None
    );
    assert!(matches!(
        outsider.renew("scheduler", LEADER_TTL).await,
        Err(Error::NotHolder { .. })
    ));
    assert_eq!(outsider.resign("scheduler").await.unwrap(), Released::Lost);
    assert_eq!(leader.resign("scheduler").await.unwrap(), Released::Held);
    let driver = driver_name::<R>();
    eprintln!(
        "{target:?} on {driver}: {n} leaderships, {expired} expired before resigning, {:?}",
        clock.now()
    );
    client.close().await;
}

/// A fence survives its lock: after the holder's TTL runs out the next holder gets a larger
/// fence, and the expired holder can neither extend nor release.
async fn fence_outlives_expiry<R: Runtime>(target: Target) {
    let ks = target.keyspace("coord-lock-expiry");
    let client = target.client::<R>().await;
    let coord = Coordinator::new(client.clone(), ks, "r").unwrap();
    let ttl = Duration::from_millis(50);
    assert_eq!(coord.lock("k", "a#1", ttl).await.unwrap(), Some(1));
    assert_eq!(coord.lock("k", "b#1", ttl).await.unwrap(), None);
    // The same owner is not re-entrant on a lock.
    assert_eq!(coord.lock("k", "a#1", ttl).await.unwrap(), None);
    let fence = eventually(Duration::from_secs(5), "the lock to expire", || {
        let coord = coord.clone();
        async move {
            coord
                .lock("k", "b#1", Duration::from_secs(5))
                .await
                .unwrap()
        }
    })
    .await;
    assert_eq!(fence, 2);
    assert!(matches!(
        coord.extend_lock("k", "a#1", ttl).await,
        Err(Error::NotHolder { .. })
    ));
    assert_eq!(coord.unlock("k", "a#1").await.unwrap(), Released::Lost);
    assert_eq!(coord.unlock("k", "b#1").await.unwrap(), Released::Held);
    assert_eq!(coord.lock("k", "c#1", ttl).await.unwrap(), Some(3));
    client.close().await;
}

async fn fence_outlives_expiry_all_targets<R: Runtime>() {
    for target in [Target::SingleLegacy, Target::SingleCluster, Target::Cluster] {
        fence_outlives_expiry::<R>(target).await;
    }
}

/// A zero or sub-millisecond TTL is refused before anything is sent: no fence is taken (the
/// first real grant is fence 1) and no lock is held. It used to grant a fence for a 1 ms lock.
async fn zero_ttl_lock_is_refused<R: Runtime>(target: Target) {
    let ks = target.keyspace("coord-lock-zero-ttl");
    let client = target.client::<R>().await;
    let coord = Coordinator::new(client.clone(), ks, "r").unwrap();
    for ttl in [Duration::ZERO, Duration::from_micros(999)] {
        assert_eq!(
            coord.lock("k", "a#1", ttl).await,
            Err(Error::Config(ConfigError::DurationBelowOneMs {
                argument: "ttl",
                given: ttl
            }))
        );
        assert_eq!(
            coord.campaign("leader", ttl).await,
            Err(Error::Config(ConfigError::DurationBelowOneMs {
                argument: "ttl",
                given: ttl
            }))
        );
    }
    let ttl = Duration::from_secs(5);
    assert_eq!(coord.lock("k", "a#1", ttl).await.unwrap(), Some(1));
    assert_eq!(coord.campaign("leader", ttl).await.unwrap(), Some(1));
    client.close().await;
}

async fn zero_ttl_lock_is_refused_all_targets<R: Runtime>() {
    for target in [Target::SingleLegacy, Target::SingleCluster, Target::Cluster] {
        zero_ttl_lock_is_refused::<R>(target).await;
    }
}

/// `with_wait_replicas`: on the cluster (one replica per master) a grant reaches its replica
/// and counts; on the single node (no replica) it is given back and fails with
/// `NotReplicated`, and the lock is free again.
async fn replicated_grants_wait_for_replicas<R: Runtime>() {
    let ttl = Duration::from_secs(5);
    let wait = Duration::from_millis(200);

    let client = Target::Cluster.client::<R>().await;
    let ks = Target::Cluster.keyspace("coord-wait");
    let coord = Coordinator::new(client.clone(), ks.clone(), "r1")
        .unwrap()
        .with_wait_replicas(1, wait);
    assert_eq!(coord.lock("k", "a#1", ttl).await.unwrap(), Some(1));
    assert_eq!(coord.lock("k", "b#1", ttl).await.unwrap(), None);
    assert_eq!(coord.campaign("lead", ttl).await.unwrap(), Some(1));
    let leases = botmesh_redis_core::Leases::new(client.clone(), ks)
        .unwrap()
        .with_wait_replicas(1, wait);
    assert_eq!(leases.acquire("l", "h", ttl).await.unwrap(), Some(1));
    client.close().await;

    for target in [Target::SingleLegacy, Target::SingleCluster] {
        let client = target.client::<R>().await;
        let ks = target.keyspace("coord-wait");
        let coord = Coordinator::new(client.clone(), ks.clone(), "r1")
            .unwrap()
            .with_wait_replicas(1, wait);
        assert_eq!(
            coord.lock("k", "a#1", ttl).await.unwrap_err(),
            Error::NotReplicated {
                what: "lock \"k\"".into(),
                wanted: 1,
                acked: 0
            }
        );
        // Given back: a plain acquire gets the lock, with the next fence (the first was
        // handed out, so it is never handed out again).
        let plain = Coordinator::new(client.clone(), ks.clone(), "r2").unwrap();
        assert_eq!(plain.lock("k", "b#1", ttl).await.unwrap(), Some(2));
        assert!(matches!(
            coord.campaign("lead", ttl).await,
            Err(Error::NotReplicated { .. })
        ));
        assert_eq!(plain.campaign("lead", ttl).await.unwrap(), Some(2));
        let leases = botmesh_redis_core::Leases::new(client.clone(), ks.clone())
            .unwrap()
            .with_wait_replicas(1, wait);
        assert!(matches!(
            leases.acquire("l", "h1", ttl).await,
            Err(Error::NotReplicated { .. })
        ));
        let plain_leases = botmesh_redis_core::Leases::new(client.clone(), ks).unwrap();
        assert_eq!(plain_leases.acquire("l", "h2", ttl).await.unwrap(), Some(2));
        client.close().await;
    }
}

both_drivers!(contended_lock {
    contended_lock_single_node_legacy => Target::SingleLegacy,
    contended_lock_single_node_cluster_layout => Target::SingleCluster,
    contended_lock_cluster => Target::Cluster,
});

both_drivers!(contended_leadership {
    contended_leadership_single_node_legacy => Target::SingleLegacy,
    contended_leadership_single_node_cluster_layout => Target::SingleCluster,
    contended_leadership_cluster => Target::Cluster,
});

both_drivers!(
    fence_outlives_expiry_all_targets,
    zero_ttl_lock_is_refused_all_targets,
    replicated_grants_wait_for_replicas,
);
