//! A handler that outlives its turn (its TTL runs out while it works) cannot write its
//! dialogue over the update of the replica that took the turn after it: the storage confirms
//! the turn before every write inside it, and the late write fails with `TurnLost` instead of
//! silently undoing the other replica's update.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::Arc;
use std::time::Duration;

use botmesh_redis_teloxide::{ChatTurns, DialogueStorageError, TurnError};
use support::{count_of, prefix, quick_turns, Setup, State};
use teloxide::dispatching::dialogue::serializer::Json;
use teloxide::dispatching::dialogue::Storage;
use teloxide::types::ChatId;
use tokio::sync::oneshot;

async fn late_write_is_refused(setup: Setup) {
    let prefix = prefix("late");
    let storage_a = setup.storage(&prefix, Json).await;
    let storage_b = setup.storage(&prefix, Json).await;
    // A short turn TTL, so that replica B is granted the turn while A still works.
    let options = botmesh_redis_tokio::TurnOptions {
        ttl: Duration::from_millis(300),
        ..quick_turns()
    };
    let heartbeat = Duration::from_secs(2);
    let turns_a =
        ChatTurns::start_with(storage_a.store(), format!("{prefix}-a"), options, heartbeat)
            .await
            .unwrap();
    let turns_b =
        ChatTurns::start_with(storage_b.store(), format!("{prefix}-b"), options, heartbeat)
            .await
            .unwrap();
    let chat = ChatId(-1_000_000_000_077);
    let count = |n| State::Counting {
        count: n,
        last: Some(n),
    };
    Arc::clone(&storage_a)
        .update_dialogue(chat, count(1))
        .await
        .unwrap();

    let (a_holds_tx, a_holds_rx) = oneshot::channel();
    let (b_wrote_tx, b_wrote_rx) = oneshot::channel();
    let (a_wrote_tx, a_wrote_rx) = oneshot::channel();
    let a = {
        let storage_a = Arc::clone(&storage_a);
        let turns_a = turns_a.clone();
        async move {
            turns_a
                .run(chat, |_guard| async move {
                    let read: Option<State> =
                        Arc::clone(&storage_a).get_dialogue(chat).await.unwrap();
                    assert_eq!(read, Some(count(1)));
                    a_holds_tx.send(()).unwrap();
                    // A works until B has taken the turn (A's TTL ran out) and written.
                    b_wrote_rx.await.unwrap();
                    let late = Arc::clone(&storage_a)
                        .update_dialogue(chat, count(99))
                        .await;
                    a_wrote_tx.send(late).unwrap();
                })
                .await
        }
    };
    let b = {
        let storage_b = Arc::clone(&storage_b);
        let turns_b = turns_b.clone();
        async move {
            a_holds_rx.await.unwrap();
            turns_b
                .run(chat, |_guard| async move {
                    let read: Option<State> =
                        Arc::clone(&storage_b).get_dialogue(chat).await.unwrap();
                    assert_eq!(read, Some(count(1)));
                    Arc::clone(&storage_b)
                        .update_dialogue(chat, count(2))
                        .await
                        .unwrap();
                    b_wrote_tx.send(()).unwrap();
                })
                .await
        }
    };
    let (a_run, b_run) = tokio::join!(a, b);
    b_run.unwrap();
    // A's turn was gone when it gave it back too.
    assert!(matches!(a_run, Err(TurnError::Lost { .. })), "{a_run:?}");
    match a_wrote_rx.await.unwrap() {
        Err(DialogueStorageError::TurnLost { chat: lost }) => assert_eq!(lost, chat),
        other => panic!("{setup:?}: the late write was not refused: {other:?}"),
    }
    // B's update stands: one count per update, none undone.
    assert_eq!(count_of(&storage_a, chat).await, 2);
    let stored: Option<State> = Arc::clone(&storage_b).get_dialogue(chat).await.unwrap();
    assert_eq!(stored, Some(count(2)));

    // Outside a turn nothing is confirmed: the same write goes through.
    Arc::clone(&storage_a)
        .update_dialogue(chat, count(3))
        .await
        .unwrap();
    assert_eq!(count_of(&storage_a, chat).await, 3);
    storage_a.close().await;
    storage_b.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_single_node() {
    late_write_is_refused(Setup::SingleLegacy).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_cluster() {
    late_write_is_refused(Setup::Cluster).await;
}
