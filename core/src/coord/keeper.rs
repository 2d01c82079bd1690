//! Keepers: a plan that renews something held (this replica's heartbeat, a lock, a leadership,
//! a lease) once per period until it is stopped or the hold is lost, run in the background by
//! [`Executor::detach`], and the [`Keeper`] handle that watches and stops it.
//!
//! The plan only waits between renewals ([`Step::Wait`]); it reads no clock and spawns nothing,
//! so it runs on any driver as any other plan does.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use crate::error::Error;
use crate::executor::Executor;
use crate::plan::{Plan, Reply, Single, Step};

/// Builds the renewal plan of one period.
pub(crate) type Renewal = Box<dyn FnMut() -> Result<Single<()>, Error> + Send>;

/// What a keeper plan and its handle share.
#[derive(Default)]
pub(crate) struct KeepState {
    /// Set by the handle: the plan ends at its next step.
    stop: AtomicBool,
    /// Whether the last renewal was acknowledged.
    held: AtomicBool,
    /// A renewal answered that the hold was lost ([`Error::NotHolder`]): the plan ended.
    lost: AtomicBool,
    /// Renewals acknowledged, and renewals that failed (connection trouble, a server error).
    renewed: AtomicU64,
    failed: AtomicU64,
    /// Whether a renewal is out now, and who waits for it to come back.
    renewing: AtomicBool,
    waiting: Mutex<Option<Waker>>,
    ended: AtomicBool,
}

impl KeepState {
    /// A state for a hold just granted (or a heartbeat just written): held until told otherwise.
    pub(crate) fn held() -> Arc<Self> {
        let state = KeepState::default();
        state.held.store(true, Ordering::Release);
        Arc::new(state)
    }

    fn record(&self, result: &Result<(), Error>) {
        match result {
            Ok(()) => {
                self.held.store(true, Ordering::Release);
                self.renewed.fetch_add(1, Ordering::Relaxed);
            }
            Err(Error::NotHolder { .. }) => {
                self.held.store(false, Ordering::Release);
                self.lost.store(true, Ordering::Release);
            }
            Err(_) => {
                // Unconfirmed, not lost: the last acknowledged renewal may still hold, but
                // nothing says so any more.
                self.held.store(false, Ordering::Release);
                self.failed.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    fn set_renewing(&self, renewing: bool) {
        self.renewing.store(renewing, Ordering::Release);
        if !renewing {
            self.wake();
        }
    }

    fn end(&self) {
        self.ended.store(true, Ordering::Release);
        self.set_renewing(false);
    }

    fn ended(&self) -> bool {
        self.ended.load(Ordering::Acquire)
    }

    fn wake(&self) {
        if let Some(waker) = self
            .waiting
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
        {
            waker.wake();
        }
    }
}

/// The plan: renew, wait a period, renew again, until stopped or lost.
pub(crate) struct Keep {
    renewal: Renewal,
    period: Duration,
    state: Arc<KeepState>,
    current: Option<Single<()>>,
}

impl Keep {
    pub(crate) fn new(renewal: Renewal, period: Duration, state: Arc<KeepState>) -> Self {
        Keep {
            renewal,
            period,
            state,
            current: None,
        }
    }

    fn renew(&mut self) -> Step<()> {
        // Out first, then the stop looked at, both sequentially consistent, as `stop` stores
        // the stop and then looks at this: one of the two sees the other. Looked at first,
        // a stop could come and `stop` return between the look and the renewal, which then
        // went out after what the caller sent next (a heartbeat renewed after its removal).
        self.state.renewing.store(true, Ordering::SeqCst);
        if self.state.stop.load(Ordering::SeqCst) {
            return self.end(Ok(()));
        }
        let mut plan = match (self.renewal)() {
            Ok(plan) => plan,
            Err(e) => return self.end(Err(e)),
        };
        let step = plan.start();
        self.current = Some(plan);
        self.after(step)
    }

    /// What follows a step of the current renewal.
    fn after(&mut self, step: Step<()>) -> Step<()> {
        match step {
            Step::Done(result) => {
                self.current = None;
                self.state.record(&result);
                self.state.set_renewing(false);
                if self.state.lost.load(Ordering::Acquire)
                    || self.state.stop.load(Ordering::Acquire)
                {
                    return self.end(Ok(()));
                }
                Step::Wait(self.period)
            }
            other => other,
        }
    }

    fn end(&mut self, result: Result<(), Error>) -> Step<()> {
        self.state.end();
        Step::Done(result)
    }
}

impl Plan for Keep {
    type Output = ();

    fn operation(&self) -> &'static str {
        "keep_alive"
    }

    /// Waits a period between renewals, for as long as it keeps.
    fn may_wait(&self) -> bool {
        true
    }

    fn start(&mut self) -> Step<()> {
        Step::Wait(self.period)
    }

    fn resume(&mut self, replies: Vec<Reply>) -> Step<()> {
        match self.current.as_mut() {
            Some(plan) => {
                let step = plan.resume(replies);
                self.after(step)
            }
            // The period is over.
            None => self.renew(),
        }
    }
}

impl Drop for Keep {
    fn drop(&mut self) {
        // Ended by the session (a close) as much as by itself: nothing renews any more.
        self.state.end();
    }
}

/// A keeper running in the background: renews this replica's heartbeat, or a held lock,
/// leadership or lease, once per period (a third of its TTL), until stopped, lost, or the
/// store closes. Dropping the handle stops it too.
///
/// A renewal that fails (the connection is down) is tried again the next period; one that
/// finds the hold gone ([`Error::NotHolder`]) ends the keeper: [`Keeper::is_lost`].
pub struct Keeper {
    state: Arc<KeepState>,
}

impl Keeper {
    /// Starts `renewal` once per `period` on `exec`, beginning one period from now (the hold
    /// was just granted).
    pub(crate) fn start<E: Executor>(exec: &E, renewal: Renewal, period: Duration) -> Self {
        let state = KeepState::held();
        exec.detach(Keep::new(renewal, period, Arc::clone(&state)));
        Keeper { state }
    }

    /// Whether the last renewal (or the grant) was acknowledged and the keeper still runs.
    /// `false` after a failed renewal, until one succeeds again: the hold may have expired.
    pub fn is_held(&self) -> bool {
        self.state.held.load(Ordering::Acquire) && !self.state.ended.load(Ordering::Acquire)
    }

    /// Whether a renewal found the hold gone: another owner may have it now.
    pub fn is_lost(&self) -> bool {
        self.state.lost.load(Ordering::Acquire)
    }

    /// Renewals acknowledged so far.
    pub fn renewals(&self) -> u64 {
        self.state.renewed.load(Ordering::Relaxed)
    }

    /// Renewals that failed so far (and were tried again the next period).
    pub fn failures(&self) -> u64 {
        self.state.failed.load(Ordering::Relaxed)
    }

    /// Stops renewing and waits until no renewal is out, so that whatever the caller sends
    /// next (a release, a heartbeat's removal) cannot be overtaken by one.
    pub async fn stop(&self) {
        self.state.stop.store(true, Ordering::SeqCst);
        Quiet(&self.state).await;
    }
}

impl Drop for Keeper {
    fn drop(&mut self) {
        self.state.stop.store(true, Ordering::Release);
    }
}

impl fmt::Debug for Keeper {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Keeper")
            .field("held", &self.is_held())
            .field("lost", &self.is_lost())
            .field("renewals", &self.renewals())
            .field("failures", &self.failures())
            .finish()
    }
}

/// Builds the plan that ends what a keeper kept (a heartbeat's removal).
pub(crate) type Farewell = Box<dyn Fn() -> Result<Single<()>, Error> + Send + Sync>;

/// The heartbeat keepers of a store's coordinators, for the store's close to stop them and
/// remove their heartbeats before the client closes.
#[derive(Default)]
pub(crate) struct Keepers {
    running: Mutex<Vec<(Weak<KeepState>, Farewell)>>,
}

impl Keepers {
    pub(crate) fn add(&self, keeper: &Keeper, farewell: Farewell) {
        let mut running = self.running.lock().unwrap_or_else(|e| e.into_inner());
        running.retain(|(state, _)| state.upgrade().is_some_and(|s| !s.ended()));
        running.push((Arc::downgrade(&keeper.state), farewell));
    }

    /// Stops every keeper still running, then sends its farewell, once no renewal of it is
    /// out (a heartbeat renewed after its removal would outlive the process).
    pub(crate) async fn stop_all<E: Executor>(&self, exec: &E) {
        let running = std::mem::take(&mut *self.running.lock().unwrap_or_else(|e| e.into_inner()));
        for (state, farewell) in running {
            let Some(state) = state.upgrade() else {
                continue;
            };
            if state.ended() && state.stop.load(Ordering::Acquire) {
                // Stopped by its owner, who sent the farewell.
                continue;
            }
            state.stop.store(true, Ordering::SeqCst);
            Quiet(&state).await;
            if let Ok(plan) = farewell() {
                if let Err(e) = exec.run(plan).await {
                    tracing::warn!(error = %e, "a keeper's farewell failed at close");
                }
            }
        }
    }
}

impl fmt::Debug for Keepers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let running = self.running.lock().unwrap_or_else(|e| e.into_inner());
        f.debug_struct("Keepers")
            .field("running", &running.len())
            .finish()
    }
}

/// Ready once no renewal of the keeper is out.
struct Quiet<'a>(&'a KeepState);

impl Future for Quiet<'_> {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let state = self.0;
        if !state.renewing.load(Ordering::SeqCst) {
            return Poll::Ready(());
        }
        *state.waiting.lock().unwrap_or_else(|e| e.into_inner()) = Some(cx.waker().clone());
        // The renewal may have come back between the check and the registration.
        if state.renewing.load(Ordering::Acquire) {
            Poll::Pending
        } else {
            Poll::Ready(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::single;
    use crate::request::{Access, Request};
    use crate::value::Value;

    fn renewal() -> Renewal {
        Box::new(|| {
            let request = Request::cmd(Access::Write, "PEXPIRE")
                .key(crate::keys::Key::new("k"))
                .arg("30000")
                .build()?;
            Ok(single("renewal", request, |v| {
                crate::coord::require(v.as_i64()? == 1, "lock \"k\"".into())
            }))
        })
    }

    fn keep() -> (Keep, Arc<KeepState>) {
        let state = KeepState::held();
        (
            Keep::new(renewal(), Duration::from_secs(10), Arc::clone(&state)),
            state,
        )
    }

    fn is_send(step: &Step<()>) -> bool {
        matches!(step, Step::Send(batch) if batch.len() == 1)
    }

    #[test]
    fn renews_once_per_period_until_stopped() {
        let (mut plan, state) = keep();
        assert!(matches!(plan.start(), Step::Wait(d) if d == Duration::from_secs(10)));
        for round in 1..=3 {
            assert!(is_send(&plan.resume(Vec::new())));
            assert!(state.renewing.load(Ordering::Acquire));
            assert!(matches!(
                plan.resume(vec![Ok(Value::Int(1))]),
                Step::Wait(_)
            ));
            assert_eq!(state.renewed.load(Ordering::Relaxed), round);
        }
        state.stop.store(true, Ordering::Release);
        assert!(matches!(plan.resume(Vec::new()), Step::Done(Ok(()))));
        assert!(state.ended.load(Ordering::Acquire));
    }

    #[test]
    fn a_failed_renewal_is_unconfirmed_and_tried_again() {
        let (mut plan, state) = keep();
        plan.start();
        assert!(is_send(&plan.resume(Vec::new())));
        let lost_reply = Err(Error::Closed);
        assert!(matches!(plan.resume(vec![lost_reply]), Step::Wait(_)));
        assert!(!state.held.load(Ordering::Acquire));
        assert_eq!(state.failed.load(Ordering::Relaxed), 1);
        assert!(is_send(&plan.resume(Vec::new())));
        assert!(matches!(
            plan.resume(vec![Ok(Value::Int(1))]),
            Step::Wait(_)
        ));
        assert!(state.held.load(Ordering::Acquire));
    }

    #[test]
    fn a_lost_hold_ends_the_keeper() {
        let (mut plan, state) = keep();
        plan.start();
        plan.resume(Vec::new());
        assert!(matches!(
            plan.resume(vec![Ok(Value::Int(0))]),
            Step::Done(Ok(()))
        ));
        assert!(state.lost.load(Ordering::Acquire));
        assert!(!state.held.load(Ordering::Acquire));
    }

    #[test]
    fn a_stop_during_a_renewal_ends_when_it_comes_back() {
        let (mut plan, state) = keep();
        plan.start();
        plan.resume(Vec::new());
        state.stop.store(true, Ordering::Release);
        assert!(state.renewing.load(Ordering::Acquire));
        assert!(matches!(
            plan.resume(vec![Ok(Value::Int(1))]),
            Step::Done(Ok(()))
        ));
        assert!(!state.renewing.load(Ordering::Acquire));
    }
}
