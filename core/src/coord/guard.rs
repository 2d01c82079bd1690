//! Held things as values: a [`Lock`], a [`Turn`], a [`Leadership`] and a [`Lease`] each give
//! themselves back when dropped (the release goes out in the background, through
//! [`Executor::detach`]), report the outcome of an explicit `release`, and can keep themselves
//! renewed by a [`Keeper`].
//!
//! Every release has the one outcome [`Released`]: finding the hold already gone is not an
//! error (there is nothing left to give back), while a renewal that finds it gone is
//! [`Error::NotHolder`], since the caller must stop acting on it.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use crate::error::Error;
use crate::executor::Executor;
use crate::keys::Key;
use crate::plan::Single;

use super::keeper::{Keeper, Renewal};
use super::turn::{TurnEvent, TurnGuard};

/// What a release found.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Released {
    /// It was still held, and is given back now.
    Held,
    /// It was no longer held by the caller (its TTL ran out; another owner may hold it): the
    /// release did nothing.
    Lost,
}

impl Released {
    pub(crate) fn from_held(held: bool) -> Self {
        if held {
            Released::Held
        } else {
            Released::Lost
        }
    }
}

type MakeRelease = Box<dyn Fn() -> Result<Single<bool>, Error> + Send + Sync>;
type MakeRenewal = Arc<dyn Fn() -> Result<Single<()>, Error> + Send + Sync>;

/// The guards alive in this process for each hold that more than one guard can stand for: a
/// leadership campaigned for again by the replica that leads (the same term) and a lease
/// taken again by its holder (the same token) give a second guard of the same hold. Dropping
/// either used to give the hold back under the other: `self.leader = coord.lead(..)` in a
/// loop resigned, as the old guard dropped, the leadership the new one stood for. The hold is
/// given back on drop by the last of its guards (an explicit `release` gives it back at once).
///
/// Process-wide rather than per coordinator: two coordinators built for one replica id
/// campaign as one.
fn shares() -> &'static Mutex<BTreeMap<HoldName, usize>> {
    static SHARES: OnceLock<Mutex<BTreeMap<HoldName, usize>>> = OnceLock::new();
    SHARES.get_or_init(Mutex::default)
}

/// What names a hold among the guards of this process: its key (with the prefix), who holds
/// it, and its term or token. Fields, not one string of them: lease `a` of holder `b c` and
/// lease `a b` of holder `c` (the same token) would read the same, and share one count.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct HoldName {
    key: Key,
    holder: String,
    number: u64,
}

/// A guard's place among the guards of its hold (see [`shares`]).
struct Share(HoldName);

impl Share {
    fn join(hold: HoldName) -> Share {
        let mut shares = shares().lock().unwrap_or_else(|e| e.into_inner());
        *shares.entry(hold.clone()).or_default() += 1;
        Share(hold)
    }

    /// Leaves the hold's guards; whether this was the last of them.
    fn leave(self) -> bool {
        let mut shares = shares().lock().unwrap_or_else(|e| e.into_inner());
        match shares.get_mut(&self.0) {
            Some(count) if *count > 1 => {
                *count -= 1;
                false
            }
            _ => {
                shares.remove(&self.0);
                true
            }
        }
    }
}

/// What every held thing does the same way: renew, keep renewed, release, give back on drop.
struct Hold<E: Executor> {
    exec: E,
    renewal: MakeRenewal,
    release: MakeRelease,
    period: Duration,
    keeper: Option<Keeper>,
    /// Still to be given back: cleared by an explicit release.
    armed: bool,
    /// Among the other guards of the same hold, for one that can have others.
    share: Option<Share>,
}

impl<E: Executor> Hold<E> {
    fn new(
        exec: E,
        ttl: Duration,
        renewal: impl Fn() -> Result<Single<()>, Error> + Send + Sync + 'static,
        release: impl Fn() -> Result<Single<bool>, Error> + Send + Sync + 'static,
    ) -> Self {
        Hold {
            exec,
            renewal: Arc::new(renewal),
            release: Box::new(release),
            period: ttl / 3,
            keeper: None,
            armed: true,
            share: None,
        }
    }

    /// Counts this guard among the guards of the hold of `key`, held by `holder` in term or
    /// with token `number` (see [`shares`]).
    fn shared(mut self, key: Key, holder: &str, number: u64) -> Self {
        self.share = Some(Share::join(HoldName {
            key,
            holder: holder.to_owned(),
            number,
        }));
        self
    }

    async fn renew(&self) -> Result<(), Error> {
        self.exec.run((self.renewal)()?).await
    }

    fn keep_renewed(&mut self) {
        if self.keeper.is_none() {
            let renewal = Arc::clone(&self.renewal);
            let each: Renewal = Box::new(move || renewal());
            self.keeper = Some(Keeper::start(&self.exec, each, self.period));
        }
    }

    async fn release(mut self) -> Result<Released, Error> {
        self.armed = false;
        if let Some(share) = self.share.take() {
            share.leave();
        }
        if let Some(keeper) = self.keeper.take() {
            keeper.stop().await;
        }
        let held = self.exec.run((self.release)()?).await?;
        Ok(Released::from_held(held))
    }
}

impl<E: Executor> Drop for Hold<E> {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        // Another guard of the same hold still stands for it.
        if self.share.take().is_some_and(|share| !share.leave()) {
            return;
        }
        // The keeper (dropped with the hold) stops at its next step; a renewal still out is
        // checked against the holder by the script, so it cannot outlive this release.
        if let Ok(plan) = (self.release)() {
            self.exec.detach(plan);
        }
    }
}

macro_rules! held_common {
    () => {
        /// Renews it for its TTL; [`Error::NotHolder`] when it was lost (stop acting on it).
        pub async fn renew(&self) -> Result<(), Error> {
            self.hold.renew().await
        }

        /// Renews it in the background once per a third of its TTL, until it is released,
        /// dropped, lost or the store closes ([`Keeper`]).
        pub fn keep_renewed(mut self) -> Self {
            self.hold.keep_renewed();
            self
        }

        /// The keeper renewing it, after [`Self::keep_renewed`].
        pub fn keeper(&self) -> Option<&Keeper> {
            self.hold.keeper.as_ref()
        }

        /// Gives it back now and says whether it was still held. Dropping it does the same in
        /// the background, without the answer.
        pub async fn release(self) -> Result<Released, Error> {
            self.hold.release().await
        }
    };
}

/// A held lock ([`Coordinator::hold_lock`](crate::Coordinator::hold_lock)): released when
/// dropped.
pub struct Lock<E: Executor> {
    key: String,
    owner: String,
    fence: u64,
    hold: Hold<E>,
}

impl<E: Executor> Lock<E> {
    pub(crate) fn new(
        exec: E,
        ks: &crate::keys::Keyspace,
        key: &str,
        owner: &str,
        fence: u64,
        ttl: Duration,
    ) -> Self {
        let (k1, o1, ks1) = (key.to_owned(), owner.to_owned(), ks.clone());
        let (k2, o2, ks2) = (key.to_owned(), owner.to_owned(), ks.clone());
        Lock {
            key: key.to_owned(),
            owner: owner.to_owned(),
            fence,
            hold: Hold::new(
                exec,
                ttl,
                move || super::lock_extend(&ks1, &k1, &o1, ttl),
                move || super::lock_release(&ks2, &k2, &o2),
            ),
        }
    }

    /// The fence: strictly increasing per lock key, forever. Pass it with every write the
    /// lock protects, and have the store of that write refuse a lower one.
    pub fn fence(&self) -> u64 {
        self.fence
    }

    /// The lock's key.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The owner it was granted to.
    pub fn owner(&self) -> &str {
        &self.owner
    }

    held_common!();
}

/// A held turn of a chat ([`Coordinator::turn`](crate::Coordinator::turn)): released when
/// dropped, serving the next waiter.
pub struct Turn<E: Executor> {
    guard: TurnGuard,
    events: Vec<TurnEvent>,
    hold: Hold<E>,
}

impl<E: Executor> Turn<E> {
    pub(crate) fn new(
        exec: E,
        ks: &crate::keys::Keyspace,
        guard: TurnGuard,
        events: Vec<TurnEvent>,
        options: super::TurnOptions,
    ) -> Self {
        let (g1, ks1) = (guard.clone(), ks.clone());
        let (g2, ks2) = (guard.clone(), ks.clone());
        Turn {
            guard,
            events,
            hold: Hold::new(
                exec,
                options.ttl,
                move || super::turn_extend(&ks1, &g1, &options),
                move || super::turn_release(&ks2, &g2, &options),
            ),
        }
    }

    /// The ticket, which is also the turn's fence: strictly increasing per chat.
    pub fn fence(&self) -> u64 {
        self.guard.ticket
    }

    /// The chat, ticket and queue member.
    pub fn guard(&self) -> &TurnGuard {
        &self.guard
    }

    /// Tickets taken and skipped while waiting, in order.
    pub fn events(&self) -> &[TurnEvent] {
        &self.events
    }

    held_common!();
}

/// This replica's leadership ([`Coordinator::lead`](crate::Coordinator::lead)): resigned when
/// dropped.
pub struct Leadership<E: Executor> {
    name: String,
    term: u64,
    hold: Hold<E>,
}

impl<E: Executor> Leadership<E> {
    pub(crate) fn new(
        exec: E,
        ks: &crate::keys::Keyspace,
        name: &str,
        replica: &str,
        term: u64,
        ttl: Duration,
    ) -> Self {
        let (n1, r1, ks1) = (name.to_owned(), replica.to_owned(), ks.clone());
        let (n2, r2, ks2) = (name.to_owned(), replica.to_owned(), ks.clone());
        // Renewed and resigned in its own term only: a guard of a term the replica lost and
        // then won again is told it lost, and cannot resign the later term.
        let hold = Hold::new(
            exec,
            ttl,
            move || super::leader_renew_in_term(&ks1, &n1, &r1, term, ttl),
            move || super::leader_resign_in_term(&ks2, &n2, &r2, term),
        )
        .shared(ks.leader(name), replica, term);
        Leadership {
            name: name.to_owned(),
            term,
            hold,
        }
    }

    /// The term: strictly increasing per leadership name, forever. Use it as the fencing
    /// token of the leader's writes ([`Schedules::put`](crate::Schedules::put)).
    pub fn term(&self) -> u64 {
        self.term
    }

    /// The leadership's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    held_common!();
}

/// A held lease ([`Leases::hold`](crate::Leases::hold)): released when dropped.
pub struct Lease<E: Executor> {
    name: String,
    holder: String,
    token: u64,
    hold: Hold<E>,
}

impl<E: Executor> Lease<E> {
    pub(crate) fn new(
        exec: E,
        ks: &crate::keys::Keyspace,
        name: &str,
        holder: &str,
        token: u64,
        ttl: Duration,
    ) -> Self {
        let (n1, h1, ks1) = (name.to_owned(), holder.to_owned(), ks.clone());
        let (n2, h2, ks2) = (name.to_owned(), holder.to_owned(), ks.clone());
        let hold = Hold::new(
            exec,
            ttl,
            move || super::lease_renew(&ks1, &n1, &h1, token, ttl),
            move || super::lease_release(&ks2, &n2, &h2, token),
        )
        .shared(ks.lease(name), holder, token);
        Lease {
            name: name.to_owned(),
            holder: holder.to_owned(),
            token,
            hold,
        }
    }

    /// The lease's token: it never goes backwards for a lease name.
    pub fn token(&self) -> u64 {
        self.token
    }

    /// The lease's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The holder it was granted to.
    pub fn holder(&self) -> &str {
        &self.holder
    }

    held_common!();
}

macro_rules! debug_held {
    ($ty:ident, $($field:ident),+) => {
        impl<E: Executor> fmt::Debug for $ty<E> {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.debug_struct(stringify!($ty))
                    $(.field(stringify!($field), &self.$field))+
                    .field("keeper", &self.hold.keeper)
                    .finish_non_exhaustive()
            }
        }
    };
}

debug_held!(Lock, key, owner, fence);
debug_held!(Turn, guard);
debug_held!(Leadership, name, term);
debug_held!(Lease, name, holder, token);
