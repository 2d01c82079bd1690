//! `botmesh-redis check`: whether a store's `start()` would pass for a prefix and a layout,
//! decided read-only, with the topology, the keys per master and the hottest hash tags.
//!
//! `Store::start()` itself is not read-only (it writes the layout marker when it finds none),
//! so the check repeats its decision from [`inspect_keyspace`]'s counts instead:
//!
//! - the options are checked by `Store::new`, which sends nothing (a legacy layout on a cluster
//!   client, a braced cluster prefix);
//! - cluster layout: the marker `cluster:v1` passes, another value is refused; without a
//!   marker, legacy-layout keys are refused and an empty or clean prefix passes (and start
//!   would write the marker);
//! - legacy layout: passes; a marker only draws a warning, as it does in the store's log.
//!
//! [`inspect_keyspace`]: botmesh_redis_tokio::migrate::inspect_keyspace

use std::collections::BTreeMap;

use botmesh_redis_tokio::keys::slot;
use botmesh_redis_tokio::keys::CLUSTER_V1;
use botmesh_redis_tokio::migrate::lifecycle::{Phase, Role};
use botmesh_redis_tokio::migrate::{KeyspaceReport, Namespace};
use botmesh_redis_tokio::{Access, Client, Error, Executor, Layout, Request, Value};
use botmesh_redis_tokio::{Store, StoreOptions};

use crate::inspect::{add_lifecycle, marker, scan};
use crate::output::{Fields, Table};
use crate::{connect, CheckArgs, Failure};

/// A hash tag holding at least this share of the keys pins that much load on one slot...
const HOT_SHARE: f64 = 0.10;
/// ...but only a keyspace of this many keys carries load worth warning about.
const HOT_MIN_KEYS: u64 = 1000;

/// Runs `check`, prints the topology, the keys per master, the hot tags and the verdict;
/// fails with [`Failure::Refused`] when `start()` would refuse.
pub(crate) async fn run(args: &CheckArgs, quiet: bool) -> Result<(), Failure> {
    let client = connect(&args.connection).await?;
    let options = StoreOptions::new(args.prefix.clone());
    let options = match args.layout {
        Some(layout) => options.layout(layout.into()),
        None => options,
    };
    let layout = options.resolved_layout(client.deployment());
    println!(
        "check: prefix {:?}, layout {layout}, on {}",
        args.prefix,
        args.connection.describe()
    );
    let topology = topology(&client).await;
    let report = scan(&client, &args.prefix, args.scan_count, quiet).await;
    // Store::new sends nothing: it only judges the options, exactly as a bot's would.
    let built = Store::new(client.clone(), options).map(|_| ());
    client.close().await;
    let (topology, report) = (topology?, report?);

    let mut out = String::from("\n");
    out.push_str(&render_topology(&topology));
    out.push('\n');
    out.push_str(&render_per_node(&report));
    out.push('\n');
    out.push_str(&render_hot_tags(&report, &topology));
    out.push('\n');
    let mut fields = Fields::new();
    fields.add("marker", marker(&report));
    add_lifecycle(&mut fields, &report);
    fields.add("legacy-layout keys", report.legacy.values().sum::<u64>());
    fields.add("cluster-layout keys", report.cluster.values().sum::<u64>());
    fields.add("unknown keys", report.unknown);
    fields.add("keys scanned", report.scanned);
    out.push_str(&fields.render());
    out.push('\n');
    let verdict = verdict(layout, built, &report);
    for line in &verdict.lines {
        out.push_str(line);
        out.push('\n');
    }
    for line in warnings(&report, &topology) {
        out.push_str(&line);
        out.push('\n');
    }
    print!("{out}");
    if verdict.passes {
        Ok(())
    } else {
        Err(Failure::Refused(format!(
            "start() with layout {layout} would be refused for prefix {:?}",
            args.prefix
        )))
    }
}

/// What `start()` would do, as verdict lines.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Verdict {
    /// Whether `start()` would pass.
    pub(crate) passes: bool,
    /// The lines to print.
    pub(crate) lines: Vec<String>,
}

/// Decides as the start guard would (see the module docs). `built` is `Store::new`'s verdict.
pub(crate) fn verdict(
    layout: Layout,
    built: Result<(), Error>,
    report: &KeyspaceReport,
) -> Verdict {
    let pass = |why: String| Verdict {
        passes: true,
        lines: vec![format!(
            "verdict: start() with layout {layout} would pass: {why}"
        )],
    };
    let refuse = |why: String| Verdict {
        passes: false,
        lines: vec![format!(
            "verdict: start() with layout {layout} would be refused: {why}"
        )],
    };
    if let Err(e) = built {
        return refuse(e.to_string());
    }
    // The side's lifecycle record: start() refuses an incomplete copy and a deleted side.
    match report.lifecycle.get(&layout) {
        Some(Err(detail)) => {
            return refuse(format!("its lifecycle record cannot be read ({detail})"));
        }
        Some(Ok(r))
            if (r.role == Role::Target && r.phase == Phase::Copying) || r.phase.is_deletion() =>
        {
            return refuse(format!(
                "its lifecycle record says it is the {}; finish the copy (run it again), or \
                 start the bots on the side that holds the data",
                r.describe()
            ));
        }
        _ => {}
    }
    let legacy: u64 = report.legacy.values().sum();
    let cluster: u64 = report.cluster.values().sum();
    match layout {
        Layout::Legacy => {
            let mut v = pass("the legacy layout starts on any single-node prefix".into());
            if let Some(m) = &report.marker {
                v.lines.push(format!(
                    "warning: the prefix carries the layout marker {m:?}: some replica runs the \
                     cluster layout, and replicas on different layouts see different keyspaces"
                ));
            }
            if cluster > 0 {
                v.lines.push(format!(
                    "warning: {cluster} cluster-layout key(s) under the prefix are invisible to \
                     a legacy-layout store; roll back with `botmesh-redis rollback` first"
                ));
            }
            v
        }
        Layout::Cluster => match report.marker.as_deref() {
            Some(CLUSTER_V1) => {
                let mut v = pass(format!("the layout marker is {CLUSTER_V1}"));
                if legacy > 0 {
                    v.lines.push(format!(
                        "warning: {legacy} legacy-layout key(s) remain under the prefix, \
                         invisible to the store; once the bots run on the cluster layout, \
                         `botmesh-redis cleanup --layout legacy` deletes them"
                    ));
                }
                v
            }
            Some(other) => refuse(format!(
                "the layout marker holds {other:?}, a layout this version does not know"
            )),
            None if legacy > 0 => refuse(format!(
                "{legacy} legacy-layout key(s) and no layout marker ({}); migrate them first \
                 with `botmesh-redis migrate`",
                legacy_summary(report)
            )),
            None if report.guard_legacy > 0 => refuse(format!(
                "no layout marker, and the guard reads {} key(s) under the prefix as \
                 legacy-layout data (for example {}); remove or migrate them first",
                report.guard_legacy,
                report.guard_examples.join(", ")
            )),
            None => pass(format!(
                "no layout marker and no legacy-layout key; start() would write the marker \
                 {CLUSTER_V1}"
            )),
        },
    }
}

fn legacy_summary(report: &KeyspaceReport) -> String {
    report
        .legacy
        .iter()
        .filter(|(_, n)| **n > 0)
        .map(|(ns, n)| format!("{ns} {n}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Warnings that do not change the verdict: running bots, slots without a master, hot tags.
fn warnings(report: &KeyspaceReport, topology: &Topology) -> Vec<String> {
    let mut lines = Vec::new();
    let heartbeats = report
        .shared
        .get(&Namespace::Heartbeats)
        .copied()
        .unwrap_or(0);
    if heartbeats > 0 {
        lines.push(format!(
            "note: {heartbeats} replica heartbeat(s) under the prefix: bots are running"
        ));
    }
    if let Topology::Cluster(shards) = topology {
        let assigned: usize = shards
            .iter()
            .flat_map(|s| &s.ranges)
            .map(|(a, b)| usize::from(b - a) + 1)
            .sum();
        if assigned < 16384 {
            lines.push(format!(
                "warning: only {assigned} of 16384 slots have a master: the cluster is not \
                 fully serving"
            ));
        }
    }
    if let Some((tag, n)) = report.hot_tags.first() {
        let share = *n as f64 / report.scanned.max(1) as f64;
        if report.scanned >= HOT_MIN_KEYS && share >= HOT_SHARE {
            let slot = tag_slot(tag);
            lines.push(format!(
                "warning: the hash tag {{{tag}}} holds {n} of {} keys ({:.0}%), all in slot {} \
                 ({}): one slot, so one master, carries that load",
                report.scanned,
                share * 100.0,
                slot,
                slot_owner(topology, slot)
            ));
        }
    }
    lines
}

/// The master serving `slot`, as shown: its address, `standalone`, or `no master`.
fn slot_owner(topology: &Topology, slot: u16) -> String {
    match topology {
        Topology::Standalone => "standalone".to_owned(),
        Topology::Cluster(shards) => shards
            .iter()
            .find(|s| s.ranges.iter().any(|&(a, b)| (a..=b).contains(&slot)))
            .map_or_else(|| "no master".to_owned(), |s| s.master.clone()),
    }
}

fn tag_slot(tag: &str) -> u16 {
    slot(format!("{{{tag}}}").as_bytes())
}

/// One master of a cluster: its slot ranges and its replicas.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct ShardInfo {
    /// The master's announced address.
    pub(crate) master: String,
    /// Inclusive slot ranges.
    pub(crate) ranges: Vec<(u16, u16)>,
    /// The replicas' announced addresses.
    pub(crate) replicas: Vec<String>,
}

/// A single node or a cluster's shards.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Topology {
    /// Not a cluster.
    Standalone,
    /// The shards, in the order of their first slot.
    Cluster(Vec<ShardInfo>),
}

async fn topology(client: &Client) -> Result<Topology, Failure> {
    let request = Request::cmd(Access::Read, "CLUSTER").arg("SLOTS").build()?;
    match client.call(request).await {
        Ok(reply) => Ok(Topology::Cluster(parse_slots(&reply)?)),
        Err(Error::Server(e)) if e.text().contains("cluster support disabled") => {
            Ok(Topology::Standalone)
        }
        Err(e) => Err(e.into()),
    }
}

/// Reads a `CLUSTER SLOTS` reply with its replicas, which the core's topology (built for
/// routing) leaves out: `[[start, end, [host, port, id..], [replica host, port, id..]..]..]`.
/// An empty or `NULL` host is shown as `:port`, as `SCAN` names such a master.
pub(crate) fn parse_slots(reply: &Value) -> Result<Vec<ShardInfo>, Error> {
    let unexpected = |what: &str| Error::UnexpectedReply {
        detail: format!("CLUSTER SLOTS: {what}"),
    };
    let node = |v: &Value| -> Result<String, Error> {
        let Value::Array(fields) = v else {
            return Err(unexpected("a node is not an array"));
        };
        let host = match fields.first() {
            Some(Value::Bulk(h) | Value::Status(h)) => String::from_utf8_lossy(h).into_owned(),
            _ => String::new(),
        };
        let port = fields
            .get(1)
            .ok_or_else(|| unexpected("a node has no port"))?
            .as_i64()?;
        Ok(if host.contains(':') {
            format!("[{host}]:{port}")
        } else {
            format!("{host}:{port}")
        })
    };
    let Value::Array(entries) = reply else {
        return Err(unexpected("not an array"));
    };
    let mut shards: BTreeMap<String, ShardInfo> = BTreeMap::new();
    for entry in entries {
        let Value::Array(fields) = entry else {
            return Err(unexpected("an entry is not an array"));
        };
        let slot_at = |i: usize| -> Result<u16, Error> {
            let n = fields
                .get(i)
                .ok_or_else(|| unexpected("an entry lacks its range"))?
                .as_i64()?;
            u16::try_from(n)
                .ok()
                .filter(|&s| s < 16384)
                .ok_or_else(|| unexpected("a slot is out of range"))
        };
        let range = (slot_at(0)?, slot_at(1)?);
        let master = node(
            fields
                .get(2)
                .ok_or_else(|| unexpected("an entry has no master"))?,
        )?;
        let shard = shards.entry(master.clone()).or_insert_with(|| ShardInfo {
            master,
            ranges: Vec::new(),
            replicas: Vec::new(),
        });
        shard.ranges.push(range);
        for replica in fields.iter().skip(3) {
            let replica = node(replica)?;
            if !shard.replicas.contains(&replica) {
                shard.replicas.push(replica);
            }
        }
    }
    let mut shards: Vec<ShardInfo> = shards.into_values().collect();
    for shard in &mut shards {
        shard.ranges.sort_unstable();
        shard.replicas.sort();
    }
    // In slot order, as an operator reads a slot map.
    shards.sort_by_key(|s| s.ranges.first().copied());
    Ok(shards)
}

fn render_topology(topology: &Topology) -> String {
    match topology {
        Topology::Standalone => "topology: standalone (a single node, not a cluster)\n".into(),
        Topology::Cluster(shards) => {
            let mut table = Table::new(["master", "slots", "count", "replicas"]);
            for s in shards {
                let ranges: Vec<String> = s
                    .ranges
                    .iter()
                    .map(|(a, b)| {
                        if a == b {
                            a.to_string()
                        } else {
                            format!("{a}-{b}")
                        }
                    })
                    .collect();
                let count: usize = s.ranges.iter().map(|(a, b)| usize::from(b - a) + 1).sum();
                let replicas = if s.replicas.is_empty() {
                    "none".to_owned()
                } else {
                    s.replicas.join(" ")
                };
                table.row([
                    s.master.clone(),
                    ranges.join(","),
                    count.to_string(),
                    replicas,
                ]);
            }
            format!(
                "topology: cluster, {} master(s)\n{}",
                shards.len(),
                table.render()
            )
        }
    }
}

/// Keys per namespace (rows) and master (columns).
fn render_per_node(report: &KeyspaceReport) -> String {
    let nodes: Vec<&String> = report.per_node.keys().collect();
    if nodes.is_empty() {
        return "keys per master: none under the prefix\n".into();
    }
    let mut table = Table::new(
        ["namespace"]
            .into_iter()
            .chain(nodes.iter().map(|n| n.as_str()))
            .chain(["total"]),
    );
    for ns in Namespace::ALL {
        let counts: Vec<u64> = nodes
            .iter()
            .map(|n| report.per_node[*n].get(&ns).copied().unwrap_or(0))
            .collect();
        let total: u64 = counts.iter().sum();
        if total == 0 {
            continue;
        }
        table.row(
            [ns.name().to_owned()]
                .into_iter()
                .chain(counts.iter().map(u64::to_string))
                .chain([total.to_string()]),
        );
    }
    let totals: Vec<u64> = nodes
        .iter()
        .map(|n| report.per_node[*n].values().sum())
        .collect();
    table.row(
        ["total".to_owned()]
            .into_iter()
            .chain(totals.iter().map(u64::to_string))
            .chain([totals.iter().sum::<u64>().to_string()]),
    );
    format!(
        "keys per master (both layouts and the shared names together)\n{}",
        table.render()
    )
}

fn render_hot_tags(report: &KeyspaceReport, topology: &Topology) -> String {
    if report.hot_tags.is_empty() {
        return "hot hash tags: none (no key under the prefix has a hash tag)\n".into();
    }
    let mut table = Table::new(["tag", "slot", "master", "keys", "share"]);
    for (tag, n) in &report.hot_tags {
        let slot = tag_slot(tag);
        table.row([
            format!("{{{tag}}}"),
            slot.to_string(),
            slot_owner(topology, slot),
            n.to_string(),
            format!("{:.1}%", *n as f64 * 100.0 / report.scanned.max(1) as f64),
        ]);
    }
    format!("hot hash tags (most keys first)\n{}", table.render())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> Value {
        Value::Bulk(s.as_bytes().to_vec().into())
    }

    fn node(host: &str, port: i64) -> Value {
        Value::Array(vec![bulk(host), Value::Int(port), bulk("id")])
    }

    #[test]
    fn slots_with_replicas() {
        let reply = Value::Array(vec![
            Value::Array(vec![
                Value::Int(5461),
                Value::Int(10922),
                node("127.0.0.1", 7001),
                node("127.0.0.1", 7004),
            ]),
            Value::Array(vec![
                Value::Int(0),
                Value::Int(5460),
                node("", 7000),
                node("::1", 7003),
            ]),
            Value::Array(vec![Value::Int(10923), Value::Int(16383), node("h", 7002)]),
            Value::Array(vec![Value::Int(1), Value::Int(1), node("h", 7002)]),
        ]);
        let shards = parse_slots(&reply).ok();
        assert_eq!(
            shards,
            Some(vec![
                ShardInfo {
                    master: ":7000".into(),
                    ranges: vec![(0, 5460)],
                    replicas: vec!["[::1]:7003".into()],
                },
                ShardInfo {
                    master: "h:7002".into(),
                    ranges: vec![(1, 1), (10923, 16383)],
                    replicas: vec![],
                },
                ShardInfo {
                    master: "127.0.0.1:7001".into(),
                    ranges: vec![(5461, 10922)],
                    replicas: vec!["127.0.0.1:7004".into()],
                },
            ])
        );
    }

    #[test]
    fn bad_slots_replies_are_errors() {
        for bad in [
            Value::Int(1),
            Value::Array(vec![Value::Int(1)]),
            Value::Array(vec![Value::Array(vec![Value::Int(0)])]),
            Value::Array(vec![Value::Array(vec![
                Value::Int(0),
                Value::Int(20000),
                node("h", 1),
            ])]),
            Value::Array(vec![Value::Array(vec![
                Value::Int(0),
                Value::Int(1),
                Value::Int(3),
            ])]),
        ] {
            assert!(parse_slots(&bad).is_err(), "{bad:?}");
        }
    }

    /// A report with `legacy` legacy-layout keys and `guard` further keys the start guard
    /// takes for legacy data (unknown names such as `bot:weird`).
    fn report(marker: Option<&str>, legacy: u64, guard: &[&str]) -> KeyspaceReport {
        let mut r = KeyspaceReport {
            prefix: "bot".into(),
            marker: marker.map(str::to_owned),
            unknown: guard.len() as u64,
            unknown_examples: guard.iter().map(|s| (*s).to_owned()).collect(),
            guard_legacy: legacy + guard.len() as u64,
            guard_examples: guard.iter().map(|s| (*s).to_owned()).collect(),
            ..KeyspaceReport::default()
        };
        if legacy > 0 {
            r.legacy.insert(Namespace::Chats, legacy);
        }
        r
    }

    #[test]
    fn verdicts_follow_the_start_guard() {
        let ok = || Ok(());
        let cluster = |r: &KeyspaceReport| verdict(Layout::Cluster, ok(), r).passes;
        assert!(cluster(&report(Some("cluster:v1"), 0, &[])));
        assert!(cluster(&report(Some("cluster:v1"), 3, &[])));
        assert!(!cluster(&report(Some("cluster:v2"), 0, &[])));
        assert!(!cluster(&report(None, 1, &[])));
        assert!(cluster(&report(None, 0, &[])));
        // An unknown key the guard reads as legacy data refuses; one it does not (a cluster-
        // layout name inspect cannot read) passes.
        assert!(!cluster(&report(None, 0, &["bot:weird"])));
        let mut not_legacy = report(None, 0, &[]);
        not_legacy.unknown = 50;
        assert!(cluster(&not_legacy));
        assert!(verdict(Layout::Legacy, ok(), &report(Some("cluster:v1"), 0, &[])).passes);
        let refused = verdict(
            Layout::Legacy,
            Err(Error::Config(
                botmesh_redis_tokio::ConfigError::LegacyLayoutOnCluster { component: "store" },
            )),
            &report(None, 0, &[]),
        );
        assert_eq!(
            refused.lines,
            vec![
                "verdict: start() with layout legacy would be refused: configuration error: \
                 the legacy layout runs on a single node only: on a cluster client, store needs \
                 the cluster layout (Layout::Cluster, the default with ClientOptions::cluster); \
                 data written in the legacy layout on a single node moves to it with the command \
                 line `botmesh-redis migrate` (docs/migration.md)"
                    .to_owned()
            ]
        );
    }

    #[test]
    fn a_hot_tag_is_warned_about_only_in_a_keyspace_with_load() {
        let topology = Topology::Cluster(vec![ShardInfo {
            master: "h:1".into(),
            ranges: vec![(0, 16383)],
            replicas: vec![],
        }]);
        let mut r = report(Some("cluster:v1"), 0, &[]);
        r.hot_tags = vec![("m:big".into(), 500)];
        r.scanned = 2000;
        assert_eq!(
            warnings(&r, &topology),
            [format!(
                "warning: the hash tag {{m:big}} holds 500 of 2000 keys (25%), all in slot {} \
                 (h:1): one slot, so one master, carries that load",
                tag_slot("m:big")
            )]
        );
        r.scanned = 999;
        assert!(warnings(&r, &topology).is_empty());
        r.scanned = 6000;
        assert!(warnings(&r, &topology).is_empty());
    }
}
