//! The typed async API of the store, written once over any [`Executor`].

use std::ops::RangeBounds;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

use crate::coord::keeper::Keepers;
use crate::coord::{Coordinator, Durability, Leases, Schedules};
use crate::error::{ConfigError, Error};
use crate::executor::{Deployment, Executor, IntoKeyspace};
use crate::keys::{Keyspace, Layout, RecordKind};

use super::typed::Typed;
use super::{
    conv, cursor, delete_chat, guard, messages, records, user, DeletedChat, Message, MessageCursor,
    MessagePage, RecordCursor, RecordPage, Started, UserDataCursor, UserDataPage,
};
use crate::page::Limit;

/// How to build a [`Store`]: the prefix and the layout. Whether the client is a cluster is
/// not an option but the executor's word ([`Executor::deployment`]).
///
/// ```
/// use botmesh_redis_core::StoreOptions;
/// use botmesh_redis_core::{Deployment, Layout};
///
/// // On a cluster client: the cluster layout is the default, and the only one allowed.
/// let default = StoreOptions::new("mybot");
/// assert_eq!(default.resolved_layout(Deployment::Cluster), Layout::Cluster);
/// // On a single node: the legacy layout is the default; opt in to the cluster layout.
/// assert_eq!(default.resolved_layout(Deployment::Single), Layout::Legacy);
/// let migrated = StoreOptions::new("mybot").layout(Layout::Cluster);
/// assert_eq!(migrated.resolved_layout(Deployment::Single), Layout::Cluster);
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoreOptions {
    prefix: String,
    layout: Option<Layout>,
    allow_legacy_data: bool,
}

/// A prefix alone: `connect(client_options, "mybot")`.
impl From<&str> for StoreOptions {
    fn from(prefix: &str) -> Self {
        StoreOptions::new(prefix)
    }
}

impl From<String> for StoreOptions {
    fn from(prefix: String) -> Self {
        StoreOptions::new(prefix)
    }
}

impl StoreOptions {
    /// Options for `prefix`, with the default layout of the client's deployment.
    pub fn new(prefix: impl Into<String>) -> Self {
        StoreOptions {
            prefix: prefix.into(),
            layout: None,
            allow_legacy_data: false,
        }
    }

    /// Chooses the layout. Without it: the cluster layout on a cluster client, else legacy.
    pub fn layout(mut self, layout: Layout) -> Self {
        self.layout = Some(layout);
        self
    }

    /// Lets a cluster-layout store start over legacy-layout keys (see [`Store::start`]).
    pub fn allow_legacy_data(mut self, allow: bool) -> Self {
        self.allow_legacy_data = allow;
        self
    }

    /// The layout these options resolve to on a client of `deployment`: the one chosen, else
    /// the cluster layout on a cluster and the legacy layout on a single node.
    pub fn resolved_layout(&self, deployment: Deployment) -> Layout {
        self.layout
            .unwrap_or_else(|| crate::executor::default_layout(deployment))
    }
}

impl IntoKeyspace for StoreOptions {
    fn into_keyspace(self, deployment: Deployment) -> Result<Keyspace, Error> {
        let layout = self.resolved_layout(deployment);
        Ok(Keyspace::new(layout, self.prefix)?)
    }
}

/// The store of a bot's shared state, over an [`Executor`] such as
/// `botmesh_redis_tokio::Client`. Cheap to clone: clones share the executor.
///
/// Open it with [`Store::open`] (or a driver crate's `connect`), then use it from any task.
///
/// ```no_run
/// use botmesh_redis_core::{Error, Executor, Limit, Store, StoreOptions};
///
/// async fn demo<E: Executor>(client: E) -> Result<(), Error> {
///     let store = Store::open(client, StoreOptions::new("mybot")).await?;
///
///     store.save_message("chat-1", "m1", 1_700_000_000_000, "hello".into()).await?;
///     // Every listing: scope, then the previous page's `next`, then a limit.
///     let mut after = None;
///     loop {
///         let page = store.list_messages("chat-1", .., after.as_ref(), Limit::new(50)?).await?;
///         for message in &page.items {
///             println!("{} {} {:?}", message.time_ms, message.id, message.payload);
///         }
///         match page.next {
///             Some(next) => after = Some(next),
///             None => break,
///         }
///     }
///     store.delete_chat("chat-1").await?;
///     Ok(())
/// }
/// ```
#[derive(Clone, Debug)]
pub struct Store<E> {
    executor: E,
    ks: Keyspace,
    allow_legacy_data: bool,
    /// The heartbeat keepers of the coordinators it built, stopped at [`Store::close`].
    keepers: Arc<Keepers>,
}

impl<E: Executor> Store<E> {
    /// Checks the options and builds the store; nothing is sent. The layout follows the
    /// executor ([`Executor::deployment`]: the cluster layout on a cluster client, else legacy)
    /// unless [`StoreOptions::layout`] chooses one.
    ///
    /// Fails with [`Error::Config`] for the legacy layout on a cluster client, and with
    /// [`Error::Key`] for an empty prefix or a `{` or `}` in a cluster-layout prefix.
    pub fn new(executor: E, options: StoreOptions) -> Result<Self, Error> {
        let deployment = executor.deployment();
        let layout = options.resolved_layout(deployment);
        if layout == Layout::Legacy && deployment == Deployment::Cluster {
            return Err(ConfigError::LegacyLayoutOnCluster { component: "store" }.into());
        }
        let ks = Keyspace::new(layout, options.prefix)?;
        Ok(Store {
            executor,
            ks,
            allow_legacy_data: options.allow_legacy_data,
            keepers: Arc::default(),
        })
    }

    /// Builds the store ([`Store::new`]) and runs its start guard ([`Store::start`]): the one
    /// call a bot makes before using it. The driver crates' `connect` does this over a new
    /// client.
    pub async fn open(executor: E, options: StoreOptions) -> Result<Self, Error> {
        let store = Store::new(executor, options)?;
        let started = store.start().await?;
        tracing::debug!(prefix = store.ks.prefix(), ?started, "store started");
        Ok(store)
    }

    /// The keyspace: prefix, layout, and every key name.
    pub fn keyspace(&self) -> &Keyspace {
        &self.ks
    }

    /// The coordinator of `replica` (locks, turns, leaderships, heartbeats) over this store's
    /// executor, prefix and layout. `replica` must be unique among the bot's live processes
    /// (see [`Coordinator::new`]).
    pub fn coordinator(&self, replica: impl Into<String>) -> Result<Coordinator<E>, Error> {
        Ok(
            Coordinator::new(self.executor.clone(), self.ks.clone(), replica)?
                .with_keepers(Arc::clone(&self.keepers)),
        )
    }

    /// The schedules with fencing tokens, under this store's prefix and layout.
    pub fn schedules(&self) -> Result<Schedules<E>, Error> {
        Schedules::new(self.executor.clone(), self.ks.clone())
    }

    /// The leases, under this store's prefix and layout.
    pub fn leases(&self) -> Result<Leases<E>, Error> {
        Leases::new(self.executor.clone(), self.ks.clone())
    }

    /// The durability table `table` (inbound journal and outbox), under this store's prefix
    /// and layout; fails for an empty name or one with braces.
    pub fn durability(&self, table: impl Into<String>) -> Result<Durability<E>, Error> {
        Durability::new(self.executor.clone(), self.ks.clone(), table)
    }

    /// Closes the store and its client gracefully, within [`Store::CLOSE_GRACE`]: the
    /// heartbeat keepers of its coordinators stop and their heartbeats are removed, new calls
    /// are refused ([`Error::Closed`]), calls in flight finish (a write still unanswered at the
    /// end of the grace is [`Error::ReplyLost`]: its outcome is unknown), and the connections
    /// close. Every clone of the store and of its client is closed with it.
    pub async fn close(&self) {
        self.close_within(Self::CLOSE_GRACE).await
    }

    /// How long [`Store::close`] lets calls in flight finish.
    pub const CLOSE_GRACE: Duration = Duration::from_secs(10);

    /// [`Store::close`] with a grace of your own.
    pub async fn close_within(&self, grace: Duration) {
        self.keepers.stop_all(&self.executor).await;
        self.executor.shutdown(grace).await;
    }

    /// The layout.
    pub fn layout(&self) -> Layout {
        self.ks.layout()
    }

    /// The executor.
    pub fn executor(&self) -> &E {
        &self.executor
    }

    /// This store, writing and reading chats, contacts, checkpoints, user data and
    /// conversations as values of the user's types through `codec`, such as
    /// `codec::Json` (feature `json`). Nothing is sent; the store is
    /// cloned, which is cheap. See [`Typed`] and [`crate::codec`].
    ///
    /// ```no_run
    /// # #[cfg(feature = "json")]
    /// # mod example {
    /// use botmesh_redis_core::codec::Json;
    /// use botmesh_redis_core::Store;
    /// use botmesh_redis_core::{Error, Executor};
    ///
    /// #[derive(serde::Serialize, serde::Deserialize)]
    /// struct Prefs {
    ///     lang: String,
    /// }
    ///
    /// async fn demo<E: Executor>(store: &Store<E>, user: &str) -> Result<(), Error> {
    ///     let typed = store.typed(Json);
    ///     typed.set_user_data(user, "prefs", "all", &Prefs { lang: "pt-BR".into() }, None).await?;
    ///     let prefs: Option<Prefs> = typed.get_user_data(user, "prefs", "all").await?;
    ///     assert_eq!(prefs.map(|p| p.lang).as_deref(), Some("pt-BR"));
    ///     Ok(())
    /// }
    /// # }
    /// ```
    pub fn typed<C>(&self, codec: C) -> Typed<E, C> {
        Typed::new(self.clone(), codec)
    }

    /// The `start()` guard; call it once before using the store.
    ///
    /// Cluster layout: with the layout marker present, starts. Without it, checks up to 10,000
    /// keys under the prefix for legacy-layout keys: if there are some, fails with
    /// [`Error::LegacyDataFound`], which names them and the migration,
    /// [`migrate_to_cluster_layout`](crate::migrate::migrate_to_cluster_layout) (unless
    /// `allow_legacy_data`, which starts without writing the marker); if there are none, writes
    /// the marker. Legacy layout: starts, with a warning in the log when the prefix carries the
    /// marker.
    ///
    /// Both layouts also log a warning when the server's `maxmemory-policy` is not
    /// `noeviction`: an evicted fence, term or token counter would hand out a number again
    /// (`docs/operations.md`).
    pub async fn start(&self) -> Result<Started, Error> {
        let started = self
            .executor
            .run(guard::start(&self.ks, self.allow_legacy_data))
            .await?;
        match self.executor.run(guard::eviction_policy()?).await {
            Ok(Some(policy)) if policy != "noeviction" => tracing::warn!(
                %policy,
                "maxmemory-policy is not noeviction: Redis may evict fence, term and token \
                 counters under memory pressure, and hand their numbers out again"
            ),
            Ok(_) => {}
            // Managed services often disable CONFIG; the check is advice, not a gate.
            Err(e) => tracing::debug!(error = %e, "could not read maxmemory-policy"),
        }
        Ok(started)
    }

    // --- messages ----------------------------------------------------------------------------

    /// Saves a message (its item and its log entry, atomically). Saving an existing id replaces
    /// its payload and time. Yields `true` when the message is new. `time_ms` (milliseconds
    /// since the epoch, by convention) must be within ±2^53, where a score keeps it exactly
    /// ([`ConfigError::MessageTimeOutOfRange`](crate::ConfigError::MessageTimeOutOfRange)).
    pub async fn save_message(
        &self,
        chat: &str,
        id: &str,
        time_ms: i64,
        payload: Bytes,
    ) -> Result<bool, Error> {
        let plan = messages::save_message(&self.ks, chat, id, time_ms, payload)?;
        self.executor.run(plan).await
    }

    /// Reads a message.
    pub async fn get_message(&self, chat: &str, id: &str) -> Result<Option<Message>, Error> {
        let plan = messages::get_message(&self.ks, chat, id)?;
        self.executor.run(plan).await
    }

    /// Lists a page of a chat's messages in `(time, id)` order: those whose time in ms is in
    /// `range` (`..` for all, `from..`, `..=to`, `from..=to`; both ends as Rust ranges say),
    /// strictly after `after` (the previous page's `next`; `None` for the first page), at most
    /// `limit`.
    pub async fn list_messages(
        &self,
        chat: &str,
        range: impl RangeBounds<i64>,
        after: Option<&MessageCursor>,
        limit: Limit,
    ) -> Result<MessagePage, Error> {
        self.executor
            .run(messages::list_messages(&self.ks, chat, range, after, limit))
            .await
    }

    /// Deletes a message; yields `true` when it existed.
    pub async fn delete_message(&self, chat: &str, id: &str) -> Result<bool, Error> {
        let plan = messages::delete_message(&self.ks, chat, id)?;
        self.executor.run(plan).await
    }

    /// Deletes a chat: its messages in atomic chunks of 1000, then its record. Messages saved
    /// while it runs survive. After an interruption, calling it again finishes the job.
    pub async fn delete_chat(&self, chat: &str) -> Result<DeletedChat, Error> {
        self.executor
            .run(delete_chat::delete_chat(&self.ks, chat))
            .await
    }

    // --- chats, contacts, checkpoints ----------------------------------------------------------

    /// Stores a chat record.
    pub async fn upsert_chat(&self, id: &str, value: Bytes) -> Result<(), Error> {
        let plan = records::upsert_record(&self.ks, RecordKind::Chat, id, value)?;
        self.executor.run(plan).await
    }

    /// Reads a chat record.
    pub async fn get_chat(&self, id: &str) -> Result<Option<Bytes>, Error> {
        let plan = records::get_record(&self.ks, RecordKind::Chat, id)?;
        self.executor.run(plan).await
    }

    /// Lists chat records in byte order of their ids: at most `limit` after `after` (the
    /// previous page's `next`; `None` for the first page).
    pub async fn list_chats(
        &self,
        after: Option<&RecordCursor>,
        limit: Limit,
    ) -> Result<RecordPage, Error> {
        self.list(RecordKind::Chat, after, limit).await
    }

    /// Stores a contact record.
    pub async fn upsert_contact(&self, id: &str, value: Bytes) -> Result<(), Error> {
        let plan = records::upsert_record(&self.ks, RecordKind::Contact, id, value)?;
        self.executor.run(plan).await
    }

    /// Reads a contact record.
    pub async fn get_contact(&self, id: &str) -> Result<Option<Bytes>, Error> {
        let plan = records::get_record(&self.ks, RecordKind::Contact, id)?;
        self.executor.run(plan).await
    }

    /// Lists contact records in byte order of their ids: at most `limit` after `after`.
    pub async fn list_contacts(
        &self,
        after: Option<&RecordCursor>,
        limit: Limit,
    ) -> Result<RecordPage, Error> {
        self.list(RecordKind::Contact, after, limit).await
    }

    /// Deletes a contact record; yields `true` when it existed.
    pub async fn delete_contact(&self, id: &str) -> Result<bool, Error> {
        let plan = records::delete_record(&self.ks, RecordKind::Contact, id)?;
        self.executor.run(plan).await
    }

    /// Stores a checkpoint that expires after `ttl` (`None`: never).
    pub async fn set_checkpoint(
        &self,
        id: &str,
        value: Bytes,
        ttl: Option<Duration>,
    ) -> Result<(), Error> {
        let plan = records::set_checkpoint(&self.ks, id, value, ttl)?;
        self.executor.run(plan).await
    }

    /// Reads a checkpoint.
    pub async fn get_checkpoint(&self, id: &str) -> Result<Option<Bytes>, Error> {
        let plan = records::get_record(&self.ks, RecordKind::Checkpoint, id)?;
        self.executor.run(plan).await
    }

    /// Lists live checkpoints in byte order of their ids: at most `limit` after `after`.
    pub async fn list_checkpoints(
        &self,
        after: Option<&RecordCursor>,
        limit: Limit,
    ) -> Result<RecordPage, Error> {
        self.list(RecordKind::Checkpoint, after, limit).await
    }

    /// Deletes a checkpoint; yields `true` when it existed.
    pub async fn clear_checkpoint(&self, id: &str) -> Result<bool, Error> {
        let plan = records::delete_record(&self.ks, RecordKind::Checkpoint, id)?;
        self.executor.run(plan).await
    }

    async fn list(
        &self,
        kind: RecordKind,
        after: Option<&RecordCursor>,
        limit: Limit,
    ) -> Result<RecordPage, Error> {
        let plan = records::list_records(&self.ks, kind, after, limit)?;
        self.executor.run(plan).await
    }

    // --- user data -----------------------------------------------------------------------------

    /// Stores a user-data entry that expires after `ttl` (`None`: never).
    pub async fn set_user_data(
        &self,
        user: &str,
        ns: &str,
        key: &str,
        value: Bytes,
        ttl: Option<Duration>,
    ) -> Result<(), Error> {
        let plan = user::set_user_data(&self.ks, user, ns, key, value, ttl)?;
        self.executor.run(plan).await
    }

    /// Reads a user-data entry.
    pub async fn get_user_data(
        &self,
        user: &str,
        ns: &str,
        key: &str,
    ) -> Result<Option<Bytes>, Error> {
        let plan = user::get_user_data(&self.ks, user, ns, key)?;
        self.executor.run(plan).await
    }

    /// Deletes a user-data entry; yields `true` when it existed.
    pub async fn delete_user_data(&self, user: &str, ns: &str, key: &str) -> Result<bool, Error> {
        let plan = user::delete_user_data(&self.ks, user, ns, key)?;
        self.executor.run(plan).await
    }

    /// Lists a user's live entries, in namespace `ns` or all, sorted by namespace then key: at
    /// most `limit` after `after`, and the cursor of the next page.
    pub async fn list_user_data(
        &self,
        user: &str,
        ns: Option<&str>,
        after: Option<&UserDataCursor>,
        limit: Limit,
    ) -> Result<UserDataPage, Error> {
        user::check_legacy_ids(&self.ks, user, ns)?;
        self.executor
            .run(user::list_user_data(&self.ks, user, ns, after, limit))
            .await
    }

    /// Deletes a user's entries, in namespace `ns` or all; yields how many existed.
    pub async fn clear_user_data(&self, user: &str, ns: Option<&str>) -> Result<u64, Error> {
        user::check_legacy_ids(&self.ks, user, ns)?;
        self.executor
            .run(user::clear_user_data(&self.ks, user, ns))
            .await
    }

    // --- conversations, cursors ----------------------------------------------------------------

    /// Reads a chat's conversation state.
    pub async fn get_conversation(&self, chat: &str) -> Result<Option<Bytes>, Error> {
        let plan = conv::get_conversation(&self.ks, chat)?;
        self.executor.run(plan).await
    }

    /// Stores a chat's conversation state, expiring after `ttl` (`None`: never).
    pub async fn set_conversation(
        &self,
        chat: &str,
        value: Bytes,
        ttl: Option<Duration>,
    ) -> Result<(), Error> {
        let plan = conv::set_conversation(&self.ks, chat, value, ttl)?;
        self.executor.run(plan).await
    }

    /// Deletes a chat's conversation state; yields `true` when it existed.
    pub async fn delete_conversation(&self, chat: &str) -> Result<bool, Error> {
        let plan = conv::delete_conversation(&self.ks, chat)?;
        self.executor.run(plan).await
    }

    /// Reads a cursor.
    pub async fn get_cursor(&self, name: &str) -> Result<Option<i64>, Error> {
        let plan = cursor::get_cursor(&self.ks, name)?;
        self.executor.run(plan).await
    }

    /// Stores a cursor.
    pub async fn set_cursor(&self, name: &str, value: i64) -> Result<(), Error> {
        let plan = cursor::set_cursor(&self.ks, name, value)?;
        self.executor.run(plan).await
    }

    /// Stores a cursor only if it is unset or smaller; yields `true` when it was stored.
    pub async fn set_cursor_if_greater(&self, name: &str, value: i64) -> Result<bool, Error> {
        let plan = cursor::set_cursor_if_greater(&self.ks, name, value)?;
        self.executor.run(plan).await
    }
}
