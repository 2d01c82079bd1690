//! [`NodeAddr`]: a node's address, the one type every module may name (errors, requests,
//! the topology, the session). It depends on nothing else of the crate.

use std::fmt;

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
}
