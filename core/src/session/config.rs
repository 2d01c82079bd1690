//! What a session is configured with: the endpoints, credentials, timeouts and retry policy.

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::addr::{DialTarget, NodeAddr};
use crate::executor::Deployment;
use crate::framing::DEFAULT_MAX_REPLY_ELEMENTS;
use crate::retry::RetryPolicy;

/// Credentials sent with `AUTH` when a connection opens.
#[derive(Clone, PartialEq, Eq)]
pub struct Auth {
    /// An ACL user name; `None` for the default user (`requirepass`).
    pub username: Option<String>,
    /// The password.
    pub password: String,
}

impl fmt::Debug for Auth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Auth")
            .field("username", &self.username)
            .field("password", &"<redacted>")
            .finish()
    }
}

/// Maps an announced node address to the address to dial (Docker, NAT).
pub type AddressMap = Arc<dyn Fn(&NodeAddr) -> NodeAddr + Send + Sync>;

/// What the session connects to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Endpoints {
    /// One node, no cluster: every request goes there.
    Single(NodeAddr),
    /// A cluster, discovered from these root nodes.
    Cluster(Vec<NodeAddr>),
    /// One node, no cluster, on the Unix socket at this path (`unixsocket` in `redis.conf`).
    /// Its identity in errors and logs is [`NodeAddr::unix_socket`]; the address map does not
    /// apply.
    UnixSocket(PathBuf),
    /// One node, the master these sentinels name: a single node for the store, whose address
    /// the session asks the sentinels for and follows through failovers.
    Sentinel(SentinelEndpoints),
}

/// Where a Redis Sentinel deployment is asked for its master.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SentinelEndpoints {
    /// The sentinels, asked in turn.
    pub sentinels: Vec<NodeAddr>,
    /// The name the sentinels monitor the master under (`sentinel monitor <name> ...`).
    pub master_name: String,
    /// Credentials for the sentinels, often not the data nodes' ([`Config::auth`]); `None`
    /// sends no `AUTH` to them.
    pub auth: Option<Auth>,
}

impl Endpoints {
    /// What these endpoints are: the one place a session, a client and the components built
    /// over it learn whether they talk to a cluster.
    pub fn deployment(&self) -> Deployment {
        match self {
            Endpoints::Single(_) | Endpoints::Sentinel(_) | Endpoints::UnixSocket(_) => {
                Deployment::Single
            }
            Endpoints::Cluster(_) => Deployment::Cluster,
        }
    }

    /// The one node of a single-node deployment, as errors and logs name it; `None` on a
    /// cluster, and under Sentinel, whose master is whichever node the sentinels name now.
    pub fn single_node(&self) -> Option<NodeAddr> {
        match self {
            Endpoints::Single(addr) => Some(addr.clone()),
            Endpoints::UnixSocket(path) => Some(NodeAddr::unix_socket(path)),
            Endpoints::Cluster(_) | Endpoints::Sentinel(_) => None,
        }
    }

    /// Where to open a connection to `node`, whose announced address is `addr`: the socket's
    /// path on a Unix-socket endpoint (its one node), else `addr` over TCP, through the
    /// address map when there is one.
    pub(crate) fn dial_target(&self, addr: &NodeAddr, map: Option<&AddressMap>) -> DialTarget {
        match (self, map) {
            (Endpoints::UnixSocket(path), _) => DialTarget::Unix(path.clone()),
            (_, Some(map)) => DialTarget::Tcp(map(addr)),
            (_, None) => DialTarget::Tcp(addr.clone()),
        }
    }
}

/// Session settings. [`Config::single`] and [`Config::cluster`] give the defaults.
///
/// Durations below one millisecond count as one millisecond (see the drain rule).
#[derive(Clone)]
pub struct Config {
    /// What to connect to.
    pub endpoints: Endpoints,
    /// Credentials for every connection to a data node (the sentinels have their own).
    pub auth: Option<Auth>,
    /// `MOVED`/`ASK` redirections one request may follow (default 16).
    pub max_redirections: u32,
    /// Backoff for retryable replies and unreachable nodes.
    pub retry: RetryPolicy,
    /// Overall deadline of one batch of requests (default 10 s).
    pub request_timeout: Duration,
    /// Deadline of a TCP connect plus `AUTH` (default 2 s).
    pub connect_timeout: Duration,
    /// A connection whose oldest request waits this long for a reply is closed (default 5 s).
    pub response_timeout: Duration,
    /// A connection idle this long is sent a `PING` (default 30 s; `None`: never), whose
    /// answer the response timeout awaits: one the peer dropped without a word (a host gone,
    /// a NAT or a load balancer that forgot it) is closed then, not found dead by the first
    /// write after the pause, which would end as `ReplyLost` though it may never have arrived.
    pub idle_probe: Option<Duration>,
    /// A cluster connection whose oldest request waits this long asks for a topology refresh
    /// (a Sentinel deployment's master connection: a question to the sentinels), and again
    /// after each such wait, without closing (default 1 s): a master stopped past the node
    /// timeout is replaced meanwhile, and once the map names its successor, its late answers
    /// to writes are not taken as successes.
    pub stall_refresh: Duration,
    /// Periodic topology refresh (a Sentinel deployment: the question to the sentinels), so a
    /// failover without `MOVED` or `+switch-master` is noticed (default 5 s).
    pub refresh_interval: Duration,
    /// At most one refresh starts per this interval (default 100 ms).
    pub refresh_min_interval: Duration,
    /// A reply larger than this closes the connection (default 512 MiB, Redis' own bulk cap).
    pub max_read_buffer: usize,
    /// A reply of more elements than this (at every depth, itself included) closes the
    /// connection before it is decoded, since a few wire bytes decode into dozens (default
    /// [`DEFAULT_MAX_REPLY_ELEMENTS`]).
    pub max_reply_elements: u64,
    /// Seed of the backoff jitter.
    pub seed: u64,
    /// Remaps announced addresses when dialling.
    pub address_map: Option<AddressMap>,
}

impl fmt::Debug for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Config")
            .field("endpoints", &self.endpoints)
            .field("auth", &self.auth)
            .field("max_redirections", &self.max_redirections)
            .field("retry", &self.retry)
            .field("request_timeout", &self.request_timeout)
            .field("connect_timeout", &self.connect_timeout)
            .field("response_timeout", &self.response_timeout)
            .field("idle_probe", &self.idle_probe)
            .field("stall_refresh", &self.stall_refresh)
            .field("refresh_interval", &self.refresh_interval)
            .field("address_map", &self.address_map.is_some())
            .finish_non_exhaustive()
    }
}

impl Config {
    pub(super) fn with(endpoints: Endpoints) -> Self {
        Config {
            endpoints,
            auth: None,
            max_redirections: 16,
            retry: RetryPolicy::default(),
            request_timeout: Duration::from_secs(10),
            connect_timeout: Duration::from_secs(2),
            response_timeout: Duration::from_secs(5),
            idle_probe: Some(Duration::from_secs(30)),
            stall_refresh: Duration::from_secs(1),
            refresh_interval: Duration::from_secs(5),
            refresh_min_interval: Duration::from_millis(100),
            max_read_buffer: 512 << 20,
            max_reply_elements: DEFAULT_MAX_REPLY_ELEMENTS,
            seed: 0x5eed,
            address_map: None,
        }
    }

    /// One node, defaults elsewhere.
    pub fn single(addr: NodeAddr) -> Self {
        Config::with(Endpoints::Single(addr))
    }

    /// One node on the Unix socket at `path`, defaults elsewhere.
    pub fn unix_socket(path: impl Into<PathBuf>) -> Self {
        Config::with(Endpoints::UnixSocket(path.into()))
    }

    /// A cluster from its root nodes, defaults elsewhere.
    pub fn cluster(root_nodes: Vec<NodeAddr>) -> Self {
        Config::with(Endpoints::Cluster(root_nodes))
    }

    /// The master that `sentinels` name `master_name`, defaults elsewhere.
    pub fn sentinel(sentinels: Vec<NodeAddr>, master_name: impl Into<String>) -> Self {
        Config::with(Endpoints::Sentinel(SentinelEndpoints {
            sentinels,
            master_name: master_name.into(),
            auth: None,
        }))
    }
}
