//! A plan that panics in `start` or `resume` (a bug in a plan: the trait is public) ends its
//! own call with `Error::PlanPanicked`; the op is gone from the session, whose other calls go
//! on. The panic unwound through the session before, leaving the op behind with its caller's
//! waiter, so that caller waited for good.

use std::time::Duration;

use crate::support::cluster;
use botmesh_redis_core::driver::{Batch, Plan, Reply, Step};
use botmesh_redis_core::testing::{get, set};
use botmesh_redis_core::{Error, Value};

/// Sends `GET key` unless told to panic at once, and panics on the reply.
struct Panics {
    key: String,
    at_start: bool,
}

impl Plan for Panics {
    type Output = ();

    fn operation(&self) -> &'static str {
        "panics"
    }

    fn start(&mut self) -> Step<()> {
        if self.at_start {
            panic!("at start");
        }
        Step::Send(Batch::from(get(&self.key)))
    }

    fn resume(&mut self, _: Vec<Reply>) -> Step<()> {
        panic!("{}", String::from("on the reply"));
    }
}

#[test]
fn a_panicking_plan_ends_its_own_call_and_no_other() {
    let mut h = cluster();
    let a = h.sim.master(0);
    let key = h.sim.keys_on(&a, 1).remove(0);
    h.run_batch(vec![set(&key, "v")]);
    for (at_start, message, outcome_unknown) in
        [(true, "at start", false), (false, "on the reply", true)]
    {
        let other = h.submit_batch(vec![get(&key)]);
        let ticket = h.submit(Panics {
            key: key.clone(),
            at_start,
        });
        assert_eq!(
            h.wait_for(&ticket),
            Err(Error::PlanPanicked {
                operation: "panics",
                message: message.into(),
                outcome_unknown,
            })
        );
        assert_eq!(h.wait_for(&other), Ok(vec![Ok(Value::from("v"))]));
        assert_eq!(h.session.in_flight(), 0, "no op is left behind");
        let summary = h.summary(&ticket).unwrap();
        assert_eq!(summary.outcome, "plan_panicked");
    }
    assert_eq!(h.run_one(get(&key)), Ok(Value::from("v")));
}

/// Waits before it sends anything, and panics when resumed after the wait.
struct WaitsThenPanics;

impl Plan for WaitsThenPanics {
    type Output = ();

    fn operation(&self) -> &'static str {
        "waits_then_panics"
    }

    fn start(&mut self) -> Step<()> {
        Step::Wait(Duration::from_millis(5))
    }

    fn resume(&mut self, _: Vec<Reply>) -> Step<()> {
        panic!("after the wait");
    }
}

/// A panic after a wait, with nothing of the plan written, has a known outcome.
#[test]
fn a_panic_before_anything_was_written_has_a_known_outcome() {
    let mut h = cluster();
    let ticket = h.submit(WaitsThenPanics);
    assert_eq!(
        h.wait_for(&ticket),
        Err(Error::PlanPanicked {
            operation: "waits_then_panics",
            message: "after the wait".into(),
            outcome_unknown: false,
        })
    );
    assert_eq!(h.session.in_flight(), 0);
}
