//! The client's metrics (feature `metrics`): what the session counts and hands out, turned
//! into calls of the `metrics` facade by the session task, so every plan is counted (detached
//! ones too) and no caller counts anything. Names and labels: `docs/operations.md`.
//!
//! Every handle is registered once: the routing counters when the client starts, a counter
//! and a histogram per (operation, outcome) the first time the pair is seen, a gauge per
//! connection when it opens. After that, counting a request is a map lookup by two static
//! strings and two atomic updates, with no allocation.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use botmesh_redis_core::driver::session::{Event, Session, Summary, Tally, Waiters};
use botmesh_redis_core::NodeAddr;
use metrics::{Counter, Gauge, Histogram, Key, Label, Level, Metadata, Recorder, Unit};

/// Calls of the API (plans) that ended, by `operation` and `outcome`.
pub(crate) const REQUESTS: &str = "botmesh_redis_requests_total";
/// How long each call took, from its submission to its result, by `operation`.
pub(crate) const DURATION: &str = "botmesh_redis_request_duration_seconds";
/// `MOVED` and `ASK` replies followed, by `kind`.
pub(crate) const REDIRECTS: &str = "botmesh_redis_redirects_total";
/// Requests sent again after a backoff, by `reason`.
pub(crate) const RETRIES: &str = "botmesh_redis_retries_total";
/// Request, response and connect timeouts, by `kind`.
pub(crate) const TIMEOUTS: &str = "botmesh_redis_timeouts_total";
/// Topology refresh rounds, by `outcome`.
pub(crate) const REFRESHES: &str = "botmesh_redis_topology_refreshes_total";
/// Connections opened to a node that had one before.
pub(crate) const RECONNECTS: &str = "botmesh_redis_reconnects_total";
/// Connections held now, by `node`.
pub(crate) const CONNECTIONS: &str = "botmesh_redis_connections";
/// Calls submitted whose result has not come yet, those parked for room included.
pub(crate) const OPS_WAITING: &str = "botmesh_redis_ops_waiting";

static METADATA: Metadata<'static> =
    Metadata::new(module_path!(), Level::INFO, Some(module_path!()));

/// Where a client registers its metrics: the global recorder (the exporter the application
/// installed), or one given to this client alone.
#[derive(Clone)]
pub(crate) struct Registry(Option<Arc<dyn Recorder + Send + Sync>>);

impl Registry {
    /// The global recorder, as it is when the client starts.
    pub(crate) fn global() -> Self {
        Registry(None)
    }

    pub(crate) fn new(recorder: Option<Arc<dyn Recorder + Send + Sync>>) -> Self {
        Registry(recorder)
    }

    fn with<T>(&self, f: impl FnOnce(&dyn Recorder) -> T) -> T {
        match &self.0 {
            Some(recorder) => f(&**recorder),
            None => metrics::with_recorder(f),
        }
    }

    fn counter(&self, name: &'static str, labels: Vec<Label>) -> Counter {
        let key = Key::from_parts(name, labels);
        self.with(|r| r.register_counter(&key, &METADATA))
    }

    fn gauge(&self, name: &'static str, labels: Vec<Label>) -> Gauge {
        let key = Key::from_parts(name, labels);
        self.with(|r| r.register_gauge(&key, &METADATA))
    }

    fn histogram(&self, name: &'static str, labels: Vec<Label>) -> Histogram {
        let key = Key::from_parts(name, labels);
        self.with(|r| r.register_histogram(&key, &METADATA))
    }

    /// The help lines an exporter shows (Prometheus's `# HELP`).
    fn describe(&self) {
        self.with(|r| {
            let counters = [
                (
                    REQUESTS,
                    "Calls of the API that ended, by operation and outcome",
                ),
                (REDIRECTS, "MOVED and ASK replies followed, by kind"),
                (RETRIES, "Requests sent again after a backoff, by reason"),
                (TIMEOUTS, "Request, response and connect timeouts, by kind"),
                (REFRESHES, "Topology refresh rounds, by outcome"),
                (
                    RECONNECTS,
                    "Connections opened to a node that had one before",
                ),
            ];
            for (name, help) in counters {
                r.describe_counter(name.into(), Some(Unit::Count), help.into());
            }
            r.describe_histogram(
                DURATION.into(),
                Some(Unit::Seconds),
                "From a call's submission to its result, by operation".into(),
            );
            r.describe_gauge(
                CONNECTIONS.into(),
                Some(Unit::Count),
                "Connections held now (opening, open or closing), by node".into(),
            );
            r.describe_gauge(
                OPS_WAITING.into(),
                Some(Unit::Count),
                "Calls submitted whose result has not come yet, parked for room or in the session"
                    .into(),
            );
        });
    }
}

/// The metric and label of a routing event.
fn event_series(event: Event) -> (&'static str, &'static str, &'static str) {
    match event {
        Event::Moved => (REDIRECTS, "kind", "moved"),
        Event::Ask => (REDIRECTS, "kind", "ask"),
        Event::Retry(reason) => (RETRIES, "reason", reason.label()),
        Event::RequestTimeout => (TIMEOUTS, "kind", "request"),
        Event::ResponseTimeout => (TIMEOUTS, "kind", "response"),
        Event::ConnectTimeout => (TIMEOUTS, "kind", "connect"),
        Event::RefreshSucceeded => (REFRESHES, "outcome", "ok"),
        Event::RefreshFailed => (REFRESHES, "outcome", "failed"),
        // An event a later core adds: counted as a retry of reason `other` until it has a
        // series of its own here.
        _ => (RETRIES, "reason", "other"),
    }
}

/// A static string's address and length: its identity, cheaper to compare than its text.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Text(usize, usize);

impl Text {
    fn of(text: &'static str) -> Self {
        Text(text.as_ptr() as usize, text.len())
    }
}

/// One connection's share of the `botmesh_redis_connections` gauge of its node, held with
/// the connection's I/O: dropping it (the connection closed) takes the share back.
pub(crate) struct ConnGauge(Gauge);

impl Drop for ConnGauge {
    fn drop(&mut self) {
        self.0.decrement(1.0);
    }
}

/// The session task's metric handles.
pub(crate) struct Instruments {
    registry: Registry,
    /// One counter per event, in the order of [`Event::ALL`].
    events: Vec<Counter>,
    /// The tally last exported: counts only grow, so the difference is what happened since.
    seen: Tally,
    /// Per (operation, outcome), by where the two static strings live (a lookup compares two
    /// pairs of integers; the same name at two addresses registers the same series twice,
    /// which the recorder joins): the requests counter and the operation's latency histogram.
    ops: BTreeMap<(Text, Text), (Counter, Histogram)>,
    ops_waiting: Gauge,
    /// This lane's share of `ops_waiting`, as last added.
    waiting: usize,
    /// The lane's calls parked for room (the room's count): part of `ops_waiting`, so that it
    /// keeps climbing under an overload, where the session holds the room's worth and the
    /// rest waits in line.
    lined: Arc<AtomicUsize>,
    reconnects: Counter,
}

impl Instruments {
    /// Registers the client's fixed series, so that each shows (at zero) from the start.
    pub(crate) fn new(registry: Registry, lined: Arc<AtomicUsize>) -> Self {
        registry.describe();
        let events = Event::ALL
            .iter()
            .map(|&event| {
                let (name, label, value) = event_series(event);
                registry.counter(name, vec![Label::from_static_parts(label, value)])
            })
            .collect();
        // Registered at zero by a first increment: a later lane's adds nothing.
        let ops_waiting = registry.gauge(OPS_WAITING, Vec::new());
        ops_waiting.increment(0.0);
        Instruments {
            events,
            seen: Tally::default(),
            ops: BTreeMap::new(),
            ops_waiting,
            waiting: 0,
            lined,
            reconnects: registry.counter(RECONNECTS, Vec::new()),
            registry,
        }
    }

    /// A plan ended: one request of its operation and outcome, and its latency.
    pub(crate) fn completed(&mut self, summary: &Summary) {
        let registry = &self.registry;
        let (requests, latency) = self
            .ops
            .entry((Text::of(summary.operation), Text::of(summary.outcome)))
            .or_insert_with(|| {
                let operation = Label::from_static_parts("operation", summary.operation);
                let outcome = Label::from_static_parts("outcome", summary.outcome);
                (
                    registry.counter(REQUESTS, vec![operation.clone(), outcome]),
                    registry.histogram(DURATION, vec![operation]),
                )
            });
        requests.increment(1);
        latency.record(summary.elapsed.as_secs_f64());
    }

    /// Exports what the session counted since the last call, and the ops waiting: after each
    /// drain and before each completion is delivered. Comparing the tally is all it costs
    /// while nothing happened.
    pub(crate) fn observe<W: Waiters>(&mut self, session: &Session<W>) {
        let tally = session.tally();
        if *tally != self.seen {
            for ((event, count), counter) in tally.iter().zip(&self.events) {
                let before = self.seen.get(event);
                if count > before {
                    counter.increment(count - before);
                }
            }
            self.seen = *tally;
        }
        // Moved by the difference, not set: each lane of a client adds its own share.
        let waiting = session.in_flight() + self.lined.load(Ordering::Relaxed);
        if waiting != self.waiting {
            self.ops_waiting
                .increment(waiting as f64 - self.waiting as f64);
            self.waiting = waiting;
        }
    }

    /// A connection to `node` opens (`reconnect`: the node had one before).
    pub(crate) fn connecting(&mut self, node: &NodeAddr, reconnect: bool) -> ConnGauge {
        if reconnect {
            self.reconnects.increment(1);
        }
        let label = Label::new("node", node.to_string());
        let gauge = self.registry.gauge(CONNECTIONS, vec![label]);
        gauge.increment(1.0);
        ConnGauge(gauge)
    }
}
