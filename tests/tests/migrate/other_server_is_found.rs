//! Whether the two sides of a step are on other servers is found, not assumed:
//! `MigrateOptions::other_server`, `RollbackOptions::other_server` and
//! `CleanupOptions::other_server` are `None` by default, and then a cluster is always another
//! server than a single node, and two single nodes are one server exactly when they answer one
//! `run_id`. So a migration into the cluster or into another node copies the names both layouts
//! share (conversations, cursors, leases, durability tables) and checks the target for live
//! bots, a rollback and a cleanup of that side handle those names too, and one server reached
//! through two clients is found to be one. A setting that contradicts the servers is refused
//! (`Refusal::OtherServerMismatch`) before anything is written.

use std::collections::BTreeMap;
use std::fmt::Debug;

use botmesh_redis_core::keys::RecordKind;
use botmesh_redis_core::migrate::{
    delete_abandoned_side, migrate_to_cluster_layout, rollback_to_legacy_layout, CleanupOptions,
    Counts, MarkerOutcome, MigrateOptions, Namespace, Refusal, RollbackOptions,
};
use botmesh_redis_core::{Error, Key, Keyspace, Layout};
use botmesh_redis_tests::conformance::Runtime;
use botmesh_redis_tests::keyspace::{assert_same_data, digest, Cmd, Node, SHARED_NAMESPACES};
use botmesh_redis_tests::{both_drivers, unique_prefix};

fn copied(n: u64) -> Counts {
    Counts {
        copied: n,
        ..Counts::default()
    }
}

/// A chat record and one datum of each name both layouts share, in the layout of `ks`.
fn data(ks: &Keyspace) -> Vec<Cmd> {
    let set = |key: Key, value: &str| Cmd::new("SET", key.as_bytes()).arg(value);
    vec![
        set(ks.record(RecordKind::Chat, "c"), "chat record"),
        set(ks.conversation("c"), "dialogue state"),
        set(ks.cursor("updates"), "5"),
        Cmd::new("HSET", ks.lease("sender").as_bytes())
            .arg("token")
            .arg("3"),
        set(ks.durable("outbox", "seq").unwrap(), "9"),
    ]
}

fn get(node: Node<'_>, key: &Key) -> Option<Vec<u8>> {
    node.call(&Cmd::new("GET", key.as_bytes()))
        .as_bytes()
        .map(<[u8]>::to_vec)
}

/// Panics unless `result` is the refusal of a contradicting `other_server: Some(said)`.
fn mismatch<T: Debug>(result: Result<T, Error>, said: bool, what: &str) {
    match result {
        Err(Error::Refused(Refusal::OtherServerMismatch { said: s, .. })) if s == said => {}
        other => panic!("{what}: expected OtherServerMismatch {{ said: {said} }}, got {other:?}"),
    }
}

/// `other_server` is `None` in every step's options. With the defaults, a migration of a legacy prefix of the shared single node into the same
/// prefix on `host` (the cluster, or the other single node) checks `host` for live bots (a
/// heartbeat there refuses it, nothing written), then copies the shared names with the rest; a
/// rollback from there (after the bots ran and changed a dialogue and a cursor) brings the
/// changes back; a cleanup of the cluster side deletes its shared names too.
async fn found_by_default<R: Runtime>(host: Node<'static>) {
    assert_eq!(MigrateOptions::new("p").other_server, None);
    assert_eq!(RollbackOptions::new("p").other_server, None);
    assert_eq!(CleanupOptions::new("p", Layout::Legacy).other_server, None);
    let single = Node::shared_single();
    let legacy_client = single.client::<R>().await;
    let host_client = host.client::<R>().await;
    let prefix = unique_prefix("mig-other");
    let lks = Keyspace::new(Layout::Legacy, prefix.as_str()).unwrap();
    let cks = Keyspace::new(Layout::Cluster, prefix.as_str()).unwrap();
    single.run(&data(&lks));
    let heartbeat = cks.heartbeat("replica-1");
    host.run(&[Cmd::new("SET", heartbeat.as_bytes())
        .arg("1")
        .arg("PX")
        .arg("60000")]);
    let dumps = || (single.raw_dump(&prefix), host.raw_dump(&prefix));
    let before = dumps();
    let options = MigrateOptions::new(prefix.as_str());
    match migrate_to_cluster_layout(&legacy_client, &host_client, &options, &mut |_| {}).await {
        Err(Error::Refused(Refusal::Live {
            heartbeats: 1,
            tickets: 0,
            ..
        })) => {}
        other => panic!("expected the target's heartbeat to refuse the run, got {other:?}"),
    }
    assert_eq!(dumps(), before, "the refused run wrote");

    host.run(&[Cmd::new("DEL", heartbeat.as_bytes())]);
    let report = migrate_to_cluster_layout(&legacy_client, &host_client, &options, &mut |_| {})
        .await
        .unwrap();
    let mut wanted: BTreeMap<Namespace, Counts> = SHARED_NAMESPACES
        .into_iter()
        .map(|ns| (ns, copied(1)))
        .collect();
    wanted.insert(Namespace::Chats, copied(1));
    assert_eq!(report.namespaces, wanted, "{report:#?}");
    assert_eq!(report.not_copied, BTreeMap::new(), "{report:#?}");
    assert_eq!(report.marker, MarkerOutcome::Written, "{report:#?}");
    assert_same_data(
        "the copy",
        &digest(single, Layout::Legacy, &prefix),
        &digest(host, Layout::Cluster, &prefix),
    );

    // The bots run on `host` and move the dialogue and the cursor on.
    host.start_bots::<R>(Layout::Cluster, &prefix)
        .await
        .unwrap();
    host.run(&[
        Cmd::new("SET", cks.conversation("c").as_bytes()).arg("later state"),
        Cmd::new("SET", cks.cursor("updates").as_bytes()).arg("8"),
    ]);
    let back = rollback_to_legacy_layout(
        &host_client,
        &legacy_client,
        &RollbackOptions::new(prefix.as_str()),
        &mut |_| {},
    )
    .await
    .unwrap();
    assert_eq!(
        (
            back.namespaces
                .get(&Namespace::Conversations)
                .map(|c| c.overwritten),
            back.namespaces
                .get(&Namespace::Cursors)
                .map(|c| c.overwritten),
        ),
        (Some(1), Some(1)),
        "{back:#?}"
    );
    assert_eq!(
        get(single, &lks.conversation("c")).as_deref(),
        Some(&b"later state"[..])
    );
    assert_eq!(
        get(single, &lks.cursor("updates")).as_deref(),
        Some(&b"8"[..])
    );
    assert_same_data(
        "the rollback",
        &digest(host, Layout::Cluster, &prefix),
        &digest(single, Layout::Legacy, &prefix),
    );

    // The cluster side is abandoned: its cleanup deletes the shared names too (they are not the
    // legacy side's keys, which live on another server).
    let mut cleanup = CleanupOptions::new(prefix.as_str(), Layout::Cluster);
    cleanup.other_server = Some(false);
    let before = host.raw_dump(&prefix);
    mismatch(
        delete_abandoned_side(&host_client, &legacy_client, &cleanup, &mut |_| {}).await,
        false,
        "a cleanup told the other side is on its server",
    );
    assert_eq!(
        host.raw_dump(&prefix),
        before,
        "the refused cleanup deleted"
    );
    cleanup.other_server = None;
    let deleted = delete_abandoned_side(&host_client, &legacy_client, &cleanup, &mut |_| {})
        .await
        .unwrap();
    for ns in SHARED_NAMESPACES {
        assert_eq!(deleted.deleted.get(&ns), Some(&1), "{ns}: {deleted:#?}");
    }
    assert_eq!(deleted.shared_kept, 0, "{deleted:#?}");
    assert_eq!(
        host.keys(&prefix).into_iter().collect::<Vec<_>>(),
        vec![cks.lifecycle().as_bytes().to_vec()],
        "the cluster side is not gone"
    );
    single.delete_prefix(&prefix);
    host.delete_prefix(&prefix);
}

/// The shared single node through two clients is one server: an in-place migration leaves
/// the shared names alone (they are the legacy keys already), and a cleanup of the legacy side
/// keeps them.
async fn one_server_through_two_clients<R: Runtime>() {
    let node = Node::shared_single();
    let first = node.client::<R>().await;
    let second = node.client::<R>().await;
    let prefix = unique_prefix("mig-other-same");
    let lks = Keyspace::new(Layout::Legacy, prefix.as_str()).unwrap();
    node.run(&data(&lks));
    let report = migrate_to_cluster_layout(
        &first,
        &second,
        &MigrateOptions::new(prefix.as_str()),
        &mut |_| {},
    )
    .await
    .unwrap();
    assert_eq!(
        report.namespaces,
        [(Namespace::Chats, copied(1))].into_iter().collect(),
        "{report:#?}"
    );
    assert_eq!(
        report.not_copied,
        SHARED_NAMESPACES.into_iter().map(|ns| (ns, 1)).collect(),
        "{report:#?}"
    );
    let shared_before: Vec<Option<Vec<u8>>> = [lks.conversation("c"), lks.cursor("updates")]
        .iter()
        .map(|k| get(node, k))
        .collect();

    let cleaned = delete_abandoned_side(
        &first,
        &second,
        &CleanupOptions::new(prefix.as_str(), Layout::Legacy),
        &mut |_| {},
    )
    .await
    .unwrap();
    assert_eq!(
        (cleaned.shared_kept, cleaned.deleted.get(&Namespace::Chats)),
        (SHARED_NAMESPACES.len() as u64, Some(&1)),
        "{cleaned:#?}"
    );
    for ns in SHARED_NAMESPACES {
        assert_eq!(cleaned.deleted.get(&ns), None, "{ns}: {cleaned:#?}");
    }
    let shared_after: Vec<Option<Vec<u8>>> = [lks.conversation("c"), lks.cursor("updates")]
        .iter()
        .map(|k| get(node, k))
        .collect();
    assert_eq!(shared_after, shared_before);
    node.delete_prefix(&prefix);
}

/// `other_server` set against what the servers say: `Some(true)` in place, `Some(false)` into
/// the cluster or into the other single node, for a migration, a rollback and a cleanup, is
/// refused before anything is written, on either side.
async fn contradictions_are_refused<R: Runtime>() {
    let single = Node::shared_single();
    let cluster = Node::shared_cluster();
    let other = Node::other_single();
    let (on_single, on_cluster, on_other) = (
        single.client::<R>().await,
        cluster.client::<R>().await,
        other.client::<R>().await,
    );
    let prefix = unique_prefix("mig-other-no");
    let lks = Keyspace::new(Layout::Legacy, prefix.as_str()).unwrap();
    let cks = Keyspace::new(Layout::Cluster, prefix.as_str()).unwrap();
    single.run(&data(&lks));
    // A complete cluster-layout keyspace on the cluster, to roll back from and clean up.
    cluster.run(&data(&cks));
    cluster.run(&[Cmd::new("SET", cks.marker().as_bytes()).arg("cluster:v1")]);
    let dumps = || {
        (
            single.raw_dump(&prefix),
            cluster.raw_dump(&prefix),
            other.raw_dump(&prefix),
        )
    };
    let before = dumps();

    let mut migrate = MigrateOptions::new(prefix.as_str());
    migrate.other_server = Some(true);
    mismatch(
        migrate_to_cluster_layout(&on_single, &on_single, &migrate, &mut |_| {}).await,
        true,
        "migrate in place, other_server: Some(true)",
    );
    migrate.other_server = Some(false);
    mismatch(
        migrate_to_cluster_layout(&on_single, &on_cluster, &migrate, &mut |_| {}).await,
        false,
        "migrate into the cluster, other_server: Some(false)",
    );
    mismatch(
        migrate_to_cluster_layout(&on_single, &on_other, &migrate, &mut |_| {}).await,
        false,
        "migrate into the other node, other_server: Some(false)",
    );

    let mut rollback = RollbackOptions::new(prefix.as_str());
    rollback.other_server = Some(false);
    mismatch(
        rollback_to_legacy_layout(&on_cluster, &on_single, &rollback, &mut |_| {}).await,
        false,
        "rollback from the cluster, other_server: Some(false)",
    );
    rollback.other_server = Some(true);
    mismatch(
        rollback_to_legacy_layout(&on_single, &on_single, &rollback, &mut |_| {}).await,
        true,
        "rollback in place, other_server: Some(true)",
    );

    let mut cleanup = CleanupOptions::new(prefix.as_str(), Layout::Legacy);
    cleanup.other_server = Some(true);
    mismatch(
        delete_abandoned_side(&on_single, &on_single, &cleanup, &mut |_| {}).await,
        true,
        "cleanup in place, other_server: Some(true)",
    );
    let mut cleanup = CleanupOptions::new(prefix.as_str(), Layout::Cluster);
    cleanup.other_server = Some(false);
    mismatch(
        delete_abandoned_side(&on_cluster, &on_single, &cleanup, &mut |_| {}).await,
        false,
        "cleanup of the cluster side, other_server: Some(false)",
    );
    assert_eq!(dumps(), before, "a refused step wrote");
    single.delete_prefix(&prefix);
    cluster.delete_prefix(&prefix);
}

both_drivers!(found_by_default {
    found_by_default_into_the_cluster => Node::shared_cluster(),
    found_by_default_into_the_other_node => Node::other_single(),
});
both_drivers!(one_server_through_two_clients, contradictions_are_refused);
