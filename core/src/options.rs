//! What a user configures when creating a client, shared by every driver: the URL or root
//! nodes, credentials, the address map and the retry knobs, turned into a session
//! [`Config`].

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use percent_encoding::percent_decode_str;

use crate::addr::NodeAddr;
use crate::error::{ConfigError, Error};
use crate::executor::Deployment;
use crate::retry::RetryPolicy;
use crate::session::{Auth, Config};

/// Client options: exactly one of [`ClientOptions::url`] (one node) or
/// [`ClientOptions::cluster`] (root nodes of a cluster).
#[derive(Clone, Default)]
pub struct ClientOptions {
    url: Option<String>,
    root_nodes: Vec<String>,
    username: Option<String>,
    password: Option<String>,
    address_map: Option<crate::session::AddressMap>,
    max_redirections: Option<u32>,
    retry: Option<RetryPolicy>,
    connect_timeout: Option<Duration>,
    request_timeout: Option<Duration>,
    response_timeout: Option<Duration>,
    stall_refresh: Option<Duration>,
    refresh_interval: Option<Duration>,
    seed: Option<u64>,
    tls: Option<TlsOptions>,
}

/// TLS settings (see [`ClientOptions::tls`]): what to trust and what to present. The core keeps
/// only the PEM bytes and names; the driver parses them and speaks TLS (rustls), so the core
/// stays free of I/O and of a TLS dependency.
///
/// By default the server's certificate must chain to the Mozilla root store as shipped by
/// `webpki-roots` (the same roots on every machine, whatever the system has installed), and
/// name the host dialled: a DNS name, or an IP address that the certificate carries as an IP
/// subject alternative name.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct TlsOptions {
    roots: Vec<Pem>,
    only_given_roots: bool,
    client_cert: Option<(Pem, Pem)>,
    server_name: Option<String>,
}

/// PEM text for [`TlsOptions`]: given in memory, or a file the driver reads when the client
/// starts (the core reads no files), so a bad path is a configuration error at start.
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Pem {
    /// The PEM text itself.
    Bytes(Vec<u8>),
    /// A file holding it.
    File(std::path::PathBuf),
}

impl fmt::Debug for Pem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            // PEM may be a private key: only its size is shown.
            Pem::Bytes(bytes) => write!(f, "Pem::Bytes({} bytes)", bytes.len()),
            Pem::File(path) => f.debug_tuple("Pem::File").field(path).finish(),
        }
    }
}

impl fmt::Debug for TlsOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The client key is a secret: only whether there is one is shown.
        f.debug_struct("TlsOptions")
            .field("roots", &self.roots.len())
            .field("only_given_roots", &self.only_given_roots)
            .field("client_cert", &self.client_cert.is_some())
            .field("server_name", &self.server_name)
            .finish()
    }
}

impl TlsOptions {
    /// TLS trusting the `webpki-roots` (Mozilla) root store: what a managed service with a
    /// publicly trusted certificate needs.
    pub fn new() -> Self {
        Self::default()
    }

    /// Also trusts the certificates of this PEM bundle (one or more `CERTIFICATE` blocks), for
    /// a private CA. The public roots stay trusted unless [`TlsOptions::only_these_roots`] is
    /// set.
    pub fn root_certificates_pem(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.roots.push(Pem::Bytes(pem.into()));
        self
    }

    /// [`TlsOptions::root_certificates_pem`] from a file, read when the client starts.
    pub fn root_certificates_file(mut self, path: impl Into<std::path::PathBuf>) -> Self {
        self.roots.push(Pem::File(path.into()));
        self
    }

    /// Trusts only the roots given with [`TlsOptions::root_certificates_pem`], not the public
    /// ones: a private deployment then accepts no certificate a public CA issued.
    pub fn only_these_roots(mut self) -> Self {
        self.only_given_roots = true;
        self
    }

    /// Presents this certificate chain (PEM, leaf first) and private key (PEM: PKCS#8, PKCS#1
    /// or SEC1) to servers that ask for one (`tls-auth-clients yes` / mutual TLS).
    pub fn client_certificate_pem(
        mut self,
        chain: impl Into<Vec<u8>>,
        key: impl Into<Vec<u8>>,
    ) -> Self {
        self.client_cert = Some((Pem::Bytes(chain.into()), Pem::Bytes(key.into())));
        self
    }

    /// [`TlsOptions::client_certificate_pem`] from two files, read when the client starts.
    pub fn client_certificate_files(
        mut self,
        chain: impl Into<std::path::PathBuf>,
        key: impl Into<std::path::PathBuf>,
    ) -> Self {
        self.client_cert = Some((Pem::File(chain.into()), Pem::File(key.into())));
        self
    }

    /// Checks every server's certificate against this name (DNS name or IP address) instead of
    /// the host dialled, and sends it as SNI when it is a DNS name. For a cluster whose nodes
    /// announce IP addresses while their certificate names one DNS name (a wildcard or a shared
    /// name); a certificate that carries the nodes' IP addresses as SANs needs no override.
    pub fn server_name(mut self, name: impl Into<String>) -> Self {
        self.server_name = Some(name.into());
        self
    }

    /// The extra root certificates, as given.
    pub fn roots_pem(&self) -> &[Pem] {
        &self.roots
    }

    /// Whether only [`TlsOptions::roots_pem`] are trusted.
    pub fn trusts_only_given_roots(&self) -> bool {
        self.only_given_roots
    }

    /// The client certificate chain and key, if any.
    pub fn client_certificate(&self) -> Option<(&Pem, &Pem)> {
        self.client_cert.as_ref().map(|(chain, key)| (chain, key))
    }

    /// The server-name override, if any.
    pub fn server_name_override(&self) -> Option<&str> {
        self.server_name.as_deref()
    }
}

impl fmt::Debug for ClientOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientOptions")
            .field("url", &self.url.as_deref().map(redact_url))
            .field("root_nodes", &self.root_nodes)
            .field("username", &self.username)
            .field("password", &self.password.as_ref().map(|_| "<redacted>"))
            .field("address_map", &self.address_map.is_some())
            .field("tls", &self.tls)
            .finish_non_exhaustive()
    }
}

fn redact_url(url: &str) -> String {
    let scheme = match url.split_once("://") {
        Some(("rediss", _)) => "rediss",
        _ => "redis",
    };
    match url.rsplit_once('@') {
        Some((_, host)) => format!("{scheme}://<credentials>@{host}"),
        None => url.to_owned(),
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
    /// One node: `redis://[user[:password]@]host:port`, or `rediss://...` for TLS (with the
    /// default [`TlsOptions`] unless [`ClientOptions::tls`] gives others).
    pub fn url(url: impl Into<String>) -> Self {
        ClientOptions {
            url: Some(url.into()),
            ..Default::default()
        }
    }

    /// A cluster, discovered from these root nodes (`host:port`, `redis://...` or
    /// `rediss://...`; TLS, when on, is used to every node of the cluster).
    pub fn cluster<S: Into<String>>(root_nodes: impl IntoIterator<Item = S>) -> Self {
        ClientOptions {
            root_nodes: root_nodes.into_iter().map(Into::into).collect(),
            ..Default::default()
        }
    }

    /// Credentials for every node; a password in the URL also works.
    pub fn credentials(mut self, username: Option<&str>, password: &str) -> Self {
        self.username = username.map(str::to_owned);
        self.password = Some(password.to_owned());
        self
    }

    /// Maps each announced node address to the address to dial, for clusters that announce
    /// addresses this process cannot reach (Docker, NAT). The announced address stays the
    /// node's identity.
    pub fn node_address_map(
        mut self,
        map: impl Fn(&NodeAddr) -> NodeAddr + Send + Sync + 'static,
    ) -> Self {
        self.address_map = Some(Arc::new(map));
        self
    }

    /// `MOVED`/`ASK` redirections one request may follow (default 16).
    pub fn max_command_redirections(mut self, n: u32) -> Self {
        self.max_redirections = Some(n);
        self
    }

    /// Retries of `TRYAGAIN`, `CLUSTERDOWN` and unreachable nodes (default 10 attempts from
    /// 10 ms, doubling, capped at 500 ms: about 2.5 s). The seed's `withClusterRetry`.
    pub fn cluster_retry(mut self, attempts: u32, base: Duration) -> Self {
        let cap = RetryPolicy::default().cap.max(base);
        self.retry = Some(RetryPolicy {
            attempts,
            base,
            cap,
        });
        self
    }

    /// TCP connect plus `AUTH` deadline (default 2 s).
    pub fn connect_timeout(mut self, d: Duration) -> Self {
        self.connect_timeout = Some(d);
        self
    }

    /// Overall deadline of one batch of requests (default 10 s).
    pub fn request_timeout(mut self, d: Duration) -> Self {
        self.request_timeout = Some(d);
        self
    }

    /// A connection whose oldest request has had no reply this long is closed (default 5 s).
    pub fn response_timeout(mut self, d: Duration) -> Self {
        self.response_timeout = Some(d);
        self
    }

    /// A cluster connection whose oldest request has had no reply this long asks for a
    /// topology refresh, again after each such wait, without closing (default 1 s): a
    /// replaced master's late answers to writes are then reported as outcome unknown.
    pub fn stall_refresh(mut self, d: Duration) -> Self {
        self.stall_refresh = Some(d);
        self
    }

    /// Periodic topology refresh (default 5 s).
    pub fn refresh_interval(mut self, d: Duration) -> Self {
        self.refresh_interval = Some(d);
        self
    }

    /// Seed of the retry jitter (drivers pass a random one by default).
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = Some(seed);
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
    /// client), as is a bad URL.
    pub fn tls_settings(&self) -> Result<Option<TlsOptions>, Error> {
        let mut schemes = Vec::new();
        for url in self.url.iter().chain(&self.root_nodes) {
            schemes.push(parse_url(url)?.tls);
        }
        let any = schemes.iter().any(|&tls| tls);
        if any && schemes.iter().any(|&tls| !tls) {
            return Err(ConfigError::MixedTlsSchemes.into());
        }
        Ok(match &self.tls {
            Some(tls) => Some(tls.clone()),
            None => any.then(TlsOptions::new),
        })
    }

    /// Whether these options name a cluster.
    pub fn is_cluster(&self) -> bool {
        self.deployment() == Deployment::Cluster
    }

    /// What these options connect to: root nodes name a cluster, a URL one node.
    pub fn deployment(&self) -> Deployment {
        match self.root_nodes.is_empty() {
            true => Deployment::Single,
            false => Deployment::Cluster,
        }
    }

    /// Checks the options and builds the session configuration. `seed` is used unless one was
    /// set explicitly.
    pub fn to_config(&self, seed: u64) -> Result<Config, Error> {
        let mut auth = None;
        let mut config = match (&self.url, self.root_nodes.is_empty()) {
            (Some(_), false) => return Err(ConfigError::BothEndpoints.into()),
            (None, true) => return Err(ConfigError::NoEndpoint.into()),
            (Some(url), true) => {
                let parsed = parse_url(url)?;
                auth = parsed.auth;
                Config::single(parsed.addr)
            }
            (None, false) => {
                let mut roots = Vec::new();
                for node in &self.root_nodes {
                    let parsed = parse_url(node)?;
                    if auth.is_none() {
                        auth = parsed.auth;
                    }
                    roots.push(parsed.addr);
                }
                Config::cluster(roots)
            }
        };
        if let Some(password) = &self.password {
            auth = Some(Auth {
                username: self.username.clone(),
                password: password.clone(),
            });
        }
        config.auth = auth;
        config.address_map = self.address_map.clone();
        if let Some(n) = self.max_redirections {
            config.max_redirections = n;
        }
        if let Some(retry) = self.retry {
            config.retry = retry;
        }
        if let Some(d) = self.connect_timeout {
            config.connect_timeout = d;
        }
        if let Some(d) = self.request_timeout {
            config.request_timeout = d;
        }
        if let Some(d) = self.stall_refresh {
            config.stall_refresh = d;
        }
        if let Some(d) = self.response_timeout {
            config.response_timeout = d;
        }
        if let Some(d) = self.refresh_interval {
            config.refresh_interval = d;
        }
        config.seed = self.seed.unwrap_or(seed);
        Ok(config)
    }
}

#[cfg(feature = "serde")]
pub use config::{ClientConfig, StoreConfig, TlsConfig, TurnConfig};

/// Options as a config file writes them (feature `serde`): plain data with `deny_unknown_fields`,
/// durations in whole milliseconds (`connect_timeout_ms = 2000`), converted into the real options
/// with a typed error.
///
/// Milliseconds as integers, rather than strings such as `"2s"`, keep the core free of a
/// duration-parsing dependency and read the same in every format.
#[cfg(feature = "serde")]
mod config {
    use std::fmt;
    use std::path::PathBuf;
    use std::time::Duration;

    use serde::{Deserialize, Serialize};

    use super::{parse_url, redact_url, ClientOptions, TlsOptions};
    use crate::coord::TurnOptions;
    use crate::error::{ConfigError, Error};
    use crate::keys::Layout;
    use crate::retry::RetryPolicy;
    use crate::store::StoreOptions;

    /// What a config file says about the connection: exactly one of `url` (one node) or `nodes`
    /// (root nodes of a cluster), credentials, and the timeouts and retries in milliseconds.
    /// Every field may be left out except the address; left out means the
    /// [`ClientOptions`] default. Turn it into options with [`ClientConfig::into_options`].
    ///
    /// It implements `Deserialize` only: writing it back out would write the password. Its
    /// `Debug` hides the password and the URL's credentials. The node address map, a closure,
    /// has no place in a file: add it to the options with
    /// [`ClientOptions::node_address_map`].
    ///
    /// ```
    /// use botmesh_redis_core::ClientConfig;
    ///
    /// let config: ClientConfig = serde_json::from_str(
    ///     r#"{ "nodes": ["10.0.0.1:7000", "10.0.0.2:7000"], "password": "s3cret",
    ///          "connect_timeout_ms": 1500 }"#,
    /// )?;
    /// let options = config.into_options()?;
    /// assert!(options.is_cluster());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[derive(Clone, Default, PartialEq, Eq, Deserialize)]
    #[serde(default, deny_unknown_fields)]
    #[non_exhaustive]
    pub struct ClientConfig {
        /// One node: `redis://[user[:password]@]host:port` ([`ClientOptions::url`]).
        pub url: Option<String>,
        /// The root nodes of a cluster, `host:port` or `redis://...` ([`ClientOptions::cluster`]).
        pub nodes: Vec<String>,
        /// The ACL user; needs `password`.
        pub username: Option<String>,
        /// The password for every node ([`ClientOptions::credentials`]); overrides one in a URL.
        pub password: Option<String>,
        /// [`ClientOptions::max_command_redirections`].
        pub max_redirections: Option<u32>,
        /// Attempts of [`ClientOptions::cluster_retry`] (default 10).
        pub retry_attempts: Option<u32>,
        /// First delay of [`ClientOptions::cluster_retry`] in ms (default 10).
        pub retry_base_ms: Option<u64>,
        /// [`ClientOptions::connect_timeout`] in ms.
        pub connect_timeout_ms: Option<u64>,
        /// [`ClientOptions::request_timeout`] in ms.
        pub request_timeout_ms: Option<u64>,
        /// [`ClientOptions::response_timeout`] in ms.
        pub response_timeout_ms: Option<u64>,
        /// [`ClientOptions::stall_refresh`] in ms.
        pub stall_refresh_ms: Option<u64>,
        /// [`ClientOptions::refresh_interval`] in ms.
        pub refresh_interval_ms: Option<u64>,
        /// TLS to every node ([`ClientOptions::tls`]), with these settings; left out, TLS
        /// follows the URLs' scheme (`rediss://`) with the default settings.
        pub tls: Option<TlsConfig>,
    }

    /// What a config file says about TLS: files of PEM text, read when the client starts
    /// ([`TlsOptions`]). An empty section (`[client.tls]`) turns TLS on with the public roots.
    ///
    /// ```
    /// use botmesh_redis_core::ClientConfig;
    ///
    /// let config: ClientConfig = serde_json::from_str(
    ///     r#"{ "nodes": ["10.0.0.1:6380"],
    ///          "tls": { "ca_file": "/etc/redis/ca.crt", "only_these_roots": true,
    ///                   "cert_file": "/etc/redis/client.crt", "key_file": "/etc/redis/client.key" } }"#,
    /// )?;
    /// let options = config.into_options()?;
    /// assert!(options.tls_settings()?.is_some());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
    #[serde(default, deny_unknown_fields)]
    #[non_exhaustive]
    pub struct TlsConfig {
        /// A PEM bundle of root certificates to trust ([`TlsOptions::root_certificates_file`]).
        pub ca_file: Option<PathBuf>,
        /// Trust only `ca_file`, not the public roots ([`TlsOptions::only_these_roots`]).
        pub only_these_roots: bool,
        /// The client certificate chain, PEM, for mutual TLS; needs `key_file`
        /// ([`TlsOptions::client_certificate_files`]).
        pub cert_file: Option<PathBuf>,
        /// The client's private key, PEM; needs `cert_file`.
        pub key_file: Option<PathBuf>,
        /// The name every server's certificate is checked against
        /// ([`TlsOptions::server_name`]).
        pub server_name: Option<String>,
    }

    impl TlsConfig {
        fn into_options(self) -> Result<TlsOptions, Error> {
            let mut tls = TlsOptions::new();
            match self.ca_file {
                Some(path) => tls = tls.root_certificates_file(path),
                None if self.only_these_roots => {
                    return Err(tls_config("only_these_roots needs ca_file"))
                }
                None => {}
            }
            if self.only_these_roots {
                tls = tls.only_these_roots();
            }
            match (self.cert_file, self.key_file) {
                (Some(cert), Some(key)) => tls = tls.client_certificate_files(cert, key),
                (None, None) => {}
                _ => return Err(tls_config("cert_file and key_file go together")),
            }
            if let Some(name) = self.server_name {
                tls = tls.server_name(name);
            }
            Ok(tls)
        }
    }

    fn tls_config(reason: &str) -> Error {
        ConfigError::Tls {
            reason: format!("tls: {reason}"),
        }
        .into()
    }

    impl fmt::Debug for ClientConfig {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.debug_struct("ClientConfig")
                .field("url", &self.url.as_deref().map(redact_url))
                .field(
                    "nodes",
                    &self.nodes.iter().map(|n| redact_url(n)).collect::<Vec<_>>(),
                )
                .field("username", &self.username)
                .field("password", &self.password.as_ref().map(|_| "<redacted>"))
                .field("max_redirections", &self.max_redirections)
                .field("retry_attempts", &self.retry_attempts)
                .field("retry_base_ms", &self.retry_base_ms)
                .field("connect_timeout_ms", &self.connect_timeout_ms)
                .field("request_timeout_ms", &self.request_timeout_ms)
                .field("response_timeout_ms", &self.response_timeout_ms)
                .field("stall_refresh_ms", &self.stall_refresh_ms)
                .field("refresh_interval_ms", &self.refresh_interval_ms)
                .field("tls", &self.tls)
                .finish()
        }
    }

    /// A duration of at least 1 ms: a `0` in a config file more likely means "none" or "off",
    /// which no timeout here supports, than "give up at once".
    fn millis(field: &'static str, ms: Option<u64>) -> Result<Option<Duration>, Error> {
        match ms {
            Some(0) => Err(ConfigError::ZeroDuration { field }.into()),
            other => Ok(other.map(Duration::from_millis)),
        }
    }

    impl ClientConfig {
        /// Checks the config and builds the client options. Fails with [`Error::Config`],
        /// naming the field, when both or neither of `url` and `nodes` are given, an address
        /// does not parse, `username` comes without `password`, or a duration is 0.
        pub fn into_options(self) -> Result<ClientOptions, Error> {
            let mut options = match (self.url, self.nodes.is_empty()) {
                (Some(_), false) => return Err(ConfigError::BothEndpoints.into()),
                (None, true) => return Err(ConfigError::NoEndpoint.into()),
                (Some(url), true) => {
                    parse_url(&url)?;
                    ClientOptions::url(url)
                }
                (None, false) => {
                    for node in &self.nodes {
                        parse_url(node)?;
                    }
                    ClientOptions::cluster(self.nodes)
                }
            };
            match (self.username, self.password) {
                (Some(_), None) => return Err(ConfigError::UsernameWithoutPassword.into()),
                (username, Some(password)) => {
                    options = options.credentials(username.as_deref(), &password);
                }
                (None, None) => {}
            }
            if let Some(n) = self.max_redirections {
                options = options.max_command_redirections(n);
            }
            let base = millis("retry_base_ms", self.retry_base_ms)?;
            if self.retry_attempts.is_some() || base.is_some() {
                let default = RetryPolicy::default();
                options = options.cluster_retry(
                    self.retry_attempts.unwrap_or(default.attempts),
                    base.unwrap_or(default.base),
                );
            }
            if let Some(d) = millis("connect_timeout_ms", self.connect_timeout_ms)? {
                options = options.connect_timeout(d);
            }
            if let Some(d) = millis("request_timeout_ms", self.request_timeout_ms)? {
                options = options.request_timeout(d);
            }
            if let Some(d) = millis("response_timeout_ms", self.response_timeout_ms)? {
                options = options.response_timeout(d);
            }
            if let Some(d) = millis("stall_refresh_ms", self.stall_refresh_ms)? {
                options = options.stall_refresh(d);
            }
            if let Some(d) = millis("refresh_interval_ms", self.refresh_interval_ms)? {
                options = options.refresh_interval(d);
            }
            if let Some(tls) = self.tls {
                options = options.tls(tls.into_options()?);
            }
            Ok(options)
        }
    }

    impl TryFrom<ClientConfig> for ClientOptions {
        type Error = Error;

        /// [`ClientConfig::into_options`].
        fn try_from(config: ClientConfig) -> Result<Self, Error> {
            config.into_options()
        }
    }

    /// What a config file says about the store: the prefix, and optionally the layout
    /// (`"legacy"`, `"cluster"` or `"cluster:v1"`) and `allow_legacy_data`.
    ///
    /// Whether the client is a cluster is not configuration but a fact about the client, which
    /// the store asks its executor ([`Executor::deployment`](crate::Executor::deployment)).
    /// [`Store::new`](crate::Store::new) checks the prefix and the layout, with typed errors.
    ///
    /// ```
    /// use botmesh_redis_core::StoreConfig;
    /// use botmesh_redis_core::{Deployment, Layout};
    ///
    /// let config: StoreConfig = serde_json::from_str(r#"{ "prefix": "mybot", "layout": "cluster" }"#)?;
    /// let options = config.into_options();
    /// assert_eq!(options.resolved_layout(Deployment::Single), Layout::Cluster);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
    #[serde(deny_unknown_fields)]
    #[non_exhaustive]
    pub struct StoreConfig {
        /// Every key starts with `prefix:` ([`StoreOptions::new`]).
        pub prefix: String,
        /// [`StoreOptions::layout`]; left out, the default of the client's kind.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub layout: Option<Layout>,
        /// [`StoreOptions::allow_legacy_data`] (default `false`).
        #[serde(default)]
        pub allow_legacy_data: bool,
    }

    impl StoreConfig {
        /// A config for `prefix`, with the default layout.
        pub fn new(prefix: impl Into<String>) -> Self {
            StoreConfig {
                prefix: prefix.into(),
                layout: None,
                allow_legacy_data: false,
            }
        }

        /// The store options.
        pub fn into_options(self) -> StoreOptions {
            let options = StoreOptions::new(self.prefix).allow_legacy_data(self.allow_legacy_data);
            match self.layout {
                Some(layout) => options.layout(layout),
                None => options,
            }
        }
    }

    impl From<StoreConfig> for StoreOptions {
        fn from(config: StoreConfig) -> Self {
            config.into_options()
        }
    }

    /// What a config file says about per-chat turns: [`TurnOptions`] in milliseconds, each
    /// left out for its default.
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
    #[serde(default, deny_unknown_fields)]
    #[non_exhaustive]
    pub struct TurnConfig {
        /// [`TurnOptions::ttl`] in ms.
        #[serde(skip_serializing_if = "Option::is_none")]
        pub ttl_ms: Option<u64>,
        /// [`TurnOptions::poll_interval`] in ms.
        #[serde(skip_serializing_if = "Option::is_none")]
        pub poll_interval_ms: Option<u64>,
        /// [`TurnOptions::claim_timeout`] in ms.
        #[serde(skip_serializing_if = "Option::is_none")]
        pub claim_timeout_ms: Option<u64>,
        /// [`TurnOptions::wait_timeout`] in ms.
        #[serde(skip_serializing_if = "Option::is_none")]
        pub wait_timeout_ms: Option<u64>,
        /// [`TurnOptions::idle_lifetime`] in ms.
        #[serde(skip_serializing_if = "Option::is_none")]
        pub idle_lifetime_ms: Option<u64>,
    }

    impl TurnConfig {
        /// The turn options, checked with [`TurnOptions::check`]: fails with [`Error::Config`]
        /// for a 0 or an idle lifetime too short for the timers.
        pub fn into_options(self) -> Result<TurnOptions, Error> {
            let mut options = TurnOptions::default();
            let fields = [
                ("ttl_ms", self.ttl_ms, &mut options.ttl),
                (
                    "poll_interval_ms",
                    self.poll_interval_ms,
                    &mut options.poll_interval,
                ),
                (
                    "claim_timeout_ms",
                    self.claim_timeout_ms,
                    &mut options.claim_timeout,
                ),
                (
                    "wait_timeout_ms",
                    self.wait_timeout_ms,
                    &mut options.wait_timeout,
                ),
                (
                    "idle_lifetime_ms",
                    self.idle_lifetime_ms,
                    &mut options.idle_lifetime,
                ),
            ];
            for (field, ms, slot) in fields {
                if let Some(d) = millis(field, ms)? {
                    *slot = d;
                }
            }
            options.check()?;
            Ok(options)
        }
    }

    impl TryFrom<TurnConfig> for TurnOptions {
        type Error = Error;

        /// [`TurnConfig::into_options`].
        fn try_from(config: TurnConfig) -> Result<Self, Error> {
            config.into_options()
        }
    }
}

/// A parsed `redis://` or `rediss://` address.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParsedUrl {
    /// Host and port (default port 6379).
    pub addr: NodeAddr,
    /// Credentials from the user-info part.
    pub auth: Option<Auth>,
    /// Whether the scheme was `rediss` (TLS).
    pub tls: bool,
}

/// Parses `redis://[user[:password]@]host[:port][/db]`, the same with `rediss://` (TLS), or a
/// bare `host:port` (plain TCP). User and password are percent-decoded. A database number other
/// than 0 is refused: Redis Cluster has only 0.
pub fn parse_url(url: &str) -> Result<ParsedUrl, Error> {
    let bad = |why: &str| {
        Error::Config(ConfigError::BadUrl {
            url: redact_url(url),
            reason: why.to_owned(),
        })
    };
    let (tls, rest) = match url.split_once("://") {
        Some(("redis", rest)) => (false, rest),
        Some(("rediss", rest)) => (true, rest),
        Some((scheme, _)) => return Err(bad(&format!("unsupported scheme {scheme:?}"))),
        None => (false, url),
    };
    let (authority, path) = match rest.split_once('/') {
        Some((a, p)) => (a, p),
        None => (rest, ""),
    };
    if !(path.is_empty() || path == "0") {
        return Err(bad("only database 0 is supported"));
    }
    let (userinfo, hostport) = match authority.rsplit_once('@') {
        Some((u, h)) => (Some(u), h),
        None => (None, authority),
    };
    let decode = |s: &str| {
        percent_decode_str(s)
            .decode_utf8()
            .map(|c| c.into_owned())
            .map_err(|_| bad("credentials are not UTF-8"))
    };
    let auth = match userinfo {
        None => None,
        Some(info) => {
            let (user, password) = match info.split_once(':') {
                Some((u, p)) => (decode(u)?, decode(p)?),
                None => (String::new(), decode(info)?),
            };
            Some(Auth {
                username: (!user.is_empty()).then_some(user),
                password,
            })
        }
    };
    // The port is optional; a bracketed IPv6 host has colons of its own.
    let has_port = match hostport.strip_prefix('[') {
        Some(v6) => v6.contains("]:"),
        None => hostport.contains(':'),
    };
    let hostport = if has_port {
        hostport.to_owned()
    } else {
        format!("{hostport}:6379")
    };
    let addr = NodeAddr::parse(&hostport, "").ok_or_else(|| bad("no usable host:port"))?;
    Ok(ParsedUrl { addr, auth, tls })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        let p = parse_url("redis://127.0.0.1:7000").unwrap();
        assert_eq!(p.addr, NodeAddr::new("127.0.0.1", 7000));
        assert_eq!(p.auth, None);
        let p = parse_url("redis://bot:p%40ss@h:1/0").unwrap();
        assert_eq!(
            p.auth,
            Some(Auth {
                username: Some("bot".into()),
                password: "p@ss".into()
            })
        );
        let p = parse_url("redis://:secret@h").unwrap();
        assert_eq!(p.addr, NodeAddr::new("h", 6379));
        assert_eq!(p.auth.unwrap().username, None);
        assert_eq!(parse_url("h:5").unwrap().addr, NodeAddr::new("h", 5));
        assert_eq!(
            parse_url("redis://[::1]:7000").unwrap().addr,
            NodeAddr::new("::1", 7000)
        );
        assert!(parse_url("http://h:1").is_err());
        assert!(parse_url("redis://h:1/3").is_err());
        assert!(parse_url("redis://h:notaport").is_err());
    }

    #[test]
    fn url_and_cluster_do_not_combine() {
        let mut o = ClientOptions::url("redis://h:1");
        o.root_nodes.push("h:2".into());
        assert!(matches!(o.to_config(1), Err(Error::Config(_))));
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
    fn rediss_urls_mean_tls() {
        let p = parse_url("rediss://bot:pw@cache.example.com:6380").unwrap();
        assert!(p.tls);
        assert_eq!(
            p.addr,
            NodeAddr::parse("cache.example.com:6380", "").unwrap()
        );
        assert_eq!(p.auth.unwrap().password, "pw");
        assert_eq!(parse_url("rediss://h").unwrap().addr.port, 6379);
        assert!(!parse_url("redis://h:1").unwrap().tls);
        assert!(!parse_url("h:1").unwrap().tls);
        assert!(parse_url("redisss://h:1").is_err());
        // The scheme survives redaction, the credentials do not.
        assert_eq!(redact_url("rediss://u:p@h:1"), "rediss://<credentials>@h:1");
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
}
