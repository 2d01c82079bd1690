//! Plans of the coordination primitives: locks with fences, per-chat turns, leaderships with
//! terms, replica heartbeats, schedules with fencing tokens, leases, and the durability table.
//!
//! What they promise, and what they do not, is in `docs/coordination.md`. In short: while
//! Redis loses no acknowledged write, fences and terms are unique and strictly increasing, and
//! only the current holder can release, extend or renew. No primitive promises that only one
//! process *believes* it holds something: a paused process wakes up and acts, so callers
//! protect their writes with the fence. All expiry uses server time (`PX`, `TIME` in scripts).
//!
//! Every multi-key script call shares one hash tag in the cluster layout; the legacy layout has
//! no hash tags and runs on one node, where the same scripts go out as
//! [`Request::single_node_script`].

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

use crate::error::Error;
use crate::keys::{enc, Key};
use crate::layout::{Keyspace, Layout, RecordKind, TurnPart};
use crate::plan::{misuse, single, Plan, Reply, Single, Step};
use crate::request::{Access, Arg, Request};
use crate::script::Script;
use crate::ttl::ttl_ms;
use crate::value::Value;

crate::lua_script!(
    /// Takes a lock or leadership and hands out the next fence or term.
    pub ACQUIRE_FENCED = "acquire_fenced"
);
crate::lua_script!(
    /// Renews a lock or leadership for its holder.
    pub EXTEND_IF_HOLDER = "extend_if_holder"
);
crate::lua_script!(
    /// Releases a lock or leadership for its holder.
    pub RELEASE_IF_HOLDER = "release_if_holder"
);
crate::lua_script!(
    /// A chat's turn queue: take, poll, skip, release, extend.
    pub TURN = "turn"
);
crate::lua_script!(
    /// A named lease: acquire, renew, release.
    pub LEASE = "lease"
);
crate::lua_script!(
    /// Schedule records guarded by fencing tokens: put, delete.
    pub SCHEDULE = "schedule"
);
crate::lua_script!(
    /// A durability table: inbound journal and outbox.
    pub DURABLE = "durable"
);

/// The scripts of this module (for the registry and for preloading).
pub static SCRIPTS: &[&Script] = &[
    &ACQUIRE_FENCED,
    &EXTEND_IF_HOLDER,
    &RELEASE_IF_HOLDER,
    &TURN,
    &LEASE,
    &SCHEDULE,
    &DURABLE,
];

/// The largest fencing token a schedule accepts in either direction: Lua compares tokens as
/// doubles, which are exact integers up to 2^53.
pub const MAX_SCHEDULE_TOKEN: i64 = 1 << 53;

fn held(v: Value) -> Result<bool, Error> {
    Ok(v.as_i64()? == 1)
}

fn grant(v: Value) -> Result<Option<u64>, Error> {
    match v {
        Value::Nil => Ok(None),
        other => u64::try_from(other.as_i64()?)
            .map(Some)
            .map_err(|_| Error::UnexpectedReply {
                detail: "a negative fence".into(),
            }),
    }
}

fn require(ok: bool, what: String) -> Result<(), Error> {
    if ok {
        Ok(())
    } else {
        Err(Error::NotHolder { what })
    }
}

// --- locks and leaderships ------------------------------------------------------------------

/// A lock and a leadership are one primitive on different keys: a holder key with a TTL and a
/// counter that hands out the fence (or term). A leadership may be taken again by its holder,
/// which keeps the term and renews the TTL; a lock may not.
struct Fenced {
    holder: Key,
    counter: Key,
    reentrant: bool,
    what: String,
}

impl Fenced {
    fn lock(ks: &Keyspace, key: &str) -> Fenced {
        Fenced {
            holder: ks.lock(key),
            counter: ks.lock_fence(key),
            reentrant: false,
            what: format!("lock {key:?}"),
        }
    }

    fn leadership(ks: &Keyspace, name: &str) -> Fenced {
        Fenced {
            holder: ks.leader(name),
            counter: ks.leader_term(name),
            reentrant: true,
            what: format!("leadership {name:?}"),
        }
    }

    fn grant(&self, ks: &Keyspace, owner: &str, ttl: Duration) -> Result<Request, Error> {
        let reentrant = if self.reentrant { "1" } else { "0" };
        Request::script_in(
            ks,
            &ACQUIRE_FENCED,
            Access::Write,
            vec![self.holder.clone(), self.counter.clone()],
            vec![
                owner.into_arg(),
                ttl_ms(ttl)?.into_arg(),
                reentrant.into_arg(),
            ],
        )
    }

    fn extend(self, ks: &Keyspace, owner: &str, ttl: Duration) -> Result<Single<()>, Error> {
        let request = Request::script_in(
            ks,
            &EXTEND_IF_HOLDER,
            Access::Write,
            vec![self.holder],
            vec![owner.into_arg(), ttl_ms(ttl)?.into_arg()],
        )?;
        let what = self.what;
        Ok(single(request, move |v| require(held(v)?, what)))
    }

    /// The grant, counted only once `replicas` replicas acknowledged it; given back otherwise.
    fn replicated(
        self,
        ks: &Keyspace,
        owner: &str,
        ttl: Duration,
        replicas: u32,
        timeout: Duration,
    ) -> Result<Replicated, Error> {
        let grant = self.grant(ks, owner, ttl)?;
        let give_back = self.release(ks, owner)?;
        Replicated::new(
            grant,
            Box::new(move |_| Ok(give_back)),
            replicas,
            timeout,
            self.what,
        )
    }

    fn release(&self, ks: &Keyspace, owner: &str) -> Result<Request, Error> {
        Request::script_in(
            ks,
            &RELEASE_IF_HOLDER,
            Access::Write,
            vec![self.holder.clone()],
            vec![owner.into_arg()],
        )
    }
}

/// Acquires the lock `key` for `owner` for `ttl`. Yields the fence (strictly increasing per key,
/// forever) or `None` while another owner (or `owner` itself) holds it.
///
/// `owner` names the holder for extend and release: make it unique per acquisition (replica id
/// and a counter), so that a holder that lost the lock and took it again is not confused with
/// its earlier self.
pub fn lock_acquire(
    ks: &Keyspace,
    key: &str,
    owner: &str,
    ttl: Duration,
) -> Result<Single<Option<u64>>, Error> {
    Ok(single(Fenced::lock(ks, key).grant(ks, owner, ttl)?, grant))
}

/// Renews the lock for its holder; [`Error::NotHolder`] when `owner` lost it.
pub fn lock_extend(
    ks: &Keyspace,
    key: &str,
    owner: &str,
    ttl: Duration,
) -> Result<Single<()>, Error> {
    Fenced::lock(ks, key).extend(ks, owner, ttl)
}

/// Releases the lock; yields whether `owner` still held it.
pub fn lock_release(ks: &Keyspace, key: &str, owner: &str) -> Result<Single<bool>, Error> {
    Ok(single(Fenced::lock(ks, key).release(ks, owner)?, held))
}

/// Campaigns for the leadership `name`. Yields the term when `candidate` wins or already leads
/// (the TTL is renewed and the term kept), or `None` while another candidate leads.
pub fn leader_campaign(
    ks: &Keyspace,
    name: &str,
    candidate: &str,
    ttl: Duration,
) -> Result<Single<Option<u64>>, Error> {
    let request = Fenced::leadership(ks, name).grant(ks, candidate, ttl)?;
    Ok(single(request, grant))
}

/// Renews the leadership; [`Error::NotHolder`] when `candidate` lost it.
pub fn leader_renew(
    ks: &Keyspace,
    name: &str,
    candidate: &str,
    ttl: Duration,
) -> Result<Single<()>, Error> {
    Fenced::leadership(ks, name).extend(ks, candidate, ttl)
}

/// Resigns the leadership; yields whether `candidate` still led.
pub fn leader_resign(ks: &Keyspace, name: &str, candidate: &str) -> Result<Single<bool>, Error> {
    Ok(single(
        Fenced::leadership(ks, name).release(ks, candidate)?,
        held,
    ))
}

// --- replicated grants (opt-in WAIT) --------------------------------------------------------

type GiveBack = Box<dyn FnOnce(u64) -> Result<Request, Error> + Send>;

/// A grant (lock, leadership or lease) that is reported as won only once `replicas` replicas
/// acknowledged it (`WAIT`); otherwise it is given back and the plan fails with
/// [`Error::NotReplicated`] (or with the `WAIT` error). What this buys is in
/// `docs/coordination.md`.
///
/// ```text
/// grant ──nil──► Done(None)
///   │ fence
///   ▼
/// WAIT n ms ──acked >= n──► Done(Some(fence))
///   │ acked < n, or an error
///   ▼
/// give back ──any reply──► Done(Err(NotReplicated | the WAIT error))
/// ```
pub struct Replicated {
    grant: Option<Request>,
    wait: Option<Request>,
    give_back: Option<GiveBack>,
    wanted: u32,
    what: String,
    state: ReplicatedState,
}

impl std::fmt::Debug for Replicated {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Replicated")
            .field("grant", &self.grant)
            .field("wait", &self.wait)
            .field("wanted", &self.wanted)
            .field("what", &self.what)
            .field("state", &self.state)
            .finish_non_exhaustive()
    }
}

#[derive(Debug)]
enum ReplicatedState {
    Granting,
    Waiting(u64),
    GivingBack(Error),
    Finished,
}

impl Replicated {
    fn new(
        grant: Request,
        give_back: GiveBack,
        replicas: u32,
        timeout: Duration,
        what: String,
    ) -> Result<Replicated, Error> {
        // WAIT counts the writes of its own connection: it goes to the grant's master, on the
        // connection that carried the grant (one connection per master). It is marked a write
        // so that a lost reply is never answered by sending it again.
        let wait = Request::cmd(Access::Write, "WAIT")
            .arg(replicas)
            .arg(ttl_ms(timeout)?)
            .build()?
            .routed_like(&grant);
        Ok(Replicated {
            grant: Some(grant),
            wait: Some(wait),
            give_back: Some(give_back),
            wanted: replicas,
            what,
            state: ReplicatedState::Granting,
        })
    }

    fn give_back(&mut self, fence: u64, error: Error) -> Step<Option<u64>> {
        let request = self.give_back.take().map(|build| build(fence));
        match request {
            Some(Ok(request)) => {
                self.state = ReplicatedState::GivingBack(error);
                Step::Send(vec![request])
            }
            _ => {
                self.state = ReplicatedState::Finished;
                Step::Done(Err(error))
            }
        }
    }
}

/// [`lock_acquire`] that counts only once `replicas` replicas acknowledged the grant (at most
/// `timeout` of waiting).
pub fn lock_acquire_replicated(
    ks: &Keyspace,
    key: &str,
    owner: &str,
    ttl: Duration,
    replicas: u32,
    timeout: Duration,
) -> Result<Replicated, Error> {
    Fenced::lock(ks, key).replicated(ks, owner, ttl, replicas, timeout)
}

/// [`leader_campaign`] that counts only once `replicas` replicas acknowledged the grant. A
/// campaign that falls short resigns, even a re-entrant one (the leadership was not safe).
pub fn leader_campaign_replicated(
    ks: &Keyspace,
    name: &str,
    candidate: &str,
    ttl: Duration,
    replicas: u32,
    timeout: Duration,
) -> Result<Replicated, Error> {
    Fenced::leadership(ks, name).replicated(ks, candidate, ttl, replicas, timeout)
}

/// [`lease_acquire`] that counts only once `replicas` replicas acknowledged the grant.
pub fn lease_acquire_replicated(
    ks: &Keyspace,
    name: &str,
    holder: &str,
    ttl: Duration,
    replicas: u32,
    timeout: Duration,
) -> Result<Replicated, Error> {
    let grant = lease_request(ks, "acquire", name, holder, ttl, 0)?;
    let (ks, name_owned, holder) = (ks.clone(), name.to_owned(), holder.to_owned());
    Replicated::new(
        grant,
        Box::new(move |token| {
            lease_request(&ks, "release", &name_owned, &holder, Duration::ZERO, token)
        }),
        replicas,
        timeout,
        format!("lease {name:?}"),
    )
}

impl Plan for Replicated {
    type Output = Option<u64>;

    fn start(&mut self) -> Step<Option<u64>> {
        match self.grant.take() {
            Some(grant) => Step::Send(vec![grant]),
            None => Step::Done(Err(misuse("Replicated started twice"))),
        }
    }

    fn resume(&mut self, replies: Vec<Reply>) -> Step<Option<u64>> {
        let Some(reply) = replies.into_iter().next() else {
            return Step::Done(Err(misuse("Replicated resumed without a reply")));
        };
        match std::mem::replace(&mut self.state, ReplicatedState::Finished) {
            ReplicatedState::Granting => match reply.and_then(grant) {
                Ok(Some(fence)) => match self.wait.take() {
                    Some(wait) => {
                        self.state = ReplicatedState::Waiting(fence);
                        Step::Send(vec![wait])
                    }
                    None => Step::Done(Err(misuse("WAIT sent twice"))),
                },
                other => Step::Done(other),
            },
            ReplicatedState::Waiting(fence) => match reply.and_then(|v| v.as_i64()) {
                Ok(acked) if acked >= i64::from(self.wanted) => Step::Done(Ok(Some(fence))),
                Ok(acked) => {
                    let error = Error::NotReplicated {
                        what: std::mem::take(&mut self.what),
                        wanted: self.wanted,
                        acked,
                    };
                    self.give_back(fence, error)
                }
                // The grant stands on the server while its WAIT failed: give it back too, so a
                // caller that sees an error never holds the lock.
                Err(error) => self.give_back(fence, error),
            },
            ReplicatedState::GivingBack(error) => Step::Done(Err(error)),
            ReplicatedState::Finished => Step::Done(Err(misuse("Replicated resumed after done"))),
        }
    }
}

// --- heartbeats -----------------------------------------------------------------------------

/// Marks `replica` alive for `ttl` (server-side expiry), with an opaque `info` value.
pub fn heartbeat(
    ks: &Keyspace,
    replica: &str,
    ttl: Duration,
    info: Bytes,
) -> Result<Single<()>, Error> {
    let request = Request::cmd(Access::Write, "SET")
        .key(&ks.heartbeat(replica))
        .arg(info)
        .arg("PX")
        .arg(ttl_ms(ttl)?)
        .build()?;
    Ok(single(request, |v| v.expect_ok()))
}

/// Whether `replica`'s heartbeat is live: the one-key probe a turn waiter makes before it skips
/// a ticket in the cluster layout.
pub fn replica_alive(ks: &Keyspace, replica: &str) -> Result<Single<bool>, Error> {
    Ok(single(probe_request(ks, replica)?, held))
}

fn probe_request(ks: &Keyspace, replica: &str) -> Result<Request, Error> {
    Request::cmd(Access::Read, "EXISTS")
        .key(&ks.heartbeat(replica))
        .build()
}

/// Ends `replica`'s heartbeat now (a clean shutdown).
pub fn heartbeat_stop(ks: &Keyspace, replica: &str) -> Result<Single<()>, Error> {
    let request = Request::cmd(Access::Write, "DEL")
        .key(&ks.heartbeat(replica))
        .build()?;
    Ok(single(request, |v| v.as_i64().map(|_| ())))
}

/// The ids of the live replicas, sorted, in both layouts: `SCAN` of every master for the
/// heartbeat keys (at most `limit`).
pub fn live_replicas(ks: &Keyspace, limit: usize) -> LiveReplicas {
    let prefix_len = ks.heartbeat("").as_bytes().len();
    LiveReplicas {
        scan: crate::scan::scan(ks.heartbeat_pattern(), limit),
        prefix_len,
    }
}

/// The plan of [`live_replicas`].
#[derive(Debug)]
pub struct LiveReplicas {
    scan: crate::scan::Scan,
    prefix_len: usize,
}

impl LiveReplicas {
    fn map(&self, step: Step<Vec<Bytes>>) -> Step<Vec<String>> {
        match step {
            Step::Send(b) => Step::Send(b),
            Step::Wait(d) => Step::Wait(d),
            Step::Done(keys) => Step::Done(keys.map(|keys| {
                keys.into_iter()
                    .filter_map(|k| {
                        k.get(self.prefix_len..)
                            .map(|id| String::from_utf8_lossy(id).into_owned())
                    })
                    .collect()
            })),
        }
    }
}

impl Plan for LiveReplicas {
    type Output = Vec<String>;

    fn start(&mut self) -> Step<Vec<String>> {
        let step = self.scan.start();
        self.map(step)
    }

    fn resume(&mut self, replies: Vec<Reply>) -> Step<Vec<String>> {
        let step = self.scan.resume(replies);
        self.map(step)
    }
}

// --- turns ----------------------------------------------------------------------------------

/// How a replica waits for its turn.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TurnOptions {
    /// TTL of the holder's owner key; renew with `turn_extend` (default 30 s).
    pub ttl: Duration,
    /// Pause between polls (default 50 ms; at least 1 ms).
    pub poll_interval: Duration,
    /// A served ticket that does not claim its turn within this is skipped (default 3 s). It
    /// covers a take whose reply was lost and a waiter that went away while its replica lives.
    pub claim_timeout: Duration,
    /// Give up waiting after this long, measured on the server's clock from the first poll
    /// (default 60 s). The ticket is withdrawn and the plan fails with [`Error::Timeout`].
    pub wait_timeout: Duration,
}

impl Default for TurnOptions {
    fn default() -> Self {
        TurnOptions {
            ttl: Duration::from_secs(30),
            poll_interval: Duration::from_millis(50),
            claim_timeout: Duration::from_secs(3),
            wait_timeout: Duration::from_secs(60),
        }
    }
}

/// A held turn: what the holder needs to extend, check and release it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TurnGuard {
    /// The chat.
    pub chat: String,
    /// The ticket, which is also the turn's fence: strictly increasing per chat.
    pub ticket: u64,
    /// The queue member: `enc(replica)|enc(request id)`, with `#<n>` after the n-th retake.
    pub member: String,
}

/// Why a served ticket was skipped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SkipReason {
    /// Its replica's heartbeat had expired (whether it held the turn or had not claimed it).
    HeartbeatExpired,
    /// It did not claim its turn within the claim timeout.
    Unclaimed,
    /// It held the turn and its owner key ran out.
    OwnerExpired,
}

/// Something a turn waiter observed: the history a test or an operator can check.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TurnEvent {
    /// The ticket taken.
    Took(u64),
    /// This waiter skipped a served ticket.
    Skipped {
        /// The skipped ticket.
        ticket: u64,
        /// Its member.
        member: String,
        /// Why.
        reason: SkipReason,
    },
    /// This waiter's own ticket was skipped by another (or left the queue); it takes a new one.
    Retook {
        /// The ticket it lost.
        lost: u64,
    },
}

/// A won turn and what the waiter saw on the way.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TurnGrant {
    /// The held turn.
    pub guard: TurnGuard,
    /// Tickets taken and skipped while waiting, in order.
    pub events: Vec<TurnEvent>,
}

/// Consecutive failed requests (connection trouble, not server errors) a turn waiter rides out,
/// one poll interval apart, before it withdraws its ticket and fails.
const TURN_MAX_FAILURES: u32 = 5;

/// The plan that takes a ticket and waits until it is served.
///
/// ```text
///  take ──ticket──► poll ──granted──────────────► Done(grant)
///   ▲                │ ├─retry (it skipped one)─► poll
///   │   skipped      │ ├─wait──► sleep ──► poll
///   └────────────────┘ └─probe (next in line)─► cluster: EXISTS heartbeat ──live──► sleep
///                                               │                          └dead─► skip
///                                               legacy: skip(+ heartbeat key) ──────┘
///  skip ──1 (skipped)──► poll;  0 ──► sleep
///  wait_timeout on the server clock, a cancel, or persistent failures: release ──► Done(err)
/// ```
#[derive(Debug)]
pub struct AcquireTurn {
    ks: Keyspace,
    chat: String,
    replica: String,
    request_id: String,
    retakes: u32,
    options: TurnOptions,
    state: TurnState,
    ticket: Option<u64>,
    started_ms: Option<i64>,
    failures: u32,
    events: Vec<TurnEvent>,
    cancel: Option<Arc<AtomicBool>>,
}

#[derive(Debug)]
enum TurnState {
    Taking,
    Polling,
    /// Probing the heartbeat of the replica that holds (or has not claimed) the served ticket.
    Probing {
        ticket: u64,
        member: String,
    },
    Skipping {
        ticket: u64,
        member: String,
    },
    /// Sleeping one poll interval, then taking (after a failed take) or polling.
    Sleeping {
        then_take: bool,
    },
    /// Withdrawing the ticket before failing with `error`.
    Withdrawing {
        error: Error,
    },
    Finished,
}

/// The turn's five keys in contract order.
fn turn_keys(ks: &Keyspace, chat: &str) -> Vec<Key> {
    TurnPart::ALL.iter().map(|&p| ks.turn(chat, p)).collect()
}

fn turn_request(
    ks: &Keyspace,
    chat: &str,
    op: &str,
    ticket: u64,
    member: &str,
    options: &TurnOptions,
    heartbeat: Option<Key>,
) -> Result<Request, Error> {
    let mut keys = turn_keys(ks, chat);
    keys.extend(heartbeat);
    Request::script_in(
        ks,
        &TURN,
        Access::Write,
        keys,
        vec![
            op.into_arg(),
            ticket.into_arg(),
            member.into_arg(),
            ttl_ms(options.ttl)?.into_arg(),
            ttl_ms(options.claim_timeout)?.into_arg(),
        ],
    )
}

/// The replica of a queue member `enc(replica)|enc(request)`.
fn member_replica(member: &str) -> String {
    let encoded = member.split('|').next().unwrap_or("");
    percent_encoding::percent_decode_str(encoded)
        .decode_utf8_lossy()
        .into_owned()
}

/// Errors a waiter rides out: the connection failed or the cluster was busy. Every turn request
/// can be repeated: a take by the same member gets the same ticket, a poll that granted grants
/// again to the same owner, a skip re-checks what it skips, a probe only reads.
fn transient(e: &Error) -> bool {
    matches!(
        e,
        Error::ReplyLost { .. }
            | Error::Timeout { .. }
            | Error::Connect { .. }
            | Error::NotSent { .. }
            | Error::RetriesExhausted { .. }
            | Error::TooManyRedirections { .. }
    )
}

/// Waits for `replica`'s turn on `chat`. `request_id` must be unique per call of this replica:
/// a retried take with the same id gets the same ticket instead of a second one.
pub fn acquire_turn(
    ks: &Keyspace,
    chat: &str,
    replica: &str,
    request_id: &str,
    options: TurnOptions,
) -> Result<AcquireTurn, Error> {
    let plan = AcquireTurn {
        ks: ks.clone(),
        chat: chat.to_owned(),
        replica: replica.to_owned(),
        request_id: request_id.to_owned(),
        retakes: 0,
        options,
        state: TurnState::Taking,
        ticket: None,
        started_ms: None,
        failures: 0,
        events: Vec::new(),
        cancel: None,
    };
    // Build one request now, so a mistake in the keys fails at construction.
    plan.call("take", 0, None)?;
    Ok(plan)
}

impl AcquireTurn {
    /// Makes the plan withdraw its ticket and end at its next step once `flag` is set: the
    /// async API sets it when the caller stops waiting (its future is dropped), so an abandoned
    /// waiter neither blocks the queue nor takes a turn nobody uses.
    pub fn cancel_on(mut self, flag: Arc<AtomicBool>) -> Self {
        self.cancel = Some(flag);
        self
    }

    fn cancelled(&self) -> bool {
        self.cancel
            .as_ref()
            .is_some_and(|flag| flag.load(Ordering::Acquire))
    }

    fn member(&self) -> String {
        let mut member = format!("{}|{}", enc(&self.replica), enc(&self.request_id));
        if self.retakes > 0 {
            // `#` is outside enc's alphabet, so a retake never equals another request's member.
            member.push_str(&format!("#{}", self.retakes));
        }
        member
    }

    fn call(&self, op: &str, ticket: u64, heartbeat: Option<Key>) -> Result<Request, Error> {
        turn_request(
            &self.ks,
            &self.chat,
            op,
            ticket,
            &self.member(),
            &self.options,
            heartbeat,
        )
    }

    fn send(&mut self, state: TurnState, request: Result<Request, Error>) -> Step<TurnGrant> {
        match request {
            Ok(r) => {
                self.state = state;
                Step::Send(vec![r])
            }
            Err(e) => self.finish(Err(e)),
        }
    }

    fn finish(&mut self, result: Result<TurnGrant, Error>) -> Step<TurnGrant> {
        self.state = TurnState::Finished;
        Step::Done(result)
    }

    fn take(&mut self) -> Step<TurnGrant> {
        let request = self.call("take", 0, None);
        self.send(TurnState::Taking, request)
    }

    fn poll(&mut self) -> Step<TurnGrant> {
        let Some(ticket) = self.ticket else {
            return self.take();
        };
        if self.cancelled() {
            return self.withdraw(Error::Closed);
        }
        let request = self.call("poll", ticket, None);
        self.send(TurnState::Polling, request)
    }

    fn sleep(&mut self, then_take: bool) -> Step<TurnGrant> {
        if self.cancelled() {
            return self.withdraw(Error::Closed);
        }
        self.state = TurnState::Sleeping { then_take };
        Step::Wait(self.options.poll_interval.max(Duration::from_millis(1)))
    }

    /// Gives the ticket back (a waiting ticket leaves the queue; a granted one is released) and
    /// then fails with `error`. Without a known ticket there is nothing to give back: a ticket
    /// whose take reply was lost is skipped by the claim timeout.
    fn withdraw(&mut self, error: Error) -> Step<TurnGrant> {
        let Some(ticket) = self.ticket else {
            return self.finish(Err(error));
        };
        match self.call("release", ticket, None) {
            Ok(request) => {
                self.state = TurnState::Withdrawing { error };
                Step::Send(vec![request])
            }
            Err(_) => self.finish(Err(error)),
        }
    }

    /// A failed request: sleep and repeat (every turn request can be repeated), or give up.
    fn failed(&mut self, error: Error, then_take: bool) -> Step<TurnGrant> {
        if transient(&error) && self.failures < TURN_MAX_FAILURES {
            self.failures += 1;
            return self.sleep(then_take);
        }
        self.withdraw(error)
    }

    fn skip(&mut self, ticket: u64, member: String) -> Step<TurnGrant> {
        // The legacy script reads the heartbeat itself, in the same atomic call as the skip.
        let heartbeat = (self.ks.layout() == Layout::Legacy)
            .then(|| self.ks.heartbeat(&member_replica(&member)));
        let request = turn_request(
            &self.ks,
            &self.chat,
            "skip",
            ticket,
            &member,
            &self.options,
            heartbeat,
        );
        self.send(TurnState::Skipping { ticket, member }, request)
    }

    fn timed_out(&mut self, now: i64) -> bool {
        let started = *self.started_ms.get_or_insert(now);
        let waited = u128::try_from(now.saturating_sub(started)).unwrap_or(0);
        waited > self.options.wait_timeout.as_millis()
    }

    fn on_poll(&mut self, value: Value) -> Step<TurnGrant> {
        let poll = match Poll::parse(value) {
            Ok(p) => p,
            Err(e) => return self.withdraw(e),
        };
        if poll.status == "granted" {
            let Some(ticket) = self.ticket else {
                return self.finish(Err(misuse("a turn granted before a take")));
            };
            if self.cancelled() {
                return self.withdraw(Error::Closed);
            }
            let grant = TurnGrant {
                guard: TurnGuard {
                    chat: self.chat.clone(),
                    ticket,
                    member: self.member(),
                },
                events: std::mem::take(&mut self.events),
            };
            return self.finish(Ok(grant));
        }
        if self.timed_out(poll.now) {
            return self.withdraw(Error::Timeout {
                outcome_unknown: false,
            });
        }
        match poll.status.as_str() {
            "skipped" => {
                self.events.push(TurnEvent::Retook {
                    lost: self.ticket.unwrap_or(poll.ticket),
                });
                self.retakes += 1;
                self.ticket = None;
                self.take()
            }
            "retry" => {
                let reason = match poll.reason.as_str() {
                    "unclaimed" => Some(SkipReason::Unclaimed),
                    "expired" => Some(SkipReason::OwnerExpired),
                    // 'gone': the served ticket had already left; nobody was skipped.
                    _ => None,
                };
                if let Some(reason) = reason {
                    self.events.push(TurnEvent::Skipped {
                        ticket: poll.ticket,
                        member: poll.member,
                        reason,
                    });
                }
                self.poll()
            }
            "wait" => self.sleep(false),
            "probe" => match self.ks.layout() {
                Layout::Legacy => self.skip(poll.ticket, poll.member),
                Layout::Cluster => {
                    let probe = probe_request(&self.ks, &member_replica(&poll.member));
                    let state = TurnState::Probing {
                        ticket: poll.ticket,
                        member: poll.member,
                    };
                    self.send(state, probe)
                }
            },
            other => self.withdraw(Error::UnexpectedReply {
                detail: format!("a turn poll answered status {other:?}"),
            }),
        }
    }
}

/// A decoded poll reply: `{status, server ms, member, ticket[, reason]}`.
struct Poll {
    status: String,
    now: i64,
    member: String,
    ticket: u64,
    reason: String,
}

impl Poll {
    fn parse(value: Value) -> Result<Poll, Error> {
        let mut items = value.into_array()?.into_iter();
        let (Some(status), Some(now), Some(member), Some(ticket)) =
            (items.next(), items.next(), items.next(), items.next())
        else {
            return Err(Error::UnexpectedReply {
                detail: "a turn poll reply has fewer than 4 items".into(),
            });
        };
        let ticket = u64::try_from(ticket.as_i64()?).map_err(|_| Error::UnexpectedReply {
            detail: "a negative ticket".into(),
        })?;
        let reason = match items.next() {
            Some(v) => v.into_string()?,
            None => String::new(),
        };
        Ok(Poll {
            status: status.into_string()?,
            now: now.as_i64()?,
            member: member.into_string()?,
            ticket,
            reason,
        })
    }
}

impl Plan for AcquireTurn {
    type Output = TurnGrant;

    fn start(&mut self) -> Step<TurnGrant> {
        self.take()
    }

    fn resume(&mut self, replies: Vec<Reply>) -> Step<TurnGrant> {
        let state = std::mem::replace(&mut self.state, TurnState::Finished);
        if let TurnState::Sleeping { then_take } = state {
            return if then_take { self.take() } else { self.poll() };
        }
        let Some(reply) = replies.into_iter().next() else {
            return self.finish(Err(misuse("AcquireTurn resumed without a reply")));
        };
        match state {
            TurnState::Taking => match reply {
                Ok(value) => match value.as_i64().map(u64::try_from) {
                    Ok(Ok(ticket)) => {
                        self.failures = 0;
                        self.ticket = Some(ticket);
                        self.events.push(TurnEvent::Took(ticket));
                        self.poll()
                    }
                    _ => self.finish(Err(Error::UnexpectedReply {
                        detail: format!("a turn take answered {value:?}"),
                    })),
                },
                // Taking again with the same member is idempotent: a take that ran but lost
                // its reply yields the same ticket.
                Err(e) => self.failed(e, true),
            },
            TurnState::Polling => match reply {
                Ok(value) => {
                    self.failures = 0;
                    self.on_poll(value)
                }
                Err(e) => self.failed(e, false),
            },
            TurnState::Probing { ticket, member } => match reply.and_then(held) {
                Ok(true) => self.sleep(false),
                Ok(false) => self.skip(ticket, member),
                Err(e) => self.failed(e, false),
            },
            TurnState::Skipping { ticket, member } => match reply.and_then(|v| v.as_i64()) {
                Ok(1) => {
                    self.events.push(TurnEvent::Skipped {
                        ticket,
                        member,
                        reason: SkipReason::HeartbeatExpired,
                    });
                    self.poll()
                }
                Ok(_) => self.sleep(false),
                Err(e) => self.failed(e, false),
            },
            TurnState::Withdrawing { error } => self.finish(Err(error)),
            TurnState::Sleeping { .. } | TurnState::Finished => {
                self.finish(Err(misuse("AcquireTurn resumed after done")))
            }
        }
    }
}

/// Renews a held turn, and checks it is still held: [`Error::NotHolder`] for a holder that lost
/// its turn (paused past its TTL, or skipped after its heartbeat expired). This is the fenced
/// check before acting on a chat.
pub fn turn_extend(
    ks: &Keyspace,
    guard: &TurnGuard,
    options: &TurnOptions,
) -> Result<Single<()>, Error> {
    holder_call(ks, guard, "extend", options)
}

/// Ends a held turn and serves the next ticket; [`Error::NotHolder`] when it was lost (the
/// ticket is cleaned up all the same).
pub fn turn_release(
    ks: &Keyspace,
    guard: &TurnGuard,
    options: &TurnOptions,
) -> Result<Single<()>, Error> {
    holder_call(ks, guard, "release", options)
}

/// A `turn` operation only the holder may make: it answers 1 when the guard holds the turn.
fn holder_call(
    ks: &Keyspace,
    guard: &TurnGuard,
    op: &str,
    options: &TurnOptions,
) -> Result<Single<()>, Error> {
    let request = turn_request(
        ks,
        &guard.chat,
        op,
        guard.ticket,
        &guard.member,
        options,
        None,
    )?;
    let what = format!("turn {} of chat {:?}", guard.ticket, guard.chat);
    Ok(single(request, move |v| require(v.as_i64()? == 1, what)))
}

// --- leases ---------------------------------------------------------------------------------

fn lease_request(
    ks: &Keyspace,
    op: &str,
    name: &str,
    holder: &str,
    ttl: Duration,
    token: u64,
) -> Result<Request, Error> {
    Request::script_in(
        ks,
        &LEASE,
        Access::Write,
        vec![ks.lease(name)],
        vec![
            op.into_arg(),
            holder.into_arg(),
            ttl_ms(ttl)?.into_arg(),
            token.into_arg(),
        ],
    )
}

/// Acquires the lease `name` for `holder`. Yields its token (greater than any token handed out
/// before, even after expiry; the same token when `holder` takes its live lease again) or
/// `None` while another holder's lease is live.
pub fn lease_acquire(
    ks: &Keyspace,
    name: &str,
    holder: &str,
    ttl: Duration,
) -> Result<Single<Option<u64>>, Error> {
    let request = lease_request(ks, "acquire", name, holder, ttl, 0)?;
    Ok(single(request, grant))
}

/// Extends a live lease; [`Error::NotHolder`] when it expired or passed to another holder.
pub fn lease_renew(
    ks: &Keyspace,
    name: &str,
    holder: &str,
    token: u64,
    ttl: Duration,
) -> Result<Single<()>, Error> {
    let request = lease_request(ks, "renew", name, holder, ttl, token)?;
    let what = format!("lease {name:?}");
    Ok(single(request, move |v| require(held(v)?, what)))
}

/// Ends a lease early; yields whether `holder` still held it (live, with that token). The token
/// counter stays.
pub fn lease_release(
    ks: &Keyspace,
    name: &str,
    holder: &str,
    token: u64,
) -> Result<Single<bool>, Error> {
    let request = lease_request(ks, "release", name, holder, Duration::ZERO, token)?;
    Ok(single(request, held))
}

// --- schedules ------------------------------------------------------------------------------

/// A stored schedule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Schedule {
    /// Its fencing token.
    pub token: i64,
    /// Its data, as written.
    pub data: Bytes,
}

fn schedule_request(
    ks: &Keyspace,
    op: &str,
    id: &str,
    token: i64,
    data: Bytes,
) -> Result<Request, Error> {
    if !(-MAX_SCHEDULE_TOKEN..=MAX_SCHEDULE_TOKEN).contains(&token) {
        return Err(Error::Config(format!(
            "schedule {id:?}: the fencing token {token} is outside ±2^53 (scripts compare tokens \
             as doubles)"
        )));
    }
    let mut keys = vec![ks.record(RecordKind::Schedule, id)];
    keys.extend(ks.record_index_of(RecordKind::Schedule, id));
    Request::script_in(
        ks,
        &SCHEDULE,
        Access::Write,
        keys,
        vec![op.into_arg(), id.into_arg(), token.into_arg(), data],
    )
}

fn schedule_written(id: String, token: i64) -> impl FnOnce(Value) -> Result<(), Error> {
    move |v| {
        let mut items = v.into_array()?.into_iter();
        let status = items.next().map(Value::into_string).transpose()?;
        let stored = items.next().map(|v| v.as_i64()).transpose()?;
        match (status.as_deref(), stored) {
            (Some("ok"), _) => Ok(()),
            (Some("stale"), Some(stored)) => Err(Error::Stale {
                what: format!("schedule {id:?}"),
                token,
                stored,
            }),
            _ => Err(Error::UnexpectedReply {
                detail: "a schedule write answered neither ok nor stale".into(),
            }),
        }
    }
}

/// Writes a schedule with fencing token `token` (within ±2^53); [`Error::Stale`] when the
/// stored token is higher (a stale writer cannot overwrite a newer schedule or resurrect a
/// deleted one). An equal token is the same writer and is accepted.
pub fn schedule_put(ks: &Keyspace, id: &str, token: i64, data: Bytes) -> Result<Single<()>, Error> {
    let request = schedule_request(ks, "put", id, token, data)?;
    Ok(single(request, schedule_written(id.to_owned(), token)))
}

/// Deletes a schedule, leaving a marker that keeps the token; [`Error::Stale`] as for put.
pub fn schedule_delete(ks: &Keyspace, id: &str, token: i64) -> Result<Single<()>, Error> {
    let request = schedule_request(ks, "delete", id, token, Bytes::new())?;
    Ok(single(request, schedule_written(id.to_owned(), token)))
}

/// Reads a schedule; a deleted marker reads as `None`.
pub fn schedule_get(ks: &Keyspace, id: &str) -> Result<Single<Option<Schedule>>, Error> {
    Ok(single(schedule_get_request(ks, id)?, decode_schedule))
}

fn schedule_get_request(ks: &Keyspace, id: &str) -> Result<Request, Error> {
    Request::cmd(Access::Read, "HMGET")
        .key(&ks.record(RecordKind::Schedule, id))
        .arg("token")
        .arg("data")
        .arg("deleted")
        .build()
}

fn decode_schedule(v: Value) -> Result<Option<Schedule>, Error> {
    let mut items = v.into_array()?.into_iter();
    let (Some(token), Some(data), Some(deleted)) = (items.next(), items.next(), items.next())
    else {
        return Err(Error::UnexpectedReply {
            detail: "HMGET of a schedule answered fewer than 3 fields".into(),
        });
    };
    if token == Value::Nil || deleted.into_opt_bytes()?.as_deref() == Some(b"1") {
        return Ok(None);
    }
    Ok(Some(Schedule {
        token: token.as_i64()?,
        data: data.into_opt_bytes()?.unwrap_or_default(),
    }))
}

/// The most schedules a listing returns.
pub const MAX_SCHEDULES: usize = 10_000;

/// Lists the live schedules (deleted markers hidden), sorted by id: the first `limit` (clamped
/// to [`MAX_SCHEDULES`]). Cluster layout: the 32 bucket indexes, read in one batch, then the
/// records; exact even while slots move. Legacy layout: `SCAN` for the records (at most
/// [`MAX_SCHEDULES`] record keys, markers included, are considered).
pub fn schedule_list(ks: &Keyspace, limit: usize) -> Result<ListSchedules, Error> {
    let limit = limit.clamp(1, MAX_SCHEDULES);
    let indexes = ks
        .record_indexes(RecordKind::Schedule)
        .iter()
        .map(|index| {
            Request::cmd(Access::Read, "ZRANGE")
                .key(index)
                .arg("0")
                .arg("-1")
                .build()
        })
        .collect::<Result<Vec<_>, _>>()?;
    let scan = match ks.record_pattern(RecordKind::Schedule) {
        // The whole scan, not `limit` keys: SCAN returns keys in no order, and markers count
        // among them; the first `limit` live ids are picked after sorting.
        Some(pattern) if indexes.is_empty() => Some(crate::scan::scan(pattern, MAX_SCHEDULES)),
        _ => None,
    };
    Ok(ListSchedules {
        ks: ks.clone(),
        limit,
        indexes,
        scan,
        ids: Vec::new(),
        next: 0,
        found: Vec::new(),
    })
}

/// The plan of [`schedule_list`].
#[derive(Debug)]
pub struct ListSchedules {
    ks: Keyspace,
    limit: usize,
    /// The bucket index reads (cluster layout); sent by `start`.
    indexes: Vec<Request>,
    /// The record scan (legacy layout), until it is done.
    scan: Option<crate::scan::Scan>,
    /// The ids to read, sorted; `next` is the first not yet read.
    ids: Vec<String>,
    next: usize,
    found: Vec<(String, Schedule)>,
}

/// Records read per step of a listing.
const SCHEDULE_READ_CHUNK: usize = 1000;

impl ListSchedules {
    fn got_ids(&mut self, mut ids: Vec<String>) -> Step<Vec<(String, Schedule)>> {
        ids.sort();
        ids.dedup();
        self.ids = ids;
        self.read_next()
    }

    fn read_next(&mut self) -> Step<Vec<(String, Schedule)>> {
        if self.next >= self.ids.len() || self.found.len() >= self.limit {
            let mut found = std::mem::take(&mut self.found);
            found.truncate(self.limit);
            return Step::Done(Ok(found));
        }
        let end = (self.next + SCHEDULE_READ_CHUNK).min(self.ids.len());
        let batch = self.ids[self.next..end]
            .iter()
            .map(|id| schedule_get_request(&self.ks, id))
            .collect::<Result<Vec<_>, _>>();
        match batch {
            Ok(batch) => Step::Send(batch),
            Err(e) => Step::Done(Err(e)),
        }
    }

    fn got_records(&mut self, replies: Vec<Reply>) -> Step<Vec<(String, Schedule)>> {
        let end = (self.next + SCHEDULE_READ_CHUNK).min(self.ids.len());
        if replies.len() != end - self.next {
            return Step::Done(Err(misuse("a schedule batch answered with another count")));
        }
        for (id, reply) in self.ids[self.next..end].iter().zip(replies) {
            // A record deleted (or turned into a marker) since the ids were read is left out.
            match reply.and_then(decode_schedule) {
                Ok(Some(schedule)) => self.found.push((id.clone(), schedule)),
                Ok(None) => {}
                Err(e) => return Step::Done(Err(e)),
            }
        }
        self.next = end;
        self.read_next()
    }
}

impl Plan for ListSchedules {
    type Output = Vec<(String, Schedule)>;

    fn start(&mut self) -> Step<Self::Output> {
        if let Some(scan) = self.scan.as_mut() {
            return match scan.start() {
                Step::Done(Ok(keys)) => {
                    self.scan = None;
                    let ids = self.ids_of(keys);
                    self.got_ids(ids)
                }
                Step::Done(Err(e)) => Step::Done(Err(e)),
                Step::Send(b) => Step::Send(b),
                Step::Wait(d) => Step::Wait(d),
            };
        }
        Step::Send(self.indexes.clone())
    }

    fn resume(&mut self, replies: Vec<Reply>) -> Step<Self::Output> {
        if let Some(scan) = self.scan.as_mut() {
            return match scan.resume(replies) {
                Step::Done(Ok(keys)) => {
                    self.scan = None;
                    let ids = self.ids_of(keys);
                    self.got_ids(ids)
                }
                Step::Done(Err(e)) => Step::Done(Err(e)),
                Step::Send(b) => Step::Send(b),
                Step::Wait(d) => Step::Wait(d),
            };
        }
        if !self.indexes.is_empty() {
            self.indexes.clear();
            let mut ids = Vec::new();
            for reply in replies {
                match reply.and_then(Value::into_array) {
                    Ok(members) => {
                        for member in members {
                            match member.into_string() {
                                Ok(id) => ids.push(id),
                                Err(e) => return Step::Done(Err(e)),
                            }
                        }
                    }
                    Err(e) => return Step::Done(Err(e)),
                }
            }
            return self.got_ids(ids);
        }
        self.got_records(replies)
    }
}

impl ListSchedules {
    /// The ids of scanned legacy record keys (`p:schedule:<id>`).
    fn ids_of(&self, keys: Vec<Bytes>) -> Vec<String> {
        let prefix_len = self.ks.record(RecordKind::Schedule, "").as_bytes().len();
        keys.into_iter()
            .filter_map(|k| {
                k.get(prefix_len..)
                    .map(|id| String::from_utf8_lossy(id).into_owned())
            })
            .collect()
    }
}

// --- durability -----------------------------------------------------------------------------

/// The durability table's parts, in the script's KEYS order.
pub const DURABLE_PARTS: [&str; 7] = [
    "journal", "items", "ready", "seq", "claims", "owners", "done",
];

fn durable_request(ks: &Keyspace, table: &str, args: Vec<Bytes>) -> Result<Request, Error> {
    let keys = DURABLE_PARTS
        .iter()
        .map(|part| ks.durable(table, part))
        .collect::<Result<Vec<_>, _>>()?;
    // One hash tag, {durable:<table>}, in both layouts: always one slot.
    Request::script(&DURABLE, Access::Write, keys, args)
}

/// Marks inbound message `id` as being processed: yields `true` the first time within
/// `window`, `false` for a duplicate delivery.
pub fn journal_begin(
    ks: &Keyspace,
    table: &str,
    id: &str,
    window: Duration,
) -> Result<Single<bool>, Error> {
    let args = vec![
        "begin".into_arg(),
        id.into_arg(),
        ttl_ms(window)?.into_arg(),
    ];
    Ok(single(durable_request(ks, table, args)?, held))
}

/// Forgets inbound message `id` after its processing failed, so a redelivery is processed.
pub fn journal_forget(ks: &Keyspace, table: &str, id: &str) -> Result<Single<bool>, Error> {
    let args = vec!["forget".into_arg(), id.into_arg()];
    Ok(single(durable_request(ks, table, args)?, held))
}

/// Queues an outbound send under an idempotency `key`: yields `false` when that key is already
/// queued, claimed, or was acked within `window`.
pub fn outbox_enqueue(
    ks: &Keyspace,
    table: &str,
    key: &str,
    payload: Bytes,
    window: Duration,
) -> Result<Single<bool>, Error> {
    let args = vec![
        "enqueue".into_arg(),
        key.into_arg(),
        ttl_ms(window)?.into_arg(),
        payload,
    ];
    Ok(single(durable_request(ks, table, args)?, held))
}

/// One claimed outbound send.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Claimed {
    /// The idempotency key.
    pub key: String,
    /// The payload.
    pub payload: Bytes,
}

/// Claims up to `max` sends for `instance`; each stays claimed for `visibility`, then returns
/// to the queue unless acked (so work of an instance that stopped is recovered).
pub fn outbox_claim(
    ks: &Keyspace,
    table: &str,
    instance: &str,
    max: u32,
    visibility: Duration,
) -> Result<Single<Vec<Claimed>>, Error> {
    let args = vec![
        "claim".into_arg(),
        instance.into_arg(),
        ttl_ms(visibility)?.into_arg(),
        max.into_arg(),
    ];
    Ok(single(durable_request(ks, table, args)?, |v| {
        let items = v.into_array()?;
        if items.len() % 2 != 0 {
            return Err(Error::UnexpectedReply {
                detail: "an outbox claim answered an odd number of items".into(),
            });
        }
        let mut claimed = Vec::with_capacity(items.len() / 2);
        let mut items = items.into_iter();
        while let (Some(key), Some(payload)) = (items.next(), items.next()) {
            claimed.push(Claimed {
                key: key.into_string()?,
                payload: payload.into_bytes()?,
            });
        }
        Ok(claimed)
    }))
}

/// Acks a sent item; [`Error::NotHolder`] when `instance` no longer holds its claim (its
/// visibility timeout passed, the claim went back to the queue, and the send may be made again
/// by another instance).
pub fn outbox_ack(
    ks: &Keyspace,
    table: &str,
    key: &str,
    instance: &str,
) -> Result<Single<()>, Error> {
    let args = vec!["ack".into_arg(), key.into_arg(), instance.into_arg()];
    let what = format!("outbox claim {key:?}");
    Ok(single(durable_request(ks, table, args)?, move |v| {
        require(held(v)?, what)
    }))
}

/// Puts every claim of a stopped `instance` back in the queue now; yields how many.
pub fn outbox_recover(ks: &Keyspace, table: &str, instance: &str) -> Result<Single<i64>, Error> {
    let args = vec!["recover".into_arg(), instance.into_arg()];
    Ok(single(durable_request(ks, table, args)?, |v| v.as_i64()))
}
