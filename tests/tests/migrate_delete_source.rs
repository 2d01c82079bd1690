//! `delete_source`: a forward migration leaves no legacy data under the prefix (orphans, unknown
//! keys and log members without items stay: nothing was copied from them), and a rollback
//! leaves no cluster-layout keys; the target holds every datum.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;

use botmesh_redis_core::migrate::{
    migrate_to_cluster_layout, rollback_to_legacy_layout, MarkerOutcome, MigrateOptions, Namespace,
    RollbackOptions,
};
use botmesh_redis_core::Layout;
use botmesh_redis_tests::conformance::Runtime;
use botmesh_redis_tests::keyspace::{
    assert_forward_report, assert_same_data, digest, seeds, write_generated, Digest, Expected, Node,
};
use botmesh_redis_tests::{both_drivers, unique_prefix};

const SEEDS: &[u64] = &[21, 22];

/// What a forward `delete_source` deletes: each copied record and counter, each copied
/// message's member (with its item), and the turn queues and holders.
fn deleted_by_forward(expected: &Expected, separate: bool) -> u64 {
    let n = |ns| expected.keys.get(&ns).copied().unwrap_or(0);
    let mut keys = [
        Namespace::Chats,
        Namespace::Contacts,
        Namespace::Checkpoints,
        Namespace::Schedules,
        Namespace::UserData,
        Namespace::Fences,
        Namespace::Terms,
        Namespace::Turns,
        Namespace::Locks,
        Namespace::Leaderships,
    ]
    .into_iter()
    .map(n)
    .sum::<u64>();
    if separate {
        keys += [
            Namespace::Conversations,
            Namespace::Cursors,
            Namespace::Leases,
            Namespace::Durability,
        ]
        .into_iter()
        .map(n)
        .sum::<u64>();
    }
    // Members without an item are dropped too: they carry no message.
    keys + expected.messages + expected.drain_messages + expected.dangling
}

/// The legacy keys left after a forward `delete_source`: no data, except in place the names
/// both layouts share; orphans, unknown keys and dangling members as generated.
fn check_left_behind(left: &Digest, before: &Digest, expected: &Expected, separate: bool) {
    let shared = if separate {
        Digest::default()
    } else {
        Digest {
            cursors: before.cursors.clone(),
            conversations: before.conversations.clone(),
            leases: before.leases.clone(),
            durable: before.durable.clone(),
            ..Digest::default()
        }
    };
    assert_same_data("legacy data left behind", &shared, left);
    let mut excluded: BTreeMap<&str, u64> =
        [("orphans", expected.orphans), ("unknown", expected.unknown)]
            .into_iter()
            .filter(|(_, n)| *n > 0)
            .collect();
    if !separate {
        // In place the legacy reading sees the cluster-layout keys as unknown, and the marker.
        excluded.remove("unknown");
        excluded.insert("marker", 1);
        let mut left = left.excluded.clone();
        left.remove("unknown");
        assert_eq!(left, excluded);
    } else {
        assert_eq!(left.excluded, excluded);
    }
}

async fn forward<R: Runtime>(target: Option<Node<'static>>) {
    let source = Node::shared_single();
    let src = source.client::<R>().await;
    let tgt_node = target.unwrap_or(source);
    let tgt = tgt_node.client::<R>().await;
    let separate = target.is_some();
    for seed in seeds(SEEDS) {
        let prefix = unique_prefix("mig-del-fwd");
        let generated = write_generated(source, &prefix, seed, 1);
        let expected = &generated.expected;
        let before = digest(source, Layout::Legacy, &prefix);
        let mut options = MigrateOptions::new(prefix.as_str());
        options.other_server = separate;
        options.delete_source = true;
        let report = migrate_to_cluster_layout(&src, &tgt, &options, &mut |_| {})
            .await
            .unwrap();
        assert_forward_report(&report, expected, separate);
        assert_eq!(report.marker, MarkerOutcome::Written);
        assert_eq!(
            report.source_deleted,
            deleted_by_forward(expected, separate),
            "seed {seed}: {report:#?}"
        );
        let copy = digest(tgt_node, Layout::Cluster, &prefix);
        assert_same_data(&format!("seed {seed}: cluster copy"), &before, &copy);
        copy.assert_indexes_agree();
        let left = digest(source, Layout::Legacy, &prefix);
        check_left_behind(&left, &before, expected, separate);
        if separate {
            // Nothing else either: every key left is an orphan, an unknown key or a log of
            // dangling members.
            let logs_left = source.keys(&prefix).len() as u64 - expected.orphans - expected.unknown;
            assert!(
                logs_left <= expected.dangling,
                "seed {seed}: {logs_left} keys besides orphans and unknown keys"
            );
        }
    }
}

async fn forward_in_place<R: Runtime>() {
    forward::<R>(None).await;
}

async fn forward_into_the_cluster<R: Runtime>() {
    forward::<R>(Some(Node::shared_cluster())).await;
}

/// Forward (copy only) into `target`, then a rollback with `delete_source` from there into a
/// legacy prefix on the shared single node: `target_prefix` a fresh one, or in place.
async fn rollback<R: Runtime>(target: Node<'static>, in_place: bool) {
    let single = Node::shared_single();
    let legacy_client = single.client::<R>().await;
    let cluster_client = target.client::<R>().await;
    for seed in seeds(SEEDS) {
        let prefix = unique_prefix("mig-del-rb");
        write_generated(single, &prefix, seed, 1);
        let before = digest(single, Layout::Legacy, &prefix);
        let mut options = MigrateOptions::new(prefix.as_str());
        options.other_server = !in_place;
        migrate_to_cluster_layout(&legacy_client, &cluster_client, &options, &mut |_| {})
            .await
            .unwrap();
        let migrated = digest(target, Layout::Cluster, &prefix);

        let back = if in_place {
            prefix.clone()
        } else {
            unique_prefix("mig-del-back")
        };
        let mut rollback = RollbackOptions::new(prefix.as_str());
        rollback.target_prefix = Some(back.clone());
        rollback.other_server = !in_place;
        rollback.delete_source = true;
        let report =
            rollback_to_legacy_layout(&cluster_client, &legacy_client, &rollback, &mut |_| {})
                .await
                .unwrap();
        assert_eq!(report.unrepresentable, 0, "{report:#?}");
        assert_eq!(
            report.marker,
            if in_place {
                MarkerOutcome::Removed
            } else {
                MarkerOutcome::Absent
            }
        );
        let restored = digest(single, Layout::Legacy, &back);
        assert_same_data(&format!("seed {seed}: restored"), &before, &restored);
        let left = digest(target, Layout::Cluster, &prefix);
        if in_place {
            // The names both layouts share are the legacy keys too; everything else is gone.
            assert_same_data(
                &format!("seed {seed}: cluster layout left behind"),
                &Digest {
                    cursors: migrated.cursors.clone(),
                    conversations: migrated.conversations.clone(),
                    leases: migrated.leases.clone(),
                    durable: migrated.durable.clone(),
                    ..Digest::default()
                },
                &left,
            );
            // The legacy keys, unknown to the cluster reading, are all that is left.
            assert_eq!(left.marker, None);
            assert_eq!(
                left.excluded.keys().copied().collect::<Vec<_>>(),
                vec!["unknown"],
                "seed {seed}: {left:#?}"
            );
        } else {
            let keys = target.keys(&prefix);
            assert!(
                keys.is_empty(),
                "seed {seed}: cluster-layout keys left: {:?}",
                keys.iter()
                    .map(|k| String::from_utf8_lossy(k).into_owned())
                    .collect::<Vec<_>>()
            );
        }
    }
}

async fn rollback_in_place<R: Runtime>() {
    rollback::<R>(Node::shared_single(), true).await;
}

async fn rollback_from_the_cluster<R: Runtime>() {
    rollback::<R>(Node::shared_cluster(), false).await;
}

both_drivers!(
    forward_in_place,
    forward_into_the_cluster,
    rollback_in_place,
    rollback_from_the_cluster
);
