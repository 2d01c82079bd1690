//! The typed async API of coordination, written once over any [`Executor`]: the
//! [`Coordinator`], [`Schedules`], [`Leases`] and [`Durability`].
//!
//! Each method builds a plan from [`crate::coord`] and runs it; see `docs/coordination.md` for
//! what each primitive promises.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;

use crate::coord::guard::{Leadership, Lease, Lock, Released, Turn};
use crate::coord::keeper::{Keeper, Keepers, Renewal};
use crate::coord::{
    self, Acked, Begun, Claimed, Schedule, ScheduleCursor, SchedulePage, TurnGrant, TurnGuard,
    TurnOptions,
};
use crate::error::Error;
use crate::executor::{check_layout, Executor, IntoKeyspace};
use crate::keys::Keyspace;
use crate::page::Limit;

/// The request ids of turn takes, process-wide.
static NEXT_TURN_REQUEST: AtomicU64 = AtomicU64::new(0);

/// Locks, per-chat turns, leaderships and heartbeats for one replica.
#[derive(Clone, Debug)]
pub struct Coordinator<E> {
    exec: E,
    ks: Keyspace,
    replica: Arc<str>,
    turns: TurnOptions,
    wait_replicas: Option<(u32, Duration)>,
    /// This replica's heartbeat keeper, shared by the clones ([`Coordinator::keep_alive`]).
    heartbeat: Arc<Mutex<Option<Keeper>>>,
    /// Where the store that built this coordinator finds its keepers at close.
    keepers: Arc<Keepers>,
}

impl<E: Executor> Coordinator<E> {
    /// A coordinator for `replica`, which must be unique among the bot's live processes (for
    /// example host name, process id and start time), under `scope`: a prefix (the layout
    /// follows the executor, as the store's does: `cluster:v1` on a cluster, else legacy),
    /// [`StoreOptions`](crate::StoreOptions), or a [`Keyspace`].
    ///
    /// Turns rely on this replica's heartbeat: start [`Coordinator::keep_alive`] before the
    /// first turn (a replica without a live heartbeat is treated as dead, and its turns are
    /// skipped; a turn asked for without one is refused with [`Error::NoHeartbeat`]).
    ///
    /// Fails with [`ConfigError::LegacyLayoutOnCluster`](crate::ConfigError) for a
    /// legacy-layout keyspace on a cluster executor. [`Store::coordinator`] builds one with
    /// the store's keyspace.
    ///
    /// [`Store::coordinator`]: crate::store::Store::coordinator
    pub fn new(
        exec: E,
        scope: impl IntoKeyspace,
        replica: impl Into<String>,
    ) -> Result<Self, Error> {
        let ks = scope.into_keyspace(exec.deployment())?;
        check_layout(&exec, &ks, "coordinator")?;
        Ok(Coordinator {
            exec,
            ks,
            replica: Arc::from(replica.into()),
            turns: TurnOptions::default(),
            wait_replicas: None,
            heartbeat: Arc::default(),
            keepers: Arc::default(),
        })
    }

    /// Hands this coordinator's keepers to a store's close.
    pub(crate) fn with_keepers(mut self, keepers: Arc<Keepers>) -> Self {
        self.keepers = keepers;
        self
    }

    /// How turns are waited for and held, and how long an idle chat's queue is kept. Every turn
    /// call checks the options ([`TurnOptions::check`]) and fails with [`Error::Config`] before
    /// sending anything when the idle lifetime is too short for the timers.
    pub fn with_turn_options(mut self, options: TurnOptions) -> Self {
        self.turns = options;
        self
    }

    /// Grants of locks and leaderships are reported only once `replicas` replicas
    /// acknowledged them (`WAIT`, at most `timeout`); a grant that falls short is given back
    /// and fails with [`Error::NotReplicated`]. See `docs/coordination.md` for what this buys
    /// (and what it does not). `WAIT` blocks the master connection it runs on for up to
    /// `timeout`, delaying the requests pipelined behind it.
    pub fn with_wait_replicas(mut self, replicas: u32, timeout: Duration) -> Self {
        self.wait_replicas = Some((replicas, timeout));
        self
    }

    /// This replica's id.
    pub fn replica(&self) -> &str {
        &self.replica
    }

    /// The keyspace (layout and prefix).
    pub fn keyspace(&self) -> &Keyspace {
        &self.ks
    }

    /// Acquires lock `key` for `owner`: the fence, or `None` while it is held. With
    /// [`Coordinator::with_wait_replicas`], a grant that too few replicas acknowledged is given
    /// back and fails with [`Error::NotReplicated`].
    pub async fn lock(&self, key: &str, owner: &str, ttl: Duration) -> Result<Option<u64>, Error> {
        match self.wait_replicas {
            Some((replicas, timeout)) => {
                let plan =
                    coord::lock_acquire_replicated(&self.ks, key, owner, ttl, replicas, timeout)?;
                self.exec.run(plan).await
            }
            None => {
                self.exec
                    .run(coord::lock_acquire(&self.ks, key, owner, ttl)?)
                    .await
            }
        }
    }

    /// Acquires lock `key` for `owner` as [`Coordinator::lock`] does, as a [`Lock`] that is
    /// released when dropped: `None` while it is held.
    pub async fn hold_lock(
        &self,
        key: &str,
        owner: &str,
        ttl: Duration,
    ) -> Result<Option<Lock<E>>, Error> {
        let fence = self.lock(key, owner, ttl).await?;
        Ok(fence.map(|fence| Lock::new(self.exec.clone(), &self.ks, key, owner, fence, ttl)))
    }

    /// Renews a held lock; [`Error::NotHolder`] when it was lost.
    pub async fn extend_lock(&self, key: &str, owner: &str, ttl: Duration) -> Result<(), Error> {
        self.exec
            .run(coord::lock_extend(&self.ks, key, owner, ttl)?)
            .await
    }

    /// Releases a lock: [`Released::Lost`] when `owner` no longer held it.
    pub async fn unlock(&self, key: &str, owner: &str) -> Result<Released, Error> {
        let held = self
            .exec
            .run(coord::lock_release(&self.ks, key, owner)?)
            .await?;
        Ok(Released::from_held(held))
    }

    /// Takes a ticket for `chat` and waits until it is served: at most the turn options'
    /// `wait_timeout` (then [`Error::TurnWaitTimedOut`], the ticket withdrawn). Dropping the future
    /// withdraws the ticket at the plan's next step (within one poll interval).
    ///
    /// Refused with [`Error::NoHeartbeat`] before a ticket is taken when this replica's
    /// heartbeat is not live: waiters would skip the turn at once.
    pub async fn acquire_turn(&self, chat: &str) -> Result<TurnGrant, Error> {
        self.check_heartbeat().await?;
        // The request id makes the queue member: unique per call in this process (even across
        // coordinators built with the same replica id), so two callers never share a ticket.
        let n = NEXT_TURN_REQUEST.fetch_add(1, Ordering::Relaxed);
        let cancel = CancelOnDrop::new();
        let plan = coord::acquire_turn(&self.ks, chat, &self.replica, &n.to_string(), self.turns)?
            .cancel_on(cancel.flag.clone());
        let result = self.exec.run(plan).await;
        cancel.disarm();
        result
    }

    /// Waits for the turn of `chat` as [`Coordinator::acquire_turn`] does, as a [`Turn`] that is
    /// released when dropped (serving the next waiter at once, not when its TTL runs out).
    pub async fn turn(&self, chat: &str) -> Result<Turn<E>, Error> {
        let grant = self.acquire_turn(chat).await?;
        Ok(Turn::new(
            self.exec.clone(),
            &self.ks,
            grant.guard,
            grant.events,
            self.turns,
        ))
    }

    /// Whether this replica may ask for a turn: its keeper's last heartbeat was acknowledged,
    /// or else the heartbeat key is there.
    async fn check_heartbeat(&self) -> Result<(), Error> {
        let kept = self.heartbeat_keeper(|k| k.is_held());
        if kept == Some(true) || self.is_alive(&self.replica).await? {
            return Ok(());
        }
        Err(Error::NoHeartbeat {
            replica: self.replica.to_string(),
        })
    }

    fn heartbeat_keeper<T>(&self, f: impl FnOnce(&Keeper) -> T) -> Option<T> {
        let keeper = self.heartbeat.lock().unwrap_or_else(|e| e.into_inner());
        keeper.as_ref().map(f)
    }

    /// Renews a held turn, and is the fenced check before acting on the chat:
    /// [`Error::NotHolder`] when the turn was lost.
    pub async fn extend_turn(&self, guard: &TurnGuard) -> Result<(), Error> {
        self.exec
            .run(coord::turn_extend(&self.ks, guard, &self.turns)?)
            .await
    }

    /// Ends a held turn and serves the next ticket: [`Released::Lost`] when it was lost.
    pub async fn release_turn(&self, guard: &TurnGuard) -> Result<Released, Error> {
        let held = self
            .exec
            .run(coord::turn_release(&self.ks, guard, &self.turns)?)
            .await?;
        Ok(Released::from_held(held))
    }

    /// Campaigns for leadership `name`: the term when this replica leads (a new one when it
    /// wins, the same one when it already led), or `None`. With
    /// [`Coordinator::with_wait_replicas`], as for [`Coordinator::lock`].
    pub async fn campaign(&self, name: &str, ttl: Duration) -> Result<Option<u64>, Error> {
        match self.wait_replicas {
            Some((replicas, timeout)) => {
                let plan = coord::leader_campaign_replicated(
                    &self.ks,
                    name,
                    &self.replica,
                    ttl,
                    replicas,
                    timeout,
                )?;
                self.exec.run(plan).await
            }
            None => {
                self.exec
                    .run(coord::leader_campaign(&self.ks, name, &self.replica, ttl)?)
                    .await
            }
        }
    }

    /// Campaigns for leadership `name` as [`Coordinator::campaign`] does, as a [`Leadership`]
    /// that resigns when dropped: `None` while another replica leads.
    pub async fn lead(&self, name: &str, ttl: Duration) -> Result<Option<Leadership<E>>, Error> {
        let term = self.campaign(name, ttl).await?;
        Ok(term.map(|term| {
            Leadership::new(self.exec.clone(), &self.ks, name, &self.replica, term, ttl)
        }))
    }

    /// Renews this replica's leadership; [`Error::NotHolder`] when it was lost.
    pub async fn renew(&self, name: &str, ttl: Duration) -> Result<(), Error> {
        self.exec
            .run(coord::leader_renew(&self.ks, name, &self.replica, ttl)?)
            .await
    }

    /// Resigns leadership `name`: [`Released::Lost`] when this replica no longer led.
    pub async fn resign(&self, name: &str) -> Result<Released, Error> {
        let held = self
            .exec
            .run(coord::leader_resign(&self.ks, name, &self.replica)?)
            .await?;
        Ok(Released::from_held(held))
    }

    /// Marks this replica alive for `ttl`; call it well within the TTL (every `ttl / 5`, say).
    /// Turn waiters skip the turns of a replica whose heartbeat expired.
    pub async fn heartbeat(&self, ttl: Duration) -> Result<(), Error> {
        let plan = coord::heartbeat(&self.ks, &self.replica, ttl, Bytes::from_static(b"1"))?;
        self.exec.run(plan).await
    }

    /// Writes this replica's heartbeat now and keeps it alive in the background: rewritten
    /// every fifth of `ttl` (so four writes in a row may fail before it expires) until [`Coordinator::stop_heartbeat`], the store's close, or the
    /// last clone of this coordinator is dropped (then it expires after `ttl`). Calling it
    /// again replaces the keeper (with the new `ttl`). Turns check it before taking a ticket.
    pub async fn keep_alive(&self, ttl: Duration) -> Result<(), Error> {
        self.heartbeat(ttl).await?;
        let (ks, replica) = (self.ks.clone(), Arc::clone(&self.replica));
        let renewal: Renewal =
            Box::new(move || coord::heartbeat(&ks, &replica, ttl, Bytes::from_static(b"1")));
        let keeper = Keeper::start(&self.exec, renewal, ttl / 5);
        let (ks, replica) = (self.ks.clone(), Arc::clone(&self.replica));
        self.keepers.add(
            &keeper,
            Box::new(move || coord::heartbeat_stop(&ks, &replica)),
        );
        let replaced = self
            .heartbeat
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .replace(keeper);
        drop(replaced);
        Ok(())
    }

    /// Whether the last heartbeat [`Coordinator::keep_alive`]'s keeper wrote was acknowledged;
    /// `None` while no keeper runs.
    pub fn heartbeat_kept(&self) -> Option<bool> {
        self.heartbeat_keeper(|k| k.is_held())
    }

    /// Ends this replica's heartbeat (a clean shutdown): stops its keeper, waits for a write
    /// of it still out, and removes the key.
    pub async fn stop_heartbeat(&self) -> Result<(), Error> {
        let keeper = self
            .heartbeat
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(keeper) = keeper {
            keeper.stop().await;
        }
        self.exec
            .run(coord::heartbeat_stop(&self.ks, &self.replica)?)
            .await
    }

    /// Whether `replica`'s heartbeat is live.
    pub async fn is_alive(&self, replica: &str) -> Result<bool, Error> {
        self.exec
            .run(coord::replica_alive(&self.ks, replica)?)
            .await
    }

    /// The ids of every live replica, sorted. A `SCAN` of every master for the heartbeat keys:
    /// its cost grows with the whole keyspace, so keep it off the per-update path.
    pub async fn live_replicas(&self) -> Result<Vec<String>, Error> {
        self.exec
            .run(coord::live_replicas(&self.ks, usize::MAX))
            .await
    }
}

/// Sets its flag when dropped before [`CancelOnDrop::disarm`]: tells a plan that its caller
/// stopped waiting.
struct CancelOnDrop {
    flag: Arc<AtomicBool>,
    armed: bool,
}

impl CancelOnDrop {
    fn new() -> Self {
        CancelOnDrop {
            flag: Arc::new(AtomicBool::new(false)),
            armed: true,
        }
    }

    fn disarm(mut self) {
        self.armed = false;
    }
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        if self.armed {
            self.flag.store(true, Ordering::Release);
        }
    }
}

/// Schedules with fencing tokens.
#[derive(Clone, Debug)]
pub struct Schedules<E> {
    exec: E,
    ks: Keyspace,
}

impl<E: Executor> Schedules<E> {
    /// Schedules in `ks`; fails for a legacy-layout keyspace on a cluster executor (see
    /// [`Coordinator::new`]).
    pub fn new(exec: E, scope: impl IntoKeyspace) -> Result<Self, Error> {
        let ks = scope.into_keyspace(exec.deployment())?;
        check_layout(&exec, &ks, "schedules")?;
        Ok(Schedules { exec, ks })
    }

    /// Writes schedule `id` with fencing token `token`, owned by `holder` (the lease holder or
    /// leader the token was granted to); [`Error::Stale`] when a newer token is stored,
    /// [`Error::NotHolder`] when the same token is stored by another holder.
    pub async fn put(&self, id: &str, token: u64, holder: &str, data: Bytes) -> Result<(), Error> {
        self.exec
            .run(coord::schedule_put(&self.ks, id, token, holder, data)?)
            .await
    }

    /// Deletes schedule `id`, keeping its token and holder in a marker; errors as for `put`.
    pub async fn delete(&self, id: &str, token: u64, holder: &str) -> Result<(), Error> {
        self.exec
            .run(coord::schedule_delete(&self.ks, id, token, holder)?)
            .await
    }

    /// Reads schedule `id`: its token, data and holder; a deleted one reads as `None`.
    pub async fn get(&self, id: &str) -> Result<Option<Schedule>, Error> {
        self.exec.run(coord::schedule_get(&self.ks, id)?).await
    }

    /// A page of live schedules (deleted markers hidden) with ids after `after`, sorted by id:
    /// at most `limit`, and the cursor of the next page: pass it as `after` until it is `None`
    /// (the shape of every listing, [`Page`](crate::Page)).
    pub async fn list(
        &self,
        after: Option<&ScheduleCursor>,
        limit: Limit,
    ) -> Result<SchedulePage, Error> {
        self.exec
            .run(coord::schedule_list(&self.ks, after, limit)?)
            .await
    }
}

/// Leases with tokens that never go backwards.
#[derive(Clone, Debug)]
pub struct Leases<E> {
    exec: E,
    ks: Keyspace,
    wait_replicas: Option<(u32, Duration)>,
}

impl<E: Executor> Leases<E> {
    /// Leases in `ks`; fails for a legacy-layout keyspace on a cluster executor (see
    /// [`Coordinator::new`]).
    pub fn new(exec: E, scope: impl IntoKeyspace) -> Result<Self, Error> {
        let ks = scope.into_keyspace(exec.deployment())?;
        check_layout(&exec, &ks, "leases")?;
        Ok(Leases {
            exec,
            ks,
            wait_replicas: None,
        })
    }

    /// Grants are reported only once `replicas` replicas acknowledged them (`WAIT`, at most
    /// `timeout`), as for [`Coordinator::with_wait_replicas`].
    pub fn with_wait_replicas(mut self, replicas: u32, timeout: Duration) -> Self {
        self.wait_replicas = Some((replicas, timeout));
        self
    }

    /// Acquires lease `name` for `holder`: its token, or `None` while another holder has it.
    pub async fn acquire(
        &self,
        name: &str,
        holder: &str,
        ttl: Duration,
    ) -> Result<Option<u64>, Error> {
        match self.wait_replicas {
            Some((replicas, timeout)) => {
                let plan = coord::lease_acquire_replicated(
                    &self.ks, name, holder, ttl, replicas, timeout,
                )?;
                self.exec.run(plan).await
            }
            None => {
                self.exec
                    .run(coord::lease_acquire(&self.ks, name, holder, ttl)?)
                    .await
            }
        }
    }

    /// Acquires lease `name` for `holder` as [`Leases::acquire`] does, as a [`Lease`] that is
    /// released when dropped: `None` while another holder has it.
    pub async fn hold(
        &self,
        name: &str,
        holder: &str,
        ttl: Duration,
    ) -> Result<Option<Lease<E>>, Error> {
        let token = self.acquire(name, holder, ttl).await?;
        Ok(token.map(|token| Lease::new(self.exec.clone(), &self.ks, name, holder, token, ttl)))
    }

    /// Extends a live lease; [`Error::NotHolder`] when it expired or moved on.
    pub async fn renew(
        &self,
        name: &str,
        holder: &str,
        token: u64,
        ttl: Duration,
    ) -> Result<(), Error> {
        self.exec
            .run(coord::lease_renew(&self.ks, name, holder, token, ttl)?)
            .await
    }

    /// Ends a lease early: [`Released::Lost`] when `holder` no longer held it.
    pub async fn release(&self, name: &str, holder: &str, token: u64) -> Result<Released, Error> {
        let held = self
            .exec
            .run(coord::lease_release(&self.ks, name, holder, token)?)
            .await?;
        Ok(Released::from_held(held))
    }
}

/// A durability table: inbound journal and outbox, in one slot per table.
#[derive(Clone, Debug)]
pub struct Durability<E> {
    exec: E,
    ks: Keyspace,
    table: String,
}

impl<E: Executor> Durability<E> {
    /// The table `table` in `ks`; its name may not be empty or contain braces, and a
    /// legacy-layout keyspace is refused on a cluster executor (see [`Coordinator::new`]).
    pub fn new(exec: E, scope: impl IntoKeyspace, table: impl Into<String>) -> Result<Self, Error> {
        let ks = scope.into_keyspace(exec.deployment())?;
        check_layout(&exec, &ks, "durability")?;
        let table = table.into();
        ks.durable(&table, "journal")?;
        Ok(Durability { exec, ks, table })
    }

    /// Marks inbound `id` as processed by `instance`: [`Begun::First`] the first time within
    /// `window`, [`Begun::ByThisInstance`] when `instance` began it before (safe to call again
    /// after [`Error::ReplyLost`]), [`Begun::Duplicate`] when another instance began it.
    pub async fn begin(&self, id: &str, instance: &str, window: Duration) -> Result<Begun, Error> {
        self.exec
            .run(coord::journal_begin(
                &self.ks,
                &self.table,
                id,
                instance,
                window,
            )?)
            .await
    }

    /// Forgets inbound `id` after `instance`'s processing of it failed, so a redelivery is
    /// processed: `true` when forgotten, `false` when the id is not in the journal or another
    /// instance began it (a forget retried after [`Error::ReplyLost`] whose first try went
    /// through, once the id was redelivered and begun elsewhere, leaves that begin alone).
    pub async fn forget(&self, id: &str, instance: &str) -> Result<bool, Error> {
        self.exec
            .run(coord::journal_forget(&self.ks, &self.table, id, instance)?)
            .await
    }

    /// Queues a send under idempotency `key`: `false` when it is queued or was acked within
    /// `window`.
    pub async fn enqueue(
        &self,
        key: &str,
        payload: Bytes,
        window: Duration,
    ) -> Result<bool, Error> {
        self.exec
            .run(coord::outbox_enqueue(
                &self.ks,
                &self.table,
                key,
                payload,
                window,
            )?)
            .await
    }

    /// Claims up to `limit` sends for `instance` (the [`Limit`] of every listing: at least 1,
    /// at most [`MAX_PAGE`](crate::MAX_PAGE) per call), each for `visibility`.
    pub async fn claim(
        &self,
        instance: &str,
        limit: Limit,
        visibility: Duration,
    ) -> Result<Vec<Claimed>, Error> {
        self.exec
            .run(coord::outbox_claim(
                &self.ks,
                &self.table,
                instance,
                limit,
                visibility,
            )?)
            .await
    }

    /// Acks a send: [`Acked::Now`], or [`Acked::Already`] when `instance` acked it before (safe
    /// to call again after [`Error::ReplyLost`]); [`Error::NotHolder`] when the claim was lost.
    pub async fn ack(&self, key: &str, instance: &str) -> Result<Acked, Error> {
        self.exec
            .run(coord::outbox_ack(&self.ks, &self.table, key, instance)?)
            .await
    }

    /// Puts every claim of a stopped `instance` back in the queue.
    pub async fn recover(&self, instance: &str) -> Result<i64, Error> {
        self.exec
            .run(coord::outbox_recover(&self.ks, &self.table, instance)?)
            .await
    }
}
