//! A mirroring rollback (the default) onto legacy data that was never migrated: the legacy keys
//! are the only copy, so the rollback must keep them (or refuse), whether the migration never
//! ran on the prefix or `include` limited it (the marker never written, the start guard still
//! armed).

use botmesh_redis_core::migrate::{
    migrate_to_cluster_layout, rollback_to_legacy_layout, MarkerOutcome, MigrateOptions,
    MigrationReport, Namespace, RollbackOptions,
};
use botmesh_redis_core::{Error, Layout};
use botmesh_redis_tests::conformance::{Client, Runtime};
use botmesh_redis_tests::keyspace::{assert_same_data, digest, write_generated, Node};
use botmesh_redis_tests::{both_drivers, unique_prefix};

/// Rolls `prefix` back in place with the defaults; a refusal is as good as keeping the data.
async fn roll_back<R: Runtime>(client: &Client<R>, prefix: &str) -> String {
    let result =
        rollback_to_legacy_layout(client, client, &RollbackOptions::new(prefix), &mut |_| {}).await;
    match result {
        Ok(report) => format!("{:#?}", pruned(&report)),
        Err(Error::Refused(refusal)) => format!("refused: {refusal}"),
        Err(other) => panic!("the rollback failed: {other}"),
    }
}

fn pruned(report: &MigrationReport) -> Vec<(Namespace, u64)> {
    report
        .namespaces
        .iter()
        .filter(|(_, c)| c.pruned > 0)
        .map(|(ns, c)| (*ns, c.pruned))
        .collect()
}

async fn never_migrated<R: Runtime>() {
    let node = Node::shared_single();
    let client = node.client::<R>().await;
    let prefix = unique_prefix("mig-never");
    write_generated(node, &prefix, 81, 1);
    let before = digest(node, Layout::Legacy, &prefix);
    let outcome = roll_back(&client, &prefix).await;
    assert_same_data(
        &format!("after a rollback of a prefix never migrated (pruned: {outcome})"),
        &before,
        &digest(node, Layout::Legacy, &prefix),
    );
}

async fn limited_by_include<R: Runtime>() {
    let node = Node::shared_single();
    let client = node.client::<R>().await;
    let prefix = unique_prefix("mig-partial-rb");
    write_generated(node, &prefix, 82, 1);
    let before = digest(node, Layout::Legacy, &prefix);
    let mut options = MigrateOptions::new(prefix.as_str());
    options.include = Some(vec![Namespace::Chats]);
    let report = migrate_to_cluster_layout(&client, &client, &options, &mut |_| {})
        .await
        .unwrap();
    assert_eq!(report.marker, MarkerOutcome::NotWrittenPartial);
    let outcome = roll_back(&client, &prefix).await;
    assert_same_data(
        &format!("after a rollback of a migration limited to chats (pruned: {outcome})"),
        &before,
        &digest(node, Layout::Legacy, &prefix),
    );
}

both_drivers!(never_migrated, limited_by_include);
