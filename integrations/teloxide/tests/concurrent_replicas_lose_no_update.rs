//! Three replicas, each with its own client, handle one chat's updates as they arrive (open
//! loop: a fixed arrival rate, whatever the handlers' pace), each update a read-modify-write of
//! the chat's dialogue. Under the chat's turns the final count is exactly the number of
//! updates; without them, replicas overwrite each other's updates and the count falls short,
//! which is what this suite exists to catch.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::Arc;
use std::time::Duration;

use botmesh_redis_teloxide::{ChatTurns, DialogueStorage};
use support::{count_of, count_one, prefix, turns, Setup, SETUPS};
use teloxide::dispatching::dialogue::serializer::Json;
use teloxide::types::ChatId;
use tokio::task::JoinSet;

const REPLICAS: usize = 3;
const UPDATES: u64 = 120;
/// One update arrives every `ARRIVAL`; each handler works `WORK` between its read and its write,
/// so without turns about two handlers of the chat overlap at any time.
const ARRIVAL: Duration = Duration::from_millis(2);
const WORK: Duration = Duration::from_millis(4);

/// Feeds `UPDATES` updates of one chat to the replicas in turn, at the arrival rate, and yields
/// the chat's final count.
async fn run(setup: Setup, with_turns: bool) -> u64 {
    let prefix = prefix(if with_turns { "turns" } else { "no-turns" });
    let mut replicas: Vec<(Arc<DialogueStorage<Json>>, Option<ChatTurns>)> = Vec::new();
    for r in 0..REPLICAS {
        let storage = setup.storage(&prefix, Json).await;
        let turns = match with_turns {
            true => Some(turns(&storage, &format!("{prefix}-replica-{r}")).await),
            false => None,
        };
        replicas.push((storage, turns));
    }
    let chat = ChatId(-1_000_000_000_123);
    let mut arrivals = tokio::time::interval(ARRIVAL);
    arrivals.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let mut handlers = JoinSet::new();
    for update in 0..UPDATES {
        arrivals.tick().await;
        let (storage, turns) = replicas[update as usize % REPLICAS].clone();
        handlers.spawn(async move {
            match turns {
                Some(turns) => turns
                    .run(chat, |_guard| count_one(&storage, chat, update, WORK))
                    .await
                    .unwrap(),
                None => count_one(&storage, chat, update, WORK).await,
            }
            .unwrap();
        });
    }
    while let Some(done) = handlers.join_next().await {
        done.unwrap();
    }
    let count = count_of(&replicas[0].0, chat).await;
    for (storage, turns) in replicas {
        if let Some(turns) = turns {
            turns.stop().await.unwrap();
        }
        storage.close().await;
    }
    count
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_turns_every_update_counts() {
    for setup in SETUPS {
        let count = run(setup, true).await;
        assert_eq!(
            count, UPDATES,
            "{setup:?}: {count} of {UPDATES} updates kept under turns"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_turns_updates_are_lost() {
    for setup in [Setup::SingleLegacy, Setup::Cluster] {
        let count = run(setup, false).await;
        eprintln!("{setup:?} without turns: {count} of {UPDATES} updates kept");
        assert!(
            count < UPDATES,
            "{setup:?}: overlapping read-modify-writes without turns kept every update \
             ({count}); the workload no longer overlaps, so the test with turns proves nothing"
        );
    }
}
