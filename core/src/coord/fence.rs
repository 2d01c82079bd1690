//! Locks and leaderships: a holder key with a TTL and a counter that hands out fences
//! (terms), and grants that wait for replicas (`WAIT`).

use std::time::Duration;

use crate::error::Error;
use crate::keys::{Key, Keyspace};
use crate::plan::{misuse, single, Plan, Reply, Single, Step};
use crate::request::{Access, Arg, Request};
use crate::scripts::{ACQUIRE_FENCED, EXTEND_IF_HOLDER, RELEASE_IF_HOLDER};
use crate::ttl::ttl_ms;
use crate::value::Value;

use super::{grant, held, require};

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
                ttl_ms(ttl, "ttl")?.into_arg(),
                reentrant.into_arg(),
            ],
        )
    }

    /// Renews the hold of `owner`, and with `term` only in that term (the counter's key
    /// joins the script's).
    fn extend(
        self,
        operation: &'static str,
        ks: &Keyspace,
        owner: &str,
        term: Option<u64>,
        ttl: Duration,
    ) -> Result<Single<()>, Error> {
        let mut keys = vec![self.holder];
        let mut args = vec![owner.into_arg(), ttl_ms(ttl, "ttl")?.into_arg()];
        if let Some(term) = term {
            keys.push(self.counter);
            args.push(term.into_arg());
        }
        let request = Request::script_in(ks, &EXTEND_IF_HOLDER, Access::Write, keys, args)?;
        let what = self.what;
        Ok(single(operation, request, move |v| require(held(v)?, what)))
    }

    /// The grant, counted only once `replicas` replicas acknowledged it; given back otherwise.
    fn replicated(
        self,
        operation: &'static str,
        ks: &Keyspace,
        owner: &str,
        ttl: Duration,
        replicas: u32,
        timeout: Duration,
    ) -> Result<Replicated, Error> {
        let grant = self.grant(ks, owner, ttl)?;
        let give_back = self.release(ks, owner, None)?;
        Replicated::new(
            operation,
            grant,
            Box::new(move |_| Ok(give_back)),
            replicas,
            timeout,
            self.what,
        )
        .map(Replicated::blind)
    }

    /// Releases the hold of `owner`, and with `term` only in that term.
    fn release(&self, ks: &Keyspace, owner: &str, term: Option<u64>) -> Result<Request, Error> {
        let mut keys = vec![self.holder.clone()];
        let mut args = vec![owner.into_arg()];
        if let Some(term) = term {
            keys.push(self.counter.clone());
            args.push(term.into_arg());
        }
        Request::script_in(ks, &RELEASE_IF_HOLDER, Access::Write, keys, args)
    }
}

/// Acquires the lock `key` for `owner` for `ttl`. Yields the fence (strictly increasing per key,
/// forever) or `None` while another owner (or `owner` itself) holds it.
///
/// `owner` names the holder for extend and release: make it unique per acquisition (replica id
/// and a counter), so that a holder that lost the lock and took it again is not confused with
/// its earlier self.
///
/// A grant whose outcome is unknown (its reply lost, its deadline passed) is given back before
/// the error is reported (see [`LockAcquire`]).
pub fn lock_acquire(
    ks: &Keyspace,
    key: &str,
    owner: &str,
    ttl: Duration,
) -> Result<LockAcquire, Error> {
    let fenced = Fenced::lock(ks, key);
    Ok(LockAcquire {
        grant: Some(fenced.grant(ks, owner, ttl)?),
        give_back: Some(fenced.release(ks, owner, None)?),
        giving_back: None,
    })
}

/// The plan of [`lock_acquire`]. A grant whose outcome is unknown gives itself back before the
/// error is reported: the lock may stand on the server for its owner, unique to this
/// acquisition, with nobody told its fence and no guard to release it, so it blocked its key
/// for its whole TTL. The give-back (`release_if_holder` of the owner) finds the lock held by
/// another owner, or by nobody, when the grant did not go through, and leaves it.
///
/// ```text
/// grant ──fence or nil──► Done
///   │ outcome unknown (ReplyLost, a timeout)
///   ▼
/// release of the owner ──any reply──► Done(Err(the grant's error))
/// ```
#[derive(Debug)]
pub struct LockAcquire {
    grant: Option<Request>,
    give_back: Option<Request>,
    /// The grant's error, while its give-back is out.
    giving_back: Option<Error>,
}

impl Plan for LockAcquire {
    type Output = Option<u64>;

    fn operation(&self) -> &'static str {
        "lock_acquire"
    }

    fn first_slot(&self) -> Option<u16> {
        self.grant.as_ref().and_then(Request::slot)
    }

    fn start(&mut self) -> Step<Option<u64>> {
        match self.grant.take() {
            Some(grant) => Step::Send(grant.into()),
            None => Step::Done(Err(misuse("LockAcquire started twice"))),
        }
    }

    fn resume(&mut self, replies: Vec<Reply>) -> Step<Option<u64>> {
        match replies.into_iter().next() {
            Some(reply) => self.resume_one(reply),
            None => Step::Done(Err(misuse("LockAcquire resumed without a reply"))),
        }
    }

    fn resume_one(&mut self, reply: Reply) -> Step<Option<u64>> {
        if let Some(error) = self.giving_back.take() {
            if let Err(e) = reply {
                tracing::warn!(error = %e, "a lock grant of unknown outcome could not be given back");
            }
            return Step::Done(Err(error));
        }
        match (reply, self.give_back.take()) {
            (Ok(value), _) => Step::Done(grant(value)),
            (Err(error), Some(give_back)) if error.outcome_unknown() => {
                self.giving_back = Some(error);
                Step::Send(give_back.into())
            }
            (Err(error), _) => Step::Done(Err(error)),
        }
    }
}

/// Renews the lock for its holder; [`Error::NotHolder`] when `owner` lost it.
pub fn lock_extend(
    ks: &Keyspace,
    key: &str,
    owner: &str,
    ttl: Duration,
) -> Result<Single<()>, Error> {
    Fenced::lock(ks, key).extend("lock_extend", ks, owner, None, ttl)
}

/// Releases the lock; yields whether `owner` still held it.
pub fn lock_release(ks: &Keyspace, key: &str, owner: &str) -> Result<Single<bool>, Error> {
    Ok(single(
        "lock_release",
        Fenced::lock(ks, key).release(ks, owner, None)?,
        held,
    ))
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
    Ok(single("leader_campaign", request, grant))
}

/// Renews the leadership; [`Error::NotHolder`] when `candidate` lost it.
pub fn leader_renew(
    ks: &Keyspace,
    name: &str,
    candidate: &str,
    ttl: Duration,
) -> Result<Single<()>, Error> {
    Fenced::leadership(ks, name).extend("leader_renew", ks, candidate, None, ttl)
}

/// Renews the leadership for `candidate` in `term` only: what a [`Leadership`] guard renews
/// with, so that a guard of an earlier term (lost, then won again by the same replica) is told
/// [`Error::NotHolder`] rather than renewing the later term's hold.
///
/// [`Leadership`]: crate::Leadership
pub fn leader_renew_in_term(
    ks: &Keyspace,
    name: &str,
    candidate: &str,
    term: u64,
    ttl: Duration,
) -> Result<Single<()>, Error> {
    Fenced::leadership(ks, name).extend("leader_renew", ks, candidate, Some(term), ttl)
}

/// Resigns the leadership of `candidate` in `term` only (see [`leader_renew_in_term`]).
pub fn leader_resign_in_term(
    ks: &Keyspace,
    name: &str,
    candidate: &str,
    term: u64,
) -> Result<Single<bool>, Error> {
    Ok(single(
        "leader_resign",
        Fenced::leadership(ks, name).release(ks, candidate, Some(term))?,
        held,
    ))
}

/// Resigns the leadership; yields whether `candidate` still led.
pub fn leader_resign(ks: &Keyspace, name: &str, candidate: &str) -> Result<Single<bool>, Error> {
    Ok(single(
        "leader_resign",
        Fenced::leadership(ks, name).release(ks, candidate, None)?,
        held,
    ))
}

// --- replicated grants (opt-in WAIT) --------------------------------------------------------

pub(super) type GiveBack = Box<dyn FnOnce(u64) -> Result<Request, Error> + Send>;

/// A grant (lock, leadership or lease) that is reported as won only once `replicas` replicas
/// acknowledged it (`WAIT`); otherwise it is given back and the plan fails with
/// [`Error::NotReplicated`], [`Error::ReplicationUnknown`] or the `WAIT` error. `WAIT` goes in
/// the grant's own write, on its connection ([`Request::then_wait`]): on any other connection
/// it would count other writes. What this buys is in `docs/coordination.md`.
///
/// ```text
/// grant + WAIT n ms ──nil──► Done(None)
///   │ fence, acked >= n ──► Done(Some(fence))
///   │ fence, acked < n, WAIT's error, or WAIT's reply lost
///   ▼
/// give back ──any reply──► Done(Err(NotReplicated | ReplicationUnknown | the WAIT error))
/// ```
pub struct Replicated {
    grant: Option<Request>,
    give_back: Option<GiveBack>,
    /// Whether the give-back is made without the grant's number (a lock's or a leadership's
    /// release names its owner): then a grant whose own reply was lost is given back too.
    blind: bool,
    wanted: u32,
    what: String,
    operation: &'static str,
    state: ReplicatedState,
}

impl std::fmt::Debug for Replicated {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Replicated")
            .field("grant", &self.grant)
            .field("wanted", &self.wanted)
            .field("what", &self.what)
            .field("state", &self.state)
            .finish_non_exhaustive()
    }
}

#[derive(Debug)]
enum ReplicatedState {
    Granting,
    GivingBack(Error),
    Finished,
}

impl Replicated {
    pub(super) fn new(
        operation: &'static str,
        grant: Request,
        give_back: GiveBack,
        replicas: u32,
        timeout: Duration,
        what: String,
    ) -> Result<Replicated, Error> {
        let grant = grant.then_wait(replicas, ttl_ms(timeout, "wait_replicas timeout")?);
        Ok(Replicated {
            grant: Some(grant),
            give_back: Some(give_back),
            blind: false,
            wanted: replicas,
            what,
            operation,
            state: ReplicatedState::Granting,
        })
    }

    /// Gives the grant back even when its own reply was lost (its number unknown): for a give-
    /// back that names the owner only.
    pub(super) fn blind(mut self) -> Self {
        self.blind = true;
        self
    }

    fn give_back(&mut self, fence: u64, error: Error) -> Step<Option<u64>> {
        let request = self.give_back.take().map(|build| build(fence));
        match request {
            Some(Ok(request)) => {
                self.state = ReplicatedState::GivingBack(error);
                Step::Send(request.into())
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
    Fenced::lock(ks, key).replicated("lock_acquire", ks, owner, ttl, replicas, timeout)
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
    Fenced::leadership(ks, name).replicated(
        "leader_campaign",
        ks,
        candidate,
        ttl,
        replicas,
        timeout,
    )
}

impl Plan for Replicated {
    type Output = Option<u64>;

    fn operation(&self) -> &'static str {
        self.operation
    }

    /// Its grant is followed by a `WAIT` for replicas.
    fn may_wait(&self) -> bool {
        true
    }

    fn start(&mut self) -> Step<Option<u64>> {
        match self.grant.take() {
            Some(grant) => Step::Send(grant.into()),
            None => Step::Done(Err(misuse("Replicated started twice"))),
        }
    }

    fn resume(&mut self, replies: Vec<Reply>) -> Step<Option<u64>> {
        let Some(reply) = replies.into_iter().next() else {
            return Step::Done(Err(misuse("Replicated resumed without a reply")));
        };
        match std::mem::replace(&mut self.state, ReplicatedState::Finished) {
            ReplicatedState::Granting => {
                let (granted, wait) = match reply {
                    Ok(Value::Array(pair)) if pair.len() == 2 => {
                        let mut pair = pair.into_iter();
                        match (pair.next(), pair.next()) {
                            (Some(granted), Some(wait)) => (granted, wait),
                            _ => return Step::Done(Err(misuse("a grant without its WAIT"))),
                        }
                    }
                    Ok(other) => {
                        return Step::Done(Err(Error::UnexpectedReply {
                            detail: format!("a grant and its WAIT, got {other:?}"),
                        }))
                    }
                    // The grant may stand on the server with nobody told: given back when
                    // that can be done without its number (see `LockAcquire`).
                    Err(e) if e.outcome_unknown() && self.blind => return self.give_back(0, e),
                    Err(e) => return Step::Done(Err(e)),
                };
                let fence = match grant(granted) {
                    Ok(Some(fence)) => fence,
                    other => return Step::Done(other),
                };
                // The grant stands on the server unless it is reported: a caller that sees an
                // error must never hold it, so every shortfall gives it back.
                let error = match wait {
                    Value::Int(acked) if acked >= i64::from(self.wanted) => {
                        return Step::Done(Ok(Some(fence)))
                    }
                    Value::Int(acked) => Error::NotReplicated {
                        what: std::mem::take(&mut self.what),
                        wanted: self.wanted,
                        acked,
                    },
                    Value::Nil => Error::ReplicationUnknown {
                        what: std::mem::take(&mut self.what),
                    },
                    Value::Error(e) => Error::Server(e),
                    other => Error::UnexpectedReply {
                        detail: format!("WAIT answered {other:?}"),
                    },
                };
                self.give_back(fence, error)
            }
            ReplicatedState::GivingBack(error) => Step::Done(Err(error)),
            ReplicatedState::Finished => Step::Done(Err(misuse("Replicated resumed after done"))),
        }
    }
}
