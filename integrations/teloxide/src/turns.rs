//! Per-chat turns across replicas: the store's `Coordinator` turns, keyed by chat id, with the
//! replica's heartbeat kept alive, and a dptree handler that holds the turn around the rest of
//! the handler tree.

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::ops::ControlFlow;
use std::panic::Location;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use botmesh_redis_tokio::{Client, Coordinator, Error, Released, Store, TurnGuard, TurnOptions};
use teloxide::dispatching::{DpHandlerDescription, UpdateHandler};
use teloxide::dptree::{self, di::DependencyMap, HandlerDescription, HandlerSignature, Type};
use teloxide::types::{ChatId, Update};

/// The heartbeat TTL of [`ChatTurns::start`]: a replica that stops is treated as dead, and its
/// turns skipped, at most this long after its last beat (it beats every fifth of it).
pub const DEFAULT_HEARTBEAT_TTL: Duration = Duration::from_secs(5);

tokio::task_local! {
    /// The turn this task holds, while [`ChatTurns::handler`] or [`ChatTurns::run`] runs the
    /// code inside it: the storage confirms it before it writes that chat's dialogue.
    static HELD: HeldTurn;
}

/// A turn held by the current task, shared by the scope that took it and the storage's writes
/// inside it.
#[derive(Clone, Debug)]
struct HeldTurn {
    turns: ChatTurns,
    guard: TurnGuard,
    /// Set when a write inside the turn failed with an unknown outcome: the write may still be
    /// on its way to the server, so the turn is not given back (the next replica could read and
    /// write before it lands) but left to run out its TTL.
    in_doubt: Arc<AtomicBool>,
}

/// The held turn of `chat`, when this task holds it.
fn held(chat: ChatId) -> Option<HeldTurn> {
    HELD.try_with(|held| (chat_of(&held.guard) == chat).then(|| held.clone()))
        .ok()
        .flatten()
}

/// Before a write of `chat`'s dialogue: when this task holds that chat's turn, renews it for
/// another turn TTL, which fails with [`Error::NotHolder`] once another replica may have taken
/// the turn (this handler outlived its TTL, or its replica's heartbeat lapsed). Outside a
/// turn: nothing. The write that follows lands with the turn renewed: another replica can take
/// the chat before it lands only if it is delayed in flight longer than the turn TTL, or this
/// replica's heartbeat lapses meanwhile (waiters skip the turns of a replica they think dead).
pub(crate) async fn confirm_held(chat: ChatId) -> Result<(), Error> {
    match held(chat) {
        Some(held) => held.turns.inner.coord.extend_turn(&held.guard).await,
        None => Ok(()),
    }
}

/// A write of `chat`'s dialogue on its way, inside the turn this task holds: until it ends with
/// a known outcome ([`WriteInFlight::end`]), the turn is in doubt (see [`HeldTurn::in_doubt`]).
/// A write whose future is dropped (the handler cancelled by a timeout around it, a `select!`,
/// an aborted task) may still be written and land later, since the client carries a written
/// call to its end: the turn then runs out its TTL rather than go to another replica, whose
/// update the late write would overwrite.
pub(crate) struct WriteInFlight {
    in_doubt: Option<Arc<AtomicBool>>,
}

impl WriteInFlight {
    /// Before a write of `chat`'s dialogue.
    pub(crate) fn begin(chat: ChatId) -> WriteInFlight {
        WriteInFlight {
            in_doubt: held(chat).map(|held| held.in_doubt),
        }
    }

    /// The write's result: its turn stays in doubt only when the outcome is unknown.
    pub(crate) fn end<T>(mut self, result: Result<T, Error>) -> Result<T, Error> {
        let in_doubt = self.in_doubt.take();
        if let (Some(flag), Err(e)) = (in_doubt, &result) {
            if e.outcome_unknown() {
                flag.store(true, Ordering::Relaxed);
            }
        }
        result
    }
}

impl Drop for WriteInFlight {
    fn drop(&mut self) {
        // Dropped before `end`: the write's future was dropped, or it panicked.
        if let Some(flag) = self.in_doubt.take() {
            flag.store(true, Ordering::Relaxed);
        }
    }
}

/// Holds a turn for the length of a scope: gives it back when the scope ends. Ended by a panic
/// or a dropped future, it gives the turn back from a spawned task, so a failing handler does
/// not keep the chat for a whole turn TTL; a turn whose write is in doubt is never given back.
struct TurnScope {
    held: Option<HeldTurn>,
}

impl TurnScope {
    fn new(turns: &ChatTurns, guard: TurnGuard) -> TurnScope {
        TurnScope {
            held: Some(HeldTurn {
                turns: turns.clone(),
                guard,
                in_doubt: Arc::new(AtomicBool::new(false)),
            }),
        }
    }

    /// Runs `inner` with the turn visible to the storage's writes.
    async fn run<T>(&self, inner: impl Future<Output = T>) -> T {
        match &self.held {
            Some(held) => HELD.scope(held.clone(), inner).await,
            None => inner.await,
        }
    }

    /// The scope's normal end: gives the turn back, unless a write is in doubt.
    async fn finish(mut self) -> Result<(), TurnError> {
        let Some(held) = self.held.take() else {
            return Ok(());
        };
        if held.in_doubt.load(Ordering::Relaxed) {
            tracing::warn!(
                chat = %held.guard.chat,
                "a dialogue write's outcome is unknown: the chat's turn is left to run out its TTL"
            );
            return Ok(());
        }
        held.turns.release(&held.guard).await
    }
}

impl Drop for TurnScope {
    fn drop(&mut self) {
        let Some(held) = self.held.take() else {
            return;
        };
        if held.in_doubt.load(Ordering::Relaxed) {
            return;
        }
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                // Best effort: a turn not given back runs out its TTL.
                let _ = held.turns.release(&held.guard).await;
            });
        }
    }
}

/// A turn could not be taken, kept or given back.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TurnError {
    /// [`ChatTurns::stop`] was called: this replica takes no more turns.
    #[error("this replica's turns were stopped")]
    Stopped,
    /// The chat's turn was not granted (its wait timed out, or Redis failed); the handler did
    /// not run.
    #[error("could not take the turn of chat {chat}: {source}")]
    Acquire {
        /// The chat.
        chat: ChatId,
        /// Why.
        source: Error,
    },
    /// The handler ran, but by its end the turn was no longer this replica's (it outlived the
    /// turn TTL, or the replica's heartbeat lapsed): another replica may have handled the chat
    /// meanwhile, so the handler's dialogue write may have crossed another.
    #[error("the turn of chat {chat} was lost while its handler ran: {source}")]
    Lost {
        /// The chat.
        chat: ChatId,
        /// `Error::NotHolder`.
        source: Error,
    },
    /// The handler ran, and giving the turn back failed (its outcome is unknown); the next
    /// waiter gets the turn once its TTL runs out at the latest.
    #[error("could not give back the turn of chat {chat}: {source}")]
    Release {
        /// The chat.
        chat: ChatId,
        /// Why.
        source: Error,
    },
}

/// Per-chat turns for one replica of a bot: at most one replica at a time handles a chat's
/// update, in the order the replicas asked (see `docs/coordination.md` of botmesh-redis).
///
/// It owns the replica's heartbeat (the coordinator's keeper,
/// [`Coordinator::keep_alive`], rewriting it every fifth of the heartbeat TTL and stopped when
/// the last clone is dropped): turn waiters skip the turns of a replica whose
/// heartbeat expired, so a replica that crashes while holding a chat's turn delays that chat by
/// at most the heartbeat TTL. Cheap to clone.
///
/// ```no_run
/// use botmesh_redis_teloxide::{ChatTurns, DialogueStorage};
/// use teloxide::dispatching::dialogue::serializer::Json;
/// use teloxide::types::ChatId;
///
/// # async fn demo() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
/// let storage = DialogueStorage::open_cluster(["127.0.0.1:7000"], Json).await?;
/// let turns = ChatTurns::start(storage.store(), "replica-a").await?;
/// let n = turns
///     .run(ChatId(42), |_guard| async { /* read, change and write the dialogue */ 1 })
///     .await?;
/// # let _ = n;
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct ChatTurns {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    coord: Coordinator<Client>,
    stopped: AtomicBool,
}

impl ChatTurns {
    /// Turns for `replica` (unique among the bot's live processes: host name, process id and
    /// start time, say) on the store's client, prefix and layout, with the default
    /// [`TurnOptions`] (turn TTL 30 s, wait timeout 60 s) and [`DEFAULT_HEARTBEAT_TTL`]. Sends
    /// the first heartbeat before it returns. Must be called within a tokio runtime.
    pub async fn start(store: &Store<Client>, replica: impl Into<String>) -> Result<Self, Error> {
        Self::start_with(
            store,
            replica,
            TurnOptions::default(),
            DEFAULT_HEARTBEAT_TTL,
        )
        .await
    }

    /// [`ChatTurns::start`] with other turn options and heartbeat TTL. Keep the heartbeat TTL
    /// well below the turn TTL, and the turn TTL above the longest handler (or extend the turn
    /// from the handler: [`ChatTurns::extend`]); use the same options on every replica.
    pub async fn start_with(
        store: &Store<Client>,
        replica: impl Into<String>,
        options: TurnOptions,
        heartbeat_ttl: Duration,
    ) -> Result<Self, Error> {
        options.check()?;
        let coord = store.coordinator(replica)?.with_turn_options(options);
        coord.keep_alive(heartbeat_ttl).await?;
        Ok(ChatTurns {
            inner: Arc::new(Inner {
                coord,
                stopped: AtomicBool::new(false),
            }),
        })
    }

    /// The coordinator (this replica's id, locks, leaderships, turns by name).
    pub fn coordinator(&self) -> &Coordinator<Client> {
        &self.inner.coord
    }

    /// Waits for the chat's turn (at most the wait timeout of the turn options).
    pub async fn acquire(&self, chat: ChatId) -> Result<TurnGuard, TurnError> {
        if self.inner.stopped.load(Ordering::Relaxed) {
            return Err(TurnError::Stopped);
        }
        self.inner
            .coord
            .acquire_turn(&chat.0.to_string())
            .await
            .map(|grant| grant.guard)
            .map_err(|source| TurnError::Acquire { chat, source })
    }

    /// Renews a held turn for another turn TTL: for a handler that may run longer than the TTL.
    /// [`TurnError::Lost`] once the turn is no longer this replica's.
    pub async fn extend(&self, guard: &TurnGuard) -> Result<(), TurnError> {
        self.inner
            .coord
            .extend_turn(guard)
            .await
            .map_err(|source| lost_or(chat_of(guard), source))
    }

    /// Gives the turn back; the next waiter is served. [`TurnError::Lost`] when it was no
    /// longer held.
    pub async fn release(&self, guard: &TurnGuard) -> Result<(), TurnError> {
        let chat = chat_of(guard);
        match self.inner.coord.release_turn(guard).await {
            Ok(Released::Held) => Ok(()),
            Ok(Released::Lost) => Err(TurnError::Lost {
                chat,
                source: Error::NotHolder {
                    what: format!("turn {} of chat {:?}", guard.ticket, guard.chat),
                },
            }),
            Err(source) => Err(lost_or(chat, source)),
        }
    }

    /// Runs `f` holding the chat's turn, and gives the turn back after it, whatever `f` yields.
    /// A [`DialogueStorage`](crate::DialogueStorage) write of this chat's dialogue inside `f`
    /// first confirms the turn (see [`DialogueStorageError::TurnLost`](crate::DialogueStorageError::TurnLost)).
    /// An error to give it back is this call's error (the value of `f` is then dropped): a
    /// [`TurnError::Lost`] says the exclusion may not have held.
    pub async fn run<F, Fut, T>(&self, chat: ChatId, f: F) -> Result<T, TurnError>
    where
        F: FnOnce(TurnGuard) -> Fut,
        Fut: Future<Output = T>,
    {
        let guard = self.acquire(chat).await?;
        let scope = TurnScope::new(self, guard.clone());
        let value = scope.run(f(guard)).await;
        scope.finish().await?;
        Ok(value)
    }

    /// Ends the heartbeat now (a clean shutdown: other replicas need not wait for it to expire
    /// before they skip this replica's tickets), and every clone takes no more turns
    /// ([`TurnError::Stopped`]). Call it once the dispatcher has stopped: a turn a clone still
    /// holds is skipped by the other replicas at once, as a dead replica's would be.
    pub async fn stop(self) -> Result<(), Error> {
        self.inner.stopped.store(true, Ordering::Relaxed);
        self.inner.coord.stop_heartbeat().await
    }

    /// A handler that holds the update's chat turn while the rest of the chain runs, and gives
    /// it back after; updates without a chat pass through without a turn. Put it first, before
    /// `dialogue::enter`, so that reading the dialogue, the endpoint and writing it back all
    /// happen inside the turn:
    ///
    /// ```no_run
    /// # use botmesh_redis_teloxide::{ChatTurns, DialogueStorage};
    /// # use teloxide::dispatching::dialogue::serializer::Json;
    /// # use teloxide::dispatching::{dialogue, UpdateFilterExt, UpdateHandler};
    /// # use teloxide::dptree;
    /// # use teloxide::types::{Message, Update};
    /// # #[derive(Clone, Default, serde::Serialize, serde::Deserialize)] enum State { #[default] Start }
    /// # type HandlerError = Box<dyn std::error::Error + Send + Sync>;
    /// # async fn endpoint() -> Result<(), HandlerError> { Ok(()) }
    /// fn schema(turns: ChatTurns) -> UpdateHandler<HandlerError> {
    ///     dptree::entry().chain(turns.handler()).branch(
    ///         Update::filter_message()
    ///             .enter_dialogue::<Message, DialogueStorage<Json>, State>()
    ///             .endpoint(endpoint),
    ///     )
    /// }
    /// # use teloxide::dispatching::HandlerExt;
    /// ```
    ///
    /// A turn that is not granted breaks the chain with [`TurnError::Acquire`] (the update is
    /// not handled; the dispatcher's error handler sees it); a turn lost by the end of a
    /// successful chain is [`TurnError::Lost`].
    #[track_caller]
    pub fn handler<E>(&self) -> UpdateHandler<E>
    where
        E: From<TurnError> + Send + Sync + 'static,
    {
        let sig = HandlerSignature::Other {
            obligations: BTreeMap::from([(Type::of::<Update>(), Location::caller())]),
            guaranteed_outcomes: BTreeSet::new(),
            conditional_outcomes: BTreeSet::new(),
            continues: true,
        };
        let turns = self.clone();
        dptree::from_fn_with_description(
            DpHandlerDescription::entry(),
            move |deps: DependencyMap, cont| {
                let turns = turns.clone();
                async move {
                    let update: Arc<Update> = deps.get();
                    let Some(chat) = update.chat().map(|chat| chat.id) else {
                        return cont(deps).await;
                    };
                    let guard = match turns.acquire(chat).await {
                        Ok(guard) => guard,
                        Err(e) => return ControlFlow::Break(Err(E::from(e))),
                    };
                    let scope = TurnScope::new(&turns, guard);
                    let flow = scope.run(cont(deps)).await;
                    match (flow, scope.finish().await) {
                        (ControlFlow::Break(Ok(())), Err(e)) => ControlFlow::Break(Err(E::from(e))),
                        (flow, _) => flow,
                    }
                }
            },
            sig,
        )
    }
}

/// The chat of a guard (its chat is the decimal id this module wrote).
fn chat_of(guard: &TurnGuard) -> ChatId {
    ChatId(guard.chat.parse().unwrap_or_default())
}

/// `Lost` for `NotHolder`, else `Release`.
fn lost_or(chat: ChatId, source: Error) -> TurnError {
    match source {
        Error::NotHolder { .. } => TurnError::Lost { chat, source },
        source => TurnError::Release { chat, source },
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use botmesh_redis_harness::{shared_single, unique_prefix};
    use botmesh_redis_tokio::{ClientOptions, StoreOptions};

    /// Turns whose waits give up long before a held turn runs out: a waiter is granted only
    /// when the holder gives the turn back.
    fn options() -> TurnOptions {
        TurnOptions {
            ttl: Duration::from_secs(30),
            poll_interval: Duration::from_millis(2),
            claim_timeout: Duration::from_secs(3),
            wait_timeout: Duration::from_millis(600),
            idle_lifetime: Duration::from_secs(600),
        }
    }

    async fn two_replicas() -> (ChatTurns, ChatTurns) {
        let client = Client::connect(ClientOptions::url(shared_single().url()))
            .await
            .unwrap();
        let store = Store::new(client, StoreOptions::new(unique_prefix("turn-scope"))).unwrap();
        let heartbeat = Duration::from_secs(5);
        let a = ChatTurns::start_with(&store, "a", options(), heartbeat)
            .await
            .unwrap();
        let b = ChatTurns::start_with(&store, "b", options(), heartbeat)
            .await
            .unwrap();
        (a, b)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_turn_whose_write_is_in_doubt_is_not_given_back() {
        let (a, b) = two_replicas().await;
        let (plain, doubtful) = (ChatId(1), ChatId(2));
        a.run(plain, |_| async {}).await.unwrap();
        b.release(&b.acquire(plain).await.unwrap()).await.unwrap();

        let lost = || Error::ReplyLost {
            addr: botmesh_redis_tokio::NodeAddr::new("127.0.0.1", 6379),
            reason: "the connection closed".into(),
        };
        a.run(doubtful, |_| async move {
            let write = WriteInFlight::begin(doubtful);
            assert!(write.end::<()>(Err(lost())).is_err());
        })
        .await
        .unwrap();
        // Still a's, for its whole TTL: b's wait gives up.
        assert!(matches!(
            b.acquire(doubtful).await,
            Err(TurnError::Acquire { .. })
        ));
    }

    /// A write whose future is dropped may still land: its turn is not given back. One that
    /// ended, well or with a known failure, leaves the turn to be given back.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_write_dropped_on_its_way_keeps_the_turn() {
        let (a, b) = two_replicas().await;
        let (ended, failed, dropped) = (ChatId(5), ChatId(6), ChatId(7));
        a.run(ended, |_| async move {
            assert_eq!(WriteInFlight::begin(ended).end(Ok(1)), Ok(1));
        })
        .await
        .unwrap();
        b.release(&b.acquire(ended).await.unwrap()).await.unwrap();
        a.run(failed, |_| async move {
            let refused = Error::NotHolder {
                what: "turn".into(),
            };
            assert!(WriteInFlight::begin(failed)
                .end::<()>(Err(refused))
                .is_err());
        })
        .await
        .unwrap();
        b.release(&b.acquire(failed).await.unwrap()).await.unwrap();

        a.run(
            dropped,
            |_| async move { drop(WriteInFlight::begin(dropped)) },
        )
        .await
        .unwrap();
        assert!(matches!(
            b.acquire(dropped).await,
            Err(TurnError::Acquire { .. })
        ));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_panicking_handler_gives_the_turn_back() {
        let (a, b) = two_replicas().await;
        let chat = ChatId(3);
        let panicked = tokio::spawn(async move {
            a.run(chat, |_| async { panic!("the handler failed") })
                .await
        })
        .await;
        assert!(panicked.unwrap_err().is_panic());
        // Given back by the scope's drop, long before its TTL: b is granted within its wait.
        b.release(&b.acquire(chat).await.unwrap()).await.unwrap();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn stopped_turns_take_no_more_turns() {
        let (a, _b) = two_replicas().await;
        let clone = a.clone();
        a.stop().await.unwrap();
        assert!(matches!(
            clone.acquire(ChatId(4)).await,
            Err(TurnError::Stopped)
        ));
    }
}
