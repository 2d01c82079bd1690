//! Raw keyspaces for the migration suites (`tests/tests/migrate_*.rs`).
//!
//! - [`generate`]: a seeded generator of legacy-layout keyspaces, written with plain commands
//!   (not through the store), so that they hold what a store would never write: orphan items,
//!   items another chat's log owns, log members without items, deleted schedule markers, tokens
//!   past 2^53, expired lease holders, durability tables of every type, unknown keys. With each
//!   keyspace comes the report a migration of it must give ([`Expected`]), computed from the
//!   generator's own model.
//! - [`digest`]: a canonical dump of what a prefix holds, defined by data and not by key names,
//!   so that a legacy keyspace and its cluster-layout copy compare equal ([`assert_same_data`]).
//!   What a migration leaves out by design (turn queues, holders, heartbeats, orphans, dangling
//!   members, indexes, unknown keys) is counted apart and never compared; TTLs compare within
//!   [`TTL_TOLERANCE_MS`].
//! - [`Budget`]: an executor wrapper that lets a run send only so many batches (across every
//!   client it wraps), to kill a migration at an exact point and run it again.
//!
//! Every random choice comes from a [`Rng`] seeded by [`seeds`], which prints the seed: set
//! `BOTMESH_MIGRATE_SEED` to replay one.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use botmesh_redis_core::driver::{Plan, Reply, Step};
use botmesh_redis_core::keys::RecordKind;
use botmesh_redis_core::keys::{enc, glob_escape, slot};
use botmesh_redis_core::migrate::names::{self, Name};
use botmesh_redis_core::migrate::{Counts, MigrationReport, Namespace};
use botmesh_redis_core::{ClientOptions, Error, Executor};
use botmesh_redis_core::{Keyspace, Layout};

use crate::conformance::{Client, Runtime};
use crate::harness::{
    shared_cluster, shared_single, AdminConn, RedisCluster, ServerOptions, SingleNode, Value,
};

// ---------------------------------------------------------------------------------------------
// Seeds and randomness
// ---------------------------------------------------------------------------------------------

/// The variable that replays one seed: `BOTMESH_MIGRATE_SEED=1234 cargo test ...`.
pub const SEED_VAR: &str = "BOTMESH_MIGRATE_SEED";

/// The seeds a test runs: `fixed` plus one drawn from the clock, or only the seed in
/// [`SEED_VAR`]. Each is printed (the test harness shows it when the test fails).
pub fn seeds(fixed: &[u64]) -> Vec<u64> {
    if let Some(seed) = std::env::var(SEED_VAR)
        .ok()
        .and_then(|s| s.trim().parse().ok())
    {
        eprintln!("seed {seed} (from {SEED_VAR})");
        return vec![seed];
    }
    let fresh = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(1);
    let mut all = fixed.to_vec();
    all.push(fresh);
    eprintln!("seeds {all:?} (replay one with {SEED_VAR}=<seed>)");
    all
}

/// SplitMix64: small, fast and good enough to pick test data; reproducible from its seed.
#[derive(Clone, Debug)]
pub struct Rng {
    state: u64,
}

impl Rng {
    /// A generator seeded with `seed`.
    pub fn new(seed: u64) -> Rng {
        Rng { state: seed }
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in `lo..hi` (`lo` when the range is empty).
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        if hi <= lo {
            return lo;
        }
        lo + self.next_u64() % (hi - lo)
    }

    /// True with probability `percent`/100.
    pub fn chance(&mut self, percent: u64) -> bool {
        self.next_u64() % 100 < percent
    }

    /// One item of a non-empty slice.
    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.range(0, items.len() as u64) as usize]
    }

    /// Random bytes, `0..max` of them, any value (so not always UTF-8).
    pub fn bytes(&mut self, max: u64) -> Vec<u8> {
        let n = self.range(0, max);
        (0..n).map(|_| self.next_u64() as u8).collect()
    }
}

// ---------------------------------------------------------------------------------------------
// Where the keys are
// ---------------------------------------------------------------------------------------------

/// The lifecycle records a migration from `legacy` into `cluster` leaves (copy 1, complete,
/// exact), with the bots then started on the cluster side when `bots_on_cluster`: for tests
/// that write both sides by hand and then take a step between them.
pub fn migrated_records(legacy: &Keyspace, cluster: &Keyspace, bots_on_cluster: bool) -> Vec<Cmd> {
    let record = |ks: &Keyspace, role: &str, started: bool| {
        let mut cmd = Cmd::new("HSET", ks.lifecycle().as_bytes())
            .arg("copy")
            .arg("1")
            .arg("role")
            .arg(role)
            .arg("phase")
            .arg("complete")
            .arg("exact")
            .arg("1")
            .arg("peer")
            .arg("the other side, written by the test")
            .arg("at")
            .arg("1");
        if started {
            cmd = cmd.arg("started").arg("1").arg("started_at").arg("2");
        }
        cmd
    };
    vec![
        record(legacy, "source", false),
        record(cluster, "target", bots_on_cluster),
    ]
}

/// A server to read or write raw keys on: a single node, or every master of a cluster.
#[derive(Clone, Copy, Debug)]
pub enum Node<'a> {
    /// A standalone node.
    Single(&'a SingleNode),
    /// A cluster: each key goes to the master of its slot.
    Cluster(&'a RedisCluster),
}

impl Node<'_> {
    /// The shared single node of this test process.
    pub fn shared_single() -> Node<'static> {
        Node::Single(shared_single())
    }

    /// The shared cluster of this test process.
    pub fn shared_cluster() -> Node<'static> {
        Node::Cluster(shared_cluster())
    }

    /// A second standalone node, started once per test process (for runs into another server).
    pub fn other_single() -> Node<'static> {
        static OTHER: OnceLock<SingleNode> = OnceLock::new();
        Node::Single(OTHER.get_or_init(|| SingleNode::start(ServerOptions::new())))
    }

    /// A connected client of driver `R`.
    pub async fn client<R: Runtime>(self) -> Client<R> {
        let options = match self {
            Node::Single(node) => ClientOptions::url(node.url()),
            Node::Cluster(cluster) => ClientOptions::cluster(cluster.seeds()),
        };
        Client::<R>::connect(options).await.unwrap()
    }

    /// Starts a store of `layout` under `prefix` here, as a bot replica does: its `start()`
    /// stamps the side's lifecycle record, so the steps after it know the bots ran here.
    pub async fn start_bots<R: Runtime>(
        self,
        layout: Layout,
        prefix: &str,
    ) -> Result<botmesh_redis_core::Store<Client<R>>, Error> {
        let store = botmesh_redis_core::Store::new(
            self.client::<R>().await,
            botmesh_redis_core::StoreOptions::new(prefix).layout(layout),
        )?;
        store.start().await?;
        Ok(store)
    }

    /// Whether this is a cluster.
    pub fn is_cluster(self) -> bool {
        matches!(self, Node::Cluster(_))
    }

    /// One admin connection per master.
    pub fn conns(self) -> Vec<AdminConn> {
        match self {
            Node::Single(node) => vec![node.conn().unwrap()],
            Node::Cluster(cluster) => cluster
                .slots()
                .unwrap()
                .into_iter()
                .map(|r| r.master)
                .collect::<BTreeSet<_>>()
                .into_iter()
                .map(|m| cluster.conn(m).unwrap())
                .collect(),
        }
    }

    /// Runs raw commands (each one's key is its second word), pipelined per master; panics on
    /// an error reply. Commands of one master run in the order given.
    pub fn run(self, commands: &[Cmd]) {
        let mut per_master: BTreeMap<std::net::SocketAddr, Vec<&Cmd>> = BTreeMap::new();
        match self {
            Node::Single(node) => {
                per_master.insert(node.addr(), commands.iter().collect());
            }
            Node::Cluster(cluster) => {
                let ranges = cluster.slots().unwrap();
                for command in commands {
                    let s = slot(&command.0[1]);
                    let master = ranges
                        .iter()
                        .find(|r| (r.start..=r.end).contains(&s))
                        .unwrap()
                        .master;
                    per_master.entry(master).or_default().push(command);
                }
            }
        }
        for (addr, list) in per_master {
            let mut conn = match self {
                Node::Single(node) => node.conn().unwrap(),
                Node::Cluster(cluster) => cluster.conn(addr).unwrap(),
            };
            for chunk in list.chunks(500) {
                let frames: Vec<&[Vec<u8>]> = chunk.iter().map(|c| c.0.as_slice()).collect();
                let replies = conn.pipeline(&frames).unwrap();
                for (command, reply) in chunk.iter().zip(replies) {
                    if let Value::Error(e) = reply {
                        panic!("{command:?}: {e}");
                    }
                }
            }
        }
    }

    /// Every key under `prefix` (`prefix:*`), on every master.
    pub fn keys(self, prefix: &str) -> BTreeSet<Vec<u8>> {
        let pattern = format!("{}:*", glob_escape(prefix));
        let mut all = BTreeSet::new();
        for mut conn in self.conns() {
            all.extend(scan_all(&mut conn, &pattern));
        }
        all
    }

    /// Sends one command to the node that holds its key (the second word) and returns the
    /// reply (an error reply is `Value::Error`).
    pub fn call(self, command: &Cmd) -> Value {
        let mut conn = match self {
            Node::Single(node) => node.conn().unwrap(),
            Node::Cluster(cluster) => cluster.conn_for_key(&command.0[1]).unwrap(),
        };
        conn.call(&command.0).unwrap()
    }

    /// Deletes every key under `prefix` (so that a suite's later `SCAN`s stay short).
    pub fn delete_prefix(self, prefix: &str) {
        let commands: Vec<Cmd> = self
            .keys(prefix)
            .into_iter()
            .map(|k| Cmd::new("DEL", k))
            .collect();
        self.run(&commands);
    }

    /// A raw dump of every key under `prefix` (type, value, has-TTL), for "nothing changed"
    /// checks that must see every byte, not only the migration's data.
    pub fn raw_dump(self, prefix: &str) -> BTreeMap<Vec<u8>, String> {
        let pattern = format!("{}:*", glob_escape(prefix));
        let mut all = BTreeMap::new();
        for mut conn in self.conns() {
            for key in scan_all(&mut conn, &pattern) {
                let (kind, value) = canonical_value(&mut conn, &key);
                let ttl = pttl(&mut conn, &key).is_some();
                all.insert(key, format!("{kind} ttl={ttl} {value:?}"));
            }
        }
        all
    }

    /// The server's time in ms (of the first master).
    pub fn now_ms(self) -> i64 {
        server_ms(&mut self.conns()[0])
    }
}

/// One raw command.
#[derive(Clone, PartialEq, Eq)]
pub struct Cmd(pub Vec<Vec<u8>>);

impl Cmd {
    /// A command: its name and its key.
    pub fn new(name: &str, key: impl AsRef<[u8]>) -> Cmd {
        Cmd(vec![name.as_bytes().to_vec(), key.as_ref().to_vec()])
    }

    /// One more argument.
    pub fn arg(mut self, arg: impl AsRef<[u8]>) -> Cmd {
        self.0.push(arg.as_ref().to_vec());
        self
    }
}

impl fmt::Debug for Cmd {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let words: Vec<String> = self
            .0
            .iter()
            .map(|w| String::from_utf8_lossy(w).into_owned())
            .collect();
        write!(f, "{words:?}")
    }
}

fn scan_all(conn: &mut AdminConn, pattern: &str) -> BTreeSet<Vec<u8>> {
    let mut cursor = b"0".to_vec();
    let mut keys = BTreeSet::new();
    loop {
        let reply = conn
            .cmd(&[
                b"SCAN".as_slice(),
                &cursor,
                b"MATCH",
                pattern.as_bytes(),
                b"COUNT",
                b"1000",
            ])
            .unwrap();
        let parts = reply.as_array().unwrap();
        cursor = parts[0].as_bytes().unwrap().to_vec();
        for key in parts[1].as_array().unwrap() {
            keys.insert(key.as_bytes().unwrap().to_vec());
        }
        if cursor == b"0" {
            return keys;
        }
    }
}

fn server_ms(conn: &mut AdminConn) -> i64 {
    let time = conn.cmd(&["TIME"]).unwrap();
    let parts = time.as_array().unwrap();
    let secs = parts[0].as_int().unwrap();
    let micros = parts[1].as_int().unwrap();
    secs * 1000 + micros / 1000
}

fn pttl(conn: &mut AdminConn, key: &[u8]) -> Option<i64> {
    let ms = conn
        .cmd(&[b"PTTL".as_slice(), key])
        .unwrap()
        .as_int()
        .unwrap();
    (ms >= 0).then_some(ms)
}

fn get(conn: &mut AdminConn, key: &[u8]) -> Option<Vec<u8>> {
    match conn.call(&[b"GET".as_slice(), key]).unwrap() {
        Value::Bulk(b) => Some(b),
        _ => None,
    }
}

fn hash(conn: &mut AdminConn, key: &[u8]) -> BTreeMap<Vec<u8>, Vec<u8>> {
    let reply = conn.cmd(&[b"HGETALL".as_slice(), key]).unwrap();
    let items = reply.as_array().unwrap_or_default();
    items
        .chunks(2)
        .map(|p| {
            (
                p[0].as_bytes().unwrap().to_vec(),
                p[1].as_bytes().unwrap().to_vec(),
            )
        })
        .collect()
}

fn zrange(conn: &mut AdminConn, key: &[u8]) -> Vec<(Vec<u8>, String)> {
    let reply = conn
        .cmd(&[b"ZRANGE".as_slice(), key, b"0", b"-1", b"WITHSCORES"])
        .unwrap();
    reply
        .as_array()
        .unwrap_or_default()
        .chunks(2)
        .map(|p| {
            (
                p[0].as_bytes().unwrap().to_vec(),
                p[1].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

/// The type of a key and a canonical rendering of its value (sets and hashes sorted).
fn canonical_value(conn: &mut AdminConn, key: &[u8]) -> Rendered {
    let kind = conn
        .cmd(&[b"TYPE".as_slice(), key])
        .unwrap()
        .as_str()
        .unwrap()
        .to_owned();
    let flat = |v: Value| -> Vec<Blob> {
        v.as_array()
            .unwrap_or_default()
            .iter()
            .map(|x| Blob(x.as_bytes().map(<[u8]>::to_vec).unwrap_or_default()))
            .collect()
    };
    let value = match kind.as_str() {
        "string" => vec![Blob(get(conn, key).unwrap_or_default())],
        "hash" => hash(conn, key)
            .into_iter()
            .flat_map(|(k, v)| [Blob(k), Blob(v)])
            .collect(),
        "list" => flat(conn.cmd(&[b"LRANGE".as_slice(), key, b"0", b"-1"]).unwrap()),
        "set" => {
            let mut members = flat(conn.cmd(&[b"SMEMBERS".as_slice(), key]).unwrap());
            members.sort();
            members
        }
        "zset" => zrange(conn, key)
            .into_iter()
            .flat_map(|(m, s)| [Blob(m), Blob(s.into_bytes())])
            .collect(),
        "stream" => {
            let reply = conn.cmd(&[b"XRANGE".as_slice(), key, b"-", b"+"]).unwrap();
            vec![Blob(format!("{reply:?}").into_bytes())]
        }
        _ => Vec::new(),
    };
    (kind, value)
}

// ---------------------------------------------------------------------------------------------
// The generator
// ---------------------------------------------------------------------------------------------

/// Ids hostile to key names: separators, braces, glob and percent characters, spaces, emoji,
/// the empty string.
pub const NASTY: &[&str] = &[
    "a:b", "a", "b:c", "{x}", "}{", "{", "}", "*", "?[]\\", "%", "%25", "a b", "😀", "", "x:y:z",
    "ü:{}",
];

/// Fencing tokens and counters: small, zero, past 2^53 (where a double loses integers), the
/// largest i64, negative.
pub const TOKENS: &[&str] = &[
    "0",
    "1",
    "7",
    "42",
    "1000",
    "9007199254740992",
    "9007199254740993",
    "9223372036854775807",
    "-5",
];

/// Durability table parts and the type each is written as.
const DURABLE_PARTS: &[(&str, &str)] = &[
    ("journal", "list"),
    ("items", "hash"),
    ("ready", "zset"),
    ("seq", "string"),
    ("claims", "zset"),
    ("owners", "hash"),
    ("done", "set"),
    ("begun", "hash"),
    ("acked", "stream"),
    ("window", "string"),
];

/// A generated legacy-layout keyspace: the commands that write it and what a migration of it
/// must report.
#[derive(Clone, Debug)]
pub struct LegacyKeyspace {
    /// The prefix.
    pub prefix: String,
    /// The seed it was generated from.
    pub seed: u64,
    /// The commands, in order.
    pub commands: Vec<Cmd>,
    /// What a migration must find.
    pub expected: Expected,
}

impl LegacyKeyspace {
    /// Writes the keyspace on `node` (a single node: the legacy layout lives on one).
    pub fn write(&self, node: Node<'_>) {
        node.run(&self.commands);
    }
}

/// The counts a migration of a generated keyspace must report, computed from the generator's
/// model (not from the library's parsers).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Expected {
    /// Log members with an item (what a migration copies as messages).
    pub messages: u64,
    /// Drain members with an item.
    pub drain_messages: u64,
    /// Keys per namespace, as `inspect_keyspace` counts them (legacy names and shared names;
    /// logs under `Messages`, drains under `Drains`, items under `Items`).
    pub keys: BTreeMap<Namespace, u64>,
    /// Items no log or drain names.
    pub orphans: u64,
    /// Items whose shortest reading's log does not name them, but a longer one does.
    pub foreign_items: u64,
    /// Items named by two logs.
    pub shared_items: u64,
    /// Log and drain members without an item.
    pub dangling: u64,
    /// Of those, the drain members.
    pub dangling_in_drains: u64,
    /// Keys that are no name of the legacy layout.
    pub unknown: u64,
    /// Distinct legacy item keys of the messages copied (a rollback writes each once).
    pub distinct_items: u64,
    /// Distinct (chat, id) pairs of the messages copied: the cluster layout's items (a chat's
    /// log and drain share them, so a migration writes each once and keeps the second).
    pub distinct_pairs: u64,
}

/// The namespaces whose keys keep their names in both layouts.
pub const SHARED_NAMESPACES: [Namespace; 4] = [
    Namespace::Conversations,
    Namespace::Cursors,
    Namespace::Leases,
    Namespace::Durability,
];

impl Expected {
    fn key_count(&self, ns: Namespace) -> u64 {
        self.keys.get(&ns).copied().unwrap_or(0)
    }

    /// The per-namespace counts of a forward migration into a target that holds none of it:
    /// every datum copied. The shared names are copied only to a `separate` target.
    pub fn forward_namespaces(&self, separate: bool) -> BTreeMap<Namespace, Counts> {
        let mut out = BTreeMap::new();
        let mut put = |ns: Namespace, n: u64| {
            if n > 0 {
                out.insert(
                    ns,
                    Counts {
                        copied: n,
                        ..Counts::default()
                    },
                );
            }
        };
        put(Namespace::Messages, self.messages);
        put(Namespace::Drains, self.drain_messages);
        for ns in [
            Namespace::Chats,
            Namespace::Contacts,
            Namespace::Checkpoints,
            Namespace::Schedules,
            Namespace::UserData,
            Namespace::Fences,
            Namespace::Terms,
        ] {
            put(ns, self.key_count(ns));
        }
        if separate {
            for ns in SHARED_NAMESPACES {
                put(ns, self.key_count(ns));
            }
        }
        out
    }

    /// What a forward migration counts as not copied: turn queues and holders, and in place
    /// the shared names.
    pub fn forward_not_copied(&self, separate: bool) -> BTreeMap<Namespace, u64> {
        let mut list = vec![Namespace::Turns, Namespace::Locks, Namespace::Leaderships];
        if !separate {
            list.extend(SHARED_NAMESPACES);
        }
        list.into_iter()
            .map(|ns| (ns, self.key_count(ns)))
            .filter(|(_, n)| *n > 0)
            .collect()
    }

    /// The legacy-layout part of `inspect_keyspace`'s report.
    pub fn inspect_legacy(&self) -> BTreeMap<Namespace, u64> {
        self.keys
            .iter()
            .filter(|(ns, n)| !SHARED_NAMESPACES.contains(ns) && **n > 0)
            .map(|(ns, n)| (*ns, *n))
            .collect()
    }

    /// The shared-names part of `inspect_keyspace`'s report.
    pub fn inspect_shared(&self) -> BTreeMap<Namespace, u64> {
        self.keys
            .iter()
            .filter(|(ns, n)| SHARED_NAMESPACES.contains(ns) && **n > 0)
            .map(|(ns, n)| (*ns, *n))
            .collect()
    }

    /// Total keys written.
    pub fn total_keys(&self) -> u64 {
        self.keys.values().sum::<u64>() + self.unknown
    }
}

/// Asserts every count of a forward migration's report into an empty target. Messages: each
/// log member with an item is copied; each drain member too, with its item or, when the
/// chat's log names the same id (whose message writes the item), as a member only.
pub fn assert_forward_report(report: &MigrationReport, expected: &Expected, separate: bool) {
    let context = format!("{report:#?}\nexpected {expected:#?}");
    assert_eq!(
        report.namespaces,
        expected.forward_namespaces(separate),
        "namespaces; {context}"
    );
    assert_eq!(
        report.not_copied,
        expected.forward_not_copied(separate),
        "not copied; {context}"
    );
    assert_eq!(
        (
            report.orphans,
            report.foreign_items,
            report.shared_items,
            report.dangling,
            report.unknown,
            report.unreadable,
            report.unrepresentable,
        ),
        (
            expected.orphans,
            expected.foreign_items,
            expected.shared_items,
            expected.dangling,
            expected.unknown,
            0,
            0
        ),
        "(orphans, foreign, shared, dangling, unknown, unreadable, unrepresentable); {context}"
    );
}

/// A key builder of [`Keyspace`] that takes one name.
type KeyOf = fn(&Keyspace, &str) -> botmesh_redis_core::Key;

/// The model the generator keeps of what it wrote.
struct Model {
    ks: Keyspace,
    rng: Rng,
    now_ms: i64,
    size: u64,
    n: u64,
    commands: Vec<Cmd>,
    used: BTreeSet<Vec<u8>>,
    logs: BTreeMap<String, BTreeMap<String, i64>>,
    drains: BTreeMap<String, BTreeMap<String, i64>>,
    items: BTreeMap<Vec<u8>, Vec<u8>>,
    keys: BTreeMap<Namespace, u64>,
    unknown: u64,
}

impl Model {
    fn fresh(&mut self, base: &str) -> String {
        self.n += 1;
        format!("{base}{}", self.n)
    }

    /// An id: a nasty one half of the time, else a fresh plain one.
    fn id(&mut self, base: &str) -> String {
        if self.rng.chance(50) {
            (*self.rng.pick(NASTY)).to_owned()
        } else {
            self.fresh(base)
        }
    }

    /// An id without `:` (users and namespaces of user data).
    fn segment(&mut self, base: &str) -> String {
        let id = self.id(base);
        if id.contains(':') {
            self.fresh(base)
        } else {
            id
        }
    }

    fn count(&mut self, ns: Namespace) {
        *self.keys.entry(ns).or_default() += 1;
    }

    /// Claims a key for one datum; false when it is taken (the caller skips the datum).
    fn claim(&mut self, key: &[u8]) -> bool {
        self.used.insert(key.to_vec())
    }

    fn push(&mut self, cmd: Cmd) {
        self.commands.push(cmd);
    }

    fn ttl_ms(&mut self) -> u64 {
        self.rng.range(60_000, 600_000)
    }

    fn set(&mut self, key: &[u8], value: &[u8], ttl: Option<u64>) {
        let mut cmd = Cmd::new("SET", key).arg(value);
        if let Some(ms) = ttl {
            cmd = cmd.arg("PX").arg(ms.to_string());
        }
        self.push(cmd);
    }

    fn score(&mut self) -> i64 {
        match self.rng.range(0, 4) {
            0 => 1_700_000_000_000 + self.rng.range(0, 1_000_000_000) as i64,
            1 => self.rng.range(0, 1000) as i64,
            2 => -(self.rng.range(0, 1_000_000) as i64),
            _ => (1i64 << 52) + self.rng.range(0, 1000) as i64,
        }
    }

    fn message(&mut self, chat: &str, id: &str, drain: bool, dangling: bool) {
        let score = self.score();
        let log = if drain {
            self.ks.message_drain(chat)
        } else {
            self.ks.message_log(chat)
        };
        let members = if drain {
            self.drains.entry(chat.to_owned()).or_default()
        } else {
            self.logs.entry(chat.to_owned()).or_default()
        };
        if members.contains_key(id) {
            return;
        }
        members.insert(id.to_owned(), score);
        self.push(
            Cmd::new("ZADD", log.as_bytes())
                .arg(score.to_string())
                .arg(id),
        );
        let item = self.ks.message_item(chat, id);
        if !dangling && !self.items.contains_key(item.as_bytes()) {
            let value = self.rng.bytes(40);
            self.items.insert(item.as_bytes().to_vec(), value.clone());
            self.set(item.as_bytes(), &value, None);
        }
    }

    fn messages(&mut self) {
        for _ in 0..self.rng.range(3, 6 + 4 * self.size) {
            let chat = self.id("chat-");
            let drain = self.rng.chance(15);
            for _ in 0..self.rng.range(1, 12) {
                let id = self.id("m-");
                let dangling = self.rng.chance(5);
                self.message(&chat, &id, drain, dangling);
                if drain && self.rng.chance(30) {
                    // The chat also has a new log beside its drain.
                    let id = self.id("m-");
                    self.message(&chat, &id, false, false);
                }
            }
        }
        // Chats with `:` in their ids: their items read first as another chat's (foreign).
        for _ in 0..self.rng.range(1, 3 + self.size) {
            let chat = format!("{}:{}", self.fresh("f-"), self.fresh("g-"));
            let id = self.id("m-");
            self.message(&chat, &id, false, false);
        }
        // One item named by two logs: `s` + `x:y` and `s:x` + `y` (the historical collision).
        if self.rng.chance(70) {
            let base = self.fresh("s-");
            self.message(&base, "x:y", false, false);
            self.message(&format!("{base}:x"), "y", false, false);
        }
        // A log member whose item is missing, for sure.
        let chat = self.fresh("dangle-");
        self.message(&chat, "gone", false, true);
        self.message(&chat, "here", false, false);
        // Orphans: items that no log names.
        for _ in 0..self.rng.range(1, 4 + self.size) {
            let chat = self.fresh("orphan-");
            let id = self.id("o-");
            let item = self.ks.message_item(&chat, &id);
            if !self.items.contains_key(item.as_bytes()) {
                let value = self.rng.bytes(20);
                self.items.insert(item.as_bytes().to_vec(), value.clone());
                self.set(item.as_bytes(), &value, None);
            }
        }
    }

    fn records(&mut self) {
        for kind in [
            RecordKind::Chat,
            RecordKind::Contact,
            RecordKind::Checkpoint,
        ] {
            for _ in 0..self.rng.range(2, 4 + 6 * self.size) {
                let id = self.id("r-");
                let key = self.ks.record(kind, &id);
                if !self.claim(key.as_bytes()) {
                    continue;
                }
                let ttl =
                    (kind == RecordKind::Checkpoint && self.rng.chance(50)).then(|| self.ttl_ms());
                let value = self.rng.bytes(30);
                self.set(key.as_bytes(), &value, ttl);
                self.count(Namespace::of_record(kind));
            }
        }
        for _ in 0..self.rng.range(2, 4 + 4 * self.size) {
            let id = self.id("sc-");
            let key = self.ks.record(RecordKind::Schedule, &id);
            if !self.claim(key.as_bytes()) {
                continue;
            }
            let token = *self.rng.pick(TOKENS);
            let mut cmd = Cmd::new("HSET", key.as_bytes()).arg("token").arg(token);
            if self.rng.chance(80) {
                let holder = self.fresh("holder-");
                cmd = cmd.arg("holder").arg(holder);
            }
            if self.rng.chance(25) {
                // A deleted marker: no data, the token kept.
                cmd = cmd.arg("deleted").arg("1");
            } else {
                let data = self.rng.bytes(30);
                cmd = cmd.arg("deleted").arg("0").arg("data").arg(data);
            }
            self.push(cmd);
            self.count(Namespace::Schedules);
        }
    }

    fn user_data(&mut self) {
        for _ in 0..self.rng.range(2, 4 + 6 * self.size) {
            let user = self.segment("u-");
            let ns = self.segment("ns-");
            let k = self.id("k-");
            let key = self.ks.user_entry(&user, &ns, &k);
            if !self.claim(key.as_bytes()) {
                continue;
            }
            let ttl = self.rng.chance(30).then(|| self.ttl_ms());
            let value = self.rng.bytes(30);
            self.set(key.as_bytes(), &value, ttl);
            self.count(Namespace::UserData);
        }
    }

    fn coordination(&mut self) {
        let counters: [(Namespace, KeyOf); 2] = [
            (Namespace::Fences, Keyspace::lock_fence),
            (Namespace::Terms, Keyspace::leader_term),
        ];
        for (ns, name) in counters {
            for _ in 0..self.rng.range(1, 3 + 3 * self.size) {
                let id = self.id("c-");
                let key = name(&self.ks, &id);
                if !self.claim(key.as_bytes()) {
                    continue;
                }
                let value = *self.rng.pick(&TOKENS[..8]);
                self.set(key.as_bytes(), value.as_bytes(), None);
                self.count(ns);
            }
        }
        for _ in 0..self.rng.range(1, 3 + 2 * self.size) {
            let id = self.id("cur-");
            let key = self.ks.cursor(&id);
            if !self.claim(key.as_bytes()) {
                continue;
            }
            let value = *self.rng.pick(TOKENS);
            self.set(key.as_bytes(), value.as_bytes(), None);
            self.count(Namespace::Cursors);
        }
        // Holders of locks and leaderships: running bots' state, never copied.
        for _ in 0..self.rng.range(1, 3 + self.size) {
            let id = self.id("lk-");
            let key = self.ks.lock(&id);
            if self.claim(key.as_bytes()) {
                let owner = self.fresh("owner-");
                let ttl = self.ttl_ms();
                self.set(key.as_bytes(), owner.as_bytes(), Some(ttl));
                self.count(Namespace::Locks);
            }
            let id = self.id("ld-");
            let key = self.ks.leader(&id);
            if self.claim(key.as_bytes()) {
                let owner = self.fresh("leader-");
                let ttl = self.ttl_ms();
                self.set(key.as_bytes(), owner.as_bytes(), Some(ttl));
                self.count(Namespace::Leaderships);
            }
        }
        // Turn queues without pending tickets (a `tix` key would mean a live bot).
        for _ in 0..self.rng.range(1, 3 + self.size) {
            let chat = self.id("t-");
            let seq = self.ks.turn(&chat, botmesh_redis_core::keys::TurnPart::Seq);
            if !self.claim(seq.as_bytes()) {
                continue;
            }
            self.set(seq.as_bytes(), b"3", None);
            let serving = self
                .ks
                .turn(&chat, botmesh_redis_core::keys::TurnPart::Serving);
            self.push(
                Cmd::new("HSET", serving.as_bytes())
                    .arg("ticket")
                    .arg("3")
                    .arg("since")
                    .arg(self.now_ms.to_string()),
            );
            let last = self
                .ks
                .turn(&chat, botmesh_redis_core::keys::TurnPart::Last);
            self.set(last.as_bytes(), b"3|r1|q1", None);
            for _ in 0..3 {
                self.count(Namespace::Turns);
            }
        }
    }

    fn shared_names(&mut self) {
        for _ in 0..self.rng.range(1, 3 + 3 * self.size) {
            let chat = self.id("conv-");
            let key = self.ks.conversation(&chat);
            if !self.claim(key.as_bytes()) {
                continue;
            }
            let ttl = self.rng.chance(50).then(|| self.ttl_ms());
            let value = self.rng.bytes(30);
            self.set(key.as_bytes(), &value, ttl);
            self.count(Namespace::Conversations);
        }
        for _ in 0..self.rng.range(1, 3 + 2 * self.size) {
            let name = self.id("lease-");
            let key = self.ks.lease(&name);
            if !self.claim(key.as_bytes()) {
                continue;
            }
            let token = *self.rng.pick(&TOKENS[..8]);
            let mut cmd = Cmd::new("HSET", key.as_bytes()).arg("token").arg(token);
            match self.rng.range(0, 3) {
                0 => {
                    let until = self.now_ms + self.rng.range(60_000, 600_000) as i64;
                    cmd = cmd
                        .arg("holder")
                        .arg(self.fresh("lh-"))
                        .arg("until")
                        .arg(until.to_string());
                }
                1 => {
                    // Expired: the holder is not copied.
                    let until = self.now_ms - 5_000;
                    cmd = cmd
                        .arg("holder")
                        .arg(self.fresh("lh-"))
                        .arg("until")
                        .arg(until.to_string());
                }
                _ => {}
            }
            self.push(cmd);
            self.count(Namespace::Leases);
        }
        for _ in 0..self.rng.range(1, 2 + self.size) {
            let table = {
                let id = self.id("tbl-");
                if id.is_empty() || id.contains(['{', '}']) {
                    self.fresh("tbl-")
                } else {
                    id
                }
            };
            for &(part, kind) in DURABLE_PARTS {
                if self.rng.chance(30) {
                    continue;
                }
                let key = self.ks.durable(&table, part).unwrap();
                if !self.claim(key.as_bytes()) {
                    continue;
                }
                let k = key.as_bytes();
                let v = self.rng.bytes(20);
                let cmd = match kind {
                    "list" => Cmd::new("RPUSH", k).arg(&v).arg("second").arg(&v),
                    "hash" => Cmd::new("HSET", k).arg("f1").arg(&v).arg("f2").arg("x"),
                    "zset" => Cmd::new("ZADD", k)
                        .arg("1")
                        .arg("one")
                        .arg("2.5")
                        .arg(&v)
                        .arg("-3")
                        .arg("three"),
                    "set" => Cmd::new("SADD", k).arg("a").arg(&v).arg("c"),
                    "stream" => Cmd::new("XADD", k).arg("1-1").arg("f").arg(&v),
                    _ => Cmd::new("SET", k).arg(&v),
                };
                self.push(cmd);
                if self.rng.chance(30) {
                    let ttl = self.ttl_ms();
                    self.push(Cmd::new("PEXPIRE", k).arg(ttl.to_string()));
                }
                self.count(Namespace::Durability);
            }
        }
    }

    fn unknown_keys(&mut self) {
        let p = self.ks.prefix().to_owned();
        for _ in 0..self.rng.range(1, 3 + self.size) {
            let key = match self.rng.range(0, 5) {
                0 => format!("{p}:msg:{}", self.fresh("nocolon-")),
                1 => format!("{p}:user:{}:only-two", self.fresh("u-")),
                2 => format!("{p}:co:turn:{}:other", self.fresh("c-")),
                3 => format!("{p}:zzz:{}", self.fresh("what-")),
                _ => format!("{p}:co:weird:{}", self.fresh("w-")),
            };
            if self.claim(key.as_bytes()) {
                self.set(key.as_bytes(), b"?", None);
                self.unknown += 1;
            }
        }
    }

    /// What a migration must find, from the model: the definitions of `docs/key-layout.md`.
    fn expected(&self) -> Expected {
        let mut e = Expected {
            keys: self.keys.clone(),
            unknown: self.unknown,
            ..Expected::default()
        };
        let mut distinct = BTreeSet::new();
        let mut pairs = BTreeSet::new();
        for (drain, logs) in [(false, &self.logs), (true, &self.drains)] {
            for (chat, members) in logs {
                for id in members.keys() {
                    let item = self.ks.message_item(chat, id);
                    if self.items.contains_key(item.as_bytes()) {
                        if drain {
                            e.drain_messages += 1;
                        } else {
                            e.messages += 1;
                        }
                        distinct.insert(item.as_bytes().to_vec());
                        pairs.insert((chat.clone(), id.clone()));
                    } else {
                        e.dangling += 1;
                        if drain {
                            e.dangling_in_drains += 1;
                        }
                    }
                }
            }
        }
        e.distinct_items = distinct.len() as u64;
        e.distinct_pairs = pairs.len() as u64;
        let head = format!("{}:msg:", self.ks.prefix());
        for item in self.items.keys() {
            let rest = std::str::from_utf8(&item[head.len()..]).unwrap();
            let owners: Vec<bool> = rest
                .match_indices(':')
                .map(|(at, _)| {
                    let (chat, id) = (&rest[..at], &rest[at + 1..]);
                    [&self.logs, &self.drains]
                        .iter()
                        .any(|l| l.get(chat).is_some_and(|m| m.contains_key(id)))
                })
                .collect();
            let count = owners.iter().filter(|o| **o).count();
            if count == 0 {
                e.orphans += 1;
            } else {
                if !owners[0] {
                    e.foreign_items += 1;
                }
                if count > 1 {
                    e.shared_items += 1;
                }
            }
        }
        e.keys.insert(Namespace::Messages, self.logs.len() as u64);
        e.keys.insert(Namespace::Drains, self.drains.len() as u64);
        e.keys.insert(Namespace::Items, self.items.len() as u64);
        e.keys.retain(|_, n| *n > 0);
        e
    }
}

/// Generates a legacy-layout keyspace under `prefix` from `seed`. `size` scales it (1: about
/// 150 to 250 keys); `now_ms` is the server's time (lease deadlines are server time).
pub fn generate(prefix: &str, seed: u64, size: u64, now_ms: i64) -> LegacyKeyspace {
    let mut model = Model {
        ks: Keyspace::new(Layout::Legacy, prefix).unwrap(),
        rng: Rng::new(seed),
        now_ms,
        size,
        n: 0,
        commands: Vec::new(),
        used: BTreeSet::new(),
        logs: BTreeMap::new(),
        drains: BTreeMap::new(),
        items: BTreeMap::new(),
        keys: BTreeMap::new(),
        unknown: 0,
    };
    model.messages();
    model.records();
    model.user_data();
    model.coordination();
    model.shared_names();
    model.unknown_keys();
    LegacyKeyspace {
        prefix: prefix.to_owned(),
        seed,
        expected: model.expected(),
        commands: model.commands,
    }
}

/// Generates a keyspace from `seed` under `prefix` on `node` and writes it.
pub fn write_generated(node: Node<'_>, prefix: &str, seed: u64, size: u64) -> LegacyKeyspace {
    let keyspace = generate(prefix, seed, size, node.now_ms());
    keyspace.write(node);
    keyspace
}

// ---------------------------------------------------------------------------------------------
// The digest
// ---------------------------------------------------------------------------------------------

/// Remaining TTLs compare equal within this many ms.
pub const TTL_TOLERANCE_MS: i64 = 1000;

/// Bytes shown as (lossy) text.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Blob(pub Vec<u8>);

impl fmt::Debug for Blob {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", String::from_utf8_lossy(&self.0))
    }
}

/// A key's type and its value rendered canonically (hash fields and set members sorted).
pub type Rendered = (String, Vec<Blob>);

/// One message: id, score (as the server prints it), item value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Msg {
    /// The message id (the log member).
    pub id: String,
    /// The score.
    pub score: String,
    /// The item's value.
    pub value: Blob,
}

/// A value with its remaining TTL (`None`: no TTL).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Timed<V> {
    /// The value.
    pub value: V,
    /// Remaining ms, when the key has a TTL.
    pub ttl: Option<i64>,
}

/// A schedule record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sched {
    /// The `token` field.
    pub token: Option<String>,
    /// The `holder` field.
    pub holder: Option<String>,
    /// Whether `deleted` is `1`.
    pub deleted: bool,
    /// The `data` field.
    pub data: Option<Blob>,
}

/// A lease, as a bot sees it: its token, and its holder with the time left while it is live.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lease {
    /// The `token` field.
    pub token: Option<String>,
    /// A live holder and its remaining ms.
    pub holder: Option<(String, i64)>,
}

/// What a prefix holds, by data. See the module docs.
#[derive(Clone, Debug, Default)]
pub struct Digest {
    /// Per chat with at least one message: its messages in log order.
    pub messages: BTreeMap<String, Vec<Msg>>,
    /// Per chat being drained: the drain's messages.
    pub drains: BTreeMap<String, Vec<Msg>>,
    /// Chat, contact and checkpoint records.
    pub records: BTreeMap<(RecordKind, String), Timed<Blob>>,
    /// Schedule records, deleted markers included.
    pub schedules: BTreeMap<String, Sched>,
    /// User-data entries: (user, namespace, key).
    pub user_data: BTreeMap<(String, String, String), Timed<Blob>>,
    /// Lock fences.
    pub fences: BTreeMap<String, String>,
    /// Leadership terms.
    pub terms: BTreeMap<String, String>,
    /// Cursors, by name.
    pub cursors: BTreeMap<String, String>,
    /// Conversations, by chat.
    pub conversations: BTreeMap<String, Timed<Blob>>,
    /// Leases, by name.
    pub leases: BTreeMap<String, Lease>,
    /// Durability table parts, by `table` and part: type and canonical value.
    pub durable: BTreeMap<(String, String), Timed<Rendered>>,
    /// The layout marker's value (not compared).
    pub marker: Option<String>,
    /// Keys left out by design, per kind (not compared): `turns`, `locks`, `leaderships`,
    /// `heartbeats`, `indexes`, `unknown`, `orphans`, `dangling`, `marker`.
    pub excluded: BTreeMap<&'static str, u64>,
    /// The unknown keys (not compared).
    pub unknown_keys: Vec<String>,
    /// Cluster layout: index entries that disagree with their records (not compared; assert
    /// it is empty with [`Digest::assert_indexes_agree`]).
    pub index_problems: Vec<String>,
}

impl Digest {
    /// The same data with every remaining TTL `ms` longer: what it held `ms` earlier. Two
    /// digests of data written at different times compare as of their writes
    /// ([`digest_since`]), however long each run took.
    pub fn aged(mut self, ms: i64) -> Digest {
        let older = |ttl: &mut Option<i64>| {
            if let Some(t) = ttl {
                *t += ms;
            }
        };
        self.records.values_mut().for_each(|t| older(&mut t.ttl));
        self.user_data.values_mut().for_each(|t| older(&mut t.ttl));
        self.conversations
            .values_mut()
            .for_each(|t| older(&mut t.ttl));
        self.durable.values_mut().for_each(|t| older(&mut t.ttl));
        for lease in self.leases.values_mut() {
            if let Some((_, left)) = &mut lease.holder {
                *left += ms;
            }
        }
        self
    }

    /// The number of data entries (messages counted one by one).
    pub fn len(&self) -> usize {
        self.messages.values().map(Vec::len).sum::<usize>()
            + self.drains.values().map(Vec::len).sum::<usize>()
            + self.records.len()
            + self.schedules.len()
            + self.user_data.len()
            + self.fences.len()
            + self.terms.len()
            + self.cursors.len()
            + self.conversations.len()
            + self.leases.len()
            + self.durable.len()
    }

    /// Whether it holds no data.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The digest without the names both layouts share (conversations, cursors, leases,
    /// durability tables), which an in-place run neither copies nor needs to.
    pub fn without_shared_names(&self) -> Digest {
        Digest {
            cursors: BTreeMap::new(),
            conversations: BTreeMap::new(),
            leases: BTreeMap::new(),
            durable: BTreeMap::new(),
            ..self.clone()
        }
    }

    /// Every difference in data between `self` (expected) and `other`, TTLs within
    /// [`TTL_TOLERANCE_MS`].
    pub fn diff(&self, other: &Digest) -> Vec<String> {
        let mut out = Vec::new();
        // Messages by (chat, id): a log's order is its scores' (then its ids'), so this is the
        // same comparison, and a difference names the message rather than a whole log.
        diff_map(
            &mut out,
            "message",
            &flat(&self.messages),
            &flat(&other.messages),
            eq,
        );
        diff_map(
            &mut out,
            "drained message",
            &flat(&self.drains),
            &flat(&other.drains),
            eq,
        );
        diff_map(&mut out, "records", &self.records, &other.records, timed_eq);
        diff_map(&mut out, "schedules", &self.schedules, &other.schedules, eq);
        diff_map(
            &mut out,
            "user data",
            &self.user_data,
            &other.user_data,
            timed_eq,
        );
        diff_map(&mut out, "fences", &self.fences, &other.fences, eq);
        diff_map(&mut out, "terms", &self.terms, &other.terms, eq);
        diff_map(&mut out, "cursors", &self.cursors, &other.cursors, eq);
        diff_map(
            &mut out,
            "conversations",
            &self.conversations,
            &other.conversations,
            timed_eq,
        );
        diff_map(&mut out, "leases", &self.leases, &other.leases, |a, b| {
            a.token == b.token
                && match (&a.holder, &b.holder) {
                    (None, None) => true,
                    (Some((h1, t1)), Some((h2, t2))) => {
                        h1 == h2 && (t1 - t2).abs() <= TTL_TOLERANCE_MS
                    }
                    _ => false,
                }
        });
        diff_map(&mut out, "durable", &self.durable, &other.durable, timed_eq);
        out
    }

    /// Panics when the cluster layout's indexes disagree with the records.
    pub fn assert_indexes_agree(&self) {
        assert!(
            self.index_problems.is_empty(),
            "index problems: {:#?}",
            self.index_problems
        );
    }
}

/// Messages keyed by (chat, id).
fn flat(logs: &BTreeMap<String, Vec<Msg>>) -> BTreeMap<(&str, &str), (&str, &Blob)> {
    logs.iter()
        .flat_map(|(chat, list)| {
            list.iter()
                .map(move |m| ((chat.as_str(), m.id.as_str()), (m.score.as_str(), &m.value)))
        })
        .collect()
}

fn eq<V: PartialEq>(a: &V, b: &V) -> bool {
    a == b
}

fn timed_eq<V: PartialEq>(a: &Timed<V>, b: &Timed<V>) -> bool {
    a.value == b.value
        && match (a.ttl, b.ttl) {
            (None, None) => true,
            (Some(x), Some(y)) => (x - y).abs() <= TTL_TOLERANCE_MS,
            _ => false,
        }
}

fn diff_map<K: Ord + fmt::Debug, V: fmt::Debug>(
    out: &mut Vec<String>,
    what: &str,
    a: &BTreeMap<K, V>,
    b: &BTreeMap<K, V>,
    same: impl Fn(&V, &V) -> bool,
) {
    for (k, va) in a {
        match b.get(k) {
            None => out.push(format!("{what} {k:?}: missing, expected {va:?}")),
            Some(vb) if !same(va, vb) => out.push(format!("{what} {k:?}: {vb:?}, expected {va:?}")),
            Some(_) => {}
        }
    }
    for (k, vb) in b {
        if !a.contains_key(k) {
            out.push(format!("{what} {k:?}: unexpected {vb:?}"));
        }
    }
}

/// Panics, listing the differences, unless `actual` holds the same data as `expected`.
pub fn assert_same_data(what: &str, expected: &Digest, actual: &Digest) {
    let diff = expected.diff(actual);
    assert!(
        diff.is_empty(),
        "{what}: {} difference(s):\n{}",
        diff.len(),
        diff.iter().take(40).cloned().collect::<Vec<_>>().join("\n")
    );
}

/// Reads the digest of `prefix` in `layout` on `node` (every master of a cluster).
pub fn digest(node: Node<'_>, layout: Layout, prefix: &str) -> Digest {
    let ks = Keyspace::new(layout, prefix).unwrap();
    let pattern = format!("{}:*", glob_escape(prefix));
    let mut d = Digest::default();
    for mut conn in node.conns() {
        let keys = scan_all(&mut conn, &pattern);
        read_node(&mut conn, &ks, keys, &mut d);
    }
    d
}

/// [`digest`] with every remaining TTL as it was at `written_ms` (the server's time in ms when
/// the data was written): a run that took longer than its reference (a kill, a rerun, a busy
/// machine) compares equal when every TTL ran down by the same time.
pub fn digest_since(node: Node<'_>, layout: Layout, prefix: &str, written_ms: i64) -> Digest {
    let d = digest(node, layout, prefix);
    let age = node.now_ms() - written_ms;
    d.aged(age)
}

fn excluded(d: &mut Digest, what: &'static str) {
    *d.excluded.entry(what).or_default() += 1;
}

/// The score an index member must have: exactly this text, or an expiry near this time.
#[derive(Debug)]
enum Score {
    Exact(&'static str),
    Near(i64),
}

/// What the indexes of one node must hold: per index key, member → score.
type Wanted = BTreeMap<Vec<u8>, BTreeMap<Vec<u8>, Score>>;

/// Index entries of one node (cluster layout): per index key, member → score.
type Indexes = BTreeMap<Vec<u8>, BTreeMap<Vec<u8>, String>>;

fn read_node(conn: &mut AdminConn, ks: &Keyspace, keys: BTreeSet<Vec<u8>>, d: &mut Digest) {
    let now = server_ms(conn);
    let rest_of = |key: &[u8]| -> String {
        String::from_utf8(key[ks.prefix().len() + 1..].to_vec()).unwrap()
    };
    let mut items_seen = BTreeSet::new();
    let mut items_named = BTreeSet::new();
    let mut indexes: Indexes = BTreeMap::new();
    let mut wanted: Wanted = BTreeMap::new();
    for key in keys {
        let name = match ks.layout() {
            Layout::Legacy => names::legacy(ks, &key),
            Layout::Cluster => names::cluster(ks, &key),
        };
        match name {
            Name::Log { chat } => read_log(conn, ks, &key, chat, false, d, &mut items_named),
            Name::Drain { chat } => read_log(conn, ks, &key, chat, true, d, &mut items_named),
            Name::LegacyItem { .. } | Name::Item { .. } => {
                items_seen.insert(key);
            }
            Name::Record {
                kind: RecordKind::Schedule,
                id,
            } => {
                let h = hash(conn, &key);
                let text = |f: &[u8]| h.get(f).map(|v| String::from_utf8_lossy(v).into_owned());
                let sched = Sched {
                    token: text(b"token"),
                    holder: text(b"holder"),
                    deleted: h.get(b"deleted".as_slice()).is_some_and(|v| v == b"1"),
                    data: h.get(b"data".as_slice()).cloned().map(Blob),
                };
                if let Some(index) = ks.record_index_of(RecordKind::Schedule, &id) {
                    if !sched.deleted {
                        wanted
                            .entry(index.as_bytes().to_vec())
                            .or_default()
                            .insert(id.clone().into_bytes(), Score::Exact("0"));
                    }
                }
                d.schedules.insert(id, sched);
            }
            Name::Record { kind, id } => {
                let value = Blob(get(conn, &key).unwrap_or_default());
                let ttl = pttl(conn, &key);
                if let Some(index) = ks.record_index_of(kind, &id) {
                    let want = match (kind, ttl) {
                        (RecordKind::Checkpoint, Some(ms)) => Score::Near(now + ms),
                        (RecordKind::Checkpoint, None) => Score::Exact("inf"),
                        _ => Score::Exact("0"),
                    };
                    wanted
                        .entry(index.as_bytes().to_vec())
                        .or_default()
                        .insert(id.clone().into_bytes(), want);
                }
                d.records.insert((kind, id), Timed { value, ttl });
            }
            Name::UserEntry { user, ns, key: k } => {
                let value = Blob(get(conn, &key).unwrap_or_default());
                let ttl = pttl(conn, &key);
                if let Some(index) = ks.user_index(&user) {
                    let want = match ttl {
                        Some(ms) => Score::Near(now + ms),
                        None => Score::Exact("inf"),
                    };
                    let member = format!("{}:{}", enc(&ns), enc(&k));
                    wanted
                        .entry(index.as_bytes().to_vec())
                        .or_default()
                        .insert(member.into_bytes(), want);
                }
                d.user_data.insert((user, ns, k), Timed { value, ttl });
            }
            Name::Fence { key: k } => {
                let value = get(conn, &key).unwrap_or_default();
                d.fences
                    .insert(k, String::from_utf8_lossy(&value).into_owned());
            }
            Name::Term { name } => {
                let value = get(conn, &key).unwrap_or_default();
                d.terms
                    .insert(name, String::from_utf8_lossy(&value).into_owned());
            }
            Name::Cursor => {
                let value = get(conn, &key).unwrap_or_default();
                let name = rest_of(&key)["cursor:".len()..].to_owned();
                d.cursors
                    .insert(name, String::from_utf8_lossy(&value).into_owned());
            }
            Name::Conversation => {
                let value = Blob(get(conn, &key).unwrap_or_default());
                let ttl = pttl(conn, &key);
                let chat = rest_of(&key)["conv:".len()..].to_owned();
                d.conversations.insert(chat, Timed { value, ttl });
            }
            Name::Lease => {
                let h = hash(conn, &key);
                let name = rest_of(&key)["lease:".len()..].to_owned();
                let token = h
                    .get(b"token".as_slice())
                    .map(|v| String::from_utf8_lossy(v).into_owned());
                let holder = h
                    .get(b"holder".as_slice())
                    .filter(|v| !v.is_empty())
                    .map(|v| String::from_utf8_lossy(v).into_owned());
                let until: Option<i64> = h
                    .get(b"until".as_slice())
                    .and_then(|v| std::str::from_utf8(v).ok()?.parse().ok());
                let holder = match (holder, until) {
                    (Some(holder), Some(until)) if until > now => Some((holder, until - now)),
                    _ => None,
                };
                d.leases.insert(name, Lease { token, holder });
            }
            Name::Durable { table } => {
                let rest = rest_of(&key);
                let part = rest[format!("{{durable:{table}}}:").len()..].to_owned();
                let value = canonical_value(conn, &key);
                let ttl = pttl(conn, &key);
                d.durable.insert((table, part), Timed { value, ttl });
            }
            Name::Marker => {
                d.marker = get(conn, &key).map(|v| String::from_utf8_lossy(&v).into_owned());
                excluded(d, "marker");
            }
            Name::RecordIndex { .. } | Name::UserIndex { .. } => {
                excluded(d, "indexes");
                let members = zrange(conn, &key).into_iter().collect();
                indexes.insert(key, members);
            }
            // The lifecycle records are the migration's bookkeeping, not a bot's data.
            Name::Lifecycle { .. } => {}
            Name::Turn { .. } => excluded(d, "turns"),
            Name::LockHolder { .. } => excluded(d, "locks"),
            Name::LeaderHolder { .. } => excluded(d, "leaderships"),
            Name::Heartbeat => excluded(d, "heartbeats"),
            Name::Unknown => {
                excluded(d, "unknown");
                d.unknown_keys
                    .push(String::from_utf8_lossy(&key).into_owned());
            }
        }
    }
    for item in items_seen {
        if !items_named.contains(&item) {
            excluded(d, "orphans");
        }
    }
    check_indexes(d, &indexes, &wanted, now);
}

/// Reads a log (or drain) and its items; members without an item are dangling.
fn read_log(
    conn: &mut AdminConn,
    ks: &Keyspace,
    key: &[u8],
    chat: String,
    drain: bool,
    d: &mut Digest,
    items_named: &mut BTreeSet<Vec<u8>>,
) {
    let mut list = Vec::new();
    for (id, score) in zrange(conn, key) {
        let id = String::from_utf8(id).unwrap();
        let item = ks.message_item(&chat, &id);
        items_named.insert(item.as_bytes().to_vec());
        match get(conn, item.as_bytes()) {
            Some(value) => list.push(Msg {
                id,
                score,
                value: Blob(value),
            }),
            None => excluded(d, "dangling"),
        }
    }
    if !list.is_empty() {
        let map = if drain {
            &mut d.drains
        } else {
            &mut d.messages
        };
        map.insert(chat, list);
    }
}

fn check_indexes(d: &mut Digest, indexes: &Indexes, wanted: &Wanted, now: i64) {
    let show = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    for (index, members) in wanted {
        let present = indexes.get(index);
        for (member, want) in members {
            let found = present.and_then(|m| m.get(member));
            let ok = match (found, want) {
                (None, _) => false,
                (Some(s), Score::Near(at)) => s
                    .parse::<f64>()
                    .is_ok_and(|s| (s as i64 - at).abs() <= TTL_TOLERANCE_MS),
                (Some(s), Score::Exact(score)) => s == score,
            };
            if !ok {
                d.index_problems.push(format!(
                    "{} member {}: {found:?}, wanted {want:?}",
                    show(index),
                    show(member)
                ));
            }
        }
    }
    for (index, members) in indexes {
        for (member, score) in members {
            let expired = score.parse::<f64>().is_ok_and(|s| (s as i64) < now);
            let named = wanted.get(index).is_some_and(|w| w.contains_key(member));
            if !named && !expired {
                d.index_problems.push(format!(
                    "{} member {} (score {score}) names no record",
                    show(index),
                    show(member)
                ));
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Interrupted runs
// ---------------------------------------------------------------------------------------------

/// Where a [`Budget`] cuts a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cut {
    /// The batch past the budget is never sent (a process killed before writing it).
    BeforeSend,
    /// The batch past the budget runs, but its replies are lost (a process killed while the
    /// server worked).
    AfterReply,
}

#[derive(Debug)]
struct BudgetState {
    sent: AtomicUsize,
    limit: usize,
    cut: Cut,
}

/// A shared count of batches: every executor it wraps lets the run send only `limit` batches
/// in all, then fails (see [`Cut`]). With no limit it only counts.
#[derive(Clone, Debug)]
pub struct Budget(Arc<BudgetState>);

impl Budget {
    /// Counts batches, never cuts.
    pub fn unlimited() -> Budget {
        Budget::new(usize::MAX, Cut::BeforeSend)
    }

    /// Cuts the run at batch number `limit` (0: the first).
    pub fn new(limit: usize, cut: Cut) -> Budget {
        Budget(Arc::new(BudgetState {
            sent: AtomicUsize::new(0),
            limit,
            cut,
        }))
    }

    /// Batches sent so far through every wrapped executor.
    pub fn sent(&self) -> usize {
        self.0.sent.load(Ordering::SeqCst)
    }

    /// `inner`, limited by this budget.
    pub fn wrap<E>(&self, inner: E) -> Limited<E> {
        Limited {
            inner,
            budget: self.clone(),
        }
    }
}

/// An executor under a [`Budget`].
#[derive(Clone, Debug)]
pub struct Limited<E> {
    inner: E,
    budget: Budget,
}

impl<E: Executor> Executor for Limited<E> {
    fn run<P: Plan>(&self, plan: P) -> impl Future<Output = Result<P::Output, Error>> + Send {
        self.inner.run(Gated {
            plan,
            budget: self.budget.clone(),
            lose_replies: false,
        })
    }

    fn deployment(&self) -> botmesh_redis_core::Deployment {
        self.inner.deployment()
    }

    fn detach<P: Plan>(&self, plan: P) {
        self.inner.detach(plan)
    }

    fn shutdown(&self, grace: std::time::Duration) -> impl Future<Output = ()> + Send {
        self.inner.shutdown(grace)
    }
}

struct Gated<P> {
    plan: P,
    budget: Budget,
    lose_replies: bool,
}

impl<P: Plan> Gated<P> {
    fn gate(&mut self, step: Step<P::Output>) -> Step<P::Output> {
        match step {
            Step::Send(batch) => {
                let n = self.budget.0.sent.fetch_add(1, Ordering::SeqCst);
                if n >= self.budget.0.limit {
                    match self.budget.0.cut {
                        Cut::BeforeSend => {
                            return Step::Done(Err(Error::NotSent {
                                reason: format!("the test cut the run before batch {n}"),
                            }))
                        }
                        Cut::AfterReply => self.lose_replies = true,
                    }
                }
                Step::Send(batch)
            }
            other => other,
        }
    }
}

impl<P: Plan> Plan for Gated<P> {
    type Output = P::Output;

    fn operation(&self) -> &'static str {
        self.plan.operation()
    }

    fn start(&mut self) -> Step<P::Output> {
        let step = self.plan.start();
        self.gate(step)
    }

    fn resume(&mut self, replies: Vec<Reply>) -> Step<P::Output> {
        if self.lose_replies {
            return Step::Done(Err(Error::ReplyLost {
                addr: botmesh_redis_core::NodeAddr::new("budget-cut.invalid", 1),
                reason: "the test cut the run after this batch ran".into(),
            }));
        }
        let step = self.plan.resume(replies);
        self.gate(step)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seed_generates_the_same_keyspace_every_time() {
        let a = generate("p", 7, 1, 1_000);
        let b = generate("p", 7, 1, 1_000);
        assert_eq!(a.commands, b.commands);
        assert_eq!(a.expected, b.expected);
        assert_ne!(a.commands, generate("p", 8, 1, 1_000).commands);
        // Every generated keyspace has the cases the suites count on.
        for seed in 0..50 {
            let e = generate("p", seed, 1, 1_000).expected;
            assert!(
                e.orphans >= 1 && e.dangling >= 1 && e.unknown >= 1,
                "{e:#?}"
            );
            assert!(
                e.foreign_items >= 1 && e.messages > e.foreign_items,
                "{e:#?}"
            );
            assert!(e.distinct_pairs <= e.messages + e.drain_messages, "{e:#?}");
        }
    }

    fn timed(value: &str, ttl: Option<i64>) -> Timed<Blob> {
        Timed {
            value: Blob(value.as_bytes().to_vec()),
            ttl,
        }
    }

    #[test]
    fn the_diff_names_every_difference_and_tolerates_a_second_of_ttl() {
        let mut a = Digest::default();
        a.records
            .insert((RecordKind::Chat, "c".into()), timed("v", None));
        a.records.insert(
            (RecordKind::Checkpoint, "cp".into()),
            timed("v", Some(60_000)),
        );
        a.messages.insert(
            "chat".into(),
            vec![Msg {
                id: "m".into(),
                score: "1".into(),
                value: Blob(b"x".to_vec()),
            }],
        );
        let mut b = a.clone();
        b.records.insert(
            (RecordKind::Checkpoint, "cp".into()),
            timed("v", Some(59_100)),
        );
        assert_eq!(a.diff(&b), Vec::<String>::new());

        b.records.insert(
            (RecordKind::Checkpoint, "cp".into()),
            timed("v", Some(58_900)),
        );
        b.records
            .insert((RecordKind::Chat, "c".into()), timed("v", Some(1)));
        b.messages.get_mut("chat").unwrap()[0].value = Blob(b"y".to_vec());
        b.fences.insert("f".into(), "1".into());
        let diff = a.diff(&b);
        assert_eq!(diff.len(), 4, "{diff:#?}");
        assert!(
            diff[0].starts_with("message (\"chat\", \"m\")"),
            "{diff:#?}"
        );
        assert!(diff.iter().any(|d| d.contains("unexpected")), "{diff:#?}");
        assert_eq!(b.diff(&Digest::default()).len(), b.len());
    }
}
