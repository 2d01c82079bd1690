//! One node's room: a client lets a bounded number of calls out to one node at once (256,
//! shared out over its lanes), and the plans of the calls beyond it wait in line, in order,
//! until calls end and make room.
//! Calls far past the room all complete, each with its own reply, on every driver and on one
//! thread; a node that stops answering holds no parked caller past its own deadline: once
//! no call has ended for a while, the room opens and every call ends by its request timeout,
//! not after a queue of others' timeouts; plans that say they wait (a turn polled until served)
//! take no room, and plans that wait without saying so hold the others back only until the
//! room sees that nothing ends.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use botmesh_redis_core::driver::{Plan, Reply, Step};
use botmesh_redis_core::{Access, ClientOptions, Error, Executor, Key, Request, Value};
use botmesh_redis_tests::conformance::{Client, Runtime};
use botmesh_redis_tests::{
    both_drivers, eventually, on_one_thread, shared_single, unique_prefix, ServerOptions,
    SingleNode,
};

/// Far past one node's room of 256 calls.
const CALLS: usize = 2_000;

/// A `SET` of `key` to `value`.
pub(super) fn set(key: &Key, value: usize) -> Request {
    Request::cmd(Access::Write, "SET")
        .key(key)
        .arg(value.to_string())
        .build()
        .unwrap()
}

/// A `GET` of `key`.
pub(super) fn get(key: &Key) -> Request {
    Request::cmd(Access::Read, "GET").key(key).build().unwrap()
}

/// `calls` callers at once, each setting its own key and reading it back: each gets its own
/// value, and some of them parked.
pub(super) async fn each_caller_gets_its_reply<R: Runtime>(client: &Client<R>, calls: usize) {
    let prefix = unique_prefix("room");
    let mut tasks = Vec::with_capacity(calls);
    for i in 0..calls {
        let client = client.clone();
        let key = Key::new(format!("{prefix}:{i}"));
        tasks.push(tokio::spawn(async move {
            client.call(set(&key, i)).await.unwrap();
            client.call(get(&key)).await.unwrap()
        }));
    }
    for (i, task) in tasks.into_iter().enumerate() {
        assert_eq!(
            task.await.unwrap(),
            Value::from(i.to_string().as_str()),
            "call {i}"
        );
    }
    assert!(client.stats().parked > 0, "{calls} callers never parked");
}

async fn calls_past_the_room_all_complete_with_their_replies<R: Runtime>() {
    let client = Client::<R>::connect(ClientOptions::url(shared_single().url()))
        .await
        .unwrap();
    each_caller_gets_its_reply(&client, CALLS).await;
    // Closed, the client leaves no task behind: the lanes' line keepers end with it.
    client.close().await;
    eventually(
        Duration::from_secs(5),
        "every task of the client to end",
        || std::future::ready((client.stats().tasks == 0).then_some(())),
    )
    .await;
}

/// The request timeout of the stopped node's calls.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(1);
/// Scheduling noise on a loaded 2-core machine. Callers held in line until room came back
/// would end a request timeout apart, one room after another: 2,000 calls in 256 rooms, eight
/// seconds and more.
const MARGIN: Duration = Duration::from_millis(1500);

async fn a_node_that_stops_answering_holds_no_caller_past_its_deadline<R: Runtime>() {
    let _turn = botmesh_redis_tests::exclusive().await;
    let node = SingleNode::start(ServerOptions::new());
    let options = ClientOptions::url(node.url()).request_timeout(REQUEST_TIMEOUT);
    let client = Client::<R>::connect(options).await.unwrap();
    let key = Key::new(unique_prefix("room-stopped"));
    client.call(set(&key, 1)).await.unwrap();
    node.server().pause().unwrap();
    let mut tasks = Vec::with_capacity(CALLS);
    for _ in 0..CALLS {
        let client = client.clone();
        let key = key.clone();
        tasks.push(tokio::spawn(async move {
            let started = Instant::now();
            let result = client.call(get(&key)).await;
            (result, started.elapsed())
        }));
    }
    let mut slowest = Duration::ZERO;
    for task in tasks {
        let (result, took) = task.await.unwrap();
        assert!(
            result.is_err(),
            "a call to a stopped node answered {result:?}"
        );
        slowest = slowest.max(took);
    }
    node.server().resume().unwrap();
    assert!(
        slowest < REQUEST_TIMEOUT + MARGIN,
        "a call to the stopped node took {slowest:?}, past its request timeout of \
         {REQUEST_TIMEOUT:?} and a margin of {MARGIN:?}"
    );
    client.close().await;
}

/// A plan that waits, then reads a key: what a turn's polling looks like to the client.
/// `says` is its [`Plan::may_wait`]; `finished` counts the plans of its kind that ended.
struct WaitThenGet {
    wait: Duration,
    key: Key,
    says: bool,
    waited: bool,
    finished: Arc<AtomicUsize>,
}

impl Plan for WaitThenGet {
    type Output = Value;

    fn operation(&self) -> &'static str {
        "wait_then_get"
    }

    fn may_wait(&self) -> bool {
        self.says
    }

    fn start(&mut self) -> Step<Value> {
        Step::Wait(self.wait)
    }

    fn resume(&mut self, replies: Vec<Reply>) -> Step<Value> {
        if !std::mem::replace(&mut self.waited, true) {
            return Step::Send(get(&self.key).into());
        }
        self.finished.fetch_add(1, Ordering::SeqCst);
        match replies.into_iter().next() {
            Some(reply) => Step::Done(reply),
            None => Step::Done(Err(Error::Closed)),
        }
    }
}

/// Past one lane's room of 256 (a client of one lane).
const WAITERS: usize = 300;

/// Starts `WAITERS` plans that wait `wait` and say so or not; yields their tasks and the count
/// of those that ended.
fn start_waiters<R: Runtime>(
    client: &Client<R>,
    key: &Key,
    wait: Duration,
    says: bool,
) -> (Vec<tokio::task::JoinHandle<Value>>, Arc<AtomicUsize>) {
    let finished = Arc::new(AtomicUsize::new(0));
    let tasks = (0..WAITERS)
        .map(|_| {
            let client = client.clone();
            let plan = WaitThenGet {
                wait,
                key: key.clone(),
                says,
                waited: false,
                finished: Arc::clone(&finished),
            };
            tokio::spawn(async move { client.run(plan).await.unwrap() })
        })
        .collect();
    (tasks, finished)
}

/// A client of one lane (a room of 256), and a key set to `value`.
async fn one_lane<R: Runtime>(name: &str, value: usize) -> (Client<R>, Key) {
    let options = ClientOptions::url(shared_single().url()).lanes(1);
    let client = Client::<R>::connect(options).await.unwrap();
    let key = Key::new(unique_prefix(name));
    client.call(set(&key, value)).await.unwrap();
    (client, key)
}

async fn plans_that_say_they_wait_take_no_room<R: Runtime>() {
    let (client, key) = one_lane::<R>("room-waiters", 7).await;
    let (waiters, _) = start_waiters(&client, &key, Duration::from_millis(300), true);
    // Counted, 44 of them would park; none does, nor a call made beside them.
    assert_eq!(client.call(get(&key)).await.unwrap(), Value::from("7"));
    for waiter in waiters {
        assert_eq!(waiter.await.unwrap(), Value::from("7"));
    }
    assert_eq!(client.stats().parked, 0);
    client.close().await;
}

async fn plans_that_wait_without_saying_so_hold_others_only_briefly<R: Runtime>() {
    let (client, key) = one_lane::<R>("room-silent", 8).await;
    let (waiters, finished) = start_waiters(&client, &key, Duration::from_secs(5), false);
    // 256 of them fill the lane's room, the rest park.
    let parked = eventually(
        Duration::from_secs(5),
        "the waiters past the room parked",
        || {
            let parked = client.stats().parked;
            async move { (parked >= (WAITERS - 256) as u64).then_some(parked) }
        },
    )
    .await;
    assert_eq!(parked, (WAITERS - 256) as u64);
    // A call made now parks too, and comes in once the room has seen nothing end for a
    // while: long before any of the waiters ends.
    assert_eq!(client.call(get(&key)).await.unwrap(), Value::from("8"));
    assert_eq!(client.stats().parked, parked + 1);
    assert_eq!(finished.load(Ordering::SeqCst), 0, "a waiter ended first");
    for waiter in waiters {
        assert_eq!(waiter.await.unwrap(), Value::from("8"));
    }
    client.close().await;
}

/// A call the node takes `SLOW_US` to answer (it spins in a script; declared a write, so
/// that a call sent and not answered in time says its outcome is unknown): a node that
/// answers steadily, slower than calls arrive.
fn slow_call() -> Request {
    const SPIN: &str = "local t = redis.call('TIME') \
        local start = t[1] * 1000000 + t[2] \
        repeat t = redis.call('TIME') until t[1] * 1000000 + t[2] - start >= tonumber(ARGV[1]) \
        return 1";
    Request::cmd(Access::Write, "EVAL")
        .arg(SPIN)
        .arg(0u32)
        .arg(SLOW_US)
        .build()
        .unwrap()
}

const SLOW_US: u64 = 100;

const SLOW_CALLS: usize = 20_000;

async fn a_parked_call_gives_up_at_its_own_deadline_never_sent<R: Runtime>() {
    let _turn = botmesh_redis_tests::exclusive().await;
    let node = SingleNode::start(ServerOptions::new());
    let options = ClientOptions::url(node.url())
        .request_timeout(REQUEST_TIMEOUT)
        .lanes(1);
    let client = Client::<R>::connect(options).await.unwrap();
    // 20,000 calls at 10,000 a second at most: the node answers a lane's room every 26 ms,
    // so the room never sees it quiet, and the line would take two seconds to drain.
    let tasks: Vec<_> = (0..SLOW_CALLS)
        .map(|_| {
            let client = client.clone();
            tokio::spawn(async move {
                let started = Instant::now();
                let result = client.call(slow_call()).await;
                (result, started.elapsed())
            })
        })
        .collect();
    let (mut answered, mut never_sent, mut unknown, mut slowest) = (0, 0, 0, Duration::ZERO);
    for task in tasks {
        let (result, took) = task.await.unwrap();
        match result {
            Ok(value) => {
                assert_eq!(value, Value::Int(1));
                answered += 1;
            }
            Err(Error::Timeout {
                outcome_unknown: false,
            }) => {
                assert!(took >= REQUEST_TIMEOUT, "a call gave up after {took:?}");
                never_sent += 1;
            }
            // Let out with its deadline near (its time parked counts against its request
            // timeout), written, and not answered before that deadline.
            Err(Error::Timeout {
                outcome_unknown: true,
            }) => {
                assert!(took >= REQUEST_TIMEOUT, "a call timed out after {took:?}");
                unknown += 1;
            }
            Err(e) => panic!("a slow call ended with {e:?} after {took:?}"),
        }
        slowest = slowest.max(took);
    }
    // The node spins 100 µs a call: at most 10,000 answered in the request timeout, the
    // rest given up parked, never written, but for the few let out in the last turn of the
    // room before their deadline.
    assert!(
        answered > 0 && never_sent > unknown,
        "{answered} answered, {never_sent} never sent, {unknown} written and timed out"
    );
    assert!(
        slowest < REQUEST_TIMEOUT + MARGIN,
        "a call took {slowest:?}, past its request timeout of {REQUEST_TIMEOUT:?} and a \
         margin of {MARGIN:?}"
    );
    let parked = client.stats().parked;
    assert!(
        parked >= never_sent,
        "{parked} parked, {never_sent} never sent"
    );
    client.close().await;
}

both_drivers!(calls_past_the_room_all_complete_with_their_replies);
both_drivers!(plans_that_say_they_wait_take_no_room);
both_drivers!(plans_that_wait_without_saying_so_hold_others_only_briefly);
on_one_thread!(calls_past_the_room_all_complete_with_their_replies);

mod stopped {
    use super::*;

    both_drivers!(exclusive: a_node_that_stops_answering_holds_no_caller_past_its_deadline);
    both_drivers!(exclusive: a_parked_call_gives_up_at_its_own_deadline_never_sent);
    on_one_thread!(exclusive: a_node_that_stops_answering_holds_no_caller_past_its_deadline);
}
