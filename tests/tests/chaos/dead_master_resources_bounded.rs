//! A master that is down for 30 s while calls keep arriving costs a bounded number of dials,
//! tasks and connection handles: the session backs off per node, and every connection it
//! forgets is released by the driver.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use botmesh_redis_core::{Access, ClientOptions, Executor, Key, Request};
use botmesh_redis_tests::conformance::{driver_name, Client, Runtime};
use botmesh_redis_tests::{both_drivers, unique_prefix, ClusterOptions, RedisCluster};

const DOWN: Duration = Duration::from_secs(30);

async fn a_dead_master_costs_bounded_dials_and_tasks<R: Runtime>() {
    // No replica and a long node timeout: the dead master stays in the topology the whole
    // time, so every call to its slots is routed to it.
    let cluster = RedisCluster::start(
        ClusterOptions::new()
            .replicas_per_master(0)
            .node_timeout(Duration::from_secs(120))
            .config("cluster-require-full-coverage no"),
    );
    let options = ClientOptions::cluster(cluster.seeds()).request_timeout(Duration::from_secs(2));
    let client = Client::<R>::connect(options).await.unwrap();
    let prefix = unique_prefix("dead-master");
    let dead = cluster.masters().unwrap()[0];
    let key_on = |on_dead: bool| {
        (0..)
            .map(|i| Key::new(format!("{prefix}:{i}")))
            .find(|k| (cluster.master_for_key(k.as_bytes()).unwrap() == dead) == on_dead)
            .unwrap()
    };
    let (dead_key, live_key) = (key_on(true), key_on(false));
    let get = |key: &Key| Request::cmd(Access::Read, "GET").key(key).build().unwrap();
    client.call(get(&dead_key)).await.unwrap();
    let before = client.stats();

    cluster.server(dead).unwrap().kill();
    let (failed, ok) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let (mut max_tasks, mut max_connections) = (0, 0);
    let mut tick = tokio::time::interval(Duration::from_millis(1));
    let end = Instant::now() + DOWN;
    let mut calls = 0u64;
    while Instant::now() < end {
        tick.tick().await;
        for key in [&dead_key, &live_key] {
            calls += 1;
            let (client, request) = (client.clone(), get(key));
            let (failed, ok) = (failed.clone(), ok.clone());
            let on_dead = key == &dead_key;
            tokio::spawn(async move {
                match (client.call(request).await, on_dead) {
                    (Ok(_), false) => ok.fetch_add(1, Ordering::Relaxed),
                    (Err(_), true) => failed.fetch_add(1, Ordering::Relaxed),
                    (result, _) => panic!("on the dead master: {on_dead}, {result:?}"),
                };
            });
        }
        let stats = client.stats();
        max_tasks = max_tasks.max(stats.tasks);
        max_connections = max_connections.max(stats.connections);
    }
    let dials = client.stats().dials - before.dials;
    eprintln!(
        "{}: {calls} calls in {DOWN:?} with a master down: {dials} dials, at most {max_tasks} \
         tasks and {max_connections} connections held",
        driver_name::<R>()
    );
    // The backoff grows to 500 ms (jittered from 375 ms): about 80 dials in 30 s. One dial per
    // call would be 30,000.
    assert!(dials <= 120, "{dials} dials");
    // The session task, then per node at most a connect or a reader and a flusher.
    assert!(max_tasks <= 12, "{max_tasks} tasks");
    assert!(max_connections <= 6, "{max_connections} connections held");
    botmesh_redis_tests::eventually(Duration::from_secs(5), "every call ended", || {
        let ended = failed.load(Ordering::Relaxed) + ok.load(Ordering::Relaxed);
        async move { (ended == calls).then_some(()) }
    })
    .await;
    assert_eq!(ok.load(Ordering::Relaxed), calls / 2);
    client.close().await;
}

both_drivers!(a_dead_master_costs_bounded_dials_and_tasks);
