//! What a user configures when creating a client, shared by every driver: the URL or root
//! nodes, credentials, the address map and the retry knobs.
//!
//! There is one configuration, the session's [`Config`]: [`ClientOptions`] holds it and each
//! option writes into it, so a knob has one home and one default (the session's). URLs are
//! parsed once, when the options are made (`url.rs`); a config file's sections (`file.rs`,
//! feature `serde`) are turned into these options; TLS settings are `tls.rs`.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::addr::{DialTarget, NodeAddr};
use crate::error::{ConfigError, Error};
use crate::executor::Deployment;
use crate::framing::DEFAULT_MAX_REPLY_ELEMENTS;
use crate::retry::RetryPolicy;
use crate::session::{Auth, Config, Endpoints};

#[cfg(feature = "serde")]
mod file;
mod sentinel;
mod tls;
mod url;

#[cfg(feature = "serde")]
pub use file::{ClientConfig, SentinelConfig, StoreConfig, TlsConfig, TurnConfig};
pub use sentinel::{parse_sentinel_url, ParsedSentinelUrl, SENTINEL_PORT};
pub use tls::{Pem, TlsOptions};
pub use url::{parse_url, redact_url, ParsedUrl};

/// The most lanes a client runs ([`ClientOptions::lanes`]).
pub const MAX_LANES: usize = 64;

/// Client options: exactly one of [`ClientOptions::url`] (one node),
/// [`ClientOptions::cluster`] (root nodes of a cluster) or [`ClientOptions::sentinel`] (the
/// master of a Redis Sentinel deployment), then any of the setters.
///
/// The options hold the session's configuration and write into it; a mistake in the URLs is
/// kept and reported by [`ClientOptions::to_config`] (which a driver calls when the client
/// starts), so building options never fails.
#[derive(Clone)]
pub struct ClientOptions {
    /// The session's configuration, as the options have written it so far.
    config: Config,
    /// Whether the URLs say `rediss://`: all of them (`Some(true)`), none (`Some(false)`), or
    /// some but not all (`None`, refused by [`ClientOptions::tls_settings`]).
    url_tls: Option<bool>,
    tls: Option<TlsOptions>,
    /// Whether [`ClientOptions::seed`] was given; else the driver's seed is used.
    seeded: bool,
    /// [`ClientOptions::lanes`], when given; else the deployment's default.
    lanes: Option<usize>,
    /// The first mistake in the endpoints (a URL that does not parse, no endpoint at all).
    invalid: Option<Error>,
}

/// No endpoint yet: [`ClientOptions::to_config`] refuses it with [`ConfigError::NoEndpoint`].
impl Default for ClientOptions {
    fn default() -> Self {
        ClientOptions::unusable(ConfigError::NoEndpoint.into())
    }
}

impl fmt::Debug for ClientOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // `Auth`'s own `Debug` redacts the password.
        f.debug_struct("ClientOptions")
            .field("endpoints", &self.config.endpoints)
            .field("auth", &self.config.auth)
            .field("address_map", &self.config.address_map.is_some())
            .field("tls", &self.tls)
            .field("invalid", &self.invalid)
            .finish_non_exhaustive()
    }
}

/// One node's URL: `"redis://127.0.0.1:6379"` is [`ClientOptions::url`]`("redis://127.0.0.1:6379")`.
impl From<&str> for ClientOptions {
    fn from(url: &str) -> Self {
        ClientOptions::url(url)
    }
}

impl From<String> for ClientOptions {
    fn from(url: String) -> Self {
        ClientOptions::url(url)
    }
}

impl ClientOptions {
    fn with(config: Config, url_tls: Option<bool>) -> Self {
        ClientOptions {
            config,
            url_tls,
            tls: None,
            seeded: false,
            lanes: None,
            invalid: None,
        }
    }

    /// Options whose endpoint is `error`: a single node nobody dials, since
    /// [`ClientOptions::to_config`] reports the error instead.
    fn unusable(error: Error) -> Self {
        ClientOptions::with(Config::single(NodeAddr::new("", 0)), Some(false)).invalid(error)
    }

    fn invalid(mut self, error: Error) -> Self {
        self.invalid.get_or_insert(error);
        self
    }

    /// One node: `redis://[user[:password]@]host:port`, `rediss://...` for TLS (with the
    /// default [`TlsOptions`] unless [`ClientOptions::tls`] gives others), or a Unix socket,
    /// `unix:///run/redis.sock` or `redis+unix:///run/redis.sock` (credentials in the
    /// user-info, `redis+unix://bot:secret@/run/redis.sock`, or as redis-rs writes them,
    /// `?user=bot&pass=secret`). A
    /// `redis+sentinel://[user:password@]host:port[,host:port...]/<master name>` URL names a
    /// Redis Sentinel deployment instead ([`ClientOptions::sentinel`]; the URL's credentials
    /// are the data nodes').
    pub fn url(url: impl Into<String>) -> Self {
        let url = url.into();
        if let Some(parsed) = parse_sentinel_url(&url) {
            return parsed.map_or_else(ClientOptions::unusable, ClientOptions::sentinel_url);
        }
        match parse_url(&url) {
            Ok(parsed) => {
                let config = match parsed.target {
                    DialTarget::Tcp(addr) => Config::single(addr),
                    DialTarget::Unix(path) => Config::unix_socket(path),
                };
                let mut options = ClientOptions::with(config, Some(parsed.tls));
                options.config.auth = parsed.auth;
                options
            }
            Err(e) => ClientOptions::unusable(e),
        }
    }

    /// A cluster, discovered from these root nodes (`host:port`, `redis://...` or
    /// `rediss://...`; TLS, when on, is used to every node of the cluster). Credentials in the
    /// first URL that has some are used for every node. A Unix socket is refused here (a
    /// cluster announces TCP addresses): it is one node, for [`ClientOptions::url`].
    pub fn cluster<S: Into<String>>(root_nodes: impl IntoIterator<Item = S>) -> Self {
        let mut roots = Vec::new();
        let (mut auth, mut url_tls, mut invalid) = (None, None::<Option<bool>>, None);
        for node in root_nodes {
            let node = node.into();
            match parse_url(&node) {
                Ok(ParsedUrl {
                    target: DialTarget::Tcp(addr),
                    auth: node_auth,
                    tls,
                }) => {
                    roots.push(addr);
                    if auth.is_none() {
                        auth = node_auth;
                    }
                    url_tls = Some(match url_tls {
                        None => Some(tls),
                        Some(all) => all.filter(|&all_tls| all_tls == tls),
                    });
                }
                Ok(ParsedUrl {
                    target: DialTarget::Unix(_),
                    ..
                }) => {
                    invalid.get_or_insert(unix_socket_as_root(&node));
                }
                Err(e) => {
                    invalid.get_or_insert(e);
                }
            }
        }
        if roots.is_empty() && invalid.is_none() {
            invalid = Some(ConfigError::NoEndpoint.into());
        }
        let mut options =
            ClientOptions::with(Config::cluster(roots), url_tls.unwrap_or(Some(false)));
        options.config.auth = auth;
        match invalid {
            Some(e) => options.invalid(e),
            None => options,
        }
    }

    /// Credentials for every node; a password in the URL also works, and this one wins.
    pub fn credentials(mut self, username: Option<&str>, password: &str) -> Self {
        self.config.auth = Some(Auth {
            username: username.map(str::to_owned),
            password: password.to_owned(),
        });
        self
    }

    /// Maps each announced node address to the address to dial, for clusters that announce
    /// addresses this process cannot reach (Docker, NAT). The announced address stays the
    /// node's identity.
    pub fn node_address_map(
        mut self,
        map: impl Fn(&NodeAddr) -> NodeAddr + Send + Sync + 'static,
    ) -> Self {
        self.config.address_map = Some(Arc::new(map));
        self
    }

    /// `MOVED`/`ASK` redirections one request may follow (default 16).
    pub fn max_command_redirections(mut self, n: u32) -> Self {
        self.config.max_redirections = n;
        self
    }

    /// Retries of `TRYAGAIN`, `CLUSTERDOWN` and unreachable nodes (default 10 attempts from
    /// 10 ms, doubling, capped at 500 ms: about 2.5 s). The seed's `withClusterRetry`.
    pub fn cluster_retry(mut self, attempts: u32, base: Duration) -> Self {
        let cap = RetryPolicy::default().cap.max(base);
        self.config.retry = RetryPolicy {
            attempts,
            base,
            cap,
        };
        self
    }

    /// TCP connect plus `AUTH` deadline (default 2 s).
    pub fn connect_timeout(mut self, d: Duration) -> Self {
        self.config.connect_timeout = d;
        self
    }

    /// Overall deadline of one batch of requests (default 10 s).
    pub fn request_timeout(mut self, d: Duration) -> Self {
        self.config.request_timeout = d;
        self
    }

    /// A connection whose oldest request has had no reply this long is closed (default 5 s).
    pub fn response_timeout(mut self, d: Duration) -> Self {
        self.config.response_timeout = d;
        self
    }

    /// A connection idle this long is sent a `PING`, whose answer the response timeout awaits
    /// (default 30 s; `None`: never): a connection the peer dropped without a word (a host
    /// gone, a NAT or load balancer that forgot it) is closed within the probe and the response
    /// timeout of going quiet, rather than found dead by the first write after the pause.
    pub fn idle_probe(mut self, every: Option<Duration>) -> Self {
        self.config.idle_probe = every;
        self
    }

    /// A cluster connection (or a Sentinel deployment's master connection) whose oldest
    /// request has had no reply this long asks for a topology refresh (or the sentinels), again
    /// after each such wait, without closing (default 1 s): a replaced master's late answers
    /// to writes are then reported as outcome unknown.
    pub fn stall_refresh(mut self, d: Duration) -> Self {
        self.config.stall_refresh = d;
        self
    }

    /// Periodic topology refresh, or question to the sentinels of a Sentinel deployment
    /// (default 5 s).
    pub fn refresh_interval(mut self, d: Duration) -> Self {
        self.config.refresh_interval = d;
        self
    }

    /// The most elements one reply may hold, at every depth (default
    /// [`DEFAULT_MAX_REPLY_ELEMENTS`], 4 Mi): a reply that announces more closes its
    /// connection before it is decoded, and the call fails as a protocol error. Four bytes on
    /// the wire (`:0\r\n`) decode into dozens, so the 512 MiB byte cap alone would let one
    /// reply take gigabytes. Raise it for raw commands that read huge collections whole;
    /// 0 is refused ([`ConfigError::ZeroReplyElements`]).
    pub fn max_reply_elements(mut self, n: u64) -> Self {
        if n == 0 {
            return self.invalid(
                ConfigError::ZeroReplyElements {
                    default: DEFAULT_MAX_REPLY_ELEMENTS,
                }
                .into(),
            );
        }
        self.config.max_reply_elements = n;
        self
    }

    /// How many lanes the client runs: each lane is a session of its own, with its own
    /// connection to every node, and the calls of one task stay in one lane. Default: 1 for a
    /// cluster; for one node (a URL, a Unix socket, or the master of a Sentinel deployment)
    /// the driver's count, the one its runtime measured best (see
    /// [`ClientOptions::lane_count`]); at most [`MAX_LANES`], and 0 is refused
    /// ([`ConfigError::LaneCount`]).
    ///
    /// A lane carries its calls to a node in batches, one batch in flight per connection:
    /// while the node works on one lane's batch, the client turns the other lanes' replies
    /// into their next batches, so the node does not wait for the client. On one node, 64
    /// callers, tokio, four lanes measured 1.3-1.4 times the `GET`s a second of two, at the
    /// same or less CPU a call, and on the current-thread runtime three measured better than
    /// four (`docs/performance.md`, "Four lanes to one node", "Three lanes on one thread"); a
    /// cluster's connections to its masters already overlap so, and a second lane there
    /// measured slower (each batch halved for nothing). Each lane costs a connection per
    /// node (and, for a Sentinel deployment, a subscription per lane).
    ///
    /// A call's lane follows the task that polls it: calls a task awaits in turn, or joins in
    /// one poll (`join!`), stay in order on one lane, as they would with one. Futures given
    /// wakers of their own (a `FuturesUnordered`) may take different lanes; calls of
    /// different tasks were never ordered.
    pub fn lanes(mut self, n: usize) -> Self {
        if n == 0 || n > MAX_LANES {
            return self.invalid(
                ConfigError::LaneCount {
                    given: n,
                    max: MAX_LANES,
                }
                .into(),
            );
        }
        self.lanes = Some(n);
        self
    }

    /// The lanes a client of these options runs: the count given to
    /// [`ClientOptions::lanes`], else 1 on a cluster and `one_node` on one node, the driver's
    /// own default (its runtime's `one_node_lanes`: how many lanes keep one node busy depends
    /// on how the runtime runs the lanes' tasks).
    pub fn lane_count(&self, one_node: usize) -> usize {
        match (self.lanes, self.deployment()) {
            (Some(n), _) => n,
            (None, Deployment::Single) => one_node,
            (None, Deployment::Cluster) => 1,
        }
    }

    /// Seed of the retry jitter (drivers pass a random one by default).
    pub fn seed(mut self, seed: u64) -> Self {
        self.config.seed = seed;
        self.seeded = true;
        self
    }

    /// TLS to every node, with these settings, whatever the URLs' scheme. `rediss://` URLs
    /// without this option use [`TlsOptions::new`].
    pub fn tls(mut self, tls: TlsOptions) -> Self {
        self.tls = Some(tls);
        self
    }

    /// The TLS settings in force, or `None` for plain TCP: those given to
    /// [`ClientOptions::tls`], else the defaults when the URLs say `rediss://`. Root nodes that
    /// mix `redis://` and `rediss://` are a configuration error (TLS is all or nothing for a
    /// client), as is a bad URL, and TLS over a Unix socket
    /// ([`ConfigError::TlsOverUnixSocket`]: the socket is local, and Redis serves it in plain).
    pub fn tls_settings(&self) -> Result<Option<TlsOptions>, Error> {
        if let Some(e) = &self.invalid {
            return Err(e.clone());
        }
        let Some(url_tls) = self.url_tls else {
            return Err(ConfigError::MixedTlsSchemes.into());
        };
        let tls = match &self.tls {
            Some(tls) => Some(tls.clone()),
            None => url_tls.then(TlsOptions::new),
        };
        if let (Some(_), Endpoints::UnixSocket(path)) = (&tls, &self.config.endpoints) {
            return Err(ConfigError::TlsOverUnixSocket { path: path.clone() }.into());
        }
        Ok(tls)
    }

    /// Whether these options name a cluster.
    pub fn is_cluster(&self) -> bool {
        self.deployment() == Deployment::Cluster
    }

    /// What these options connect to: root nodes name a cluster, a URL one node.
    pub fn deployment(&self) -> Deployment {
        self.config.endpoints.deployment()
    }

    /// The session configuration these options wrote, seeded with `seed` unless
    /// [`ClientOptions::seed`] set one; fails with [`Error::Config`] for a URL that does not
    /// parse or no endpoint.
    pub fn to_config(&self, seed: u64) -> Result<Config, Error> {
        self.check()?;
        let mut config = self.config.clone();
        if !self.seeded {
            config.seed = seed;
        }
        Ok(config)
    }

    /// The first mistake in the endpoints, if any.
    pub(crate) fn check(&self) -> Result<(), Error> {
        match &self.invalid {
            Some(e) => Err(e.clone()),
            None => Ok(()),
        }
    }
}

/// A Unix socket among a cluster's root nodes: a cluster announces TCP addresses, so its
/// nodes are not reached that way.
fn unix_socket_as_root(url: &str) -> Error {
    ConfigError::BadUrl {
        url: redact_url(url),
        reason: "a Unix socket is one node: use ClientOptions::url, not cluster".to_owned(),
    }
    .into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_write_into_the_session_config() {
        let c = ClientOptions::cluster(["redis://h:1", "[::1]:2"])
            .max_command_redirections(3)
            .cluster_retry(4, Duration::from_millis(20))
            .connect_timeout(Duration::from_millis(5))
            .request_timeout(Duration::from_millis(6))
            .response_timeout(Duration::from_millis(7))
            .stall_refresh(Duration::from_millis(8))
            .refresh_interval(Duration::from_millis(9))
            .seed(11)
            .to_config(1)
            .unwrap();
        assert_eq!(
            c.endpoints,
            Endpoints::Cluster(vec![NodeAddr::new("h", 1), NodeAddr::new("::1", 2)])
        );
        assert_eq!(c.max_redirections, 3);
        assert_eq!(
            (c.retry.attempts, c.retry.base),
            (4, Duration::from_millis(20))
        );
        assert_eq!(c.connect_timeout, Duration::from_millis(5));
        assert_eq!(c.request_timeout, Duration::from_millis(6));
        assert_eq!(c.response_timeout, Duration::from_millis(7));
        assert_eq!(c.stall_refresh, Duration::from_millis(8));
        assert_eq!(c.refresh_interval, Duration::from_millis(9));
        assert_eq!(c.seed, 11, "an explicit seed wins over the driver's");
        // Untouched knobs keep the session's defaults.
        let d = ClientOptions::url("redis://h:1").to_config(5).unwrap();
        let defaults = Config::single(NodeAddr::new("h", 1));
        assert_eq!(d.max_redirections, defaults.max_redirections);
        assert_eq!(d.connect_timeout, defaults.connect_timeout);
        assert_eq!(d.seed, 5);
    }

    #[test]
    fn a_bad_url_or_no_endpoint_is_reported_when_the_config_is_asked_for() {
        let bad = ClientOptions::cluster(["h:1", "h:notaport"]);
        assert!(matches!(
            bad.to_config(1),
            Err(Error::Config(ConfigError::BadUrl { .. }))
        ));
        assert!(bad.tls_settings().is_err());
        assert_eq!(
            ClientOptions::cluster(Vec::<String>::new())
                .to_config(1)
                .err(),
            Some(Error::Config(ConfigError::NoEndpoint))
        );
        assert!(ClientOptions::default().to_config(1).is_err());
    }

    #[test]
    fn credentials_override_the_url() {
        let c = ClientOptions::cluster(["redis://u:p@h:1", "h:2"])
            .credentials(Some("acl"), "pw")
            .to_config(9)
            .unwrap();
        assert_eq!(
            c.auth,
            Some(Auth {
                username: Some("acl".into()),
                password: "pw".into()
            })
        );
        assert_eq!(c.seed, 9);
    }

    #[test]
    fn tls_settings_follow_the_scheme_or_the_option() {
        assert_eq!(ClientOptions::url("redis://h:1").tls_settings(), Ok(None));
        assert_eq!(
            ClientOptions::url("rediss://h:1").tls_settings(),
            Ok(Some(TlsOptions::new()))
        );
        assert_eq!(
            ClientOptions::cluster(["rediss://h:1", "rediss://h:2"]).tls_settings(),
            Ok(Some(TlsOptions::new()))
        );
        // The explicit option turns TLS on for `redis://` and bare addresses too.
        let tls = TlsOptions::new()
            .root_certificates_pem(b"pem".to_vec())
            .only_these_roots()
            .server_name("redis.internal");
        assert_eq!(
            ClientOptions::cluster(["h:1", "h:2"])
                .tls(tls.clone())
                .tls_settings(),
            Ok(Some(tls.clone()))
        );
        assert_eq!(tls.roots_pem(), [Pem::Bytes(b"pem".to_vec())]);
        assert!(tls.trusts_only_given_roots());
        assert_eq!(tls.server_name_override(), Some("redis.internal"));
        assert_eq!(tls.client_certificate(), None);
        // Half the roots on TLS is refused.
        assert!(matches!(
            ClientOptions::cluster(["rediss://h:1", "redis://h:2"]).tls_settings(),
            Err(Error::Config(_))
        ));
        // TLS does not change the session's configuration.
        let c = ClientOptions::url("rediss://u:p@h:1").to_config(1).unwrap();
        assert_eq!(c.auth.unwrap().username.as_deref(), Some("u"));
    }

    #[test]
    fn the_client_key_is_not_in_debug() {
        let tls = TlsOptions::new().client_certificate_pem(b"chain".to_vec(), b"SECRET".to_vec());
        let shown = format!("{:?}", ClientOptions::url("rediss://h:1").tls(tls));
        assert!(!shown.contains("SECRET"), "{shown}");
        assert!(shown.contains("client_cert: true"), "{shown}");
    }

    #[test]
    fn a_unix_socket_url_is_one_node_with_its_credentials() {
        for url in [
            "unix://bot:pw@/run/redis.sock",
            "redis+unix:///run/redis.sock?db=0&user=bot&pass=pw",
        ] {
            let options = ClientOptions::url(url);
            assert_eq!(options.deployment(), Deployment::Single, "{url}");
            assert_eq!(options.tls_settings(), Ok(None), "{url}");
            let c = options.to_config(1).unwrap();
            assert_eq!(
                c.endpoints,
                Endpoints::UnixSocket("/run/redis.sock".into()),
                "{url}"
            );
            assert_eq!(
                c.auth,
                Some(Auth {
                    username: Some("bot".into()),
                    password: "pw".into()
                }),
                "{url}"
            );
        }
    }

    #[test]
    fn a_unix_socket_is_refused_as_a_root_node_and_with_tls() {
        let roots = ClientOptions::cluster(["h:1", "unix://:secret@/run/redis.sock"]);
        let Err(Error::Config(ConfigError::BadUrl { url, reason })) = roots.to_config(1) else {
            panic!("a Unix socket was taken as a root node");
        };
        assert_eq!(url, "unix://<credentials>@/run/redis.sock");
        assert!(reason.contains("ClientOptions::url"), "{reason}");
        let tls = ClientOptions::url("unix:///run/redis.sock").tls(TlsOptions::new());
        assert_eq!(
            tls.tls_settings(),
            Err(ConfigError::TlsOverUnixSocket {
                path: "/run/redis.sock".into()
            }
            .into())
        );
    }

    /// Every way an address with credentials reaches `Debug` or an error: root-node URLs,
    /// a single node's URL, a Unix socket's query, a URL that does not parse, the session's
    /// `Config` and the config file's sections.
    #[test]
    fn no_password_reaches_debug_or_an_error() {
        let shown = [
            format!(
                "{:?}",
                ClientOptions::cluster(["redis://bot:secret@10.0.0.1:7000"])
            ),
            format!("{:?}", ClientOptions::url("rediss://bot:secret@h:1")),
            format!(
                "{:?}",
                ClientOptions::url("redis+unix:///run/r.sock?user=bot&pass=secret")
            ),
            format!("{:?}", ClientOptions::url("unix://:secret@/run/r.sock")),
            format!(
                "{:?}",
                ClientOptions::cluster(["redis://bot:secret@h:99999"])
            ),
            format!("{:?}", ClientOptions::url("redis://bot:secret@h:1/9")),
            format!(
                "{:?}",
                ClientOptions::url("unix:///r.sock?db=2&pass=secret")
            ),
            format!("{:?}", ClientOptions::url("nope://bot:secret@h:1")),
            format!(
                "{}",
                ClientOptions::url("redis://bot:secret@h:1/9")
                    .to_config(1)
                    .unwrap_err()
            ),
            format!(
                "{:?}",
                ClientOptions::url("redis://bot:secret@h:1")
                    .to_config(1)
                    .unwrap()
            ),
            format!(
                "{:?}",
                ClientOptions::url("h:1")
                    .credentials(Some("bot"), "secret")
                    .to_config(1)
                    .unwrap()
                    .auth
            ),
        ];
        for text in &shown {
            assert!(!text.contains("secret"), "{text}");
        }
        // What is shown still says where: the node, the user, the reason.
        assert!(shown[0].contains("10.0.0.1"), "{}", shown[0]);
        assert!(shown[2].contains("/run/r.sock"), "{}", shown[2]);
        assert!(shown[2].contains("bot"), "{}", shown[2]);
        assert!(shown[8].contains("only database 0"), "{}", shown[8]);
    }
}
