//! The migration steps on a cluster whose `CLUSTER SLOTS` names no host
//! (`cluster-preferred-endpoint-type unknown-endpoint`: every endpoint is `NULL`, meaning "the
//! host you asked, with this port"): `migrate_to_cluster_layout` into it (its mirror's prune
//! pass scans every master), `inspect_keyspace`, a rollback out of it and
//! `delete_abandoned_side` of its cluster side all succeed and reach every master, although
//! their one-request plans (`TIME`, `DBSIZE`, a `SCAN` page of one master) have no earlier
//! answer to take the host from.
//!
//! Each test (on each driver) starts its own 3-master cluster, lets it settle with the default
//! endpoints (the harness reads `CLUSTER SLOTS` addresses while it waits), and only then
//! switches every node to `unknown-endpoint`; from then on the test reads the masters through
//! their own admin connections. Redis 6.2 has no such setting (its `CLUSTER SLOTS` always names
//! an IP): there the same steps run on the endpoints it gives.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;

use botmesh_redis_core::keys::{glob_escape, slot, RecordKind};
use botmesh_redis_core::migrate::{
    delete_abandoned_side, inspect_keyspace, migrate_to_cluster_layout, rollback_to_legacy_layout,
    CleanupOptions, Counts, MarkerOutcome, MigrateOptions, Namespace, RollbackOptions,
};
use botmesh_redis_core::{ClientOptions, Keyspace, Layout};
use botmesh_redis_tests::conformance::{Client, Runtime};
use botmesh_redis_tests::keyspace::{assert_same_data, digest, Cmd, Node};
use botmesh_redis_tests::{
    both_drivers, server_version, unique_prefix, ClusterOptions, RedisCluster, SlotRange,
};

/// Switches every node to unknown endpoints, and checks that `CLUSTER SLOTS` now names no host
/// (from 7.0, which has `cluster-preferred-endpoint-type`).
fn hide_endpoints(cluster: &RedisCluster) {
    if !server_version().unwrap().at_least(7, 0) {
        return;
    }
    for node in cluster.nodes() {
        let mut conn = cluster.conn(node).unwrap();
        assert!(conn
            .cmd(&[
                "CONFIG",
                "SET",
                "cluster-preferred-endpoint-type",
                "unknown-endpoint"
            ])
            .unwrap()
            .is_ok());
        let slots = conn.cmd(&["CLUSTER", "SLOTS"]).unwrap();
        let entries = slots.as_array().unwrap();
        assert_eq!(entries.len(), 3, "{slots:?}");
        for entry in entries {
            let master = entry.as_array().unwrap()[2].as_array().unwrap();
            assert!(master[0].is_nil(), "an endpoint is still named: {slots:?}");
        }
    }
}

/// The master of `key`'s slot, from the slot map read before the endpoints were hidden.
fn master_of(ranges: &[SlotRange], key: &[u8]) -> SocketAddr {
    let s = slot(key);
    ranges
        .iter()
        .find(|r| (r.start..=r.end).contains(&s))
        .unwrap()
        .master
}

/// Every key under `prefix`, per master, read through each master's own connection (the
/// harness's slot map needs the endpoints).
fn keys_per_master(
    cluster: &RedisCluster,
    masters: &[SocketAddr],
    prefix: &str,
) -> BTreeMap<SocketAddr, BTreeSet<Vec<u8>>> {
    let pattern = format!("{}:*", glob_escape(prefix));
    masters
        .iter()
        .map(|&master| {
            let mut conn = cluster.conn(master).unwrap();
            let mut cursor = b"0".to_vec();
            let mut keys = BTreeSet::new();
            loop {
                let reply = conn
                    .cmd(&[
                        b"SCAN".as_slice(),
                        &cursor,
                        b"MATCH",
                        pattern.as_bytes(),
                        b"COUNT",
                        b"1000",
                    ])
                    .unwrap();
                let parts = reply.as_array().unwrap();
                cursor = parts[0].as_bytes().unwrap().to_vec();
                for key in parts[1].as_array().unwrap() {
                    keys.insert(key.as_bytes().unwrap().to_vec());
                }
                if cursor == b"0" {
                    return (master, keys);
                }
            }
        })
        .collect()
}

/// Migrates a legacy prefix of the shared single node into a cluster without endpoints,
/// inspects it there, starts the bots there, rolls back into a fresh legacy prefix, and deletes
/// the cluster side: every step reaches all three masters.
async fn every_step_reaches_every_master<R: Runtime>() {
    let cluster = RedisCluster::start(ClusterOptions::new().masters(3).replicas_per_master(0));
    let masters = cluster.masters().unwrap();
    assert_eq!(masters.len(), 3);
    let ranges = cluster.slots().unwrap();
    let single = Node::shared_single();
    let prefix = unique_prefix("mig-no-endpoints");
    let back = unique_prefix("mig-no-endpoints-back");
    let lks = Keyspace::new(Layout::Legacy, prefix.as_str()).unwrap();
    let cks = Keyspace::new(Layout::Cluster, prefix.as_str()).unwrap();
    // Two chats whose messages land on each master (and their records, on whichever).
    let mut per_master: BTreeMap<SocketAddr, usize> = BTreeMap::new();
    let chats: Vec<String> = (0..10_000)
        .map(|i| format!("chat-{i}"))
        .filter(|chat| {
            let n = per_master
                .entry(master_of(&ranges, cks.message_log(chat).as_bytes()))
                .or_default();
            *n += 1;
            *n <= 2
        })
        .take(6)
        .collect();
    assert_eq!(per_master.len(), 3);
    let mut data = Vec::new();
    for chat in &chats {
        data.push(
            Cmd::new("SET", lks.record(RecordKind::Chat, chat).as_bytes())
                .arg(format!("record of {chat}")),
        );
        for (score, id) in [("1", "m1"), ("2", "m2")] {
            data.push(
                Cmd::new("ZADD", lks.message_log(chat).as_bytes())
                    .arg(score)
                    .arg(id),
            );
            data.push(
                Cmd::new("SET", lks.message_item(chat, id).as_bytes())
                    .arg(format!("{id} of {chat}")),
            );
        }
    }
    single.run(&data);
    let original = digest(single, Layout::Legacy, &prefix);
    hide_endpoints(&cluster);

    let legacy_client = single.client::<R>().await;
    let cluster_client = Client::<R>::connect(ClientOptions::cluster(cluster.seeds()))
        .await
        .unwrap();
    let n = chats.len() as u64;
    let copied = |n: u64| Counts {
        copied: n,
        ..Counts::default()
    };

    // The migration: its prune pass scans every master of the target.
    let migrated = migrate_to_cluster_layout(
        &legacy_client,
        &cluster_client,
        &MigrateOptions::new(prefix.as_str()),
        &mut |_| {},
    )
    .await
    .unwrap_or_else(|e| panic!("migrate_to_cluster_layout: {e}"));
    assert_eq!(
        migrated.namespaces,
        [
            (Namespace::Messages, copied(2 * n)),
            (Namespace::Chats, copied(n))
        ]
        .into_iter()
        .collect(),
        "{migrated:#?}"
    );
    assert_eq!(migrated.marker, MarkerOutcome::Written, "{migrated:#?}");
    let held = keys_per_master(&cluster, &masters, &prefix);
    assert!(
        held.values().all(|keys| !keys.is_empty()),
        "a master holds none of the copy: {held:?}"
    );
    let total: usize = held.values().map(BTreeSet::len).sum();

    // The inspection counts each master's keys.
    let inspected = inspect_keyspace(&cluster_client, &prefix, 100, &mut |_| {})
        .await
        .unwrap_or_else(|e| panic!("inspect_keyspace: {e}"));
    assert_eq!(inspected.nodes.len(), 3, "{inspected:#?}");
    assert_eq!(inspected.scanned, total as u64, "{inspected:#?}");
    let mut seen: Vec<u64> = inspected
        .per_node
        .values()
        .map(|per_ns| per_ns.values().sum())
        .collect();
    seen.sort();
    let mut wanted: Vec<u64> = held.values().map(|keys| keys.len() as u64).collect();
    wanted.sort();
    assert_eq!(seen, wanted, "{inspected:#?}");
    assert_eq!(inspected.marker.as_deref(), Some("cluster:v1"));

    // The bots ran on the cluster; the rollback scans every master of its source.
    Node::Cluster(&cluster)
        .start_bots::<R>(Layout::Cluster, &prefix)
        .await
        .unwrap_or_else(|e| panic!("start on the cluster: {e}"));
    let mut rollback = RollbackOptions::new(prefix.as_str());
    rollback.target_prefix = Some(back.clone());
    let rolled = rollback_to_legacy_layout(&cluster_client, &legacy_client, &rollback, &mut |_| {})
        .await
        .unwrap_or_else(|e| panic!("rollback_to_legacy_layout: {e}"));
    assert_eq!(
        (
            rolled
                .namespaces
                .get(&Namespace::Messages)
                .map(|c| c.copied),
            rolled.namespaces.get(&Namespace::Chats).map(|c| c.copied),
            rolled.marker.clone(),
        ),
        (Some(2 * n), Some(n), MarkerOutcome::Absent),
        "{rolled:#?}"
    );
    assert_same_data(
        "rolled back",
        &original,
        &digest(single, Layout::Legacy, &back),
    );

    // The cleanup deletes the cluster side on every master; only its lifecycle record stays.
    let mut cleanup = CleanupOptions::new(prefix.as_str(), Layout::Cluster);
    cleanup.other_prefix = Some(back.clone());
    let cleaned = delete_abandoned_side(&cluster_client, &legacy_client, &cleanup, &mut |_| {})
        .await
        .unwrap_or_else(|e| panic!("delete_abandoned_side: {e}"));
    assert_eq!(
        (
            cleaned.deleted.get(&Namespace::Messages),
            cleaned.deleted.get(&Namespace::Items),
            cleaned.deleted.get(&Namespace::Chats)
        ),
        (Some(&n), Some(&(2 * n)), Some(&n)),
        "{cleaned:#?}"
    );
    let left: BTreeSet<Vec<u8>> = keys_per_master(&cluster, &masters, &prefix)
        .into_values()
        .flatten()
        .collect();
    assert_eq!(
        left,
        [cks.lifecycle().as_bytes().to_vec()].into_iter().collect(),
        "cluster-layout keys left after the cleanup"
    );
    legacy_client.close().await;
    cluster_client.close().await;
    single.delete_prefix(&prefix);
    single.delete_prefix(&back);
}

both_drivers!(every_step_reaches_every_master);
