//! A generated legacy keyspace (every namespace, hostile ids, orphans, foreign and shared items,
//! dangling members, unknown keys) migrated to `cluster:v1` holds the same data, and rolled
//! back holds the original data again: in place on one node, into another node, and into the
//! shared cluster and back into a fresh prefix. The reports count exactly what was generated.

use std::collections::{BTreeMap, BTreeSet};

use botmesh_redis_core::migrate::{
    inspect_keyspace, migrate_to_cluster_layout, rollback_to_legacy_layout, Counts, MarkerOutcome,
    MigrateOptions, MigrationReport, Namespace, RollbackOptions,
};
use botmesh_redis_core::Layout;
use botmesh_redis_tests::conformance::Runtime;
use botmesh_redis_tests::keyspace::{
    assert_forward_report, assert_same_data, digest_since, seeds, write_generated, Digest,
    Expected, Node, SHARED_NAMESPACES,
};
use botmesh_redis_tests::{both_drivers, unique_prefix};

const SEEDS: &[u64] = &[1, 2, 3];
/// Keyspaces of a few hundred keys.
const SIZE: u64 = 4;

/// A fresh prefix with a `:` and every glob character in it: listings must escape them.
fn hostile_prefix(name: &str) -> String {
    format!("{}:b*t?[1]\\", unique_prefix(name))
}

/// The digest of a freshly generated keyspace agrees with what the generator wrote.
fn check_generated_digest(before: &Digest, expected: &Expected) {
    assert!(!before.is_empty());
    let count = |what| before.excluded.get(what).copied().unwrap_or(0);
    assert_eq!(count("orphans"), expected.orphans, "{before:#?}");
    assert_eq!(count("dangling"), expected.dangling, "{before:#?}");
    assert_eq!(count("unknown"), expected.unknown, "{before:#?}");
    let messages: usize = before.messages.values().map(Vec::len).sum();
    assert_eq!(messages as u64, expected.messages);
    assert_eq!(before.marker, None);
}

/// Checks `inspect_keyspace` on a freshly generated keyspace.
async fn check_inspect<R: Runtime>(
    client: &botmesh_redis_tests::Client<R>,
    prefix: &str,
    expected: &Expected,
) {
    let report = inspect_keyspace(client, prefix, 50, &mut |_| {})
        .await
        .unwrap();
    assert_eq!(report.legacy, expected.inspect_legacy(), "{report:#?}");
    assert_eq!(report.shared, expected.inspect_shared(), "{report:#?}");
    assert_eq!(report.cluster, BTreeMap::new(), "{report:#?}");
    assert_eq!(report.unknown, expected.unknown, "{report:#?}");
    assert_eq!(report.scanned, expected.total_keys(), "{report:#?}");
    assert_eq!(report.marker, None);
    assert!(report.has_legacy_data());
}

/// A rollback into a legacy prefix that holds nothing: every datum copied once. Each legacy
/// item is written once: the log's message writes it and a drain member naming the same id adds
/// its member only; of the two messages of a shared item (equal values), the one of the longer
/// chat id adds its member only and counts as shared.
fn assert_fresh_rollback_report(report: &MigrationReport, expected: &Expected) {
    let context = format!("{report:#?}\nexpected {expected:#?}");
    assert_eq!(
        report.namespaces,
        expected.forward_namespaces(true),
        "{context}"
    );
    assert_eq!(
        (
            report.orphans,
            report.foreign_items,
            report.shared_items,
            report.dangling,
            report.unknown,
            report.unreadable,
            report.unrepresentable
        ),
        (0, 0, expected.shared_items, 0, 0, 0, 0),
        "{context}"
    );
}

async fn in_place_on_one_node<R: Runtime>() {
    let node = Node::shared_single();
    let client = node.client::<R>().await;
    for seed in seeds(SEEDS) {
        let prefix = hostile_prefix("mig-rt-in-place");
        let written = node.now_ms();
        let generated = write_generated(node, &prefix, seed, SIZE);
        let expected = &generated.expected;
        let before = digest_since(node, Layout::Legacy, &prefix, written);
        check_generated_digest(&before, expected);
        check_inspect(&client, &prefix, expected).await;

        let options = MigrateOptions::new(prefix.as_str());
        let report = migrate_to_cluster_layout(&client, &client, &options, &mut |_| {})
            .await
            .unwrap();
        assert_forward_report(&report, expected, false);
        assert_eq!(report.marker, MarkerOutcome::Written);
        let cluster = digest_since(node, Layout::Cluster, &prefix, written);
        assert_same_data(&format!("seed {seed}: cluster copy"), &before, &cluster);
        cluster.assert_indexes_agree();
        assert_eq!(cluster.marker.as_deref(), Some("cluster:v1"));
        // In place, the legacy keys stay as they were.
        assert_same_data(
            &format!("seed {seed}: legacy after forward"),
            &before,
            &digest_since(node, Layout::Legacy, &prefix, written),
        );

        let rollback = RollbackOptions::new(prefix.as_str());
        let report = rollback_to_legacy_layout(&client, &client, &rollback, &mut |_| {})
            .await
            .unwrap();
        assert_eq!(report.marker, MarkerOutcome::Removed, "{report:#?}");
        // A mirror into the legacy keys it came from: records overwritten with the same bytes,
        // counters equal (kept), and the dangling members, which the cluster layout does not
        // hold, pruned from the legacy logs.
        let mut wanted = BTreeMap::new();
        let n = |ns| expected.keys.get(&ns).copied().unwrap_or(0);
        let kept = |count| Counts {
            kept: count,
            ..Counts::default()
        };
        wanted.insert(
            Namespace::Messages,
            Counts {
                kept: expected.messages,
                pruned: expected.dangling - expected.dangling_in_drains,
                ..Counts::default()
            },
        );
        if expected.drain_messages + expected.dangling_in_drains > 0 {
            wanted.insert(
                Namespace::Drains,
                Counts {
                    kept: expected.drain_messages,
                    pruned: expected.dangling_in_drains,
                    ..Counts::default()
                },
            );
        }
        for ns in [
            Namespace::Chats,
            Namespace::Contacts,
            Namespace::Checkpoints,
            Namespace::Schedules,
            Namespace::UserData,
        ] {
            if n(ns) > 0 {
                wanted.insert(ns, kept(n(ns)));
            }
        }
        for ns in [Namespace::Fences, Namespace::Terms] {
            if n(ns) > 0 {
                wanted.insert(
                    ns,
                    Counts {
                        kept: n(ns),
                        ..Counts::default()
                    },
                );
            }
        }
        assert_eq!(report.namespaces, wanted, "seed {seed}: {report:#?}");
        let mut not_copied: BTreeMap<Namespace, u64> = SHARED_NAMESPACES
            .into_iter()
            .map(|ns| (ns, n(ns)))
            .filter(|(_, c)| *c > 0)
            .collect();
        not_copied.insert(Namespace::Indexes, cluster.excluded["indexes"]);
        not_copied.insert(Namespace::Marker, 1);
        assert_eq!(report.not_copied, not_copied, "seed {seed}: {report:#?}");
        // The copy pass sees the legacy keys as the target layout's, except the logs and
        // drains the mirror pruned first because they held only dangling members.
        let legacy_keys: u64 = expected.inspect_legacy().values().sum();
        assert!(
            (legacy_keys - expected.dangling..=legacy_keys).contains(&report.target_layout),
            "seed {seed}: {} legacy keys seen, {legacy_keys} written, {} dangling: {report:#?}",
            report.target_layout,
            expected.dangling
        );
        assert_eq!(
            (report.unknown, report.unrepresentable),
            (expected.unknown, 0),
            "seed {seed}: {report:#?}"
        );
        let back = digest_since(node, Layout::Legacy, &prefix, written);
        assert_same_data(&format!("seed {seed}: rolled back"), &before, &back);
        assert_eq!(back.marker, None);
        assert_eq!(back.excluded.get("dangling"), None, "pruned by the mirror");
    }
}

/// Forward from the shared single node into `target` (cluster layout, same prefix), then back
/// into a fresh legacy prefix on the shared single node.
async fn there_and_back<R: Runtime>(target: Node<'static>) {
    let source = Node::shared_single();
    let src = source.client::<R>().await;
    let tgt = target.client::<R>().await;
    for seed in seeds(SEEDS) {
        let prefix = hostile_prefix("mig-rt-there");
        let written = source.now_ms();
        let generated = write_generated(source, &prefix, seed, SIZE);
        let expected = &generated.expected;
        let before = digest_since(source, Layout::Legacy, &prefix, written);
        check_generated_digest(&before, expected);

        let options = MigrateOptions::new(prefix.as_str());
        let report = migrate_to_cluster_layout(&src, &tgt, &options, &mut |_| {})
            .await
            .unwrap();
        assert_forward_report(&report, expected, true);
        assert_eq!(report.marker, MarkerOutcome::Written);
        let cluster = digest_since(target, Layout::Cluster, &prefix, written);
        assert_same_data(&format!("seed {seed}: cluster copy"), &before, &cluster);
        cluster.assert_indexes_agree();
        assert_eq!(cluster.marker.as_deref(), Some("cluster:v1"));
        // The target holds the data, its indexes and the marker, nothing else.
        let indexes = cluster.excluded["indexes"];
        assert_eq!(
            cluster.excluded,
            BTreeMap::from([("indexes", indexes), ("marker", 1)])
        );
        let messages: usize = cluster.messages.values().map(Vec::len).sum();
        let drained: usize = cluster.drains.values().map(Vec::len).sum();
        let items: BTreeSet<(&String, &String)> = cluster
            .messages
            .iter()
            .chain(&cluster.drains)
            .flat_map(|(chat, list)| list.iter().map(move |m| (chat, &m.id)))
            .collect();
        let logs = cluster.messages.len() + cluster.drains.len();
        let others = cluster.len() - messages - drained;
        // ... and the marker, and the lifecycle record.
        assert_eq!(
            target.keys(&prefix).len(),
            items.len() + logs + others + indexes as usize + 2
        );

        // inspect_keyspace sees the copy as cluster-layout keys on every master.
        let inspected = inspect_keyspace(&tgt, &prefix, 100, &mut |_| {})
            .await
            .unwrap();
        assert_eq!(inspected.legacy, BTreeMap::new(), "{inspected:#?}");
        assert_eq!(
            (
                inspected.unknown,
                inspected.scanned,
                inspected.marker.as_deref()
            ),
            (0, target.keys(&prefix).len() as u64, Some("cluster:v1")),
            "{inspected:#?}"
        );
        assert_eq!(inspected.cluster.get(&Namespace::Indexes), Some(&indexes));
        assert_eq!(inspected.nodes.len(), target.conns().len());

        // The bots ran on the cluster; the rollback into another prefix copies from them.
        target
            .start_bots::<R>(Layout::Cluster, &prefix)
            .await
            .unwrap();
        let back = hostile_prefix("mig-rt-back");
        let mut rollback = RollbackOptions::new(prefix.as_str());
        rollback.target_prefix = Some(back.clone());
        let report = rollback_to_legacy_layout(&tgt, &src, &rollback, &mut |_| {})
            .await
            .unwrap();
        assert_fresh_rollback_report(&report, expected);
        assert_eq!(report.marker, MarkerOutcome::Absent, "{report:#?}");
        let restored = digest_since(source, Layout::Legacy, &back, written);
        assert_same_data(&format!("seed {seed}: rolled back"), &before, &restored);
        assert_eq!(restored.excluded.get("unknown"), None);
        assert_eq!(restored.marker, None);
    }
}

async fn into_another_node<R: Runtime>() {
    there_and_back::<R>(Node::other_single()).await;
}

async fn into_the_cluster_and_back<R: Runtime>() {
    there_and_back::<R>(Node::shared_cluster()).await;
}

both_drivers!(in_place_on_one_node);
both_drivers!(into_another_node);
both_drivers!(into_the_cluster_and_back);
