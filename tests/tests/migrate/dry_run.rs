//! `dry_run` writes nothing (every byte under the source and target prefixes is unchanged) and
//! reports exactly what the real run that follows does, for a migration and for a mirroring
//! rollback that overwrites and prunes.

use std::collections::BTreeMap;

use botmesh_redis_core::keys::RecordKind;
use botmesh_redis_core::migrate::{
    migrate_to_cluster_layout, rollback_to_legacy_layout, Counts, MarkerOutcome, MigrateOptions,
    MigrationReport, Namespace, RollbackOptions,
};
use botmesh_redis_core::{Keyspace, Layout};
use botmesh_redis_core::{Store, StoreOptions};
use botmesh_redis_tests::conformance::Runtime;
use botmesh_redis_tests::keyspace::{digest, seeds, write_generated, Cmd, Node};
use botmesh_redis_tests::{both_drivers, unique_prefix};

const SEEDS: &[u64] = &[1, 41];

/// The counts a dry run must predict.
type Predicted = (
    BTreeMap<Namespace, Counts>,
    BTreeMap<Namespace, u64>,
    [u64; 7],
);

fn predicted(report: &MigrationReport) -> Predicted {
    (
        report.namespaces.clone(),
        report.not_copied.clone(),
        [
            report.orphans,
            report.foreign_items,
            report.shared_items,
            report.dangling,
            report.unreadable,
            report.unrepresentable,
            report.unknown,
        ],
    )
}

/// Forward from the shared single node into `target` (in place when `None`).
async fn forward<R: Runtime>(target: Option<Node<'static>>) {
    let source = Node::shared_single();
    let tgt_node = target.unwrap_or(source);
    let separate = target.is_some();
    let src = source.client::<R>().await;
    let tgt = tgt_node.client::<R>().await;
    for seed in seeds(SEEDS) {
        let prefix = unique_prefix("mig-dry-fwd");
        write_generated(source, &prefix, seed, 1);
        let source_before = source.raw_dump(&prefix);
        let target_before = tgt_node.raw_dump(&prefix);
        let mut options = MigrateOptions::new(prefix.as_str());
        options.dry_run = true;
        let dry = migrate_to_cluster_layout(&src, &tgt, &options, &mut |_| {})
            .await
            .unwrap();
        assert!(dry.dry_run);
        assert_eq!(dry.marker, MarkerOutcome::NotWrittenDryRun);
        assert_eq!(dry.source_deleted, 0);
        assert!(
            source.raw_dump(&prefix) == source_before,
            "seed {seed}: the source changed"
        );
        assert!(
            tgt_node.raw_dump(&prefix) == target_before,
            "seed {seed}: the target changed"
        );

        options.dry_run = false;
        let real = migrate_to_cluster_layout(&src, &tgt, &options, &mut |_| {})
            .await
            .unwrap();
        assert_eq!(real.marker, MarkerOutcome::Written);
        assert_eq!(
            predicted(&dry),
            predicted(&real),
            "seed {seed}: dry {dry:#?}\nreal {real:#?}"
        );
        if separate {
            // In place the real run also scans the keys it wrote.
            assert_eq!(dry.scanned, real.scanned);
        }
    }
}

async fn forward_in_place<R: Runtime>() {
    forward::<R>(None).await;
}

async fn forward_into_the_cluster<R: Runtime>() {
    forward::<R>(Some(Node::shared_cluster())).await;
}

/// Migrates into `host`, changes the cluster-layout data through a store (a chat deleted, a
/// checkpoint cleared, a contact changed, a user-data entry deleted), then rolls back into the
/// original legacy prefix with the mirror: a dry run first, then the real one.
async fn rollback<R: Runtime>(host: Node<'static>, in_place: bool) {
    let single = Node::shared_single();
    let legacy = single.client::<R>().await;
    let cluster = host.client::<R>().await;
    for seed in seeds(SEEDS) {
        let prefix = unique_prefix("mig-dry-rb");
        write_generated(single, &prefix, seed, 1);
        let before = digest(single, Layout::Legacy, &prefix);
        let options = MigrateOptions::new(prefix.as_str());
        migrate_to_cluster_layout(&legacy, &cluster, &options, &mut |_| {})
            .await
            .unwrap();

        let store = Store::new(
            cluster.clone(),
            StoreOptions::new(prefix.as_str()).layout(Layout::Cluster),
        )
        .unwrap();
        store.start().await.unwrap();
        let chat = before.messages.keys().next().unwrap();
        store.delete_chat(chat).await.unwrap();
        let id_of = |kind| {
            before
                .records
                .keys()
                .find(|(k, _)| *k == kind)
                .map(|(_, id)| id.clone())
                .unwrap()
        };
        assert!(store
            .clear_checkpoint(&id_of(RecordKind::Checkpoint))
            .await
            .unwrap());
        store
            .upsert_contact(&id_of(RecordKind::Contact), "changed".into())
            .await
            .unwrap();
        let (user, ns, key) = before.user_data.keys().next().unwrap();
        assert!(store.delete_user_data(user, ns, key).await.unwrap());

        let legacy_before = single.raw_dump(&prefix);
        let cluster_before = host.raw_dump(&prefix);
        let mut rollback = RollbackOptions::new(prefix.as_str());
        rollback.dry_run = true;
        let dry = rollback_to_legacy_layout(&cluster, &legacy, &rollback, &mut |_| {})
            .await
            .unwrap();
        assert!(dry.dry_run);
        assert_eq!(dry.marker, MarkerOutcome::Kept);
        assert!(
            single.raw_dump(&prefix) == legacy_before,
            "seed {seed}: the legacy target changed"
        );
        assert!(
            host.raw_dump(&prefix) == cluster_before,
            "seed {seed}: the source changed"
        );
        let pruned: u64 = dry.namespaces.values().map(|c| c.pruned).sum();
        assert!(pruned >= 3, "seed {seed}: {dry:#?}");

        rollback.dry_run = false;
        let real = rollback_to_legacy_layout(&cluster, &legacy, &rollback, &mut |_| {})
            .await
            .unwrap();
        assert_eq!(
            predicted(&dry),
            predicted(&real),
            "seed {seed}: dry {dry:#?}\nreal {real:#?}"
        );
        if !in_place {
            // In place the real run's prune goes first and deletes legacy keys under the same
            // prefix before the copy pass scans it; the dry run deletes nothing.
            assert_eq!(dry.scanned, real.scanned);
        }
    }
}

async fn rollback_in_place<R: Runtime>() {
    rollback::<R>(Node::shared_single(), true).await;
}

async fn rollback_from_the_cluster<R: Runtime>() {
    rollback::<R>(Node::shared_cluster(), false).await;
}

/// Writes two pairs of messages that land on one target item each: the log and the drain of
/// chat `c` naming the same id (one cluster item, one legacy item), and the legacy collision's
/// two chats sharing `p:msg:s:x:y` (two cluster items, one legacy item).
fn write_two_messages_on_one_item(node: Node<'_>, prefix: &str) {
    let ks = Keyspace::new(Layout::Legacy, prefix).unwrap();
    node.run(&[
        Cmd::new("ZADD", ks.message_log("c").as_bytes())
            .arg("1")
            .arg("m"),
        Cmd::new("ZADD", ks.message_drain("c").as_bytes())
            .arg("1")
            .arg("m"),
        Cmd::new("SET", ks.message_item("c", "m").as_bytes()).arg("v"),
        Cmd::new("ZADD", ks.message_log("s").as_bytes())
            .arg("2")
            .arg("x:y"),
        Cmd::new("ZADD", ks.message_log("s:x").as_bytes())
            .arg("3")
            .arg("y"),
        Cmd::new("SET", ks.message_item("s", "x:y").as_bytes()).arg("shared"),
    ]);
}

/// Two messages on one item (an id in a chat's log and its drain): the dry run counts what the
/// real run does, whichever message the run meets first (the drain's adds only its member).
async fn forward_two_messages_on_one_item<R: Runtime>() {
    let node = Node::shared_single();
    let client = node.client::<R>().await;
    let prefix = unique_prefix("mig-dry-one-item");
    write_two_messages_on_one_item(node, &prefix);
    let mut options = MigrateOptions::new(prefix.as_str());
    options.dry_run = true;
    let dry = migrate_to_cluster_layout(&client, &client, &options, &mut |_| {})
        .await
        .unwrap();
    options.dry_run = false;
    let real = migrate_to_cluster_layout(&client, &client, &options, &mut |_| {})
        .await
        .unwrap();
    assert_eq!(
        predicted(&dry),
        predicted(&real),
        "dry {dry:#?}\nreal {real:#?}"
    );
}

/// Two messages on one legacy item (a shared item, equal values): the dry rollback counts what
/// the real one does (the longer chat id's message adds only its member and counts as shared).
async fn rollback_two_messages_on_one_item<R: Runtime>() {
    let node = Node::shared_single();
    let client = node.client::<R>().await;
    let prefix = unique_prefix("mig-dry-one-item");
    write_two_messages_on_one_item(node, &prefix);
    let options = MigrateOptions::new(prefix.as_str());
    migrate_to_cluster_layout(&client, &client, &options, &mut |_| {})
        .await
        .unwrap();
    // The bots ran on the cluster layout: the rollback into another prefix copies from them.
    node.start_bots::<R>(Layout::Cluster, &prefix)
        .await
        .unwrap();
    let mut rollback = RollbackOptions::new(prefix.as_str());
    rollback.target_prefix = Some(unique_prefix("mig-dry-one-item-back"));
    rollback.dry_run = true;
    let dry = rollback_to_legacy_layout(&client, &client, &rollback, &mut |_| {})
        .await
        .unwrap();
    rollback.dry_run = false;
    let real = rollback_to_legacy_layout(&client, &client, &rollback, &mut |_| {})
        .await
        .unwrap();
    assert_eq!(
        predicted(&dry),
        predicted(&real),
        "dry {dry:#?}\nreal {real:#?}"
    );
}

both_drivers!(
    forward_two_messages_on_one_item,
    rollback_two_messages_on_one_item,
    forward_in_place,
    forward_into_the_cluster,
    rollback_in_place,
    rollback_from_the_cluster
);
