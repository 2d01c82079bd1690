//! Smoke test, on both drivers: `SET` then `GET` against a real single node, 2,000 concurrent
//! `SET`/`GET` pairs against a real cluster, and writes larger than a socket buffer, which
//! the driver cannot write at once and hands to a flusher while later requests queue behind.
use botmesh_redis_core::{Access, ClientOptions, Executor, Key, Request, Value};
use botmesh_redis_tests::conformance::{set_get, Client, Runtime};
use botmesh_redis_tests::{
    both_drivers, on_one_thread, shared_cluster, shared_single, unique_prefix,
};

async fn single_node_set_get<R: Runtime>() {
    let node = shared_single();
    let client = Client::<R>::connect(ClientOptions::url(node.url()))
        .await
        .unwrap();
    set_get(&client, "smoke").await;
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

async fn writes_larger_than_the_socket_buffer_keep_their_order<R: Runtime>() {
    let node = shared_single();
    let client = Client::<R>::connect(ClientOptions::url(node.url()))
        .await
        .unwrap();
    let prefix = unique_prefix("smoke-big");
    // Eight 4 MiB values and a small write after each, all at once: the socket fills, the
    // rest waits for the flusher, and every request must still arrive whole and in order.
    let mut calls = Vec::new();
    for i in 0..8u8 {
        let big = Key::new(format!("{prefix}:big:{i}"));
        let value = vec![b'a' + i; 4 << 20];
        let set = Request::cmd(Access::Write, "SET")
            .key(&big)
            .arg(value)
            .build()
            .unwrap();
        let incr = Request::cmd(Access::Write, "INCR")
            .key(Key::new(format!("{prefix}:count")))
            .build()
            .unwrap();
        let client = client.clone();
        calls.push(tokio::spawn(async move {
            let set = client.call(set);
            let incr = client.call(incr);
            (set.await.unwrap(), incr.await.unwrap())
        }));
    }
    let mut counts = Vec::new();
    for call in calls {
        let (set, count) = call.await.unwrap();
        assert_eq!(set, Value::Status("OK".into()));
        counts.push(count.as_i64().unwrap());
    }
    counts.sort_unstable();
    assert_eq!(counts, (1..=8).collect::<Vec<i64>>());
    for i in 0..8u8 {
        let get = Request::cmd(Access::Read, "GET")
            .key(Key::new(format!("{prefix}:big:{i}")))
            .build()
            .unwrap();
        match client.call(get).await.unwrap() {
            Value::Bulk(b) => {
                assert_eq!(b.len(), 4 << 20);
                assert!(b.iter().all(|&c| c == b'a' + i), "value {i} corrupted");
            }
            other => panic!("GET big:{i}: {other:?}"),
        }
    }
    client.close().await;
}

both_drivers!(
    single_node_set_get,
    cluster_set_get_many,
    writes_larger_than_the_socket_buffer_keep_their_order
);
on_one_thread!(
    single_node_set_get,
    cluster_set_get_many,
    writes_larger_than_the_socket_buffer_keep_their_order
);
