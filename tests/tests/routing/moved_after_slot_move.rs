//! A slot moved behind the client's back: the next call gets one `MOVED`, follows it and
//! succeeds; later calls for that slot go straight to the new owner (no further `MOVED` from
//! the old one), and the data written before the move is still there.
//!
//! Moving a slot changes the topology: this file owns its cluster. The two drivers' runs share
//! it and take turns, so that the counters each one reads are its own; each run moves the slot
//! of its own key away from whichever master owns it then.

use std::sync::OnceLock;
use std::time::Duration;

use botmesh_redis_core::{Access, ClientOptions, Executor, Key, Request, Value};
use botmesh_redis_tests::conformance::{Client, Runtime};
use botmesh_redis_tests::counters::{cmdstat, errorstat};
use botmesh_redis_tests::{both_drivers, unique_prefix, ClusterOptions, RedisCluster};

fn cluster() -> &'static RedisCluster {
    static CLUSTER: OnceLock<RedisCluster> = OnceLock::new();
    CLUSTER.get_or_init(|| RedisCluster::start(ClusterOptions::new()))
}
static TURN: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

async fn set<R: Runtime>(client: &Client<R>, key: &Key, value: &str) {
    let request = Request::cmd(Access::Write, "SET")
        .key(key)
        .arg(value)
        .build()
        .unwrap();
    assert_eq!(
        client.call(request).await,
        Ok(Value::Status(bytes::Bytes::from_static(b"OK"))),
        "SET {key}"
    );
}

async fn get<R: Runtime>(client: &Client<R>, key: &Key) -> Value {
    let request = Request::cmd(Access::Read, "GET").key(key).build().unwrap();
    client.call(request).await.unwrap()
}

async fn call_follows_moved_once_then_goes_straight_to_the_new_owner<R: Runtime>() {
    let _turn = TURN.lock().await;
    let cluster = tokio::task::spawn_blocking(cluster).await.unwrap();
    // No periodic refresh during the test: the client must learn of the move from the MOVED
    // reply itself, not from a lucky refresh between the move and the next call.
    let options =
        ClientOptions::cluster(cluster.seeds()).refresh_interval(Duration::from_secs(600));
    let client = Client::<R>::connect(options).await.unwrap();
    let prefix = unique_prefix("moved");
    let tag = format!("{{{prefix}}}");
    let key = Key::new(format!("{tag}:k"));
    let slot = key.slot();
    let old = cluster.master_for_slot(slot).unwrap();
    let new = cluster
        .masters()
        .unwrap()
        .into_iter()
        .find(|&m| m != old)
        .unwrap();
    let mut on_old = cluster.conn(old).unwrap();
    let mut on_new = cluster.conn(new).unwrap();

    set(&client, &key, "before the move").await;
    let moved_before = errorstat(&mut on_old, "MOVED");

    let moved_keys = tokio::task::spawn_blocking(move || cluster.move_slot(slot, new))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(moved_keys, 1);

    // The first call after the move: one MOVED from the old owner, then the new one answers.
    assert_eq!(get(&client, &key).await, Value::from("before the move"));
    assert_eq!(errorstat(&mut on_old, "MOVED") - moved_before, 1);

    // A second batch, concurrent, on keys of the same slot: all go straight to the new owner.
    let sets_before = cmdstat(&mut on_new, "set").calls;
    let keys: Vec<Key> = (0..100).map(|i| Key::new(format!("{tag}:{i}"))).collect();
    assert!(keys.iter().all(|k| k.slot() == slot));
    let mut calls = Vec::new();
    for (i, key) in keys.iter().enumerate() {
        let (client, key) = (client.clone(), key.clone());
        calls.push(tokio::spawn(async move {
            set(&client, &key, &i.to_string()).await;
            get(&client, &key).await
        }));
    }
    for (i, call) in calls.into_iter().enumerate() {
        assert_eq!(call.await.unwrap(), Value::from(i.to_string().as_str()));
    }
    assert_eq!(
        errorstat(&mut on_old, "MOVED") - moved_before,
        1,
        "no MOVED after the first one"
    );
    assert_eq!(cmdstat(&mut on_new, "set").calls - sets_before, 100);
    let stored = on_new.cmd(&[&b"GET"[..], keys[99].as_bytes()]).unwrap();
    assert_eq!(stored.as_str(), Some("99"));
    client.close().await;
}

both_drivers!(call_follows_moved_once_then_goes_straight_to_the_new_owner);
