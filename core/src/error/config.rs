//! Configuration mistakes, found before anything is sent.

use crate::addr::NodeAddr;

/// A configuration mistake, found before anything was sent. Each says what was refused and
/// what would be accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The legacy layout was chosen, or is what a component was given, on a cluster client.
    /// The message says what to do instead: the cluster layout, after migrating the data.
    #[error(
        "the legacy layout runs on a single node only: on a cluster client, {component} needs \
         the cluster layout (Layout::Cluster, the default with ClientOptions::cluster); data \
         written in the legacy layout on a single node moves to it with the command line \
         `botmesh-redis migrate` (docs/migration.md)"
    )]
    LegacyLayoutOnCluster {
        /// What was being built: `store`, `coordinator`, `schedules`, `leases`, `durability`.
        component: &'static str,
    },
    /// Neither a URL (one node) nor root nodes (a cluster) were given.
    #[error("neither a URL (one node) nor root nodes (a cluster) are given")]
    NoEndpoint,
    /// Both a URL and root nodes were given (or sentinels with either).
    #[error("give either a URL (one node) or root nodes (a cluster), not both")]
    BothEndpoints,
    /// A Redis Sentinel deployment without a sentinel or without a master name.
    #[error(
        "a Sentinel deployment needs at least one sentinel (host:port) and the master name \
         the sentinels monitor: {reason}"
    )]
    BadSentinel {
        /// What is missing.
        reason: String,
    },
    /// A cluster client without any root node.
    #[error("a cluster needs at least one root node")]
    NoRootNodes,
    /// A Redis URL or node address that does not parse; the credentials are redacted.
    #[error("bad redis URL {url:?}: {reason}")]
    BadUrl {
        /// The URL, with any credentials replaced.
        url: String,
        /// Why it was refused.
        reason: String,
    },
    /// A node address (`host:port`, `[v6]:port` or `:port`) that does not parse.
    #[error("not a node address: {text:?}")]
    BadNodeAddress {
        /// The text given.
        text: String,
    },
    /// A user name without a password.
    #[error("`username` is given without `password`")]
    UsernameWithoutPassword,
    /// A duration of zero where at least a millisecond is needed.
    #[error("`{field}` is 0: give at least 1 (milliseconds), or leave it out for the default")]
    ZeroDuration {
        /// The option.
        field: &'static str,
    },
    /// A time to live, lease, window or timeout argument shorter than one millisecond (zero
    /// included): it would expire at once, or (rounded up) grant something for 1 ms.
    #[error("`{argument}` is {given:?}: it must be at least 1 ms")]
    DurationBelowOneMs {
        /// The argument, as the API names it (`ttl`, `window`, `visibility`, `turn ttl`...).
        argument: &'static str,
        /// The duration given.
        given: std::time::Duration,
    },
    /// A message time outside ±2^53 ms, which a score (a double) cannot keep exactly.
    #[error("a message time of {time_ms} ms: times are kept exactly within ±2^53 ms")]
    MessageTimeOutOfRange {
        /// The time given.
        time_ms: i64,
    },
    /// A page size of zero: a listing or a claim asks for at least one item.
    #[error("a limit of 0: a page or a claim asks for at least 1 item (at most {max})")]
    ZeroLimit {
        /// The largest limit that is honoured (larger ones are capped to it).
        max: u32,
    },
    /// A bound of zero elements per reply: even `+OK` is one.
    #[error("max_reply_elements of 0: a reply is at least 1 element (the default is {default})")]
    ZeroReplyElements {
        /// The default bound.
        default: u64,
    },
    /// A number of lanes outside 1..=`max` ([`ClientOptions::lanes`](crate::ClientOptions::lanes)).
    #[error(
        "{given} lanes: a client runs between 1 and {max} (one node defaults to 2, a cluster to 1)"
    )]
    LaneCount {
        /// The number given.
        given: usize,
        /// The most lanes a client runs.
        max: usize,
    },
    /// A time to live longer than Redis accepts.
    #[error("a time to live of {ttl:?} is longer than the {max:?} accepted")]
    TtlTooLong {
        /// The time to live given.
        ttl: std::time::Duration,
        /// The longest accepted.
        max: std::time::Duration,
    },
    /// A turn queue's idle lifetime too short to keep exclusion and ticket order.
    #[error(
        "the turn idle lifetime {given:?} is shorter than {least:?}: twice the longest of the \
         turn TTL, claim timeout, wait timeout and poll interval, and at least a minimum"
    )]
    TurnIdleLifetimeTooShort {
        /// The lifetime given.
        given: std::time::Duration,
        /// The shortest accepted with these options.
        least: std::time::Duration,
    },
    /// A `WAIT` timeout at or above the response timeout, which would close the connection
    /// under it.
    #[error(
        "a WAIT of {wait_ms} ms is not below the response timeout of {response_timeout:?}, \
         which would close the connection under it"
    )]
    WaitNotBelowResponseTimeout {
        /// The `WAIT` timeout.
        wait_ms: u64,
        /// The response timeout.
        response_timeout: std::time::Duration,
    },
    /// A request to `:port` (no host) before any node answered the plan: nothing names the
    /// host.
    #[error("a request to :{port} before any node answered the plan: no host to send it to")]
    NodeWithoutHost {
        /// The port named.
        port: u16,
    },
    /// The root nodes mix `redis://` and `rediss://`: TLS is used to every node or none.
    #[error("the root nodes mix `redis://` and `rediss://`: TLS is used to every node or none")]
    MixedTlsSchemes,
    /// TLS settings that cannot be used: a root or client certificate or key that does not
    /// parse or is refused, or no root to trust.
    #[error("TLS: {reason}")]
    Tls {
        /// What was refused, and why.
        reason: String,
    },
    /// A `rediss://` URL or [`ClientOptions::tls`](crate::ClientOptions::tls) was given to a
    /// client built without TLS: the driver crate's default feature `tls` is off. Found when
    /// the client starts; nothing was sent.
    #[error(
        "TLS was asked for (a rediss:// URL or ClientOptions::tls), but this client was built \
         without TLS: enable the `tls` feature of the driver crate (on by default; \
         `default-features = false` turns it off)"
    )]
    TlsNotBuilt,
    /// TLS was asked for (`ClientOptions::tls`) on a Unix socket: Redis serves its Unix
    /// socket without TLS (`tls-port` is TCP only), and the socket never leaves the machine.
    #[error(
        "TLS was asked for on the Unix socket {path:?}, which Redis serves without TLS: drop \
         ClientOptions::tls, or connect over TCP with a rediss:// URL"
    )]
    TlsOverUnixSocket {
        /// The socket's path.
        path: std::path::PathBuf,
    },
    /// A single-node client ([`ClientOptions::url`](crate::ClientOptions::url)) was pointed
    /// at a Redis Cluster node (its `INFO cluster` says `cluster_enabled:1`): every key outside
    /// that node's slots would fail with `MOVED`, and legacy-layout keys would land on one
    /// master. Found by `connect`, before any request ran.
    #[error(
        "{addr} is a Redis Cluster node (INFO says cluster_enabled:1), but the client was made \
         for a single node: use ClientOptions::cluster([\"{addr}\", ...]) with the cluster's \
         nodes as seeds"
    )]
    ClusterNodeForSingleClient {
        /// The node the URL names.
        addr: NodeAddr,
    },
    /// A cluster client ([`ClientOptions::cluster`](crate::ClientOptions::cluster)) was
    /// pointed at a node without cluster support (it answered `CLUSTER SLOTS` with `ERR This
    /// instance has cluster support disabled`). Found during discovery, at once (no retry can
    /// change it), before any request ran.
    #[error(
        "{addr} is a single Redis node (cluster support disabled), but the client was made for \
         a cluster: use ClientOptions::url(\"redis://{addr}\") for a single node"
    )]
    SingleNodeForClusterClient {
        /// The seed that said so.
        addr: NodeAddr,
    },
    /// An operation used for records it does not write (checkpoints expire, schedules carry
    /// fencing tokens).
    #[error("{records} cannot be written here: use {instead}")]
    WrongOperation {
        /// The records.
        records: &'static str,
        /// The operation that writes them.
        instead: &'static str,
    },
}
