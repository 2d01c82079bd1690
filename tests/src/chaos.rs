//! Support for the chaos suites (`tests/tests/chaos_*.rs`): an open-loop load generator, a
//! recorder of every request's outcome, a report printer, a history checker for fences, and
//! the faults the harness does not offer itself (a fourth master joining the cluster, a
//! resharding onto it, a partition of a master's cluster bus).
//!
//! # Open-loop load
//!
//! [`open_loop`] spawns a new request every `interval`, whether or not earlier ones finished,
//! the way independent users of a bot arrive: a stalled master makes requests pile up instead of
//! slowing the arrivals (a closed loop of callers awaiting in turn would hide exactly the faults
//! the suites look for). Every load is bounded in count and time and stops by itself.
//!
//! # Outcomes and reports
//!
//! Each call goes through a [`Recorder`], which keeps the operation, its slot, when it was sent
//! and when it ended, and its outcome as a [`Kind`] taken from the error's variant. A call that
//! does not end within its limit is recorded as [`Kind::Hang`] (and abandoned). [`Report`]
//! prints errors by kind and by time window relative to the first fault, the recovery time of
//! the affected slots and the writes lost.
//!
//! # Short and long runs
//!
//! The suites are short by default (a few seconds of load and one fault per scenario). With
//! `BOTMESH_CHAOS_LONG=1` the load runs longer around each fault and the scenarios that can
//! inject more faults do (three pauses, three kills, one per shard); see [`Scale`] and
//! `docs/reliability.md`.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::future::Future;
use std::net::SocketAddr;
use std::process::Command as Process;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use botmesh_redis_core::keys::{RecordKind, TurnPart};
use botmesh_redis_core::Coordinator;
use botmesh_redis_core::{ClientOptions, Error, Executor, Keyspace};
use botmesh_redis_core::{Limit, Store, StoreOptions};
use botmesh_redis_core::{TurnGrant, TurnOptions};

use crate::conformance::{Client, Runtime};
use crate::harness::{
    parse_cluster_slots, parse_info, poll_until, unique_prefix, AdminConn, ClusterOptions,
    RedisCluster, ServerOptions, SingleNode, SlotRange, SLOT_COUNT,
};

// ---------------------------------------------------------------------------------------------
// Scale
// ---------------------------------------------------------------------------------------------

/// Whether `BOTMESH_CHAOS_LONG` asks for the long run.
pub fn long_run() -> bool {
    std::env::var_os("BOTMESH_CHAOS_LONG").is_some_and(|v| !v.is_empty() && v != "0")
}

/// How much load and how many faults a scenario runs: short by default, long with
/// `BOTMESH_CHAOS_LONG=1`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Scale {
    /// Time between two request arrivals.
    pub interval: Duration,
    /// How long the load runs before the first fault and after the last one heals.
    pub settle: Duration,
    /// How many times a scenario injects its fault (on a fresh shard each time where it can).
    pub faults: usize,
    /// An upper bound on the requests of one load, whatever happens.
    pub max_requests: u64,
    /// An upper bound on the duration of one load, whatever happens.
    pub max_duration: Duration,
}

impl Scale {
    /// The scale chosen by the environment ([`long_run`]).
    pub fn from_env() -> Scale {
        if long_run() {
            Scale {
                interval: Duration::from_micros(2_000),
                settle: Duration::from_secs(5),
                faults: 3,
                max_requests: 400_000,
                max_duration: Duration::from_secs(240),
            }
        } else {
            Scale {
                interval: Duration::from_micros(2_000),
                settle: Duration::from_millis(1_500),
                faults: 1,
                max_requests: 40_000,
                max_duration: Duration::from_secs(60),
            }
        }
    }

    /// Requests per second.
    pub fn rate(&self) -> f64 {
        1.0 / self.interval.as_secs_f64()
    }
}

// ---------------------------------------------------------------------------------------------
// Outcomes
// ---------------------------------------------------------------------------------------------

/// The test's monotonic clock: time since it was made.
#[derive(Clone, Copy, Debug)]
pub struct Clock(Instant);

impl Clock {
    /// A clock starting now.
    pub fn new() -> Clock {
        Clock(Instant::now())
    }

    /// Time since the clock started.
    pub fn now(&self) -> Duration {
        self.0.elapsed()
    }
}

impl Default for Clock {
    fn default() -> Clock {
        Clock::new()
    }
}

/// How a call ended, by the error's variant.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    /// It succeeded.
    Ok,
    /// `Error::ReplyLost`: sent, no reply; outcome unknown.
    ReplyLost,
    /// `Error::Timeout { outcome_unknown: true }`.
    TimeoutUnknown,
    /// `Error::Timeout { outcome_unknown: false }`.
    TimeoutNotRun,
    /// `Error::Connect`.
    Connect,
    /// `Error::NotSent`.
    NotSent,
    /// `Error::RetriesExhausted` (the last reply's code is in the detail).
    RetriesExhausted,
    /// `Error::TooManyRedirections`.
    TooManyRedirections,
    /// `Error::Server` (the code is in the detail).
    Server,
    /// `Error::NotHolder`.
    NotHolder,
    /// `Error::Stale`.
    Stale,
    /// `Error::NotReplicated`.
    NotReplicated,
    /// `Error::ReplicationUnknown`: granted, then the connection went before `WAIT` answered.
    ReplicationUnknown,
    /// `Error::Closed`.
    Closed,
    /// Any other variant.
    Other,
    /// The call did not end within its limit; the recorder gave up on it.
    Hang,
}

impl Kind {
    /// The kind of an error, and a short detail (the server's code word, or the reason).
    pub fn of(error: &Error) -> (Kind, String) {
        match error {
            Error::ReplyLost { addr, reason } => (Kind::ReplyLost, format!("{addr}: {reason}")),
            Error::Timeout { outcome_unknown } => (
                if *outcome_unknown {
                    Kind::TimeoutUnknown
                } else {
                    Kind::TimeoutNotRun
                },
                String::new(),
            ),
            Error::Connect { addr, reason } => (Kind::Connect, format!("{addr}: {reason}")),
            Error::NotSent { reason } => (Kind::NotSent, reason.clone()),
            Error::RetriesExhausted { last, .. } => (Kind::RetriesExhausted, last.code().into()),
            Error::TooManyRedirections { last, .. } => {
                (Kind::TooManyRedirections, last.code().into())
            }
            Error::Server(e) => (Kind::Server, e.code().into()),
            Error::NotHolder { what } => (Kind::NotHolder, what.clone()),
            Error::Stale { what, .. } => (Kind::Stale, what.clone()),
            Error::NotReplicated { what, .. } => (Kind::NotReplicated, what.clone()),
            Error::ReplicationUnknown { what } => (Kind::ReplicationUnknown, what.clone()),
            Error::Closed => (Kind::Closed, String::new()),
            other => (Kind::Other, other.to_string()),
        }
    }

    /// The kind with its code word for server replies (`Server NOREPLICAS`), for tables.
    fn label(self, detail: &str) -> String {
        match self {
            Kind::Server | Kind::RetriesExhausted | Kind::TooManyRedirections => {
                format!("{self:?} {detail}")
            }
            _ => format!("{self:?}"),
        }
    }
}

/// One recorded call.
#[derive(Clone, Debug)]
pub struct Outcome {
    /// The operation (`save`, `list_messages`, `lock`, ...).
    pub op: &'static str,
    /// What it was about: a chat, a lock key, a leadership name.
    pub target: String,
    /// The request's number in its load (message ids are made of it).
    pub n: u64,
    /// The slot of its keys, or `None` for a call that spans slots (listings).
    pub slot: Option<u16>,
    /// Whether it writes.
    pub write: bool,
    /// When it was sent, on the test's clock.
    pub sent: Duration,
    /// When it ended.
    pub ended: Duration,
    /// How it ended.
    pub kind: Kind,
    /// A number the call yielded (a fence, term or ticket), if any.
    pub value: Option<u64>,
    /// The error's detail.
    pub detail: String,
}

impl Outcome {
    /// Whether it succeeded.
    pub fn ok(&self) -> bool {
        self.kind == Kind::Ok
    }

    /// How long it took.
    pub fn latency(&self) -> Duration {
        self.ended.saturating_sub(self.sent)
    }
}

/// What a call is, for the [`Recorder`].
#[derive(Clone, Debug)]
pub struct Call {
    /// The operation.
    pub op: &'static str,
    /// A chat, lock key or name.
    pub target: String,
    /// The request's number.
    pub n: u64,
    /// The slot of its keys (`None` across slots).
    pub slot: Option<u16>,
    /// Whether it writes.
    pub write: bool,
    /// After this long it is recorded as [`Kind::Hang`].
    pub limit: Duration,
}

/// Records the outcome of every call of a load (cheap to clone).
#[derive(Clone, Debug)]
pub struct Recorder {
    clock: Clock,
    outcomes: Arc<Mutex<Vec<Outcome>>>,
}

impl Recorder {
    /// A recorder on `clock`.
    pub fn new(clock: Clock) -> Recorder {
        Recorder {
            clock,
            outcomes: Arc::new(Mutex::new(Vec::new())),
        }
    }

    /// The clock.
    pub fn clock(&self) -> Clock {
        self.clock
    }

    /// Runs `call` and records its outcome; `value` picks the number to keep from a success.
    /// Returns the result, or `None` when the call hung past its limit.
    pub async fn record<T, F>(
        &self,
        call: Call,
        value: impl FnOnce(&T) -> Option<u64>,
        future: F,
    ) -> Option<Result<T, Error>>
    where
        F: Future<Output = Result<T, Error>>,
    {
        let sent = self.clock.now();
        let result = tokio::time::timeout(call.limit, future).await;
        let ended = self.clock.now();
        let (kind, detail, kept) = match &result {
            Ok(Ok(v)) => (Kind::Ok, String::new(), value(v)),
            Ok(Err(e)) => {
                let (kind, detail) = Kind::of(e);
                (kind, detail, None)
            }
            Err(_) => (Kind::Hang, format!("no end after {:?}", call.limit), None),
        };
        self.outcomes.lock().unwrap().push(Outcome {
            op: call.op,
            target: call.target,
            n: call.n,
            slot: call.slot,
            write: call.write,
            sent,
            ended,
            kind,
            value: kept,
            detail,
        });
        result.ok()
    }

    /// Every outcome so far, in the order the calls ended.
    pub fn outcomes(&self) -> Vec<Outcome> {
        self.outcomes.lock().unwrap().clone()
    }

    /// How many calls of `op` ended so far, and how many of them succeeded.
    pub fn count(&self, op: &str) -> (usize, usize) {
        let outcomes = self.outcomes.lock().unwrap();
        let of_op = outcomes.iter().filter(|o| o.op == op);
        let all = of_op.clone().count();
        (all, of_op.filter(|o| o.ok()).count())
    }

    /// The first success that matches `filter` and was sent at or after `since`.
    pub fn first_success(
        &self,
        since: Duration,
        filter: impl Fn(&Outcome) -> bool,
    ) -> Option<Outcome> {
        self.outcomes
            .lock()
            .unwrap()
            .iter()
            .filter(|o| o.ok() && o.sent >= since && filter(o))
            .min_by_key(|o| o.ended)
            .cloned()
    }
}

// ---------------------------------------------------------------------------------------------
// The open-loop load
// ---------------------------------------------------------------------------------------------

/// A running open-loop load; see [`open_loop`].
pub struct Load {
    stop: Arc<AtomicBool>,
    spawned: Arc<AtomicU64>,
    ticker: tokio::task::JoinHandle<(u64, usize)>,
}

/// What a load did, once stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LoadSummary {
    /// Requests spawned.
    pub spawned: u64,
    /// The most requests in flight at once.
    pub max_in_flight: usize,
}

/// Starts an open-loop load: `request(n)` is spawned every `scale.interval` (arrivals that fall
/// behind are caught up at once, so the rate holds on average), for `n = 0, 1, ...`, until
/// [`Load::stop`], `scale.max_requests` requests or `scale.max_duration`, whichever comes first.
/// The requests bound their own time (through the [`Recorder`]).
pub fn open_loop<F, Fut>(scale: Scale, mut request: F) -> Load
where
    F: FnMut(u64) -> Fut + Send + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    let stop = Arc::new(AtomicBool::new(false));
    let spawned = Arc::new(AtomicU64::new(0));
    let (stop2, spawned2) = (Arc::clone(&stop), Arc::clone(&spawned));
    let ticker = tokio::spawn(async move {
        let mut tasks = tokio::task::JoinSet::new();
        let mut ticks = tokio::time::interval(scale.interval);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
        let end = tokio::time::Instant::now() + scale.max_duration;
        let mut n = 0u64;
        let mut max_in_flight = 0usize;
        while n < scale.max_requests && !stop2.load(Ordering::Relaxed) {
            let tick = ticks.tick().await;
            if tick >= end {
                break;
            }
            tasks.spawn(request(n));
            n += 1;
            spawned2.store(n, Ordering::Relaxed);
            // Reap finished requests as we go, so the set holds only those in flight.
            while let Some(done) = tasks.try_join_next() {
                done.expect("a load request panicked");
            }
            max_in_flight = max_in_flight.max(tasks.len());
        }
        while let Some(done) = tasks.join_next().await {
            done.expect("a load request panicked");
        }
        (n, max_in_flight)
    });
    Load {
        stop,
        spawned,
        ticker,
    }
}

impl Load {
    /// Requests spawned so far.
    pub fn spawned(&self) -> u64 {
        self.spawned.load(Ordering::Relaxed)
    }

    /// Waits until `more` requests beyond `from` were spawned (at most `within`, else panics).
    pub async fn advance(&self, from: u64, more: u64, within: Duration) {
        crate::harness::eventually(within, "the load to spawn more requests", || {
            std::future::ready((self.spawned() >= from + more).then_some(()))
        })
        .await;
    }

    /// Stops spawning new requests; [`Load::stop`] then waits for those in flight. Signal every
    /// load of a test first, so that none keeps arriving while another drains.
    pub fn halt(&self) {
        self.stop.store(true, Ordering::Relaxed);
    }

    /// Stops spawning and waits for every request in flight to end (each bounds its own time).
    pub async fn stop(self) -> LoadSummary {
        self.stop.store(true, Ordering::Relaxed);
        let (spawned, max_in_flight) = self.ticker.await.expect("the load's ticker panicked");
        LoadSummary {
            spawned,
            max_in_flight,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Reports
// ---------------------------------------------------------------------------------------------

/// A fault as the report shows it.
#[derive(Clone, Debug)]
pub struct Fault {
    /// What was done (`SIGSTOP 127.0.0.1:20001`).
    pub what: String,
    /// When it began, on the test's clock.
    pub at: Duration,
    /// When it was healed (or the cluster had repaired itself), if it was.
    pub healed: Option<Duration>,
    /// The slots it hit, for its recovery time; empty: every call the report's `affected`
    /// accepts (with several faults, give each its own slots).
    pub slots: BTreeSet<u16>,
}

/// Acknowledged writes checked afterwards.
#[derive(Clone, Debug, Default)]
pub struct Losses {
    /// Acknowledged writes checked.
    pub checked: usize,
    /// Missing ones inside the documented asynchronous-replication window, with why.
    pub allowed: Vec<String>,
    /// Missing ones outside it (each one fails the test).
    pub unexplained: Vec<String>,
}

/// A scenario's figures, printed by [`Report::print`].
pub struct Report<'a> {
    /// The scenario and driver.
    pub title: String,
    /// The load.
    pub scale: Scale,
    /// What the load did.
    pub load: LoadSummary,
    /// Every outcome.
    pub outcomes: &'a [Outcome],
    /// The faults, in order.
    pub faults: &'a [Fault],
    /// Which calls the faults affect (their slots were on the faulty node).
    pub affected: &'a dyn Fn(&Outcome) -> bool,
    /// The write check.
    pub losses: &'a Losses,
}

/// Width of a report's time windows.
const WINDOW: Duration = Duration::from_millis(500);

impl Report<'_> {
    /// For each fault, the first success of an affected call sent after it began, as time
    /// since the fault; `None` when there was none.
    pub fn recoveries(&self) -> Vec<Option<Duration>> {
        self.first_successes()
            .into_iter()
            .zip(self.faults)
            .map(|(o, fault)| o.map(|o| o.ended - fault.at))
            .collect()
    }

    fn first_successes(&self) -> Vec<Option<&Outcome>> {
        self.faults
            .iter()
            .map(|fault| {
                self.outcomes
                    .iter()
                    .filter(|o| o.ok() && o.sent >= fault.at)
                    .filter(|o| match o.slot {
                        Some(s) if !fault.slots.is_empty() => fault.slots.contains(&s),
                        _ => fault.slots.is_empty() && (self.affected)(o),
                    })
                    .min_by_key(|o| o.ended)
            })
            .collect()
    }

    /// The report as text.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let o = self.outcomes;
        let end = o.iter().map(|o| o.ended).max().unwrap_or_default();
        let _ = writeln!(
            out,
            "=== chaos: {} ===\nload: open loop, {:.0} req/s, {} requests in {:.1} s, at most {} in flight",
            self.title,
            self.scale.rate(),
            self.load.spawned,
            end.as_secs_f64(),
            self.load.max_in_flight
        );
        for f in self.faults {
            let healed = f
                .healed
                .map(|h| format!("healed at {:.3} s", h.as_secs_f64()))
                .unwrap_or_else(|| "not healed".into());
            let _ = writeln!(
                out,
                "fault: {} at {:.3} s, {healed}",
                f.what,
                f.at.as_secs_f64()
            );
        }
        // Calls by operation and kind.
        let mut table: BTreeMap<(&str, String), usize> = BTreeMap::new();
        for x in o {
            *table.entry((x.op, x.kind.label(&x.detail))).or_default() += 1;
        }
        let _ = writeln!(out, "calls by operation and outcome:");
        for ((op, kind), n) in &table {
            let _ = writeln!(out, "  {op:<14} {kind:<30} {n}");
        }
        // Errors by window relative to the first fault.
        if let Some(first) = self.faults.first() {
            let mut windows: BTreeMap<i64, BTreeMap<String, usize>> = BTreeMap::new();
            for x in o.iter().filter(|x| !x.ok()) {
                let rel = x.ended.as_millis() as i64 - first.at.as_millis() as i64;
                let w = rel.div_euclid(WINDOW.as_millis() as i64);
                let affected = if (self.affected)(x) { "" } else { " (other)" };
                *windows
                    .entry(w)
                    .or_default()
                    .entry(format!("{} {}{affected}", x.op, x.kind.label(&x.detail)))
                    .or_default() += 1;
            }
            let _ = writeln!(
                out,
                "errors by end time, {} ms windows from the first fault:",
                WINDOW.as_millis()
            );
            if windows.is_empty() {
                let _ = writeln!(out, "  none");
            }
            for (w, kinds) in windows {
                let from = w * WINDOW.as_millis() as i64;
                let list: Vec<String> = kinds.iter().map(|(k, n)| format!("{k} x{n}")).collect();
                let _ = writeln!(
                    out,
                    "  [{:+.1} s, {:+.1} s): {}",
                    from as f64 / 1000.0,
                    (from + WINDOW.as_millis() as i64) as f64 / 1000.0,
                    list.join(", ")
                );
            }
        }
        for (f, first) in self.faults.iter().zip(self.first_successes()) {
            let r = first.map(|o| o.ended - f.at);
            let affected: Vec<&Outcome> = o
                .iter()
                .filter(|x| {
                    (self.affected)(x) && x.sent >= f.at && x.sent < f.healed.unwrap_or(end)
                })
                .collect();
            let slowest = affected
                .iter()
                .map(|x| x.latency())
                .max()
                .unwrap_or_default();
            let _ = writeln!(
                out,
                "recovery after '{}': first success on the affected slots {}; slowest affected call {:.3} s",
                f.what,
                r.zip(first)
                    .map(|(r, o)| format!(
                        "{:.3} s after the fault ({} {} slot {:?}, sent at {:.3} s)",
                        r.as_secs_f64(),
                        o.op,
                        o.target,
                        o.slot,
                        o.sent.as_secs_f64()
                    ))
                    .unwrap_or_else(|| "never".into()),
                slowest.as_secs_f64()
            );
        }
        let _ = writeln!(
            out,
            "writes checked: {}, lost inside the async-replication window: {}, lost outside it: {}",
            self.losses.checked,
            self.losses.allowed.len(),
            self.losses.unexplained.len()
        );
        for l in self.losses.allowed.iter().take(10) {
            let _ = writeln!(out, "  allowed loss: {l}");
        }
        for l in self.losses.unexplained.iter().take(20) {
            let _ = writeln!(out, "  UNEXPLAINED loss: {l}");
        }
        out
    }

    /// Prints the report on stderr (shown with `--nocapture`).
    pub fn print(&self) {
        eprintln!("{}", self.render());
    }
}

// ---------------------------------------------------------------------------------------------
// Reading back and checking histories
// ---------------------------------------------------------------------------------------------

/// The master of `slot` in `ranges`.
pub fn owner(ranges: &[SlotRange], slot: u16) -> SocketAddr {
    ranges
        .iter()
        .find(|r| (r.start..=r.end).contains(&slot))
        .map(|r| r.master)
        .unwrap_or_else(|| panic!("no master serves slot {slot}"))
}

/// The slots `master` serves in `ranges`.
pub fn slots_of(ranges: &[SlotRange], master: SocketAddr) -> BTreeSet<u16> {
    ranges
        .iter()
        .filter(|r| r.master == master)
        .flat_map(|r| r.start..=r.end)
        .collect()
}

/// `CLUSTER SLOTS` of one node, any node (also one the harness did not start).
pub fn slots_at(addr: SocketAddr) -> Result<Vec<SlotRange>, String> {
    parse_cluster_slots(&AdminConn::connect(addr)?.cmd(&["CLUSTER", "SLOTS"])?)
}

/// One command, as its arguments.
pub type Command = Vec<Vec<u8>>;

/// Runs `commands` as one pipeline on `addr` (a fresh admin connection).
pub fn pipeline_at(
    addr: SocketAddr,
    commands: &[Vec<Vec<u8>>],
) -> Result<Vec<crate::Value>, String> {
    let mut conn = AdminConn::connect(addr)?;
    let mut replies = Vec::with_capacity(commands.len());
    for chunk in commands.chunks(1000) {
        replies.extend(conn.pipeline(chunk)?);
    }
    Ok(replies)
}

/// One grant of a fence, term or ticket, for [`check_monotonic`].
#[derive(Clone, Debug)]
pub struct Grant {
    /// The lock key, leadership name or chat.
    pub name: String,
    /// The number granted.
    pub value: u64,
    /// When its request was sent.
    pub sent: Duration,
    /// When its reply came.
    pub granted: Duration,
}

impl Grant {
    /// The successful grants of `op` among `outcomes` (their `value`).
    pub fn of(outcomes: &[Outcome], op: &str) -> Vec<Grant> {
        outcomes
            .iter()
            .filter(|o| o.op == op && o.ok())
            .filter_map(|o| {
                Some(Grant {
                    name: o.target.clone(),
                    value: o.value?,
                    sent: o.sent,
                    granted: o.ended,
                })
            })
            .collect()
    }
}

/// Checks that numbers never go backwards per name, as real time shows it: a grant whose
/// request was sent after another grant's reply came has a larger number. Returns the
/// violations `(earlier, later)`, each judged by `allowed` first (a documented loss window);
/// the second list holds the ones `allowed` refused.
pub fn check_monotonic(
    grants: &[Grant],
    allowed: impl Fn(&Grant, &Grant) -> bool,
) -> (Vec<String>, Vec<String>) {
    let mut by_name: BTreeMap<&str, Vec<&Grant>> = BTreeMap::new();
    for g in grants {
        by_name.entry(&g.name).or_default().push(g);
    }
    let (mut ok, mut bad) = (Vec::new(), Vec::new());
    for (name, mut list) in by_name {
        list.sort_by_key(|g| g.granted);
        // The largest number whose reply had come before each request: scan in reply order.
        for (i, later) in list.iter().enumerate() {
            for earlier in &list[..i] {
                if earlier.granted < later.sent && earlier.value >= later.value {
                    let text = format!(
                        "{name}: {} granted at {:?}, then {} requested at {:?} and granted at {:?}",
                        earlier.value, earlier.granted, later.value, later.sent, later.granted
                    );
                    if allowed(earlier, later) {
                        ok.push(text);
                    } else {
                        bad.push(text);
                    }
                }
            }
        }
    }
    (ok, bad)
}

// ---------------------------------------------------------------------------------------------
// A fourth master, and resharding onto it
// ---------------------------------------------------------------------------------------------

/// A cluster-mode `redis-server` that joins an existing [`RedisCluster`] as an empty master.
/// It dies with its [`SingleNode`] (dropped, or when the test process ends).
pub struct ExtraMaster {
    node: SingleNode,
    id: String,
}

impl ExtraMaster {
    /// Starts a node with the cluster's node timeout and a cluster-bus port fit for the server
    /// version (`ServerOptions::cluster_bus`), `CLUSTER MEET`s it from a cluster node, and
    /// waits until every node of `cluster` knows it as a connected master.
    pub fn join(cluster: &RedisCluster) -> Result<ExtraMaster, String> {
        let timeout = node_timeout_ms(cluster)?;
        let mut last = String::new();
        for _ in 0..8 {
            let options = ServerOptions::new()
                .config("cluster-enabled yes")
                .config("cluster-config-file nodes.conf")
                .config(format!("cluster-node-timeout {timeout}"))
                .config("cluster-allow-replica-migration no")
                .cluster_bus();
            let node = match SingleNode::try_start(options) {
                Ok(node) => node,
                Err(e) => {
                    last = e;
                    continue;
                }
            };
            let bus = node
                .server()
                .cluster_port()
                .ok_or("the new node has no cluster-bus port")?;
            let id = node
                .conn()?
                .cmd(&["CLUSTER", "MYID"])?
                .as_str()
                .map(str::to_owned)
                .ok_or("CLUSTER MYID: not a string")?;
            let seed = cluster.nodes()[0];
            AdminConn::connect(seed)?.cmd(&[
                "CLUSTER",
                "MEET",
                "127.0.0.1",
                &node.addr().port().to_string(),
                &bus.to_string(),
            ])?;
            let extra = ExtraMaster { node, id };
            let deadline = Instant::now() + Duration::from_secs(30);
            poll_until(deadline, "every node knows the new master", || {
                for addr in cluster.nodes().into_iter().chain([extra.addr()]) {
                    let nodes = AdminConn::connect(addr)?.cmd(&["CLUSTER", "NODES"])?;
                    let text = nodes.as_str().unwrap_or_default().to_owned();
                    let line = text
                        .lines()
                        .find(|l| l.starts_with(&extra.id))
                        .ok_or_else(|| format!("{addr} does not know the new node"))?;
                    if !line.contains("master")
                        || line.contains("handshake")
                        || line.contains("fail")
                    {
                        return Err(format!("{addr} sees the new node as: {line}"));
                    }
                    // It must also know every other node.
                    if addr == extra.addr() && text.lines().count() < cluster.nodes().len() + 1 {
                        return Err("the new node does not know every node yet".into());
                    }
                }
                Ok(())
            })?;
            // A new node stays in the fail state for a while after it joined: a
            // MIGRATE into it would get CLUSTERDOWN.
            poll_until(deadline, "the new master's cluster state is ok", || {
                let info = AdminConn::connect(extra.addr())?.cmd(&["CLUSTER", "INFO"])?;
                let info = parse_info(info.as_str().unwrap_or_default());
                match info.get("cluster_state").map(String::as_str) {
                    Some("ok") => Ok(()),
                    other => Err(format!("cluster_state {other:?}")),
                }
            })?;
            return Ok(extra);
        }
        Err(format!("could not start a fourth master: {last}"))
    }

    /// Its client address.
    pub fn addr(&self) -> SocketAddr {
        self.node.addr()
    }

    /// Its node id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The process.
    pub fn node(&self) -> &SingleNode {
        &self.node
    }
}

/// Moves up to `count` keys of `slot` from the node of `conn` (migrating it) to `target`
/// with one `MIGRATE`; the number moved, 0 once the slot holds none.
pub fn migrate_batch(
    conn: &mut AdminConn,
    slot: u16,
    count: usize,
    target: SocketAddr,
) -> Result<usize, String> {
    let keys = conn.cmd(&[
        "CLUSTER",
        "GETKEYSINSLOT",
        &slot.to_string(),
        &count.to_string(),
    ])?;
    let keys: Vec<Vec<u8>> = keys
        .as_array()
        .ok_or("GETKEYSINSLOT: not an array")?
        .iter()
        .filter_map(|k| k.as_bytes().map(<[u8]>::to_vec))
        .collect();
    if keys.is_empty() {
        return Ok(0);
    }
    let port = target.port().to_string();
    let mut args: Vec<&[u8]> = vec![
        b"MIGRATE",
        b"127.0.0.1",
        port.as_bytes(),
        b"",
        b"0",
        b"10000",
        b"REPLACE",
        b"KEYS",
    ];
    args.extend(keys.iter().map(Vec::as_slice));
    conn.cmd(&args)?;
    Ok(keys.len())
}

/// The cluster's `cluster-node-timeout` in ms, as its first node has it.
fn node_timeout_ms(cluster: &RedisCluster) -> Result<i64, String> {
    let addr = *cluster
        .nodes()
        .first()
        .ok_or("the cluster has no live node")?;
    let reply = AdminConn::connect(addr)?.cmd(&["CONFIG", "GET", "cluster-node-timeout"])?;
    reply
        .as_array()
        .and_then(|items| items.get(1))
        .and_then(crate::Value::as_int)
        .ok_or_else(|| format!("CONFIG GET cluster-node-timeout: {reply:?}"))
}

/// Moves `slots` from whichever master owns each to `target` (`id`), the way
/// `redis-cli --cluster reshard` does: `IMPORTING` on the target, `MIGRATING` on the source,
/// keys moved with `MIGRATE`, then `SETSLOT NODE` on the target, the source and every other
/// master. The steps of all the given slots are pipelined (a slot's keys move between its
/// `MIGRATING` and its `NODE`, as in one slot's move). `masters` must list every master (the new
/// one included). Returns the keys moved.
pub fn reshard(
    masters: &[SocketAddr],
    slots: &[u16],
    target: SocketAddr,
    target_id: &str,
) -> Result<usize, String> {
    let ranges = slots_at(target)?;
    let ids: BTreeMap<SocketAddr, String> = ranges
        .iter()
        .map(|r| (r.master, r.master_id.clone()))
        .collect();
    let mut by_source: BTreeMap<SocketAddr, Vec<u16>> = BTreeMap::new();
    for &slot in slots {
        let source = owner(&ranges, slot);
        if source != target {
            by_source.entry(source).or_default().push(slot);
        }
    }
    let cmd =
        |parts: &[&str]| -> Vec<Vec<u8>> { parts.iter().map(|p| p.as_bytes().to_vec()).collect() };
    let check =
        |addr: SocketAddr, replies: Vec<crate::Value>| -> Result<Vec<crate::Value>, String> {
            match replies.iter().find_map(crate::Value::as_error) {
                Some(e) => Err(format!("{addr}: {e}")),
                None => Ok(replies),
            }
        };
    let mut moved = 0;
    for (source, slots) in &by_source {
        let source_id = ids.get(source).ok_or("source without an id")?;
        let importing: Vec<_> = slots
            .iter()
            .map(|s| cmd(&["CLUSTER", "SETSLOT", &s.to_string(), "IMPORTING", source_id]))
            .collect();
        check(target, pipeline_at(target, &importing)?)?;
        let migrating: Vec<_> = slots
            .iter()
            .map(|s| cmd(&["CLUSTER", "SETSLOT", &s.to_string(), "MIGRATING", target_id]))
            .collect();
        check(*source, pipeline_at(*source, &migrating)?)?;
        // Most slots hold no key: ask for every slot's keys at once, then drain the others.
        let probes: Vec<_> = slots
            .iter()
            .map(|s| cmd(&["CLUSTER", "COUNTKEYSINSLOT", &s.to_string()]))
            .collect();
        let counts = check(*source, pipeline_at(*source, &probes)?)?;
        let mut conn = AdminConn::connect(*source)?;
        for (slot, count) in slots.iter().zip(counts) {
            if count.as_int() == Some(0) {
                continue;
            }
            loop {
                match migrate_batch(&mut conn, *slot, 100, target)? {
                    0 => break,
                    n => moved += n,
                }
            }
        }
        let assign: Vec<_> = slots
            .iter()
            .map(|s| cmd(&["CLUSTER", "SETSLOT", &s.to_string(), "NODE", target_id]))
            .collect();
        let mut order = vec![target, *source];
        order.extend(masters.iter().filter(|m| **m != target && *m != source));
        for addr in order {
            check(addr, pipeline_at(addr, &assign)?)?;
        }
    }
    Ok(moved)
}

/// Waits until every node in `nodes` maps all 16384 slots the same way and says
/// `cluster_state:ok`.
pub fn wait_agreement(nodes: &[SocketAddr], within: Duration) -> Result<Vec<SlotRange>, String> {
    poll_until(
        Instant::now() + within,
        "every node agrees on the slots",
        || {
            let mut reference: Option<Vec<(u16, u16, SocketAddr)>> = None;
            let mut ranges_out = Vec::new();
            for &addr in nodes {
                let mut conn = AdminConn::connect(addr)?;
                let info = conn.cmd(&["CLUSTER", "INFO"])?;
                let info = parse_info(info.as_str().unwrap_or_default());
                if info.get("cluster_state").map(String::as_str) != Some("ok") {
                    return Err(format!(
                        "{addr}: cluster_state {:?}",
                        info.get("cluster_state")
                    ));
                }
                let ranges = parse_cluster_slots(&conn.cmd(&["CLUSTER", "SLOTS"])?)?;
                let mut owners: Vec<_> =
                    ranges.iter().map(|r| (r.start, r.end, r.master)).collect();
                owners.sort();
                let covered: usize = owners.iter().map(|(a, b, _)| usize::from(b - a) + 1).sum();
                if covered != usize::from(SLOT_COUNT) {
                    return Err(format!("{addr} covers {covered} slots"));
                }
                match &reference {
                    None => {
                        reference = Some(owners);
                        ranges_out = ranges;
                    }
                    Some(r) if *r != owners => return Err(format!("{addr} disagrees")),
                    Some(_) => {}
                }
            }
            Ok(ranges_out)
        },
    )
}

// ---------------------------------------------------------------------------------------------
// A partition of one master's cluster bus
// ---------------------------------------------------------------------------------------------

/// A partition that cuts one node off the cluster bus while clients still reach it, with
/// `iptables` rules on the loopback interface; removed when dropped.
///
/// Two rules: everything sent to the node's bus port is dropped (the links the other nodes
/// opened to it), and every cluster-bus message that names the node as its sender is dropped
/// (the links it opened to them: a bus message starts with a fixed header whose sender field,
/// the node id, sits in the first bytes of the packet's payload; the id of another node never
/// appears there). Other nodes' gossip about it comes after the 2 KiB slot bitmap of the header
/// and still flows, as in a real partition.
#[derive(Debug)]
pub struct BusPartition {
    rules: Vec<Vec<String>>,
}

/// The message when `iptables` cannot be used.
pub const IPTABLES_MISSING: &str = "iptables is needed for the partition scenario (run as root, \
     with `apt-get install -y iptables`)";

impl BusPartition {
    /// Cuts the node (`bus_port`, `node_id`) off the bus of the nodes listening on `peer_bus_ports`.
    pub fn cut(
        bus_port: u16,
        node_id: &str,
        peer_bus_ports: &[u16],
    ) -> Result<BusPartition, String> {
        let comment = format!("botmesh-chaos-{}", std::process::id());
        let peers = peer_bus_ports
            .iter()
            .map(u16::to_string)
            .collect::<Vec<_>>()
            .join(",");
        let rules = vec![
            vec![
                "INPUT",
                "-i",
                "lo",
                "-p",
                "tcp",
                "--dport",
                &bus_port.to_string(),
                "-m",
                "comment",
                "--comment",
                &comment,
                "-j",
                "DROP",
            ]
            .into_iter()
            .map(str::to_owned)
            .collect::<Vec<_>>(),
            vec![
                "INPUT",
                "-i",
                "lo",
                "-p",
                "tcp",
                "-m",
                "multiport",
                "--dports",
                &peers,
                "-m",
                "string",
                "--algo",
                "bm",
                "--string",
                node_id,
                "--from",
                "40",
                "--to",
                "400",
                "-m",
                "comment",
                "--comment",
                &comment,
                "-j",
                "DROP",
            ]
            .into_iter()
            .map(str::to_owned)
            .collect(),
        ];
        let mut partition = BusPartition { rules: Vec::new() };
        for rule in rules {
            iptables("-A", &rule)?;
            partition.rules.push(rule);
        }
        Ok(partition)
    }

    /// Removes the rules.
    pub fn heal(mut self) -> Result<(), String> {
        self.remove()
    }

    fn remove(&mut self) -> Result<(), String> {
        let mut errors = Vec::new();
        for rule in self.rules.drain(..) {
            if let Err(e) = iptables("-D", &rule) {
                errors.push(e);
            }
        }
        if errors.is_empty() {
            Ok(())
        } else {
            Err(errors.join("; "))
        }
    }
}

impl Drop for BusPartition {
    fn drop(&mut self) {
        if let Err(e) = self.remove() {
            eprintln!("could not remove the partition's iptables rules: {e}");
        }
    }
}

fn iptables(action: &str, rule: &[String]) -> Result<(), String> {
    let output = Process::new("iptables")
        .arg(action)
        .args(rule)
        .output()
        .map_err(|e| format!("{IPTABLES_MISSING}: {e}"))?;
    if output.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{IPTABLES_MISSING}: iptables {action} {} failed: {}",
            rule.join(" "),
            String::from_utf8_lossy(&output.stderr)
        ))
    }
}

// ---------------------------------------------------------------------------------------------
// The store and coordination workload
// ---------------------------------------------------------------------------------------------

/// One kind of request of a [`Workload`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// `save_message` of a new message `m<n>` (time `n`) in one of the chats.
    Save,
    /// The first page (50) of a chat's messages.
    ListMessages,
    /// `lock` of one of a few keys, then `unlock` when granted (the fence is recorded).
    Lock,
    /// `acquire_turn` on one of a few turn chats, then `release_turn` (the ticket is recorded).
    Turn,
    /// `campaign` for one of a few leaderships by a new candidate, then `resign` when won (the
    /// term is recorded).
    Leader,
    /// `upsert_chat` of a new chat record `rec<n>`.
    Upsert,
    /// The first page (20) of the chat records (32 bucket indexes, every master).
    ListChats,
    /// The replica's heartbeat, which its turns need.
    Heartbeat,
}

/// The standard mix: over half the requests save messages, the rest list, lock, take turns
/// (one in 20: a turn queue is a few round trips per grant), campaign and upsert records.
pub const STORE_AND_COORDINATION: &[Op] = &[
    Op::Save,
    Op::ListMessages,
    Op::Save,
    Op::Lock,
    Op::Save,
    Op::Turn,
    Op::Save,
    Op::Upsert,
    Op::Save,
    Op::Leader,
    Op::Save,
    Op::ListChats,
    Op::Save,
    Op::Lock,
    Op::Save,
    Op::ListMessages,
    Op::Save,
    Op::Save,
    Op::Save,
    Op::Heartbeat,
];

/// The id of the replica whose coordinator takes the workload's turns.
pub const REPLICA: &str = "chaos-replica";

/// Turn settings of the workload: short, so that waits end within a few seconds.
pub fn turn_options() -> TurnOptions {
    TurnOptions {
        ttl: Duration::from_secs(5),
        poll_interval: Duration::from_millis(20),
        claim_timeout: Duration::from_secs(1),
        wait_timeout: Duration::from_secs(4),
        ..TurnOptions::default()
    }
}

/// Fails the test with every failure a scenario collected (the first 40 of them in full).
pub fn assert_no_failures(failures: &[String]) {
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures[..failures.len().min(40)].join("\n")
    );
}

/// Starts a cluster off the async runtime's threads (starting one blocks for seconds).
pub async fn start_cluster(options: ClusterOptions) -> Arc<RedisCluster> {
    let cluster = tokio::task::spawn_blocking(move || RedisCluster::start(options))
        .await
        .expect("the cluster's start panicked");
    Arc::new(cluster)
}

/// A started cluster-layout store under a new prefix named after `name`, on a client of
/// `options` with the given request timeout.
pub async fn started_store<R: Runtime>(
    options: ClientOptions,
    request_timeout: Duration,
    name: &str,
) -> Store<Client<R>> {
    let client = Client::<R>::connect(options.request_timeout(request_timeout))
        .await
        .expect("the client connects");
    let store = Store::new(client, StoreOptions::new(unique_prefix(name)))
        .expect("the store options are valid");
    store.start().await.expect("the store starts");
    store
}

/// The requests of an open-loop load on a store and its coordinator.
pub struct Workload<E> {
    /// The store.
    pub store: Store<E>,
    /// The coordinator of [`REPLICA`] (turns, locks).
    pub coord: Coordinator<E>,
    /// Where outcomes go.
    pub recorder: Recorder,
    /// The chats messages are saved to and listed from.
    pub chats: Vec<String>,
    /// The requests, cycled by request number.
    pub mix: Vec<Op>,
    /// The client's request timeout: a call of `k` steps is recorded as hung after `k` times
    /// this, plus the turn wait for turns, plus a second.
    pub request_timeout: Duration,
    /// Optional `WAIT` on lock and leadership grants: `(replicas, timeout)`.
    pub wait_replicas: Option<(u32, Duration)>,
    turns: TurnOptions,
}

/// Lock keys, leaderships and turn chats of a workload.
const LOCKS: u64 = 8;
const LEADERSHIPS: u64 = 4;
const TURN_CHATS: u64 = 32;

impl<E: Executor> Workload<E> {
    /// A workload over `store` with `chats` message chats, the standard mix, and the turn
    /// options of [`turn_options`]. Call [`Workload::prepare`] before the load.
    pub fn new(
        store: Store<E>,
        recorder: Recorder,
        chats: usize,
        request_timeout: Duration,
    ) -> Self {
        let coord = Coordinator::new(store.executor().clone(), store.keyspace().clone(), REPLICA)
            .unwrap()
            .with_turn_options(turn_options());
        Workload {
            store,
            coord,
            recorder,
            chats: (0..chats).map(|c| format!("chat-{c}")).collect(),
            mix: STORE_AND_COORDINATION.to_vec(),
            request_timeout,
            wait_replicas: None,
            turns: turn_options(),
        }
    }

    /// Starts the replica's heartbeat (its turns are skipped without one).
    pub async fn prepare(&self) -> Result<(), Error> {
        self.coord.heartbeat(Duration::from_secs(30)).await
    }

    /// Takes turns with `options` instead of [`turn_options`].
    pub fn with_turn_options(mut self, options: TurnOptions) -> Self {
        self.turns = options;
        self.coord = self.coord.with_turn_options(options);
        self
    }

    fn limit(&self, steps: u32) -> Duration {
        self.request_timeout * steps + Duration::from_secs(1)
    }

    fn coordinator(&self, replica: &str) -> Coordinator<E> {
        let coord = Coordinator::new(
            self.store.executor().clone(),
            self.store.keyspace().clone(),
            replica,
        )
        .unwrap();
        match self.wait_replicas {
            Some((n, timeout)) => coord.with_wait_replicas(n, timeout),
            None => coord,
        }
    }

    /// The lock key of request `n` (for tests that look at fences).
    pub fn lock_key(n: u64) -> String {
        format!("lock-{}", n % LOCKS)
    }

    /// Request `n` of the load.
    pub fn request(self: &Arc<Self>, n: u64) -> impl Future<Output = ()> + Send + 'static {
        let this = Arc::clone(self);
        async move { this.run(n).await }
    }

    async fn run(&self, n: u64) {
        let ks = self.store.keyspace().clone();
        let rec = &self.recorder;
        let op = self.mix[(n % self.mix.len() as u64) as usize];
        let chat = &self.chats[(n / self.mix.len() as u64 % self.chats.len() as u64) as usize];
        let call =
            |op: &'static str, target: &str, slot: Option<u16>, write: bool, steps: u32| Call {
                op,
                target: target.to_owned(),
                n,
                slot,
                write,
                limit: self.limit(steps),
            };
        match op {
            Op::Save => {
                let slot = ks.message_log(chat).slot();
                let id = format!("m{n}");
                let payload = bytes::Bytes::from(id.clone());
                rec.record(
                    call("save", chat, Some(slot), true, 1),
                    |_| None,
                    self.store.save_message(chat, &id, n as i64, payload),
                )
                .await;
            }
            Op::ListMessages => {
                let slot = ks.message_log(chat).slot();
                rec.record(
                    call("list_messages", chat, Some(slot), false, 2),
                    |_| None,
                    self.store.list_messages(chat, .., None, Limit::of::<50>()),
                )
                .await;
            }
            Op::Lock => {
                let key = Self::lock_key(n);
                let slot = ks.lock(&key).slot();
                let owner = format!("o{n}");
                let coord = self.coordinator(REPLICA);
                let steps = if self.wait_replicas.is_some() { 3 } else { 1 };
                let got = rec
                    .record(
                        call("lock", &key, Some(slot), true, steps),
                        |f: &Option<u64>| *f,
                        coord.lock(&key, &owner, Duration::from_secs(2)),
                    )
                    .await;
                if let Some(Ok(Some(_))) = got {
                    rec.record(
                        call("unlock", &key, Some(slot), true, 1),
                        |_| None,
                        coord.unlock(&key, &owner),
                    )
                    .await;
                }
            }
            Op::Turn => {
                let turn_chat = format!("turn-{}", n % TURN_CHATS);
                let slot = ks.turn(&turn_chat, TurnPart::Seq).slot();
                let wait = self.turns.wait_timeout;
                let mut limit = call("turn", &turn_chat, Some(slot), true, 8);
                limit.limit += wait;
                let got = rec
                    .record(
                        limit,
                        |g: &TurnGrant| Some(g.guard.ticket),
                        self.coord.acquire_turn(&turn_chat),
                    )
                    .await;
                if let Some(Ok(grant)) = got {
                    rec.record(
                        call("turn_release", &turn_chat, Some(slot), true, 1),
                        |_| None,
                        self.coord.release_turn(&grant.guard),
                    )
                    .await;
                }
            }
            Op::Leader => {
                let name = format!("leader-{}", n % LEADERSHIPS);
                let slot = ks.leader(&name).slot();
                let coord = self.coordinator(&format!("candidate-{n}"));
                let steps = if self.wait_replicas.is_some() { 3 } else { 1 };
                let got = rec
                    .record(
                        call("campaign", &name, Some(slot), true, steps),
                        |t: &Option<u64>| *t,
                        coord.campaign(&name, Duration::from_secs(2)),
                    )
                    .await;
                if let Some(Ok(Some(_))) = got {
                    rec.record(
                        call("resign", &name, Some(slot), true, 1),
                        |_| None,
                        coord.resign(&name),
                    )
                    .await;
                }
            }
            Op::Upsert => {
                let id = format!("rec{n}");
                let slot = ks.record(RecordKind::Chat, &id).slot();
                rec.record(
                    call("upsert", &id, Some(slot), true, 1),
                    |_| None,
                    self.store.upsert_chat(&id, bytes::Bytes::from(id.clone())),
                )
                .await;
            }
            Op::ListChats => {
                rec.record(
                    call("list_chats", "chats", None, false, 2),
                    |_| None,
                    self.store.list_chats(None, Limit::of::<20>()),
                )
                .await;
            }
            Op::Heartbeat => {
                let slot = ks.heartbeat(REPLICA).slot();
                rec.record(
                    call("heartbeat", REPLICA, Some(slot), true, 1),
                    |_| None,
                    self.coord.heartbeat(Duration::from_secs(30)),
                )
                .await;
            }
        }
    }
}

/// Checks that every acknowledged `save` and `upsert` among `outcomes` is stored, reading each
/// key's slot owner in `ranges` with admin connections. A missing write goes to
/// [`Losses::allowed`] when `allowed` says it is inside a documented loss window (with a
/// reason), else to [`Losses::unexplained`].
pub fn check_acknowledged_writes(
    ks: &Keyspace,
    ranges: &[SlotRange],
    outcomes: &[Outcome],
    allowed: impl Fn(&Outcome) -> Option<String>,
) -> Result<Losses, String> {
    let acked: Vec<&Outcome> = outcomes
        .iter()
        .filter(|o| o.ok() && matches!(o.op, "save" | "upsert"))
        .collect();
    // One probe per write, grouped by owner: ZSCORE + EXISTS for a message, GET for a record.
    let mut by_owner: BTreeMap<SocketAddr, Vec<(usize, Vec<Command>)>> = BTreeMap::new();
    for (i, o) in acked.iter().enumerate() {
        let probes = if o.op == "save" {
            let id = format!("m{}", o.n);
            let log = ks.message_log(&o.target);
            let item = ks.message_item(&o.target, &id);
            vec![
                vec![b"ZSCORE".to_vec(), log.as_bytes().to_vec(), id.into_bytes()],
                vec![b"EXISTS".to_vec(), item.as_bytes().to_vec()],
            ]
        } else {
            let key = ks.record(RecordKind::Chat, &o.target);
            vec![vec![b"GET".to_vec(), key.as_bytes().to_vec()]]
        };
        let slot = o.slot.ok_or("a write without a slot")?;
        by_owner
            .entry(owner(ranges, slot))
            .or_default()
            .push((i, probes));
    }
    let mut present = vec![false; acked.len()];
    for (addr, items) in by_owner {
        let commands: Vec<Vec<Vec<u8>>> = items.iter().flat_map(|(_, p)| p.clone()).collect();
        let replies = pipeline_at(addr, &commands)?;
        let mut replies = replies.into_iter();
        for (i, probes) in items {
            let answers: Vec<crate::Value> = replies.by_ref().take(probes.len()).collect();
            present[i] = match acked[i].op {
                "save" => {
                    answers[0].as_int() == Some(acked[i].n as i64) && answers[1].as_int() == Some(1)
                }
                _ => answers[0].as_str() == Some(acked[i].target.as_str()),
            };
        }
    }
    let mut losses = Losses {
        checked: acked.len(),
        ..Losses::default()
    };
    for (o, here) in acked.iter().zip(present) {
        if here {
            continue;
        }
        let what = format!(
            "{} {}/{} (slot {:?}) sent at {:.3} s, acknowledged at {:.3} s",
            o.op,
            o.target,
            o.n,
            o.slot,
            o.sent.as_secs_f64(),
            o.ended.as_secs_f64()
        );
        match allowed(o) {
            Some(why) => losses.allowed.push(format!("{what}: {why}")),
            None => losses.unexplained.push(what),
        }
    }
    Ok(losses)
}

/// Ends a migration begun with [`RedisCluster::begin_migration`] whose keys have all moved:
/// `CLUSTER SETSLOT slot NODE target` on the target, the source and every other master, then
/// waits until every live node maps the slot to the target.
pub fn assign_slot(
    cluster: &RedisCluster,
    slot: u16,
    source: SocketAddr,
    target: SocketAddr,
) -> Result<(), String> {
    let target_id = cluster.node_id(target)?;
    let s = slot.to_string();
    let mut order = vec![target, source];
    order.extend(
        cluster
            .masters()?
            .into_iter()
            .filter(|m| *m != target && *m != source),
    );
    for addr in order {
        cluster
            .conn(addr)?
            .cmd(&["CLUSTER", "SETSLOT", &s, "NODE", &target_id])
            .map_err(|e| format!("SETSLOT {slot} NODE on {addr}: {e}"))?;
    }
    poll_until(
        Instant::now() + Duration::from_secs(30),
        "every node maps the slot to its target",
        || {
            for addr in cluster.nodes() {
                let ranges = slots_at(addr)?;
                if owner(&ranges, slot) != target {
                    return Err(format!("{addr} still maps slot {slot} elsewhere"));
                }
            }
            Ok(())
        },
    )
}

/// Runs `f` on the cluster on a blocking thread (the harness blocks; the load must not).
pub async fn blocking<T: Send + 'static>(
    cluster: &Arc<RedisCluster>,
    f: impl FnOnce(&RedisCluster) -> T + Send + 'static,
) -> T {
    let cluster = Arc::clone(cluster);
    tokio::task::spawn_blocking(move || f(&cluster))
        .await
        .expect("a harness call panicked")
}

/// Whether the node at `addr` says it is a master (`ROLE`); `false` when it does not answer.
pub fn is_master(addr: SocketAddr) -> bool {
    AdminConn::connect(addr)
        .and_then(|mut c| c.cmd(&["ROLE"]))
        .ok()
        .and_then(|r| {
            r.as_array()
                .and_then(|a| a.first())
                .and_then(|v| v.as_str().map(str::to_owned))
        })
        .is_some_and(|r| r == "master")
}

/// Waits (at most `within`) until `replica` is a master, polling off the runtime's threads;
/// returns when it was seen promoted, on `clock`.
pub async fn promoted(replica: SocketAddr, clock: Clock, within: Duration) -> Duration {
    crate::harness::eventually(within, "the replica to be promoted", || async move {
        tokio::task::spawn_blocking(move || is_master(replica))
            .await
            .expect("ROLE probe panicked")
            .then(|| clock.now())
    })
    .await
}
