//! Replica heartbeats: a key with a TTL per replica, probed before a turn skips a ticket.

use std::time::Duration;

use bytes::Bytes;

use crate::error::Error;
use crate::keys::Keyspace;
use crate::plan::{single, Plan, Reply, Single, Step};
use crate::request::{Access, Request};
use crate::ttl::ttl_ms;

use super::held;

/// Marks `replica` alive for `ttl` (server-side expiry), with an opaque `info` value.
pub fn heartbeat(
    ks: &Keyspace,
    replica: &str,
    ttl: Duration,
    info: Bytes,
) -> Result<Single<()>, Error> {
    let request = Request::cmd(Access::Write, "SET")
        .key(ks.heartbeat(replica))
        .arg(info)
        .arg("PX")
        .arg(ttl_ms(ttl, "ttl")?)
        .build()?;
    Ok(single("heartbeat", request, |v| v.expect_ok()))
}

/// Whether `replica`'s heartbeat is live: the one-key probe a turn waiter makes before it skips
/// a ticket in the cluster layout.
pub fn replica_alive(ks: &Keyspace, replica: &str) -> Result<Single<bool>, Error> {
    Ok(single("replica_alive", probe_request(ks, replica)?, held))
}

pub(super) fn probe_request(ks: &Keyspace, replica: &str) -> Result<Request, Error> {
    Request::cmd(Access::Read, "EXISTS")
        .key(ks.heartbeat(replica))
        .build()
}

/// Ends `replica`'s heartbeat now (a clean shutdown).
pub fn heartbeat_stop(ks: &Keyspace, replica: &str) -> Result<Single<()>, Error> {
    let request = Request::cmd(Access::Write, "DEL")
        .key(ks.heartbeat(replica))
        .build()?;
    Ok(single("heartbeat_stop", request, |v| {
        v.as_i64().map(|_| ())
    }))
}

/// The ids of the live replicas, sorted, in both layouts: `SCAN` of every master for the
/// heartbeat keys (at most `limit`).
pub fn live_replicas(ks: &Keyspace, limit: usize) -> LiveReplicas {
    let prefix_len = ks.heartbeat("").as_bytes().len();
    LiveReplicas {
        scan: crate::scan::scan(ks.heartbeat_pattern(), limit),
        prefix_len,
    }
}

/// The plan of [`live_replicas`].
#[derive(Debug)]
pub struct LiveReplicas {
    scan: crate::scan::Scan,
    prefix_len: usize,
}

impl LiveReplicas {
    fn map(&self, step: Step<Vec<Bytes>>) -> Step<Vec<String>> {
        match step {
            Step::Send(b) => Step::Send(b),
            Step::Wait(d) => Step::Wait(d),
            Step::Done(keys) => Step::Done(keys.map(|keys| {
                keys.into_iter()
                    .filter_map(|k| {
                        k.get(self.prefix_len..)
                            .map(|id| String::from_utf8_lossy(id).into_owned())
                    })
                    .collect()
            })),
        }
    }
}

impl Plan for LiveReplicas {
    type Output = Vec<String>;

    fn operation(&self) -> &'static str {
        "live_replicas"
    }

    fn start(&mut self) -> Step<Vec<String>> {
        let step = self.scan.start();
        self.map(step)
    }

    fn resume(&mut self, replies: Vec<Reply>) -> Step<Vec<String>> {
        let step = self.scan.resume(replies);
        self.map(step)
    }
}
