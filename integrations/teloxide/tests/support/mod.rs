//! What the suites share: where they run (a single node in either layout, or the shared 3 x 1
//! cluster), the dialogue they keep, and a raw look at a dialogue's key through the harness.
#![allow(dead_code, missing_docs, clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use botmesh_redis_harness::{shared_cluster, shared_single, unique_prefix, AdminConn};
use botmesh_redis_teloxide::{ChatTurns, DialogueStorage, StorageOptions};
use botmesh_redis_tokio::{Client, ClientOptions, Layout, TurnOptions};
use serde::{Deserialize, Serialize};

/// Where a suite runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Setup {
    /// The shared single node, legacy layout (what `DialogueStorage::open` picks).
    SingleLegacy,
    /// The shared single node, cluster layout.
    SingleCluster,
    /// The shared 3 x 1 cluster (cluster layout).
    Cluster,
}

pub(crate) const SETUPS: [Setup; 3] = [Setup::SingleLegacy, Setup::SingleCluster, Setup::Cluster];

impl Setup {
    pub(crate) fn client_options(self) -> ClientOptions {
        match self {
            Setup::SingleLegacy | Setup::SingleCluster => ClientOptions::url(shared_single().url()),
            Setup::Cluster => ClientOptions::cluster(shared_cluster().seeds()),
        }
    }

    pub(crate) fn storage_options(self, prefix: &str) -> StorageOptions {
        match self {
            Setup::SingleCluster => StorageOptions::new(prefix).layout(Layout::Cluster),
            Setup::SingleLegacy | Setup::Cluster => StorageOptions::new(prefix),
        }
    }

    /// A storage with its own client, under `prefix`.
    pub(crate) async fn storage<S>(self, prefix: &str, serializer: S) -> Arc<DialogueStorage<S>> {
        DialogueStorage::open_with(
            self.client_options(),
            self.storage_options(prefix),
            serializer,
        )
        .await
        .unwrap()
    }

    /// An admin connection to the node holding `key`.
    pub(crate) fn conn_for_key(self, key: &str) -> AdminConn {
        match self {
            Setup::SingleLegacy | Setup::SingleCluster => shared_single().conn().unwrap(),
            Setup::Cluster => shared_cluster().conn_for_key(key).unwrap(),
        }
    }
}

/// A fresh prefix for one test.
pub(crate) fn prefix(name: &str) -> String {
    unique_prefix(&format!("teloxide-{name}"))
}

/// The key of a chat's dialogue: the store's conversation key, the same in both layouts.
pub(crate) fn dialogue_key(prefix: &str, chat: i64) -> String {
    format!("{prefix}:conv:{chat}")
}

/// A dialogue as a bot keeps it: a state machine with data.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum State {
    #[default]
    Start,
    ReceiveName,
    ReceiveAge {
        name: String,
    },
    Counting {
        count: u64,
        last: Option<u64>,
    },
}

/// Turn options for tests: short polls, so queued turns follow each other quickly.
pub(crate) fn quick_turns() -> TurnOptions {
    TurnOptions {
        ttl: Duration::from_secs(10),
        poll_interval: Duration::from_millis(2),
        claim_timeout: Duration::from_secs(3),
        wait_timeout: Duration::from_secs(60),
        idle_lifetime: Duration::from_secs(600),
    }
}

/// Turns for `replica` on the storage's store.
pub(crate) async fn turns<S>(storage: &DialogueStorage<S>, replica: &str) -> ChatTurns {
    ChatTurns::start_with(
        storage.store(),
        replica,
        quick_turns(),
        Duration::from_secs(2),
    )
    .await
    .unwrap()
}

/// A client of its own for `setup`.
pub(crate) async fn client(setup: Setup) -> Client {
    Client::connect(setup.client_options()).await.unwrap()
}

/// Whether a failed call may have run (its reply was lost, or it timed out after being sent).
pub(crate) fn outcome_unknown(e: &botmesh_redis_tokio::Error) -> bool {
    matches!(
        e,
        botmesh_redis_tokio::Error::ReplyLost { .. }
            | botmesh_redis_tokio::Error::Timeout {
                outcome_unknown: true
            }
    )
}

/// One update's read-modify-write of a chat's counting dialogue, as a handler does it: read,
/// work for `work` (the handler's own processing), write back one more.
pub(crate) async fn count_one<S>(
    storage: &Arc<DialogueStorage<S>>,
    chat: teloxide::types::ChatId,
    update: u64,
    work: Duration,
) -> Result<(), Rmw>
where
    S: teloxide::dispatching::dialogue::Serializer<State> + Send + Sync + 'static,
    <S as teloxide::dispatching::dialogue::Serializer<State>>::Error:
        std::fmt::Debug + std::fmt::Display,
{
    use teloxide::dispatching::dialogue::Storage;
    let state: Option<State> = Arc::clone(storage)
        .get_dialogue(chat)
        .await
        .map_err(|e| Rmw::NotWritten(e.to_string()))?;
    let count = match state {
        Some(State::Counting { count, .. }) => count,
        _ => 0,
    };
    if !work.is_zero() {
        // The handler's own work between its read and its write (not a synchronisation).
        tokio::time::sleep(work).await;
    }
    let next = State::Counting {
        count: count + 1,
        last: Some(update),
    };
    match Arc::clone(storage).update_dialogue(chat, next).await {
        Ok(()) => Ok(()),
        Err(botmesh_redis_teloxide::DialogueStorageError::RedisError(e)) if outcome_unknown(&e) => {
            Err(Rmw::Unknown(e.to_string()))
        }
        Err(e) => Err(Rmw::NotWritten(e.to_string())),
    }
}

/// How a read-modify-write failed.
#[derive(Debug)]
pub(crate) enum Rmw {
    /// Nothing was written: the update may be handled again.
    NotWritten(String),
    /// The write may or may not have happened.
    Unknown(String),
}

/// The count a chat's dialogue holds.
pub(crate) async fn count_of<S>(
    storage: &Arc<DialogueStorage<S>>,
    chat: teloxide::types::ChatId,
) -> u64
where
    S: teloxide::dispatching::dialogue::Serializer<State> + Send + Sync + 'static,
    <S as teloxide::dispatching::dialogue::Serializer<State>>::Error:
        std::fmt::Debug + std::fmt::Display,
{
    use teloxide::dispatching::dialogue::Storage;
    match Arc::clone(storage).get_dialogue(chat).await.unwrap() {
        Some(State::Counting { count, .. }) => count,
        _ => 0,
    }
}
