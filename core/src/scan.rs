//! `SCAN` over every master: the legacy layout's listings, the heartbeat listing and the
//! `start()` guard. On a single node it is one cursor loop; on a cluster the plan first asks
//! for the masters (`CLUSTER SLOTS`) and then scans each one in turn, since `SCAN` only sees the
//! node it runs on.
//!
//! A master whose endpoint the reply leaves unknown (`NULL`, empty or `?`: a cluster with
//! `cluster-preferred-endpoint-type unknown-endpoint`, or `hostname` without hostnames) is
//! scanned at the host that answered, with the port of the reply, as Redis asks clients to do.
//! The plan cannot know that host (the session picked the node), so it sends such a master's
//! `SCAN` to `:port`, an address without a host: the session resolves it against the node
//! that answered the plan's previous request, which is the node that answered `CLUSTER SLOTS`
//! (or the previous page of the scan, on the same host). Skipping such a master instead would
//! let the start guard miss every legacy key on it.

use bytes::Bytes;

use crate::error::Error;
use crate::plan::{Plan, Reply, Step};
use crate::request::{Access, Request};
use crate::topology::{parse_cluster_slots_with, UnknownEndpoint};
use crate::value::Value;

/// Collects the keys matching a `SCAN MATCH` pattern, up to a limit.
#[derive(Debug)]
pub struct Scan {
    pattern: String,
    limit: usize,
    /// Masters still to scan (`None`: a single node, scanned through any route).
    nodes: Vec<Option<String>>,
    cursor: Bytes,
    keys: Vec<Bytes>,
    started: bool,
}

/// Scans every master for keys matching `pattern` (already glob-escaped where needed), stopping
/// once `limit` keys are found. Yields the keys sorted and deduplicated.
pub fn scan(pattern: impl Into<String>, limit: usize) -> Scan {
    Scan {
        pattern: pattern.into(),
        limit,
        nodes: Vec::new(),
        cursor: Bytes::from_static(b"0"),
        keys: Vec::new(),
        started: false,
    }
}

impl Scan {
    fn next_request(&self) -> Result<Request, Error> {
        let mut builder = Request::cmd(Access::Read, "SCAN")
            .arg(&self.cursor)
            .arg("MATCH")
            .arg(self.pattern.as_str())
            .arg("COUNT")
            .arg(1000u32);
        if let Some(Some(node)) = self.nodes.last() {
            builder = builder.to_node(node.clone());
        }
        builder.build()
    }

    fn finish(&mut self) -> Step<Vec<Bytes>> {
        let mut keys = std::mem::take(&mut self.keys);
        keys.sort();
        keys.dedup();
        keys.truncate(self.limit);
        Step::Done(Ok(keys))
    }

    fn send_next(&mut self) -> Step<Vec<Bytes>> {
        match self.next_request() {
            Ok(request) => Step::Send(request.into()),
            Err(e) => Step::Done(Err(e)),
        }
    }
}

impl Plan for Scan {
    type Output = Vec<Bytes>;

    fn operation(&self) -> &'static str {
        "scan"
    }

    fn start(&mut self) -> Step<Vec<Bytes>> {
        match masters_request() {
            Ok(request) => Step::Send(request.into()),
            Err(e) => Step::Done(Err(e)),
        }
    }

    fn resume(&mut self, replies: Vec<Reply>) -> Step<Vec<Bytes>> {
        let Some(reply) = replies.into_iter().next() else {
            return Step::Done(Err(crate::plan::misuse("Scan resumed without a reply")));
        };
        if !self.started {
            self.started = true;
            self.nodes = match masters_of(reply) {
                Ok(nodes) => nodes,
                Err(e) => return Step::Done(Err(e)),
            };
            if self.nodes.is_empty() {
                return self.finish();
            }
            return self.send_next();
        }
        let page = match reply.and_then(parse_page) {
            Ok(page) => page,
            Err(e) => return Step::Done(Err(e)),
        };
        self.keys.extend(page.1);
        self.cursor = page.0;
        if self.keys.len() >= self.limit {
            return self.finish();
        }
        if self.cursor.as_ref() == b"0" {
            self.nodes.pop();
            if self.nodes.is_empty() {
                return self.finish();
            }
        }
        self.send_next()
    }
}

/// The request that lists the masters: `CLUSTER SLOTS`, answered by [`masters_of`].
pub fn masters_request() -> Result<Request, Error> {
    Request::cmd(Access::Read, "CLUSTER").arg("SLOTS").build()
}

/// The masters named by a reply to [`masters_request`], sorted, as addresses for
/// [`Route::Node`](crate::request::Route::Node); `[None]` for a node that is not a cluster (it
/// holds every key, and any route reaches it). A master with an unknown endpoint (`NULL`, empty
/// or `?`) is `:port`: the host of the node that answered (see the module docs).
pub fn masters_of(reply: crate::plan::Reply) -> Result<Vec<Option<String>>, Error> {
    match reply {
        Ok(value) => {
            let topo =
                parse_cluster_slots_with(&value, "", UnknownEndpoint::AskedHost).map_err(|e| {
                    Error::UnexpectedReply {
                        detail: e.to_string(),
                    }
                })?;
            let mut nodes: Vec<Option<String>> = topo
                .shards
                .iter()
                .map(|s| Some(s.master.to_string()))
                .collect();
            nodes.sort();
            nodes.dedup();
            Ok(nodes)
        }
        Err(Error::Server(e)) if e.text().contains("cluster support disabled") => Ok(vec![None]),
        Err(e) => Err(e),
    }
}

pub(crate) fn parse_page(value: Value) -> Result<(Bytes, Vec<Bytes>), Error> {
    let mut items = value.into_array()?.into_iter();
    let (Some(cursor), Some(keys)) = (items.next(), items.next()) else {
        return Err(Error::UnexpectedReply {
            detail: "SCAN did not answer [cursor, keys]".into(),
        });
    };
    let keys = keys
        .into_array()?
        .into_iter()
        .map(Value::into_bytes)
        .collect::<Result<_, _>>()?;
    Ok((cursor.into_bytes()?, keys))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ServerError;
    use crate::plan::scripted;

    fn page(cursor: &str, keys: &[&str]) -> Reply {
        Ok(Value::Array(vec![
            Value::from(cursor),
            Value::Array(keys.iter().map(|k| Value::from(*k)).collect()),
        ]))
    }

    #[test]
    fn single_node_cursor_loop() {
        let mut pages = vec![page("0", &["b", "a"]), page("7", &["c", "a"])];
        let run = scripted::run(scan("p:*", 100), 10, |req| {
            if req.to_string().starts_with("CLUSTER") {
                Err(Error::Server(ServerError::new(
                    "ERR This instance has cluster support disabled",
                )))
            } else {
                pages.pop().unwrap()
            }
        });
        assert_eq!(
            run.output.unwrap(),
            vec![Bytes::from("a"), Bytes::from("b"), Bytes::from("c")]
        );
        assert!(run
            .transcript
            .contains("SCAN any-master read keys=[] args=[7 MATCH p:* COUNT 1000]"));
    }

    #[test]
    fn cluster_scans_each_master() {
        let slots = Value::Array(vec![
            Value::Array(vec![
                Value::Int(0),
                Value::Int(8000),
                Value::Array(vec![Value::from("h"), Value::Int(1)]),
            ]),
            Value::Array(vec![
                Value::Int(8001),
                Value::Int(16383),
                Value::Array(vec![Value::from("h"), Value::Int(2)]),
            ]),
        ]);
        let run = scripted::run(scan("p:*", 100), 10, |req| {
            let text = req.to_string();
            if text.starts_with("CLUSTER") {
                Ok(slots.clone())
            } else if text.contains("node=h:2") {
                page("0", &["x"])
            } else {
                page("0", &["y"])
            }
        });
        assert_eq!(
            run.output.unwrap(),
            vec![Bytes::from("x"), Bytes::from("y")]
        );
        assert!(run.transcript.contains("node=h:1"));
    }

    /// `CLUSTER SLOTS` of a cluster that names no host for some masters (`NULL`, empty, `?`):
    /// each is scanned at `:port`, which the session resolves against the node that answered;
    /// none is skipped.
    #[test]
    fn cluster_scans_masters_without_endpoints_at_the_asked_host() {
        let master = |host: Value, port: i64| Value::Array(vec![host, Value::Int(port)]);
        let range = |start: i64, end: i64, master: Value| {
            Value::Array(vec![Value::Int(start), Value::Int(end), master])
        };
        let slots = Value::Array(vec![
            range(0, 4000, master(Value::Nil, 7001)),
            range(4001, 8000, master(Value::from(""), 7002)),
            range(8001, 12000, master(Value::from("?"), 7003)),
            range(12001, 16383, master(Value::from("10.0.0.9"), 7004)),
        ]);
        let run = scripted::run(scan("p:*", 100), 20, |req| {
            let text = req.to_string();
            if text.starts_with("CLUSTER") {
                return Ok(slots.clone());
            }
            let port = text
                .split("node=")
                .nth(1)
                .and_then(|rest| rest.split(' ').next())
                .unwrap_or_default()
                .to_owned();
            page("0", &[&format!("key@{port}")])
        });
        assert_eq!(
            run.output.unwrap(),
            vec![
                Bytes::from("key@10.0.0.9:7004"),
                Bytes::from("key@:7001"),
                Bytes::from("key@:7002"),
                Bytes::from("key@:7003"),
            ]
        );
        for node in [
            "node=:7001 ",
            "node=:7002 ",
            "node=:7003 ",
            "node=10.0.0.9:7004 ",
        ] {
            assert_eq!(run.transcript.matches(node).count(), 1, "{node}");
        }
    }
}
