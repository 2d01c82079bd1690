//! The faults a simulated cluster can inject: rules that answer, drop or stall matching
//! commands, how a node takes connections, and how a failed-over master behaves.

use std::time::Instant;

use bytes::Bytes;

use crate::addr::NodeAddr;

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
    pub(super) node: Option<NodeAddr>,
    pub(super) commands: Vec<String>,
    pub(super) times: Option<u32>,
    pub(super) until: Option<Instant>,
    pub(super) action: RuleAction,
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

    pub(super) fn matches(&self, node: &NodeAddr, name: &str, now: Instant) -> bool {
        self.times != Some(0)
            && self.until.is_none_or(|t| now < t)
            && self.node.as_ref().is_none_or(|n| n == node)
            && (self.commands.is_empty() || self.commands.iter().any(|c| c == name))
    }
}
