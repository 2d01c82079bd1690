//! A pure fake Redis: one node, or a cluster of shards (a master and its replicas) over the
//! 16384 slots, speaking RESP2 bytes, with fault injection.
//!
//! It is exact where the session's decisions depend on it and small everywhere else:
//!
//! - commands: `AUTH`, `ASKING`, `PING`, `CLUSTER SLOTS`, `GET`, `SET`, `INCR`, `DEL`, `MGET`,
//!   `EVALSHA`, `EVAL`, `SCRIPT FLUSH`, `SCRIPT LOAD`; scripts run as Rust closures registered
//!   under their SHA1 ([`SimCluster::register_script`]);
//! - cluster rules: `CROSSSLOT`; `MOVED` from a node that does not own the slot; during a staged
//!   migration the source serves keys it still has, answers `ASK` for missing ones and
//!   `TRYAGAIN` for a multi-key call split between source and target; the target serves only
//!   after `ASKING`, else `MOVED`;
//! - data lives per shard, so a failover keeps it (replication is synchronous here: the
//!   asynchronous loss of real failovers is the integration suites' business); a promoted
//!   replica starts with an empty script cache, as a real one does;
//! - every node answers `CLUSTER SLOTS` with the cluster's current view.
//!
//! Faults: [`Rule`]s answer matching commands with an error, drop the connection after the
//! command (applied or not) or stall the connection; nodes can refuse or hang connects, stall,
//! lag, be failed over ([`Demotion`]), lose their scripts; slots move at once or in stages.
//!
//! The simulator performs no I/O and reads no clock: every input takes `now`, and what the
//! session must see comes out of [`SimCluster::take_events`] stamped with its delivery time.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use redis_protocol::resp2::types::{OwnedFrame, Resp2Frame};

use crate::addr::NodeAddr;
use crate::error::ServerError;
use crate::keys::{slot, SLOT_COUNT};
use crate::script::Script;
use crate::session::ConnId;
use crate::value::{Frame, Value};

/// The key space of one shard.
pub type Data = BTreeMap<Bytes, Bytes>;

/// A script body: runs over the shard's data with the call's `KEYS` and `ARGV`.
pub type ScriptFn = Box<dyn Fn(&mut Data, &[Bytes], &[Bytes]) -> Frame>;

/// How a node takes a new connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConnectMode {
    /// Connects at once.
    Accept,
    /// Fails at once, as a closed port does.
    Refuse,
    /// Never answers, as a dropped SYN does: only the session's connect timeout ends it.
    Hang,
}

/// What becomes of a master that is failed over.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Demotion {
    /// It becomes a replica and redirects with `MOVED`, as a healthy demoted master does.
    Moved,
    /// It is dead: its connections drop and new ones are refused.
    Down,
    /// It has not heard: it keeps serving its old slots, and nothing tells the client but a
    /// topology refresh.
    Stale,
    /// It becomes a replica that serves reads and answers writes with `READONLY`.
    ReadOnly,
}

/// What a [`Rule`] does to a command it matches.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RuleAction {
    /// Answer with this error text (`MOVED 1 a:1`, `CLUSTERDOWN The cluster is down`, ...).
    Error(String),
    /// Close the connection once the command arrived; `applied` says whether it ran first.
    /// Later commands in the same write are lost.
    Drop {
        /// Whether the command ran before the connection dropped.
        applied: bool,
    },
    /// Never answer this command or anything after it on the connection.
    Stall,
    /// Answer with these raw bytes, which need not be valid RESP.
    Raw(Bytes),
}

/// A fault: an action on commands that match, for a number of times or until a time.
#[derive(Clone, Debug)]
pub struct Rule {
    node: Option<NodeAddr>,
    commands: Vec<String>,
    times: Option<u32>,
    until: Option<Instant>,
    action: RuleAction,
}

impl Rule {
    /// A rule that answers every matching command with `text` as an error.
    pub fn error(text: impl Into<String>) -> Self {
        Rule::new(RuleAction::Error(text.into()))
    }

    /// A rule that drops the connection after a matching command; `applied`: it ran first.
    pub fn drop_connection(applied: bool) -> Self {
        Rule::new(RuleAction::Drop { applied })
    }

    /// A rule that stalls the connection at a matching command.
    pub fn stall() -> Self {
        Rule::new(RuleAction::Stall)
    }

    /// A rule that answers a matching command with raw bytes.
    pub fn raw(bytes: impl Into<Bytes>) -> Self {
        Rule::new(RuleAction::Raw(bytes.into()))
    }

    fn new(action: RuleAction) -> Self {
        Rule {
            node: None,
            commands: Vec::new(),
            times: None,
            until: None,
            action,
        }
    }

    /// Only on this node (by its real address).
    pub fn on(mut self, node: &NodeAddr) -> Self {
        self.node = Some(node.clone());
        self
    }

    /// Only for these command names (`GET`, `EVALSHA`, `CLUSTER`, ...); all when never called.
    pub fn commands(mut self, names: &[&str]) -> Self {
        self.commands
            .extend(names.iter().map(|n| n.to_ascii_uppercase()));
        self
    }

    /// Only the next `n` matching commands.
    pub fn times(mut self, n: u32) -> Self {
        self.times = Some(n);
        self
    }

    /// Only before `at`.
    pub fn until(mut self, at: Instant) -> Self {
        self.until = Some(at);
        self
    }

    fn matches(&self, node: &NodeAddr, name: &str, now: Instant) -> bool {
        self.times != Some(0)
            && self.until.is_none_or(|t| now < t)
            && self.node.as_ref().is_none_or(|n| n == node)
            && (self.commands.is_empty() || self.commands.iter().any(|c| c == name))
    }
}

/// What the simulator tells the session, through the harness.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SimEvent {
    /// A connect succeeded.
    Connected(ConnId),
    /// A connect failed.
    ConnectFailed(ConnId, String),
    /// Reply bytes.
    Read(ConnId, Bytes),
    /// The node closed the connection.
    Closed(ConnId, String),
}

/// A command as a node received it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Received {
    /// When.
    pub at: Instant,
    /// On which connection.
    pub conn: ConnId,
    /// The node (real address).
    pub node: NodeAddr,
    /// The argument vector.
    pub args: Vec<Bytes>,
}

impl Received {
    /// The command rendered with its arguments separated by spaces, bytes escaped; an
    /// `EVAL` source is shown as `<src>`.
    pub fn render(&self) -> String {
        render_args(&self.args)
    }

    /// The command name, uppercase.
    pub fn name(&self) -> String {
        self.args
            .first()
            .map(|n| String::from_utf8_lossy(n).to_ascii_uppercase())
            .unwrap_or_default()
    }
}

/// Renders a command as `NAME arg arg`, bytes escaped, an `EVAL` source as `<src>`.
pub fn render_args(args: &[Bytes]) -> String {
    let eval = args
        .first()
        .is_some_and(|n| n.eq_ignore_ascii_case(b"EVAL"));
    args.iter()
        .enumerate()
        .map(|(i, a)| {
            if eval && i == 1 {
                "<src>".to_owned()
            } else {
                a.escape_ascii().to_string()
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

struct Shard {
    master: NodeAddr,
    replicas: Vec<NodeAddr>,
    data: Data,
}

struct Node {
    announced: NodeAddr,
    shard: usize,
    connect: ConnectMode,
    stalled: bool,
    latency: Duration,
    scripts: BTreeSet<String>,
    demotion: Option<Demotion>,
}

struct SimConn {
    node: NodeAddr,
    inbox: BytesMut,
    authed: bool,
    asking: bool,
    stalled: bool,
}

/// The simulated deployment. See the module docs.
pub struct SimCluster {
    cluster_mode: bool,
    nodes: BTreeMap<NodeAddr, Node>,
    shards: Vec<Shard>,
    slots: Vec<usize>,
    /// Slot → the shard importing it.
    migrating: BTreeMap<u16, usize>,
    password: Option<(Option<String>, String)>,
    scripts: BTreeMap<String, ScriptFn>,
    rules: Vec<Rule>,
    conns: BTreeMap<ConnId, SimConn>,
    events: Vec<(Instant, SimEvent)>,
    received: Vec<Received>,
}

impl fmt::Debug for SimCluster {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SimCluster")
            .field("cluster_mode", &self.cluster_mode)
            .field("nodes", &self.nodes.keys().collect::<Vec<_>>())
            .field("conns", &self.conns.len())
            .finish_non_exhaustive()
    }
}

/// The host every simulated node listens on.
pub const SIM_HOST: &str = "127.0.0.1";

/// The port of the first simulated node; the others follow.
pub const FIRST_PORT: u16 = 7000;

impl SimCluster {
    /// One node without cluster support at `127.0.0.1:7000`.
    pub fn single() -> Self {
        let mut sim = SimCluster::empty(false);
        sim.add_shard();
        sim.slots = vec![0; usize::from(SLOT_COUNT)];
        sim
    }

    /// A cluster of `masters` shards with `replicas` replicas each, slots split evenly in port
    /// order. Masters listen on ports 7000, 7001, ...; then the replicas, shard by shard.
    pub fn cluster(masters: usize, replicas: usize) -> Self {
        let mut sim = SimCluster::empty(true);
        let masters = masters.max(1);
        for _ in 0..masters {
            sim.add_shard();
        }
        for shard in 0..masters {
            for _ in 0..replicas {
                let addr = sim.next_addr();
                sim.shards[shard].replicas.push(addr.clone());
                sim.add_node(addr, shard);
            }
        }
        let per = usize::from(SLOT_COUNT).div_ceil(masters);
        sim.slots = (0..usize::from(SLOT_COUNT)).map(|s| s / per).collect();
        sim
    }

    fn empty(cluster_mode: bool) -> Self {
        SimCluster {
            cluster_mode,
            nodes: BTreeMap::new(),
            shards: Vec::new(),
            slots: Vec::new(),
            migrating: BTreeMap::new(),
            password: None,
            scripts: BTreeMap::new(),
            rules: Vec::new(),
            conns: BTreeMap::new(),
            events: Vec::new(),
            received: Vec::new(),
        }
    }

    fn next_addr(&self) -> NodeAddr {
        let port = FIRST_PORT + u16::try_from(self.nodes.len()).unwrap_or(u16::MAX - FIRST_PORT);
        NodeAddr::new(SIM_HOST, port)
    }

    fn add_shard(&mut self) {
        let index = self.shards.len();
        let addr = self.next_addr();
        self.shards.push(Shard {
            master: addr.clone(),
            replicas: Vec::new(),
            data: Data::new(),
        });
        self.add_node(addr, index);
    }

    fn add_node(&mut self, addr: NodeAddr, shard: usize) {
        self.nodes.insert(
            addr.clone(),
            Node {
                announced: addr,
                shard,
                connect: ConnectMode::Accept,
                stalled: false,
                latency: Duration::ZERO,
                scripts: BTreeSet::new(),
                demotion: None,
            },
        );
    }

    // --- looking ----------------------------------------------------------------------------

    /// The master of shard `i` (real address).
    pub fn master(&self, shard: usize) -> NodeAddr {
        self.shards[shard].master.clone()
    }

    /// The replicas of shard `i`.
    pub fn replicas(&self, shard: usize) -> Vec<NodeAddr> {
        self.shards[shard].replicas.clone()
    }

    /// The master addresses, as root nodes for [`Config::cluster`](crate::session::Config).
    pub fn masters(&self) -> Vec<NodeAddr> {
        self.shards.iter().map(|s| s.master.clone()).collect()
    }

    /// The master that owns `slot` now (real address).
    pub fn owner(&self, slot: u16) -> NodeAddr {
        self.shards[self.slots[usize::from(slot)]].master.clone()
    }

    /// `count` key names (`key0`, `key1`, ...) whose slots `node` owns now, in order.
    pub fn keys_on(&self, node: &NodeAddr, count: usize) -> Vec<String> {
        (0..)
            .map(|i| format!("key{i}"))
            .filter(|k| &self.owner(slot(k.as_bytes())) == node)
            .take(count)
            .collect()
    }

    /// The shard of a node.
    pub fn shard_of(&self, node: &NodeAddr) -> Option<usize> {
        self.nodes.get(node).map(|n| n.shard)
    }

    /// A key's value, wherever its shard is.
    pub fn value(&self, key: &[u8]) -> Option<Bytes> {
        self.shards.iter().find_map(|s| s.data.get(key).cloned())
    }

    /// Stores a value in the shard that owns the key's slot now.
    pub fn set_value(&mut self, key: &[u8], value: impl Into<Bytes>) {
        let shard = self.slots[usize::from(slot(key))];
        self.shards[shard]
            .data
            .insert(Bytes::copy_from_slice(key), value.into());
    }

    /// Every command received, in order.
    pub fn received(&self) -> &[Received] {
        &self.received
    }

    /// The commands a node received, rendered (see [`Received::render`]).
    pub fn commands_on(&self, node: &NodeAddr) -> Vec<String> {
        self.received
            .iter()
            .filter(|r| &r.node == node)
            .map(Received::render)
            .collect()
    }

    /// The commands a node received, rendered, without topology queries (`CLUSTER ...`) and
    /// connection handshakes (`AUTH`, `PING`).
    pub fn data_commands_on(&self, node: &NodeAddr) -> Vec<String> {
        self.received
            .iter()
            .filter(|r| {
                &r.node == node && !matches!(r.name().as_str(), "CLUSTER" | "AUTH" | "PING")
            })
            .map(Received::render)
            .collect()
    }

    /// How many received commands render exactly as `command`, on every node.
    pub fn count(&self, command: &str) -> usize {
        self.received
            .iter()
            .filter(|r| r.render() == command)
            .count()
    }

    /// Open connections to a node.
    pub fn connections_to(&self, node: &NodeAddr) -> usize {
        self.conns.values().filter(|c| &c.node == node).count()
    }

    /// What must reach the session, each with its delivery time, in order.
    pub fn take_events(&mut self) -> Vec<(Instant, SimEvent)> {
        std::mem::take(&mut self.events)
    }

    // --- setting up and breaking ------------------------------------------------------------

    /// Requires `AUTH [user] password` on every connection.
    pub fn require_password(&mut self, user: Option<&str>, password: &str) {
        self.password = Some((user.map(str::to_owned), password.to_owned()));
    }

    /// Registers the body of a script; `EVAL` of its source or `EVALSHA` of its SHA1 runs it.
    pub fn register_script(
        &mut self,
        script: &Script,
        body: impl Fn(&mut Data, &[Bytes], &[Bytes]) -> Frame + 'static,
    ) {
        let sha = String::from_utf8_lossy(script.sha1()).into_owned();
        self.scripts.insert(sha, Box::new(body));
    }

    /// Loads a script into every node's cache, as `SCRIPT LOAD` on each would.
    pub fn load_script_everywhere(&mut self, script: &Script) {
        let sha = String::from_utf8_lossy(script.sha1()).into_owned();
        for node in self.nodes.values_mut() {
            node.scripts.insert(sha.clone());
        }
    }

    /// Empties the script cache of one node, or of all (`SCRIPT FLUSH`, a restart).
    pub fn flush_scripts(&mut self, node: Option<&NodeAddr>) {
        for (addr, n) in &mut self.nodes {
            if node.is_none_or(|x| x == addr) {
                n.scripts.clear();
            }
        }
    }

    /// Adds a fault; rules are tried in the order added, the first match wins.
    pub fn add_rule(&mut self, rule: Rule) {
        self.rules.push(rule);
    }

    /// Removes every rule.
    pub fn clear_rules(&mut self) {
        self.rules.clear();
    }

    /// How a node takes new connections.
    pub fn set_connect_mode(&mut self, node: &NodeAddr, mode: ConnectMode) {
        if let Some(n) = self.nodes.get_mut(node) {
            n.connect = mode;
        }
    }

    /// Replies from a node arrive this late.
    pub fn set_latency(&mut self, node: &NodeAddr, latency: Duration) {
        if let Some(n) = self.nodes.get_mut(node) {
            n.latency = latency;
        }
    }

    /// The address a node announces in `CLUSTER SLOTS` and redirects (its identity for the
    /// client); connects still use the real address.
    pub fn announce_as(&mut self, node: &NodeAddr, announced: NodeAddr) {
        if let Some(n) = self.nodes.get_mut(node) {
            n.announced = announced;
        }
    }

    /// The node takes bytes and never answers, until [`SimCluster::unstall`].
    pub fn stall(&mut self, node: &NodeAddr) {
        if let Some(n) = self.nodes.get_mut(node) {
            n.stalled = true;
        }
    }

    /// The connections open to `node`.
    fn conns_of(&self, node: &NodeAddr) -> Vec<ConnId> {
        self.conns
            .iter()
            .filter(|(_, c)| &c.node == node)
            .map(|(&id, _)| id)
            .collect()
    }

    /// The node answers again, first everything it took while stalled.
    pub fn unstall(&mut self, now: Instant, node: &NodeAddr) {
        if let Some(n) = self.nodes.get_mut(node) {
            n.stalled = false;
        }
        let conns = self.conns_of(node);
        for conn in conns {
            self.process(now, conn);
        }
    }

    /// The node closes every connection it has.
    pub fn drop_connections(&mut self, now: Instant, node: &NodeAddr, reason: &str) {
        let conns = self.conns_of(node);
        for conn in conns {
            self.close_from_node(now, conn, reason);
        }
    }

    /// Moves a slot to another master at once, keys included (a finished migration).
    pub fn move_slot(&mut self, slot_no: u16, to: &NodeAddr) {
        let Some(target) = self.shard_led_by(to) else {
            return;
        };
        let source = self.slots[usize::from(slot_no)];
        self.move_keys(source, target, |k| slot(k) == slot_no);
        self.slots[usize::from(slot_no)] = target;
        self.migrating.remove(&slot_no);
    }

    /// Starts a staged migration of a slot to another master: the source is `MIGRATING`, the
    /// target `IMPORTING`; keys move one by one with [`SimCluster::migrate_key`].
    pub fn begin_migration(&mut self, slot_no: u16, to: &NodeAddr) {
        if let Some(target) = self.shard_led_by(to) {
            self.migrating.insert(slot_no, target);
        }
    }

    /// Moves one key of a migrating slot to the target.
    pub fn migrate_key(&mut self, key: &[u8]) {
        let slot_no = slot(key);
        let Some(&target) = self.migrating.get(&slot_no) else {
            return;
        };
        let source = self.slots[usize::from(slot_no)];
        self.move_keys(source, target, |k| k == key);
    }

    /// Ends a staged migration: the remaining keys move and the target owns the slot.
    pub fn finish_migration(&mut self, slot_no: u16) {
        if let Some(target) = self.migrating.get(&slot_no).copied() {
            let to = self.shards[target].master.clone();
            self.move_slot(slot_no, &to);
        }
    }

    /// Promotes the first replica of `master`'s shard; the old master becomes what `demotion`
    /// says. The new master's script cache is empty.
    pub fn failover(&mut self, now: Instant, master: &NodeAddr, demotion: Demotion) {
        let Some(shard) = self.shard_led_by(master) else {
            return;
        };
        if self.shards[shard].replicas.is_empty() {
            return;
        }
        let promoted = self.shards[shard].replicas.remove(0);
        self.shards[shard].replicas.push(master.clone());
        self.shards[shard].master = promoted.clone();
        if let Some(n) = self.nodes.get_mut(&promoted) {
            n.scripts.clear();
            n.demotion = None;
        }
        if let Some(n) = self.nodes.get_mut(master) {
            n.demotion = Some(demotion);
        }
        if demotion == Demotion::Down {
            self.set_connect_mode(master, ConnectMode::Refuse);
            self.drop_connections(now, master, "connection reset by peer");
        }
    }

    fn shard_led_by(&self, master: &NodeAddr) -> Option<usize> {
        self.shards.iter().position(|s| &s.master == master)
    }

    fn move_keys(&mut self, from: usize, to: usize, pick: impl Fn(&[u8]) -> bool) {
        if from == to {
            return;
        }
        let keys: Vec<Bytes> = self.shards[from]
            .data
            .keys()
            .filter(|k| pick(k))
            .cloned()
            .collect();
        for key in keys {
            if let Some(v) = self.shards[from].data.remove(&key) {
                self.shards[to].data.insert(key, v);
            }
        }
    }

    // --- the wire ---------------------------------------------------------------------------

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

    fn close_from_node(&mut self, now: Instant, conn: ConnId, reason: &str) {
        if let Some(c) = self.conns.remove(&conn) {
            let at = now + self.latency(&c.node);
            self.events
                .push((at, SimEvent::Closed(conn, reason.to_owned())));
        }
    }

    fn latency(&self, node: &NodeAddr) -> Duration {
        self.nodes.get(node).map_or(Duration::ZERO, |n| n.latency)
    }

    /// Runs every complete command of the connection's inbox, unless the node or the
    /// connection is stalled.
    fn process(&mut self, now: Instant, conn: ConnId) {
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
            let rule = self
                .rules
                .iter_mut()
                .find(|r| r.matches(&node_addr, &name, now))
                .map(|r| {
                    if let Some(t) = r.times.as_mut() {
                        *t -= 1;
                    }
                    r.action.clone()
                });
            match rule {
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

    fn flush(&mut self, now: Instant, conn: ConnId, node: &NodeAddr, out: &mut BytesMut) {
        if !out.is_empty() {
            let at = now + self.latency(node);
            self.events
                .push((at, SimEvent::Read(conn, out.split().freeze())));
        }
    }

    fn reset_asking(&mut self, conn: ConnId, name: &str) {
        if name != "ASKING" {
            if let Some(c) = self.conns.get_mut(&conn) {
                c.asking = false;
            }
        }
    }

    // --- commands ---------------------------------------------------------------------------

    fn execute(&mut self, conn: ConnId, node: &NodeAddr, args: &[Bytes]) -> Frame {
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
            "CLUSTER" => return self.cluster_command(&args[1..]),
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

    fn auth(&mut self, conn: ConnId, args: &[Bytes]) -> Frame {
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

    fn cluster_command(&self, args: &[Bytes]) -> Frame {
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

    fn script_command(&mut self, node: &NodeAddr, args: &[Bytes]) -> Frame {
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
    fn route(
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

    fn announced(&self, addr: &NodeAddr) -> NodeAddr {
        self.nodes
            .get(addr)
            .map_or_else(|| addr.clone(), |n| n.announced.clone())
    }

    fn run(
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

fn ok() -> Value {
    Value::Status(Bytes::from_static(b"OK"))
}

fn tryagain() -> ServerError {
    ServerError::new("TRYAGAIN Multiple keys request during rehashing of slot")
}

fn sha1_hex(source: &[u8]) -> String {
    sha1_smol::Sha1::from(source).digest().to_string()
}

/// The declared keys of a keyed command and whether it writes; `None` for an unknown command
/// or a wrong arity.
fn keys_of(name: &str, args: &[Bytes]) -> Option<(Vec<Bytes>, bool)> {
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

fn command_args(frame: OwnedFrame) -> Option<Vec<Bytes>> {
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

fn owned(value: &Value) -> OwnedFrame {
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
