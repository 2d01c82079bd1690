//! A rollback of data the legacy layout cannot hold: user data whose user id or namespace has a
//! `:`, and two messages whose legacy item keys collide with different values. They are counted
//! unrepresentable, named and not copied; everything else is restored, and the marker stays
//! (the rollback is incomplete, so a cluster-layout store still finds its keyspace).

use botmesh_redis_core::migrate::{rollback_to_legacy_layout, MarkerOutcome, RollbackOptions};
use botmesh_redis_core::Layout;
use botmesh_redis_core::{Store, StoreOptions};
use botmesh_redis_tests::conformance::Runtime;
use botmesh_redis_tests::keyspace::{digest, Node};
use botmesh_redis_tests::{both_drivers, unique_prefix};

async fn rollback<R: Runtime>(in_place: bool) {
    let node = Node::shared_single();
    let client = node.client::<R>().await;
    let prefix = unique_prefix("mig-unrep");
    let store = Store::new(
        client.clone(),
        StoreOptions::new(prefix.as_str()).layout(Layout::Cluster),
    )
    .unwrap();
    store.start().await.unwrap();
    store
        .set_user_data("a:b", "ns", "k", "colon user".into(), None)
        .await
        .unwrap();
    store
        .set_user_data("u", "n:s", "k", "colon namespace".into(), None)
        .await
        .unwrap();
    store
        .set_user_data("u", "ns", "k:ok", "fine".into(), None)
        .await
        .unwrap();
    store
        .save_message("s", "x:y", 1, "one".into())
        .await
        .unwrap();
    store
        .save_message("s:x", "y", 2, "two".into())
        .await
        .unwrap();
    store
        .save_message("c", "m", 3, "fine".into())
        .await
        .unwrap();

    let back = if in_place {
        prefix.clone()
    } else {
        unique_prefix("mig-unrep-back")
    };
    let mut options = RollbackOptions::new(prefix.as_str());
    options.target_prefix = Some(back.clone());
    let report = rollback_to_legacy_layout(&client, &client, &options, &mut |_| {})
        .await
        .unwrap();
    assert_eq!(report.unrepresentable, 4, "{report:#?}");
    assert_eq!(report.examples["unrepresentable"].len(), 4, "{report:#?}");
    assert_eq!(report.marker, MarkerOutcome::Kept, "{report:#?}");
    let restored = digest(node, Layout::Legacy, &back);
    assert_eq!(
        restored.user_data.keys().collect::<Vec<_>>(),
        vec![&("u".to_owned(), "ns".to_owned(), "k:ok".to_owned())]
    );
    assert_eq!(
        restored.messages.keys().collect::<Vec<_>>(),
        vec!["c"],
        "neither colliding message is written: {restored:#?}"
    );
    assert_eq!(
        digest(node, Layout::Cluster, &prefix).marker.as_deref(),
        Some("cluster:v1"),
        "the source keeps its marker"
    );
}

async fn into_another_prefix<R: Runtime>() {
    rollback::<R>(false).await;
}

async fn in_place<R: Runtime>() {
    rollback::<R>(true).await;
}

both_drivers!(into_another_prefix, in_place);
