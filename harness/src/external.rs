//! External mode: the shared instances are a deployment the user gives, which the harness
//! talks to and never steers.

use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::OnceLock;

use botmesh_redis_core::driver::session::DialTarget;

use crate::server::{AdminAuth, Credentials};
use crate::{parse_info, server_version, AdminConn, ServerVersion};

/// Names the cluster that [`shared_cluster`](crate::shared_cluster) uses instead of starting one:
/// `redis://[user:password@]host:port[,host:port...]`.
pub const EXTERNAL_CLUSTER_VAR: &str = "BOTMESH_TEST_CLUSTER";

/// Names the standalone node that [`shared_single`](crate::shared_single) uses instead of starting one:
/// `redis://[user:password@]host:port`.
pub const EXTERNAL_SINGLE_VAR: &str = "BOTMESH_TEST_SINGLE";

#[derive(Clone, Debug)]
pub(crate) struct External {
    pub(crate) cluster: Option<Vec<String>>,
    pub(crate) single: Option<String>,
}

/// Whether the suites run against an external deployment: [`EXTERNAL_CLUSTER_VAR`] or
/// [`EXTERNAL_SINGLE_VAR`] is set (and not empty). Then the harness starts no server at all:
/// the shared instances are the given ones, and a test that needs servers the harness owns
/// (it starts its own, kills, pauses, fails over or re-shards them) fails with a message that
/// says so. Such a deployment's data is not flushed, but the suites write keys under unique
/// prefixes and some flush its script cache (`SCRIPT FLUSH`): use a disposable deployment.
pub fn external_mode() -> bool {
    external_urls().is_some()
}

pub(crate) fn external_urls() -> Option<External> {
    static FOUND: OnceLock<Option<External>> = OnceLock::new();
    FOUND
        .get_or_init(|| {
            let var = |name: &str| {
                std::env::var(name)
                    .ok()
                    .map(|v| v.trim().to_owned())
                    .filter(|v| !v.is_empty())
            };
            let cluster = var(EXTERNAL_CLUSTER_VAR).map(|list| {
                list.split(',')
                    .map(|u| u.trim().to_owned())
                    .filter(|u| !u.is_empty())
                    .collect()
            });
            let single = var(EXTERNAL_SINGLE_VAR);
            (cluster.is_some() || single.is_some()).then_some(External { cluster, single })
        })
        .clone()
}

pub(crate) fn refuse_in_external_mode() -> Result<(), String> {
    if external_mode() {
        Err(not_owned("start a redis-server"))
    } else {
        Ok(())
    }
}

pub(crate) fn not_owned(what: &str) -> String {
    format!(
        "cannot {what}: this test needs servers the harness owns (it starts its own, or kills, \
         pauses, fails over, re-shards or reconfigures them), and in external mode \
         ({EXTERNAL_CLUSTER_VAR} / {EXTERNAL_SINGLE_VAR} set) the harness starts and steers \
         nothing. Run it without those variables (see \"Checking your deployment\" in \
         docs/operations.md)"
    )
}

/// A URL with its credentials hidden, for messages: the core's redaction, the one the
/// client's errors use.
pub(crate) fn redact(url: &str) -> String {
    botmesh_redis_core::driver::options::redact_url(url)
}

/// `(address, credentials)` of `redis://[user[:password]@]host[:port]` or `host:port`; a host
/// name is resolved here, since the harness's connections use socket addresses.
pub(crate) fn parse_external_url(url: &str) -> Result<(SocketAddr, Option<Credentials>), String> {
    let parsed = botmesh_redis_core::driver::options::parse_url(url).map_err(|e| e.to_string())?;
    let DialTarget::Tcp(node) = &parsed.target else {
        return Err(format!(
            "{}: the harness reaches an external deployment over TCP (redis://host:port)",
            redact(url)
        ));
    };
    let addr = (node.host.as_str(), node.port)
        .to_socket_addrs()
        .map_err(|e| format!("resolve {}: {e}", redact(url)))?
        .next()
        .ok_or_else(|| format!("{} resolves to no address", redact(url)))?;
    Ok((addr, parsed.auth.map(|a| (a.username, a.password))))
}

pub(crate) fn external_version(external: &External) -> Result<ServerVersion, String> {
    let url = match (&external.cluster, &external.single) {
        (Some(urls), _) if !urls.is_empty() => urls[0].clone(),
        (_, Some(url)) => url.clone(),
        _ => return Err(format!("{EXTERNAL_CLUSTER_VAR} lists no node")),
    };
    let (addr, credentials) = parse_external_url(&url)?;
    let auth = AdminAuth {
        candidates: credentials.into_iter().collect(),
    };
    let info = auth
        .connect(addr, AdminConn::DEFAULT_TIMEOUT)?
        .cmd(&["INFO", "server"])?;
    ServerVersion::from_info(&parse_info(info.as_str().unwrap_or_default()))
        .ok_or_else(|| format!("INFO server of {} has no version", redact(&url)))
}

pub(crate) fn describe_version() -> String {
    match server_version() {
        Ok(version) => version.to_string(),
        Err(e) => format!("version unknown: {e}"),
    }
}
