//! The simulated cluster's side of the wire: connections, RESP2 framing, and each command as
//! a node runs it (routing rules, `ASK`/`MOVED`/`TRYAGAIN`, scripts, the faults).

use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use redis_protocol::resp2::types::{OwnedFrame, Resp2Frame};

use crate::addr::NodeAddr;
use crate::error::ServerError;
use crate::keys::slot;
use crate::session::ConnId;
use crate::value::{Frame, Value};

use super::cluster::{Received, SimCluster, SimConn, SimEvent};
use super::faults::{ConnectMode, Demotion, RuleAction};

impl SimCluster {
    /// The session dials `dial` for connection `conn`.
    pub fn connect(&mut self, now: Instant, conn: ConnId, dial: &NodeAddr) {
        let mode = self
            .nodes
            .get(dial)
            .map_or(ConnectMode::Refuse, |n| n.connect);
        match mode {
            ConnectMode::Accept => {
                self.conns.insert(
                    conn,
                    SimConn {
                        node: dial.clone(),
                        inbox: BytesMut::new(),
                        authed: false,
                        asking: false,
                        stalled: false,
                    },
                );
                self.events.push((now, SimEvent::Connected(conn)));
            }
            ConnectMode::Refuse => self.events.push((
                now,
                SimEvent::ConnectFailed(conn, "connection refused".into()),
            )),
            ConnectMode::Hang => {}
        }
    }

    /// The session wrote `bytes` on `conn`.
    pub fn receive(&mut self, now: Instant, conn: ConnId, bytes: &[u8]) {
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        c.inbox.extend_from_slice(bytes);
        self.process(now, conn);
    }

    /// The session closed `conn`: whatever the node had not processed is lost.
    pub fn close(&mut self, conn: ConnId) {
        self.conns.remove(&conn);
    }

    pub(super) fn close_from_node(&mut self, now: Instant, conn: ConnId, reason: &str) {
        if let Some(c) = self.conns.remove(&conn) {
            let at = now + self.latency(&c.node);
            self.events
                .push((at, SimEvent::Closed(conn, reason.to_owned())));
        }
    }

    pub(super) fn latency(&self, node: &NodeAddr) -> Duration {
        self.nodes.get(node).map_or(Duration::ZERO, |n| n.latency)
    }

    /// Runs every complete command of the connection's inbox, unless the node or the
    /// connection is stalled.
    pub(super) fn process(&mut self, now: Instant, conn: ConnId) {
        let mut out = BytesMut::new();
        while let Some(c) = self.conns.get_mut(&conn) {
            let node_addr = c.node.clone();
            if c.stalled || self.nodes.get(&node_addr).is_none_or(|n| n.stalled) {
                break;
            }
            let (frame, used) = match redis_protocol::resp2::decode::decode(&c.inbox) {
                Ok(Some(decoded)) => decoded,
                Ok(None) => break,
                Err(e) => {
                    encode_reply(
                        &Err(ServerError::new(format!("ERR Protocol error: {e}"))),
                        &mut out,
                    );
                    self.flush(now, conn, &node_addr, &mut out);
                    self.close_from_node(now, conn, "protocol error");
                    return;
                }
            };
            let _ = c.inbox.split_to(used);
            let Some(args) = command_args(frame) else {
                encode_reply(
                    &Err(ServerError::new(
                        "ERR Protocol error: expected an array of bulk strings",
                    )),
                    &mut out,
                );
                continue;
            };
            self.received.push(Received {
                at: now,
                conn,
                node: node_addr.clone(),
                args: args.clone(),
            });
            let name = args
                .first()
                .map(|n| String::from_utf8_lossy(n).to_ascii_uppercase())
                .unwrap_or_default();
            match self.rule_for(&node_addr, &name, now) {
                None => {
                    let reply = self.execute(conn, &node_addr, &args);
                    encode_reply(&reply, &mut out);
                }
                Some(RuleAction::Error(text)) => {
                    self.reset_asking(conn, &name);
                    encode_reply(&Err(ServerError::new(text)), &mut out);
                }
                Some(RuleAction::Raw(bytes)) => {
                    self.reset_asking(conn, &name);
                    out.extend_from_slice(&bytes);
                }
                Some(RuleAction::Drop { applied }) => {
                    if applied {
                        let _ = self.execute(conn, &node_addr, &args);
                    }
                    self.flush(now, conn, &node_addr, &mut out);
                    self.close_from_node(now, conn, "connection reset by peer");
                    return;
                }
                Some(RuleAction::Stall) => {
                    if let Some(c) = self.conns.get_mut(&conn) {
                        c.stalled = true;
                    }
                }
            }
        }
        let node = self.conns.get(&conn).map(|c| c.node.clone());
        if let Some(node) = node {
            self.flush(now, conn, &node, &mut out);
        }
    }

    /// The action of the first rule that matches a command, counting it as used once.
    fn rule_for(&mut self, node: &NodeAddr, name: &str, now: Instant) -> Option<RuleAction> {
        let rule = self.rules.iter_mut().find(|r| r.matches(node, name, now))?;
        if let Some(t) = rule.times.as_mut() {
            *t -= 1;
        }
        Some(rule.action.clone())
    }

    pub(super) fn flush(
        &mut self,
        now: Instant,
        conn: ConnId,
        node: &NodeAddr,
        out: &mut BytesMut,
    ) {
        if !out.is_empty() {
            let at = now + self.latency(node);
            self.events
                .push((at, SimEvent::Read(conn, out.split().freeze())));
        }
    }

    pub(super) fn reset_asking(&mut self, conn: ConnId, name: &str) {
        if name != "ASKING" {
            if let Some(c) = self.conns.get_mut(&conn) {
                c.asking = false;
            }
        }
    }

    // --- commands ---------------------------------------------------------------------------

    pub(super) fn execute(&mut self, conn: ConnId, node: &NodeAddr, args: &[Bytes]) -> Frame {
        let name = args
            .first()
            .map(|n| String::from_utf8_lossy(n).to_ascii_uppercase())
            .unwrap_or_default();
        let Some(c) = self.conns.get_mut(&conn) else {
            return Err(ServerError::new("ERR connection gone"));
        };
        // ASKING is good for the one command after it.
        let asking = std::mem::replace(&mut c.asking, name == "ASKING");
        if name == "AUTH" {
            return self.auth(conn, &args[1..]);
        }
        if self.password.is_some() && !self.conns.get(&conn).is_some_and(|c| c.authed) {
            return Err(ServerError::new("NOAUTH Authentication required."));
        }
        match name.as_str() {
            "PING" => return Ok(Value::Status(Bytes::from_static(b"PONG"))),
            "ASKING" => return Ok(ok()),
            // Every replica of the shard acknowledges at once.
            "WAIT" => {
                let replicas = self.shard_of(node).map_or(0, |s| self.replicas(s).len());
                return Ok(Value::Int(replicas as i64));
            }
            "CLUSTER" => return self.cluster_command(node, &args[1..]),
            "SCRIPT" => return self.script_command(node, &args[1..]),
            _ => {}
        }
        let Some((keys, write)) = keys_of(&name, args) else {
            return Err(ServerError::new(format!(
                "ERR unknown command '{name}', or wrong number of arguments"
            )));
        };
        let shard = self.route(node, &keys, write, asking)?;
        self.run(node, shard, &name, args, &keys)
    }

    pub(super) fn auth(&mut self, conn: ConnId, args: &[Bytes]) -> Frame {
        let Some((user, password)) = &self.password else {
            return Err(ServerError::new(
                "ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?",
            ));
        };
        let (given_user, given_password) = match args {
            [p] => (None, p),
            [u, p] => (Some(u), p),
            _ => {
                return Err(ServerError::new(
                    "ERR wrong number of arguments for 'auth' command",
                ))
            }
        };
        let user_ok = match (user, given_user) {
            (None, None) => true,
            (None, Some(u)) => u.as_ref() == b"default",
            (Some(want), Some(u)) => want.as_bytes() == u.as_ref(),
            (Some(_), None) => false,
        };
        if user_ok && password.as_bytes() == given_password.as_ref() {
            if let Some(c) = self.conns.get_mut(&conn) {
                c.authed = true;
            }
            Ok(ok())
        } else {
            Err(ServerError::new(
                "WRONGPASS invalid username-password pair or user is disabled.",
            ))
        }
    }

    pub(super) fn cluster_command(&self, node: &NodeAddr, args: &[Bytes]) -> Frame {
        if !self.cluster_mode {
            return Err(ServerError::new(
                "ERR This instance has cluster support disabled",
            ));
        }
        if !args
            .first()
            .is_some_and(|a| a.eq_ignore_ascii_case(b"SLOTS"))
        {
            return Err(ServerError::new("ERR unknown CLUSTER subcommand"));
        }
        if let Some(view) = self.nodes.get(node).and_then(|n| n.view.clone()) {
            return view;
        }
        let mut entries = Vec::new();
        let mut start = 0usize;
        while start < self.slots.len() {
            let shard = self.slots[start];
            let mut end = start;
            while end + 1 < self.slots.len() && self.slots[end + 1] == shard {
                end += 1;
            }
            let mut entry = vec![Value::Int(start as i64), Value::Int(end as i64)];
            let s = &self.shards[shard];
            for addr in std::iter::once(&s.master).chain(&s.replicas) {
                let announced = self.nodes.get(addr).map_or(addr, |n| &n.announced);
                entry.push(Value::Array(vec![
                    Value::from(announced.host.as_str()),
                    Value::Int(i64::from(announced.port)),
                    Value::from(format!("node-{}", addr.port).as_str()),
                ]));
            }
            entries.push(Value::Array(entry));
            start = end + 1;
        }
        Ok(Value::Array(entries))
    }

    pub(super) fn script_command(&mut self, node: &NodeAddr, args: &[Bytes]) -> Frame {
        let sub = args
            .first()
            .map(|a| a.to_ascii_uppercase())
            .unwrap_or_default();
        let Some(n) = self.nodes.get_mut(node) else {
            return Err(ServerError::new("ERR no such node"));
        };
        match (sub.as_slice(), args.get(1)) {
            (b"FLUSH", _) => {
                n.scripts.clear();
                Ok(ok())
            }
            (b"LOAD", Some(source)) => {
                let sha = sha1_hex(source);
                n.scripts.insert(sha.clone());
                Ok(Value::Bulk(Bytes::from(sha)))
            }
            _ => Err(ServerError::new("ERR unknown SCRIPT subcommand")),
        }
    }

    /// Which shard's data serves a keyed command on `node`, or the cluster error it gets.
    pub(super) fn route(
        &self,
        node: &NodeAddr,
        keys: &[Bytes],
        write: bool,
        asking: bool,
    ) -> Result<usize, ServerError> {
        let Some(n) = self.nodes.get(node) else {
            return Err(ServerError::new("ERR no such node"));
        };
        if !self.cluster_mode {
            return Ok(n.shard);
        }
        let Some(first) = keys.first() else {
            return Ok(n.shard);
        };
        let slot_no = slot(first);
        if keys.iter().any(|k| slot(k) != slot_no) {
            return Err(ServerError::new(
                "CROSSSLOT Keys in request don't hash to the same slot",
            ));
        }
        let owner = self.slots[usize::from(slot_no)];
        let is_master = self.shards[n.shard].master == *node;
        // A stale demoted master has not heard of its demotion and still serves.
        let owns = n.shard == owner && (is_master || n.demotion == Some(Demotion::Stale));
        if owns {
            if let Some(&target) = self.migrating.get(&slot_no) {
                let data = &self.shards[n.shard].data;
                let present = keys.iter().filter(|k| data.contains_key(*k)).count();
                if present == 0 {
                    let to = self.announced(&self.shards[target].master);
                    return Err(ServerError::new(format!("ASK {slot_no} {to}")));
                }
                if present < keys.len() {
                    return Err(tryagain());
                }
            }
            return Ok(n.shard);
        }
        let importing = self.migrating.get(&slot_no) == Some(&n.shard);
        if importing && is_master && asking {
            let data = &self.shards[n.shard].data;
            if keys.len() > 1 && keys.iter().any(|k| !data.contains_key(k)) {
                return Err(tryagain());
            }
            return Ok(n.shard);
        }
        if n.demotion == Some(Demotion::ReadOnly) && n.shard == owner {
            if write {
                return Err(ServerError::new(
                    "READONLY You can't write against a read only replica.",
                ));
            }
            return Ok(n.shard);
        }
        let to = self.announced(&self.shards[owner].master);
        Err(ServerError::new(format!("MOVED {slot_no} {to}")))
    }

    pub(super) fn announced(&self, addr: &NodeAddr) -> NodeAddr {
        self.nodes
            .get(addr)
            .map_or_else(|| addr.clone(), |n| n.announced.clone())
    }

    pub(super) fn run(
        &mut self,
        node: &NodeAddr,
        shard: usize,
        name: &str,
        args: &[Bytes],
        keys: &[Bytes],
    ) -> Frame {
        let data = &mut self.shards[shard].data;
        match name {
            "GET" => Ok(data.get(&args[1]).cloned().map_or(Value::Nil, Value::Bulk)),
            "MGET" => Ok(Value::Array(
                keys.iter()
                    .map(|k| data.get(k).cloned().map_or(Value::Nil, Value::Bulk))
                    .collect(),
            )),
            "SET" => {
                data.insert(args[1].clone(), args[2].clone());
                Ok(ok())
            }
            "INCR" => {
                let current = match data.get(&args[1]) {
                    None => 0,
                    Some(v) => match std::str::from_utf8(v)
                        .ok()
                        .and_then(|s| s.parse::<i64>().ok())
                    {
                        Some(i) => i,
                        None => {
                            return Err(ServerError::new(
                                "ERR value is not an integer or out of range",
                            ))
                        }
                    },
                };
                let next = current.wrapping_add(1);
                data.insert(args[1].clone(), Bytes::from(next.to_string()));
                Ok(Value::Int(next))
            }
            "DEL" => Ok(Value::Int(
                keys.iter().filter(|k| data.remove(*k).is_some()).count() as i64,
            )),
            "EVALSHA" | "EVAL" => {
                let sha = if name == "EVAL" {
                    let sha = sha1_hex(&args[1]);
                    if let Some(n) = self.nodes.get_mut(node) {
                        n.scripts.insert(sha.clone());
                    }
                    sha
                } else {
                    let sha = String::from_utf8_lossy(&args[1]).to_ascii_lowercase();
                    if !self
                        .nodes
                        .get(node)
                        .is_some_and(|n| n.scripts.contains(&sha))
                    {
                        return Err(ServerError::new(
                            "NOSCRIPT No matching script. Please use EVAL.",
                        ));
                    }
                    sha
                };
                let Some(body) = self.scripts.get(&sha) else {
                    return Err(ServerError::new(
                        "ERR Error compiling script: the simulator has no body for it",
                    ));
                };
                let script_args = &args[3 + keys.len()..];
                body(&mut self.shards[shard].data, keys, script_args)
            }
            _ => Err(ServerError::new(format!("ERR unknown command '{name}'"))),
        }
    }
}

pub(super) fn ok() -> Value {
    Value::Status(Bytes::from_static(b"OK"))
}

pub(super) fn tryagain() -> ServerError {
    ServerError::new("TRYAGAIN Multiple keys request during rehashing of slot")
}

pub(super) fn sha1_hex(source: &[u8]) -> String {
    sha1_smol::Sha1::from(source).digest().to_string()
}

/// The declared keys of a keyed command and whether it writes; `None` for an unknown command
/// or a wrong arity.
pub(super) fn keys_of(name: &str, args: &[Bytes]) -> Option<(Vec<Bytes>, bool)> {
    let n = args.len();
    match name {
        "GET" if n == 2 => Some((vec![args[1].clone()], false)),
        "INCR" if n == 2 => Some((vec![args[1].clone()], true)),
        "SET" if n >= 3 => Some((vec![args[1].clone()], true)),
        "DEL" if n >= 2 => Some((args[1..].to_vec(), true)),
        "MGET" if n >= 2 => Some((args[1..].to_vec(), false)),
        "EVAL" | "EVALSHA" if n >= 3 => {
            let numkeys: usize = std::str::from_utf8(&args[2]).ok()?.parse().ok()?;
            let keys = args.get(3..3 + numkeys)?.to_vec();
            Some((keys, true))
        }
        _ => None,
    }
}

pub(super) fn command_args(frame: OwnedFrame) -> Option<Vec<Bytes>> {
    let OwnedFrame::Array(items) = frame else {
        return None;
    };
    items
        .into_iter()
        .map(|item| match item {
            OwnedFrame::BulkString(b) => Some(Bytes::from(b)),
            _ => None,
        })
        .collect::<Option<Vec<_>>>()
        .filter(|args| !args.is_empty())
}

pub(super) fn owned(value: &Value) -> OwnedFrame {
    match value {
        Value::Nil => OwnedFrame::Null,
        Value::Int(i) => OwnedFrame::Integer(*i),
        Value::Bulk(b) => OwnedFrame::BulkString(b.to_vec()),
        Value::Status(b) => OwnedFrame::SimpleString(b.to_vec()),
        Value::Array(items) => OwnedFrame::Array(items.iter().map(owned).collect()),
        Value::Error(e) => OwnedFrame::Error(e.text().to_owned()),
    }
}

/// Appends the RESP2 encoding of a reply.
pub fn encode_reply(reply: &Frame, out: &mut BytesMut) {
    let frame = match reply {
        Ok(value) => owned(value),
        Err(e) => OwnedFrame::Error(e.text().to_owned()),
    };
    let mut buf = vec![0u8; frame.encode_len(false)];
    // The buffer has exactly the frame's length, which is all `encode` asks for.
    if let Ok(len) = redis_protocol::resp2::encode::encode(&mut buf, &frame, false) {
        out.extend_from_slice(&buf[..len]);
    }
}
