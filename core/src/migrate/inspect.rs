//! `inspect_keyspace`: what a prefix holds, per layout and namespace, on one node or on every
//! master of a cluster.

use std::collections::BTreeMap;

use bytes::Bytes;

use crate::error::Error;
use crate::executor::Executor;
use crate::keys::hash_tag;
use crate::keys::{Keyspace, Layout};
use crate::request::{Access, Request};
use crate::store::guard::is_legacy_layout_key;

use super::engine::{dbsize, layout, scan_page, send};
use super::names::{self, Name};
use super::sides::{server, view};
use super::{KeyspaceReport, Namespace, Progress, EXAMPLES};

/// Counters of the hot-tag summary (Misra-Gries): tags holding more than 1/1024 of the keys
/// are always among them.
const TAG_COUNTERS: usize = 1024;

/// Counts every key under `prefix` per layout and namespace, on a single node or on every
/// master of a cluster. Keys that are no name of either layout are counted as unknown (with
/// examples), never guessed at. Reads only.
///
/// The prefix is checked as a legacy prefix (braces allowed); a braced prefix simply has no
/// cluster-layout keys.
pub async fn inspect_keyspace<E: Executor>(
    client: &E,
    prefix: &str,
    scan_count: u32,
    progress: &mut (dyn FnMut(&Progress) + Send),
) -> Result<KeyspaceReport, Error> {
    let legacy = Keyspace::new(Layout::Legacy, prefix)?;
    // The cluster reading needs a brace-free prefix; with braces nothing can be cluster-layout.
    let cluster = Keyspace::new(Layout::Cluster, prefix).ok();
    let (nodes, _) = layout(client).await?;
    let total = dbsize(client, &nodes).await?;
    let mut report = KeyspaceReport {
        prefix: prefix.to_owned(),
        ..KeyspaceReport::default()
    };
    let mut tags = TagSummary::default();
    let pattern = legacy.prefix_pattern();
    for node in &nodes {
        let label = node.clone().unwrap_or_else(|| "standalone".to_owned());
        report.nodes.push(label.clone());
        let mut cursor = Bytes::from_static(b"0");
        loop {
            let (next, keys) = scan_page(client, node, &cursor, &pattern, scan_count).await?;
            for key in keys {
                report.scanned += 1;
                let ns = classify(&mut report, &legacy, cluster.as_ref(), &key);
                if cluster
                    .as_ref()
                    .is_some_and(|ks| is_legacy_layout_key(ks, &key))
                {
                    report.guard_legacy += 1;
                    if report.guard_examples.len() < EXAMPLES {
                        report
                            .guard_examples
                            .push(String::from_utf8_lossy(&key).into_owned());
                    }
                }
                *report
                    .per_node
                    .entry(label.clone())
                    .or_default()
                    .entry(ns)
                    .or_default() += 1;
                if let Some(tag) = hash_tag(&key) {
                    tags.add(tag);
                }
            }
            progress(&Progress {
                scanned: report.scanned,
                total,
                moved: 0,
                phase: "scanning",
            });
            cursor = next;
            if cursor.as_ref() == b"0" {
                break;
            }
        }
    }
    report.hot_tags = tags.top(10);
    let marker = Request::cmd(Access::Read, "GET")
        .key(legacy.marker())
        .build()?;
    if let Some(Ok(value)) = send(client, vec![marker]).await?.pop() {
        report.marker = value
            .into_opt_bytes()?
            .map(|b| String::from_utf8_lossy(&b).into_owned());
    }
    let server = server(client).await?;
    for ks in [Some(legacy.clone()), cluster.clone()]
        .into_iter()
        .flatten()
    {
        let side = view(client, &server, &ks, false).await?;
        if let Some(record) = side.record.transpose() {
            report.lifecycle.insert(ks.layout(), record);
        }
    }
    Ok(report)
}

fn classify(
    report: &mut KeyspaceReport,
    legacy: &Keyspace,
    cluster: Option<&Keyspace>,
    key: &[u8],
) -> Namespace {
    let as_cluster = cluster.map_or(Name::Unknown, |ks| names::cluster(ks, key));
    let as_legacy = names::legacy(legacy, key);
    if matches!(as_legacy, Name::Lifecycle { .. }) {
        // Read and shown whole below, not counted as data.
        return Namespace::Marker;
    }
    if as_cluster.is_shared() {
        let ns = Namespace::of(&as_cluster);
        *report.shared.entry(ns).or_default() += 1;
        return ns;
    }
    if as_cluster != Name::Unknown {
        let ns = Namespace::of(&as_cluster);
        *report.cluster.entry(ns).or_default() += 1;
        return ns;
    }
    if as_legacy.is_shared() {
        // A shared name the cluster reading refused: a braced prefix.
        let ns = Namespace::of(&as_legacy);
        *report.shared.entry(ns).or_default() += 1;
        return ns;
    }
    if as_legacy != Name::Unknown {
        let ns = Namespace::of(&as_legacy);
        *report.legacy.entry(ns).or_default() += 1;
        return ns;
    }
    report.unknown += 1;
    if report.unknown_examples.len() < EXAMPLES {
        report
            .unknown_examples
            .push(String::from_utf8_lossy(key).into_owned());
    }
    Namespace::Unknown
}

/// The Misra-Gries summary of hash tags: bounded memory, exact for the tags that matter.
#[derive(Default)]
struct TagSummary {
    counts: BTreeMap<Vec<u8>, u64>,
}

impl TagSummary {
    fn add(&mut self, tag: &[u8]) {
        if let Some(n) = self.counts.get_mut(tag) {
            *n += 1;
            return;
        }
        if self.counts.len() < TAG_COUNTERS {
            self.counts.insert(tag.to_vec(), 1);
            return;
        }
        self.counts.retain(|_, n| {
            *n -= 1;
            *n > 0
        });
    }

    fn top(&self, n: usize) -> Vec<(String, u64)> {
        let mut all: Vec<(String, u64)> = self
            .counts
            .iter()
            .map(|(tag, count)| (String::from_utf8_lossy(tag).into_owned(), *count))
            .collect();
        all.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        all.truncate(n);
        all
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tag_summary_keeps_the_heavy_tags() {
        let mut summary = TagSummary::default();
        for i in 0..5000u32 {
            summary.add(format!("light{i}").as_bytes());
            if i % 2 == 0 {
                summary.add(b"heavy");
            }
        }
        let top = summary.top(1);
        assert_eq!(top[0].0, "heavy");
        assert!(top[0].1 > 0 && top[0].1 <= 2500);
    }
}
