//! Routing: where a request goes now, decided from the session's state alone
//! ([`Session::route`]), and carrying the decision out ([`Session::dispatch`]).

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use crate::addr::NodeAddr;
use crate::error::{ConfigError, Error, ServerError};
use crate::request::{NodeTarget, Route};

use super::conns::Queued;
use super::ids::{NodeId, ReqRef};
use super::ops::ReqState;
use super::timers::Timer;
use super::{Session, Waiters};

/// Where one dispatch of a request goes.
#[derive(Debug, PartialEq)]
pub(super) enum Routing {
    /// To this node's connection; `asking` puts `ASKING` before it.
    Send { node: NodeId, asking: bool },
    /// To a node named by its address (a `Route::Node`), interned when the request is sent.
    SendToAddr(NodeAddr),
    /// The node is in connect backoff and has no connection: wait until then (no attempt
    /// counted), then route again, maybe elsewhere. `asking` and `pinned` say which binding
    /// to keep for the next routing.
    Backoff {
        node: NodeId,
        until: Instant,
        asking: bool,
        pinned: bool,
    },
    /// No map yet (or, for a Sentinel deployment, no master): wait for the first round.
    AwaitMap,
    /// The map has no owner for the slot: refresh, and retry after a backoff.
    NoOwner(u16),
    /// The request cannot be sent at all.
    Fail(Error),
}

impl<W: Waiters> Session<W> {
    /// The masters of the map.
    pub(super) fn masters(&self) -> BTreeSet<NodeId> {
        self.slots.owners().collect()
    }

    /// Where `state` goes now: an `ASK` target, a node pinned by `NOSCRIPT`, the one node of a
    /// single-node session, else its route through the map. `answered_by` is the node of the
    /// plan's first reply (the host of a `:port` route).
    pub(super) fn route(
        &self,
        now: Instant,
        state: &ReqState,
        answered_by: Option<NodeId>,
    ) -> Routing {
        if let Some((_, ms)) = state.request.wait() {
            let response_timeout = self.config.response_timeout;
            if Duration::from_millis(ms) >= response_timeout {
                return Routing::Fail(Error::Config(ConfigError::WaitNotBelowResponseTimeout {
                    wait_ms: ms,
                    response_timeout,
                }));
            }
        }
        let (node, asking, pinned) = match (state.ask, state.pinned) {
            (Some(node), _) => (node, true, false),
            (None, Some(node)) => (node, false, true),
            (None, None) if !self.is_cluster() => match self.single_node() {
                Some(node) => (node, false, false),
                None => return Routing::AwaitMap,
            },
            (None, None) => match self.route_by_map(now, &state.request.route(), answered_by) {
                Ok(node) => (node, false, false),
                Err(routing) => return routing,
            },
        };
        match self.nodes.backoff_until(node, now) {
            Some(until) if self.nodes.conn(node).is_none() => Routing::Backoff {
                node,
                until,
                asking,
                pinned,
            },
            _ => Routing::Send { node, asking },
        }
    }

    /// The node a cluster request's route names through the map.
    fn route_by_map(
        &self,
        now: Instant,
        route: &Route,
        answered_by: Option<NodeId>,
    ) -> Result<NodeId, Routing> {
        match route {
            Route::Slot(slot) => match self.slots.get(*slot) {
                Some(node) => Ok(node),
                None if !self.map_loaded => Err(Routing::AwaitMap),
                None => Err(Routing::NoOwner(*slot)),
            },
            Route::AnyMaster => {
                // A master with a ready connection, else one not in backoff, else any.
                let masters = self.masters();
                let ready = masters.iter().copied().find(|&n| self.is_ready(n));
                let up = || {
                    masters
                        .iter()
                        .copied()
                        .find(|&n| self.nodes.backoff_until(n, now).is_none())
                };
                ready
                    .or_else(up)
                    .or_else(|| masters.first().copied())
                    .ok_or(Routing::AwaitMap)
            }
            Route::Node(NodeTarget::Addr(addr)) => match self.nodes.id(addr) {
                Some(node) => Ok(node),
                None => Err(Routing::SendToAddr(addr.clone())),
            },
            Route::Node(NodeTarget::Port(port)) => match answered_by {
                Some(node) => {
                    let addr = NodeAddr::new(self.nodes[node].host.clone(), *port);
                    match self.nodes.id(&addr) {
                        Some(node) => Ok(node),
                        None => Err(Routing::SendToAddr(addr)),
                    }
                }
                None => Err(Routing::Fail(Error::Config(ConfigError::NodeWithoutHost {
                    port: *port,
                }))),
            },
        }
    }

    /// Sends one request toward its node, or parks it until the node is known: the effect of
    /// [`Session::route`].
    pub(super) fn dispatch(&mut self, now: Instant, r: ReqRef) {
        let answered_by = self.ops.get(r.op).and_then(|op| op.answered_by);
        let Some(state) = self.req(r) else {
            return;
        };
        let routing = self.route(now, state, answered_by);
        if let Routing::Fail(error) = routing {
            return self.finish(r, Err(error));
        }
        // A new dispatch: replies, timers and writes of the earlier one no longer match.
        let attempt = self.next_attempt;
        self.next_attempt += 1;
        let map_gen = self.map_gen;
        let Some(state) = self.req_mut(r) else {
            return;
        };
        state.granted = None;
        state.map_gen = map_gen;
        state.attempt = attempt;
        state.ask = None;
        state.pinned = None;
        let r = ReqRef { attempt, ..r };
        match routing {
            Routing::Send { node, asking } => self.send_to(now, node, r, asking),
            Routing::SendToAddr(addr) => {
                let node = self.nodes.intern(addr);
                self.send_to(now, node, r, false);
            }
            Routing::Backoff {
                node,
                until,
                asking,
                pinned,
            } => {
                if let Some(state) = self.req_mut(r) {
                    if asking {
                        state.ask = Some(node);
                    } else if pinned {
                        state.pinned = Some(node);
                    }
                }
                self.timers.arm(until, Timer::Backoff(r));
            }
            Routing::AwaitMap => {
                // The first map is on its way (or will be): a running round is not stale, so
                // it is not followed by another.
                self.unrouted.push(r);
                if !self.refresh.running {
                    self.refresh_when_allowed(now);
                }
            }
            Routing::NoOwner(slot) => {
                self.refresh_soon(now);
                let cause =
                    ServerError::new(format!("CLUSTERDOWN Hash slot {slot} has no known owner"));
                self.retry_later(now, r, Error::Server(cause));
            }
            Routing::Fail(_) => {}
        }
    }

    /// Queues a request on the node's connection (opening one if needed).
    pub(super) fn send_to(&mut self, now: Instant, node: NodeId, req: ReqRef, asking: bool) {
        if let Some(op) = self.ops.get_mut(req.op) {
            op.attempts = op.attempts.saturating_add(1);
            op.node = Some(node);
        }
        self.enqueue(now, node, Queued::Request { req, asking });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keys::Key;
    use crate::request::{Access, Request};
    use crate::session::nodes::Down;
    use crate::session::Config;
    use crate::testing::Tickets;

    fn state(request: Request) -> ReqState {
        ReqState::new(request, 1)
    }

    fn get(key: &str) -> Request {
        Request::cmd(Access::Read, "GET")
            .key(Key::new(key.to_owned()))
            .build()
            .unwrap()
    }

    fn to_node(addr: &str) -> Request {
        Request::cmd(Access::Read, "SCAN")
            .arg("0")
            .to_node(addr)
            .build()
            .unwrap()
    }

    /// A cluster session of two root nodes (ids 0 and 1) whose map, once `loaded`, gives
    /// every slot but the last to node 1.
    fn cluster(loaded: bool) -> Session<Tickets> {
        let now = crate::testing::start();
        let roots = vec![NodeAddr::new("a", 1), NodeAddr::new("b", 1)];
        let mut session = Session::new(Config::cluster(roots), now);
        if loaded {
            session.slots.set_range(0, 16382, 1);
            session.map_loaded = true;
        }
        session
    }

    #[test]
    fn routing_decisions_follow_the_bindings_then_the_map() {
        let now = crate::testing::start();
        let slot = Key::new("k".to_owned()).slot();
        let last = 16383;
        let unowned = (0u32..)
            .map(|n| format!("k{n}"))
            .find(|k| Key::new(k.clone()).slot() == last)
            .unwrap();
        let asked = ReqState {
            ask: Some(0),
            pinned: Some(1),
            ..state(get("k"))
        };
        let pinned = ReqState {
            pinned: Some(0),
            ..state(get("k"))
        };
        let send = |node, asking| Routing::Send { node, asking };
        type Row = (&'static str, bool, ReqState, Option<NodeId>, Routing);
        let rows: Vec<Row> = vec![
            (
                "an ASK target comes first, with ASKING",
                true,
                asked,
                None,
                send(0, true),
            ),
            (
                "a NOSCRIPT node comes next",
                true,
                pinned,
                None,
                send(0, false),
            ),
            (
                "a slot goes to its owner",
                true,
                state(get("k")),
                None,
                send(1, false),
            ),
            (
                "before the first map, a request waits",
                false,
                state(get("k")),
                None,
                Routing::AwaitMap,
            ),
            (
                "a slot the map leaves without owner",
                true,
                state(get(&unowned)),
                None,
                Routing::NoOwner(last),
            ),
            (
                "a node route to an unknown address interns it when sent",
                true,
                state(to_node("c:1")),
                None,
                Routing::SendToAddr(NodeAddr::new("c", 1)),
            ),
            (
                "a :port route takes the host of the first reply",
                true,
                state(to_node(":1")),
                Some(1),
                send(1, false),
            ),
        ];
        assert_ne!(slot, last);
        for (what, loaded, state, answered_by, want) in rows {
            let session = cluster(loaded);
            assert_eq!(session.route(now, &state, answered_by), want, "{what}");
        }
    }

    #[test]
    fn refusals_and_the_single_node() {
        let now = crate::testing::start();
        let waits = state(get("k").then_wait(1, 60_000));
        let session = cluster(true);
        let no_host = session.route(now, &state(to_node(":1")), None);
        assert!(
            matches!(
                no_host,
                Routing::Fail(Error::Config(ConfigError::NodeWithoutHost { port: 1 }))
            ),
            "a :port route before any reply: {no_host:?}"
        );
        let too_long = session.route(now, &waits, None);
        assert!(
            matches!(
                too_long,
                Routing::Fail(Error::Config(
                    ConfigError::WaitNotBelowResponseTimeout { .. }
                ))
            ),
            "a WAIT at the response timeout: {too_long:?}"
        );
        let single = Session::<Tickets>::new(Config::single(NodeAddr::new("a", 1)), now);
        assert_eq!(
            single.route(now, &state(get("k")), None),
            Routing::Send {
                node: 0,
                asking: false
            },
            "a single node takes everything"
        );
    }

    #[test]
    fn a_node_in_connect_backoff_without_a_connection_makes_the_request_wait() {
        let now = crate::testing::start();
        let until = now + Duration::from_millis(40);
        let mut session = cluster(true);
        // A node the refresh has not dialled: it has no connection.
        let node = session.nodes.intern(NodeAddr::new("c", 1));
        session.nodes.mark_down(node, Down { failures: 1, until });
        let pinned = ReqState {
            pinned: Some(node),
            ..state(get("k"))
        };
        assert_eq!(
            session.route(now, &pinned, None),
            Routing::Backoff {
                node,
                until,
                asking: false,
                pinned: true
            }
        );
        // Once the backoff is over, the node is dialled again.
        assert_eq!(
            session.route(until, &pinned, None),
            Routing::Send {
                node,
                asking: false
            }
        );
    }
}
