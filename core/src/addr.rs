//! [`NodeAddr`]: a node's address, the one type every module may name (errors, requests,
//! the topology, the session); and [`DialTarget`]: where a connection to it is opened. It
//! depends on nothing else of the crate.

use std::fmt;
use std::path::{Path, PathBuf};

/// A node's address as the cluster announces it: its identity in the slot map. Remapping (for
/// NAT or Docker) applies only when connecting, never to this identity.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NodeAddr {
    /// Host name or IP (IPv6 without brackets).
    pub host: String,
    /// TCP port.
    pub port: u16,
}

impl NodeAddr {
    /// A node address.
    pub fn new(host: impl Into<String>, port: u16) -> Self {
        NodeAddr {
            host: host.into(),
            port,
        }
    }

    /// The identity of a single node reached over a Unix socket: the socket's path with port
    /// 0, as Redis itself names a Unix-socket peer (`CLIENT LIST` shows
    /// `addr=/run/redis.sock:0`). It only names the node in errors and logs: the connection is
    /// opened at [`DialTarget::Unix`], never at this address, and no cluster announces port 0
    /// ([`NodeAddr::parse`] refuses it), so it cannot stand for a TCP node.
    pub fn unix_socket(path: &Path) -> Self {
        NodeAddr::new(path.display().to_string(), 0)
    }

    /// Parses `host:port`, `[v6]:port` or `:port` (empty host: `fallback_host`, the host of the
    /// node that sent it). Splits on the last `:`, since an IPv6 host has colons of its own.
    pub fn parse(text: &str, fallback_host: &str) -> Option<NodeAddr> {
        let (host, port) = text.rsplit_once(':')?;
        let port: u16 = port.parse().ok()?;
        if port == 0 {
            return None;
        }
        let host = host.trim_start_matches('[').trim_end_matches(']');
        let host = match host {
            "" => fallback_host,
            "?" => return None,
            h => h,
        };
        (!host.is_empty()).then(|| NodeAddr::new(host, port))
    }
}

impl fmt::Display for NodeAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.host.contains(':') {
            write!(f, "[{}]:{}", self.host, self.port)
        } else {
            write!(f, "{}:{}", self.host, self.port)
        }
    }
}

/// Where a connection is opened: a TCP address, or the path of a Unix socket (a single node
/// only; a cluster announces TCP addresses). The session hands it to the driver in
/// `Output::Connect`; the driver opens that kind of socket, and knows nothing else of it.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DialTarget {
    /// `host:port`, over TCP (and TLS when the client uses it).
    Tcp(NodeAddr),
    /// A Unix domain socket's path (`unixsocket` in `redis.conf`).
    Unix(PathBuf),
}

impl From<NodeAddr> for DialTarget {
    fn from(addr: NodeAddr) -> Self {
        DialTarget::Tcp(addr)
    }
}

/// `host:port`, or the socket's path.
impl fmt::Display for DialTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DialTarget::Tcp(addr) => addr.fmt(f),
            DialTarget::Unix(path) => path.display().fmt(f),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_are_parsed_defensively() {
        assert_eq!(
            NodeAddr::parse("127.0.0.1:6381", "x"),
            Some(NodeAddr::new("127.0.0.1", 6381))
        );
        assert_eq!(
            NodeAddr::parse(":6380", "10.0.0.1"),
            Some(NodeAddr::new("10.0.0.1", 6380))
        );
        assert_eq!(
            NodeAddr::parse("[::1]:7000", "x"),
            Some(NodeAddr::new("::1", 7000))
        );
        assert_eq!(NodeAddr::parse("?:7000", "x"), None);
        assert_eq!(NodeAddr::parse("host", "x"), None);
        assert_eq!(NodeAddr::parse("host:0", "x"), None);
        assert_eq!(NodeAddr::parse("host:99999", "x"), None);
        assert_eq!(NodeAddr::new("::1", 7000).to_string(), "[::1]:7000");
    }

    #[test]
    fn a_unix_socket_is_named_by_its_path() {
        let path = Path::new("/run/redis/redis.sock");
        assert_eq!(
            NodeAddr::unix_socket(path).to_string(),
            "/run/redis/redis.sock:0"
        );
        // No announced address can be mistaken for it.
        assert_eq!(NodeAddr::parse("/run/redis/redis.sock:0", "x"), None);
        assert_eq!(
            DialTarget::Unix(path.to_owned()).to_string(),
            "/run/redis/redis.sock"
        );
        assert_eq!(
            DialTarget::from(NodeAddr::new("::1", 7000)).to_string(),
            "[::1]:7000"
        );
    }
}
