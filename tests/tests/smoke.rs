//! Smoke test, on both drivers: `SET` then `GET` against a real single node, and 2,000
//! concurrent `SET`/`GET` pairs against a real cluster.
#![allow(clippy::unwrap_used, clippy::expect_used)]
use botmesh_redis_core::{Access, ClientOptions, Executor, Key, Request, Value};
use botmesh_redis_tests::conformance::{Client, Runtime};
use botmesh_redis_tests::{both_drivers, shared_cluster, shared_single, unique_prefix};

async fn single_node_set_get<R: Runtime>() {
    let node = shared_single();
    let client = Client::<R>::connect(ClientOptions::url(node.url()))
        .await
        .unwrap();
    let key = Key::new(format!("{}:k", unique_prefix("smoke")));
    let set = Request::cmd(Access::Write, "SET")
        .key(&key)
        .arg("v")
        .build()
        .unwrap();
    client.call(set).await.unwrap();
    let get = Request::cmd(Access::Read, "GET").key(&key).build().unwrap();
    assert_eq!(client.call(get).await.unwrap(), Value::from("v"));
    client.close().await;
}

async fn cluster_set_get_many<R: Runtime>() {
    let cluster = shared_cluster();
    let client = Client::<R>::connect(ClientOptions::cluster(cluster.seeds()))
        .await
        .unwrap();
    let prefix = unique_prefix("smoke");
    let mut handles = Vec::new();
    for i in 0..2000 {
        let client = client.clone();
        let key = Key::new(format!("{prefix}:{i}"));
        handles.push(tokio::spawn(async move {
            let set = Request::cmd(Access::Write, "SET")
                .key(&key)
                .arg(i.to_string())
                .build()
                .unwrap();
            client.call(set).await.unwrap();
            let get = Request::cmd(Access::Read, "GET").key(&key).build().unwrap();
            client.call(get).await.unwrap()
        }));
    }
    for (i, h) in handles.into_iter().enumerate() {
        assert_eq!(h.await.unwrap(), Value::from(i.to_string().as_str()));
    }
    client.close().await;
}

both_drivers!(single_node_set_get, cluster_set_get_many);
