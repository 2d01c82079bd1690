//! A legacy log member that is not valid UTF-8 (another program wrote it) names its item by its
//! own bytes, `p:msg:<chat>:<those bytes>`. A migration with `delete_source`, in place and into
//! the cluster, copies that message (it is not `dangling`): the cluster-layout log holds the raw
//! member and its item is at [`Keyspace::message_item_raw`]; the legacy log and item are
//! deleted only once the copy holds them. A rollback then brings both back byte for byte.

use std::collections::BTreeSet;
use std::sync::Mutex;

use botmesh_redis_core::migrate::{
    migrate_to_cluster_layout, rollback_to_legacy_layout, Counts, MarkerOutcome, MigrateOptions,
    Namespace, RollbackOptions,
};
use botmesh_redis_core::{Key, Keyspace, Layout};
use botmesh_redis_tests::conformance::Runtime;
use botmesh_redis_tests::keyspace::{Cmd, Node};
use botmesh_redis_tests::{both_drivers, unique_prefix, Value};

/// The member: not UTF-8 (`ff fe`), with a `:` in it.
const ID: &[u8] = &[0xff, 0xfe, 0x3a, 0x41];
/// The item's value, not UTF-8 either.
const ITEM: &[u8] = &[0x80, 0x00, b'v', 0xff];
const SCORE: &str = "7";
const CHAT: &str = "chat";

fn copied(n: u64) -> Counts {
    Counts {
        copied: n,
        ..Counts::default()
    }
}

/// The log's members and scores, as raw bytes.
fn log(node: Node<'_>, key: &Key) -> Vec<(Vec<u8>, Vec<u8>)> {
    let reply = node.call(
        &Cmd::new("ZRANGE", key.as_bytes())
            .arg("0")
            .arg("-1")
            .arg("WITHSCORES"),
    );
    reply
        .as_array()
        .unwrap_or_default()
        .chunks(2)
        .map(|p| {
            (
                p[0].as_bytes().unwrap().to_vec(),
                p[1].as_bytes().unwrap().to_vec(),
            )
        })
        .collect()
}

fn get(node: Node<'_>, key: &Key) -> Option<Vec<u8>> {
    match node.call(&Cmd::new("GET", key.as_bytes())) {
        Value::Bulk(b) => Some(b),
        _ => None,
    }
}

fn exists(node: Node<'_>, key: &Key) -> bool {
    node.call(&Cmd::new("EXISTS", key.as_bytes())).as_int() == Some(1)
}

/// The keys under `prefix` on `node`, without the lifecycle records (the steps' bookkeeping).
fn data_keys(node: Node<'_>, prefix: &str) -> BTreeSet<Vec<u8>> {
    let records: Vec<Vec<u8>> = [Layout::Legacy, Layout::Cluster]
        .into_iter()
        .map(|l| {
            Keyspace::new(l, prefix)
                .unwrap()
                .lifecycle()
                .as_bytes()
                .to_vec()
        })
        .collect();
    node.keys(prefix)
        .into_iter()
        .filter(|k| !records.contains(k))
        .collect()
}

/// Migrates the legacy prefix of the shared single node into `host` (in place when it is the
/// single node) with `delete_source`, starts the bots there, and rolls back.
async fn raw_member_survives<R: Runtime>(host: Node<'static>) {
    let single = Node::shared_single();
    let legacy_client = single.client::<R>().await;
    let cluster_client = host.client::<R>().await;
    let prefix = unique_prefix("mig-raw-id");
    let lks = Keyspace::new(Layout::Legacy, prefix.as_str()).unwrap();
    let cks = Keyspace::new(Layout::Cluster, prefix.as_str()).unwrap();
    let (legacy_log, legacy_item) = (lks.message_log(CHAT), lks.message_item_raw(CHAT, ID));
    let (cluster_log, cluster_item) = (cks.message_log(CHAT), cks.message_item_raw(CHAT, ID));
    // The legacy item's name is the member's own bytes.
    assert!(legacy_item.as_bytes().ends_with(ID));
    single.run(&[
        Cmd::new("ZADD", legacy_log.as_bytes()).arg(SCORE).arg(ID),
        Cmd::new("SET", legacy_item.as_bytes()).arg(ITEM),
    ]);
    let before = data_keys(single, &prefix);

    // While the copy pass runs (each of its pages), the legacy message is still there; when
    // the deletion begins, the copy holds it.
    let seen = Mutex::new(Vec::new());
    let mut options = MigrateOptions::new(prefix.as_str());
    options.delete_source = true;
    let report = {
        let mut progress = |p: &botmesh_redis_core::migrate::Progress| {
            let held = match p.phase {
                "copying" => exists(single, &legacy_item) && !log(single, &legacy_log).is_empty(),
                "deleting" => {
                    get(host, &cluster_item).as_deref() == Some(ITEM)
                        && log(host, &cluster_log) == [(ID.to_vec(), SCORE.as_bytes().to_vec())]
                }
                _ => return,
            };
            seen.lock().unwrap().push((p.phase, held));
        };
        migrate_to_cluster_layout(&legacy_client, &cluster_client, &options, &mut progress)
            .await
            .unwrap()
    };
    assert_eq!(
        report.namespaces.get(&Namespace::Messages),
        Some(&copied(1)),
        "{report:#?}"
    );
    assert_eq!(
        (report.dangling, report.unreadable, report.marker.clone()),
        (0, 0, MarkerOutcome::Written),
        "{report:#?}"
    );
    // The cleanup deleted the item, then the log.
    assert_eq!(report.source_deleted, 2, "{report:#?}");
    let seen = seen.into_inner().unwrap();
    assert!(
        seen.iter().any(|(p, _)| *p == "copying") && seen.iter().any(|(p, _)| *p == "deleting"),
        "{seen:?}"
    );
    assert!(seen.iter().all(|(_, held)| *held), "{seen:?}");

    assert_eq!(
        log(host, &cluster_log),
        vec![(ID.to_vec(), SCORE.as_bytes().to_vec())]
    );
    assert_eq!(get(host, &cluster_item).as_deref(), Some(ITEM));
    assert!(!exists(single, &legacy_log), "the legacy log is left");
    assert!(!exists(single, &legacy_item), "the legacy item is left");

    host.start_bots::<R>(Layout::Cluster, &prefix)
        .await
        .unwrap();
    let back = rollback_to_legacy_layout(
        &cluster_client,
        &legacy_client,
        &RollbackOptions::new(prefix.as_str()),
        &mut |_| {},
    )
    .await
    .unwrap();
    assert_eq!(
        (
            back.namespaces.get(&Namespace::Messages),
            back.dangling,
            back.unreadable
        ),
        (Some(&copied(1)), 0, 0),
        "{back:#?}"
    );
    assert_eq!(
        log(single, &legacy_log),
        vec![(ID.to_vec(), SCORE.as_bytes().to_vec())]
    );
    assert_eq!(get(single, &legacy_item).as_deref(), Some(ITEM));
    if host.is_cluster() {
        assert_eq!(data_keys(single, &prefix), before);
    } else {
        // In place, the cluster-layout copy stays beside the restored legacy keys.
        let legacy: BTreeSet<Vec<u8>> = data_keys(single, &prefix)
            .into_iter()
            .filter(|k| ![cluster_log.as_bytes(), cluster_item.as_bytes()].contains(&k.as_slice()))
            .collect();
        assert_eq!(legacy, before);
    }
    single.delete_prefix(&prefix);
    host.delete_prefix(&prefix);
}

both_drivers!(raw_member_survives {
    in_place => Node::shared_single(),
    into_the_cluster => Node::shared_cluster(),
});
