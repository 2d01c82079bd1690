//! What a node says it is, against what the client was made for, read when a client connects.
//!
//! A URL that names a cluster node would otherwise connect as a single node, and its first
//! write would fail with a raw `MOVED` after legacy-layout keys may have landed on one master.
//! So `connect` runs [`connect_check`]: on a single-node client, `INFO cluster`, refused with
//! [`ConfigError::ClusterNodeForSingleClient`] when it says `cluster_enabled:1`; on a cluster
//! client, a `PING`, which waits for discovery (whose refusal of a node without cluster
//! support is the session's: [`cluster_support_disabled`](crate::driver::topology::cluster_support_disabled)). The
//! decisions are the pure functions here; the client only runs the plan.

use crate::addr::NodeAddr;
use crate::error::{ConfigError, Error};
use crate::plan::{Plan, Reply, Step};
use crate::request::{Access, Request};
use crate::session::Endpoints;
use crate::value::Value;

/// Reads `cluster_enabled` from an `INFO` reply's text (`# Cluster\r\ncluster_enabled:1`):
/// `Some(true)` for a cluster node, `Some(false)` for a node without cluster support, `None`
/// when the text does not say (a proxy, another server, a section left out).
pub fn info_cluster_enabled(info: &str) -> Option<bool> {
    info.lines().find_map(|line| {
        let value = line.trim().strip_prefix("cluster_enabled:")?;
        match value.trim() {
            "1" => Some(true),
            "0" => Some(false),
            _ => None,
        }
    })
}

/// What a single-node client makes of the node's answer to `INFO cluster`: a cluster node is
/// refused; a node that says otherwise, says nothing, or refuses `INFO` (an ACL user without
/// the permission, a proxy) is taken at its word, since it answered; a failure to reach it
/// (connect, `AUTH`) is passed on.
pub(crate) fn judge_single_node(addr: &NodeAddr, reply: Reply) -> Result<(), Error> {
    let text = match reply {
        Ok(Value::Bulk(bytes) | Value::Status(bytes)) => bytes,
        Ok(_) | Err(Error::Server(_)) => return Ok(()),
        Err(e) => return Err(e),
    };
    match info_cluster_enabled(&String::from_utf8_lossy(&text)) {
        Some(true) => Err(ConfigError::ClusterNodeForSingleClient { addr: addr.clone() }.into()),
        Some(false) | None => Ok(()),
    }
}

/// The plan a client runs when it connects: one request that proves a node answers (with the
/// credentials given) and that it is what the options name. See the module docs.
#[derive(Debug)]
pub struct ConnectCheck {
    /// The single node asked, or `None` on a cluster.
    single: Option<NodeAddr>,
    started: bool,
}

/// The connect check for these endpoints: `INFO cluster` to a single node, a `PING` (through
/// discovery) on a cluster.
pub fn connect_check(endpoints: &Endpoints) -> ConnectCheck {
    ConnectCheck {
        single: endpoints.single_node(),
        started: false,
    }
}

impl Plan for ConnectCheck {
    type Output = ();

    fn operation(&self) -> &'static str {
        "connect_check"
    }

    fn start(&mut self) -> Step<()> {
        if std::mem::replace(&mut self.started, true) {
            return Step::Done(Err(Error::Misuse {
                detail: "ConnectCheck::start called twice".into(),
            }));
        }
        let request = match self.single {
            Some(_) => Request::cmd(Access::Read, "INFO").arg("cluster").build(),
            None => Request::cmd(Access::Read, "PING").build(),
        };
        match request {
            Ok(request) => Step::Send(request.into()),
            Err(e) => Step::Done(Err(e)),
        }
    }

    fn resume(&mut self, replies: Vec<Reply>) -> Step<()> {
        let Some(reply) = replies.into_iter().next() else {
            return Step::Done(Err(Error::Misuse {
                detail: "ConnectCheck::resume without a reply".into(),
            }));
        };
        Step::Done(match &self.single {
            Some(addr) => judge_single_node(addr, reply),
            None => reply.map(drop),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ServerError;
    use bytes::Bytes;

    #[test]
    fn cluster_enabled_is_read_from_the_info_text() {
        let cases: &[(&str, Option<bool>)] = &[
            ("# Cluster\r\ncluster_enabled:1\r\n", Some(true)),
            ("# Cluster\r\ncluster_enabled:0\r\n", Some(false)),
            ("cluster_enabled:1", Some(true)),
            ("# Cluster\ncluster_enabled:0\n", Some(false)),
            ("", None),
            ("# Server\r\nredis_version:7.0.15\r\n", None),
            ("cluster_enabled:yes\r\n", None),
            ("xcluster_enabled:1\r\n", None),
        ];
        for (text, want) in cases {
            assert_eq!(info_cluster_enabled(text), *want, "{text:?}");
        }
    }

    #[test]
    fn a_single_node_client_refuses_only_a_cluster_node() {
        let addr = NodeAddr::new("127.0.0.1", 7000);
        let bulk = |s: &'static str| Ok(Value::Bulk(Bytes::from_static(s.as_bytes())));
        let connect = Error::Connect {
            addr: addr.clone(),
            reason: "connection refused".into(),
        };
        let cases: Vec<(Reply, Result<(), Error>)> = vec![
            (
                bulk("# Cluster\r\ncluster_enabled:1\r\n"),
                Err(ConfigError::ClusterNodeForSingleClient { addr: addr.clone() }.into()),
            ),
            (bulk("# Cluster\r\ncluster_enabled:0\r\n"), Ok(())),
            // A proxy or another server that leaves the field out is taken at its word.
            (bulk(""), Ok(())),
            (Ok(Value::Nil), Ok(())),
            // An ACL user without INFO: the node answered, which is what connect proves.
            (
                Err(Error::Server(ServerError::new(
                    "NOPERM this user has no permissions to run the 'info' command",
                ))),
                Ok(()),
            ),
            (Err(connect.clone()), Err(connect)),
        ];
        for (reply, want) in cases {
            let shown = format!("{reply:?}");
            assert_eq!(judge_single_node(&addr, reply), want, "{shown}");
        }
    }

    #[test]
    fn the_plan_asks_info_of_a_single_node_and_pings_a_cluster() {
        let addr = NodeAddr::new("h", 1);
        let mut single = connect_check(&Endpoints::Single(addr.clone()));
        let Step::Send(batch) = single.start() else {
            panic!("no request");
        };
        assert_eq!(
            (batch[0].name(), batch[0].arguments()),
            ("INFO".into(), vec!["cluster".into()])
        );
        let refused = single.resume(vec![Ok(Value::Bulk(Bytes::from_static(
            b"cluster_enabled:1",
        )))]);
        assert!(matches!(
            refused,
            Step::Done(Err(Error::Config(
                ConfigError::ClusterNodeForSingleClient { .. }
            )))
        ));

        let mut cluster = connect_check(&Endpoints::Cluster(vec![addr]));
        let Step::Send(batch) = cluster.start() else {
            panic!("no request");
        };
        assert_eq!(
            (batch[0].name(), batch[0].arguments()),
            ("PING".into(), vec![])
        );
        assert!(matches!(
            cluster.resume(vec![Ok(Value::Status(Bytes::from_static(b"PONG")))]),
            Step::Done(Ok(()))
        ));
        assert!(matches!(
            cluster.start(),
            Step::Done(Err(Error::Misuse { .. }))
        ));
    }
}
