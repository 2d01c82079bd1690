//! What the coordination families share: scripted replies by operation, and a snapshot per
//! layout.

use std::fmt::Debug;
use std::time::Duration;

use botmesh_redis_core::driver::plan::scripted;
use botmesh_redis_core::driver::{Plan, Reply};
use botmesh_redis_core::TurnOptions;
use botmesh_redis_core::{Error, Keyspace, Layout, Request, Value};

use crate::support::*;

/// The operation of a multi-operation script (`turn`, `lease`, `schedule`, `durable`), or the
/// script or command name.
pub(crate) fn op(req: &Request) -> String {
    match req.name().as_str() {
        "turn" | "lease" | "schedule" | "durable" => {
            format!("{} {}", req.name(), req.arguments()[0])
        }
        other => other.to_owned(),
    }
}

pub(crate) fn int(i: i64) -> Reply {
    Ok(Value::Int(i))
}

/// The reply to a grant written with its `WAIT`: the grant's value and `WAIT`'s.
pub(crate) fn with_wait(grant: i64, wait: Value) -> Reply {
    Ok(Value::Array(vec![Value::Int(grant), wait]))
}

pub(crate) fn reply_lost() -> Reply {
    Err(Error::ReplyLost {
        addr: botmesh_redis_core::NodeAddr::new("127.0.0.1", 7000),
        reason: "connection reset".into(),
    })
}

/// A turn poll reply `{status, now, member, ticket[, reason]}`.
pub(crate) fn poll(
    status: &str,
    now: i64,
    member: &str,
    ticket: i64,
    reason: Option<&str>,
) -> Reply {
    let mut items = vec![
        bulk(status),
        Value::Int(now),
        bulk(member),
        Value::Int(ticket),
    ];
    items.extend(reason.map(bulk));
    Ok(arr(items))
}

pub(crate) fn run<P: Plan>(
    plan: P,
    answer: impl FnMut(&Request) -> Reply,
) -> (Result<P::Output, Error>, String)
where
    P::Output: Debug,
{
    let run = scripted::run(plan, 64, answer);
    (run.output, run.transcript)
}

/// The transcript `body` gives in each layout.
pub(crate) fn per_layout(
    mut body: impl FnMut(Layout, &Keyspace) -> String,
) -> Vec<(Layout, String)> {
    both()
        .into_iter()
        .map(|(layout, ks)| (layout, body(layout, &ks)))
        .collect()
}

/// Snapshots the transcript of a body in both layouts as `<name>__<layout>`. A macro, so that
/// each snapshot is named after the module of the test that takes it.
macro_rules! snapshot_both {
    ($name:expr, $body:expr) => {
        for (layout, transcript) in crate::coord::per_layout($body) {
            insta::assert_snapshot!(format!("{}__{}", $name, layout.name()), transcript);
        }
    };
}

/// Answers requests in order from a list of `(expected operation, reply)`, failing the test on a
/// request it did not expect.
pub(crate) fn replies(expected: Vec<(&'static str, Reply)>) -> impl FnMut(&Request) -> Reply {
    let mut expected = expected.into_iter();
    move |req| {
        let (want, reply) = expected
            .next()
            .unwrap_or_else(|| panic!("unexpected request {req}"));
        assert_eq!(op(req), want, "request {req}");
        reply
    }
}

pub(crate) fn turn_options() -> TurnOptions {
    TurnOptions {
        ttl: Duration::from_secs(10),
        poll_interval: Duration::from_millis(20),
        claim_timeout: Duration::from_secs(1),
        wait_timeout: Duration::from_secs(5),
        idle_lifetime: Duration::from_secs(60),
    }
}
