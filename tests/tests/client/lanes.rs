//! Lanes ([`ClientOptions::lanes`]): a client of one node runs its driver's count by default
//! (`Runtime::one_node_lanes`: 4 on tokio's multi-thread runtime, 3 on its current-thread one,
//! 2 on async-std), each with its own connection, every one checked by `connect`; the calls of
//! one task stay in one lane (the same connection, so in order), whether awaited in turn or
//! joined in one poll; the calls of many tasks spread over all of them; `lanes(1)` is one
//! connection. The cluster's default of one lane is `many_requests_one_connection`'s one
//! connection per master.

use std::collections::BTreeSet;

use botmesh_redis_core::{Access, ClientOptions, Executor, Key, Request, Value};
use botmesh_redis_tests::conformance::{driver_name, Client, Runtime};
use botmesh_redis_tests::{both_drivers, on_one_thread, shared_single, unique_prefix};

const TASKS: usize = 64;

/// `CLIENT ID`: which of the node's connections the call went on.
async fn connection<R: Runtime>(client: &Client<R>) -> i64 {
    let request = Request::cmd(Access::Read, "CLIENT")
        .arg("ID")
        .build()
        .unwrap();
    match client.call(request).await {
        Ok(Value::Int(id)) => id,
        other => panic!("CLIENT ID answered {other:?}"),
    }
}

/// The connections the calls of `TASKS` tasks went on, each task's calls on one.
async fn connections_of_tasks<R: Runtime>(client: &Client<R>) -> BTreeSet<i64> {
    let mut tasks = Vec::with_capacity(TASKS);
    for _ in 0..TASKS {
        let client = client.clone();
        tasks.push(tokio::spawn(async move {
            let mut seen = BTreeSet::new();
            for _ in 0..5 {
                seen.insert(connection(&client).await);
            }
            let joined = futures_lite::future::zip(connection(&client), connection(&client));
            let (a, b) = joined.await;
            seen.extend([a, b]);
            assert_eq!(seen.len(), 1, "one task's calls went on {seen:?}");
            seen.into_iter().next().unwrap()
        }));
    }
    let mut used = BTreeSet::new();
    for task in tasks {
        used.insert(task.await.unwrap());
    }
    used
}

/// The lanes each driver states for one node, on the runtime the test runs on
/// (`docs/operations.md`).
fn stated_lanes<R: Runtime>() -> usize {
    match (driver_name::<R>(), R::one_thread(&R::spawner())) {
        ("tokio", false) => 4,
        ("tokio", true) => 3,
        ("async-std", _) => 2,
        (driver, _) => panic!("no lane count is stated for {driver}"),
    }
}

async fn one_node_runs_the_drivers_lanes_and_a_task_keeps_to_one<R: Runtime>() {
    let options = ClientOptions::url(shared_single().url());
    let client = Client::<R>::connect(options).await.unwrap();
    let lanes = stated_lanes::<R>();
    assert_eq!(client.lanes(), lanes);
    // `connect` checked every lane: each dialled its connection.
    let stats = client.stats();
    assert_eq!(
        (stats.dials, stats.connections),
        (lanes as u64, lanes as u64),
        "{stats:?}"
    );
    let used = connections_of_tasks(&client).await;
    // 64 tasks each on one lane of at most four: one lane left out would be a chance of at
    // most 4 * (3/4)^64, about 1 in 10^7.
    assert_eq!(used.len(), lanes, "the tasks' calls went on {used:?}");
    let stats = client.stats();
    assert_eq!(
        (stats.dials, stats.connections),
        (lanes as u64, lanes as u64),
        "{stats:?}"
    );
    client.close().await;
}

async fn one_lane_is_one_connection<R: Runtime>() {
    let options = ClientOptions::url(shared_single().url()).lanes(1);
    let client = Client::<R>::connect(options).await.unwrap();
    let used = connections_of_tasks(&client).await;
    assert_eq!(used.len(), 1, "the tasks' calls went on {used:?}");
    let stats = client.stats();
    assert_eq!((stats.dials, stats.connections), (1, 1), "{stats:?}");
    client.close().await;
}

/// Pairs of calls the task joins in one poll.
const PAIRS: usize = 3_000;

/// `RPUSH key item`.
fn push(key: &Key, item: String) -> Request {
    Request::cmd(Access::Write, "RPUSH")
        .key(key)
        .arg(item)
        .build()
        .unwrap()
}

async fn joined_calls_of_a_task_are_written_in_the_order_made<R: Runtime>() {
    // One lane. A task joins two pushes to a list in one poll, over and over, while another
    // task reads a large value on the same lane: its reply is applied a chunk at a time where
    // it is read, so the pair's first call often finds the lane's session busy and waits in
    // its inbox, and the second may find it free a moment later. The lengths the pushes answer
    // say whether they kept their order.
    let options = ClientOptions::url(shared_single().url()).lanes(1);
    let client = Client::<R>::connect(options).await.unwrap();
    let prefix = unique_prefix("joined-order");
    let (list, large) = (
        Key::new(format!("{prefix}:list")),
        Key::new(format!("{prefix}:large")),
    );
    let set = Request::cmd(Access::Write, "SET")
        .key(&large)
        .arg(vec![b'x'; 256 * 1024])
        .build()
        .unwrap();
    client.call(set).await.unwrap();
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let reader = {
        let (client, done) = (client.clone(), std::sync::Arc::clone(&done));
        tokio::spawn(async move {
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                let get = Request::cmd(Access::Read, "GET")
                    .key(&large)
                    .build()
                    .unwrap();
                client.call(get).await.unwrap();
            }
        })
    };
    for i in 0..PAIRS as i64 {
        let first = client.call(push(&list, format!("a{i}")));
        let second = client.call(push(&list, format!("b{i}")));
        let answers = futures_lite::future::zip(first, second).await;
        assert_eq!(
            answers,
            (Ok(Value::Int(2 * i + 1)), Ok(Value::Int(2 * i + 2))),
            "pair {i} went out in reverse"
        );
    }
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    reader.await.unwrap();
    client.close().await;
}

both_drivers!(
    one_node_runs_the_drivers_lanes_and_a_task_keeps_to_one,
    one_lane_is_one_connection,
    joined_calls_of_a_task_are_written_in_the_order_made
);
on_one_thread!(
    one_node_runs_the_drivers_lanes_and_a_task_keeps_to_one,
    one_lane_is_one_connection
);
