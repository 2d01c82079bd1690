//! Per-chat turns: tickets served in order, the holder owning the chat's `owner` key.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::error::{ConfigError, Error};
use crate::keys::{enc, Key, Keyspace, Layout, TurnPart};
use crate::plan::{misuse, single, Plan, Reply, Single, Step};
use crate::request::{Access, Arg, Request};
use crate::scripts::TURN;
use crate::ttl::ttl_ms;
use crate::value::Value;

use super::{held, require};

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
    /// (default 60 s). The ticket is withdrawn and the plan fails with
    /// [`Error::TurnWaitTimedOut`]. Zero means one poll, then give up.
    pub wait_timeout: Duration,
    /// How long a chat's queue (`seq`, `tix`, `serving`, `last`) outlives the last turn call
    /// on it, on the server's clock (default 1 hour). Every take, poll, skip, release and
    /// extend renews it, so only a queue nobody waits on or holds expires; its counter then
    /// restarts above every earlier ticket (see `docs/coordination.md`). It must be at least
    /// twice the longest of `ttl`, `claim_timeout`, `wait_timeout` and `poll_interval`
    /// ([`TurnOptions::check`]); use the same value on every replica.
    pub idle_lifetime: Duration,
}

impl Default for TurnOptions {
    fn default() -> Self {
        TurnOptions {
            ttl: Duration::from_secs(30),
            poll_interval: Duration::from_millis(50),
            claim_timeout: Duration::from_secs(3),
            wait_timeout: Duration::from_secs(60),
            idle_lifetime: Duration::from_secs(3600),
        }
    }
}

/// The shortest idle lifetime accepted, whatever the timers: a restarted ticket counter is
/// above the tickets of its earlier life only when the queue was idle for more than a
/// millisecond (and longer than a script run).
pub const MIN_IDLE_LIFETIME: Duration = Duration::from_millis(10);

impl TurnOptions {
    /// Refuses a `ttl`, `claim_timeout` or `poll_interval` under 1 ms
    /// ([`ConfigError::DurationBelowOneMs`]), and an `idle_lifetime` shorter than twice the
    /// longest of `ttl`, `claim_timeout`, `wait_timeout` and `poll_interval`, or shorter than
    /// [`MIN_IDLE_LIFETIME`], with [`Error::Config`]. Every turn plan checks this before it
    /// sends anything.
    ///
    /// Why: the queue must only expire once nobody waits on it or holds it. A live waiter
    /// calls at least every poll interval until it gives up (the wait timeout), a live holder
    /// extends within its TTL, and a served ticket nobody claims is skipped within the claim
    /// timeout; with every one of these fitting twice into the lifetime, round trips and the
    /// retries of lost requests cannot stretch a live participant's silence past it.
    pub fn check(&self) -> Result<(), Error> {
        // Each timer at least 1 ms: a zero TTL or claim timeout would expire the turn as it is
        // granted, a zero poll interval would busy-loop. A zero wait timeout is not refused:
        // it means "one poll, then give up".
        ttl_ms(self.ttl, "TurnOptions::ttl")?;
        ttl_ms(self.claim_timeout, "TurnOptions::claim_timeout")?;
        ttl_ms(self.poll_interval, "TurnOptions::poll_interval")?;
        // The idle lifetime is bounded below by the relation that follows (and by
        // MIN_IDLE_LIFETIME), so a zero one is refused as too short.
        let longest = self
            .ttl
            .max(self.claim_timeout)
            .max(self.wait_timeout)
            .max(self.poll_interval);
        let least = longest.saturating_mul(2).max(MIN_IDLE_LIFETIME);
        if self.idle_lifetime < least {
            return Err(ConfigError::TurnIdleLifetimeTooShort {
                given: self.idle_lifetime,
                least,
            }
            .into());
        }
        Ok(())
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
    options.check()?;
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
            ttl_ms(options.ttl, "TurnOptions::ttl")?.into_arg(),
            ttl_ms(options.claim_timeout, "TurnOptions::claim_timeout")?.into_arg(),
            ttl_ms(options.idle_lifetime, "TurnOptions::idle_lifetime")?.into_arg(),
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
                Step::Send(r.into())
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
                Step::Send(request.into())
            }
            Err(_) => {
                let mut error = error;
                if let Error::TurnWaitTimedOut { withdrawn, .. } = &mut error {
                    *withdrawn = false;
                }
                self.finish(Err(error))
            }
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

    /// How long this waiter has polled, on the server's clock, once that is past the wait
    /// timeout.
    fn timed_out(&mut self, now: i64) -> Option<u64> {
        let started = *self.started_ms.get_or_insert(now);
        let waited = u64::try_from(now.saturating_sub(started)).unwrap_or(0);
        (u128::from(waited) >= self.options.wait_timeout.as_millis()).then_some(waited)
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
        if let Some(waited_ms) = self.timed_out(poll.now) {
            let ticket = self.ticket.unwrap_or(poll.ticket);
            return self.withdraw(Error::TurnWaitTimedOut {
                chat: self.chat.clone(),
                ticket,
                waited_ms,
                withdrawn: true,
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
                    let probe =
                        super::heartbeat::probe_request(&self.ks, &member_replica(&poll.member));
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

    fn operation(&self) -> &'static str {
        "turn_acquire"
    }

    /// Polls until served, waiting between polls.
    fn may_wait(&self) -> bool {
        true
    }

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
            TurnState::Withdrawing { mut error } => {
                // A withdrawal without a reply may not have run: say so, not "withdrawn".
                let answered = reply.is_ok();
                if let Error::TurnWaitTimedOut { withdrawn, .. } = &mut error {
                    *withdrawn = answered;
                }
                self.finish(Err(error))
            }
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
    holder_call("turn_extend", ks, guard, "extend", options)
}

/// Ends a held turn and serves the next ticket; yields whether the guard still held it (a lost
/// ticket is cleaned up all the same).
pub fn turn_release(
    ks: &Keyspace,
    guard: &TurnGuard,
    options: &TurnOptions,
) -> Result<Single<bool>, Error> {
    let request = holder_request(ks, guard, "release", options)?;
    Ok(single("turn_release", request, |v| Ok(v.as_i64()? == 1)))
}

/// A `turn` operation only the holder may make: it answers 1 when the guard holds the turn.
fn holder_call(
    operation: &'static str,
    ks: &Keyspace,
    guard: &TurnGuard,
    op: &str,
    options: &TurnOptions,
) -> Result<Single<()>, Error> {
    let request = holder_request(ks, guard, op, options)?;
    let what = format!("turn {} of chat {:?}", guard.ticket, guard.chat);
    Ok(single(operation, request, move |v| {
        require(v.as_i64()? == 1, what)
    }))
}

fn holder_request(
    ks: &Keyspace,
    guard: &TurnGuard,
    op: &str,
    options: &TurnOptions,
) -> Result<crate::request::Request, Error> {
    turn_request(
        ks,
        &guard.chat,
        op,
        guard.ticket,
        &guard.member,
        options,
        None,
    )
}
