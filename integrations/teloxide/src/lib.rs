//! # botmesh-redis-teloxide
//!
//! A [teloxide] dialogue storage on botmesh-redis: the same bot, one line changed, keeps its
//! dialogues on a Redis node or a Redis Cluster shared by several replicas.
//!
//! - [`DialogueStorage`] implements teloxide's `Storage<D>` over the store's conversations
//!   (`<prefix>:conv:<chat id>`), with teloxide's serializers (`Json`; `Cbor` and `Bincode`
//!   with the features `cbor-serializer` and `bincode-serializer`) and an optional TTL. Its
//!   constructors mirror `RedisStorage::open(url, serializer)`: [`DialogueStorage::open`],
//!   [`DialogueStorage::open_cluster`], [`DialogueStorage::open_with`], and
//!   [`DialogueStorage::from_client`] / [`DialogueStorage::from_store`] to share a client the
//!   bot already has. It is also exported as [`RedisStorage`], teloxide's name, so that a bot
//!   swaps the `use` line and its code stays as it is. The dialogues teloxide's storage already
//!   holds (keyed by the bare chat id) are not read: move them first (`docs/teloxide.md`).
//! - [`ChatTurns`] makes one chat's updates exclusive across replicas: a dptree handler
//!   ([`ChatTurns::handler`]) holds the chat's turn while the dialogue is read, the endpoint runs
//!   and the dialogue is written back. teloxide orders one chat's updates within one
//!   dispatcher; turns order them across processes.
//!
//! ```no_run
//! use botmesh_redis_teloxide::{ChatTurns, DialogueStorage};
//! use teloxide::dispatching::dialogue::serializer::Json;
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
//! // Was: let storage = RedisStorage::open("redis://127.0.0.1:6379", Json).await?;
//! let storage = DialogueStorage::open_cluster(["10.0.0.1:6379", "10.0.0.2:6379"], Json).await?;
//! let turns = ChatTurns::start(storage.store(), "replica-1").await?;
//! # let _ = turns;
//! # Ok(()) }
//! ```
//!
//! `docs/teloxide.md` in the repository has the whole story: the swap, replicas, turns,
//! serializers, TTL and limits.
//!
//! [teloxide]: https://docs.rs/teloxide
#![forbid(unsafe_code)]

mod storage;
mod turns;

pub use storage::{
    DialogueStorage, DialogueStorageError, RedisStorage, RedisStorageError, StorageOptions,
    DEFAULT_PREFIX,
};
pub use turns::{ChatTurns, TurnError, DEFAULT_HEARTBEAT_TTL};
