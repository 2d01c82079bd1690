//! What the session counts for monitoring: the routing events of the whole session
//! ([`Tally`], read through [`Session::tally`](super::Session::tally)) and, with each finished
//! plan, what became of it ([`Summary`], read through
//! [`Completion::summary`](super::Completion::summary)).
//!
//! The session has no clock of its own and exports nothing: it counts, and the driver turns
//! the counts into metrics and spans (the client's `metrics` feature, `docs/operations.md`).
//! Counting is a few integer increments on paths that are already rare (a redirect, a retry,
//! a timeout, a refresh) and a few field writes per finished plan.

use std::sync::Arc;
use std::time::Duration;

use crate::addr::NodeAddr;
use crate::error::Error;
use crate::keys::Key;

/// Why a request was sent again after a backoff.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum RetryReason {
    /// `TRYAGAIN`: a multi-key request during a slot's migration.
    TryAgain,
    /// `CLUSTERDOWN`, or a slot the map has no owner for.
    ClusterDown,
    /// `LOADING`: the node is loading its dataset.
    Loading,
    /// `MASTERDOWN`: a replica lost its master.
    MasterDown,
    /// `READONLY`: a write reached a demoted master.
    ReadOnly,
    /// The node could not be reached: the connect (or its handshake) failed.
    Connect,
    /// The connection was lost before the request was written, or a read's reply was lost.
    ConnectionLost,
    /// Any other retryable cause.
    Other,
}

impl RetryReason {
    /// Every reason, in the order of their labels in `docs/operations.md`.
    pub const ALL: [RetryReason; 8] = [
        RetryReason::TryAgain,
        RetryReason::ClusterDown,
        RetryReason::Loading,
        RetryReason::MasterDown,
        RetryReason::ReadOnly,
        RetryReason::Connect,
        RetryReason::ConnectionLost,
        RetryReason::Other,
    ];

    /// The `reason` label: the server's error code, or what happened to the connection.
    pub fn label(self) -> &'static str {
        match self {
            RetryReason::TryAgain => "TRYAGAIN",
            RetryReason::ClusterDown => "CLUSTERDOWN",
            RetryReason::Loading => "LOADING",
            RetryReason::MasterDown => "MASTERDOWN",
            RetryReason::ReadOnly => "READONLY",
            RetryReason::Connect => "connect",
            RetryReason::ConnectionLost => "connection_lost",
            RetryReason::Other => "other",
        }
    }

    /// The reason of a retry caused by `cause`.
    pub fn of(cause: &Error) -> RetryReason {
        match cause {
            Error::Server(e) => match e.code() {
                "TRYAGAIN" => RetryReason::TryAgain,
                "CLUSTERDOWN" => RetryReason::ClusterDown,
                "LOADING" => RetryReason::Loading,
                "MASTERDOWN" => RetryReason::MasterDown,
                "READONLY" => RetryReason::ReadOnly,
                _ => RetryReason::Other,
            },
            Error::Connect { .. } | Error::Auth { .. } => RetryReason::Connect,
            Error::NotSent { .. } | Error::ReplyLost { .. } => RetryReason::ConnectionLost,
            _ => RetryReason::Other,
        }
    }
}

/// Something the session counts in its [`Tally`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Event {
    /// A `MOVED` reply followed: the slot map was patched and the request resent.
    Moved,
    /// An `ASK` reply followed: the request was resent to the importing node.
    Ask,
    /// A request was scheduled to be sent again after a backoff.
    Retry(RetryReason),
    /// A request ended because its plan's batch passed the request timeout.
    RequestTimeout,
    /// A connection was closed because a reply took longer than the response timeout.
    ResponseTimeout,
    /// A connect (TCP and handshake) took longer than the connect timeout.
    ConnectTimeout,
    /// A topology refresh round ended with a slot map (or, on Sentinel, a sentinel named the
    /// master).
    RefreshSucceeded,
    /// A topology refresh round ended without one (a sentinel named no master).
    RefreshFailed,
}

/// How many kinds of [`Event`] there are.
const EVENTS: usize = 7 + RetryReason::ALL.len();

impl Event {
    /// Every event, in a fixed order.
    pub const ALL: [Event; EVENTS] = [
        Event::Moved,
        Event::Ask,
        Event::Retry(RetryReason::TryAgain),
        Event::Retry(RetryReason::ClusterDown),
        Event::Retry(RetryReason::Loading),
        Event::Retry(RetryReason::MasterDown),
        Event::Retry(RetryReason::ReadOnly),
        Event::Retry(RetryReason::Connect),
        Event::Retry(RetryReason::ConnectionLost),
        Event::Retry(RetryReason::Other),
        Event::RequestTimeout,
        Event::ResponseTimeout,
        Event::ConnectTimeout,
        Event::RefreshSucceeded,
        Event::RefreshFailed,
    ];

    /// The event's place in [`Event::ALL`].
    fn index(self) -> usize {
        match self {
            Event::Moved => 0,
            Event::Ask => 1,
            Event::Retry(reason) => {
                2 + RetryReason::ALL
                    .iter()
                    .position(|&r| r == reason)
                    .unwrap_or(RetryReason::ALL.len() - 1)
            }
            Event::RequestTimeout => 10,
            Event::ResponseTimeout => 11,
            Event::ConnectTimeout => 12,
            Event::RefreshSucceeded => 13,
            Event::RefreshFailed => 14,
        }
    }
}

/// The session's counts of each [`Event`] since it was created. Counts only grow, so a driver
/// that exports them keeps the last tally it saw and adds the difference.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Tally {
    counts: [u64; EVENTS],
}

impl Tally {
    /// How many times `event` happened.
    pub fn get(&self, event: Event) -> u64 {
        self.counts[event.index()]
    }

    /// Every event with its count, in the order of [`Event::ALL`].
    pub fn iter(&self) -> impl Iterator<Item = (Event, u64)> + '_ {
        Event::ALL.iter().map(|&e| (e, self.get(e)))
    }

    pub(super) fn count(&mut self, event: Event) {
        let count = &mut self.counts[event.index()];
        *count = count.saturating_add(1);
    }
}

/// What became of one plan, handed to the driver with its [`Completion`](super::Completion):
/// the fields of the client's span and the labels of its metrics.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Summary {
    /// The plan's [`operation`](crate::driver::Plan::operation).
    pub operation: &'static str,
    /// `"ok"`, or the error's [`kind`](Error::kind).
    pub outcome: &'static str,
    /// Requests handed to a connection, each resend (retry, redirect, `NOSCRIPT`) counted.
    pub attempts: u32,
    /// The key whose slot routes the plan's first request routed by slot, if any: see
    /// [`Summary::slot`].
    pub(super) slot_key: Option<Key>,
    /// The node its last request was handed to.
    pub node: Option<Arc<NodeAddr>>,
    /// From the session's `now` when the plan was submitted to its `now` when it finished.
    pub elapsed: Duration,
}

impl Summary {
    /// The summary of a plan that has not run.
    pub(super) fn new(operation: &'static str) -> Self {
        Summary {
            operation,
            outcome: "ok",
            attempts: 0,
            slot_key: None,
            node: None,
            elapsed: Duration::ZERO,
        }
    }

    /// The slot of the plan's first request routed by slot, if any; computed when asked, so
    /// that a caller that records no summary pays no CRC for it on a single node.
    pub fn slot(&self) -> Option<u16> {
        self.slot_key.as_ref().map(Key::slot)
    }

    /// The outcome label of `result`.
    pub(super) fn outcome_of<T>(result: &Result<T, Error>) -> &'static str {
        match result {
            Ok(_) => "ok",
            Err(e) => e.kind(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_event_has_its_own_count() {
        let mut tally = Tally::default();
        for (n, &event) in Event::ALL.iter().enumerate() {
            for _ in 0..=n {
                tally.count(event);
            }
        }
        let counts: Vec<u64> = tally.iter().map(|(_, c)| c).collect();
        assert_eq!(counts, (1..=EVENTS as u64).collect::<Vec<_>>());
        assert_eq!(tally.get(Event::Retry(RetryReason::Loading)), 5);
    }

    #[test]
    fn retry_reasons_follow_the_cause() {
        use crate::error::ServerError;
        let server = |text: &str| Error::Server(ServerError::new(text));
        let table = [
            (
                server("TRYAGAIN Multiple keys request during rehashing"),
                "TRYAGAIN",
            ),
            (server("CLUSTERDOWN The cluster is down"), "CLUSTERDOWN"),
            (server("LOADING Redis is loading"), "LOADING"),
            (server("MASTERDOWN Link with MASTER is down"), "MASTERDOWN"),
            (
                server("READONLY You can't write against a read only replica."),
                "READONLY",
            ),
            (server("ERR something else"), "other"),
            (
                Error::Connect {
                    addr: NodeAddr::new("127.0.0.1", 1),
                    reason: "refused".into(),
                },
                "connect",
            ),
            (
                Error::NotSent {
                    reason: "lost".into(),
                },
                "connection_lost",
            ),
            (
                Error::ReplyLost {
                    addr: NodeAddr::new("127.0.0.1", 1),
                    reason: "lost".into(),
                },
                "connection_lost",
            ),
        ];
        for (cause, label) in table {
            assert_eq!(RetryReason::of(&cause).label(), label, "{cause}");
        }
    }
}
