//! Work done where it arises: a lone caller writes its own call and the reader applies the
//! reply, without waking the session task (the client's counters show it), even beside a plan
//! that waits between its steps (a keeper's period); and a caller on
//! another runtime that does so spawns the client's tasks on the client's own runtime, so the
//! connection it opened outlives the caller's runtime.

use std::time::Duration;

use botmesh_redis_core::driver::{Plan, Reply, Step};
use botmesh_redis_core::{ClientOptions, Executor, Key, Value};
use botmesh_redis_tests::conformance::{get, Client, Runtime};
use botmesh_redis_tests::{both_drivers, eventually, shared_single, ServerOptions, SingleNode};

const ROUNDS: u64 = 50;

/// A plan that waits a minute between its steps, as a keeper does between renewals.
struct Pause;

impl Plan for Pause {
    type Output = ();

    fn operation(&self) -> &'static str {
        "pause"
    }

    fn start(&mut self) -> Step<()> {
        Step::Wait(Duration::from_secs(60))
    }

    fn resume(&mut self, _: Vec<Reply>) -> Step<()> {
        Step::Done(Ok(()))
    }
}

async fn a_lone_caller_does_not_wake_the_session_task<R: Runtime>() {
    // One lane: the waiting plan and the lone caller share its session.
    let options = ClientOptions::url(shared_single().url()).lanes(1);
    let client = Client::<R>::connect(options).await.unwrap();
    client.detach(Pause);
    let key = Key::new("botmesh-inline-absent");
    // The first call may arm the session's first timer, which wakes the task once.
    get(&client, &key).await;
    let before = client.stats();
    for _ in 0..ROUNDS {
        assert_eq!(get(&client, &key).await, Value::Nil);
    }
    let after = client.stats();
    let (inline, passes) = (after.inline - before.inline, after.passes - before.passes);
    // Two inputs a call (the submit, the reply), each applied where it arose unless the hub
    // was busy at that moment (the session task at a timer).
    assert!(
        inline >= ROUNDS,
        "{inline} inline inputs for {ROUNDS} calls"
    );
    assert!(
        passes < ROUNDS / 2,
        "the session task woke {passes} times for {ROUNDS} lone calls"
    );
    client.close().await;
}

async fn a_caller_on_another_runtime_opens_connections_on_the_clients<R: Runtime>() {
    let node = SingleNode::start(ServerOptions::new());
    // One lane: this task's calls and the other runtime's share its connection.
    let options = ClientOptions::url(node.url()).lanes(1);
    let client = Client::<R>::connect(options).await.unwrap();
    let key = Key::new("absent");
    // The client's connection goes, so that the next call dials: from the other runtime.
    let mut admin = node.conn().unwrap();
    admin
        .cmd(&["CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes"])
        .unwrap();
    eventually(Duration::from_secs(5), "the connection to close", || {
        std::future::ready((client.stats().connections == 0).then_some(()))
    })
    .await;
    let dials = client.stats().dials;
    let (other, other_key) = (client.clone(), key.clone());
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            for _ in 0..ROUNDS {
                assert_eq!(get(&other, &other_key).await, Value::Nil);
            }
        });
        // Every task spawned on this runtime ends with it.
    })
    .join()
    .unwrap();
    assert_eq!(
        client.stats().dials,
        dials + 1,
        "one dial, from the other runtime"
    );
    // The connection's reader runs on the client's runtime: it is still there to read.
    let answer = tokio::time::timeout(Duration::from_secs(2), get(&client, &key)).await;
    assert_eq!(answer, Ok(Value::Nil));
    assert_eq!(client.stats().dials, dials + 1, "no dial again");
    client.close().await;
}

both_drivers!(
    a_lone_caller_does_not_wake_the_session_task,
    a_caller_on_another_runtime_opens_connections_on_the_clients
);
