//! The `start()` guard and the configuration errors of `Store::new`, against real servers, on
//! both drivers.

use std::collections::BTreeSet;

use botmesh_redis_core::keys::{RecordKind, CLUSTER_V1};
use botmesh_redis_core::KeyError;
use botmesh_redis_core::{Access, Error, Executor, Key, Keyspace, Layout, Request, Value};
use botmesh_redis_core::{Started, Store, StoreOptions};
use botmesh_redis_tests::conformance::{Client, Runtime};
use botmesh_redis_tests::store::{store_on, Setup};
use botmesh_redis_tests::{both_drivers, shared_cluster, unique_prefix};

async fn marker<E: Executor>(store: &Store<E>) -> Option<String> {
    let get = Request::cmd(Access::Read, "GET")
        .key(store.keyspace().marker())
        .build()
        .unwrap();
    match store.executor().call(get).await.unwrap() {
        Value::Nil => None,
        v => Some(v.into_string().unwrap()),
    }
}

async fn set_raw<R: Runtime>(client: &Client<R>, key: &Key, value: &str) {
    let set = Request::cmd(Access::Write, "SET")
        .key(key)
        .arg(value)
        .build()
        .unwrap();
    client.call(set).await.unwrap();
}

fn refused(result: Result<Started, Error>) -> String {
    match result {
        Err(e @ (Error::LegacyDataFound { .. } | Error::UnknownLayoutMarker { .. })) => {
            e.to_string()
        }
        other => panic!("expected a refusal of the keyspace, got {other:?}"),
    }
}

/// A cluster-layout store over an empty prefix writes the marker, then finds it.
async fn fresh_prefix_gets_the_marker<R: Runtime>(setup: Setup) {
    let client = setup.client::<R>().await;
    let store = store_on(client, Layout::Cluster, &unique_prefix("st-guard"));
    // Keys both layouts share do not count as legacy data.
    store
        .set_conversation("c", "state".into(), None)
        .await
        .unwrap();
    store.set_cursor("n", 1).await.unwrap();
    store.save_message("c", "m", 1, "p".into()).await.unwrap();
    assert!(matches!(
        store.start().await.unwrap(),
        Started::MarkerWritten { checked } if checked >= 3
    ));
    assert_eq!(marker(&store).await.as_deref(), Some(CLUSTER_V1));
    assert_eq!(store.start().await.unwrap(), Started::MarkerFound);
}

/// Legacy-layout keys under the prefix stop a cluster-layout store, unless allowed.
async fn legacy_data_is_refused<R: Runtime>(setup: Setup) {
    let client = setup.client::<R>().await;
    let prefix = unique_prefix("st-guard-legacy");
    if setup == Setup::Cluster {
        // A legacy-layout store cannot run on a cluster: write its keys by hand.
        let legacy = Keyspace::new(Layout::Legacy, prefix.clone()).unwrap();
        set_raw(&client, &legacy.record(RecordKind::Chat, "c1"), "v").await;
    } else {
        let legacy = store_on(client.clone(), Layout::Legacy, &prefix);
        assert_eq!(legacy.start().await.unwrap(), Started::Legacy);
        legacy.upsert_chat("c1", "v".into()).await.unwrap();
    }
    let store = store_on(client.clone(), Layout::Cluster, &prefix);
    match store.start().await {
        Err(Error::LegacyDataFound {
            prefix: found,
            examples,
        }) => {
            assert_eq!(found, prefix);
            assert_eq!(examples, vec![format!("{prefix}:chat:c1")]);
        }
        other => panic!("expected LegacyDataFound, got {other:?}"),
    }
    let text = refused(store.start().await);
    assert!(text.contains("migrate_to_cluster_layout"), "{text}");
    assert_eq!(marker(&store).await, None);

    let allowed = Store::new(
        client.clone(),
        StoreOptions::new(prefix.as_str())
            .layout(Layout::Cluster)
            .allow_legacy_data(true),
    )
    .unwrap();
    assert!(matches!(
        allowed.start().await.unwrap(),
        Started::LegacyDataAllowed { example } if example.ends_with(":chat:c1")
    ));
    // The guard stays armed for stores started without the flag.
    assert_eq!(marker(&store).await, None);
    assert!(store.start().await.is_err());
}

/// A legacy-layout store whose prefix carries the marker warns and starts.
async fn legacy_store_on_a_marked_prefix_starts<R: Runtime>(setup: Setup) {
    let client = setup.client::<R>().await;
    let prefix = unique_prefix("st-guard-marked");
    let cluster_store = store_on(client.clone(), Layout::Cluster, &prefix);
    cluster_store.start().await.unwrap();
    let legacy = store_on(client, Layout::Legacy, &prefix);
    assert_eq!(legacy.start().await.unwrap(), Started::LegacyWithMarker);
}

/// A marker with a value this version does not know is refused.
async fn unknown_marker_is_refused<R: Runtime>(setup: Setup) {
    let client = setup.client::<R>().await;
    let store = store_on(
        client.clone(),
        Layout::Cluster,
        &unique_prefix("st-guard-v9"),
    );
    set_raw(&client, &store.keyspace().marker(), "cluster:v9").await;
    let text = refused(store.start().await);
    assert!(text.contains("cluster:v9"), "{text}");
}

async fn single_node<R: Runtime>() {
    // Each case picks the layouts it needs; the setup only chooses the node.
    let setup = Setup::SingleCluster;
    fresh_prefix_gets_the_marker::<R>(setup).await;
    legacy_data_is_refused::<R>(setup).await;
    legacy_store_on_a_marked_prefix_starts::<R>(setup).await;
    unknown_marker_is_refused::<R>(setup).await;
}

async fn cluster<R: Runtime>() {
    fresh_prefix_gets_the_marker::<R>(Setup::Cluster).await;
    legacy_data_is_refused::<R>(Setup::Cluster).await;
    unknown_marker_is_refused::<R>(Setup::Cluster).await;
}

/// On a cluster the guard scans every master: a legacy key is found whichever master holds it.
async fn cluster_guard_scans_every_master<R: Runtime>() {
    let cluster = shared_cluster();
    let client = Setup::Cluster.client::<R>().await;
    let masters: BTreeSet<_> = cluster.masters().unwrap().into_iter().collect();
    let mut covered = BTreeSet::new();
    for i in 0.. {
        let prefix = unique_prefix("st-guard-node");
        let legacy = Keyspace::new(Layout::Legacy, prefix.clone()).unwrap();
        let key = legacy.record(RecordKind::Chat, &format!("c{i}"));
        let master = cluster.master_for_key(key.as_bytes()).unwrap();
        if !covered.insert(master) {
            continue;
        }
        set_raw(&client, &key, "v").await;
        let store = store_on(client.clone(), Layout::Cluster, &prefix);
        let text = refused(store.start().await);
        assert!(text.contains(&key.to_string()), "{master}: {text}");
        if covered == masters {
            break;
        }
    }
}

async fn configuration_errors<R: Runtime>() {
    let single = Setup::SingleLegacy.client::<R>().await;
    let cluster = Setup::Cluster.client::<R>().await;

    // The default layout follows the client.
    let on_single = store_on_default(single.clone(), "st-cfg");
    assert_eq!(on_single.layout(), Layout::Legacy);
    let on_cluster = store_on_default(cluster.clone(), "st-cfg");
    assert_eq!(on_cluster.layout(), Layout::Cluster);

    // A hint that contradicts the client loses: the client knows what it talks to.
    let hinted = Store::new(cluster.clone(), StoreOptions::new("st-cfg"));
    assert_eq!(hinted.unwrap().layout(), Layout::Cluster);

    // The components share the store's prefix and layout.
    let fresh = store_on_default(cluster.clone(), &unique_prefix("st-cfg"));
    let coord = fresh.coordinator("st-cfg-replica").unwrap();
    coord
        .heartbeat(std::time::Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(
        coord.live_replicas().await.unwrap(),
        vec!["st-cfg-replica".to_owned()]
    );
    assert!(on_cluster.schedules().is_ok());
    assert!(on_cluster.leases().is_ok());
    assert!(on_cluster.durability("jobs").is_ok());
    assert!(on_cluster.durability("").is_err());

    // Every component refuses a legacy keyspace on a cluster client, before anything is sent.
    let legacy = Keyspace::new(Layout::Legacy, "st-cfg").unwrap();
    let legacy_on_cluster = |component| {
        Error::Config(botmesh_redis_core::ConfigError::LegacyLayoutOnCluster { component })
    };
    use botmesh_redis_core::{Coordinator, Durability, Leases, Schedules};
    assert_eq!(
        Coordinator::new(cluster.clone(), legacy.clone(), "r").unwrap_err(),
        legacy_on_cluster("coordinator")
    );
    assert_eq!(
        Schedules::new(cluster.clone(), legacy.clone()).unwrap_err(),
        legacy_on_cluster("schedules")
    );
    assert_eq!(
        Leases::new(cluster.clone(), legacy.clone()).unwrap_err(),
        legacy_on_cluster("leases")
    );
    assert_eq!(
        Durability::new(cluster.clone(), legacy.clone(), "jobs").unwrap_err(),
        legacy_on_cluster("durability")
    );
    // On a single node the legacy keyspace is the default, and accepted.
    assert!(Coordinator::new(single.clone(), legacy.clone(), "r").is_ok());

    // The legacy layout on a cluster client.
    let err = Store::new(
        cluster.clone(),
        StoreOptions::new("st-cfg").layout(Layout::Legacy),
    )
    .unwrap_err();
    assert!(
        matches!(
            &err,
            Error::Config(botmesh_redis_core::ConfigError::LegacyLayoutOnCluster {
                component: "store"
            })
        ),
        "{err:?}"
    );

    // Braces in a cluster-layout prefix; the legacy layout takes them.
    for prefix in ["a{b", "a}b", "{bot}"] {
        let err = Store::new(
            single.clone(),
            StoreOptions::new(prefix).layout(Layout::Cluster),
        )
        .unwrap_err();
        assert!(
            matches!(err, Error::Key(KeyError::BraceInClusterPrefix { .. })),
            "{prefix}: {err:?}"
        );
        Store::new(
            single.clone(),
            StoreOptions::new(prefix).layout(Layout::Legacy),
        )
        .unwrap();
    }
    assert!(matches!(
        Store::new(single.clone(), StoreOptions::new("")).unwrap_err(),
        Error::Key(KeyError::EmptyPrefix)
    ));

    single.close().await;
    cluster.close().await;
}

/// A store with no layout and no hint about the client: the client says what it talks to.
fn store_on_default<R: Runtime>(client: Client<R>, prefix: &str) -> Store<Client<R>> {
    Store::new(client, StoreOptions::new(prefix)).unwrap()
}

both_drivers!(
    single_node,
    cluster,
    cluster_guard_scans_every_master,
    configuration_errors,
);
