//! `delete_source`: once the copy is complete, the cleanup step deletes the source. A forward
//! migration leaves no legacy data under the prefix (orphans and unknown keys stay: nothing
//! was copied from them), and a rollback no cluster-layout keys; the target holds every datum,
//! and each side's lifecycle record says what happened.

use std::collections::BTreeMap;

use botmesh_redis_core::migrate::{
    migrate_to_cluster_layout, rollback_to_legacy_layout, MarkerOutcome, MigrateOptions,
    RollbackOptions,
};
use botmesh_redis_core::{Keyspace, Layout};
use botmesh_redis_tests::conformance::Runtime;
use botmesh_redis_tests::keyspace::{
    assert_forward_report, assert_same_data, digest, seeds, write_generated, Digest, Expected, Node,
};
use botmesh_redis_tests::{both_drivers, unique_prefix};

const SEEDS: &[u64] = &[21, 22];

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
        let keys_before = source.keys(&prefix);
        let mut options = MigrateOptions::new(prefix.as_str());
        options.delete_source = true;
        let report = migrate_to_cluster_layout(&src, &tgt, &options, &mut |_| {})
            .await
            .unwrap();
        assert_forward_report(&report, expected, separate);
        assert_eq!(report.marker, MarkerOutcome::Written);
        let keys_after = source.keys(&prefix);
        assert_eq!(
            report.source_deleted,
            keys_before.difference(&keys_after).count() as u64,
            "seed {seed}: {report:#?}"
        );
        let copy = digest(tgt_node, Layout::Cluster, &prefix);
        assert_same_data(&format!("seed {seed}: cluster copy"), &before, &copy);
        copy.assert_indexes_agree();
        let left = digest(source, Layout::Legacy, &prefix);
        check_left_behind(&left, &before, expected, separate);
        if separate {
            // Nothing else either: every key left is an orphan, an unknown key, or the legacy
            // side's lifecycle record, which says it was deleted.
            let left = keys_after.len() as u64 - expected.orphans - expected.unknown;
            assert_eq!(
                left, 1,
                "seed {seed}: keys besides orphans and unknown keys"
            );
            assert!(keys_after.contains(
                Keyspace::new(Layout::Legacy, prefix.as_str())
                    .unwrap()
                    .lifecycle()
                    .as_bytes()
            ));
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
        let options = MigrateOptions::new(prefix.as_str());
        migrate_to_cluster_layout(&legacy_client, &cluster_client, &options, &mut |_| {})
            .await
            .unwrap();
        let migrated = digest(target, Layout::Cluster, &prefix);
        // The bots ran on the cluster layout (a rollback into another prefix copies from the
        // side they ran on).
        target
            .start_bots::<R>(Layout::Cluster, &prefix)
            .await
            .unwrap();

        let back = if in_place {
            prefix.clone()
        } else {
            unique_prefix("mig-del-back")
        };
        let mut rollback = RollbackOptions::new(prefix.as_str());
        rollback.target_prefix = Some(back.clone());
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
            // The cluster side's lifecycle record stays, marked deleted; nothing else.
            let record = Keyspace::new(Layout::Cluster, prefix.as_str())
                .unwrap()
                .lifecycle();
            let keys: Vec<String> = target
                .keys(&prefix)
                .iter()
                .map(|k| String::from_utf8_lossy(k).into_owned())
                .collect();
            assert_eq!(
                keys,
                vec![record.to_string()],
                "seed {seed}: cluster-layout keys left"
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
