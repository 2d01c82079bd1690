//! A plan that panics (a bug in a plan of the user's, whose `start` and `resume` run inside the
//! client) ends its own call with `Error::PlanPanicked` and nobody else's, whichever task ran
//! it: its caller's (a lone call starts its own plan), a connection's reader (which applies a
//! lone call's reply), or the session task.

use std::time::Duration;

use botmesh_redis_core::driver::{Batch, Plan, Reply, Step};
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

/// A plan that sends a `GET` and panics on its reply.
struct PanicsOnReply(Key);

impl Plan for PanicsOnReply {
    type Output = ();

    fn operation(&self) -> &'static str {
        "panics_on_reply"
    }

    fn start(&mut self) -> Step<()> {
        Step::Send(Batch::from(get(&self.0)))
    }

    fn resume(&mut self, _: Vec<Reply>) -> Step<()> {
        panic!("a bug in reading the reply");
    }
}

fn panicked(operation: &'static str, message: &str, outcome_unknown: bool) -> Error {
    Error::PlanPanicked {
        operation,
        message: message.to_owned(),
        outcome_unknown,
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
    assert_eq!(
        client.run(Panics).await,
        Err(panicked("panics", "a plan's own bug", false))
    );
    assert_lane_goes_on(&client, &key).await;
    client.close().await;
}

async fn a_plan_that_panics_on_its_reply_ends_its_call_and_keeps_the_reader<R: Runtime>() {
    // One lane, idle: a lone call's reply is applied by the connection's reader, which runs
    // the plan's `resume`. Its caller waited for good before, and the reader was gone.
    let options = ClientOptions::url(shared_single().url()).lanes(1);
    let client = Client::<R>::connect(options).await.unwrap();
    let key = Key::new(unique_prefix("plan-panics-reply"));
    for _ in 0..3 {
        let answer = tokio::time::timeout(ANSWER_WITHIN, client.run(PanicsOnReply(key.clone())));
        assert_eq!(
            answer
                .await
                .expect("the panicking plan's caller waits forever"),
            Err(panicked(
                "panics_on_reply",
                "a bug in reading the reply",
                true
            ))
        );
    }
    let dials = client.stats().dials;
    assert_lane_goes_on(&client, &key).await;
    assert_eq!(client.stats().dials, dials, "the connection was not lost");
    client.close().await;
}

/// The lane's next calls, lone or many at once, are answered.
async fn assert_lane_goes_on<R: Runtime>(client: &Client<R>, key: &Key) {
    for _ in 0..3 {
        let answer = tokio::time::timeout(ANSWER_WITHIN, client.call(get(key))).await;
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
}

async fn a_plan_that_panics_on_the_session_task_ends_only_its_call<R: Runtime>() {
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
    let ended = tokio::time::timeout(ANSWER_WITHIN, panics).await;
    assert_eq!(
        ended
            .expect("the panicking plan's caller waits forever")
            .unwrap(),
        Err(panicked("panics", "a plan's own bug", false))
    );
    // The session goes on: the held call is answered once the list has an element, and later
    // calls are answered. The whole lane ended with `Closed` before, for good.
    let push = Request::cmd(Access::Write, "RPUSH")
        .key(&list)
        .arg("x")
        .build()
        .unwrap();
    // From another client: the lane's one connection is blocked in the `BLPOP`.
    let other = Client::<R>::connect(ClientOptions::url(shared_single().url()))
        .await
        .unwrap();
    assert_eq!(other.call(push).await, Ok(Value::Int(1)));
    other.close().await;
    let held = tokio::time::timeout(ANSWER_WITHIN, held).await;
    assert_eq!(
        held.expect("the held call waits forever").unwrap(),
        Ok(Value::Array(vec![
            Value::Bulk(list.to_bytes()),
            Value::Bulk("x".into())
        ]))
    );
    assert_lane_goes_on(&client, &list).await;
    client.close().await;
}

both_drivers!(
    a_plan_that_panics_on_its_callers_task_leaves_the_other_calls_going,
    a_plan_that_panics_on_its_reply_ends_its_call_and_keeps_the_reader,
    a_plan_that_panics_on_the_session_task_ends_only_its_call
);
