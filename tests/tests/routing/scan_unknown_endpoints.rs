//! `SCAN` over a cluster whose `CLUSTER SLOTS` names no host (`cluster-preferred-endpoint-type
//! unknown-endpoint`: every endpoint is `NULL`, meaning "the host you asked, with this port")
//! still reaches every master, so the `start()` guard sees legacy-layout keys on any of them.
//!
//! Each test (on each driver) starts its own 3-master cluster, lets it settle with the default
//! endpoints (the harness reads `CLUSTER SLOTS` addresses while it waits), places its keys, and
//! only then switches every node to `unknown-endpoint`. Redis 6.2 has no such setting (its
//! `CLUSTER SLOTS` always names an IP): there the same checks run on the endpoints it gives.

use botmesh_redis_core::keys::slot;
use botmesh_redis_core::{ClientOptions, Error};
use botmesh_redis_core::{Started, Store, StoreOptions};
use botmesh_redis_tests::conformance::{driver_name, Client, Runtime};
use botmesh_redis_tests::{both_drivers, server_version, ClusterOptions, RedisCluster};

/// A key named `<head><n>` for the first `n` whose slot `master` serves.
fn key_on(cluster: &RedisCluster, master: std::net::SocketAddr, head: &str) -> String {
    (0..100_000)
        .map(|n| format!("{head}{n}"))
        .find(|k| cluster.master_for_slot(slot(k.as_bytes())).unwrap() == master)
        .unwrap()
}

fn set(cluster: &RedisCluster, key: &str) {
    let mut conn = cluster.conn_for_key(key).unwrap();
    assert!(conn.cmd(&["SET", key, "v"]).unwrap().is_ok());
}

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

fn refused(result: Result<Started, Error>) -> String {
    match result {
        Err(e @ Error::LegacyDataFound { .. }) => e.to_string(),
        other => panic!("expected the guard's refusal, got {other:?}"),
    }
}

async fn start_guard_sees_every_master_without_endpoints<R: Runtime>() {
    let cluster = RedisCluster::start(ClusterOptions::new().masters(3).replicas_per_master(0));
    let masters = cluster.masters().unwrap();
    assert_eq!(masters.len(), 3);
    let driver = driver_name::<R>();

    // One prefix per master, with one legacy-layout key on that master only.
    let legacy: Vec<(String, String)> = masters
        .iter()
        .enumerate()
        .map(|(i, &master)| {
            let prefix = format!("legacy-{driver}-{i}");
            let key = key_on(&cluster, master, &format!("{prefix}:chat:c"));
            set(&cluster, &key);
            (prefix, key)
        })
        .collect();
    // A prefix with one key both layouts share (not legacy) on every master: the guard must
    // check all three.
    let clean = format!("clean-{driver}");
    for &master in &masters {
        set(
            &cluster,
            &key_on(&cluster, master, &format!("{clean}:cursor:n")),
        );
    }
    hide_endpoints(&cluster);

    let client = Client::<R>::connect(ClientOptions::cluster(cluster.seeds()))
        .await
        .unwrap();
    for (prefix, key) in &legacy {
        let store = Store::new(client.clone(), StoreOptions::new(prefix.as_str())).unwrap();
        let text = refused(store.start().await);
        assert!(
            text.contains(key.as_str()) && text.contains("migrate_to_cluster_layout"),
            "{text}"
        );
    }
    let store = Store::new(client.clone(), StoreOptions::new(clean.as_str())).unwrap();
    assert_eq!(
        store.start().await.unwrap(),
        Started::MarkerWritten { checked: 3 }
    );
    client.close().await;
}

both_drivers!(start_guard_sees_every_master_without_endpoints,);
