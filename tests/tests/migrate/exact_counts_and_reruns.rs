//! Cases a review of the migration found: orphans miscounted while `delete_source` deletes
//! messages under a prefetched page, a rollback rerun after an incomplete `delete_source`, and
//! a dangling member taken for a clash.

use botmesh_redis_core::keys::RecordKind;
use botmesh_redis_core::migrate::{
    migrate_to_cluster_layout, rollback_to_legacy_layout, MarkerOutcome, MigrateOptions, Namespace,
    RollbackOptions,
};
use botmesh_redis_core::{Keyspace, Layout};
use botmesh_redis_tests::conformance::Runtime;
use botmesh_redis_tests::keyspace::{digest, Cmd, Node};
use botmesh_redis_tests::{both_drivers, unique_prefix};

/// Items the next `SCAN` page returns after `delete_source` dropped them with their member are
/// no orphans: the dry run and the real run report none, and the same messages.
async fn no_orphans_from_dropped_messages<R: Runtime>() {
    let node = Node::shared_single();
    let client = node.client::<R>().await;
    let prefix = unique_prefix("mig-rv-orph");
    let ks = Keyspace::new(Layout::Legacy, prefix.as_str()).unwrap();
    let mut cmds = Vec::new();
    for c in 0..20 {
        let chat = format!("c{c}");
        for i in 0..30 {
            let id = format!("m{i}");
            cmds.push(
                Cmd::new("ZADD", ks.message_log(&chat).as_bytes())
                    .arg(i.to_string())
                    .arg(&id),
            );
            cmds.push(Cmd::new("SET", ks.message_item(&chat, &id).as_bytes()).arg("v"));
        }
    }
    node.run(&cmds);
    let mut options = MigrateOptions::new(prefix.as_str());
    // Small pages: many items are scanned after their log was copied and dropped.
    options.scan_count = 10;
    options.dry_run = true;
    let dry = migrate_to_cluster_layout(&client, &client, &options, &mut |_| {})
        .await
        .unwrap();
    options.dry_run = false;
    options.delete_source = true;
    let real = migrate_to_cluster_layout(&client, &client, &options, &mut |_| {})
        .await
        .unwrap();
    assert_eq!((dry.orphans, real.orphans), (0, 0), "{real:#?}");
    let messages = |r: &botmesh_redis_core::migrate::MigrationReport| {
        r.namespaces.get(&Namespace::Messages).map(|c| c.copied)
    };
    assert_eq!((messages(&dry), messages(&real)), (Some(600), Some(600)));
    // The cleanup deletes each message's item and then each chat's log.
    assert_eq!(real.source_deleted, 600 + 20);
}

/// A rollback with `delete_source` that cannot copy everything (a datum the legacy layout
/// cannot hold) deletes nothing and keeps the source's marker, so a mirroring rerun after the
/// operator fixed the datum restores everything, loses nothing, and only then takes the source
/// apart.
async fn rerun_after_an_incomplete_delete<R: Runtime>() {
    let node = Node::shared_single();
    let client = node.client::<R>().await;
    let legacy = unique_prefix("mig-rv-src");
    let cluster = unique_prefix("mig-rv-cl");
    let back = unique_prefix("mig-rv-back");
    let lks = Keyspace::new(Layout::Legacy, legacy.as_str()).unwrap();
    let cks = Keyspace::new(Layout::Cluster, cluster.as_str()).unwrap();
    node.run(&[
        Cmd::new("SET", lks.record(RecordKind::Chat, "x").as_bytes()).arg("chat-x"),
        Cmd::new("ZADD", lks.message_log("c").as_bytes())
            .arg("1")
            .arg("m"),
        Cmd::new("SET", lks.message_item("c", "m").as_bytes()).arg("hello"),
    ]);
    let mut forward = MigrateOptions::new(legacy.as_str());
    forward.target_prefix = Some(cluster.clone());
    let migrated = migrate_to_cluster_layout(&client, &client, &forward, &mut |_| {})
        .await
        .unwrap();
    assert_eq!(migrated.marker, MarkerOutcome::Written);
    // The bots ran on the cluster layout: the rollback into another prefix copies from them.
    node.start_bots::<R>(Layout::Cluster, &cluster)
        .await
        .unwrap();
    // One datum the legacy layout cannot hold.
    let bad = cks.user_entry("a:b", "n", "k");
    node.run(&[Cmd::new("SET", bad.as_bytes()).arg("u")]);
    let mut rollback = RollbackOptions::new(cluster.as_str());
    rollback.target_prefix = Some(back.clone());
    rollback.delete_source = true;
    let first = rollback_to_legacy_layout(&client, &client, &rollback, &mut |_| {})
        .await
        .unwrap();
    assert_eq!(
        (first.unrepresentable, &first.marker, first.source_deleted),
        (1, &MarkerOutcome::Kept, 0),
        "{first:#?}"
    );
    let restored = digest(node, Layout::Legacy, &back);
    assert_eq!(restored.records.len(), 1, "{restored:#?}");
    assert_eq!(restored.messages.len(), 1, "{restored:#?}");

    node.run(&[Cmd::new("DEL", bad.as_bytes())]);
    let second = rollback_to_legacy_layout(&client, &client, &rollback, &mut |_| {})
        .await
        .unwrap();
    assert_eq!(second.unrepresentable, 0, "{second:#?}");
    assert!(second.source_deleted > 0, "{second:#?}");
    assert_eq!(
        restored.diff(&digest(node, Layout::Legacy, &back)),
        Vec::<String>::new(),
        "the rerun lost legacy data"
    );
    // Only the cluster side's lifecycle record is left, marked deleted.
    assert_eq!(
        node.keys(&cluster).into_iter().collect::<Vec<_>>(),
        vec![cks.lifecycle().as_bytes().to_vec()],
        "cluster-layout keys left after a complete rollback with delete_source"
    );
}

/// A dangling member of chat `a` (`b:c`, no item) writes no legacy item, so chat `a:b`'s
/// message `c`, on the same legacy item name, is no clash.
async fn a_dangling_member_is_no_clash<R: Runtime>() {
    let node = Node::shared_single();
    let client = node.client::<R>().await;
    let cluster = unique_prefix("mig-rv-dcl");
    let back = unique_prefix("mig-rv-dback");
    let cks = Keyspace::new(Layout::Cluster, cluster.as_str()).unwrap();
    let lks = Keyspace::new(Layout::Legacy, back.as_str()).unwrap();
    node.run(&[
        Cmd::new("ZADD", cks.message_log("a").as_bytes())
            .arg("1")
            .arg("b:c"),
        Cmd::new("ZADD", cks.message_log("a:b").as_bytes())
            .arg("2")
            .arg("c"),
        Cmd::new("SET", cks.message_item("a:b", "c").as_bytes()).arg("real"),
        Cmd::new("SET", cks.marker().as_bytes()).arg("cluster:v1"),
    ]);
    let mut rollback = RollbackOptions::new(cluster.as_str());
    rollback.target_prefix = Some(back.clone());
    let report = rollback_to_legacy_layout(&client, &client, &rollback, &mut |_| {})
        .await
        .unwrap();
    assert_eq!(
        (report.unrepresentable, report.dangling),
        (0, 1),
        "{report:#?}"
    );
    let restored = digest(node, Layout::Legacy, &back);
    let chat = &restored.messages["a:b"];
    assert_eq!(chat.len(), 1, "{restored:#?}");
    let item = node.call(&Cmd::new("GET", lks.message_item("a:b", "c").as_bytes()));
    assert_eq!(item.as_bytes(), Some(&b"real"[..]));
}

both_drivers!(
    no_orphans_from_dropped_messages,
    rerun_after_an_incomplete_delete,
    a_dangling_member_is_no_clash
);
