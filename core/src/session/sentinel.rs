//! Redis Sentinel: asking the sentinels which node is the master, checking the answer with
//! `ROLE`, and following a failover.
//!
//! ```text
//!            round (start, READONLY, lost connection, +switch-master, every refresh_interval)
//!                │
//!                ▼
//!   SENTINEL MASTER <name> ──► one sentinel, the next in turn
//!                │ ip, port, config-epoch              │ refused, no such master, error
//!                ▼                                     ▼
//!   same master: nothing            round failed: back off, next sentinel next round;
//!   another, older epoch: stale     requests waiting for a first master count an attempt
//!   another: switch ─────────┐      and end as SentinelDiscovery when they run out
//!                            ▼
//!   old master's connection closed (its sent writes end as ReplyLost, never as success)
//!   waiting requests go to the new master, whose connection opens with AUTH + ROLE:
//!   ROLE says master ──► ready;   anything else ──► refused, retried, sentinels asked again
//! ```
//!
//! A separate connection to a sentinel that answered is subscribed to `+switch-master`, so a
//! failover the sentinels complete is followed at once rather than at the next question.
//!
//! Each answer's `config-epoch` orders the sentinels' configurations: a failover is voted at a
//! higher epoch than the configuration it replaces. An answer naming another master at a lower
//! epoch than the master in use comes from a sentinel that has not heard of the failover yet,
//! or is cut off from the others, while the master it names may still take writes (it stays a
//! master until the sentinels convert it, and then discards them): it is not followed.

use std::time::{Duration, Instant};

use bytes::Bytes;

use crate::addr::NodeAddr;
use crate::error::Error;
use crate::value::{Frame, Value};

use super::config::{Auth, Endpoints, SentinelEndpoints};
use super::conns::{Conn, ConnState, Loss, Queued};
use super::ids::{ConnId, NodeId};
use super::nodes::Nodes;
use super::timers::Timer;
use super::{after, Output, Session, Waiters};

/// The channel on which sentinels announce a completed failover.
pub(super) const SWITCH_MASTER: &str = "+switch-master";

/// The longest pause between two subscriptions to `+switch-master` that failed one after the
/// other, in refresh intervals: a sentinel that refuses `SUBSCRIBE` (an ACL without the
/// channel, `maxclients`) is asked again at most this seldom, and failovers are followed by
/// the questions meanwhile.
const MOST_SUBSCRIBE_INTERVALS: u32 = 64;

/// What the session knows of a Sentinel deployment.
#[derive(Debug, Default)]
pub(super) struct Sentinels {
    /// The sentinels' node ids, in the order configured.
    pub(super) nodes: Vec<NodeId>,
    /// The master the sentinels named last: where every request goes.
    pub(super) master: Option<NodeId>,
    /// Rounds so far; the next one starts its search for a sentinel here.
    turn: usize,
    /// The connection subscribed to `+switch-master`, while there is one.
    pub(super) subscriber: Option<ConnId>,
    /// Subscriptions that failed one after the other (refused, or lost before `SUBSCRIBE` was
    /// answered), and when the next may open: a refused subscription opened again at each
    /// answer made a connection and a question ten times a second, for good.
    subscribe_failures: u32,
    subscribe_after: Option<Instant>,
    /// The configuration epoch the master in use was named in (`config-epoch` of `SENTINEL
    /// MASTER`), or a floor under it after a `+switch-master` (the failover it announces has a
    /// higher epoch than the configuration it replaced). An answer naming another master in
    /// an older configuration is a sentinel that has not heard of a failover yet (it learns
    /// one from the others' hello messages, every 2 s) or one cut off from the others: the
    /// master it names may still take writes, and lose them when the sentinels convert it.
    epoch: Option<u64>,
    /// The master in use said it is no longer the master (`READONLY`, a `ROLE` of replica):
    /// the next answer naming another is followed whatever its epoch, since the sentinels may
    /// have been reset (a new `SENTINEL MONITOR` starts at epoch 0).
    in_doubt: bool,
}

impl Sentinels {
    /// The sentinels of `endpoints`, interned; an empty registry for other deployments.
    pub(super) fn new(endpoints: &Endpoints, nodes: &mut Nodes) -> Self {
        let Endpoints::Sentinel(s) = endpoints else {
            return Sentinels::default();
        };
        Sentinels {
            nodes: s
                .sentinels
                .iter()
                .map(|a| nodes.intern(a.clone()))
                .collect(),
            ..Sentinels::default()
        }
    }

    /// The subscriber connection is gone, `answered` when its `SUBSCRIBE` had been answered (a
    /// sentinel restarted: subscribe again at the next answer) or not (refused: wait a refresh
    /// interval, twice as long after each failure in a row, up to
    /// [`MOST_SUBSCRIBE_INTERVALS`]).
    pub(super) fn subscriber_lost(&mut self, now: Instant, answered: bool, interval: Duration) {
        self.subscriber = None;
        if answered {
            self.subscribe_failures = 0;
            self.subscribe_after = None;
            return;
        }
        self.subscribe_failures = self.subscribe_failures.saturating_add(1);
        let doublings = (self.subscribe_failures - 1).min(MOST_SUBSCRIBE_INTERVALS.ilog2());
        self.subscribe_after = after(now, interval.saturating_mul(1 << doublings));
    }

    /// Whether a subscriber may be opened now: none is open, and the pause after a failed one
    /// has passed.
    fn may_subscribe(&self, now: Instant) -> bool {
        self.subscriber.is_none() && self.subscribe_after.is_none_or(|at| now >= at)
    }

    /// Whether `node` is one of the sentinels.
    pub(super) fn is_sentinel(&self, node: NodeId) -> bool {
        self.nodes.contains(&node)
    }

    /// The sentinel the next round asks: the next in turn that `avoid` does not rule out (one
    /// in connect backoff), else the next in turn. Rounds rotate, so a sentinel that is down
    /// or has forgotten the master is not the only one asked round after round.
    pub(super) fn next_to_ask(&mut self, avoid: impl Fn(NodeId) -> bool) -> Option<NodeId> {
        let count = self.nodes.len();
        if count == 0 {
            return None;
        }
        let start = self.turn % count;
        self.turn = self.turn.wrapping_add(1);
        let in_turn = (0..count).map(|i| self.nodes[(start + i) % count]);
        let chosen = in_turn.clone().find(|&n| !avoid(n));
        if let Some(node) = chosen {
            // The rotation continues after the sentinel asked.
            let at = self.nodes.iter().position(|&n| n == node).unwrap_or(start);
            self.turn = at + 1;
        }
        chosen.or_else(|| in_turn.clone().next())
    }
}

/// What a sentinel's answer to `SENTINEL MASTER <name>` names: the master, and the
/// configuration epoch of the failover that made it master (`None` from a sentinel that does
/// not say).
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Named {
    pub(super) addr: NodeAddr,
    pub(super) epoch: Option<u64>,
}

/// Reads a reply to `SENTINEL MASTER <name>`: a flat list of field names and values, of which
/// `ip`, `port` and `config-epoch` are read; an error that says the sentinel monitors no master
/// of that name reads as such.
pub(super) fn parse_master(frame: Frame, master: &str) -> Result<Named, Error> {
    let unexpected = |detail: String| Error::UnexpectedReply { detail };
    let items = match frame {
        Err(e) if e.text().contains("No such master") => {
            return Err(unexpected(format!(
                "the sentinel monitors no master named {master:?}"
            )));
        }
        Err(e) => return Err(Error::Server(e)),
        Ok(Value::Array(items)) => items,
        Ok(other) => {
            return Err(unexpected(format!(
                "SENTINEL MASTER answered {other:?}, not a list of fields"
            )))
        }
    };
    let field = |name: &str| {
        items.chunks_exact(2).find_map(|pair| match pair {
            [Value::Bulk(key), Value::Bulk(value)] if &key[..] == name.as_bytes() => {
                std::str::from_utf8(value).ok()
            }
            _ => None,
        })
    };
    let host = field("ip").filter(|h| !h.is_empty());
    let port = field("port")
        .and_then(|p| p.parse::<u16>().ok())
        .filter(|&p| p != 0);
    let (Some(host), Some(port)) = (host, port) else {
        return Err(unexpected(format!(
            "SENTINEL MASTER answered {items:?}, without a host and port"
        )));
    };
    Ok(Named {
        addr: NodeAddr::new(host, port),
        epoch: field("config-epoch").and_then(|e| e.parse().ok()),
    })
}

/// What a node's reply to `ROLE` says about using it as the master.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum RoleCheck {
    /// It is the master, or will not say (`ROLE` refused by an ACL, or unknown to an old
    /// server): taken at its word, as the sentinels named it.
    Master,
    /// It says it is something else: a replica the sentinels have not yet replaced in their
    /// answers, a demoted master, a sentinel.
    NotMaster(String),
}

/// Reads a reply to `ROLE`, whose first item names the role.
pub(super) fn check_role(frame: &Frame) -> RoleCheck {
    let Ok(Value::Array(items)) = frame else {
        return match frame {
            Err(_) => RoleCheck::Master,
            Ok(other) => RoleCheck::NotMaster(format!("{other:?}")),
        };
    };
    match items.first() {
        Some(Value::Bulk(role)) | Some(Value::Status(role)) if &role[..] == b"master" => {
            RoleCheck::Master
        }
        Some(Value::Bulk(role)) | Some(Value::Status(role)) => {
            RoleCheck::NotMaster(String::from_utf8_lossy(role).into_owned())
        }
        _ => RoleCheck::NotMaster(format!("{items:?}")),
    }
}

/// The replaced and the new master in a `+switch-master` message for `master`
/// (`message +switch-master "<name> <old host> <old port> <new host> <new port>"`); `None`
/// for anything else (another master's failover, the subscription's confirmation).
pub(super) fn parse_switch_master(value: &Value, master: &str) -> Option<(NodeAddr, NodeAddr)> {
    let Value::Array(items) = value else {
        return None;
    };
    let [Value::Bulk(kind), Value::Bulk(channel), Value::Bulk(payload)] = items.as_slice() else {
        return None;
    };
    if &kind[..] != b"message" || &channel[..] != SWITCH_MASTER.as_bytes() {
        return None;
    }
    let payload = std::str::from_utf8(payload).ok()?;
    let words: Vec<&str> = payload.split_whitespace().collect();
    match words.as_slice() {
        [name, old_host, old_port, host, port] if *name == master => Some((
            NodeAddr::new(*old_host, old_port.parse().ok()?),
            NodeAddr::new(*host, port.parse().ok()?),
        )),
        _ => None,
    }
}

impl<W: Waiters> Session<W> {
    /// The Sentinel settings, when the session follows a Sentinel deployment.
    pub(super) fn sentinel_endpoints(&self) -> Option<&SentinelEndpoints> {
        match &self.config.endpoints {
            Endpoints::Sentinel(s) => Some(s),
            _ => None,
        }
    }

    /// The credentials a connection to `node` opens with: the sentinels' own for a sentinel.
    pub(super) fn auth_for(&self, node: NodeId) -> Option<Auth> {
        match self.sentinel_endpoints() {
            Some(s) if self.sentinels.is_sentinel(node) => s.auth.clone(),
            _ => self.config.auth.clone(),
        }
    }

    /// Starts a round: one sentinel is asked for the master.
    pub(super) fn start_sentinel_round(&mut self, now: Instant) {
        let nodes = &self.nodes;
        let avoid = |n: NodeId| nodes.backoff_until(n, now).is_some();
        let Some(sentinel) = self.sentinels.next_to_ask(avoid) else {
            // No sentinel to ask: no round can ever name a master.
            let error = self.sentinel_discovery_failure();
            for r in std::mem::take(&mut self.unrouted) {
                self.finish(r, Err(error.clone()));
            }
            return;
        };
        self.timers.disarm(Timer::Refresh);
        self.refresh.round += 1;
        self.refresh.running = true;
        self.refresh.again = false;
        self.refresh.last_error = None;
        self.refresh.last_started = Some(now);
        self.refresh.outstanding = 1;
        let round = self.refresh.round;
        self.enqueue(now, sentinel, Queued::Sentinel(round));
    }

    /// A sentinel's answer to round `round`, or why there is none.
    pub(super) fn on_sentinel_answer(
        &mut self,
        now: Instant,
        round: u64,
        sentinel: NodeId,
        answer: Result<Frame, Error>,
    ) {
        if round != self.refresh.round || !self.refresh.running {
            return;
        }
        self.refresh.outstanding = 0;
        self.refresh.running = false;
        let master_name = self
            .sentinel_endpoints()
            .map(|s| s.master_name.clone())
            .unwrap_or_default();
        let named = answer.and_then(|frame| parse_master(frame, &master_name));
        match named {
            Ok(named) => {
                if self.stale(&named) {
                    tracing::warn!(
                        sentinel = %self.nodes[sentinel],
                        named = %named.addr,
                        epoch = named.epoch,
                        known = self.sentinels.epoch,
                        "a sentinel names a master of an older configuration; kept the master in use"
                    );
                } else {
                    self.tally.count(super::Event::RefreshSucceeded);
                    self.refresh.failures = 0;
                    self.refresh.not_before = None;
                    self.follow_named(now, named);
                    if self.sentinels.may_subscribe(now) {
                        self.subscribe_switch_master(now, sentinel);
                    }
                }
                if let Some(next) = after(now, self.config.refresh_interval) {
                    self.set_refresh_timer(next);
                }
                if self.refresh.again {
                    self.refresh_when_allowed(now);
                }
            }
            Err(e) => {
                let addr = self.nodes[sentinel].clone();
                tracing::warn!(sentinel = %addr, error = %e, "a sentinel named no master");
                self.tally.count(super::Event::RefreshFailed);
                self.refresh.record(!self.map_loaded, &addr, e);
                self.round_failed(now);
            }
        }
    }

    /// The first sentinel's refusal (in the order first asked), when the last answer of every
    /// sentinel was a refused password.
    pub(super) fn every_sentinel_refused_the_password(&self) -> Option<Error> {
        let refused = |addr: &NodeAddr| {
            self.refresh
                .answers
                .iter()
                .any(|a| &a.seed == addr && matches!(a.answer, Error::Auth { .. }))
        };
        if !self
            .sentinels
            .nodes
            .iter()
            .all(|&n| refused(&self.nodes[n]))
        {
            return None;
        }
        self.refresh.answers.first().map(|a| a.answer.clone())
    }

    /// Why requests waiting for a first master fail: what each sentinel answered.
    pub(super) fn sentinel_discovery_failure(&self) -> Error {
        Error::SentinelDiscovery {
            master: self
                .sentinel_endpoints()
                .map(|s| s.master_name.clone())
                .unwrap_or_default(),
            tried: self.refresh.answers.clone(),
        }
    }

    /// A sentinel's answer, not stale: the master it names is followed, and its epoch kept
    /// (the higher of the two when it names the master in use).
    fn follow_named(&mut self, now: Instant, named: Named) {
        let before = self.sentinels.master;
        self.follow_master(now, named.addr);
        if before == self.sentinels.master {
            self.sentinels.epoch = self.sentinels.epoch.max(named.epoch);
        } else {
            self.sentinels.epoch = named.epoch;
            self.sentinels.in_doubt = false;
        }
    }

    /// The sentinels name `addr` master. Another master than the one in use replaces it: the
    /// old one's connection closes (a write sent there and unanswered ends as `ReplyLost`,
    /// since the demoted master may discard it), and waiting requests go to the new one.
    pub(super) fn follow_master(&mut self, now: Instant, addr: NodeAddr) {
        let node = self.nodes.intern(addr);
        let old = self.sentinels.master.replace(node);
        self.map_loaded = true;
        self.refresh.answers.clear();
        let waiting = std::mem::take(&mut self.unrouted);
        self.to_dispatch.extend(waiting);
        if old == Some(node) {
            return;
        }
        self.map_gen += 1;
        tracing::info!(master = %self.nodes[node], "the sentinels name a master");
        if let Some(conn) = old.and_then(|old| self.nodes.conn(old)) {
            let reason = format!("the sentinels named {} master", self.nodes[node]);
            self.drop_conn(now, conn, Loss::Lost(reason));
        }
    }

    /// Opens the connection that listens for `+switch-master` on `sentinel`. It belongs to no
    /// node's slot in the registry: the sentinel's own connection stays free for questions.
    fn subscribe_switch_master(&mut self, now: Instant, sentinel: NodeId) {
        let conn = ConnId(self.next_conn);
        self.next_conn += 1;
        self.conns.insert(
            conn,
            Conn {
                node: sentinel,
                state: ConnState::Connecting,
                opened: now,
                last_write: now,
                decoder: self.reply_decoder(),
                in_flight: Default::default(),
                outbox: Vec::new(),
                check_at: None,
                subscriber: true,
                retired: false,
            },
        );
        self.sentinels.subscriber = Some(conn);
        self.outputs.push_back(Output::Connect {
            conn,
            node: self.nodes[sentinel].clone(),
            dial: self.dial_target(sentinel),
        });
        if let Some(at) = after(now, self.config.connect_timeout) {
            self.schedule_check(conn, at);
        }
    }

    /// The node's answer to the `ROLE` of its handshake: a master is ready; anything else is
    /// refused (its requests back off and retry) and the sentinels are asked again.
    pub(super) fn on_role(&mut self, now: Instant, conn: ConnId, frame: &Frame) {
        match check_role(frame) {
            RoleCheck::Master => self.become_ready(conn),
            RoleCheck::NotMaster(role) => {
                let node = self.conns.get(&conn).map(|c| c.node);
                if let Some(node) = node {
                    self.master_in_doubt(node);
                }
                let addr = node
                    .map(|node| self.nodes[node].to_string())
                    .unwrap_or_default();
                tracing::warn!(%addr, %role, "the sentinels' master is not a master");
                let reason = format!("{addr} is not the master: ROLE says {role}");
                self.drop_conn(now, conn, Loss::Refused(reason));
            }
        }
    }

    /// A message pushed on the `+switch-master` subscription. One that replaces the master in
    /// use is followed at once, with an epoch above the replaced configuration's. Any other
    /// (about a master this client already left, or one it never used: a failover it missed)
    /// makes it ask the sentinels, whose epochs decide: a sentinel that heard late could
    /// otherwise take the client back to a master it had moved past.
    pub(super) fn on_sentinel_message(&mut self, now: Instant, value: &Value) {
        let Some(s) = self.sentinel_endpoints() else {
            return;
        };
        let Some((old, new)) = parse_switch_master(value, &s.master_name) else {
            return;
        };
        tracing::info!(replaced = %old, master = %new, "+switch-master");
        let in_use = self.sentinels.master.map(|m| self.nodes[m].clone());
        if in_use.as_ref() == Some(&new) {
            return;
        }
        if in_use.as_ref() == Some(&old) {
            self.follow_master(now, new);
            self.sentinels.epoch = self.sentinels.epoch.map(|e| e.saturating_add(1));
            self.sentinels.in_doubt = false;
        } else {
            self.refresh_soon(now);
        }
    }

    /// `node` refused a request in a way that says it is no longer the master (`READONLY`),
    /// or its `ROLE` says replica. When it is the sentinels' master in use, they may have
    /// failed over without this client hearing, or been reset to a lower epoch: the next
    /// answer naming another master is followed whatever its epoch.
    pub(super) fn master_in_doubt(&mut self, node: NodeId) {
        if self.sentinels.master == Some(node) {
            self.sentinels.in_doubt = true;
        }
    }

    /// Whether `named` is a sentinel's answer from an older configuration than the master in
    /// use was named in: another master, at a lower epoch, while the master in use says
    /// nothing against itself.
    fn stale(&self, named: &Named) -> bool {
        let Some(master) = self.sentinels.master else {
            return false;
        };
        if self.sentinels.in_doubt || self.nodes[master] == named.addr {
            return false;
        }
        matches!((named.epoch, self.sentinels.epoch), (Some(e), Some(known)) if e < known)
    }

    /// The words a sentinel connection's handshake adds after `AUTH`: `SUBSCRIBE` on the
    /// subscriber; and a data node of a Sentinel deployment is asked its `ROLE`.
    pub(super) fn handshake_extra(&self, conn: &Conn) -> Option<Vec<Bytes>> {
        self.sentinel_endpoints()?;
        if conn.subscriber {
            let channel = Bytes::from_static(SWITCH_MASTER.as_bytes());
            return Some(vec![Bytes::from_static(b"SUBSCRIBE"), channel]);
        }
        if self.sentinels.is_sentinel(conn.node) {
            return None;
        }
        Some(vec![Bytes::from_static(b"ROLE")])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ServerError;

    fn bulk(s: &str) -> Value {
        Value::Bulk(Bytes::copy_from_slice(s.as_bytes()))
    }

    /// A `SENTINEL MASTER` reply's fields, as a sentinel sends them (a few of its 40).
    fn master_reply(fields: &[(&str, &str)]) -> Frame {
        let items = fields
            .iter()
            .flat_map(|(k, v)| [bulk(k), bulk(v)])
            .collect();
        Ok(Value::Array(items))
    }

    #[test]
    fn master_answers_and_what_is_not_one() {
        let named = parse_master(
            master_reply(&[
                ("name", "m"),
                ("ip", "10.0.0.2"),
                ("port", "6380"),
                ("flags", "master"),
                ("config-epoch", "7"),
            ]),
            "m",
        );
        assert_eq!(
            named.unwrap(),
            Named {
                addr: NodeAddr::new("10.0.0.2", 6380),
                epoch: Some(7)
            }
        );
        let without_epoch = parse_master(master_reply(&[("ip", "h"), ("port", "1")]), "m");
        assert_eq!(without_epoch.unwrap().epoch, None);
        type Row = (&'static str, Frame, &'static str);
        let rows: Vec<Row> = vec![
            (
                "unknown name",
                Err(ServerError::new("ERR No such master with that name")),
                "no master named \"m\"",
            ),
            (
                "an error reply",
                Err(ServerError::new("ERR unknown command")),
                "unknown command",
            ),
            (
                "a bad port",
                master_reply(&[("ip", "h"), ("port", "port")]),
                "without a host and port",
            ),
            (
                "port 0",
                master_reply(&[("ip", "h"), ("port", "0")]),
                "without a host and port",
            ),
            (
                "an empty host",
                master_reply(&[("ip", ""), ("port", "1")]),
                "without a host and port",
            ),
            (
                "no port",
                master_reply(&[("ip", "h")]),
                "without a host and port",
            ),
            (
                "an odd list",
                Ok(Value::Array(vec![bulk("ip")])),
                "without a host and port",
            ),
            ("nil", Ok(Value::Nil), "not a list of fields"),
            ("an integer", Ok(Value::Int(3)), "not a list of fields"),
        ];
        for (what, frame, says) in rows {
            let e = parse_master(frame, "m").unwrap_err().to_string();
            assert!(e.contains(says), "{what}: {e}");
        }
    }

    #[test]
    fn role_replies() {
        let role = |items: Vec<Value>| check_role(&Ok(Value::Array(items)));
        assert_eq!(role(vec![bulk("master"), Value::Int(7)]), RoleCheck::Master);
        assert_eq!(
            role(vec![bulk("slave"), bulk("127.0.0.1"), Value::Int(6379)]),
            RoleCheck::NotMaster("slave".into())
        );
        assert_eq!(
            role(vec![bulk("sentinel"), Value::Array(vec![])]),
            RoleCheck::NotMaster("sentinel".into())
        );
        assert!(matches!(role(vec![]), RoleCheck::NotMaster(_)));
        assert!(matches!(
            check_role(&Ok(Value::Nil)),
            RoleCheck::NotMaster(_)
        ));
        // A server that will not say is taken at the sentinels' word.
        let refused = Err(ServerError::new(
            "NOPERM this user has no permissions to run 'role'",
        ));
        assert_eq!(check_role(&refused), RoleCheck::Master);
    }

    #[test]
    fn switch_master_messages() {
        let message = |channel: &str, payload: &str| {
            Value::Array(vec![bulk("message"), bulk(channel), bulk(payload)])
        };
        let ours = message(SWITCH_MASTER, "m 127.0.0.1 7000 127.0.0.1 7001");
        assert_eq!(
            parse_switch_master(&ours, "m"),
            Some((
                NodeAddr::new("127.0.0.1", 7000),
                NodeAddr::new("127.0.0.1", 7001)
            ))
        );
        assert_eq!(parse_switch_master(&ours, "other"), None);
        let confirmation =
            Value::Array(vec![bulk("subscribe"), bulk(SWITCH_MASTER), Value::Int(1)]);
        assert_eq!(parse_switch_master(&confirmation, "m"), None);
        assert_eq!(
            parse_switch_master(&message("+sdown", "m 1 2 3 4"), "m"),
            None
        );
        assert_eq!(
            parse_switch_master(&message(SWITCH_MASTER, "m 1 2 h x"), "m"),
            None
        );
        assert_eq!(
            parse_switch_master(&message(SWITCH_MASTER, "m h 1"), "m"),
            None
        );
        assert_eq!(
            parse_switch_master(&message(SWITCH_MASTER, "m h x h 1"), "m"),
            None
        );
    }

    #[test]
    fn rounds_ask_the_sentinels_in_turn_and_skip_those_in_backoff() {
        let mut s = Sentinels {
            nodes: vec![4, 5, 6],
            ..Sentinels::default()
        };
        let asked: Vec<_> = (0..4).filter_map(|_| s.next_to_ask(|_| false)).collect();
        assert_eq!(asked, [4, 5, 6, 4]);
        // 5 is in backoff: skipped, and the turn goes on after the one asked.
        assert_eq!(s.next_to_ask(|n| n == 5), Some(6));
        assert_eq!(s.next_to_ask(|n| n == 5), Some(4));
        // Every one in backoff: the next in turn all the same.
        assert_eq!(s.next_to_ask(|_| true), Some(5));
        assert_eq!(Sentinels::default().next_to_ask(|_| false), None);
    }

    #[test]
    fn a_refused_subscription_waits_longer_each_time_up_to_a_bound() {
        let now = crate::testing::start();
        let interval = Duration::from_secs(5);
        let mut s = Sentinels::default();
        assert!(s.may_subscribe(now));
        let mut waits = Vec::new();
        for _ in 0..9 {
            s.subscriber_lost(now, false, interval);
            waits.push(s.subscribe_after.unwrap() - now);
        }
        let secs: Vec<u64> = waits.iter().map(Duration::as_secs).collect();
        assert_eq!(secs, [5, 10, 20, 40, 80, 160, 320, 320, 320]);
        assert!(!s.may_subscribe(now + Duration::from_secs(319)));
        assert!(s.may_subscribe(now + Duration::from_secs(320)));
        // A subscription that had been answered (a sentinel restarted) is opened again at once.
        s.subscriber_lost(now, true, interval);
        assert!(s.may_subscribe(now));
        s.subscriber_lost(now, false, interval);
        assert_eq!(s.subscribe_after, Some(now + interval));
    }
}
