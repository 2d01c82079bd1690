//! The dialogue storage: teloxide's `Storage<D>` over the store's conversations.

use std::convert::Infallible;
use std::fmt::{self, Debug, Display};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use botmesh_redis_tokio::{Client, ClientOptions, Error, Layout, Store, StoreOptions};
use bytes::Bytes;
use teloxide::dispatching::dialogue::{Serializer, Storage};
use teloxide::types::ChatId;

use crate::turns::WriteInFlight;

/// The future type of teloxide's `Storage` methods.
type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

/// The prefix of [`DialogueStorage::open`] and [`DialogueStorage::open_cluster`]: dialogues
/// live at `teloxide:conv:<chat id>`.
pub const DEFAULT_PREFIX: &str = "teloxide";

/// An error of [`DialogueStorage`]: the same cases as teloxide's `RedisStorageError`, with
/// botmesh-redis's typed [`Error`] in place of redis-rs's.
///
/// `SE` is the serializer's error; the constructors, which serialize nothing, use
/// [`Infallible`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DialogueStorageError<SE>
where
    SE: Debug + Display,
{
    /// The serializer could not write or read the dialogue.
    #[error("parsing/serializing error: {0}")]
    SerdeError(SE),
    /// Redis, or the way to it, failed (see [`Error`]: whether the request ran is in the
    /// variant, e.g. [`Error::ReplyLost`]).
    #[error("error from Redis: {0}")]
    RedisError(#[source] Error),
    /// [`Storage::remove_dialogue`] of a chat that has no dialogue, as teloxide's storages
    /// answer.
    #[error("dialogue not found")]
    DialogueNotFound,
    /// The write ran inside the chat's turn ([`ChatTurns`](crate::ChatTurns)), but the turn
    /// was no longer this replica's: the handler outlived the turn TTL, and another replica may
    /// have handled the chat since. The dialogue was neither written nor removed, so the other
    /// replica's update stands.
    #[error("the turn of chat {chat} was lost: the dialogue was not written")]
    TurnLost {
        /// The chat.
        chat: ChatId,
    },
}

impl<SE: Debug + Display> From<Error> for DialogueStorageError<SE> {
    fn from(e: Error) -> Self {
        DialogueStorageError::RedisError(e)
    }
}

/// Confirms the chat's turn when this task holds it (see `turns::confirm_held`).
async fn confirm_turn<SE: Debug + Display>(chat: ChatId) -> Result<(), DialogueStorageError<SE>> {
    match crate::turns::confirm_held(chat).await {
        Ok(()) => Ok(()),
        Err(Error::NotHolder { .. }) => Err(DialogueStorageError::TurnLost { chat }),
        Err(e) => Err(DialogueStorageError::RedisError(e)),
    }
}

/// How a [`DialogueStorage`] keeps its dialogues: the key prefix, the layout and a TTL.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StorageOptions {
    prefix: String,
    layout: Option<Layout>,
    ttl: Option<Duration>,
}

impl StorageOptions {
    /// Dialogues under `prefix` (`<prefix>:conv:<chat id>`), in the layout the client implies
    /// (cluster client: `cluster:v1`; single node: `legacy`), never expiring.
    pub fn new(prefix: impl Into<String>) -> Self {
        StorageOptions {
            prefix: prefix.into(),
            layout: None,
            ttl: None,
        }
    }

    /// Chooses the layout, e.g. [`Layout::Cluster`] on a single node that is on its way to a
    /// cluster. The conversation key is the same in both; the layout decides what
    /// [`Store::start`] checks and what the turns' keys are.
    pub fn layout(mut self, layout: Layout) -> Self {
        self.layout = Some(layout);
        self
    }

    /// Every update of a dialogue makes it expire `ttl` later (`None`, the default: never). A
    /// chat silent for longer starts again from the default state.
    pub fn ttl(mut self, ttl: Option<Duration>) -> Self {
        self.ttl = ttl;
        self
    }

    fn store_options(&self) -> StoreOptions {
        let options = StoreOptions::new(self.prefix.clone());
        match self.layout {
            Some(layout) => options.layout(layout),
            None => options,
        }
    }
}

/// A teloxide dialogue storage on botmesh-redis: a `Storage<D>` for one Redis node or a Redis
/// Cluster, shared by every replica of a bot.
///
/// A chat's dialogue is the store's conversation of the chat id in decimal
/// (`<prefix>:conv:-1001234567890`), one key in both layouts, written with the serializer
/// given (`Json`, and `Cbor` and `Bincode` with this crate's features). Every call is one
/// command on the client's shared, pipelined connections: concurrent chats do not wait for
/// each other, and on a cluster each call goes to the master of the chat's slot.
///
/// ```no_run
/// use teloxide::dispatching::dialogue::serializer::Json;
/// use botmesh_redis_teloxide::DialogueStorage;
///
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// // Was: RedisStorage::open("redis://127.0.0.1:6379", Json).await?
/// let storage = DialogueStorage::open("redis://127.0.0.1:6379", Json).await?;
/// // On a cluster: DialogueStorage::open_cluster(["10.0.0.1:6379", "10.0.0.2:6379"], Json)
/// # let _ = storage;
/// # Ok(()) }
/// ```
///
/// Reads and writes are single commands, not a transaction: a replica that reads a dialogue,
/// computes and writes it back can overwrite another replica's update of the same chat. Take
/// the chat's turn around the handler to make that exclusive ([`ChatTurns`]).
///
/// [`ChatTurns`]: crate::ChatTurns
pub struct DialogueStorage<S> {
    store: Store<Client>,
    serializer: S,
    ttl: Option<Duration>,
}

/// [`DialogueStorage`] under the name of teloxide's storage, so that a bot which names the type
/// swaps one `use` line: `use teloxide::dispatching::dialogue::RedisStorage;` becomes
/// `use botmesh_redis_teloxide::RedisStorage;`, and `RedisStorage::open(url, Json)`,
/// `Dialogue<State, RedisStorage<Json>>` and the schema stay as they are. The dialogues that
/// teloxide's storage already holds (at the bare chat id) are not read by this one: move them
/// first (`docs/teloxide.md`), or every chat starts again from its default state.
pub type RedisStorage<S> = DialogueStorage<S>;

/// [`DialogueStorageError`] under the name of teloxide's storage error.
pub type RedisStorageError<SE> = DialogueStorageError<SE>;

impl<S> Debug for DialogueStorage<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DialogueStorage")
            .field("store", &self.store)
            .field("ttl", &self.ttl)
            .finish_non_exhaustive()
    }
}

impl<S> DialogueStorage<S> {
    /// Connects to the single node at `url` (`redis://[user[:password]@]host:port`,
    /// `rediss://` for TLS, or `unix:///path` for its Unix socket) and keeps dialogues under [`DEFAULT_PREFIX`] in the legacy layout:
    /// the drop-in for teloxide's `RedisStorage::open(url, serializer)`.
    pub async fn open(
        url: &str,
        serializer: S,
    ) -> Result<Arc<Self>, DialogueStorageError<Infallible>> {
        Self::open_with(
            ClientOptions::url(url),
            StorageOptions::new(DEFAULT_PREFIX),
            serializer,
        )
        .await
    }

    /// Connects to the Redis Cluster of these root nodes (`host:port` or `redis://...`; the
    /// rest are discovered) and keeps dialogues under [`DEFAULT_PREFIX`] in the cluster layout.
    pub async fn open_cluster<N: Into<String>>(
        root_nodes: impl IntoIterator<Item = N>,
        serializer: S,
    ) -> Result<Arc<Self>, DialogueStorageError<Infallible>> {
        Self::open_with(
            ClientOptions::cluster(root_nodes),
            StorageOptions::new(DEFAULT_PREFIX),
            serializer,
        )
        .await
    }

    /// Connects with `client` options (timeouts, credentials, TLS) and keeps dialogues as
    /// `options` say. The client is this storage's own; [`DialogueStorage::store`] shares it.
    pub async fn open_with(
        client: ClientOptions,
        options: StorageOptions,
        serializer: S,
    ) -> Result<Arc<Self>, DialogueStorageError<Infallible>> {
        let client = Client::connect(client).await?;
        match Self::from_client(client.clone(), options, serializer).await {
            Ok(storage) => Ok(storage),
            Err(e) => {
                client.close().await;
                Err(e)
            }
        }
    }

    /// Keeps dialogues on a client the bot already has (shared with its other uses of the
    /// store), as `options` say; starts the store ([`Store::start`]).
    pub async fn from_client(
        client: Client,
        options: StorageOptions,
        serializer: S,
    ) -> Result<Arc<Self>, DialogueStorageError<Infallible>> {
        let store = Store::new(client, options.store_options())?;
        store.start().await?;
        Ok(Arc::new(DialogueStorage {
            store,
            serializer,
            ttl: options.ttl,
        }))
    }

    /// Keeps dialogues in the conversations of a store the bot already started, with the
    /// store's client, prefix and layout; every update expires the dialogue after `ttl`
    /// (`None`: never).
    pub fn from_store(store: Store<Client>, serializer: S, ttl: Option<Duration>) -> Arc<Self> {
        Arc::new(DialogueStorage {
            store,
            serializer,
            ttl,
        })
    }

    /// The store under this storage: its client, prefix and layout, for the rest of the bot's
    /// state and for its coordinator (`store().coordinator(replica)`, see [`ChatTurns`]).
    ///
    /// [`ChatTurns`]: crate::ChatTurns
    pub fn store(&self) -> &Store<Client> {
        &self.store
    }

    /// The TTL every update sets.
    pub fn ttl(&self) -> Option<Duration> {
        self.ttl
    }

    /// Closes the store and its client gracefully ([`Store::close`]: writes in flight finish),
    /// and so every storage and store that shares the client.
    pub async fn close(&self) {
        self.store.close().await;
    }
}

/// The conversation id of a chat: its id in decimal.
fn chat_key(ChatId(id): ChatId) -> String {
    id.to_string()
}

impl<S, D> Storage<D> for DialogueStorage<S>
where
    S: Serializer<D> + Send + Sync + 'static,
    D: Send + 'static,
    <S as Serializer<D>>::Error: Debug + Display,
{
    type Error = DialogueStorageError<<S as Serializer<D>>::Error>;

    /// Deletes the chat's dialogue; [`DialogueStorageError::DialogueNotFound`] when there was
    /// none, as teloxide's storages answer. Inside the chat's turn, confirms the turn first.
    fn remove_dialogue(self: Arc<Self>, chat_id: ChatId) -> BoxFuture<Result<(), Self::Error>>
    where
        D: Send + 'static,
    {
        Box::pin(async move {
            confirm_turn(chat_id).await?;
            // Until its outcome is known, the turn is not given back: a write whose outcome is
            // unknown, or whose future is dropped, may still land, over the next replica's.
            let write = WriteInFlight::begin(chat_id);
            let deleted = self.store.delete_conversation(&chat_key(chat_id)).await;
            match write.end(deleted)? {
                true => Ok(()),
                false => Err(DialogueStorageError::DialogueNotFound),
            }
        })
    }

    /// Writes the chat's dialogue, with the storage's TTL. Inside the chat's turn, confirms the
    /// turn first: [`DialogueStorageError::TurnLost`] when it was lost.
    fn update_dialogue(
        self: Arc<Self>,
        chat_id: ChatId,
        dialogue: D,
    ) -> BoxFuture<Result<(), Self::Error>>
    where
        D: Send + 'static,
    {
        Box::pin(async move {
            let bytes = self
                .serializer
                .serialize(&dialogue)
                .map_err(DialogueStorageError::SerdeError)?;
            confirm_turn(chat_id).await?;
            let write = WriteInFlight::begin(chat_id);
            let written = self
                .store
                .set_conversation(&chat_key(chat_id), Bytes::from(bytes), self.ttl)
                .await;
            write.end(written)?;
            Ok(())
        })
    }

    /// Reads the chat's dialogue; `None` when it has none.
    fn get_dialogue(self: Arc<Self>, chat_id: ChatId) -> BoxFuture<Result<Option<D>, Self::Error>> {
        Box::pin(async move {
            match self.store.get_conversation(&chat_key(chat_id)).await? {
                Some(bytes) => self
                    .serializer
                    .deserialize(&bytes)
                    .map(Some)
                    .map_err(DialogueStorageError::SerdeError),
                None => Ok(None),
            }
        })
    }
}
