//! The one error type of the core and of the drivers' public API.
//!
//! Every variant says what happened and, through [`Error::outcome_unknown`], whether the
//! request may have run: a caller can retry an error whose outcome is known not to have run, and
//! must reconcile one whose outcome is unknown.

use crate::addr::NodeAddr;
use crate::keys::Key;
use crate::keys::KeyError;
use std::fmt;

mod config;

pub use config::ConfigError;

/// Everything that can go wrong between building a request and reading its reply.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A prefix or name was refused before anything was built.
    #[error(transparent)]
    Key(#[from] KeyError),
    /// A script call or multi-key command would touch more than one slot; nothing was sent.
    #[error("keys of one call hash to different slots: {first} (slot {}) and {other} (slot {})", first.slot(), other.slot())]
    CrossSlot {
        /// The first declared key.
        first: Key,
        /// The first key in another slot.
        other: Key,
    },
    /// A configuration mistake (options, layout, durations), found before anything was
    /// sent; [`ConfigError`] says which.
    #[error("configuration error: {0}")]
    Config(#[from] ConfigError),
    /// Redis answered with an error reply. The request ran (and failed) or was refused.
    #[error("server error: {0}")]
    Server(ServerError),
    /// The server stopped a script part-way: it refused a command the script called on a key
    /// this node does not hold (`ERR ... non local key in a cluster node`). While a slot is
    /// migrating, its source counts a missing key of the slot as moved, so a script that
    /// touches a key after deleting it (or emptying it, or expiring it) stops there, as does one
    /// that touches an undeclared key. What the script wrote before that command stays: the
    /// outcome is unknown. Read the state back before acting on it again, and write scripts that
    /// touch only their declared keys, never after they may have deleted them (the library's
    /// own scripts do; `docs/architecture.md`, "Scripts").
    #[error(
        "script stopped part-way: {reply}; what it wrote before stays, the outcome is unknown (a \
         script must touch only its declared keys, and none after it may have deleted it)"
    )]
    ScriptStoppedPartWay {
        /// The server's reply.
        reply: ServerError,
    },
    /// The request was written but the connection died or timed out before its reply: it may
    /// or may not have run. Writes are never re-sent after this.
    #[error(
        "reply lost from {addr} after the request was sent ({reason}); the outcome is unknown"
    )]
    ReplyLost {
        /// The node the request was written to, as the cluster names it.
        addr: NodeAddr,
        /// Why the reply never came.
        reason: String,
    },
    /// No connection could be made to a node; the request was never written.
    #[error("could not connect to {addr}: {reason}")]
    Connect {
        /// The node, as dialled.
        addr: NodeAddr,
        /// The I/O error or timeout.
        reason: String,
    },
    /// The node refused the credentials (`AUTH`); the request was never written.
    #[error("authentication failed at {addr}: {reason}")]
    Auth {
        /// The node, as dialled.
        addr: NodeAddr,
        /// The server's reply.
        reason: String,
    },
    /// The request was never written, for the reason given.
    #[error("not sent: {reason}")]
    NotSent {
        /// Why.
        reason: String,
    },
    /// Retryable replies (`TRYAGAIN`, `CLUSTERDOWN`, `LOADING`, `MASTERDOWN`, `READONLY`) kept
    /// coming until the attempts ran out. Those replies come before anything runs.
    #[error("gave up after {attempts} attempts; last reply: {last}")]
    RetriesExhausted {
        /// Attempts made.
        attempts: u32,
        /// The last retryable reply.
        last: ServerError,
    },
    /// `MOVED`/`ASK` kept coming past the redirection limit. The request never ran.
    #[error("gave up after {count} redirections; last: {last}")]
    TooManyRedirections {
        /// Redirections followed.
        count: u32,
        /// The last redirect.
        last: ServerError,
    },
    /// The request's overall deadline passed.
    #[error("request timed out ({})", if *outcome_unknown { "it was sent; the outcome is unknown" } else { "it was never sent" })]
    Timeout {
        /// Whether a write attempt of this request was sent without a reply.
        outcome_unknown: bool,
    },
    /// A turn was waited for until the turn options' `wait_timeout` (measured on the server's
    /// clock) without being served. The ticket was taken and polled; it was then withdrawn
    /// (`withdrawn`), or its withdrawal got no reply, in which case the queue skips it once it
    /// is served. Either way the caller holds nothing.
    #[error(
        "waited {waited_ms} ms for the turn on chat {chat:?} without being served; ticket \
         {ticket} {}; nothing is held",
        if *withdrawn { "was withdrawn" } else { "could not be withdrawn (no reply) and is skipped when served" }
    )]
    TurnWaitTimedOut {
        /// The chat.
        chat: String,
        /// The ticket that was waited on.
        ticket: u64,
        /// How long it was waited for, in ms on the server's clock.
        waited_ms: u64,
        /// Whether the withdrawal of the ticket was acknowledged.
        withdrawn: bool,
    },
    /// A plan was driven out of order (resumed without its replies, started twice): a bug in
    /// a runner, reported instead of a panic. Nothing is known about what was sent.
    #[error("plan driven out of order: {detail}")]
    Misuse {
        /// What the runner did wrong.
        detail: String,
    },
    /// The call's plan panicked in its `start` or `resume` (a bug in the plan; the trait is
    /// public, so perhaps a plan of your own). The call ends with this and the client's other
    /// calls go on; the panic's message went to the panic hook (stderr by default) as well.
    #[error("the plan of {operation} panicked: {message}")]
    PlanPanicked {
        /// The plan's [`operation`](crate::driver::Plan::operation).
        operation: &'static str,
        /// The panic's message.
        message: String,
        /// Whether it panicked after a request of it was written: what it wrote may have
        /// run.
        outcome_unknown: bool,
    },
    /// A reply had a shape the operation does not accept.
    #[error("unexpected reply: {detail}")]
    UnexpectedReply {
        /// What was wanted and what came.
        detail: String,
    },
    /// A lock, turn, leadership or lease is no longer held by the caller (its TTL ran out and
    /// another owner may have it). The operation did nothing.
    #[error("{what} is no longer held by this owner")]
    NotHolder {
        /// What was lost, e.g. `lock "k"`.
        what: String,
    },
    /// A turn was asked for while this replica's heartbeat is not live: waiters would take the
    /// replica for dead and skip its turn at once. Nothing was sent for the turn.
    #[error("replica {replica:?} has no live heartbeat: start Coordinator::keep_alive (or write Coordinator::heartbeat) before asking for turns")]
    NoHeartbeat {
        /// The replica.
        replica: String,
    },
    /// A fenced write carried a lower fencing token than the stored one, and was refused.
    #[error("{what}: fencing token {token} is older than the stored {stored}")]
    Stale {
        /// What was written.
        what: String,
        /// The token of the refused write.
        token: u64,
        /// The stored token.
        stored: u64,
    },
    /// A grant was not acknowledged by enough replicas (`WAIT`) and was given back.
    #[error("{what} reached {acked} replica(s), {wanted} wanted; the grant was given back")]
    NotReplicated {
        /// What was granted.
        what: String,
        /// Replicas wanted.
        wanted: u32,
        /// Replicas that acknowledged.
        acked: i64,
    },
    /// A grant was answered, but the reply of the `WAIT` written with it was lost, so
    /// whether replicas acknowledged it is unknown; it was given back.
    #[error("{what} was granted, but whether replicas acknowledged it is unknown (the WAIT reply was lost); the grant was given back")]
    ReplicationUnknown {
        /// What was granted.
        what: String,
    },
    /// A migration or rollback refused to start; nothing was written.
    #[error(transparent)]
    Refused(#[from] Refusal),
    /// A cluster-layout store found legacy-layout keys under its prefix and no layout marker:
    /// the keyspace has not been migrated. Nothing was written.
    #[error(
        "the prefix {prefix:?} holds legacy-layout keys (for example {}) and no layout marker: \
         migrate them first with botmesh_redis_core::migrate::migrate_to_cluster_layout (the \
         command line: `botmesh-redis migrate`), or pass allow_legacy_data to start anyway",
        examples.join(", ")
    )]
    LegacyDataFound {
        /// The store's prefix.
        prefix: String,
        /// Up to 10 of the legacy-layout keys found.
        examples: Vec<String>,
    },
    /// The layout marker holds a layout this version does not know. Nothing was written.
    #[error("the layout marker {key} holds {value:?}, not cluster:v1: this keyspace is in a layout this version does not know")]
    UnknownLayoutMarker {
        /// The marker key.
        key: String,
        /// Its value.
        value: String,
    },
    /// A typed record could not be encoded (nothing was sent) or a stored one could not be
    /// decoded (the read ran; the value is left as it is), by the [`Codec`](crate::codec::Codec)
    /// of [`Store::typed`](crate::store::Store::typed).
    #[error("{what}: {detail}")]
    Codec {
        /// What failed, with the record's name: e.g. `decoding chat "c1"`.
        what: String,
        /// The codec's reason.
        detail: String,
    },
    /// The layout marker was deleted while [`Store::start`](crate::store::Store::start)
    /// read the keyspace (a rollback or a flush ran meanwhile). Nothing was written; start
    /// again.
    #[error("the layout marker {key} was deleted while this store started; start again")]
    LayoutMarkerRemoved {
        /// The marker key.
        key: String,
    },
    /// A store refused to start: its keyspace's lifecycle record says a copy into it was
    /// interrupted, or a cleanup deleted it (`docs/migration.md`, "The lifecycle"). Nothing
    /// was written.
    #[error(
        "the keyspace cannot start: its lifecycle record {key} says it is the {found}; a copy \
         into it was interrupted (run it again to finish it) or a cleanup deleted it (the data \
         is on the other side: start the bots there)"
    )]
    KeyspaceNotReady {
        /// The record's key.
        key: String,
        /// What the record says.
        found: String,
    },
    /// A cluster client found no slot map: no seed (root node) it asked answered `CLUSTER
    /// SLOTS` with one before the attempts ran out (see
    /// [`ClientOptions::cluster_retry`](crate::ClientOptions::cluster_retry)). `tried` says what
    /// each seed answered: a refused or timed-out connection, an error reply, a map without
    /// slots. Nothing was sent. (A refused password is [`Error::Auth`], at once; a seed without
    /// cluster support is [`ConfigError::SingleNodeForClusterClient`].)
    #[error(
        "cluster discovery failed: no seed answered CLUSTER SLOTS with a slot map; tried {}: \
         check the seeds given to ClientOptions::cluster and that the cluster is up",
        describe_seeds(tried)
    )]
    Discovery {
        /// Each seed asked, with its last answer, in the order first asked.
        tried: Vec<SeedAnswer>,
    },
    /// A client of a Redis Sentinel deployment knows no master: no sentinel it asked named
    /// one for `master` (`SENTINEL MASTER`) before the attempts ran out (see
    /// [`ClientOptions::cluster_retry`](crate::ClientOptions::cluster_retry)). `tried` says
    /// what each sentinel answered: a refused or timed-out connection, an error reply, no
    /// master of that name. Nothing was sent; the client keeps asking with backoff, so a
    /// later call succeeds once a sentinel answers.
    #[error(
        "sentinel discovery failed: no sentinel named a master for {master:?}; tried {}: \
         check the sentinels and the master name given to ClientOptions::sentinel, and that \
         the sentinels are up",
        describe_seeds(tried)
    )]
    SentinelDiscovery {
        /// The master name asked for.
        master: String,
        /// Each sentinel asked, with its last answer, in the order first asked.
        tried: Vec<SeedAnswer>,
    },
    /// The client was closed before the request completed.
    #[error("the client is closed")]
    Closed,
    /// Slots moved while a listing or a migration's pass scanned the masters one after the
    /// other (a reshard, a master added, a failover): a key moved from a master not yet scanned
    /// to one already scanned may have been missed, so the result is not given. A migration's
    /// step stops as a cut one does, and its rerun finishes it.
    #[error(
        "slots moved on the {side} while its masters were scanned one after the other, so \
         keys may have been missed: try again once the resharding is done"
    )]
    SlotsMoved {
        /// Where: `cluster` for a listing, `source` or `target` for a migration.
        side: &'static str,
    },
}

impl Error {
    /// Whether the request may have run. `false` means it certainly did not run, or ran and
    /// answered (a server error); retrying is then the caller's free choice.
    pub fn outcome_unknown(&self) -> bool {
        matches!(
            self,
            Error::ReplyLost { .. }
                | Error::ScriptStoppedPartWay { .. }
                | Error::Timeout {
                    outcome_unknown: true
                }
                | Error::PlanPanicked {
                    outcome_unknown: true,
                    ..
                }
        )
    }

    /// The variant's name in snake case (`reply_lost`, `timeout`, `server`, ...): the
    /// `outcome` of a failed operation in the client's metrics and spans
    /// (`docs/operations.md`). A static string, so labelling an outcome allocates nothing.
    pub fn kind(&self) -> &'static str {
        match self {
            Error::Key(_) => "key",
            Error::CrossSlot { .. } => "cross_slot",
            Error::Config(_) => "config",
            Error::Server(_) => "server",
            Error::ReplyLost { .. } => "reply_lost",
            Error::Connect { .. } => "connect",
            Error::Auth { .. } => "auth",
            Error::NotSent { .. } => "not_sent",
            Error::RetriesExhausted { .. } => "retries_exhausted",
            Error::TooManyRedirections { .. } => "too_many_redirections",
            Error::Timeout { .. } => "timeout",
            Error::TurnWaitTimedOut { .. } => "turn_wait_timed_out",
            Error::Misuse { .. } => "misuse",
            Error::PlanPanicked { .. } => "plan_panicked",
            Error::UnexpectedReply { .. } => "unexpected_reply",
            Error::NotHolder { .. } => "not_holder",
            Error::NoHeartbeat { .. } => "no_heartbeat",
            Error::Stale { .. } => "stale",
            Error::NotReplicated { .. } => "not_replicated",
            Error::ReplicationUnknown { .. } => "replication_unknown",
            Error::Refused(_) => "refused",
            Error::LegacyDataFound { .. } => "legacy_data_found",
            Error::UnknownLayoutMarker { .. } => "unknown_layout_marker",
            Error::Codec { .. } => "codec",
            Error::LayoutMarkerRemoved { .. } => "layout_marker_removed",
            Error::KeyspaceNotReady { .. } => "keyspace_not_ready",
            Error::Discovery { .. } => "discovery",
            Error::SentinelDiscovery { .. } => "sentinel_discovery",
            Error::ScriptStoppedPartWay { .. } => "script_stopped_part_way",
            Error::Closed => "closed",
            Error::SlotsMoved { .. } => "slots_moved",
        }
    }

    /// The server error, when Redis answered with one.
    pub fn server(&self) -> Option<&ServerError> {
        match self {
            Error::Server(e) => Some(e),
            _ => None,
        }
    }
}

/// What one seed answered during cluster discovery (see [`Error::Discovery`]).
#[derive(Debug, Clone, PartialEq)]
pub struct SeedAnswer {
    /// The seed, as given to [`ClientOptions::cluster`](crate::ClientOptions::cluster).
    pub seed: NodeAddr,
    /// Why it gave no map: [`Error::Connect`] (refused, timed out), [`Error::Server`] (an error
    /// reply), [`Error::ReplyLost`], [`Error::UnexpectedReply`] (a map without slots or a reply
    /// that does not parse).
    pub answer: Error,
}

/// `a (why), b (why)`, for [`Error::Discovery`]'s message.
fn describe_seeds(tried: &[SeedAnswer]) -> String {
    if tried.is_empty() {
        return "no seed".to_owned();
    }
    let each: Vec<String> = tried
        .iter()
        .map(|t| format!("{} ({})", t.seed, t.answer))
        .collect();
    each.join(", ")
}

/// An error reply (`-CODE message`), split at the first space so that decisions match the code
/// word only: error texts differ between Redis 6.2, 7.x and Valkey.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct ServerError {
    text: String,
}

impl ServerError {
    /// Wraps the error text as decoded (no leading `-`, no CRLF).
    pub fn new(text: impl Into<String>) -> Self {
        ServerError { text: text.into() }
    }

    /// The leading code word, e.g. `MOVED`, `ERR`, `NOSCRIPT`. Redis 6 wraps the error of a
    /// command a script called in an `ERR Error running script ...: -CODE message` reply
    /// (7.0 and later pass it through): the code is then the wrapped one, so that a script's
    /// `READONLY` or `NOREPLICAS` reads the same on every version.
    pub fn code(&self) -> &str {
        let first = self.text.split(' ').next().unwrap_or("");
        if first == "ERR" && self.text.starts_with("ERR Error running script") {
            if let Some((_, inner)) = self.text.rsplit_once(": -") {
                if let Some(code) = inner.split(' ').next().filter(|c| !c.is_empty()) {
                    return code;
                }
            }
        }
        first
    }

    /// The whole text.
    pub fn text(&self) -> &str {
        &self.text
    }
}

impl fmt::Display for ServerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// Why a migration or a rollback refused to start. Nothing was written.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Refusal {
    /// Bots still run on the source or the target: a heartbeat or a pending chat ticket exists.
    #[error(
        "bots may still be running: {} heartbeat(s) and {} pending turn queue(s) found (for example {}); stop every bot of the prefix, or pass allow_live",
        heartbeats, tickets, examples.join(", ")
    )]
    Live {
        /// Heartbeat keys found.
        heartbeats: u64,
        /// Turn queues with pending tickets found.
        tickets: u64,
        /// Up to 5 of the keys found.
        examples: Vec<String>,
    },
    /// The legacy source is a Redis Cluster: the legacy layout lives on one node.
    #[error("the source is a Redis Cluster, but the legacy layout lives on one node: connect to that node")]
    SourceIsCluster,
    /// A cleanup was asked of a legacy side on a Redis Cluster, or named one as the other side.
    #[error("the legacy layout lives on one node, not on a Redis Cluster: connect to that node")]
    LegacyOnCluster,
    /// The legacy target of a rollback is a Redis Cluster.
    #[error("the rollback target is a Redis Cluster, but the legacy layout lives on one node")]
    TargetIsCluster,
    /// An in-place migration of a legacy prefix with braces, which the cluster layout refuses.
    #[error(
        "the prefix {prefix:?} contains {{ or }}, which the cluster layout reserves for hash tags: an in-place migration is impossible; migrate to a new target prefix"
    )]
    BracedPrefixInPlace {
        /// The prefix.
        prefix: String,
    },
    /// `delete_source` with a copy-only run (`mirror: false`): copy-only keeps existing target
    /// keys, which may be older than the source's, so deleting the source after it would lose
    /// the newer data.
    #[error(
        "delete_source needs a mirror: a copy-only run keeps existing target keys, which may be older than the source's, and deleting the source after it would lose the newer data for good; run with the mirror, or copy only and clean up once the bots run on the target"
    )]
    DeleteWithoutMirror,
    /// `delete_source` with a run limited by `include`: only a complete copy lets its source
    /// go.
    #[error(
        "delete_source needs a complete copy: include limits the run to some namespaces, and the source may only be deleted once the target holds all of them"
    )]
    DeleteAfterPartialCopy,
    /// The lifecycle records of the two sides show the step is unsafe: it would bring back
    /// data the live side deleted, destroy data it wrote, or delete the only copy.
    #[error("{message}")]
    Lifecycle {
        /// The step.
        step: StepKind,
        /// Why.
        reason: Unsafe,
        /// The reason, what each side holds, and what to do.
        message: String,
    },
    /// A lifecycle record changed while the step ran (a bot started on that side): nothing
    /// more was written.
    #[error(
        "the lifecycle record {key} changed while the step ran: a bot started on that side; stop every bot of the prefix and run the step again (it reads the records afresh)"
    )]
    RecordChanged {
        /// The record's key.
        key: String,
    },
    /// `other_server` says otherwise than the servers: two single nodes are the same server
    /// exactly when they answer one `run_id`, and a cluster is never the same server as a
    /// single node.
    #[error(
        "other_server is {said}, but the source is {source_server} and the target is {target_server}; leave other_server unset and the step finds out"
    )]
    OtherServerMismatch {
        /// What the options said.
        said: bool,
        /// The source server, as it described itself.
        source_server: String,
        /// The target server.
        target_server: String,
    },
    /// The servers did not tell whether they are one (`INFO server` refused), and the options
    /// left `other_server` unset.
    #[error(
        "cannot tell whether the source and the target are one server (INFO server gave no run_id): set other_server"
    )]
    OtherServerUnknown,
    /// The target's layout marker holds a value this version does not know.
    #[error("the target's layout marker {key} holds {value:?}, not cluster:v1")]
    ForeignMarker {
        /// The marker key.
        key: String,
        /// Its value.
        value: String,
    },
}

/// Why the records forbid a step. Every reason says what was found and what to do
/// ([`Unsafe::advice`]).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Unsafe {
    /// The target is live: bots started on it since the copy. A copy into it would bring back
    /// what they deleted and undo what they wrote.
    TargetLive,
    /// Bots started on both sides since the copy: each holds writes the other lacks.
    BothLive,
    /// The target has no lifecycle record but may be live: a cluster side with the layout
    /// marker (bots started there before lifecycle records existed), or a legacy side with data
    /// no copy wrote.
    TargetMayBeLive,
    /// The source is a copy that no bot started, and either a copy-only one (it kept older
    /// keys) or a copy of another keyspace than this step's target (which may have changed
    /// since): the data is on the keyspace it was copied from.
    SourceIsCopy,
    /// The source is not a complete keyspace: an interrupted copy into it, or a cluster side
    /// without the layout marker.
    SourceIncomplete,
    /// The source was (or is being) deleted by a cleanup.
    SourceDeleted,
    /// The source was copied to another keyspace than this step's target and no bot started on
    /// it since: the bots may run on that other keyspace.
    SourceMayBeStale,
    /// The two records name different copies: these keyspaces are not the two sides of one
    /// migration.
    NotPartners,
    /// The target's server holds the other layout of the target's prefix too (a keyspace with
    /// a lifecycle record that no cleanup deleted, or legacy data): the names both layouts share
    /// (conversations, cursors, leases, durability tables) are its keys, which a copy from
    /// another server or prefix would overwrite.
    SiblingInUse,
    /// Cleanup: bots started on the side to delete since its copy: it holds their writes.
    SideLive,
    /// Cleanup: the side took part in no copy (no record), so no other side holds its data.
    NoCopy,
    /// Cleanup: the other side's copy is not complete.
    CopyIncomplete,
    /// Cleanup: the other side is a copy-only copy (it kept some older keys) that no bot
    /// started: deleting its source would lose the newer values.
    CopyInexact,
    /// Cleanup: the other side was deleted: this side holds the only copy.
    OtherDeleted,
    /// A lifecycle record could not be read.
    UnreadableRecord {
        /// The record's key.
        key: String,
        /// What is wrong with it.
        detail: String,
    },
}

/// The step a decision is about, for messages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StepKind {
    /// `migrate_to_cluster_layout`.
    Migrate,
    /// `rollback_to_legacy_layout`.
    Rollback,
    /// `delete_abandoned_side`.
    Cleanup,
}

impl Unsafe {
    pub(crate) fn what(&self) -> String {
        match self {
            Unsafe::TargetLive => "the target is live: bots started on it since the copy, so a copy into it would bring back what they deleted and undo what they wrote".into(),
            Unsafe::BothLive => "bots started on both sides since the copy: each side holds writes the other lacks".into(),
            Unsafe::TargetMayBeLive => "the target has no lifecycle record but holds data or the layout marker that no copy recorded: bots may have written it".into(),
            Unsafe::SourceIsCopy => "the source is a copy that no bot started, copy-only or made from another keyspace than this target: the data is on the keyspace it was copied from".into(),
            Unsafe::SourceIncomplete => "the source is not a complete keyspace (an interrupted copy into it, or a cluster side without the layout marker)".into(),
            Unsafe::SourceDeleted => "the source was deleted (or is being deleted) by a cleanup".into(),
            Unsafe::SourceMayBeStale => "the source was copied to another keyspace than this target and no bot started on it since: the bots may run on that keyspace".into(),
            Unsafe::NotPartners => "the two sides' records name different copies: they are not the two sides of one migration".into(),
            Unsafe::SiblingInUse => "the target's server holds the other layout of the target's prefix, not deleted, and the names both layouts share (conversations, cursors, leases, durability tables) are its keys too".into(),
            Unsafe::SideLive => "bots started on the side to delete since its copy: it holds their writes".into(),
            Unsafe::NoCopy => "the side to delete took part in no recorded copy, so no other side is known to hold its data".into(),
            Unsafe::CopyIncomplete => "the other side's copy is not complete".into(),
            Unsafe::CopyInexact => "the other side is a copy-only copy (it kept some of its older keys) that no bot started: deleting its source would lose the newer values".into(),
            Unsafe::OtherDeleted => "the other side was deleted: this side holds the only copy".into(),
            Unsafe::UnreadableRecord { key, detail } => format!("the lifecycle record {key} cannot be read ({detail})"),
        }
    }

    /// What the operator can do instead, for `step`.
    pub fn advice(&self, step: StepKind) -> &'static str {
        match (self, step) {
            (Unsafe::TargetLive, StepKind::Migrate) => "if the bots run on the cluster side now, delete the legacy side with a cleanup (`botmesh-redis cleanup --layout legacy`); to bring them back to the legacy side, roll back from the cluster side",
            (Unsafe::TargetLive, StepKind::Rollback) => "if the bots run on the legacy side now, delete the cluster side with a cleanup (`botmesh-redis cleanup --layout cluster`); to move them to the cluster again, migrate from the legacy side",
            (Unsafe::TargetLive, StepKind::Cleanup) | (Unsafe::SideLive, _) => "the side holds the bots' newest data: delete the other side instead, or copy this one over it first",
            (Unsafe::BothLive, _) => "stop the bots, decide which side's writes to keep, and reconcile by hand; docs/migration.md (\"Both sides live\") shows how to record the choice",
            (Unsafe::TargetMayBeLive, _) => "check that no bot uses the target; if its data is a leftover, delete it by hand (docs/migration.md, \"A target without a record\"), or copy into a fresh prefix",
            (Unsafe::SourceIsCopy, _) => "start the bots on the side that holds the data, or on this copy (their start records it), then take the step from the side they run on",
            (Unsafe::SourceIncomplete, _) => "finish the copy into the source first (rerun it), or take the step from the side that holds the data",
            (Unsafe::SourceDeleted, _) => "finish the cleanup (`botmesh-redis cleanup`); the data is on the other side",
            (Unsafe::SourceMayBeStale, _) => "take the step against the keyspace the record names as the copy's other side; if the bots run on this side, start them here once (their start records it)",
            (Unsafe::NotPartners, _) => "check the prefixes and servers: name the two keyspaces of one migration",
            (Unsafe::SiblingInUse, _) => "if the bots left that keyspace, delete it first (`botmesh-redis cleanup`); else copy into another prefix",
            (Unsafe::NoCopy, _) | (Unsafe::CopyIncomplete, _) => "finish the copy first (rerun it); the cleanup waits for a complete copy",
            (Unsafe::CopyInexact, _) => "start the bots on the copy first, or rerun the copy as a mirror",
            (Unsafe::OtherDeleted, _) => "keep this side: it holds the only copy of the data",
            (Unsafe::UnreadableRecord { .. }, _) => "inspect the record (`HGETALL`); docs/migration.md describes its fields",
        }
    }
}
