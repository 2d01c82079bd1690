//! Cluster topology: node addresses, `CLUSTER SLOTS` replies, and `MOVED` /
//! `ASK` redirects, all parsed defensively: a reply of the wrong shape is an error, never a
//! panic, and an unusable endpoint (`?`, `NULL`, empty host) is resolved or skipped.

use std::collections::BTreeMap;

use crate::addr::NodeAddr;
use crate::error::ServerError;
use crate::keys::SLOT_COUNT;
use crate::value::Value;

/// A redirect reply.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Redirect {
    /// `MOVED slot addr`: the slot lives elsewhere now.
    Moved {
        /// The slot.
        slot: u16,
        /// Its owner.
        addr: NodeAddr,
    },
    /// `ASK slot addr`: this one key is being imported by `addr`.
    Ask {
        /// The slot.
        slot: u16,
        /// The importing node.
        addr: NodeAddr,
    },
}

/// Parses `MOVED 3999 127.0.0.1:6381` or `ASK 3999 :6380`; `None` for anything else, including
/// a redirect whose slot or address cannot be used.
pub fn parse_redirect(err: &ServerError, fallback_host: &str) -> Option<Redirect> {
    let mut words = err.text().split_ascii_whitespace();
    let code = words.next()?;
    let slot: u16 = words.next()?.parse().ok()?;
    if slot >= SLOT_COUNT {
        return None;
    }
    let addr = NodeAddr::parse(words.next()?, fallback_host)?;
    match code {
        "MOVED" => Some(Redirect::Moved { slot, addr }),
        "ASK" => Some(Redirect::Ask { slot, addr }),
        _ => None,
    }
}

/// Whether an error reply to `CLUSTER SLOTS` says the node has no cluster support (`ERR This
/// instance has cluster support disabled`, Redis 6.2 to 7.x and Valkey): a single node, which no
/// retry turns into a cluster, so discovery refuses it at once.
pub fn cluster_support_disabled(reply: &ServerError) -> bool {
    reply.code() == "ERR"
        && reply
            .text()
            .to_ascii_lowercase()
            .contains("cluster support disabled")
}

/// One master and the slot ranges it serves.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Shard {
    /// The master.
    pub master: NodeAddr,
    /// Inclusive slot ranges.
    pub ranges: Vec<(u16, u16)>,
}

/// A topology answer: masters and their slots.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Topology {
    /// The shards, in reply order.
    pub shards: Vec<Shard>,
}

impl Topology {
    /// How many slots the answer assigns (overlaps counted once). Sorts the ranges rather
    /// than marking slots, so its cost follows the number of ranges, whatever their widths.
    pub fn coverage(&self) -> usize {
        let mut ranges: Vec<(u16, u16)> = self
            .shards
            .iter()
            .flat_map(|s| s.ranges.iter().copied())
            .filter(|&(start, end)| start <= end)
            .collect();
        ranges.sort_unstable();
        let mut covered = 0;
        let mut next = 0usize; // the first slot not yet counted
        for (start, end) in ranges {
            let (start, end) = (usize::from(start).max(next), usize::from(end) + 1);
            if end > start {
                covered += end - start;
                next = end;
            }
        }
        covered.min(usize::from(SLOT_COUNT))
    }

    /// Whether every slot has an owner.
    pub fn is_complete(&self) -> bool {
        self.coverage() == usize::from(SLOT_COUNT)
    }
}

/// Why a topology reply was not usable.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unusable topology reply: {0}")]
pub struct TopologyError(pub String);

fn bad(what: &str) -> TopologyError {
    TopologyError(what.to_owned())
}

fn int(v: &Value) -> Option<i64> {
    v.as_i64().ok()
}

fn text(v: &Value) -> Option<String> {
    match v {
        Value::Bulk(b) | Value::Status(b) => std::str::from_utf8(b).ok().map(str::to_owned),
        _ => None,
    }
}

fn slot_of(v: &Value) -> Option<u16> {
    int(v)
        .and_then(|i| u16::try_from(i).ok())
        .filter(|&s| s < SLOT_COUNT)
}

/// How a `CLUSTER SLOTS` endpoint of `?` is read. Redis answers `?` for a node that has no
/// endpoint of the preferred type (`cluster-preferred-endpoint-type hostname` on a node that
/// announces no hostname).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UnknownEndpoint {
    /// The node is skipped: the slot map only holds addresses it can be sure of.
    Skip,
    /// The node is taken at the host that answered, with the port of the reply, as for a
    /// `NULL` or empty endpoint: for a listing that must reach every master (`SCAN`).
    AskedHost,
}

/// Resolves an announced endpoint: `NULL` or empty means "the host you asked", `?` means
/// unknown (skipped, or the host you asked, as `unknown` says).
fn endpoint(host: Option<&Value>, asked_host: &str, unknown: UnknownEndpoint) -> Option<String> {
    match host {
        None | Some(Value::Nil) => Some(asked_host.to_owned()),
        Some(v) => match text(v)?.as_str() {
            "" => Some(asked_host.to_owned()),
            "?" if unknown == UnknownEndpoint::Skip => None,
            "?" => Some(asked_host.to_owned()),
            h => Some(h.to_owned()),
        },
    }
}

/// Parses a `CLUSTER SLOTS` reply: `[[start, end, [host, port, id, ...], replicas...], ...]`.
/// Entries with an unknown master endpoint (`?`) are skipped, so the answer may cover fewer
/// slots.
///
/// A node names each slot's owner once, so a true answer has at most one entry per slot and
/// no two ranges that overlap; an answer with more entries, or overlapping ranges of known
/// masters, is refused.
/// That keeps what a hostile or broken answer costs to read and apply linear in its size (up
/// to a sort), however it is built.
pub fn parse_cluster_slots(reply: &Value, asked_host: &str) -> Result<Topology, TopologyError> {
    parse_cluster_slots_with(reply, asked_host, UnknownEndpoint::Skip)
}

/// [`parse_cluster_slots`], reading a `?` master endpoint as `unknown` says.
pub fn parse_cluster_slots_with(
    reply: &Value,
    asked_host: &str,
    unknown: UnknownEndpoint,
) -> Result<Topology, TopologyError> {
    let Value::Array(entries) = reply else {
        return Err(bad("CLUSTER SLOTS did not answer an array"));
    };
    if entries.len() > usize::from(SLOT_COUNT) {
        return Err(bad(
            "CLUSTER SLOTS answered more entries than there are slots",
        ));
    }
    let mut topo = Topology::default();
    let mut shard_of: BTreeMap<NodeAddr, usize> = BTreeMap::new();
    let mut ranges: Vec<(u16, u16)> = Vec::with_capacity(entries.len());
    for entry in entries {
        let Value::Array(fields) = entry else {
            return Err(bad("a CLUSTER SLOTS entry is not an array"));
        };
        let (Some(start), Some(end), Some(Value::Array(master))) = (
            fields.first().and_then(slot_of),
            fields.get(1).and_then(slot_of),
            fields.get(2),
        ) else {
            return Err(bad("a CLUSTER SLOTS entry lacks its range or master"));
        };
        if start > end {
            return Err(bad("a CLUSTER SLOTS range ends before it starts"));
        }
        let port = master
            .get(1)
            .and_then(int)
            .and_then(|p| u16::try_from(p).ok())
            .filter(|&p| p != 0);
        let (Some(host), Some(port)) = (endpoint(master.first(), asked_host, unknown), port) else {
            continue;
        };
        ranges.push((start, end));
        let master = NodeAddr::new(host, port);
        let shard = *shard_of.entry(master.clone()).or_insert_with(|| {
            topo.shards.push(Shard {
                master,
                ranges: Vec::new(),
            });
            topo.shards.len() - 1
        });
        topo.shards[shard].ranges.push((start, end));
    }
    ranges.sort_unstable();
    if ranges.windows(2).any(|pair| pair[1].0 <= pair[0].1) {
        return Err(bad("CLUSTER SLOTS gave a slot to two entries"));
    }
    Ok(topo)
}

#[cfg(test)]
mod tests {
    use super::*;

    proptest::proptest! {
        /// Coverage counts each slot once, as a dense table of slots would.
        #[test]
        fn coverage_counts_each_slot_once(
            ranges in proptest::collection::vec((0u16..16_384, 0u16..16_384), 0..30),
        ) {
            let topo = Topology {
                shards: vec![Shard {
                    master: NodeAddr::new("h", 1),
                    ranges: ranges.clone(),
                }],
            };
            let mut dense = vec![false; usize::from(SLOT_COUNT)];
            for (start, end) in ranges {
                for s in start..=end {
                    dense[usize::from(s)] = true;
                }
            }
            proptest::prop_assert_eq!(topo.coverage(), dense.iter().filter(|&&b| b).count());
        }
    }

    fn b(s: &str) -> Value {
        Value::from(s)
    }

    #[test]
    fn only_the_lack_of_cluster_support_is_a_single_node() {
        let cases = [
            ("ERR This instance has cluster support disabled", true),
            ("ERR this instance has CLUSTER SUPPORT DISABLED", true),
            ("CLUSTERDOWN The cluster is down", false),
            ("ERR unknown command 'CLUSTER'", false),
            (
                "NOPERM this user has no permissions to run the 'cluster|slots' command",
                false,
            ),
            ("LOADING Redis is loading the dataset in memory", false),
        ];
        for (text, want) in cases {
            assert_eq!(
                cluster_support_disabled(&ServerError::new(text)),
                want,
                "{text}"
            );
        }
    }

    #[test]
    fn redirects() {
        let moved = ServerError::new("MOVED 3999 127.0.0.1:6381");
        assert_eq!(
            parse_redirect(&moved, "h"),
            Some(Redirect::Moved {
                slot: 3999,
                addr: NodeAddr::new("127.0.0.1", 6381)
            })
        );
        let ask = ServerError::new("ASK 3999 :6380");
        assert_eq!(
            parse_redirect(&ask, "h"),
            Some(Redirect::Ask {
                slot: 3999,
                addr: NodeAddr::new("h", 6380)
            })
        );
        assert_eq!(
            parse_redirect(&ServerError::new("MOVED 16384 a:1"), "h"),
            None
        );
        assert_eq!(parse_redirect(&ServerError::new("MOVED"), "h"), None);
        assert_eq!(parse_redirect(&ServerError::new("ERR x"), "h"), None);
    }

    #[test]
    fn cluster_slots_reply() {
        let reply = Value::Array(vec![
            Value::Array(vec![
                Value::Int(0),
                Value::Int(5460),
                Value::Array(vec![b("127.0.0.1"), Value::Int(7000), b("id1")]),
                Value::Array(vec![b("127.0.0.1"), Value::Int(7003), b("id4")]),
            ]),
            Value::Array(vec![
                Value::Int(5461),
                Value::Int(16383),
                Value::Array(vec![b(""), Value::Int(7001), b("id2")]),
            ]),
            Value::Array(vec![
                Value::Int(1),
                Value::Int(1),
                Value::Array(vec![b("?"), Value::Int(7009), b("id9")]),
            ]),
        ]);
        let topo = parse_cluster_slots(&reply, "10.0.0.9").unwrap();
        assert_eq!(
            topo.shards,
            vec![
                Shard {
                    master: NodeAddr::new("127.0.0.1", 7000),
                    ranges: vec![(0, 5460)]
                },
                Shard {
                    master: NodeAddr::new("10.0.0.9", 7001),
                    ranges: vec![(5461, 16383)]
                },
            ]
        );
        assert!(topo.is_complete());
        assert!(parse_cluster_slots(&Value::Int(1), "h").is_err());
        let entry = |start: i64, end: i64, port: i64| {
            Value::Array(vec![
                Value::Int(start),
                Value::Int(end),
                Value::Array(vec![b("127.0.0.1"), Value::Int(port)]),
            ])
        };
        // One slot given twice.
        let twice = Value::Array(vec![entry(0, 100, 7000), entry(100, 200, 7001)]);
        assert_eq!(
            parse_cluster_slots(&twice, "h"),
            Err(bad("CLUSTER SLOTS gave a slot to two entries"))
        );
        // More entries than slots, each cheap on the wire: refused before any is read.
        let many = Value::Array(vec![entry(0, 0, 7000); 16_385]);
        assert_eq!(
            parse_cluster_slots(&many, "h"),
            Err(bad(
                "CLUSTER SLOTS answered more entries than there are slots"
            ))
        );
        // The most a true answer holds: every slot its own range and its own master.
        let most = Value::Array((0..16_384).map(|s| entry(s, s, 1 + s)).collect());
        let topo = parse_cluster_slots(&most, "h").unwrap();
        assert_eq!(topo.shards.len(), 16_384);
        assert!(topo.is_complete());
        assert!(parse_cluster_slots(
            &Value::Array(vec![Value::Array(vec![Value::Int(9), Value::Int(1)])]),
            "h"
        )
        .is_err());
    }
}
