//! Refusals before anything is written: an in-place migration of a braced prefix (which the
//! cluster layout cannot hold), a legacy source that is a cluster, a rollback into a cluster,
//! a target marker of an unknown layout. A braced legacy prefix migrates to a new prefix.

use botmesh_redis_core::keys::RecordKind;
use botmesh_redis_core::migrate::{
    migrate_to_cluster_layout, rollback_to_legacy_layout, MarkerOutcome, MigrateOptions,
    MigrationReport, Refusal, RollbackOptions,
};
use botmesh_redis_core::{Error, Keyspace, Layout};
use botmesh_redis_tests::conformance::Runtime;
use botmesh_redis_tests::keyspace::{assert_same_data, digest, Cmd, Node};
use botmesh_redis_tests::{both_drivers, unique_prefix};

fn refusal(result: Result<MigrationReport, Error>) -> Refusal {
    match result {
        Err(Error::Refused(refusal)) => refusal,
        other => panic!("not refused: {other:?}"),
    }
}

fn some_data(ks: &Keyspace) -> Vec<Cmd> {
    vec![
        Cmd::new("SET", ks.record(RecordKind::Chat, "c").as_bytes()).arg("v"),
        Cmd::new("ZADD", ks.message_log("c").as_bytes())
            .arg("1")
            .arg("m"),
        Cmd::new("SET", ks.message_item("c", "m").as_bytes()).arg("hello"),
        Cmd::new("SET", ks.lock_fence("f").as_bytes()).arg("4"),
    ]
}

async fn braced_prefix<R: Runtime>() {
    let node = Node::shared_single();
    let client = node.client::<R>().await;
    let prefix = format!("{}{{b}}", unique_prefix("mig-brace"));
    let ks = Keyspace::new(Layout::Legacy, prefix.as_str()).unwrap();
    node.run(&some_data(&ks));
    let before = node.raw_dump(&prefix);
    let result = migrate_to_cluster_layout(
        &client,
        &client,
        &MigrateOptions::new(prefix.as_str()),
        &mut |_| {},
    )
    .await;
    assert_eq!(
        refusal(result),
        Refusal::BracedPrefixInPlace {
            prefix: prefix.clone()
        }
    );
    assert!(node.raw_dump(&prefix) == before, "the source changed");

    let target = unique_prefix("mig-brace-new");
    let mut options = MigrateOptions::new(prefix.as_str());
    options.target_prefix = Some(target.clone());
    let report = migrate_to_cluster_layout(&client, &client, &options, &mut |_| {})
        .await
        .unwrap();
    assert_eq!(report.marker, MarkerOutcome::Written);
    assert_same_data(
        "a braced prefix into a new one",
        &digest(node, Layout::Legacy, &prefix),
        &digest(node, Layout::Cluster, &target),
    );
}

async fn wrong_kinds_of_server<R: Runtime>() {
    let single = Node::shared_single();
    let cluster = Node::shared_cluster();
    let single_client = single.client::<R>().await;
    let cluster_client = cluster.client::<R>().await;
    let prefix = unique_prefix("mig-kinds");
    let options = MigrateOptions::new(prefix.as_str());
    let result =
        migrate_to_cluster_layout(&cluster_client, &single_client, &options, &mut |_| {}).await;
    assert_eq!(refusal(result), Refusal::SourceIsCluster);
    let rollback = RollbackOptions::new(prefix.as_str());
    let result =
        rollback_to_legacy_layout(&single_client, &cluster_client, &rollback, &mut |_| {}).await;
    assert_eq!(refusal(result), Refusal::TargetIsCluster);
}

async fn foreign_marker<R: Runtime>() {
    let single = Node::shared_single();
    let cluster = Node::shared_cluster();
    let source = single.client::<R>().await;
    let target = cluster.client::<R>().await;
    let prefix = unique_prefix("mig-foreign");
    let legacy = Keyspace::new(Layout::Legacy, prefix.as_str()).unwrap();
    single.run(&some_data(&legacy));
    let marker = legacy.marker();
    cluster.run(&[Cmd::new("SET", marker.as_bytes()).arg("cluster:v9")]);
    let before = cluster.raw_dump(&prefix);
    let options = MigrateOptions::new(prefix.as_str());
    let result = migrate_to_cluster_layout(&source, &target, &options, &mut |_| {}).await;
    assert_eq!(
        refusal(result),
        Refusal::ForeignMarker {
            key: marker.to_string(),
            value: "cluster:v9".into()
        }
    );
    assert!(cluster.raw_dump(&prefix) == before, "the target changed");
}

both_drivers!(braced_prefix, wrong_kinds_of_server, foreign_marker);
