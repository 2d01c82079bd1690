//! Options as a config file writes them (feature `serde`): plain data with `deny_unknown_fields`,
//! durations in whole milliseconds (`connect_timeout_ms = 2000`), converted into the real options
//! with a typed error.
//!
//! Milliseconds as integers, rather than strings such as `"2s"`, keep the core free of a
//! duration-parsing dependency and read the same in every format.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::url::redact_url;
use super::{ClientOptions, TlsOptions};
use crate::coord::TurnOptions;
use crate::error::{ConfigError, Error};
use crate::keys::Layout;
use crate::retry::RetryPolicy;
use crate::store::StoreOptions;

/// What a config file says about the connection: exactly one of `url` (one node), `nodes`
/// (root nodes of a cluster) or `sentinel` (a Redis Sentinel deployment), credentials, and the
/// timeouts and retries in milliseconds.
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
    /// One node: `redis://[user[:password]@]host:port`, or its Unix socket, `unix:///path`
    /// ([`ClientOptions::url`]).
    pub url: Option<String>,
    /// The root nodes of a cluster, `host:port` or `redis://...` ([`ClientOptions::cluster`]).
    pub nodes: Vec<String>,
    /// A Redis Sentinel deployment ([`ClientOptions::sentinel`]).
    pub sentinel: Option<SentinelConfig>,
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
    /// [`ClientOptions::idle_probe`] in ms; 0 turns the probes off.
    pub idle_probe_ms: Option<u64>,
    /// [`ClientOptions::stall_refresh`] in ms.
    pub stall_refresh_ms: Option<u64>,
    /// [`ClientOptions::refresh_interval`] in ms.
    pub refresh_interval_ms: Option<u64>,
    /// [`ClientOptions::max_reply_elements`].
    pub max_reply_elements: Option<u64>,
    /// [`ClientOptions::lanes`] (default on one node the driver's count, on a cluster 1).
    pub lanes: Option<usize>,
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

/// What a config file says about a Redis Sentinel deployment: the sentinels, the master name,
/// and the sentinels' own credentials (the data nodes' are the client's `username` and
/// `password`).
///
/// ```
/// use botmesh_redis_core::ClientConfig;
///
/// let config: ClientConfig = serde_json::from_str(
///     r#"{ "sentinel": { "sentinels": ["10.0.0.1:26379", "10.0.0.2:26379"],
///                        "master_name": "bots", "password": "watch" },
///          "password": "s3cret" }"#,
/// )?;
/// let options = config.into_options()?;
/// assert!(!options.is_cluster());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct SentinelConfig {
    /// The sentinels, `host:port` (port 26379 when left out) or `redis://...`.
    pub sentinels: Vec<String>,
    /// The name the sentinels monitor the master under.
    pub master_name: String,
    /// The sentinels' ACL user; needs `password`.
    pub username: Option<String>,
    /// The sentinels' password ([`ClientOptions::sentinel_credentials`]).
    pub password: Option<String>,
}

impl fmt::Debug for SentinelConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SentinelConfig")
            .field(
                "sentinels",
                &self
                    .sentinels
                    .iter()
                    .map(|n| redact_url(n))
                    .collect::<Vec<_>>(),
            )
            .field("master_name", &self.master_name)
            .field("username", &self.username)
            .field("password", &self.password.as_ref().map(|_| "<redacted>"))
            .finish()
    }
}

impl SentinelConfig {
    fn into_options(self) -> Result<ClientOptions, Error> {
        let mut options = ClientOptions::sentinel(self.sentinels, &self.master_name);
        options.check()?;
        match (self.username, self.password) {
            (Some(_), None) => return Err(ConfigError::UsernameWithoutPassword.into()),
            (username, Some(password)) => {
                options = options.sentinel_credentials(username.as_deref(), &password);
            }
            (None, None) => {}
        }
        Ok(options)
    }
}

impl fmt::Debug for ClientConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientConfig")
            .field("url", &self.url.as_deref().map(redact_url))
            .field(
                "nodes",
                &self.nodes.iter().map(|n| redact_url(n)).collect::<Vec<_>>(),
            )
            .field("sentinel", &self.sentinel)
            .field("username", &self.username)
            .field("password", &self.password.as_ref().map(|_| "<redacted>"))
            .field("max_redirections", &self.max_redirections)
            .field("retry_attempts", &self.retry_attempts)
            .field("retry_base_ms", &self.retry_base_ms)
            .field("connect_timeout_ms", &self.connect_timeout_ms)
            .field("request_timeout_ms", &self.request_timeout_ms)
            .field("response_timeout_ms", &self.response_timeout_ms)
            .field("idle_probe_ms", &self.idle_probe_ms)
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
        let mut options = match (self.url, self.nodes.is_empty(), self.sentinel) {
            (Some(_), false, _) | (Some(_), _, Some(_)) | (None, false, Some(_)) => {
                return Err(ConfigError::BothEndpoints.into())
            }
            (None, true, None) => return Err(ConfigError::NoEndpoint.into()),
            (Some(url), true, None) => ClientOptions::url(url),
            (None, false, None) => ClientOptions::cluster(self.nodes),
            (None, true, Some(sentinel)) => sentinel.into_options()?,
        };
        // The URLs were parsed as the options were made: a bad one is this file's error.
        options.check()?;
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
        match self.idle_probe_ms {
            Some(0) => options = options.idle_probe(None),
            Some(ms) => options = options.idle_probe(Some(Duration::from_millis(ms))),
            None => {}
        }
        if let Some(d) = millis("stall_refresh_ms", self.stall_refresh_ms)? {
            options = options.stall_refresh(d);
        }
        if let Some(d) = millis("refresh_interval_ms", self.refresh_interval_ms)? {
            options = options.refresh_interval(d);
        }
        if let Some(n) = self.max_reply_elements {
            options = options.max_reply_elements(n);
            options.check()?;
        }
        if let Some(n) = self.lanes {
            options = options.lanes(n);
            options.check()?;
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
