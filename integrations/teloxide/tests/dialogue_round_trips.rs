//! get / update / remove of dialogues on real servers, in both layouts (a single node in each,
//! and the shared 3 x 1 cluster), with every serializer this build has, as teloxide's own
//! storages behave: a missing dialogue reads as `None`, and removing it is `DialogueNotFound`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::fmt::{Debug, Display};
use std::sync::Arc;
use std::time::Duration;

use botmesh_redis_teloxide::{DialogueStorage, DialogueStorageError};
use botmesh_redis_tokio::{Layout, Store, StoreOptions};
use support::{client, dialogue_key, prefix, Setup, State, SETUPS};
use teloxide::dispatching::dialogue::serializer::Json;
use teloxide::dispatching::dialogue::{Serializer, Storage};
use teloxide::types::ChatId;

/// Chats a bot meets: a user, a group and a supergroup (negative, past 2^32), and the extremes.
const CHATS: [i64; 5] = [42, -4_200, -1_001_234_567_890, i64::MAX, i64::MIN];

async fn round_trips<S>(setup: Setup, serializer: S, name: &str)
where
    S: Serializer<State> + Send + Sync + 'static,
    <S as Serializer<State>>::Error: Debug + Display,
{
    let prefix = prefix(name);
    let storage = setup.storage(&prefix, serializer).await;
    let states = [
        State::Start,
        State::ReceiveName,
        State::ReceiveAge { name: "Ana".into() },
        State::Counting {
            count: 7,
            last: Some(6),
        },
    ];
    for chat in CHATS {
        let id = ChatId(chat);
        let none: Option<State> = Arc::clone(&storage).get_dialogue(id).await.unwrap();
        assert_eq!(none, None, "{setup:?} chat {chat}: no dialogue yet");
        for state in &states {
            Arc::clone(&storage)
                .update_dialogue(id, state.clone())
                .await
                .unwrap();
            let read = Arc::clone(&storage).get_dialogue(id).await.unwrap();
            assert_eq!(read.as_ref(), Some(state), "{setup:?} chat {chat}");
        }
        // The key is the store's conversation of the chat id in decimal, with no TTL.
        let key = dialogue_key(&prefix, chat);
        let mut conn = setup.conn_for_key(&key);
        assert_eq!(
            conn.cmd(&["EXISTS", key.as_str()]).unwrap().as_int(),
            Some(1),
            "{key}"
        );
        assert_eq!(
            conn.cmd(&["PTTL", key.as_str()]).unwrap().as_int(),
            Some(-1),
            "{key}"
        );

        <DialogueStorage<S> as Storage<State>>::remove_dialogue(Arc::clone(&storage), id)
            .await
            .unwrap();
        let gone: Option<State> = Arc::clone(&storage).get_dialogue(id).await.unwrap();
        assert_eq!(gone, None);
        let again =
            <DialogueStorage<S> as Storage<State>>::remove_dialogue(Arc::clone(&storage), id).await;
        assert!(
            matches!(again, Err(DialogueStorageError::DialogueNotFound)),
            "{setup:?}: removing a missing dialogue is DialogueNotFound, as in teloxide; got {again:?}"
        );
    }
    storage.close().await;
}

#[tokio::test]
async fn json_round_trips_in_every_setup() {
    for setup in SETUPS {
        round_trips(setup, Json, "json").await;
    }
}

#[cfg(feature = "cbor-serializer")]
#[tokio::test]
async fn cbor_round_trips_in_every_setup() {
    for setup in SETUPS {
        round_trips(
            setup,
            teloxide::dispatching::dialogue::serializer::Cbor,
            "cbor",
        )
        .await;
    }
}

#[cfg(feature = "bincode-serializer")]
#[tokio::test]
async fn bincode_round_trips_in_every_setup() {
    for setup in SETUPS {
        round_trips(
            setup,
            teloxide::dispatching::dialogue::serializer::Bincode,
            "bincode",
        )
        .await;
    }
}

/// A value the serializer cannot read is the serializer's error, not a panic or `None`.
#[tokio::test]
async fn unreadable_dialogue_is_a_serde_error() {
    for setup in SETUPS {
        let prefix = prefix("garbage");
        let storage = setup.storage(&prefix, Json).await;
        let key = dialogue_key(&prefix, 7);
        setup
            .conn_for_key(&key)
            .cmd(&["SET", key.as_str(), "not json {"])
            .unwrap();
        let read: Result<Option<State>, _> = Arc::clone(&storage).get_dialogue(ChatId(7)).await;
        assert!(
            matches!(read, Err(DialogueStorageError::SerdeError(_))),
            "{read:?}"
        );
        storage.close().await;
    }
}

/// With a TTL every update renews it; without, an update clears an earlier one.
#[tokio::test]
async fn ttl_is_set_by_every_update() {
    for setup in SETUPS {
        let prefix = prefix("ttl");
        let storage = DialogueStorage::open_with(
            setup.client_options(),
            setup
                .storage_options(&prefix)
                .ttl(Some(Duration::from_secs(300))),
            Json,
        )
        .await
        .unwrap();
        assert_eq!(storage.ttl(), Some(Duration::from_secs(300)));
        Arc::clone(&storage)
            .update_dialogue(ChatId(1), State::ReceiveName)
            .await
            .unwrap();
        let key = dialogue_key(&prefix, 1);
        let pttl = setup
            .conn_for_key(&key)
            .cmd(&["PTTL", key.as_str()])
            .unwrap()
            .as_int();
        assert!(
            matches!(pttl, Some(t) if t > 290_000 && t <= 300_000),
            "{setup:?}: PTTL {pttl:?}"
        );
        storage.close().await;

        let forever = setup.storage(&prefix, Json).await;
        Arc::clone(&forever)
            .update_dialogue(ChatId(1), State::ReceiveName)
            .await
            .unwrap();
        let pttl = setup
            .conn_for_key(&key)
            .cmd(&["PTTL", key.as_str()])
            .unwrap()
            .as_int();
        assert_eq!(
            pttl,
            Some(-1),
            "{setup:?}: an update without a TTL keeps none"
        );
        forever.close().await;
    }
}

/// A storage on the bot's own store shares its client and sees the store's conversations: the
/// same data through both APIs.
#[tokio::test]
async fn storage_shares_the_store_and_its_client() {
    for setup in SETUPS {
        let prefix = prefix("shared");
        let client = client(setup).await;
        let options = match setup {
            Setup::SingleCluster => StoreOptions::new(prefix.clone()).layout(Layout::Cluster),
            _ => StoreOptions::new(prefix.clone()),
        };
        let store = Store::new(client.clone(), options).unwrap();
        store.start().await.unwrap();
        let storage = DialogueStorage::from_store(store.clone(), Json, None);
        Arc::clone(&storage)
            .update_dialogue(ChatId(-5), State::ReceiveAge { name: "Bo".into() })
            .await
            .unwrap();
        let raw = store.get_conversation("-5").await.unwrap().unwrap();
        assert_eq!(
            serde_json::from_slice::<State>(&raw).unwrap(),
            State::ReceiveAge { name: "Bo".into() }
        );
        assert_eq!(storage.store().layout(), store.layout());

        // And a storage on the same client with another prefix keeps its dialogues apart.
        let other = DialogueStorage::from_client(
            client.clone(),
            setup.storage_options(&format!("{prefix}-other")),
            Json,
        )
        .await
        .unwrap();
        let none: Option<State> = Arc::clone(&other).get_dialogue(ChatId(-5)).await.unwrap();
        assert_eq!(none, None);
        client.close().await;
    }
}

/// `open` is the drop-in for `RedisStorage::open(url, serializer)`: legacy layout, the default
/// prefix; `open_cluster` the same on a cluster, in the cluster layout. Both are erasable into
/// teloxide's `ErasedStorage`, as bots that pick a storage at run time do.
#[tokio::test]
async fn open_and_open_cluster_are_drop_ins() {
    let single = DialogueStorage::open(&botmesh_redis_harness::shared_single().url(), Json)
        .await
        .unwrap();
    assert_eq!(single.store().layout(), Layout::Legacy);
    assert_eq!(
        single.store().keyspace().prefix(),
        botmesh_redis_teloxide::DEFAULT_PREFIX
    );
    let cluster =
        DialogueStorage::open_cluster(botmesh_redis_harness::shared_cluster().seeds(), Json)
            .await
            .unwrap();
    assert_eq!(cluster.store().layout(), Layout::Cluster);
    let erased = <DialogueStorage<Json> as Storage<State>>::erase(Arc::clone(&cluster));
    let chat = ChatId(-987_654_321_012);
    Arc::clone(&erased)
        .update_dialogue(chat, State::ReceiveName)
        .await
        .unwrap();
    assert_eq!(
        Arc::clone(&erased).get_dialogue(chat).await.unwrap(),
        Some(State::ReceiveName)
    );
    erased.remove_dialogue(chat).await.unwrap();
    single.close().await;
    cluster.close().await;
}

/// A client that cannot connect fails `open` with the store's typed error.
#[tokio::test]
async fn open_of_a_dead_address_is_a_redis_error() {
    let refused = DialogueStorage::open("redis://127.0.0.1:1", Json).await;
    assert!(
        matches!(refused, Err(DialogueStorageError::RedisError(_))),
        "{refused:?}"
    );
}

/// The alias under teloxide's name: the bot's code, with only the `use` line changed.
#[tokio::test]
async fn the_use_line_is_the_whole_swap() {
    use botmesh_redis_teloxide::RedisStorage;
    use teloxide::dispatching::dialogue::Dialogue;

    type MyDialogue = Dialogue<State, RedisStorage<Json>>;
    let storage = RedisStorage::open(&botmesh_redis_harness::shared_single().url(), Json)
        .await
        .unwrap();
    let chat = ChatId(-424_242);
    let dialogue = MyDialogue::new(Arc::clone(&storage), chat);
    dialogue.update(State::ReceiveName).await.unwrap();
    assert_eq!(dialogue.get().await.unwrap(), Some(State::ReceiveName));
    dialogue.exit().await.unwrap();
    assert!(matches!(
        dialogue.exit().await,
        Err(botmesh_redis_teloxide::RedisStorageError::DialogueNotFound)
    ));
    storage.close().await;
}
