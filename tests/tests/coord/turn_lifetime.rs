//! A chat's turn queue has an idle lifetime, and its tickets never go backwards across it.
//! Against real servers in every layout, on both drivers:
//!
//! - after turns are taken, waited for and released, every queue key (`seq`, `tix`, `serving`,
//!   `last`) carries a TTL of at most the idle lifetime; the owner key carries the turn TTL;
//! - a fresh chat's first ticket is the server's time in ms x 1000;
//! - once a queue has been idle for its lifetime its keys are gone, and the next take restarts
//!   the counter above every earlier ticket; a holder from before cannot extend;
//! - turns still exclude each other and are served in ticket order when queues expire and
//!   restart between bursts of concurrent takers;
//! - a waiter that keeps polling keeps the queue alive past the lifetime (the `turn` script's
//!   contract, driven directly: the options' check keeps every single wait of the public API
//!   shorter than the lifetime).

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use botmesh_redis_core::driver::scripts::TURN;
use botmesh_redis_core::keys::TurnPart;
use botmesh_redis_core::{Access, Error, Executor, Key, Keyspace, Request, Value};
use botmesh_redis_core::{Coordinator, Released};
use botmesh_redis_core::{TurnEvent, TurnOptions};
use botmesh_redis_tests::conformance::{Client, Runtime};
use botmesh_redis_tests::coord::{exists, pttl, server_ms, start_heartbeat, Clock, Target};
use botmesh_redis_tests::{both_drivers, eventually};

const HEARTBEAT_TTL: Duration = Duration::from_secs(2);
const HEARTBEAT_EVERY: Duration = Duration::from_millis(200);

/// The queue keys that carry the idle lifetime, in contract order.
const QUEUE_PARTS: [TurnPart; 4] = [
    TurnPart::Seq,
    TurnPart::Tix,
    TurnPart::Serving,
    TurnPart::Last,
];

fn queue_keys(ks: &Keyspace, chat: &str) -> Vec<(TurnPart, Key)> {
    QUEUE_PARTS.iter().map(|&p| (p, ks.turn(chat, p))).collect()
}

/// Asserts that every existing queue key of `chat` expires within `lifetime`, and that the
/// parts in `present` exist.
async fn assert_queue_ttls<R: Runtime>(
    observer: &Client<R>,
    ks: &Keyspace,
    chat: &str,
    lifetime: Duration,
    present: &[TurnPart],
    when: &str,
) {
    let lifetime_ms = i64::try_from(lifetime.as_millis()).unwrap();
    for (part, key) in queue_keys(ks, chat) {
        let ttl = pttl(observer, &key).await;
        if present.contains(&part) {
            assert!(
                ttl > 0 && ttl <= lifetime_ms,
                "{when}: {part:?} has PTTL {ttl}, wanted 1..={lifetime_ms}"
            );
        } else {
            assert!(
                ttl == -2 || (ttl > 0 && ttl <= lifetime_ms),
                "{when}: {part:?} has PTTL {ttl}"
            );
        }
    }
}

/// Awaits the expiry of every queue key of `chat`, at most `within`.
async fn await_queue_gone<R: Runtime>(
    observer: &Client<R>,
    ks: &Keyspace,
    chat: &str,
    within: Duration,
) {
    eventually(within, "the idle queue to expire", || async {
        for (_, key) in queue_keys(ks, chat) {
            if exists(observer, &key).await {
                return None;
            }
        }
        Some(())
    })
    .await;
}

/// A holder and a waiter, then both releases: every queue key carries a TTL of at most the
/// lifetime all along, the owner key the turn TTL. The first ticket of the fresh chat is the
/// server's time in ms x 1000.
async fn queue_keys_carry_the_idle_lifetime<R: Runtime>(target: Target) {
    let clock = Clock::new();
    let ks = target.keyspace("coord-turn-ttl");
    let options = TurnOptions {
        ttl: Duration::from_secs(5),
        poll_interval: Duration::from_millis(10),
        claim_timeout: Duration::from_secs(1),
        wait_timeout: Duration::from_secs(10),
        idle_lifetime: Duration::from_secs(30),
    };
    let a = Coordinator::new(target.client::<R>().await, ks.clone(), "replica-a")
        .unwrap()
        .with_turn_options(options);
    let b = Coordinator::new(target.client::<R>().await, ks.clone(), "replica-b")
        .unwrap()
        .with_turn_options(options);
    let a_beat = start_heartbeat(a.clone(), HEARTBEAT_TTL, HEARTBEAT_EVERY, clock).await;
    let b_beat = start_heartbeat(b.clone(), HEARTBEAT_TTL, HEARTBEAT_EVERY, clock).await;
    let observer = target.client::<R>().await;
    let chat = "chat:{1} 😀";

    let before = server_ms(&observer).await;
    let a_grant = a.acquire_turn(chat).await.unwrap();
    let after = server_ms(&observer).await;
    let ticket = a_grant.guard.ticket;
    assert!(
        ticket >= before * 1000 && ticket <= (after + 1) * 1000,
        "a fresh chat's first ticket {ticket} is not the server's ms x 1000 ({before}..={after})"
    );
    // Served at once: the take found nobody ahead of it.
    assert_eq!(a_grant.events, vec![TurnEvent::Took(ticket)]);

    let b_wait = {
        let b = b.clone();
        tokio::spawn(async move { b.acquire_turn(chat).await.unwrap() })
    };
    let tix = ks.turn(chat, TurnPart::Tix);
    eventually(
        Duration::from_secs(5),
        "B's ticket in the queue",
        || async {
            let queued = botmesh_redis_tests::coord::key_cmd(&observer, "ZCARD", &tix, &[]).await;
            (queued.as_i64().unwrap() == 2).then_some(())
        },
    )
    .await;
    assert_queue_ttls(
        &observer,
        &ks,
        chat,
        options.idle_lifetime,
        &QUEUE_PARTS,
        "A holds, B waits",
    )
    .await;
    let owner_ttl = pttl(&observer, &ks.turn(chat, TurnPart::Owner)).await;
    assert!(
        owner_ttl > 0 && owner_ttl <= 5_000,
        "the owner key has PTTL {owner_ttl}"
    );

    a.extend_turn(&a_grant.guard).await.unwrap();
    a.release_turn(&a_grant.guard).await.unwrap();
    let b_grant = b_wait.await.unwrap();
    assert_eq!(b_grant.guard.ticket, ticket + 1);
    b.release_turn(&b_grant.guard).await.unwrap();
    // Nobody waits or holds: the empty queue is gone, the rest expires within the lifetime.
    assert_queue_ttls(
        &observer,
        &ks,
        chat,
        options.idle_lifetime,
        &[TurnPart::Seq, TurnPart::Serving, TurnPart::Last],
        "after both releases",
    )
    .await;
    assert!(!exists(&observer, &tix).await);
    assert!(!exists(&observer, &ks.turn(chat, TurnPart::Owner)).await);
    a_beat.task.abort();
    b_beat.task.abort();
    observer.close().await;
}

/// Options whose idle lifetime is a quarter second: the check allows it because every timer is
/// at most 100 ms.
fn tiny_options() -> TurnOptions {
    TurnOptions {
        ttl: Duration::from_millis(100),
        poll_interval: Duration::from_millis(10),
        claim_timeout: Duration::from_millis(100),
        wait_timeout: Duration::from_millis(100),
        idle_lifetime: Duration::from_millis(250),
    }
}

/// A queue left idle for its lifetime expires; the next take restarts the counter at the
/// server's time in ms x 1000, above every earlier ticket of the chat; a holder from before
/// the expiry finds its turn gone.
async fn an_expired_queue_restarts_above_every_earlier_ticket<R: Runtime>(target: Target) {
    let ks = target.keyspace("coord-turn-restart");
    let options = tiny_options();
    let a = Coordinator::new(target.client::<R>().await, ks.clone(), "replica-a")
        .unwrap()
        .with_turn_options(options);
    // Turns need a live heartbeat.
    a.heartbeat(Duration::from_secs(60)).await.unwrap();
    let observer = target.client::<R>().await;
    let chat = "chat-restart";

    let mut earlier = Vec::new();
    for _ in 0..3 {
        let grant = a.acquire_turn(chat).await.unwrap();
        earlier.push(grant.guard.ticket);
        a.release_turn(&grant.guard).await.unwrap();
    }
    assert_eq!(earlier, vec![earlier[0], earlier[0] + 1, earlier[0] + 2]);
    // A holder that then goes quiet: its owner key and the whole queue run out.
    let quiet = a.acquire_turn(chat).await.unwrap();
    earlier.push(quiet.guard.ticket);
    await_queue_gone(&observer, &ks, chat, Duration::from_secs(5)).await;
    assert!(!exists(&observer, &ks.turn(chat, TurnPart::Owner)).await);

    for round in 0..2 {
        let before = server_ms(&observer).await;
        let grant = a.acquire_turn(chat).await.unwrap();
        let ticket = grant.guard.ticket;
        let highest = *earlier.iter().max().unwrap();
        assert!(
            ticket > highest,
            "round {round}: ticket {ticket} after the restart, not above {highest}"
        );
        assert!(
            ticket >= before * 1000,
            "round {round}: ticket {ticket} restarted below the server's ms x 1000 ({before})"
        );
        assert_eq!(grant.events, vec![TurnEvent::Took(ticket)]);
        a.release_turn(&grant.guard).await.unwrap();
        earlier.push(ticket);
        await_queue_gone(&observer, &ks, chat, Duration::from_secs(5)).await;
    }
    // The quiet holder wakes up: its fenced check fails, and so does its release.
    assert_eq!(
        a.extend_turn(&quiet.guard).await.unwrap_err(),
        Error::NotHolder {
            what: format!("turn {} of chat {chat:?}", quiet.guard.ticket)
        }
    );
    assert_eq!(a.release_turn(&quiet.guard).await.unwrap(), Released::Lost);
    observer.close().await;
}

/// One turn held, for the burst test's history.
#[derive(Clone, Debug)]
struct Held {
    burst: usize,
    ticket: u64,
    granted: Duration,
    release_sent: Duration,
    events: Vec<TurnEvent>,
}

/// Bursts of concurrent takers on one chat, with the queue expiring between bursts: never two
/// holders at once, every grant after the release of the ticket before it, every ticket of a
/// burst above every ticket of the bursts before, and the tickets of a burst consecutive.
async fn exclusion_and_order_hold_across_restarts<R: Runtime>(target: Target) {
    const REPLICAS: usize = 3;
    const WORKERS: usize = 2;
    const TURNS: usize = 5;
    const BURSTS: usize = 3;
    let clock = Clock::new();
    let ks = target.keyspace("coord-turn-bursts");
    let options = TurnOptions {
        ttl: Duration::from_millis(500),
        poll_interval: Duration::from_millis(5),
        claim_timeout: Duration::from_millis(500),
        wait_timeout: Duration::from_secs(1),
        idle_lifetime: Duration::from_secs(2),
    };
    let chat = "chat-bursts";
    let observer = target.client::<R>().await;
    let mut coords = Vec::new();
    let mut beats = Vec::new();
    for r in 0..REPLICAS {
        let coord = Coordinator::new(target.client::<R>().await, ks.clone(), format!("r{r}"))
            .unwrap()
            .with_turn_options(options);
        beats.push(start_heartbeat(coord.clone(), HEARTBEAT_TTL, HEARTBEAT_EVERY, clock).await);
        coords.push(coord);
    }
    let holders = Arc::new(AtomicUsize::new(0));
    let history = Arc::new(Mutex::new(Vec::<Held>::new()));
    for burst in 0..BURSTS {
        let mut tasks = Vec::new();
        for coord in &coords {
            for _ in 0..WORKERS {
                let (coord, holders, history) = (coord.clone(), holders.clone(), history.clone());
                tasks.push(tokio::spawn(async move {
                    for _ in 0..TURNS {
                        let grant = coord.acquire_turn(chat).await.unwrap();
                        let granted = clock.now();
                        assert_eq!(holders.fetch_add(1, Ordering::SeqCst), 0, "two holders");
                        tokio::task::yield_now().await;
                        coord.extend_turn(&grant.guard).await.unwrap();
                        assert_eq!(holders.fetch_sub(1, Ordering::SeqCst), 1);
                        let release_sent = clock.now();
                        coord.release_turn(&grant.guard).await.unwrap();
                        history.lock().unwrap().push(Held {
                            burst,
                            ticket: grant.guard.ticket,
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
        await_queue_gone(&observer, &ks, chat, Duration::from_secs(10)).await;
    }
    for beat in &beats {
        beat.task.abort();
    }
    let mut held = history.lock().unwrap().clone();
    assert_eq!(held.len(), BURSTS * REPLICAS * WORKERS * TURNS);
    held.sort_by_key(|h| h.ticket);
    for pair in held.windows(2) {
        assert!(
            pair[1].granted >= pair[0].release_sent,
            "ticket {} granted before ticket {} was released",
            pair[1].ticket,
            pair[0].ticket
        );
        assert!(
            pair[1].burst >= pair[0].burst,
            "ticket {} of burst {} is below ticket {} of burst {}",
            pair[0].ticket,
            pair[0].burst,
            pair[1].ticket,
            pair[1].burst
        );
    }
    for burst in 0..BURSTS {
        let mut taken = BTreeSet::new();
        let mut skipped = BTreeSet::new();
        for h in held.iter().filter(|h| h.burst == burst) {
            for event in &h.events {
                match event {
                    TurnEvent::Took(t) => assert!(taken.insert(*t), "ticket {t} taken twice"),
                    TurnEvent::Skipped { ticket, .. } => {
                        skipped.insert(*ticket);
                    }
                    TurnEvent::Retook { .. } => {}
                }
            }
        }
        let granted: BTreeSet<u64> = held
            .iter()
            .filter(|h| h.burst == burst)
            .map(|h| h.ticket)
            .collect();
        assert!(granted.is_disjoint(&skipped), "burst {burst}");
        assert_eq!(
            taken,
            granted.union(&skipped).copied().collect::<BTreeSet<_>>(),
            "burst {burst}"
        );
        let first = *taken.first().unwrap();
        assert_eq!(
            taken,
            (first..first + taken.len() as u64).collect::<BTreeSet<_>>(),
            "burst {burst}: its tickets are consecutive"
        );
    }
    observer.close().await;
}

/// One `turn` script call, as the plans send it (see the script's header for its arguments).
async fn turn_call<R: Runtime>(
    client: &Client<R>,
    ks: &Keyspace,
    chat: &str,
    args: [&str; 6],
) -> Value {
    let keys = TurnPart::ALL.iter().map(|&p| ks.turn(chat, p)).collect();
    let args = args.iter().map(|a| a.to_string().into()).collect();
    let request = Request::script_in(ks, &TURN, Access::Write, keys, args).unwrap();
    client.call(request).await.unwrap()
}

/// One `turn` call with an owner TTL of 5 s, and a claim timeout and a lifetime of 60 s.
async fn turn_op<R: Runtime>(
    client: &Client<R>,
    ks: &Keyspace,
    chat: &str,
    op: &str,
    ticket: i64,
    member: &str,
) -> Value {
    let ticket = ticket.to_string();
    let args = [op, &ticket, member, "5000", "60000", "60000"];
    turn_call(client, ks, chat, args).await
}

/// The status of a poll reply.
fn status(reply: Value) -> String {
    let items = reply.into_array().unwrap();
    items[0].clone().into_string().unwrap()
}

/// A waiter that keeps polling keeps the queue alive for many lifetimes, with nothing else
/// calling: the holder granted at the start never calls again. Once the polls stop, the queue
/// expires within the lifetime.
async fn a_polling_waiter_keeps_the_queue_alive<R: Runtime>(target: Target) {
    let clock = Clock::new();
    let ks = target.keyspace("coord-turn-alive");
    let client = target.client::<R>().await;
    let chat = "chat-alive";
    let lifetime = "300";
    let owner_ttl = "5000";
    let claim = "60000";

    let a = turn_call(
        &client,
        &ks,
        chat,
        ["take", "0", "a|1", owner_ttl, claim, lifetime],
    )
    .await;
    let a_ticket = a.as_i64().unwrap().to_string();
    let granted = turn_call(
        &client,
        &ks,
        chat,
        ["poll", &a_ticket, "a|1", owner_ttl, claim, lifetime],
    )
    .await;
    assert_eq!(status(granted), "granted");
    let a_last_call = clock.now();
    let b = turn_call(
        &client,
        &ks,
        chat,
        ["take", "0", "b|1", owner_ttl, claim, lifetime],
    )
    .await;
    let b_ticket = b.as_i64().unwrap().to_string();

    // B polls every 20 ms (its poll interval) for four lifetimes after A's last call.
    let mut polls = 0;
    while clock.now() - a_last_call < Duration::from_millis(4 * 300) {
        let reply = turn_call(
            &client,
            &ks,
            chat,
            ["poll", &b_ticket, "b|1", owner_ttl, claim, lifetime],
        )
        .await;
        let status = status(reply);
        assert!(
            status == "probe" || status == "wait",
            "poll {polls}: {status}"
        );
        polls += 1;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Alive, four lifetimes after anyone but the waiter called, and B is still queued.
    assert_queue_ttls(
        &client,
        &ks,
        chat,
        Duration::from_millis(300),
        &QUEUE_PARTS,
        "while B polls",
    )
    .await;
    let score = botmesh_redis_tests::coord::key_cmd(
        &client,
        "ZSCORE",
        &ks.turn(chat, TurnPart::Tix),
        &["b|1"],
    )
    .await;
    let score: f64 = score.into_string().unwrap().parse().unwrap();
    assert_eq!(
        score,
        b.as_i64().unwrap() as f64,
        "B's ticket is below 2^53: exact"
    );
    // The polls stop: the queue expires within its lifetime (plus the server's expiry cycle).
    await_queue_gone(&client, &ks, chat, Duration::from_secs(5)).await;
    eprintln!("{target:?}: {polls} polls kept the queue alive");
    client.close().await;
}

/// A take into an empty queue serves its own ticket at once, even when the served record still
/// names the old counter's next ticket: here the counter alone is gone (an eviction under a
/// `volatile-*` policy can do that now that it has a TTL), so the restarted ticket is far above
/// the served one. The take's first poll is granted, without a round of `retry gone`.
async fn a_take_into_an_empty_queue_is_served_at_once<R: Runtime>(target: Target) {
    let ks = target.keyspace("coord-turn-alone");
    let client = target.client::<R>().await;
    let chat = "chat-alone";
    let served = ks.turn(chat, TurnPart::Serving);
    let serving = || async {
        botmesh_redis_tests::coord::key_cmd(&client, "HGET", &served, &["ticket"])
            .await
            .as_i64()
            .unwrap()
    };

    let first = turn_op(&client, &ks, chat, "take", 0, "a|1").await;
    let first = first.as_i64().unwrap();
    assert_eq!(serving().await, first);
    let polled = turn_op(&client, &ks, chat, "poll", first, "a|1").await;
    assert_eq!(status(polled), "granted");
    let released = turn_op(&client, &ks, chat, "release", first, "a|1").await;
    assert_eq!(released.as_i64().unwrap(), 1);
    // The empty queue serves the counter's next ticket.
    assert_eq!(serving().await, first + 1);

    botmesh_redis_tests::coord::key_cmd(&client, "DEL", &ks.turn(chat, TurnPart::Seq), &[]).await;
    // A restart in the millisecond of the first take would hand out the same ticket again:
    // the lifetime (at least 1 ms) rules that out for an expired queue; here, wait it out.
    let first_ms = u64::try_from(first).unwrap() / 1000;
    eventually(
        Duration::from_secs(5),
        "the server clock to pass",
        || async { (server_ms(&client).await > first_ms).then_some(()) },
    )
    .await;
    let second = turn_op(&client, &ks, chat, "take", 0, "b|1").await;
    let second = second.as_i64().unwrap();
    assert!(second > first + 1, "{second} after {first}");
    assert_eq!(serving().await, second, "served at the take");
    let polled = turn_op(&client, &ks, chat, "poll", second, "b|1").await;
    assert_eq!(status(polled), "granted");
    client.close().await;
}

async fn lifetime_all_targets<R: Runtime>() {
    for target in [Target::SingleLegacy, Target::SingleCluster, Target::Cluster] {
        queue_keys_carry_the_idle_lifetime::<R>(target).await;
        an_expired_queue_restarts_above_every_earlier_ticket::<R>(target).await;
        a_polling_waiter_keeps_the_queue_alive::<R>(target).await;
        a_take_into_an_empty_queue_is_served_at_once::<R>(target).await;
    }
}

both_drivers!(exclusion_and_order_hold_across_restarts {
    exclusion_across_restarts_single_node_legacy => Target::SingleLegacy,
    exclusion_across_restarts_single_node_cluster_layout => Target::SingleCluster,
    exclusion_across_restarts_cluster => Target::Cluster,
});

both_drivers!(lifetime_all_targets,);
