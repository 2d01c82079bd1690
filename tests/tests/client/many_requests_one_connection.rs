//! 10,000 concurrent requests complete over one pipelined connection per master: each master
//! sees exactly one new connection from the client (`CLIENT LIST`, and one accepted connection
//! in `INFO stats`), and it goes away when the client closes. Both drivers' runs count the
//! same masters' connections, so they take turns.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::time::Duration;

use botmesh_redis_core::{Access, ClientOptions, Executor, Key, Request, Value};
use botmesh_redis_tests::conformance::{exclusive, Client, Runtime};
use botmesh_redis_tests::counters::{client_list, info, master_conns};
use botmesh_redis_tests::{both_drivers, eventually, on_one_thread, shared_cluster, unique_prefix};

const REQUESTS: usize = 10_000;

fn accepted(conn: &mut botmesh_redis_tests::AdminConn) -> u64 {
    info(conn, "stats")["total_connections_received"]
        .parse()
        .unwrap()
}

async fn ten_thousand_concurrent_requests_use_one_connection_per_master<R: Runtime>() {
    let _turn = exclusive().await;
    let cluster = shared_cluster();
    // Opened first and reused: they are in the "before" picture.
    let mut admins = master_conns(cluster);
    let ids_before: BTreeMap<SocketAddr, BTreeSet<u64>> = admins
        .iter_mut()
        .map(|(&m, c)| (m, client_list(c).into_keys().collect()))
        .collect();
    let accepted_before: BTreeMap<SocketAddr, u64> =
        admins.iter_mut().map(|(&m, c)| (m, accepted(c))).collect();

    let client = Client::<R>::connect(ClientOptions::cluster(cluster.seeds()))
        .await
        .unwrap();
    let prefix = unique_prefix("many");
    let keys: Vec<Key> = (0..REQUESTS)
        .map(|i| Key::new(format!("{prefix}:{i}")))
        .collect();
    let mut sets = Vec::with_capacity(REQUESTS);
    for (i, key) in keys.iter().enumerate() {
        let request = Request::cmd(Access::Write, "SET")
            .key(key)
            .arg(i.to_string())
            .build()
            .unwrap();
        let client = client.clone();
        sets.push(tokio::spawn(async move { client.call(request).await }));
    }
    for set in sets {
        assert_eq!(set.await.unwrap(), Ok(Value::Status("OK".into())));
    }
    let mut gets = Vec::with_capacity(REQUESTS);
    for key in &keys {
        let request = Request::cmd(Access::Read, "GET").key(key).build().unwrap();
        let client = client.clone();
        gets.push(tokio::spawn(async move { client.call(request).await }));
    }
    for (i, get) in gets.into_iter().enumerate() {
        assert_eq!(get.await.unwrap(), Ok(Value::from(i.to_string().as_str())));
    }

    let mut opened: BTreeMap<SocketAddr, Vec<u64>> = BTreeMap::new();
    for (&master, conn) in &mut admins {
        let now = client_list(conn);
        let new: Vec<u64> = now
            .keys()
            .filter(|id| !ids_before[&master].contains(id))
            .copied()
            .collect();
        assert_eq!(
            new.len(),
            1,
            "connections from the client to {master}: {new:?}"
        );
        let last = &now[&new[0]]["cmd"];
        assert!(
            last == "get" || last == "set",
            "{master}: last command {last}"
        );
        assert_eq!(
            accepted(conn) - accepted_before[&master],
            1,
            "connections accepted by {master}"
        );
        opened.insert(master, new);
    }

    client.close().await;
    eventually(
        Duration::from_secs(5),
        "the client's connections to close",
        || {
            let gone = admins.iter_mut().all(|(m, conn)| {
                let now = client_list(conn);
                opened[m].iter().all(|id| !now.contains_key(id))
            });
            std::future::ready(gone.then_some(()))
        },
    )
    .await;
}

both_drivers!(exclusive: ten_thousand_concurrent_requests_use_one_connection_per_master);
on_one_thread!(exclusive: ten_thousand_concurrent_requests_use_one_connection_per_master);
