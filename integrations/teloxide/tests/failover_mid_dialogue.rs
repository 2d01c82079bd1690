//! A manual failover of the master that holds a chat's dialogue, in the middle of three
//! replicas' open-loop traffic under turns. Every update is handled (an update whose attempt
//! failed before writing anything is handled again, as a redelivery would), and each chat's
//! count is exact: at least the writes that were acknowledged, at most those plus the writes
//! whose outcome is unknown (their reply was lost in the failover). A manual failover loses no
//! acknowledged write, so a count below the acknowledged writes is a lost update.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use botmesh_redis_harness::{ClusterOptions, RedisCluster};
use botmesh_redis_teloxide::{ChatTurns, DialogueStorage, StorageOptions};
use botmesh_redis_tokio::ClientOptions;
use support::{count_of, count_one, dialogue_key, prefix, quick_turns, Rmw};
use teloxide::dispatching::dialogue::serializer::Json;
use teloxide::types::ChatId;
use tokio::task::JoinSet;

const REPLICAS: usize = 3;
const CHATS: i64 = 6;
/// Updates before the failover starts, and at least as many after it finished.
const BEFORE: u64 = 200;
const AFTER: u64 = 200;
const ARRIVAL: Duration = Duration::from_millis(3);
/// Attempts per update before the test gives up on it (a redelivery each).
const ATTEMPTS: u32 = 20;

#[derive(Default, Debug)]
struct Tally {
    /// Per chat: writes acknowledged.
    acked: BTreeMap<i64, u64>,
    /// Per chat: writes whose outcome is unknown (the update is not handled again).
    unknown: BTreeMap<i64, u64>,
    /// Attempts that failed before writing, and were handled again.
    redelivered: u64,
    /// Turns found lost at release: the exclusion may not have held for that update.
    lost_turns: u64,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failover_in_the_middle_keeps_every_count_exact() {
    let cluster = Arc::new(RedisCluster::start(ClusterOptions::default()));
    let prefix = prefix("failover");
    let mut replicas = Vec::new();
    for r in 0..REPLICAS {
        let storage = DialogueStorage::open_with(
            ClientOptions::cluster(cluster.seeds()),
            StorageOptions::new(prefix.clone()),
            Json,
        )
        .await
        .unwrap();
        // Heartbeats outlive the failover (a second or two), so no live holder is skipped.
        let turns = ChatTurns::start_with(
            storage.store(),
            format!("{prefix}-replica-{r}"),
            quick_turns(),
            Duration::from_secs(10),
        )
        .await
        .unwrap();
        replicas.push((storage, turns));
    }
    let victim = cluster.master_for_key(dialogue_key(&prefix, 0)).unwrap();
    let tally = Arc::new(Mutex::new(Tally::default()));

    let mut arrivals = tokio::time::interval(ARRIVAL);
    arrivals.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let mut handlers = JoinSet::new();
    let mut failover = None;
    let mut finished_at = None;
    let mut update = 0;
    loop {
        arrivals.tick().await;
        if update == BEFORE {
            let cluster = Arc::clone(&cluster);
            failover = Some(tokio::task::spawn_blocking(move || {
                cluster.failover(victim)
            }));
        }
        if finished_at.is_none() && failover.as_ref().is_some_and(|f| f.is_finished()) {
            finished_at = Some(update);
        }
        if finished_at.is_some_and(|at| update >= at + AFTER) {
            break;
        }
        let chat_n = update as i64 % CHATS;
        let chat = ChatId(chat_n);
        let (storage, turns) = replicas[update as usize % REPLICAS].clone();
        let tally = Arc::clone(&tally);
        handlers.spawn(async move {
            for attempt in 1..=ATTEMPTS {
                let turn = match turns.acquire(chat).await {
                    Ok(guard) => guard,
                    Err(_) => {
                        tally.lock().unwrap().redelivered += 1;
                        continue;
                    }
                };
                let outcome = count_one(&storage, chat, update, Duration::ZERO).await;
                let released = turns.release(&turn).await;
                let mut tally = tally.lock().unwrap();
                if let Err(botmesh_redis_teloxide::TurnError::Lost { .. }) = released {
                    tally.lost_turns += 1;
                }
                match outcome {
                    Ok(()) => *tally.acked.entry(chat_n).or_default() += 1,
                    Err(Rmw::Unknown(_)) => *tally.unknown.entry(chat_n).or_default() += 1,
                    Err(Rmw::NotWritten(e)) => {
                        tally.redelivered += 1;
                        assert!(
                            attempt < ATTEMPTS,
                            "update {update} failed {ATTEMPTS} times: {e}"
                        );
                        continue;
                    }
                }
                return;
            }
            panic!("update {update} was never handled");
        });
        update += 1;
    }
    let updates = update;
    while let Some(done) = handlers.join_next().await {
        done.unwrap();
    }
    let promoted = failover.unwrap().await.unwrap().unwrap();
    assert_ne!(promoted, victim);

    let tally = std::mem::take(&mut *tally.lock().unwrap());
    let storage = &replicas[0].0;
    let mut handled = 0;
    for chat in 0..CHATS {
        let count = count_of(storage, ChatId(chat)).await;
        let acked = tally.acked.get(&chat).copied().unwrap_or(0);
        let unknown = tally.unknown.get(&chat).copied().unwrap_or(0);
        handled += acked + unknown;
        assert!(
            acked <= count && count <= acked + unknown,
            "chat {chat}: count {count}, acknowledged writes {acked}, unknown outcomes \
             {unknown} ({tally:?})"
        );
    }
    assert_eq!(handled, updates, "every update handled once: {tally:?}");
    assert_eq!(
        tally.lost_turns, 0,
        "no turn lost in a manual failover: {tally:?}"
    );
    eprintln!(
        "failover of {victim} to {promoted}: {updates} updates ({BEFORE} before it, it finished \
         at update {}), {} redelivered attempts, \
         {} unknown outcomes",
        finished_at.unwrap_or_default(),
        tally.redelivered,
        tally.unknown.values().sum::<u64>()
    );
    for (storage, turns) in replicas {
        turns.stop().await.ok();
        storage.close().await;
    }
}
