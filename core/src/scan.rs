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
//!
//! Slots may move while the masters are scanned one after the other (a reshard, a master
//! added, a failover): a key moved from a master not yet scanned to one already scanned would
//! be missed. So once every master is scanned the plan reads `CLUSTER SLOTS` again, and scans
//! again each master that gained a slot since the last reading, up to [`MOST_PASSES`] passes.

use bytes::Bytes;

use crate::error::Error;
use crate::plan::{Plan, Reply, Step};
use crate::request::{Access, Request};
use crate::topology::{parse_cluster_slots_with, UnknownEndpoint};
use crate::value::Value;

/// How many passes over the masters a scan makes at most while slots keep moving (the first
/// and the rescans of masters that gained slots); then it fails rather than answer a listing
/// that may miss keys.
pub(crate) const MOST_PASSES: u32 = 4;

/// Collects the keys matching a `SCAN MATCH` pattern, up to a limit.
#[derive(Debug)]
pub struct Scan {
    pattern: String,
    limit: usize,
    /// Masters still to scan (`None`: a single node, scanned through any route).
    nodes: Vec<Option<String>>,
    cursor: Bytes,
    keys: Vec<Bytes>,
    state: State,
    /// The slots' masters at the last reading of `CLUSTER SLOTS` (empty on a single node).
    owners: Owners,
    passes: u32,
}

/// Slot ranges and their masters, as `:port` or `host:port`.
pub(crate) type Owners = Vec<(u16, u16, String)>;

#[derive(Debug, PartialEq, Eq)]
enum State {
    /// Waiting for the masters.
    Masters,
    Scanning,
    /// Every master scanned; waiting for the masters again.
    Checking,
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
        state: State::Masters,
        owners: Vec::new(),
        passes: 0,
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
        match self.state {
            State::Masters => {
                let (nodes, owners) = match layout_of(reply) {
                    Ok(layout) => layout,
                    Err(e) => return Step::Done(Err(e)),
                };
                (self.nodes, self.owners) = (nodes, owners);
                self.passes = 1;
                self.state = State::Scanning;
                if self.nodes.is_empty() {
                    return self.finish();
                }
                return self.send_next();
            }
            State::Checking => return self.checked(reply),
            State::Scanning => {}
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
                return self.check();
            }
        }
        self.send_next()
    }
}

impl Scan {
    /// Every master is scanned: on a cluster, the masters are read again.
    fn check(&mut self) -> Step<Vec<Bytes>> {
        if self.owners.is_empty() {
            return self.finish();
        }
        self.state = State::Checking;
        match masters_request() {
            Ok(request) => Step::Send(request.into()),
            Err(e) => Step::Done(Err(e)),
        }
    }

    /// The masters read again: each that gained a slot since the last reading is scanned
    /// again, or the listing is complete.
    fn checked(&mut self, reply: Reply) -> Step<Vec<Bytes>> {
        let (_, owners) = match layout_of(reply) {
            Ok(layout) => layout,
            Err(e) => return Step::Done(Err(e)),
        };
        let gained = gained_slots(&self.owners, &owners);
        self.owners = owners;
        if gained.is_empty() {
            return self.finish();
        }
        if self.passes >= MOST_PASSES {
            return Step::Done(Err(Error::SlotsMoved { side: "cluster" }));
        }
        self.passes += 1;
        self.nodes = gained.into_iter().map(Some).collect();
        self.cursor = Bytes::from_static(b"0");
        self.state = State::Scanning;
        self.send_next()
    }
}

/// The masters (sorted) and the slots' owners a reply to [`masters_request`] names; `[None]`
/// and no owners for a node that is not a cluster.
pub(crate) fn layout_of(reply: Reply) -> Result<(Vec<Option<String>>, Owners), Error> {
    let value = match reply {
        Ok(value) => value,
        Err(Error::Server(e)) if e.text().contains("cluster support disabled") => {
            return Ok((vec![None], Vec::new()))
        }
        Err(e) => return Err(e),
    };
    let topo = parse_cluster_slots_with(&value, "", UnknownEndpoint::AskedHost).map_err(|e| {
        Error::UnexpectedReply {
            detail: e.to_string(),
        }
    })?;
    let owners: Owners = topo
        .shards
        .iter()
        .flat_map(|s| {
            let master = s.master.to_string();
            s.ranges.iter().map(move |&(a, b)| (a, b, master.clone()))
        })
        .collect();
    let mut nodes: Vec<Option<String>> = topo
        .shards
        .iter()
        .map(|s| Some(s.master.to_string()))
        .collect();
    nodes.sort();
    nodes.dedup();
    Ok((nodes, owners))
}

/// The masters (sorted) that own a slot in `now` that another master, or none, owned in
/// `before`: the masters a key may have moved to since they were scanned.
pub(crate) fn gained_slots(before: &Owners, now: &Owners) -> Vec<String> {
    let before = owner_of_each_slot(before);
    let mut gained: Vec<String> = owner_of_each_slot(now)
        .into_iter()
        .zip(before)
        .filter_map(|(now, before)| now.filter(|&master| before != Some(master)))
        .map(str::to_owned)
        .collect();
    gained.sort();
    gained.dedup();
    gained
}

/// Each slot's master in `owners` (`None` for a slot no range names).
fn owner_of_each_slot(owners: &Owners) -> Vec<Option<&str>> {
    let mut slots = vec![None; usize::from(crate::keys::SLOT_COUNT)];
    for (first, last, master) in owners {
        for slot in *first..=*last {
            if let Some(owner) = slots.get_mut(usize::from(slot)) {
                *owner = Some(master.as_str());
            }
        }
    }
    slots
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
    layout_of(reply).map(|(nodes, _)| nodes)
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

    fn two_masters(split: i64) -> Value {
        Value::Array(vec![
            Value::Array(vec![
                Value::Int(0),
                Value::Int(split - 1),
                Value::Array(vec![Value::from("h"), Value::Int(1)]),
            ]),
            Value::Array(vec![
                Value::Int(split),
                Value::Int(16383),
                Value::Array(vec![Value::from("h"), Value::Int(2)]),
            ]),
        ])
    }

    /// A key moves from h:1, not yet scanned, to h:2, already scanned (h:2 takes slot 8000
    /// meanwhile): the masters read again show h:2 gained a slot, so h:2 is scanned again and
    /// the key is listed. Before, the listing missed it.
    #[test]
    fn a_master_that_gained_slots_during_the_scan_is_scanned_again() {
        let mut readings = 0;
        let mut scans_of_h2 = 0;
        let run = scripted::run(scan("p:*", 100), 20, |req| {
            let text = req.to_string();
            if text.starts_with("CLUSTER") {
                readings += 1;
                return Ok(two_masters(if readings == 1 { 8001 } else { 8000 }));
            }
            if text.contains("node=h:2") {
                scans_of_h2 += 1;
                match scans_of_h2 {
                    1 => page("0", &["y"]),
                    _ => page("0", &["moved", "y"]),
                }
            } else {
                page("0", &["x"])
            }
        });
        assert_eq!(
            run.output.unwrap(),
            vec![Bytes::from("moved"), Bytes::from("x"), Bytes::from("y")]
        );
        assert_eq!((readings, scans_of_h2), (3, 2));
    }

    /// Slots that move at every reading: the scan gives up after its passes rather than
    /// answer a listing that may miss keys.
    #[test]
    fn slots_moving_at_every_pass_fail_the_scan() {
        let mut readings = 0;
        let run = scripted::run(scan("p:*", 100), 40, |req| {
            if req.to_string().starts_with("CLUSTER") {
                readings += 1;
                return Ok(two_masters(8000 + readings));
            }
            page("0", &["k"])
        });
        assert_eq!(
            run.output.unwrap_err(),
            Error::SlotsMoved { side: "cluster" }
        );
        assert_eq!(readings, 1 + i64::from(MOST_PASSES));
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
