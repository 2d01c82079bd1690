//! Redis Sentinel: asking the sentinels which node is the master, checking the answer with
//! `ROLE`, and following a failover.
//!
//! ```text
//!            round (start, READONLY, lost connection, +switch-master, every refresh_interval)
//!                │
//!                ▼
//!   SENTINEL get-master-addr-by-name <name> ──► one sentinel, the next in turn
//!                │ host port                          │ refused, nil, error
//!                ▼                                    ▼
//!   same master: nothing            round failed: back off, next sentinel next round;
//!   another: switch ─────────┐      requests waiting for a first master count an attempt
//!                            ▼      and end as SentinelDiscovery when they run out
//!   old master's connection closed (its sent writes end as ReplyLost, never as success)
//!   waiting requests go to the new master, whose connection opens with AUTH + ROLE:
//!   ROLE says master ──► ready;   anything else ──► refused, retried, sentinels asked again
//! ```
//!
//! A separate connection to a sentinel that answered is subscribed to `+switch-master`, so a
//! failover the sentinels complete is followed at once rather than at the next question.

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

/// How long after a `+switch-master` an answer naming the master it replaced is taken for a
/// sentinel that has not heard of the failover yet. The replaced master stays a master until
/// the sentinels convert it, so a client that went back to it would have its writes
/// acknowledged and then lost (likely the 99 lost in one CI run of the chaos suite; the
/// session test `a_lagging_sentinel_does_not_take_the_client_back_to_the_replaced_master`
/// shows the path). Sentinels learn a failover from the leader's hello messages, sent every
/// 2 s; the window is several of them. Should the sentinels really fail back within it and
/// the message be missed, the master in use says so (`READONLY`, or `ROLE` on a new
/// connection) and the window ends ([`Session::master_in_doubt`]).
const STALE_AFTER_SWITCH: Duration = Duration::from_secs(10);

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
    /// The master the last `+switch-master` replaced, and when: answers naming it are stale
    /// until [`STALE_AFTER_SWITCH`] has passed.
    replaced: Option<(NodeId, Instant)>,
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

    /// `conn` is gone: if it was the subscriber, there is none now.
    pub(super) fn forget_conn(&mut self, conn: ConnId) {
        if self.subscriber == Some(conn) {
            self.subscriber = None;
        }
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

/// The address in a reply to `SENTINEL get-master-addr-by-name`: `[host, port]`, or nil when
/// the sentinel monitors no master of that name.
pub(super) fn parse_master_addr(frame: Frame, master: &str) -> Result<NodeAddr, Error> {
    let unexpected = |detail: String| Error::UnexpectedReply { detail };
    match frame {
        Err(e) => Err(Error::Server(e)),
        Ok(Value::Nil) => Err(unexpected(format!(
            "the sentinel monitors no master named {master:?}"
        ))),
        Ok(Value::Array(items)) => match items.as_slice() {
            [Value::Bulk(host), Value::Bulk(port)] => {
                let host = std::str::from_utf8(host).ok().filter(|h| !h.is_empty());
                let port = std::str::from_utf8(port).ok().and_then(|p| p.parse().ok());
                match (host, port) {
                    (Some(host), Some(port)) => Ok(NodeAddr::new(host, port)),
                    _ => Err(unexpected(format!(
                        "SENTINEL get-master-addr-by-name answered {items:?}, not a host and port"
                    ))),
                }
            }
            _ => Err(unexpected(format!(
                "SENTINEL get-master-addr-by-name answered {items:?}, not a host and port"
            ))),
        },
        Ok(other) => Err(unexpected(format!(
            "SENTINEL get-master-addr-by-name answered {other:?}, not a host and port"
        ))),
    }
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

/// The new master in a `+switch-master` message for `master`
/// (`message +switch-master "<name> <old host> <old port> <new host> <new port>"`); `None`
/// for anything else (another master's failover, the subscription's confirmation).
pub(super) fn parse_switch_master(value: &Value, master: &str) -> Option<NodeAddr> {
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
        [name, _, _, host, port] if *name == master => {
            Some(NodeAddr::new(*host, port.parse().ok()?))
        }
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
        let named = answer.and_then(|frame| parse_master_addr(frame, &master_name));
        match named {
            Ok(addr) => {
                if self.stale(now, &addr) {
                    tracing::warn!(
                        sentinel = %self.nodes[sentinel],
                        named = %addr,
                        "a sentinel still names the master +switch-master replaced; kept the new one"
                    );
                } else {
                    self.tally.count(super::Event::RefreshSucceeded);
                    self.refresh.failures = 0;
                    self.refresh.not_before = None;
                    self.follow_master(now, addr);
                    if self.sentinels.subscriber.is_none() {
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
                decoder: self.reply_decoder(),
                in_flight: Default::default(),
                outbox: Vec::new(),
                check_at: None,
                subscriber: true,
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

    /// A message pushed on the `+switch-master` subscription.
    pub(super) fn on_sentinel_message(&mut self, now: Instant, value: &Value) {
        let Some(s) = self.sentinel_endpoints() else {
            return;
        };
        if let Some(addr) = parse_switch_master(value, &s.master_name) {
            tracing::info!(master = %addr, "+switch-master");
            let before = self.sentinels.master;
            self.follow_master(now, addr);
            // A message naming the master in use again changes nothing, the stale window
            // included.
            if let Some(old) = before.filter(|&old| Some(old) != self.sentinels.master) {
                self.sentinels.replaced = Some((old, now));
            }
        }
    }

    /// `node` refused a request in a way that calls for the map again (`READONLY`), or its
    /// `ROLE` says replica. When it is the sentinels' master in use, they may have failed back
    /// to the master the last `+switch-master` replaced: answers naming it are believed again.
    pub(super) fn master_in_doubt(&mut self, node: NodeId) {
        if self.sentinels.master == Some(node) {
            self.sentinels.replaced = None;
        }
    }

    /// Whether `addr` is the master the last `+switch-master` replaced, named within
    /// [`STALE_AFTER_SWITCH`] of it: the answer of a sentinel that has not heard yet.
    fn stale(&self, now: Instant, addr: &NodeAddr) -> bool {
        self.sentinels.replaced.is_some_and(|(old, at)| {
            self.nodes[old] == *addr
                && after(at, STALE_AFTER_SWITCH).is_none_or(|until| now < until)
        })
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

    #[test]
    fn master_addresses_and_what_is_not_one() {
        let addr = parse_master_addr(Ok(Value::Array(vec![bulk("10.0.0.2"), bulk("6380")])), "m");
        assert_eq!(addr.unwrap(), NodeAddr::new("10.0.0.2", 6380));
        type Row = (&'static str, Frame, &'static str);
        let rows: Vec<Row> = vec![
            ("unknown name", Ok(Value::Nil), "no master named \"m\""),
            (
                "an error reply",
                Err(ServerError::new("ERR unknown command")),
                "unknown command",
            ),
            (
                "a bad port",
                Ok(Value::Array(vec![bulk("h"), bulk("port")])),
                "not a host and port",
            ),
            (
                "an empty host",
                Ok(Value::Array(vec![bulk(""), bulk("1")])),
                "not a host and port",
            ),
            (
                "one item",
                Ok(Value::Array(vec![bulk("h")])),
                "not a host and port",
            ),
            ("an integer", Ok(Value::Int(3)), "not a host and port"),
        ];
        for (what, frame, says) in rows {
            let e = parse_master_addr(frame, "m").unwrap_err().to_string();
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
            Some(NodeAddr::new("127.0.0.1", 7001))
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
}
