//! A rollback after bots changed the cluster-layout data. With the mirror (the default) the
//! legacy keyspace comes back matching the source: changed records overwrite, deleted chats,
//! checkpoints and user data are pruned, and a schedule the source no longer holds becomes a
//! deleted marker that keeps its token. With `mirror: false` the old legacy keys win, except
//! schedules whose source token is higher, and nothing is pruned.

use std::collections::BTreeMap;

use botmesh_redis_core::keys::RecordKind;
use botmesh_redis_core::migrate::{
    migrate_to_cluster_layout, rollback_to_legacy_layout, MarkerOutcome, MigrateOptions, Namespace,
    RollbackOptions,
};
use botmesh_redis_core::Schedules;
use botmesh_redis_core::{Keyspace, Layout};
use botmesh_redis_core::{Store, StoreOptions};
use botmesh_redis_tests::conformance::Runtime;
use botmesh_redis_tests::keyspace::{
    assert_same_data, digest_since, seeds, write_generated, Blob, Cmd, Digest, Msg, Node, Sched,
    Timed,
};
use botmesh_redis_tests::{both_drivers, unique_prefix};

const SEEDS: &[u64] = &[71];

/// Data the test changes later, written raw beside a generated keyspace.
fn known_data(ks: &Keyspace) -> Vec<Cmd> {
    let sched = |id: &str, token: &str, holder: &str| {
        Cmd::new("HSET", ks.record(RecordKind::Schedule, id).as_bytes())
            .arg("token")
            .arg(token)
            .arg("holder")
            .arg(holder)
            .arg("data")
            .arg(format!("data of {id}"))
            .arg("deleted")
            .arg("0")
    };
    let mut out = vec![
        Cmd::new("SET", ks.record(RecordKind::Chat, "doomed").as_bytes()).arg("record"),
        Cmd::new(
            "SET",
            ks.record(RecordKind::Checkpoint, "cp-doomed").as_bytes(),
        )
        .arg("offset")
        .arg("PX")
        .arg("600000"),
        Cmd::new("SET", ks.user_entry("ud", "ns", "doomed").as_bytes()).arg("x"),
        Cmd::new(
            "SET",
            ks.record(RecordKind::Contact, "ct-changed").as_bytes(),
        )
        .arg("old"),
        sched("sched-del", "7", "h"),
        sched("sched-raw", "9", "h2"),
        sched("sched-up", "5", "h3"),
    ];
    for (i, id) in ["m1", "m2", "m:3"].into_iter().enumerate() {
        out.push(
            Cmd::new("ZADD", ks.message_log("doomed").as_bytes())
                .arg(i.to_string())
                .arg(id),
        );
        out.push(Cmd::new("SET", ks.message_item("doomed", id).as_bytes()).arg("bye"));
    }
    out
}

/// What bots do to the cluster-layout data between the migration and the rollback.
async fn change<E: botmesh_redis_core::Executor>(store: &Store<E>, host: Node<'_>) {
    let deleted = store.delete_chat("doomed").await.unwrap();
    assert_eq!((deleted.messages, deleted.record), (3, true));
    assert!(store.clear_checkpoint("cp-doomed").await.unwrap());
    assert!(store.delete_user_data("ud", "ns", "doomed").await.unwrap());
    store
        .upsert_contact("ct-changed", "new".into())
        .await
        .unwrap();
    store
        .upsert_chat("brand-new", "fresh".into())
        .await
        .unwrap();
    store
        .save_message("brand-new", "m1", 5, "hi".into())
        .await
        .unwrap();
    let schedules = Schedules::new(store.executor().clone(), store.keyspace().clone()).unwrap();
    // Deleted with its own token: a marker holding 7.
    schedules.delete("sched-del", 7, "h").await.unwrap();
    // Deleted by a newer grant: a marker holding 6.
    schedules.delete("sched-up", 6, "h3").await.unwrap();
    // Gone altogether (as if written by a bot that never kept markers).
    let ks = store.keyspace();
    host.run(&[
        Cmd::new(
            "DEL",
            ks.record(RecordKind::Schedule, "sched-raw").as_bytes(),
        ),
        Cmd::new(
            "ZREM",
            ks.record_index_of(RecordKind::Schedule, "sched-raw")
                .unwrap()
                .as_bytes(),
        )
        .arg("sched-raw"),
    ]);
}

fn marker(token: &str, holder: &str) -> Sched {
    Sched {
        token: Some(token.into()),
        holder: Some(holder.into()),
        deleted: true,
        data: None,
    }
}

/// Migrates the legacy prefix on the single node into `host` (in place when it is the single
/// node), changes the data there, and rolls back into the same legacy prefix.
async fn mirror<R: Runtime>(host: Node<'static>, mirror: bool) {
    let single = Node::shared_single();
    let in_place = !host.is_cluster();
    let legacy = single.client::<R>().await;
    let cluster = host.client::<R>().await;
    for seed in seeds(SEEDS) {
        let prefix = unique_prefix("mig-mirror");
        let ks = Keyspace::new(Layout::Legacy, prefix.as_str()).unwrap();
        let written = single.now_ms();
        let generated = write_generated(single, &prefix, seed, 1);
        single.run(&known_data(&ks));
        let original = digest_since(single, Layout::Legacy, &prefix, written);
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
        change(&store, host).await;
        let changed = digest_since(host, Layout::Cluster, &prefix, written);

        let mut rollback = RollbackOptions::new(prefix.as_str());
        rollback.mirror = mirror;
        let report = rollback_to_legacy_layout(&cluster, &legacy, &rollback, &mut |_| {})
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
        let back = digest_since(single, Layout::Legacy, &prefix, written);
        let pruned: BTreeMap<Namespace, u64> = report
            .namespaces
            .iter()
            .filter(|(_, c)| c.pruned > 0)
            .map(|(ns, c)| (*ns, c.pruned))
            .collect();
        let what = format!("seed {seed}, mirror {mirror}");
        if mirror {
            let mut wanted = changed.clone();
            wanted
                .schedules
                .insert("sched-raw".into(), marker("9", "h2"));
            assert_same_data(&what, &wanted, &back);
            assert_eq!(back.schedules["sched-del"], marker("7", "h"));
            assert_eq!(back.schedules["sched-up"], marker("6", "h3"));
            let expected = &generated.expected;
            let in_logs = expected.dangling - expected.dangling_in_drains;
            let mut want: BTreeMap<Namespace, u64> = [
                (Namespace::Messages, 3 + in_logs),
                (Namespace::Drains, expected.dangling_in_drains),
                (Namespace::Chats, 1),
                (Namespace::Checkpoints, 1),
                (Namespace::UserData, 1),
                (Namespace::Schedules, 1),
            ]
            .into_iter()
            .collect();
            want.retain(|_, n| *n > 0);
            assert_eq!(pruned, want, "{what}: {report:#?}");
        } else {
            // The old legacy keys win; new data arrives; a higher schedule token replaces.
            let mut wanted: Digest = original.clone();
            wanted.records.insert(
                (RecordKind::Chat, "brand-new".into()),
                Timed {
                    value: Blob(b"fresh".to_vec()),
                    ttl: None,
                },
            );
            wanted.messages.insert(
                "brand-new".into(),
                vec![Msg {
                    id: "m1".into(),
                    score: "5".into(),
                    value: Blob(b"hi".to_vec()),
                }],
            );
            wanted
                .schedules
                .insert("sched-up".into(), marker("6", "h3"));
            assert_same_data(&what, &wanted, &back);
            assert_eq!(pruned, BTreeMap::new(), "{what}: {report:#?}");
            assert_eq!(
                report
                    .namespaces
                    .get(&Namespace::Schedules)
                    .map(|c| c.overwritten),
                Some(1),
                "{what}: only sched-up replaced: {report:#?}"
            );
            let contacts = report.namespaces[&Namespace::Contacts];
            assert_eq!(
                (contacts.overwritten, contacts.copied),
                (0, 0),
                "{what}: {report:#?}"
            );
        }
    }
}

async fn mirror_in_place<R: Runtime>() {
    mirror::<R>(Node::shared_single(), true).await;
}

async fn copy_only_in_place<R: Runtime>() {
    mirror::<R>(Node::shared_single(), false).await;
}

async fn mirror_from_the_cluster<R: Runtime>() {
    mirror::<R>(Node::shared_cluster(), true).await;
}

async fn copy_only_from_the_cluster<R: Runtime>() {
    mirror::<R>(Node::shared_cluster(), false).await;
}

both_drivers!(
    mirror_in_place,
    copy_only_in_place,
    mirror_from_the_cluster,
    copy_only_from_the_cluster
);
