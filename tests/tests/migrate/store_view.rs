//! What a bot sees through the store after a migration: data written by a legacy-layout store
//! reads back the same through a cluster-layout store, in place on one node and into a
//! cluster, on both drivers; and back again after a rollback.

use std::time::Duration;

use botmesh_redis_core::migrate::lifecycle::Unsafe;
use botmesh_redis_core::migrate::{
    migrate_to_cluster_layout, rollback_to_legacy_layout, MarkerOutcome, MigrateOptions, Refusal,
    RollbackOptions,
};
use botmesh_redis_core::{Coordinator, Schedules};
use botmesh_redis_core::{Error, Executor, Layout};
use botmesh_redis_core::{Limit, Store};
use botmesh_redis_tests::conformance::Runtime;
use botmesh_redis_tests::store::{store_on, Setup};
use botmesh_redis_tests::{both_drivers, unique_prefix};

/// Writes one datum of every namespace through a store of `store`'s layout.
async fn write_everything<E: Executor>(store: &Store<E>) {
    store
        .save_message("chat-1", "m1", 10, "hello".into())
        .await
        .unwrap();
    store
        .save_message("chat-1", "m2", 20, "world".into())
        .await
        .unwrap();
    store
        .save_message("a:b", "c", 30, "colon chat".into())
        .await
        .unwrap();
    store
        .upsert_chat("chat-1", "chat record".into())
        .await
        .unwrap();
    store
        .upsert_contact("u1", "contact record".into())
        .await
        .unwrap();
    store
        .set_checkpoint("cp", "offset".into(), Some(Duration::from_secs(600)))
        .await
        .unwrap();
    store
        .set_user_data("u1", "prefs", "lang:x", "pt".into(), None)
        .await
        .unwrap();
    store.set_cursor("feed", 42).await.unwrap();
    store
        .set_conversation("chat-1", "state".into(), None)
        .await
        .unwrap();
    let coordinator =
        Coordinator::new(store.executor().clone(), store.keyspace().clone(), "r1").unwrap();
    assert_eq!(
        coordinator
            .lock("job", "o", Duration::from_millis(50))
            .await
            .unwrap(),
        Some(1)
    );
    assert_eq!(
        coordinator
            .campaign("leader", Duration::from_millis(50))
            .await
            .unwrap(),
        Some(1)
    );
    let schedules = Schedules::new(store.executor().clone(), store.keyspace().clone()).unwrap();
    schedules
        .put("s1", 7, "h", "every day".into())
        .await
        .unwrap();
    schedules.put("s2", 9, "h", "gone".into()).await.unwrap();
    schedules.delete("s2", 9, "h").await.unwrap();
}

/// Reads every datum back through `store` and checks it.
async fn read_everything<E: Executor>(store: &Store<E>) {
    let page = store
        .list_messages("chat-1", .., None, Limit::of::<10>())
        .await
        .unwrap();
    let got: Vec<(String, i64, Vec<u8>)> = page
        .items
        .iter()
        .map(|m| (m.id.clone(), m.time_ms, m.payload.to_vec()))
        .collect();
    assert_eq!(
        got,
        vec![
            ("m1".to_owned(), 10, b"hello".to_vec()),
            ("m2".to_owned(), 20, b"world".to_vec())
        ]
    );
    let colon = store.get_message("a:b", "c").await.unwrap().unwrap();
    assert_eq!(colon.payload.as_ref(), b"colon chat");
    assert_eq!(
        store.get_chat("chat-1").await.unwrap().as_deref(),
        Some(&b"chat record"[..])
    );
    let chats = store.list_chats(None, Limit::of::<10>()).await.unwrap();
    assert_eq!(chats.items.len(), 1);
    assert_eq!(
        store.get_contact("u1").await.unwrap().as_deref(),
        Some(&b"contact record"[..])
    );
    assert_eq!(
        store.get_checkpoint("cp").await.unwrap().as_deref(),
        Some(&b"offset"[..])
    );
    assert_eq!(
        store
            .get_user_data("u1", "prefs", "lang:x")
            .await
            .unwrap()
            .as_deref(),
        Some(&b"pt"[..])
    );
    assert_eq!(
        store
            .list_user_data("u1", None, None, Limit::MAX)
            .await
            .unwrap()
            .items
            .len(),
        1
    );
    assert_eq!(store.get_cursor("feed").await.unwrap(), Some(42));
    assert_eq!(
        store.get_conversation("chat-1").await.unwrap().as_deref(),
        Some(&b"state"[..])
    );
    let coordinator =
        Coordinator::new(store.executor().clone(), store.keyspace().clone(), "r2").unwrap();
    // The fence and the term were raised, never lowered: the next grant is above the old one.
    let fence = coordinator
        .lock("job", "o2", Duration::from_secs(5))
        .await
        .unwrap()
        .unwrap();
    assert!(fence >= 2, "fence {fence}");
    let schedules = Schedules::new(store.executor().clone(), store.keyspace().clone()).unwrap();
    let s1 = schedules.get("s1").await.unwrap().unwrap();
    assert_eq!(s1.data.as_ref(), b"every day");
    // The deleted marker kept its token: a stale put with a lower token is refused.
    assert!(schedules.put("s2", 8, "h", "stale".into()).await.is_err());
}

async fn in_place_on_one_node<R: Runtime>() {
    let client = Setup::SingleLegacy.client::<R>().await;
    let prefix = unique_prefix("mig-view");
    let legacy = store_on(client.clone(), Layout::Legacy, &prefix);
    legacy.start().await.unwrap();
    // The holders the bots left (50 ms TTLs) are not copied: the next grant at the target does
    // not wait for them, and its fence is above theirs.
    write_everything(&legacy).await;

    let options = MigrateOptions::new(prefix.as_str());
    let report = migrate_to_cluster_layout(&client, &client, &options, &mut |_| {})
        .await
        .unwrap();
    assert_eq!(report.marker, MarkerOutcome::Written, "{report:#?}");
    assert_eq!(report.unknown, 0, "{report:#?}");
    assert_eq!(report.unreadable, 0, "{report:#?}");

    // Run again before any bot starts on the copy: it is the same copy, and everything is
    // kept.
    let again = migrate_to_cluster_layout(&client, &client, &options, &mut |_| {})
        .await
        .unwrap();
    assert_eq!(again.marker, MarkerOutcome::AlreadySet);
    assert!(
        again
            .namespaces
            .values()
            .all(|c| c.copied + c.overwritten + c.pruned == 0),
        "{again:#?}"
    );

    let cluster = store_on(client.clone(), Layout::Cluster, &prefix);
    cluster.start().await.unwrap();
    read_everything(&cluster).await;

    // Once the bots started on the copy, a copy into it is refused: it would bring back what
    // they delete.
    let refused = migrate_to_cluster_layout(&client, &client, &options, &mut |_| {}).await;
    assert!(
        matches!(
            refused,
            Err(Error::Refused(Refusal::Lifecycle {
                reason: Unsafe::TargetLive,
                ..
            }))
        ),
        "{refused:?}"
    );
}

async fn into_the_cluster_and_back<R: Runtime>() {
    let single = Setup::SingleLegacy.client::<R>().await;
    let cluster_client = Setup::Cluster.client::<R>().await;
    let prefix = unique_prefix("mig-view-c");
    let legacy = store_on(single.clone(), Layout::Legacy, &prefix);
    legacy.start().await.unwrap();
    write_everything(&legacy).await;

    let options = MigrateOptions::new(prefix.as_str());
    let report = migrate_to_cluster_layout(&single, &cluster_client, &options, &mut |_| {})
        .await
        .unwrap();
    assert_eq!(report.marker, MarkerOutcome::Written, "{report:#?}");
    let on_cluster = store_on(cluster_client.clone(), Layout::Cluster, &prefix);
    on_cluster.start().await.unwrap();
    read_everything(&on_cluster).await;

    // Back into a fresh legacy prefix on the single node.
    let back = unique_prefix("mig-view-back");
    let mut rollback = RollbackOptions::new(prefix.as_str());
    rollback.target_prefix = Some(back.clone());
    let report = rollback_to_legacy_layout(&cluster_client, &single, &rollback, &mut |_| {})
        .await
        .unwrap();
    assert_eq!(report.unrepresentable, 0, "{report:#?}");
    let restored = store_on(single.clone(), Layout::Legacy, &back);
    restored.start().await.unwrap();
    read_everything(&restored).await;
}

both_drivers!(in_place_on_one_node);
both_drivers!(into_the_cluster_and_back);
