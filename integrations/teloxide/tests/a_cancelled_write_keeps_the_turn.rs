//! A handler cancelled while its dialogue write is on its way (a timeout around it, a `select!`,
//! an aborted task) does not give its turn back: the client carries a written call to its end,
//! so the write may land after the next replica read the dialogue, over its update. The turn
//! runs out its TTL instead. Before, the scope's drop gave it back at once.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use botmesh_redis_harness::shared_cluster;
use botmesh_redis_teloxide::{ChatTurns, TurnError};
use botmesh_redis_tokio::TurnOptions;
use support::{dialogue_key, prefix, quick_turns, Setup, State};
use teloxide::dispatching::dialogue::serializer::Json;
use teloxide::dispatching::dialogue::Storage;
use teloxide::types::ChatId;

fn count(n: u64) -> State {
    State::Counting {
        count: n,
        last: Some(n),
    }
}

/// Whether a client of `admin`'s node is held on `SET` (paused).
fn set_is_held(admin: &mut botmesh_redis_harness::AdminConn) -> bool {
    let list = admin.cmd(&["CLIENT", "LIST"]).unwrap();
    list.as_str().unwrap().lines().any(|client| {
        let fields: Vec<&str> = client.split(' ').collect();
        fields.contains(&"cmd=set")
            && fields
                .iter()
                .any(|f| f.starts_with("flags=") && f.contains('b'))
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_cluster() {
    let setup = Setup::Cluster;
    let prefix = prefix("cancelled-write");
    let cluster = shared_cluster();
    // A chat whose dialogue and turn live on different masters: the write can be held while
    // the turn's scripts go through.
    let turn_key = |chat: i64| format!("{prefix}:co:{{t:{chat}}}:q");
    let chat = (1..1000)
        .map(|i| -1_000_000_000_000 - i)
        .find(|&chat| {
            cluster.master_for_key(dialogue_key(&prefix, chat)).unwrap()
                != cluster.master_for_key(turn_key(chat)).unwrap()
        })
        .map(ChatId)
        .unwrap();
    // The dialogue's writes and the turns on clients of their own.
    let storage = setup.storage(&prefix, Json).await;
    let turns_store = setup.storage(&prefix, Json).await;
    let other = setup.storage(&prefix, Json).await;
    let options = TurnOptions {
        wait_timeout: Duration::from_millis(600),
        ..quick_turns()
    };
    let heartbeat = Duration::from_secs(5);
    let a = ChatTurns::start_with(
        turns_store.store(),
        format!("{prefix}-a"),
        options,
        heartbeat,
    )
    .await
    .unwrap();
    let b = ChatTurns::start_with(other.store(), format!("{prefix}-b"), options, heartbeat)
        .await
        .unwrap();
    Arc::clone(&storage)
        .update_dialogue(chat, count(1))
        .await
        .unwrap();

    // The dialogue's master holds writes for a while: A's write stays on its way.
    let master = cluster
        .master_for_key(dialogue_key(&prefix, chat.0))
        .unwrap();
    let mut admin = cluster.conn(master).unwrap();
    assert!(admin
        .cmd(&["CLIENT", "PAUSE", "5000", "WRITE"])
        .unwrap()
        .is_ok());
    let handler = tokio::spawn({
        let (a, storage) = (a.clone(), Arc::clone(&storage));
        async move {
            a.run(chat, |_| async move {
                Arc::clone(&storage).update_dialogue(chat, count(2)).await
            })
            .await
        }
    });
    let deadline = Instant::now() + Duration::from_secs(4);
    while !set_is_held(&mut admin) {
        assert!(
            Instant::now() < deadline,
            "A's write never reached the paused master"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    handler.abort();
    assert!(handler.await.unwrap_err().is_cancelled());

    // B's wait gives up: the turn stays A's (it was given back at once before, and B could
    // read count 1 and write over A's late count 2 or have it land over B's).
    let waited = b.acquire(chat).await;
    assert!(
        matches!(waited, Err(TurnError::Acquire { .. })),
        "{waited:?}"
    );
    assert!(admin.cmd(&["CLIENT", "UNPAUSE"]).unwrap().is_ok());
    // A's write lands once the master takes writes again.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let stored: Option<State> = Arc::clone(&storage).get_dialogue(chat).await.unwrap();
        if stored == Some(count(2)) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "A's write never landed: {stored:?}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    for s in [storage, turns_store, other] {
        s.close().await;
    }
}
