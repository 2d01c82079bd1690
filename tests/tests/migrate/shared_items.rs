//! The legacy layout's historical collision: chat `s` with message `x:y` and chat `s:x` with
//! message `y` share one item key, `p:msg:s:x:y`. The forward migration copies that item to
//! both chats, and a rollback writes it back once. Neither `delete_source` nor a mirroring
//! rollback may lose the message of the other chat.

use botmesh_redis_core::migrate::{
    migrate_to_cluster_layout, rollback_to_legacy_layout, MarkerOutcome, MigrateOptions,
    RollbackOptions,
};
use botmesh_redis_core::{Keyspace, Layout};
use botmesh_redis_tests::conformance::Runtime;
use botmesh_redis_tests::keyspace::{assert_same_data, digest, Cmd, Msg, Node};
use botmesh_redis_tests::{both_drivers, unique_prefix};

/// More than one page of a log (the migration reads logs 1000 members at a time).
const LONG_LOG: usize = 1001;

/// Writes chat `s` (one message, `x:y`) and chat `s:x` (`LONG_LOG` messages, `y` last, so it
/// is on the log's second page), both naming the shared item `p:msg:s:x:y`.
fn write_collision(node: Node<'_>, ks: &Keyspace) {
    let mut commands = vec![
        Cmd::new("ZADD", ks.message_log("s").as_bytes())
            .arg("1")
            .arg("x:y"),
        Cmd::new("SET", ks.message_item("s", "x:y").as_bytes()).arg("shared"),
    ];
    for i in 0..LONG_LOG - 1 {
        let id = format!("m{i:04}");
        commands.push(
            Cmd::new("ZADD", ks.message_log("s:x").as_bytes())
                .arg(i.to_string())
                .arg(&id),
        );
        commands.push(Cmd::new("SET", ks.message_item("s:x", &id).as_bytes()).arg("v"));
    }
    commands.push(
        Cmd::new("ZADD", ks.message_log("s:x").as_bytes())
            .arg("999999")
            .arg("y"),
    );
    node.run(&commands);
}

fn shared(id: &str, score: &str) -> Msg {
    Msg {
        id: id.into(),
        score: score.into(),
        value: botmesh_redis_tests::keyspace::Blob(b"shared".to_vec()),
    }
}

/// Forward, copy only: both chats get the shared item, and the report says so.
async fn copied_to_both_chats<R: Runtime>() {
    let node = Node::shared_single();
    let client = node.client::<R>().await;
    let prefix = unique_prefix("mig-shared-copy");
    let ks = Keyspace::new(Layout::Legacy, prefix.as_str()).unwrap();
    write_collision(node, &ks);
    let before = digest(node, Layout::Legacy, &prefix);
    let report = migrate_to_cluster_layout(
        &client,
        &client,
        &MigrateOptions::new(prefix.as_str()),
        &mut |_| {},
    )
    .await
    .unwrap();
    assert_eq!(
        (report.shared_items, report.dangling, report.orphans),
        (1, 0, 0),
        "{report:#?}"
    );
    let after = digest(node, Layout::Cluster, &prefix);
    assert_same_data("cluster copy", &before, &after);
    assert_eq!(after.messages["s"], vec![shared("x:y", "1")]);
    assert_eq!(after.messages["s:x"].last(), Some(&shared("y", "999999")));
}

/// Forward with `delete_source`: the first chat copied drops the shared item with its member;
/// the other chat must still find it (or have read it first), never count it dangling.
async fn delete_source_keeps_both_messages<R: Runtime>() {
    let node = Node::shared_single();
    let client = node.client::<R>().await;
    let prefix = unique_prefix("mig-shared-del");
    let ks = Keyspace::new(Layout::Legacy, prefix.as_str()).unwrap();
    write_collision(node, &ks);
    let before = digest(node, Layout::Legacy, &prefix);
    let mut options = MigrateOptions::new(prefix.as_str());
    options.delete_source = true;
    let report = migrate_to_cluster_layout(&client, &client, &options, &mut |_| {})
        .await
        .unwrap();
    let after = digest(node, Layout::Cluster, &prefix);
    assert_same_data("cluster copy after delete_source", &before, &after);
    assert_eq!(report.dangling, 0, "{report:#?}");
    assert_eq!(report.marker, MarkerOutcome::Written);
    let left = digest(node, Layout::Legacy, &prefix);
    assert!(
        left.is_empty() && !left.excluded.contains_key("dangling"),
        "legacy data left behind: {left:#?}"
    );
}

/// A mirroring rollback after chat `s` was deleted in the cluster layout: the legacy item
/// `p:msg:s:x:y` is still chat `s:x`'s message `y`, which the source holds.
async fn mirror_prune_keeps_the_other_chats_message<R: Runtime>() {
    let node = Node::shared_single();
    let client = node.client::<R>().await;
    let prefix = unique_prefix("mig-shared-prune");
    let legacy = Keyspace::new(Layout::Legacy, prefix.as_str()).unwrap();
    let cluster = Keyspace::new(Layout::Cluster, prefix.as_str()).unwrap();
    write_collision(node, &legacy);
    migrate_to_cluster_layout(
        &client,
        &client,
        &MigrateOptions::new(prefix.as_str()),
        &mut |_| {},
    )
    .await
    .unwrap();
    // Chat `s` deleted in the cluster layout (as `delete_chat` leaves it: no log, no item).
    node.run(&[
        Cmd::new("DEL", cluster.message_log("s").as_bytes()),
        Cmd::new("DEL", cluster.message_item("s", "x:y").as_bytes()),
    ]);
    let source = digest(node, Layout::Cluster, &prefix);
    assert!(!source.messages.contains_key("s"));
    let report = rollback_to_legacy_layout(
        &client,
        &client,
        &RollbackOptions::new(prefix.as_str()),
        &mut |_| {},
    )
    .await
    .unwrap();
    let back = digest(node, Layout::Legacy, &prefix);
    assert_same_data("legacy after the mirror", &source, &back);
    assert_eq!(back.excluded.get("dangling"), None, "{report:#?}");
}

both_drivers!(
    copied_to_both_chats,
    delete_source_keeps_both_messages,
    mirror_prune_keeps_the_other_chats_message
);
