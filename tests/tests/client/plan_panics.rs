//! A plan that panics (a bug in a plan of the user's, whose `start` and `resume` run inside the
//! client) takes its own call with it and nobody else's. Run on its caller's task, the panic
//! reaches that task and the lane's other calls go on; run on the session task, the lane's
//! calls end with an error instead of waiting for a task that is gone.

use std::time::Duration;

use botmesh_redis_core::driver::{Plan, Reply, Step};
use botmesh_redis_core::{Access, ClientOptions, Error, Executor, Key, Request, Value};
use botmesh_redis_tests::conformance::{Client, Runtime};
use botmesh_redis_tests::{both_drivers, eventually, shared_single, unique_prefix};

/// A plan whose first step panics.
struct Panics;

impl Plan for Panics {
    type Output = ();

    fn operation(&self) -> &'static str {
        "panics"
    }

    fn start(&mut self) -> Step<()> {
        panic!("a plan's own bug");
    }

    fn resume(&mut self, _: Vec<Reply>) -> Step<()> {
        Step::Done(Ok(()))
    }
}

/// Long enough for any call on a loaded machine, short of a hang.
const ANSWER_WITHIN: Duration = Duration::from_secs(10);

fn get(key: &Key) -> Request {
    Request::cmd(Access::Read, "GET").key(key).build().unwrap()
}

async fn a_plan_that_panics_on_its_callers_task_leaves_the_other_calls_going<R: Runtime>() {
    // One lane, idle: the lone caller starts its plan itself, on its own task.
    let options = ClientOptions::url(shared_single().url()).lanes(1);
    let client = Client::<R>::connect(options).await.unwrap();
    let key = Key::new(unique_prefix("plan-panics"));
    let caller = {
        let client = client.clone();
        tokio::spawn(async move { client.run(Panics).await })
    };
    assert!(
        caller.await.unwrap_err().is_panic(),
        "the caller's task panics"
    );
    // The lane's next calls, lone or many at once, are answered.
    for _ in 0..3 {
        let answer = tokio::time::timeout(ANSWER_WITHIN, client.call(get(&key))).await;
        assert_eq!(
            answer.expect("a call after the panic waits forever"),
            Ok(Value::Nil)
        );
    }
    let many: Vec<_> = (0..32)
        .map(|_| {
            let (client, key) = (client.clone(), key.clone());
            tokio::spawn(async move { client.call(get(&key)).await })
        })
        .collect();
    for call in many {
        let answer = tokio::time::timeout(ANSWER_WITHIN, call).await;
        assert_eq!(
            answer
                .expect("a call after the panic waits forever")
                .unwrap(),
            Ok(Value::Nil)
        );
    }
    client.close().await;
}

async fn a_plan_that_panics_on_the_session_task_ends_the_lanes_calls<R: Runtime>() {
    // One lane, with a call out that the server holds: the next plan is not alone, so it goes
    // to the session task, which starts it there.
    let options = ClientOptions::url(shared_single().url()).lanes(1);
    let client = Client::<R>::connect(options).await.unwrap();
    let list = Key::new(unique_prefix("plan-panics-list"));
    let writes = client.stats().writes;
    let held = {
        let client = client.clone();
        let blpop = Request::cmd(Access::Write, "BLPOP")
            .key(&list)
            .arg("0")
            .build()
            .unwrap();
        tokio::spawn(async move { client.call(blpop).await })
    };
    eventually(ANSWER_WITHIN, "the held call to be written", || {
        std::future::ready((client.stats().writes > writes).then_some(()))
    })
    .await;
    let panics = {
        let client = client.clone();
        tokio::spawn(async move { client.run(Panics).await })
    };
    // The session task is gone; every call of its lane ends, none waits for it.
    let ended = tokio::time::timeout(ANSWER_WITHIN, panics).await;
    assert!(
        matches!(
            ended.expect("the panicking plan's caller waits forever"),
            Ok(Err(Error::Closed))
        ),
        "the panicking plan's call ends as the lane's others do"
    );
    let held = tokio::time::timeout(ANSWER_WITHIN, held).await;
    match held.expect("the held call waits forever").unwrap() {
        Err(Error::Closed | Error::ReplyLost { .. }) => {}
        other => panic!("the held call ended with {other:?}"),
    }
    let after = tokio::time::timeout(ANSWER_WITHIN, client.call(get(&list))).await;
    assert_eq!(
        after.expect("a later call waits forever"),
        Err(Error::Closed)
    );
    client.close().await;
}

both_drivers!(
    a_plan_that_panics_on_its_callers_task_leaves_the_other_calls_going,
    a_plan_that_panics_on_the_session_task_ends_the_lanes_calls
);
