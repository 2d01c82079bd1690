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

use crate::addr::NodeAddr;
use crate::keys::{slot, SLOT_COUNT};
use crate::script::Script;
use crate::session::ConnId;
use crate::value::Frame;

use super::faults::{ConnectMode, Demotion, Rule};

/// The key space of one shard.
pub type Data = BTreeMap<Bytes, Bytes>;

/// A script body: runs over the shard's data with the call's `KEYS` and `ARGV`.
pub type ScriptFn = Box<dyn Fn(&mut Data, &[Bytes], &[Bytes]) -> Frame>;

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

pub(super) struct Shard {
    pub(super) master: NodeAddr,
    pub(super) replicas: Vec<NodeAddr>,
    pub(super) data: Data,
}

pub(super) struct Node {
    pub(super) announced: NodeAddr,
    pub(super) shard: usize,
    pub(super) connect: ConnectMode,
    pub(super) stalled: bool,
    pub(super) latency: Duration,
    pub(super) scripts: BTreeSet<String>,
    pub(super) demotion: Option<Demotion>,
    /// The `CLUSTER SLOTS` answer the node keeps giving while it has not heard of later
    /// changes (see [`SimCluster::lag`]).
    pub(super) view: Option<Frame>,
}

pub(super) struct SimConn {
    pub(super) node: NodeAddr,
    pub(super) inbox: BytesMut,
    pub(super) authed: bool,
    pub(super) asking: bool,
    pub(super) stalled: bool,
}

/// The simulated deployment. See the module docs.
pub struct SimCluster {
    pub(super) cluster_mode: bool,
    pub(super) nodes: BTreeMap<NodeAddr, Node>,
    pub(super) shards: Vec<Shard>,
    pub(super) slots: Vec<usize>,
    /// Slot → the shard importing it.
    pub(super) migrating: BTreeMap<u16, usize>,
    pub(super) password: Option<(Option<String>, String)>,
    pub(super) scripts: BTreeMap<String, ScriptFn>,
    pub(super) rules: Vec<Rule>,
    pub(super) conns: BTreeMap<ConnId, SimConn>,
    pub(super) events: Vec<(Instant, SimEvent)>,
    pub(super) received: Vec<Received>,
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

    pub(super) fn empty(cluster_mode: bool) -> Self {
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

    pub(super) fn next_addr(&self) -> NodeAddr {
        let port = FIRST_PORT + u16::try_from(self.nodes.len()).unwrap_or(u16::MAX - FIRST_PORT);
        NodeAddr::new(SIM_HOST, port)
    }

    pub(super) fn add_shard(&mut self) {
        let index = self.shards.len();
        let addr = self.next_addr();
        self.shards.push(Shard {
            master: addr.clone(),
            replicas: Vec::new(),
            data: Data::new(),
        });
        self.add_node(addr, index);
    }

    pub(super) fn add_node(&mut self, addr: NodeAddr, shard: usize) {
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
                view: None,
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

    /// The node stops hearing of the cluster's changes: its `CLUSTER SLOTS` answers the map
    /// of now until [`SimCluster::catch_up`], as a node the gossip has not reached yet does.
    /// Its own serving is unchanged.
    pub fn lag(&mut self, node: &NodeAddr) {
        let view = self.cluster_command(node, &[Bytes::from_static(b"SLOTS")]);
        if let Some(n) = self.nodes.get_mut(node) {
            n.view = Some(view);
        }
    }

    /// The node hears of the cluster's changes again.
    pub fn catch_up(&mut self, node: &NodeAddr) {
        if let Some(n) = self.nodes.get_mut(node) {
            n.view = None;
        }
    }

    /// The node takes bytes and never answers, until [`SimCluster::unstall`].
    pub fn stall(&mut self, node: &NodeAddr) {
        if let Some(n) = self.nodes.get_mut(node) {
            n.stalled = true;
        }
    }

    /// The connections open to `node`.
    pub(super) fn conns_of(&self, node: &NodeAddr) -> Vec<ConnId> {
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

    pub(super) fn shard_led_by(&self, master: &NodeAddr) -> Option<usize> {
        self.shards.iter().position(|s| &s.master == master)
    }

    pub(super) fn move_keys(&mut self, from: usize, to: usize, pick: impl Fn(&[u8]) -> bool) {
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
}
