//! Per-chat turns and replica heartbeats against real servers, on both drivers, history-checked.
//!
//! - 8 replicas (8 coordinators with their own clients and heartbeats) take turns on 50 chats:
//!   never two holders of a chat at once (an in-memory holder count per chat, plus the fenced
//!   `extend_turn` before each release), and tickets are served in ticket order: every ticket
//!   taken is either granted, after the previous grant of its chat was released, or skipped
//!   with a logged `TurnEvent`.
//! - A replica that stops (its tasks dropped, its heartbeat expiring) loses its turn within the
//!   heartbeat TTL plus one poll interval (plus round trips), and the next waiter gets it.
//! - A holder that sleeps past its owner TTL loses its turn and learns it from `extend_turn`.
//! - `live_replicas` lists exactly the live heartbeats, on a single node and on every master
//!   of a cluster.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use botmesh_redis_core::keys::slot;
use botmesh_redis_core::Error;
use botmesh_redis_core::{Coordinator, Released};
use botmesh_redis_core::{SkipReason, TurnEvent, TurnOptions};
use botmesh_redis_tests::conformance::{driver_name, Client, Runtime};
use botmesh_redis_tests::coord::{start_heartbeat, Clock, Target};
use botmesh_redis_tests::counters::Rng;
use botmesh_redis_tests::{both_drivers, eventually, parse_cluster_slots, shared_cluster};

/// One held turn, as the test saw it.
#[derive(Clone, Debug)]
struct Held {
    chat: usize,
    ticket: u64,
    acquire_sent: Duration,
    granted: Duration,
    release_sent: Duration,
    events: Vec<TurnEvent>,
}

const REPLICAS: usize = 8;
const WORKERS_PER_REPLICA: usize = 3;
const TURNS_PER_WORKER: usize = 40;
const CHATS: usize = 50;
const HEARTBEAT_TTL: Duration = Duration::from_secs(2);
const HEARTBEAT_EVERY: Duration = Duration::from_millis(200);

fn turn_options() -> TurnOptions {
    TurnOptions {
        ttl: Duration::from_secs(5),
        poll_interval: Duration::from_millis(10),
        claim_timeout: Duration::from_secs(3),
        wait_timeout: Duration::from_secs(60),
        idle_lifetime: Duration::from_secs(120),
    }
}

async fn replica<R: Runtime>(
    target: Target,
    ks: &botmesh_redis_core::Keyspace,
    id: &str,
) -> Coordinator<Client<R>> {
    Coordinator::new(target.client::<R>().await, ks.clone(), id)
        .unwrap()
        .with_turn_options(turn_options())
}

async fn turns_exclude_and_serve_in_order<R: Runtime>(target: Target) {
    let clock = Clock::new();
    let ks = target.keyspace("coord-turns");
    let holders: Arc<Vec<AtomicUsize>> =
        Arc::new((0..CHATS).map(|_| AtomicUsize::new(0)).collect());
    let history = Arc::new(Mutex::new(Vec::<Held>::new()));
    let mut heartbeats = Vec::new();
    let mut tasks = Vec::new();
    for r in 0..REPLICAS {
        let coord = replica::<R>(target, &ks, &format!("replica-{r}")).await;
        heartbeats
            .push(start_heartbeat(coord.clone(), HEARTBEAT_TTL, HEARTBEAT_EVERY, clock).await);
        for w in 0..WORKERS_PER_REPLICA {
            let (coord, holders, history) = (coord.clone(), holders.clone(), history.clone());
            tasks.push(tokio::spawn(async move {
                let mut rng = Rng::new((r * 100 + w) as u64);
                for _ in 0..TURNS_PER_WORKER {
                    // Half the turns go to five hot chats, so queues form.
                    let chat = if rng.below(2) == 0 {
                        rng.below(5)
                    } else {
                        rng.below(CHATS)
                    };
                    let acquire_sent = clock.now();
                    let grant = coord.acquire_turn(&format!("chat-{chat}")).await.unwrap();
                    let granted = clock.now();
                    let before = holders[chat].fetch_add(1, Ordering::SeqCst);
                    assert_eq!(before, 0, "two holders of chat {chat}");
                    if rng.below(2) == 0 {
                        tokio::time::sleep(Duration::from_millis(1 + rng.below(3) as u64)).await;
                    } else {
                        tokio::task::yield_now().await;
                    }
                    // The fenced check before acting on the chat.
                    coord.extend_turn(&grant.guard).await.unwrap();
                    assert_eq!(holders[chat].fetch_sub(1, Ordering::SeqCst), 1);
                    let release_sent = clock.now();
                    coord.release_turn(&grant.guard).await.unwrap();
                    history.lock().unwrap().push(Held {
                        chat,
                        ticket: grant.guard.ticket,
                        acquire_sent,
                        granted,
                        release_sent,
                        events: grant.events,
                    });
                }
            }));
        }
    }
    for task in tasks {
        task.await.unwrap();
    }
    for hb in &heartbeats {
        hb.task.abort();
    }
    let history = history.lock().unwrap().clone();
    assert_eq!(
        history.len(),
        REPLICAS * WORKERS_PER_REPLICA * TURNS_PER_WORKER
    );

    let mut skips = 0;
    let mut waits = 0;
    for chat in 0..CHATS {
        let mut held: Vec<&Held> = history.iter().filter(|h| h.chat == chat).collect();
        held.sort_by_key(|h| h.ticket);
        // Served in ticket order, one at a time: each grant came after the release of the
        // grant with the previous ticket.
        for pair in held.windows(2) {
            assert!(
                pair[1].granted >= pair[0].release_sent,
                "chat {chat}: ticket {} granted at {:?}, before ticket {} was released at {:?}",
                pair[1].ticket,
                pair[1].granted,
                pair[0].ticket,
                pair[0].release_sent
            );
            if pair[1].acquire_sent < pair[0].release_sent {
                // It queued behind the previous holder.
                waits += 1;
            }
        }
        // Every ticket taken is granted or skipped with a logged event, never both, and the
        // tickets taken are n consecutive numbers (the chat's counter only counts takes; it
        // starts at the server's time in ms x 1000, and the queue never idled long enough to
        // restart).
        let granted: BTreeSet<u64> = held.iter().map(|h| h.ticket).collect();
        let mut taken = BTreeSet::new();
        let mut skipped = BTreeSet::new();
        let mut lost = BTreeSet::new();
        for h in history.iter().filter(|h| h.chat == chat) {
            for event in &h.events {
                match event {
                    TurnEvent::Took(t) => {
                        assert!(taken.insert(*t), "chat {chat}: ticket {t} taken twice")
                    }
                    TurnEvent::Skipped { ticket, .. } => {
                        assert!(
                            skipped.insert(*ticket),
                            "chat {chat}: ticket {ticket} skipped twice"
                        )
                    }
                    TurnEvent::Retook { lost: t } => {
                        lost.insert(*t);
                    }
                }
            }
        }
        assert_eq!(
            granted.len(),
            held.len(),
            "chat {chat}: a ticket granted twice"
        );
        assert!(
            granted.is_disjoint(&skipped),
            "chat {chat}: a granted ticket was skipped"
        );
        assert!(
            lost.is_subset(&skipped),
            "chat {chat}: a lost ticket nobody skipped"
        );
        let served: BTreeSet<u64> = granted.union(&skipped).copied().collect();
        assert_eq!(taken, served, "chat {chat}");
        let first = taken.first().copied().unwrap_or(0);
        assert_eq!(
            taken,
            (first..first + taken.len() as u64).collect::<BTreeSet<_>>(),
            "chat {chat}"
        );
        skips += skipped.len();
    }
    let driver = driver_name::<R>();
    eprintln!(
        "{target:?} on {driver}: {} turns on {CHATS} chats, {waits} queued behind a holder, \
         {skips} skipped (logged), {:?}",
        history.len(),
        clock.now()
    );
}

const STOP_HEARTBEAT_TTL: Duration = Duration::from_millis(800);
const STOP_POLL: Duration = Duration::from_millis(50);
/// Round trips of the last poll, probe, skip and granting poll, and scheduling on a busy
/// 2-core machine.
const RTT_SLACK: Duration = Duration::from_millis(500);

/// Replica A holds a chat's turn (owner TTL 30 s) and stops: its tasks are dropped, so its
/// heartbeat expires. B (next in line) and C wait. B gets the turn within the heartbeat TTL plus
/// one poll interval after A's last heartbeat, not before the heartbeat expired, and logs the
/// skip; C still waits for B.
async fn stopped_replica_loses_its_turn<R: Runtime>(target: Target) {
    let clock = Clock::new();
    let ks = target.keyspace("coord-stop");
    let options = TurnOptions {
        ttl: Duration::from_secs(30),
        poll_interval: STOP_POLL,
        ..TurnOptions::default()
    };
    let a = Coordinator::new(target.client::<R>().await, ks.clone(), "replica-a")
        .unwrap()
        .with_turn_options(options);
    let b = Coordinator::new(target.client::<R>().await, ks.clone(), "replica-b")
        .unwrap()
        .with_turn_options(options);
    let c = Coordinator::new(target.client::<R>().await, ks.clone(), "replica-c")
        .unwrap()
        .with_turn_options(options);
    let a_beat = start_heartbeat(
        a.clone(),
        STOP_HEARTBEAT_TTL,
        Duration::from_millis(100),
        clock,
    )
    .await;
    let b_beat = start_heartbeat(
        b.clone(),
        STOP_HEARTBEAT_TTL,
        Duration::from_millis(100),
        clock,
    )
    .await;
    let c_beat = start_heartbeat(
        c.clone(),
        STOP_HEARTBEAT_TTL,
        Duration::from_millis(100),
        clock,
    )
    .await;

    // A takes the turn and keeps working on the chat in a task.
    let a_grant = a.acquire_turn("chat").await.unwrap();
    let a_holding = {
        let a = a.clone();
        let guard = a_grant.guard.clone();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_millis(100)).await;
                a.extend_turn(&guard).await.unwrap();
            }
        })
    };
    drop(a);
    // B, then C, wait.
    let b_wait = {
        let b = b.clone();
        tokio::spawn(async move {
            let grant = b.acquire_turn("chat").await.unwrap();
            (grant, clock.now())
        })
    };
    let observer = target.client::<R>().await;
    let b_ticket = eventually(Duration::from_secs(5), "B's ticket", || {
        queued_ticket(&observer, &ks, "chat", "replica-b")
    })
    .await;
    let c_wait = {
        let c = c.clone();
        tokio::spawn(async move { c.acquire_turn("chat").await.unwrap() })
    };
    eventually(Duration::from_secs(5), "C's ticket", || {
        queued_ticket(&observer, &ks, "chat", "replica-c")
    })
    .await;
    assert!(!b_wait.is_finished(), "B got the turn while A lived");

    // A stops: its holder task and its heartbeat task are dropped (with its client).
    a_holding.abort();
    a_beat.task.abort();
    let _ = a_holding.await;
    let _ = a_beat.task.await;
    let last_beat = a_beat.last_sent.lock().unwrap().unwrap();

    let (b_grant, b_granted) = b_wait.await.unwrap();
    assert_eq!(b_grant.guard.ticket, b_ticket);
    assert_eq!(b_ticket, a_grant.guard.ticket + 1);
    assert!(
        b_grant.events.contains(&TurnEvent::Skipped {
            ticket: a_grant.guard.ticket,
            member: a_grant.guard.member.clone(),
            reason: SkipReason::HeartbeatExpired,
        }),
        "{:?}",
        b_grant.events
    );
    let after_beat = b_granted - last_beat;
    assert!(
        after_beat >= STOP_HEARTBEAT_TTL - Duration::from_millis(5),
        "B got the turn {after_beat:?} after A's last heartbeat, before it expired"
    );
    assert!(
        after_beat <= STOP_HEARTBEAT_TTL + STOP_POLL + RTT_SLACK,
        "B got the turn only {after_beat:?} after A's last heartbeat"
    );
    // C still waits, for B.
    assert!(!c_wait.is_finished());
    b.release_turn(&b_grant.guard).await.unwrap();
    let c_grant = c_wait.await.unwrap();
    assert_eq!(c_grant.guard.ticket, b_ticket + 1);
    c.release_turn(&c_grant.guard).await.unwrap();
    b_beat.task.abort();
    c_beat.task.abort();
    observer.close().await;
    let driver = driver_name::<R>();
    eprintln!("{target:?} on {driver}: B granted {after_beat:?} after A's last heartbeat");
}

/// The ticket of `replica`'s first queued request on `chat`, read from the queue (the test
/// reads the key directly: an observer, not a participant).
async fn queued_ticket<R: Runtime>(
    observer: &Client<R>,
    ks: &botmesh_redis_core::Keyspace,
    chat: &str,
    replica: &str,
) -> Option<u64> {
    use botmesh_redis_core::keys::TurnPart;
    use botmesh_redis_core::{Access, Executor, Request, Value};
    let tix = ks.turn(chat, TurnPart::Tix);
    let request = Request::cmd(Access::Read, "ZRANGE")
        .key(&tix)
        .arg("0")
        .arg("-1")
        .arg("WITHSCORES")
        .build()
        .unwrap();
    let reply = observer.call(request).await.unwrap();
    let Value::Array(items) = reply else {
        panic!("ZRANGE answered {reply:?}")
    };
    let prefix = format!("{}|", botmesh_redis_core::keys::enc(replica));
    items.chunks(2).find_map(|pair| {
        let member = pair[0].clone().into_string().unwrap();
        member
            .starts_with(&prefix)
            .then(|| pair[1].as_i64().unwrap() as u64)
    })
}

/// A holder whose owner TTL runs out while it sleeps (its replica alive and heartbeating) loses
/// the turn to the next waiter, and its next `extend_turn`, the fenced check before a write,
/// fails with `NotHolder`; so does its release.
async fn paused_holder_gets_not_holder<R: Runtime>(target: Target) {
    let clock = Clock::new();
    let ks = target.keyspace("coord-pause");
    let short = TurnOptions {
        ttl: Duration::from_millis(300),
        poll_interval: Duration::from_millis(20),
        ..TurnOptions::default()
    };
    let a = Coordinator::new(target.client::<R>().await, ks.clone(), "replica-a")
        .unwrap()
        .with_turn_options(short);
    let b = Coordinator::new(target.client::<R>().await, ks.clone(), "replica-b")
        .unwrap()
        .with_turn_options(short);
    let a_beat = start_heartbeat(a.clone(), HEARTBEAT_TTL, HEARTBEAT_EVERY, clock).await;
    let b_beat = start_heartbeat(b.clone(), HEARTBEAT_TTL, HEARTBEAT_EVERY, clock).await;

    // A's grant ran after this, so its owner key lives at least the TTL from here.
    let a_sent = clock.now();
    let a_grant = a.acquire_turn("chat").await.unwrap();
    let b_wait = {
        let b = b.clone();
        tokio::spawn(async move {
            let grant = b.acquire_turn("chat").await.unwrap();
            (grant, clock.now())
        })
    };
    // A "pauses": it sleeps past its owner TTL without extending.
    let (b_grant, b_granted) = b_wait.await.unwrap();
    assert!(
        b_granted - a_sent >= short.ttl - Duration::from_millis(5),
        "B got the turn {:?} after A asked for it",
        b_granted - a_sent
    );
    assert_eq!(b_grant.guard.ticket, a_grant.guard.ticket + 1);
    assert!(
        b_grant.events.contains(&TurnEvent::Skipped {
            ticket: a_grant.guard.ticket,
            member: a_grant.guard.member.clone(),
            reason: SkipReason::OwnerExpired,
        }),
        "{:?}",
        b_grant.events
    );
    // A wakes up and checks before writing: refused.
    assert_eq!(
        a.extend_turn(&a_grant.guard).await.unwrap_err(),
        Error::NotHolder {
            what: format!("turn {} of chat \"chat\"", a_grant.guard.ticket)
        }
    );
    assert_eq!(
        a.release_turn(&a_grant.guard).await.unwrap(),
        Released::Lost
    );
    // B's turn is untouched by A's attempts.
    b.extend_turn(&b_grant.guard).await.unwrap();
    b.release_turn(&b_grant.guard).await.unwrap();
    a_beat.task.abort();
    b_beat.task.abort();
}

async fn paused_holder_gets_not_holder_all_targets<R: Runtime>() {
    for target in [Target::SingleLegacy, Target::SingleCluster, Target::Cluster] {
        paused_holder_gets_not_holder::<R>(target).await;
    }
}

/// A waiter whose caller stops waiting (its future dropped) withdraws its ticket within a poll
/// interval, so it neither blocks the chat nor takes a turn nobody uses.
async fn abandoned_waiter_leaves_the_queue<R: Runtime>(target: Target) {
    let clock = Clock::new();
    let ks = target.keyspace("coord-abandon");
    let options = TurnOptions {
        poll_interval: Duration::from_millis(20),
        ..TurnOptions::default()
    };
    let a = Coordinator::new(target.client::<R>().await, ks.clone(), "replica-a")
        .unwrap()
        .with_turn_options(options);
    let b = Coordinator::new(target.client::<R>().await, ks.clone(), "replica-b")
        .unwrap()
        .with_turn_options(options);
    let a_beat = start_heartbeat(a.clone(), HEARTBEAT_TTL, HEARTBEAT_EVERY, clock).await;
    let b_beat = start_heartbeat(b.clone(), HEARTBEAT_TTL, HEARTBEAT_EVERY, clock).await;
    let held = a.acquire_turn("chat").await.unwrap();
    // B gives up after 100 ms.
    let gave_up = tokio::time::timeout(Duration::from_millis(100), b.acquire_turn("chat")).await;
    assert!(gave_up.is_err());
    let observer = target.client::<R>().await;
    eventually(
        Duration::from_secs(5),
        "B's ticket to leave the queue",
        || async {
            queued_ticket(&observer, &ks, "chat", "replica-b")
                .await
                .is_none()
                .then_some(())
        },
    )
    .await;
    observer.close().await;
    a.release_turn(&held.guard).await.unwrap();
    // The chat is free at once for a newcomer: nobody holds or waits.
    let next = a.acquire_turn("chat").await.unwrap();
    assert_eq!(next.guard.ticket, held.guard.ticket + 2);
    assert_eq!(next.events, vec![TurnEvent::Took(held.guard.ticket + 2)]);
    a.release_turn(&next.guard).await.unwrap();
    a_beat.task.abort();
    b_beat.task.abort();
}

async fn abandoned_waiter_leaves_the_queue_all_targets<R: Runtime>() {
    for target in [Target::SingleLegacy, Target::SingleCluster, Target::Cluster] {
        abandoned_waiter_leaves_the_queue::<R>(target).await;
    }
}

/// `live_replicas` lists exactly the replicas whose heartbeat is live: not one that stopped
/// cleanly, not one whose heartbeat expired. On the cluster, the heartbeats land on every
/// master, and every master is scanned.
async fn live_replicas_are_exactly_the_live_ones<R: Runtime>(target: Target) {
    let ks = target.keyspace("coord-live");
    let client = target.client::<R>().await;
    let ids: Vec<String> = (0..12).map(|i| format!("replica-{i}")).collect();
    let coords: Vec<Coordinator<Client<R>>> = ids
        .iter()
        .map(|id| Coordinator::new(client.clone(), ks.clone(), id.as_str()).unwrap())
        .collect();
    for coord in &coords[..10] {
        coord.heartbeat(Duration::from_secs(30)).await.unwrap();
    }
    // One stops cleanly, one only beats briefly.
    coords[10].heartbeat(Duration::from_secs(30)).await.unwrap();
    coords[10].stop_heartbeat().await.unwrap();
    coords[11]
        .heartbeat(Duration::from_millis(100))
        .await
        .unwrap();
    assert!(coords[0].is_alive("replica-11").await.unwrap());
    let expected: Vec<String> = {
        let mut ids = ids[..10].to_vec();
        ids.sort();
        ids
    };
    let live = eventually(Duration::from_secs(5), "replica-11 to expire", || {
        let coord = coords[0].clone();
        let expected = expected.clone();
        async move {
            let live = coord.live_replicas().await.unwrap();
            (live == expected).then_some(live)
        }
    })
    .await;
    assert_eq!(live, expected);
    assert!(!coords[0].is_alive("replica-11").await.unwrap());
    assert!(!coords[0].is_alive("replica-10").await.unwrap());
    if target == Target::Cluster {
        // The heartbeats really are spread: more than one master holds some.
        let cluster = shared_cluster();
        let master = cluster.masters().unwrap()[0];
        let slots = cluster
            .conn(master)
            .unwrap()
            .cmd(&["CLUSTER", "SLOTS"])
            .unwrap();
        let ranges = parse_cluster_slots(&slots).unwrap();
        let masters: BTreeSet<_> = ids[..10]
            .iter()
            .map(|id| {
                let s = slot(ks.heartbeat(id).as_bytes());
                ranges
                    .iter()
                    .find(|r| r.start <= s && s <= r.end)
                    .unwrap()
                    .master
            })
            .collect();
        assert_eq!(masters.len(), 3, "heartbeats on {masters:?}");
    }
    client.close().await;
}

both_drivers!(turns_exclude_and_serve_in_order {
    turns_exclude_and_serve_in_order_single_node_legacy => Target::SingleLegacy,
    turns_exclude_and_serve_in_order_single_node_cluster_layout => Target::SingleCluster,
    turns_exclude_and_serve_in_order_cluster => Target::Cluster,
});

both_drivers!(stopped_replica_loses_its_turn {
    stopped_replica_loses_its_turn_single_node_legacy => Target::SingleLegacy,
    stopped_replica_loses_its_turn_single_node_cluster_layout => Target::SingleCluster,
    stopped_replica_loses_its_turn_cluster => Target::Cluster,
});

both_drivers!(live_replicas_are_exactly_the_live_ones {
    live_replicas_single_node_legacy => Target::SingleLegacy,
    live_replicas_single_node_cluster_layout => Target::SingleCluster,
    live_replicas_cluster => Target::Cluster,
});

both_drivers!(
    paused_holder_gets_not_holder_all_targets,
    abandoned_waiter_leaves_the_queue_all_targets,
);
