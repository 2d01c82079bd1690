//! A reshard while the migration copies: a slot that moves between the passes over the masters
//! (here, of the target, during the copy) may leave keys unvisited, uncopied or stale copies
//! unpruned. The step stops with `SlotsMoved`, as a cut one does, and its rerun, once the slots
//! hold still, copies exactly. Before, it completed, wrote the marker, and with
//! `delete_source` deleted a source it may not have copied whole.
//!
//! The test has a cluster of its own, whose slots it moves.

use std::sync::OnceLock;

use botmesh_redis_core::migrate::{migrate_to_cluster_layout, MarkerOutcome, MigrateOptions};
use botmesh_redis_core::{ClientOptions, Error, Layout};
use botmesh_redis_tests::conformance::{Client, Runtime};
use botmesh_redis_tests::keyspace::{assert_same_data, digest, write_generated, Node};
use botmesh_redis_tests::{both_drivers, unique_prefix, ClusterOptions, RedisCluster};

fn cluster() -> &'static RedisCluster {
    static CLUSTER: OnceLock<RedisCluster> = OnceLock::new();
    CLUSTER.get_or_init(|| RedisCluster::start(ClusterOptions::new()))
}

/// One driver at a time moves the cluster's slots.
static TURN: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

async fn a_reshard_during_the_copy_stops_the_step_and_its_rerun_copies_exactly<R: Runtime>() {
    let _turn = TURN.lock().await;
    let cluster = tokio::task::spawn_blocking(cluster).await.unwrap();
    let source = Node::shared_single();
    let src = source.client::<R>().await;
    let tgt = Client::<R>::connect(ClientOptions::cluster(cluster.seeds()))
        .await
        .unwrap();
    let prefix = unique_prefix("mig-reshard");
    write_generated(source, &prefix, 31, 1);
    let before = digest(source, Layout::Legacy, &prefix);
    let mut options = MigrateOptions::new(prefix.as_str());
    options.delete_source = true;

    // At the copy's first progress report, one slot of the target moves to another master.
    let slot = 0;
    let owner = cluster.master_for_slot(slot).unwrap();
    let to = cluster
        .masters()
        .unwrap()
        .into_iter()
        .find(|&m| m != owner)
        .unwrap();
    let mut moved = false;
    let error = migrate_to_cluster_layout(&src, &tgt, &options, &mut |p| {
        if p.phase == "copying" && !moved {
            moved = true;
            cluster.move_slot(slot, to).unwrap();
        }
    })
    .await
    .unwrap_err();
    assert!(moved);
    assert_eq!(error, Error::SlotsMoved { side: "target" });
    // Nothing of the source was deleted.
    assert_same_data(
        "the source after the stopped step",
        &before,
        &digest(source, Layout::Legacy, &prefix),
    );

    let report = migrate_to_cluster_layout(&src, &tgt, &options, &mut |_| {})
        .await
        .unwrap();
    assert_eq!(report.marker, MarkerOutcome::Written, "{report:#?}");
    let copy = digest(Node::Cluster(cluster), Layout::Cluster, &prefix);
    assert_same_data("the copy after the rerun", &before, &copy);
    copy.assert_indexes_agree();
}

both_drivers!(a_reshard_during_the_copy_stops_the_step_and_its_rerun_copies_exactly);
