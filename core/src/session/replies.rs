//! Replies: each frame matched to the dispatch that caused it, and what a reply means for
//! routing (redirections, retries, the end of a request).

use std::time::Instant;

use crate::error::{Error, ServerError};
use crate::request::Access;
use crate::retry::{classify, final_error, handshake, Decision, Handshake};
use crate::value::{Frame, Value};

use super::conns::{ConnState, Loss, Pending, Queued};
use super::ids::{ConnId, NodeId, ReqRef};
use super::sentinel::SWITCH_MASTER;
use super::tally::Event;
use super::{Session, Waiters};

impl<W: Waiters> Session<W> {
    pub(super) fn on_frame(&mut self, now: Instant, conn: ConnId, frame: Frame) {
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        let node = c.node;
        let Some((pending, _)) = c.in_flight.pop_front() else {
            if let (true, ConnState::Ready, Ok(value)) = (c.subscriber, &c.state, &frame) {
                return self.on_sentinel_message(now, value);
            }
            // A server may speak before it is asked, to refuse a client it cannot take:
            // that is a failed connect, not a broken protocol.
            if let (false, Err(e)) = (c.state == ConnState::Ready, &frame) {
                let reason = format!("the handshake was refused: {e}");
                self.drop_conn(now, conn, Loss::Refused(reason));
                return;
            }
            self.protocol_failure(now, conn, "a reply with no request".into());
            return;
        };
        match pending {
            Pending::Asking | Pending::Probe => {}
            Pending::Handshake => match frame {
                Ok(_) => self.handshake_answered(conn),
                Err(e) => match handshake(&e, self.auth_for(node).is_some()) {
                    Handshake::Usable => self.handshake_answered(conn),
                    Handshake::Refused => self.drop_conn(now, conn, Loss::Auth(e.to_string())),
                    Handshake::Failed => {
                        let reason = format!("the handshake was refused: {e}");
                        self.drop_conn(now, conn, Loss::Refused(reason));
                    }
                },
            },
            Pending::Topology(round) => self.on_topology(now, round, node, Ok(frame)),
            Pending::Sentinel(round) => self.on_sentinel_answer(now, round, node, Ok(frame)),
            Pending::Role => self.on_role(now, conn, &frame),
            Pending::Subscribe => match frame {
                Ok(_) => self.become_ready(conn),
                Err(e) => {
                    tracing::warn!(
                        sentinel = %self.nodes[node],
                        error = %e,
                        "SUBSCRIBE +switch-master was refused; failovers are followed by asking \
                         the sentinels, and the subscription tried again later"
                    );
                    let reason = format!("SUBSCRIBE {SWITCH_MASTER} was refused: {e}");
                    self.drop_conn(now, conn, Loss::Refused(reason));
                }
            },
            Pending::Request { req, asking } => match frame {
                Ok(value) => self.on_value(req, (conn, node), asking, value),
                Err(error) => {
                    let replica = matches!(error.code(), "READONLY" | "MASTERDOWN");
                    self.on_error(now, req, node, asking, error);
                    if replica {
                        self.retire(now, conn);
                    }
                }
            },
            Pending::Wait { req } => {
                let wait = match frame {
                    Ok(value) => value,
                    Err(e) => Value::Error(e),
                };
                self.finish_granted(req, wait);
            }
        }
        self.close_if_retired(now, conn);
    }

    /// The handshake's `AUTH` or `PING` was answered: the connection is ready, unless a
    /// `ROLE` or `SUBSCRIBE` written after it is still to answer.
    fn handshake_answered(&mut self, conn: ConnId) {
        let more = self.conns.get(&conn).is_some_and(|c| {
            matches!(
                c.in_flight.front(),
                Some((Pending::Role | Pending::Subscribe, _))
            )
        });
        if !more {
            self.become_ready(conn);
        }
    }

    /// Ends a request that was followed by `WAIT`, once `WAIT` answered (or never will:
    /// `wait` is then nil). A stale `WAIT` reply (its request was redirected, or failed) finds
    /// no granted value and is dropped.
    pub(super) fn finish_granted(&mut self, r: ReqRef, wait: Value) {
        let Some(granted) = self.req_mut(r).and_then(|s| s.granted.take()) else {
            return;
        };
        self.finish(r, Ok(Value::Array(vec![granted, wait])));
    }

    /// A write answered `OK` by a node that, since the request was routed, the map learned
    /// is no longer its slot's master: a master replaced while the request waited (stopped
    /// past the node timeout, cut off) answers what it had queued once it runs again, then
    /// learns it was replaced and discards its data. Such an answer is not a success: the
    /// outcome is unknown. (Only when the map changed meanwhile is the slot looked up.)
    pub(super) fn answered_by_former_owner(
        &mut self,
        r: ReqRef,
        node: NodeId,
        asking: bool,
    ) -> Option<Error> {
        if !self.is_cluster() || asking {
            return None;
        }
        let map_gen = self.map_gen;
        let state = self.req_mut(r)?;
        if state.map_gen == map_gen || state.request.access() != Access::Write {
            return None;
        }
        let slot = state.request.slot()?;
        let owner = self.slots.get(slot)?;
        if owner == node {
            return None;
        }
        Some(Error::ReplyLost {
            addr: self.nodes[node].clone(),
            reason: format!(
                "answered after the map named {} master of slot {slot}: a replaced master \
                 may discard what it answered",
                self.nodes[owner]
            ),
        })
    }

    /// A value reply to request `r`, sent on `conn` to `node`.
    fn on_value(&mut self, r: ReqRef, (conn, node): (ConnId, NodeId), asking: bool, value: Value) {
        if let Some(stale) = self.answered_by_former_owner(r, node, asking) {
            return self.finish(r, Err(stale));
        }
        // A stale reply is ignored, by `finish` and here. The first answer names the host:
        // later nodes of a `SCAN` are named by that node's `CLUSTER SLOTS`.
        if self.req_mut(r).is_some() {
            if let Some(op) = self.ops.get_mut(r.op) {
                op.answered_by.get_or_insert(node);
            }
        }
        // A grant that asked for WAIT completes with WAIT's reply. WAIT counts the writes of
        // its own connection: it goes on the one that carried the grant, and only after
        // something was granted (after a refusal or an error it would only hold the
        // connection up to its timeout, with nothing to wait for).
        if let Some(state) = self.req_mut(r).filter(|s| s.request.wait().is_some()) {
            if value == Value::Nil {
                return self.finish(r, Ok(Value::Array(vec![Value::Nil, Value::Nil])));
            }
            state.granted = Some(value);
            match self.conns.get_mut(&conn) {
                Some(c) => {
                    c.outbox.push(Queued::Wait { req: r });
                    self.dirty.insert(conn);
                }
                None => self.finish_granted(r, Value::Nil),
            }
            return;
        }
        // `finish` ignores a stale reply.
        self.finish(r, Ok(value));
    }

    /// An error reply to request `r` from `node`: a redirection, a retry, or the end.
    fn on_error(
        &mut self,
        now: Instant,
        r: ReqRef,
        node: NodeId,
        asking: bool,
        error: ServerError,
    ) {
        let cluster = self.is_cluster();
        let max_redirections = self.config.max_redirections;
        // A redirect may name no host; it then means the node that answered.
        let host = self.nodes[node].host.clone();
        let Some(state) = self.req_mut(r) else {
            return;
        };
        state.sent_on = None;
        let decision = match classify(&error, &host) {
            Decision::Moved { .. } | Decision::Ask { .. } if !cluster => Decision::Final,
            d => d,
        };
        match decision {
            Decision::Final => self.finish(r, Err(final_error(error))),
            Decision::Moved { .. } | Decision::Ask { .. }
                if state.redirects >= max_redirections =>
            {
                let count = state.redirects;
                self.finish(r, Err(Error::TooManyRedirections { count, last: error }));
            }
            Decision::Moved { slot, addr } => {
                state.redirects += 1;
                self.tally.count(Event::Moved);
                tracing::debug!(slot, to = %addr, "MOVED: patching the slot map");
                let target = self.nodes.intern(addr);
                self.slots.moved(slot, node, target, now);
                self.map_gen += 1;
                self.refresh_soon(now);
                self.to_dispatch.push_back(r);
            }
            Decision::Ask { addr } => {
                state.redirects += 1;
                self.tally.count(Event::Ask);
                let target = self.nodes.intern(addr);
                if let Some(state) = self.req_mut(r) {
                    state.ask = Some(target);
                }
                self.to_dispatch.push_back(r);
            }
            Decision::Backoff { refresh } => {
                if refresh {
                    // Only a node that says it is a replica puts the master in use in doubt: a
                    // `LOADING` master restarted, it was not replaced.
                    if matches!(error.code(), "READONLY" | "MASTERDOWN") {
                        self.master_in_doubt(node);
                    }
                    self.refresh_soon(now);
                }
                self.retry_later(now, r, Error::Server(error));
            }
            Decision::NoScript => {
                if state.with_source || state.request.script_ref().is_none() {
                    self.finish(r, Err(Error::Server(error)));
                } else {
                    // The node that lacks the script gets its source; EVAL also loads it
                    // there for later EVALSHA calls.
                    state.with_source = true;
                    if asking {
                        state.ask = Some(node);
                    } else {
                        state.pinned = Some(node);
                    }
                    self.to_dispatch.push_back(r);
                }
            }
        }
    }
}
