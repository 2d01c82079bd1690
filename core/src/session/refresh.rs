//! The topology refresh: rounds of `CLUSTER SLOTS`, their backoff, and applying a new map.

use std::collections::BTreeSet;
use std::time::Instant;

use crate::addr::NodeAddr;
use crate::error::{ConfigError, Error, SeedAnswer};
use crate::retry::{next_attempt, NextAttempt};
use crate::topology::{cluster_support_disabled, parse_cluster_slots, Topology};
use crate::value::Frame;

use super::conns::{Loss, Queued};
use super::ids::NodeId;
use super::slots::SlotRange;
use super::timers::Timer;
use super::{after, Endpoints, Session, Waiters};

#[derive(Debug, Default)]
pub(super) struct Refresh {
    pub(super) round: u64,
    pub(super) outstanding: usize,
    pub(super) best: Option<Topology>,
    pub(super) running: bool,
    pub(super) last_started: Option<Instant>,
    /// The map was found stale while a round was running: run another one after it.
    pub(super) again: bool,
    /// A failed round backs off until then, whatever news asks for a refresh meanwhile.
    pub(super) not_before: Option<Instant>,
    pub(super) failures: u32,
    pub(super) last_error: Option<Error>,
    /// Until the first map: each node asked and its last answer, in the order first asked,
    /// for [`Error::Discovery`].
    pub(super) answers: Vec<SeedAnswer>,
    /// A node of this round answered that it has no cluster support: a single node.
    pub(super) single_node: Option<NodeAddr>,
}

impl Refresh {
    /// Records `node`'s answer during discovery (before the first map), replacing an older
    /// one, and keeps it as the round's last error.
    pub(super) fn record(&mut self, discovering: bool, node: &NodeAddr, answer: Error) {
        if discovering {
            match self.answers.iter_mut().find(|a| &a.seed == node) {
                Some(known) => known.answer = answer.clone(),
                None => self.answers.push(SeedAnswer {
                    seed: node.clone(),
                    answer: answer.clone(),
                }),
            }
        }
        self.last_error = Some(answer);
    }

    /// Why requests waiting for a first map fail after a round without one, and whether the
    /// failure is final (no later round can do better): a node without cluster support (the
    /// options name the wrong deployment) and a refused password are final, at once; else
    /// discovery failed, with what each node asked answered.
    pub(super) fn discovery_failure(&self) -> (Error, bool) {
        if let Some(addr) = &self.single_node {
            let error = ConfigError::SingleNodeForClusterClient { addr: addr.clone() };
            return (error.into(), true);
        }
        if let Some(auth @ Error::Auth { .. }) = &self.last_error {
            return (auth.clone(), true);
        }
        let tried = self.answers.clone();
        (Error::Discovery { tried }, false)
    }
}

impl<W: Waiters> Session<W> {
    /// The map may be stale (`MOVED`, `READONLY`, a lost node): refresh now, or once the rate
    /// limit allows; a running refresh is followed by another, since it may predate the news.
    pub(super) fn refresh_soon(&mut self, now: Instant) {
        if self.refresh.running {
            self.refresh.again = true;
        } else {
            self.refresh_when_allowed(now);
        }
    }

    /// Starts a refresh now if none started within `refresh_min_interval`, else arms the timer.
    pub(super) fn refresh_when_allowed(&mut self, now: Instant) {
        if !self.follows_failovers() || self.closed {
            return;
        }
        let earliest = self
            .refresh
            .last_started
            .and_then(|t| after(t, self.config.refresh_min_interval))
            .unwrap_or(now)
            .max(self.refresh.not_before.unwrap_or(now));
        if earliest <= now {
            self.start_refresh(now);
        } else {
            self.set_refresh_timer(earliest);
        }
    }

    /// Arms the refresh timer for `at` (not before a failed round's backoff ends), unless it
    /// is armed earlier.
    pub(super) fn set_refresh_timer(&mut self, at: Instant) {
        let at = at.max(self.refresh.not_before.unwrap_or(at));
        if self.timers.armed(Timer::Refresh).is_some_and(|t| t <= at) {
            return;
        }
        self.timers.arm(at, Timer::Refresh);
    }

    pub(super) fn start_refresh(&mut self, now: Instant) {
        if !self.follows_failovers() || self.closed || self.refresh.running {
            return;
        }
        if self.sentinel_endpoints().is_some() {
            return self.start_sentinel_round(now);
        }
        self.timers.disarm(Timer::Refresh);
        // Ask two nodes: masters with a live connection first, then other masters, then the
        // root nodes, then anything known. The first stays; the second rotates by round, so a
        // dead or stalled node is not the only one asked round after round.
        let masters = self.masters();
        let roots: Vec<NodeId> = match &self.config.endpoints {
            Endpoints::Cluster(roots) => roots.iter().filter_map(|r| self.nodes.id(r)).collect(),
            Endpoints::Single(_) | Endpoints::Sentinel(_) | Endpoints::UnixSocket(_) => Vec::new(),
        };
        let ready = masters.iter().copied().filter(|&n| self.is_ready(n));
        let idle = masters.iter().copied().filter(|&n| !self.is_ready(n));
        let preferred: Vec<NodeId> = ready.chain(idle).chain(roots).collect();
        // Avoided while another node is left: a node in connect backoff (a round must not
        // dial it again early), and one whose connection has long waited for a reply (the
        // query would queue behind the stall, and so would everything routed there after it).
        let avoid =
            |n: NodeId| self.nodes.backoff_until(n, now).is_some() || self.is_stalled(n, now);
        let mut unique: Vec<NodeId> = Vec::new();
        for &n in preferred.iter().filter(|&&n| !avoid(n)) {
            if !unique.contains(&n) {
                unique.push(n);
            }
        }
        if unique.is_empty() {
            for n in preferred.iter().copied().chain(self.nodes.known()) {
                if !unique.contains(&n) {
                    unique.push(n);
                }
            }
        }
        let Some(&first) = unique.first() else {
            // A cluster without a single known node can never get a map.
            let error = Error::Config(ConfigError::NoRootNodes);
            for r in std::mem::take(&mut self.unrouted) {
                self.finish(r, Err(error.clone()));
            }
            return;
        };
        let mut chosen = vec![first];
        let rest = &unique[1..];
        if !rest.is_empty() {
            let offset = usize::try_from(self.refresh.round).unwrap_or(0);
            chosen.push(rest[offset % rest.len()]);
        }
        self.refresh.round += 1;
        self.refresh.running = true;
        self.refresh.again = false;
        self.refresh.best = None;
        self.refresh.last_error = None;
        self.refresh.single_node = None;
        self.refresh.last_started = Some(now);
        self.refresh.outstanding = chosen.len();
        let round = self.refresh.round;
        for node in chosen {
            self.enqueue(now, node, Queued::Topology(round));
        }
    }

    /// One node's answer to a round, or why there is none.
    pub(super) fn on_topology(
        &mut self,
        now: Instant,
        round: u64,
        node: NodeId,
        answer: Result<Frame, Error>,
    ) {
        if round != self.refresh.round || !self.refresh.running {
            return;
        }
        self.refresh.outstanding = self.refresh.outstanding.saturating_sub(1);
        let addr = self.nodes[node].clone();
        let host = addr.host.clone();
        let discovering = !self.map_loaded;
        match answer {
            Ok(Ok(value)) => match parse_cluster_slots(&value, &host) {
                Ok(topo) if topo.is_complete() => {
                    // A complete answer is the best there can be: the round is over.
                    self.refresh.best = Some(topo);
                    self.refresh.outstanding = 0;
                }
                Ok(topo) if topo.coverage() == 0 => {
                    let detail = "CLUSTER SLOTS assigns no slot (is the cluster still being set \
                                  up? CLUSTER ADDSLOTS or redis-cli --cluster create)";
                    let answer = Error::UnexpectedReply {
                        detail: detail.into(),
                    };
                    self.refresh.record(discovering, &addr, answer);
                }
                Ok(topo) => {
                    let better = self
                        .refresh
                        .best
                        .as_ref()
                        .is_none_or(|b| b.coverage() < topo.coverage());
                    if better {
                        self.refresh.best = Some(topo);
                    }
                }
                Err(e) => {
                    let answer = Error::UnexpectedReply {
                        detail: e.to_string(),
                    };
                    self.refresh.record(discovering, &addr, answer);
                }
            },
            Ok(Err(e)) => {
                if cluster_support_disabled(&e) {
                    self.refresh.single_node = Some(addr.clone());
                }
                self.refresh.record(discovering, &addr, Error::Server(e));
            }
            Err(e) => self.refresh.record(discovering, &addr, e),
        }
        if self.refresh.outstanding == 0 {
            self.end_refresh(now);
        }
    }

    pub(super) fn end_refresh(&mut self, now: Instant) {
        self.refresh.running = false;
        let best = self.refresh.best.take().filter(|t| t.coverage() > 0);
        if let Some(topo) = best {
            self.tally.count(super::Event::RefreshSucceeded);
            self.refresh.failures = 0;
            self.refresh.not_before = None;
            self.apply_topology(&topo);
            if topo.is_complete() {
                self.forget_departed(now, &topo);
            }
            if let Some(next) = after(now, self.config.refresh_interval) {
                self.set_refresh_timer(next);
            }
            if self.refresh.again {
                self.refresh_when_allowed(now);
            }
            return;
        }
        self.tally.count(super::Event::RefreshFailed);
        self.round_failed(now);
    }

    /// A round (of `CLUSTER SLOTS` or of a question to the sentinels) gave nothing: requests
    /// waiting for a first answer count an attempt, and the next round backs off.
    pub(super) fn round_failed(&mut self, now: Instant) {
        self.refresh.failures = self.refresh.failures.saturating_add(1);
        let failures = self.refresh.failures;
        tracing::warn!(failures, "topology refresh failed");
        // Requests waiting for a first map count the failed round as an attempt, and end with
        // what discovery found; a refused AUTH or a node without cluster support ends them at
        // once, since no round will do better.
        if !self.map_loaded {
            let (cause, fatal) = match self.refresh.discovery_failure() {
                (Error::Discovery { .. }, fatal) if self.sentinel_endpoints().is_some() => {
                    (self.sentinel_discovery_failure(), fatal)
                }
                // One sentinel refusing the password (restarted without its ACL file, a
                // rolling password change) is not the end while another may take it: final
                // only once every sentinel refused it.
                (Error::Auth { .. }, _) if self.sentinel_endpoints().is_some() => {
                    match self.every_sentinel_refused_the_password() {
                        Some(first) => (first, true),
                        None => (self.sentinel_discovery_failure(), false),
                    }
                }
                failure => failure,
            };
            let policy = self.config.retry;
            for r in std::mem::take(&mut self.unrouted) {
                let Some(state) = self.req_mut(r) else {
                    continue;
                };
                state.retries = state.retries.saturating_add(1);
                // The next round's own backoff paces them: only the verdict is used here, and
                // the round's error (not a reply to the request) is handed on as it is.
                match next_attempt(cause.clone(), state.retries, fatal, &policy, 1.0) {
                    NextAttempt::GiveUp(_) => self.finish(r, Err(cause.clone())),
                    NextAttempt::After(_) => self.unrouted.push(r),
                }
            }
        }
        let delay = self
            .config
            .retry
            .delay(failures, self.jitter.next_factor())
            .max(self.config.refresh_min_interval);
        if let Some(at) = after(now, delay) {
            self.refresh.not_before = Some(at);
            self.set_refresh_timer(at);
        }
    }

    pub(super) fn apply_topology(&mut self, topo: &Topology) {
        self.map_gen += 1;
        let mut given = Vec::new();
        for shard in &topo.shards {
            let owner = self.nodes.intern(shard.master.clone());
            given.extend(shard.ranges.iter().map(|&(first, last)| SlotRange {
                first,
                last,
                owner,
            }));
        }
        let kept = self
            .slots
            .apply_topology(given, topo.is_complete(), self.now);
        if kept > 0 {
            tracing::debug!(
                slots = kept,
                "kept slots the map gave back to a master that redirected them lately"
            );
        }
        self.map_loaded = true;
        self.refresh.answers.clear();
        let waiting = std::mem::take(&mut self.unrouted);
        self.to_dispatch.extend(waiting);
    }

    /// Forgets the nodes missing from complete topologies for [`FORGET_AFTER`](super::FORGET_AFTER):
    /// their idle connection closes, and their id is reused. A root node, a node with
    /// requests on its connection, or one a waiting request is bound to (an `ASK` target, a
    /// `NOSCRIPT` node) stays until it is free.
    pub(super) fn forget_departed(&mut self, now: Instant, topo: &Topology) {
        let present: BTreeSet<NodeId> = topo
            .shards
            .iter()
            .filter_map(|s| self.nodes.id(&s.master))
            .collect();
        let roots: Vec<NodeAddr> = match &self.config.endpoints {
            Endpoints::Cluster(roots) => roots.clone(),
            Endpoints::Sentinel(s) => s.sentinels.clone(),
            single => single.single_node().into_iter().collect(),
        };
        for node in self.nodes.departed(now, &present, &roots) {
            let bound = self.ops.iter().any(|op| {
                op.reqs
                    .iter()
                    .any(|r| r.ask == Some(node) || r.pinned == Some(node))
            });
            if self.is_busy(node) || bound {
                continue;
            }
            if let Some(conn) = self.nodes.conn(node) {
                let reason = "the node left the cluster's topology".to_owned();
                self.drop_conn(now, conn, Loss::Lost(reason));
            }
            tracing::debug!(node = %self.nodes[node], "forgetting a node that left the topology");
            self.nodes.forget(node);
            self.slots.forget(node);
        }
    }
}
