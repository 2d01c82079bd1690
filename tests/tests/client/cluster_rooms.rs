//! A cluster's room: a lane lets at most 1,024 calls out at once, at most half of them to one
//! node, which it finds by the call's slot before the session routes it. Calls far past the
//! room all complete with their replies, and a master that stops answering fills its own share
//! only, its line let out past it included: the other masters' calls go out at once, none of
//! them parked.

use std::time::Duration;

use botmesh_redis_core::{ClientOptions, Error, Executor, Key, Value};
use botmesh_redis_tests::conformance::{Client, Runtime};
use botmesh_redis_tests::counters::owner;
use botmesh_redis_tests::{
    both_drivers, eventually, shared_cluster, unique_prefix, ClusterOptions, RedisCluster,
};

use super::admission::{each_caller_gets_its_reply, get, set};

/// Far past a cluster lane's room of 1,024 calls (a cluster client has one lane).
const CALLS: usize = 4_000;

async fn calls_past_a_lanes_room_all_complete_with_their_replies<R: Runtime>() {
    let client = Client::<R>::connect(ClientOptions::cluster(shared_cluster().seeds()))
        .await
        .unwrap();
    each_caller_gets_its_reply(&client, CALLS).await;
    client.close().await;
}

/// A `GET` of each key, each in a task of its own.
fn spawn_gets<R: Runtime>(
    client: &Client<R>,
    keys: &[Key],
) -> Vec<tokio::task::JoinHandle<Result<Value, Error>>> {
    keys.iter()
        .map(|key| {
            let (client, key) = (client.clone(), key.clone());
            tokio::spawn(async move { client.call(get(&key)).await })
        })
        .collect()
}

/// A node's share of a cluster lane's room of 1,024 (a cluster client has one lane).
const SHARE: usize = 512;
/// Calls to the stopped master: its share, and the rest parked, more than the lane's room in
/// all. Its line goes out 100 ms after it stopped answering.
const STUCK: usize = 1_500;
/// Calls to the other two masters, under the rest of the lane's room.
const HEALTHY: usize = 300;

async fn a_stopped_master_fills_its_own_share_only<R: Runtime>() {
    // No replicas and a node timeout past the test: the stopped master is neither failed over
    // nor marked failed (which would refuse every slot, full coverage being required).
    let options = ClusterOptions::new()
        .replicas_per_master(0)
        .node_timeout(Duration::from_secs(60));
    let cluster = RedisCluster::start(options);
    // Deadlines past the test: the stopped master's calls end only when it resumes.
    let options = ClientOptions::cluster(cluster.seeds())
        .response_timeout(Duration::from_secs(30))
        .request_timeout(Duration::from_secs(30));
    let client = Client::<R>::connect(options).await.unwrap();
    let ranges = cluster.slots().unwrap();
    let stopped = ranges[0].master;
    let prefix = unique_prefix("stopped-room");
    let (mut on_stopped, mut elsewhere) = (Vec::new(), Vec::new());
    for i in 0.. {
        let key = Key::new(format!("{prefix}:{i}"));
        match owner(&ranges, key.slot()) == stopped {
            true if on_stopped.len() < STUCK => on_stopped.push(key),
            false if elsewhere.len() < HEALTHY => elsewhere.push(key),
            _ if on_stopped.len() == STUCK && elsewhere.len() == HEALTHY => break,
            _ => {}
        }
    }
    // Every master answered once: the client has the map and a connection to each.
    for key in [&on_stopped[0], &elsewhere[0]] {
        assert_eq!(client.call(get(key)).await.unwrap(), Value::Nil);
    }
    let parked = client.stats().parked;

    cluster.server(stopped).unwrap().pause().unwrap();
    let stuck = spawn_gets(&client, &on_stopped);
    eventually(
        Duration::from_secs(10),
        "the stopped master's calls past its share to park",
        || {
            let now = client.stats().parked - parked;
            std::future::ready((now == (STUCK - SHARE) as u64).then_some(()))
        },
    )
    .await;
    // The other masters' calls, one at a time and then all at once: answered, none parked,
    // before the stopped master's line goes out and after, when its calls out are far past
    // the lane's room but count against the stopped master alone.
    for (i, key) in elsewhere.iter().enumerate() {
        let ok = Value::Status("OK".into());
        assert_eq!(client.call(set(key, i)).await, Ok(ok), "{key:?}");
    }
    eventually(
        Duration::from_secs(10),
        "the stopped master's line to go out",
        || std::future::ready((client.stats().in_line == 0).then_some(())),
    )
    .await;
    let healthy = spawn_gets(&client, &elsewhere);
    for (i, task) in healthy.into_iter().enumerate() {
        assert_eq!(task.await.unwrap(), Ok(Value::from(i.to_string().as_str())));
    }
    assert_eq!(
        client.stats().parked - parked,
        (STUCK - SHARE) as u64,
        "a call to a master that answers was parked behind the stopped one's"
    );

    cluster.server(stopped).unwrap().resume().unwrap();
    for task in stuck {
        assert_eq!(task.await.unwrap(), Ok(Value::Nil));
    }
    client.close().await;
}

both_drivers!(calls_past_a_lanes_room_all_complete_with_their_replies);

mod stopped {
    use super::*;

    both_drivers!(exclusive: a_stopped_master_fills_its_own_share_only);
}
