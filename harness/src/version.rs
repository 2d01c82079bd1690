//! Which `redis-server` runs, and what it is: the harness adapts its configuration to the
//! version.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

use crate::external::{external_urls, external_version};

/// The message given when no `redis-server` binary can be found.
pub const MISSING_SERVER: &str = "redis-server not found: install it with \
     `apt-get update && apt-get install -y redis-server`, or set REDIS_SERVER";

/// The `redis-server` to run: `$REDIS_SERVER` if set, else the first `redis-server` on `PATH`.
/// The error is [`MISSING_SERVER`] (plus the offending value of `REDIS_SERVER`, if any).
pub fn redis_server_path() -> Result<PathBuf, String> {
    static FOUND: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    FOUND
        .get_or_init(|| {
            find_redis_server(std::env::var_os("REDIS_SERVER"), std::env::var_os("PATH"))
        })
        .clone()
}

fn find_redis_server(
    explicit: Option<std::ffi::OsString>,
    path: Option<std::ffi::OsString>,
) -> Result<PathBuf, String> {
    if let Some(explicit) = explicit.filter(|e| !e.is_empty()) {
        let explicit = PathBuf::from(explicit);
        return if explicit.is_file() {
            Ok(explicit)
        } else {
            Err(format!(
                "{MISSING_SERVER} (REDIS_SERVER={} is not a file)",
                explicit.display()
            ))
        };
    }
    path.iter()
        .flat_map(std::env::split_paths)
        .map(|dir| dir.join("redis-server"))
        .find(|candidate| candidate.is_file())
        .ok_or_else(|| MISSING_SERVER.to_owned())
}

/// Which server family a binary belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Product {
    /// Redis.
    Redis,
    /// Valkey (forked from Redis 7.2.4; its versions start at 7.2).
    Valkey,
}

/// The product and version of a server, from `redis-server --version` or `INFO server`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ServerVersion {
    /// Redis or Valkey.
    pub product: Product,
    /// Major version.
    pub major: u32,
    /// Minor version.
    pub minor: u32,
    /// Patch level.
    pub patch: u32,
}

impl ServerVersion {
    /// Parses the output of `redis-server --version` (`Redis server v=7.0.15 sha=...`, or
    /// `Valkey server v=8.1.8 ...`).
    pub fn parse(text: &str) -> Option<ServerVersion> {
        let product = if text.starts_with("Valkey") {
            Product::Valkey
        } else if text.starts_with("Redis") {
            Product::Redis
        } else {
            return None;
        };
        let number = text
            .split_whitespace()
            .find_map(|word| word.strip_prefix("v="))?;
        ServerVersion::from_number(product, number)
    }

    fn from_number(product: Product, number: &str) -> Option<ServerVersion> {
        let mut parts = number.split('.').map(str::parse::<u32>);
        let (major, minor, patch) = (
            parts.next()?.ok()?,
            parts.next()?.ok()?,
            parts.next()?.ok()?,
        );
        Some(ServerVersion {
            product,
            major,
            minor,
            patch,
        })
    }

    /// The version a running server reports in `INFO server` (`valkey_version` on Valkey,
    /// whose `redis_version` stays at 7.2.4).
    pub fn from_info(info: &BTreeMap<String, String>) -> Option<ServerVersion> {
        match info.get("valkey_version") {
            Some(number) => ServerVersion::from_number(Product::Valkey, number),
            None => ServerVersion::from_number(Product::Redis, info.get("redis_version")?),
        }
    }

    /// Whether the version is `major.minor` or later. Valkey counts from its own numbers, all
    /// above Redis 7.2.
    pub fn at_least(&self, major: u32, minor: u32) -> bool {
        (self.major, self.minor) >= (major, minor)
    }

    /// Whether the server knows `cluster-port` (7.0); before, the bus is always port + 10000.
    pub fn has_cluster_port(&self) -> bool {
        self.at_least(7, 0)
    }

    /// Whether `DEBUG` must be switched on with `enable-debug-command` (7.0); before, it is
    /// always available.
    pub fn has_debug_switch(&self) -> bool {
        self.at_least(7, 0)
    }

    /// Whether a multi-key request whose keys a live migration has split between source and
    /// target gets `ASK` from the source (before 7.0) instead of `TRYAGAIN` (the target then
    /// answers `TRYAGAIN` to the `ASKING` retry).
    pub fn asks_on_split_keys(&self) -> bool {
        !self.at_least(7, 0)
    }
}

impl fmt::Display for ServerVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = match self.product {
            Product::Redis => "Redis",
            Product::Valkey => "Valkey",
        };
        write!(f, "{name} {}.{}.{}", self.major, self.minor, self.patch)
    }
}

/// The version of the servers the tests run on: of the external deployment in external mode
/// (see [`shared_cluster`](crate::shared_cluster)), else of [`redis_server_path`] (`--version`, asked once).
pub fn server_version() -> Result<ServerVersion, String> {
    static FOUND: OnceLock<Result<ServerVersion, String>> = OnceLock::new();
    FOUND
        .get_or_init(|| match external_urls() {
            Some(urls) => external_version(&urls),
            None => binary_version(&redis_server_path()?),
        })
        .clone()
}

fn binary_version(binary: &Path) -> Result<ServerVersion, String> {
    let output = Command::new(binary)
        .arg("--version")
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("run {} --version: {e}", binary.display()))?;
    let text = String::from_utf8_lossy(&output.stdout);
    if !output.status.success() {
        return Err(format!(
            "{} --version failed ({}): {text}{}",
            binary.display(),
            output.status,
            String::from_utf8_lossy(&output.stderr)
        ));
    }
    ServerVersion::parse(&text).ok_or_else(|| {
        format!(
            "{} --version printed no Redis or Valkey version: {text:?}",
            binary.display()
        )
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::parse_info;

    #[test]
    fn a_missing_binary_is_reported_with_the_install_hint() {
        let none = find_redis_server(None, Some("/nonexistent-dir".into())).unwrap_err();
        assert_eq!(none, MISSING_SERVER);
        let bad = find_redis_server(Some("/nonexistent/redis-server".into()), None).unwrap_err();
        assert!(bad.starts_with(MISSING_SERVER), "{bad}");
        assert!(bad.contains("/nonexistent/redis-server"), "{bad}");
    }

    #[test]
    fn server_versions_parse_from_version_output_and_info() {
        let old = ServerVersion::parse(
            "Redis server v=6.2.14 sha=40305114:0 malloc=libc bits=64 build=dff95a8e7a99d269",
        )
        .unwrap();
        assert_eq!(
            (old.product, old.major, old.minor, old.patch),
            (Product::Redis, 6, 2, 14)
        );
        assert!(!old.has_cluster_port() && !old.has_debug_switch() && old.asks_on_split_keys());
        let debian = ServerVersion::parse("Redis server v=7.0.15 sha=00000000:0").unwrap();
        assert!(debian.has_cluster_port() && !debian.asks_on_split_keys());
        let valkey = ServerVersion::parse("Valkey server v=8.1.8 sha=00000000:1").unwrap();
        assert_eq!(valkey.to_string(), "Valkey 8.1.8");
        assert!(valkey.has_cluster_port() && valkey.has_debug_switch());
        assert_eq!(ServerVersion::parse("KeyDB server v=6.3.4"), None);
        assert_eq!(ServerVersion::parse("Redis server v=7"), None);

        let info = parse_info("# Server\r\nredis_version:7.2.4\r\nvalkey_version:9.1.2\r\n");
        assert_eq!(
            ServerVersion::from_info(&info).unwrap().to_string(),
            "Valkey 9.1.2"
        );
        let info = parse_info("redis_version:7.4.1\r\n");
        assert_eq!(
            ServerVersion::from_info(&info).unwrap().to_string(),
            "Redis 7.4.1"
        );
    }
}
