//! Connections: one pipelined connection per node, its handshake, outbox, replies in flight,
//! deadlines, and what its loss means for the requests it carried.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};

use crate::addr::{DialTarget, NodeAddr};
use crate::error::Error;
use crate::framing::ReplyDecoder;
use crate::request::{Access, Arg};
use crate::value::Value;
use crate::wire::encode_args;

use super::ids::{ConnId, NodeId, OpId, ReqRef};
use super::nodes::Down;
use super::ops::Ops;
use super::plans;
use super::tally::Event;
use super::timers::Timer;
use super::{after, Endpoints, Output, Session, Waiters};

/// Something written on a connection that awaits its reply; replies come in this order.
#[derive(Debug)]
pub(super) enum Pending {
    Request {
        req: ReqRef,
        asking: bool,
    },
    Asking,
    /// The `WAIT` written right after `req` (see [`Request::then_wait`](crate::request::Request::then_wait)).
    Wait {
        req: ReqRef,
    },
    /// `AUTH`, or `PING` without credentials: the connection is usable only once a node
    /// answered, so a listener that never answers fails within the connect timeout.
    Handshake,
    /// `ROLE`, after the handshake of a data node of a Sentinel deployment: the connection is
    /// ready once the node says it is the master.
    Role,
    /// `SUBSCRIBE +switch-master`, after the handshake of a sentinel's subscriber connection.
    Subscribe,
    /// The `PING` of an idle connection ([`Config::idle_probe`](super::Config::idle_probe)):
    /// any answer will do.
    Probe,
    Topology(u64),
    /// `SENTINEL MASTER` of a round.
    Sentinel(u64),
}

/// Something routed to a connection and not yet handed to the driver.
///
/// Requests are encoded only when the driver drains [`Session::poll`], so a request that ends
/// before that (its deadline passed in the same `handle_timeout`) is never written, and a
/// request counts as sent exactly when its bytes were handed out.
#[derive(Debug)]
pub(super) enum Queued {
    Request {
        req: ReqRef,
        asking: bool,
    },
    /// The `WAIT` after `req`'s grant, on the connection that carried it.
    Wait {
        req: ReqRef,
    },
    Topology(u64),
    Sentinel(u64),
    /// The `PING` of an idle connection.
    Probe,
}

#[derive(Debug, PartialEq, Eq)]
pub(super) enum ConnState {
    Connecting,
    Handshaking,
    Ready,
}

#[derive(Debug)]
pub(super) struct Conn {
    pub(super) node: NodeId,
    pub(super) state: ConnState,
    pub(super) opened: Instant,
    /// When it was last written to: it is idle since.
    pub(super) last_write: Instant,
    /// Replies decoded from the bytes given to the session ([`Session::handle_read_buf`]).
    pub(super) decoder: ReplyDecoder,
    /// Written and unanswered, in wire order, each with the time it was written.
    pub(super) in_flight: VecDeque<(Pending, Instant)>,
    /// Routed here and not yet written: written at the next drain once the connection is ready.
    pub(super) outbox: Vec<Queued>,
    pub(super) check_at: Option<Instant>,
    /// Subscribed to `+switch-master` on a sentinel: what arrives unasked is a message.
    pub(super) subscriber: bool,
    /// Takes no more requests ([`Session::retire`]): closed once the replies of those written
    /// on it are in.
    pub(super) retired: bool,
}

/// How often at most a single node's connection is retired for answering as a replica: a
/// failover that moved the node's name is followed within it, and a client pointed at a replica
/// on purpose dials again once a second while its writes are refused, not at each one.
pub(super) const RETIRE_EVERY: Duration = Duration::from_secs(1);

/// Why a connection is dropped; decides what its requests become.
#[derive(Debug)]
pub(super) enum Loss {
    /// The TCP connect failed or timed out.
    Connect(String),
    /// The server refused `AUTH`: no request can succeed on this node, so none is retried.
    Auth(String),
    /// The server answered the handshake with another error (`max number of clients
    /// reached`, `BUSY`, ...): a failed connect that passes, so its requests back off and
    /// retry even on a single node.
    Refused(String),
    /// An open connection died: closed by the peer, a protocol error, a response timeout.
    Lost(String),
}

/// Encodes a refresh round's question (`CLUSTER SLOTS`, or `SENTINEL MASTER` of a Sentinel
/// deployment) and returns what awaits its answer; `None` when its round is no
/// longer `running_round` (the round ended while it waited and needs no answer).
fn encode_question(
    question: Queued,
    running_round: Option<u64>,
    endpoints: &Endpoints,
    buf: &mut BytesMut,
) -> Option<Pending> {
    let (Queued::Topology(round) | Queued::Sentinel(round)) = question else {
        return None;
    };
    if Some(round) != running_round {
        return None;
    }
    match (question, endpoints) {
        (Queued::Sentinel(_), Endpoints::Sentinel(s)) => {
            let ask = vec![
                Bytes::from_static(b"SENTINEL"),
                Bytes::from_static(b"MASTER"),
                Bytes::from(s.master_name.clone()),
            ];
            encode_args(ask, buf);
            Some(Pending::Sentinel(round))
        }
        (Queued::Topology(_), _) => {
            let ask = vec![Bytes::from_static(b"CLUSTER"), Bytes::from_static(b"SLOTS")];
            encode_args(ask, buf);
            Some(Pending::Topology(round))
        }
        _ => None,
    }
}

/// Encodes the `WAIT` written after `req`'s grant and returns what awaits its answer; `None`
/// when the grant is gone (its request ended, or was dispatched again, meanwhile).
fn encode_wait<W: Waiters>(ops: &Ops<W>, req: ReqRef, buf: &mut BytesMut) -> Option<Pending> {
    let (replicas, ms) = ops
        .get(req.op)
        .and_then(|op| op.reqs.get(req.idx))
        .filter(|s| s.attempt == req.attempt && s.granted.is_some())
        .and_then(|s| s.request.wait())?;
    let wait = vec![
        Bytes::from_static(b"WAIT"),
        replicas.into_arg(),
        ms.into_arg(),
    ];
    encode_args(wait, buf);
    Some(Pending::Wait { req })
}

impl<W: Waiters> Session<W> {
    /// Encodes a ready connection's outbox into one write; `None` when nothing is left to
    /// write (every queued request ended meanwhile).
    pub(super) fn flush(&mut self, conn: ConnId) -> Option<Bytes> {
        let now = self.now;
        let c = self.conns.get_mut(&conn)?;
        if c.state != ConnState::Ready {
            return None;
        }
        let node = c.node;
        let was_idle = c.in_flight.is_empty();
        let buf = &mut self.write_buf;
        // The ops whose callers stopped waiting before anything of theirs was written: ended
        // after the loop, unwritten. Allocates only when there is one.
        let mut given_up = Vec::new();
        // Drained in place: the outbox keeps its capacity for the next batch.
        for queued in c.outbox.drain(..) {
            match queued {
                Queued::Request { req, asking } => {
                    let Some(op) = self.ops.get_mut(req.op) else {
                        continue;
                    };
                    let Some(state) = op
                        .reqs
                        .get_mut(req.idx)
                        .filter(|s| s.attempt == req.attempt && s.reply.is_none())
                    else {
                        continue;
                    };
                    if !op.written {
                        if op.plan.abandoned() {
                            given_up.push(req.op);
                            continue;
                        }
                        op.written = true;
                    }
                    // ASKING and its request go out in one write, back to back: nothing can
                    // come between them on the wire.
                    if asking {
                        encode_args(vec![Bytes::from_static(b"ASKING")], buf);
                        c.in_flight.push_back((Pending::Asking, now));
                    }
                    state.request.encode(state.with_source, buf);
                    state.sent_on = Some(node);
                    c.in_flight
                        .push_back((Pending::Request { req, asking }, now));
                }
                Queued::Wait { req } => {
                    if let Some(pending) = encode_wait(&self.ops, req, buf) {
                        c.in_flight.push_back((pending, now));
                    }
                }
                Queued::Probe => {
                    encode_args(vec![Bytes::from_static(b"PING")], buf);
                    c.in_flight.push_back((Pending::Probe, now));
                }
                question @ (Queued::Topology(_) | Queued::Sentinel(_)) => {
                    let endpoints = &self.config.endpoints;
                    let running = self.refresh.running.then_some(self.refresh.round);
                    if let Some(pending) = encode_question(question, running, endpoints, buf) {
                        c.in_flight.push_back((pending, now));
                    }
                }
            }
        }
        let bytes = (!buf.is_empty()).then(|| buf.split().freeze());
        if bytes.is_some() {
            c.last_write = now;
        }
        self.end_unwritten(now, given_up);
        let bytes = bytes?;
        if was_idle {
            let first = match self.follows_failovers() {
                true => self.config.response_timeout.min(self.config.stall_refresh),
                false => self.config.response_timeout,
            };
            if let Some(at) = after(now, first) {
                self.schedule_check(conn, at);
            }
        }
        Some(bytes)
    }

    /// Ends the ops whose callers stopped waiting before anything of theirs was written
    /// ([`Waiters::abandoned`]), unwritten.
    fn end_unwritten(&mut self, now: Instant, given_up: Vec<OpId>) {
        for id in given_up {
            // A batch's later requests name their op again: it is ended once.
            if let Some(mut op) = self.ops.remove(id) {
                op.plan.fail(plans::given_up());
                self.complete(now, op);
            }
        }
    }

    pub(super) fn conn_for(&mut self, now: Instant, node: NodeId) -> ConnId {
        if let Some(conn) = self.nodes.conn(node) {
            return conn;
        }
        let conn = ConnId(self.next_conn);
        self.next_conn += 1;
        self.conns.insert(
            conn,
            Conn {
                node,
                state: ConnState::Connecting,
                opened: now,
                last_write: now,
                decoder: self.reply_decoder(),
                in_flight: VecDeque::new(),
                outbox: Vec::new(),
                check_at: None,
                subscriber: false,
                retired: false,
            },
        );
        self.nodes.bind_conn(node, conn);
        tracing::debug!(?conn, node = %self.nodes[node], "connecting");
        self.outputs.push_back(Output::Connect {
            conn,
            node: self.nodes[node].clone(),
            dial: self.dial_target(node),
        });
        if let Some(at) = after(now, self.config.connect_timeout) {
            self.schedule_check(conn, at);
        }
        conn
    }

    /// Queues a write on the node's connection (opening one if needed).
    pub(super) fn enqueue(&mut self, now: Instant, node: NodeId, queued: Queued) {
        let conn = self.conn_for(now, node);
        if let Some(c) = self.conns.get_mut(&conn) {
            c.outbox.push(queued);
            if c.state == ConnState::Ready {
                self.dirty.insert(conn);
            }
        }
    }

    /// Arms the connection's check timer for `at`, unless an earlier check is armed: a check
    /// re-arms itself for whatever is due next.
    pub(super) fn schedule_check(&mut self, conn: ConnId, at: Instant) {
        if let Some(c) = self.conns.get_mut(&conn) {
            if c.check_at.is_some_and(|t| t <= at) {
                return;
            }
            c.check_at = Some(at);
            self.timers.arm(at, Timer::Conn(conn));
        }
    }

    pub(super) fn become_ready(&mut self, conn: ConnId) {
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        c.state = ConnState::Ready;
        self.nodes.mark_up(c.node);
        if !c.outbox.is_empty() {
            self.dirty.insert(conn);
        }
    }

    pub(super) fn protocol_failure(&mut self, now: Instant, conn: ConnId, detail: String) {
        let addr = self
            .conns
            .get(&conn)
            .map(|c| self.nodes[c.node].to_string())
            .unwrap_or_default();
        tracing::warn!(%addr, %detail, "closing a connection after a protocol error");
        self.drop_conn(now, conn, Loss::Lost(format!("protocol error: {detail}")));
    }

    /// Forgets a connection, tells the driver to release it, and settles everything that was
    /// on it.
    ///
    /// A sent write ends with [`Error::ReplyLost`]: it may have run, so it is never re-sent. A
    /// sent read is retried. A request never written is retried, except when retrying cannot
    /// help: a refused `AUTH`, or a single node that could not be reached (the answer is then
    /// `Connect` within the connect timeout instead of seconds of retries; a cluster node may
    /// be failing over, so cluster requests retry and the map is refreshed). A node whose
    /// connect failed is not dialled again before its backoff ends.
    pub(super) fn drop_conn(&mut self, now: Instant, conn: ConnId, loss: Loss) {
        let Some(c) = self.conns.remove(&conn) else {
            return;
        };
        // Every forgotten connection is released by the driver, whoever ended it: its tasks
        // and its socket would otherwise outlive it.
        self.outputs.push_back(Output::Close { conn });
        self.nodes.unbind_conn(c.node, conn);
        self.dirty.remove(&conn);
        if c.check_at.is_some() {
            self.timers.disarm(Timer::Conn(conn));
        }
        let addr = self.nodes[c.node].clone();
        let connected = c.state == ConnState::Ready;
        if c.subscriber {
            let interval = self.config.refresh_interval;
            self.sentinels.subscriber_lost(now, connected, interval);
        }
        let (reason, fatal, passing) = match loss {
            Loss::Connect(reason) | Loss::Lost(reason) => (reason, false, false),
            Loss::Auth(reason) => (reason, true, false),
            Loss::Refused(reason) => (reason, false, true),
        };
        if !connected {
            let failures = self.nodes.failures(c.node) + 1;
            let delay = self.config.retry.delay(failures, self.jitter.next_factor());
            if let Some(until) = after(now, delay) {
                self.nodes.mark_down(c.node, Down { failures, until });
            }
        }
        let not_sent = self.unsent(c.node, fatal, connected, &reason);
        let lost = Error::ReplyLost { addr, reason };
        let give_up = fatal || (!self.follows_failovers() && !connected && !passing);
        for (pending, _) in c.in_flight {
            match pending {
                Pending::Request { req, .. } => {
                    match self.req_mut(req).map(|s| s.request.access()) {
                        Some(Access::Write) => self.finish(req, Err(lost.clone())),
                        Some(Access::Read) => self.retry_later(now, req, lost.clone()),
                        None => {}
                    }
                }
                Pending::Topology(round) => self.on_topology(now, round, c.node, Err(lost.clone())),
                Pending::Sentinel(round) => {
                    self.on_sentinel_answer(now, round, c.node, Err(lost.clone()))
                }
                // The request was answered, its WAIT was not: replication unknown.
                Pending::Wait { req } => self.finish_granted(req, Value::Nil),
                Pending::Asking
                | Pending::Handshake
                | Pending::Role
                | Pending::Subscribe
                | Pending::Probe => {}
            }
        }
        for queued in c.outbox {
            match queued {
                Queued::Request { req, .. } if give_up => self.finish(req, Err(not_sent.clone())),
                Queued::Request { req, .. } => self.retry_later(now, req, not_sent.clone()),
                // The grant was answered, its WAIT never written: replication unknown.
                Queued::Wait { req } => self.finish_granted(req, Value::Nil),
                Queued::Topology(round) => {
                    self.on_topology(now, round, c.node, Err(not_sent.clone()))
                }
                Queued::Sentinel(round) => {
                    self.on_sentinel_answer(now, round, c.node, Err(not_sent.clone()))
                }
                Queued::Probe => {}
            }
        }
        // A node that went away may have been failed over: the map is suspect. Not so a
        // sentinel's subscription, which names no master: asked again at its loss, a sentinel
        // that refuses `SUBSCRIBE` had a question and a new subscription ten times a second.
        if !c.subscriber {
            self.refresh_soon(now);
        }
    }

    /// A plain single node answered as a replica (`READONLY`, `MASTERDOWN`), at most once a
    /// second ([`RETIRE_EVERY`]): a managed
    /// service's endpoint, a Kubernetes Service or any name that a failover moved to the new
    /// master is looked up again only when it is dialled, and a connection open to the old
    /// master would be answered `READONLY` until the process restarts. The connection takes no
    /// more requests (the next ones dial the address again, its retries among them) and closes
    /// once the replies of those written on it are in (the replica refuses writes unrun).
    pub(super) fn retire(&mut self, now: Instant, conn: ConnId) {
        if !matches!(self.config.endpoints, Endpoints::Single(_)) {
            return;
        }
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        if c.retired {
            return;
        }
        if self
            .last_retire
            .and_then(|at| after(at, RETIRE_EVERY))
            .is_some_and(|next| now < next)
        {
            return;
        }
        self.last_retire = Some(now);
        c.retired = true;
        let node = c.node;
        let queued = std::mem::take(&mut c.outbox);
        self.nodes.unbind_conn(node, conn);
        self.dirty.remove(&conn);
        tracing::warn!(
            node = %self.nodes[node],
            "the node answered as a replica: its address is dialled again for the next \
             requests, and this connection closes once its replies are in"
        );
        for queued in queued {
            match queued {
                Queued::Request { req, .. } => self.to_dispatch.push_back(req),
                // `WAIT` counts its own connection's writes: on another it would vouch for
                // nothing.
                Queued::Wait { req } => self.finish_granted(req, Value::Nil),
                // No refresh round asks a plain single node; a probe is the old connection's.
                Queued::Topology(_) | Queued::Sentinel(_) | Queued::Probe => {}
            }
        }
        self.close_if_retired(now, conn);
    }

    /// Closes a retired connection ([`Session::retire`]) once nothing written on it awaits a
    /// reply.
    pub(super) fn close_if_retired(&mut self, now: Instant, conn: ConnId) {
        if self
            .conns
            .get(&conn)
            .is_some_and(|c| c.retired && c.in_flight.is_empty())
        {
            let reason = "retired: the node answered as a replica".to_owned();
            self.drop_conn(now, conn, Loss::Lost(reason));
        }
    }

    /// What a request never written on a connection to `node` ends with, or retries on: a
    /// refused password (`fatal`), a lost connection, or one that never opened.
    fn unsent(&self, node: NodeId, fatal: bool, connected: bool, reason: &str) -> Error {
        if fatal {
            Error::Auth {
                addr: self.dial_addr(node),
                reason: reason.to_owned(),
            }
        } else if connected {
            let addr = &self.nodes[node];
            Error::NotSent {
                reason: format!("the connection to {addr} was lost: {reason}"),
            }
        } else {
            Error::Connect {
                addr: self.dial_addr(node),
                reason: reason.to_owned(),
            }
        }
    }

    pub(super) fn check_conn(&mut self, now: Instant, conn: ConnId) {
        let (connect_timeout, response_timeout) =
            (self.config.connect_timeout, self.config.response_timeout);
        let stall_refresh = self.config.stall_refresh;
        let cluster = self.follows_failovers();
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        c.check_at = None;
        let addr = self.nodes[c.node].to_string();
        // The connect deadline covers the TCP connect and the AUTH exchange.
        let (due, written) = if c.state == ConnState::Ready {
            match c.in_flight.front() {
                Some(&(_, written)) => (after(written, response_timeout), Some(written)),
                None => return self.probe_if_idle(now, conn),
            }
        } else {
            (after(c.opened, connect_timeout), None)
        };
        let Some(due) = due else {
            return;
        };
        let connecting = written.is_none();
        if now < due {
            // A stall short of the response timeout: refresh the map meanwhile (a replaced
            // master's late answers are then recognised), and look again a while later.
            let next = match written.and_then(|w| after(w, stall_refresh)) {
                Some(suspect) if cluster && suspect <= now => {
                    self.refresh_soon(now);
                    after(now, stall_refresh).map_or(due, |t| t.min(due))
                }
                Some(suspect) if cluster => suspect.min(due),
                _ => due,
            };
            self.schedule_check(conn, next);
            return;
        }
        if connecting {
            self.tally.count(Event::ConnectTimeout);
            tracing::warn!(%addr, "connect timed out");
            let reason = format!("no connection within {connect_timeout:?}");
            self.drop_conn(now, conn, Loss::Connect(reason));
        } else {
            self.tally.count(Event::ResponseTimeout);
            tracing::warn!(%addr, "no reply within the response timeout; closing the connection");
            let reason = format!("no reply within {response_timeout:?}");
            self.drop_conn(now, conn, Loss::Lost(reason));
        }
    }

    /// A ready connection with nothing in flight: once idle for the probe's interval it is
    /// sent a `PING` (the response timeout then awaits its answer, and closes it without
    /// one); before, its check looks again then. A sentinel's subscriber is left alone: an
    /// answer could not be told from a message.
    fn probe_if_idle(&mut self, now: Instant, conn: ConnId) {
        let Some(every) = self.config.idle_probe else {
            return;
        };
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        if c.subscriber || c.retired {
            return;
        }
        let Some(at) = after(c.last_write, every) else {
            return;
        };
        if now < at {
            self.schedule_check(conn, at);
            return;
        }
        c.outbox.push(Queued::Probe);
        self.dirty.insert(conn);
    }

    /// Whether `node`'s connection is open and past its handshake.
    pub(super) fn is_ready(&self, node: NodeId) -> bool {
        self.nodes
            .conn(node)
            .and_then(|c| self.conns.get(&c))
            .is_some_and(|c| c.state == ConnState::Ready)
    }

    /// Whether `node`'s connection has waited at least `stall_refresh` for its oldest reply.
    pub(super) fn is_stalled(&self, node: NodeId, now: Instant) -> bool {
        self.nodes
            .conn(node)
            .and_then(|c| self.conns.get(&c))
            .and_then(|c| c.in_flight.front())
            .and_then(|&(_, written)| after(written, self.config.stall_refresh))
            .is_some_and(|suspect| suspect <= now)
    }

    /// Whether `node`'s connection has requests written or queued on it.
    pub(super) fn is_busy(&self, node: NodeId) -> bool {
        self.nodes
            .conn(node)
            .and_then(|c| self.conns.get(&c))
            .is_some_and(|c| !c.in_flight.is_empty() || !c.outbox.is_empty())
    }

    /// Where to open a connection to `node`: see [`Endpoints::dial_target`].
    pub(super) fn dial_target(&self, node: NodeId) -> DialTarget {
        let endpoints = &self.config.endpoints;
        endpoints.dial_target(&self.nodes[node], self.config.address_map.as_ref())
    }

    /// `node` as dialled, for the errors of its connects: the TCP address after the address
    /// map, or (a Unix socket) the node's identity, which names the socket's path.
    pub(super) fn dial_addr(&self, node: NodeId) -> NodeAddr {
        match self.dial_target(node) {
            DialTarget::Tcp(addr) => addr,
            DialTarget::Unix(_) => self.nodes[node].clone(),
        }
    }
}
