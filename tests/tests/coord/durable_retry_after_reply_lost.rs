//! Durable `begin` and `ack` are safe to call again after `Error::ReplyLost`: the retry of a
//! `begin` that ran tells its instance the id is still its own (not a duplicate delivery), and
//! the retry of an `ack` that ran says the send was already acked (not that the claim was lost).
//! A lock's grant whose reply was lost is given back before the error is reported.
//!
//! The lost reply is real: on a node with `client-output-buffer-limit normal 64kb 0 0`, the
//! `begin` (or `ack`) goes out in one write with a script that returns 200 kB on the same
//! connection. The server runs both, the second reply overflows the output buffer, and the
//! server closes the connection before sending a byte: both calls end as `ReplyLost` after they
//! ran. Each test (on each driver) starts its own node, since the limit affects every client.
//! The same retries are then checked on every target without the lost reply.

use std::time::Duration;

use bytes::Bytes;

use botmesh_redis_core::driver::coord;

use botmesh_redis_core::driver::{Plan, Reply, Step};
use botmesh_redis_core::Script;
use botmesh_redis_core::{
    Access, ClientOptions, ConfigError, Error, Executor, Key, Keyspace, Layout, Request,
};
use botmesh_redis_core::{Acked, Begun};
use botmesh_redis_core::{Durability, Limit};
use botmesh_redis_tests::conformance::{Client, Runtime};
use botmesh_redis_tests::coord::Target;
use botmesh_redis_tests::{both_drivers, eventually, ServerOptions, SingleNode};

const WINDOW: Duration = Duration::from_secs(60);
const TABLE: &str = "t";

/// Returns a reply as long as asked.
static BIG_REPLY: Script = Script::new(
    "big_reply",
    "-- KEYS[1] any key (routes the call)\n\
     -- ARGV[1] the length of the reply\n\
     -- Returns ARGV[1] times 'x'.\n\
     return string.rep('x', tonumber(ARGV[1]))\n",
);

fn big_reply(len: &'static str) -> Request {
    Request::script(
        &BIG_REPLY,
        Access::Read,
        vec![Key::new("anything")],
        vec![Bytes::from_static(len.as_bytes())],
    )
    .unwrap()
}

/// Sends its requests in one batch (one write on a single node's connection) and yields their
/// replies.
struct Together(Option<Vec<Request>>);

impl Plan for Together {
    type Output = Vec<Reply>;

    fn operation(&self) -> &'static str {
        "together"
    }

    fn start(&mut self) -> Step<Vec<Reply>> {
        Step::Send(self.0.take().unwrap_or_default().into())
    }

    fn resume(&mut self, replies: Vec<Reply>) -> Step<Vec<Reply>> {
        Step::Done(Ok(replies))
    }
}

/// The one request of a one-request plan.
fn request_of<P: Plan>(mut plan: P) -> Request {
    match plan.start() {
        Step::Send(requests) if requests.len() == 1 => requests.into_vec().remove(0),
        _ => panic!("not a one-request plan"),
    }
}

/// Runs `request` so that it runs on the server and its reply is lost.
async fn run_and_lose_the_reply<R: Runtime>(client: &Client<R>, request: Request) {
    let replies = client
        .run(Together(Some(vec![request, big_reply("200000")])))
        .await
        .unwrap();
    assert_eq!(replies.len(), 2);
    for reply in replies {
        let error = reply.unwrap_err();
        assert!(matches!(error, Error::ReplyLost { .. }), "{error:?}");
    }
}

async fn node_and_client<R: Runtime>() -> (SingleNode, Client<R>, Durability<Client<R>>, Keyspace) {
    let node = SingleNode::start(
        ServerOptions::new().config("client-output-buffer-limit normal 64kb 0 0"),
    );
    let client = Client::<R>::connect(ClientOptions::url(node.url()))
        .await
        .unwrap();
    let ks = Keyspace::new(Layout::Cluster, "retry").unwrap();
    let table = Durability::new(client.clone(), ks.clone(), TABLE).unwrap();
    // Load both scripts first, so that the batch goes out as two EVALSHA in one write.
    assert_eq!(
        client.call(big_reply("3")).await.unwrap(),
        botmesh_redis_core::Value::from("xxx")
    );
    assert!(table.forget("warm-up", "a").await.is_ok());
    (node, client, table, ks)
}

async fn begin_retried_after_reply_lost_is_still_mine<R: Runtime>() {
    let (_node, client, table, ks) = node_and_client::<R>().await;
    let begin = coord::journal_begin(&ks, TABLE, "in:1", "instance-a", WINDOW).unwrap();
    run_and_lose_the_reply(&client, request_of(begin)).await;
    // It ran: another instance sees a duplicate, and the same instance, retrying, is told the
    // id is still its own.
    assert_eq!(
        table.begin("in:1", "instance-b", WINDOW).await.unwrap(),
        Begun::Duplicate
    );
    assert_eq!(
        table.begin("in:1", "instance-a", WINDOW).await.unwrap(),
        Begun::ByThisInstance
    );
    assert!(table
        .begin("in:1", "instance-a", WINDOW)
        .await
        .unwrap()
        .is_mine());
    client.close().await;
}

async fn ack_retried_after_reply_lost_says_already_acked<R: Runtime>() {
    let (_node, client, table, ks) = node_and_client::<R>().await;
    assert!(table
        .enqueue("send:1", Bytes::from_static(b"hi"), WINDOW)
        .await
        .unwrap());
    let claimed = table
        .claim("instance-a", Limit::of::<10>(), Duration::from_secs(60))
        .await
        .unwrap();
    assert_eq!(claimed.len(), 1);
    let ack = coord::outbox_ack(&ks, TABLE, "send:1", "instance-a").unwrap();
    run_and_lose_the_reply(&client, request_of(ack)).await;
    // It ran: the retry says so, and the send is gone from the queue and cannot be queued
    // again within the window.
    assert_eq!(
        table.ack("send:1", "instance-a").await.unwrap(),
        Acked::Already
    );
    assert_eq!(
        table.ack("send:1", "instance-a").await.unwrap(),
        Acked::Already
    );
    assert!(matches!(
        table.ack("send:1", "instance-b").await,
        Err(Error::NotHolder { .. })
    ));
    assert!(!table
        .enqueue("send:1", Bytes::from_static(b"again"), WINDOW)
        .await
        .unwrap());
    assert!(table
        .claim("instance-b", Limit::of::<10>(), Duration::from_secs(60))
        .await
        .unwrap()
        .is_empty());
    client.close().await;
}

/// Runs `plan`'s first request in one write with `extra` (whose reply is dropped), then the
/// rest of `plan` alone.
struct WithFirst<P> {
    plan: P,
    extra: Option<Request>,
    first: bool,
}

impl<P: Plan> Plan for WithFirst<P> {
    type Output = P::Output;

    fn operation(&self) -> &'static str {
        self.plan.operation()
    }

    fn start(&mut self) -> Step<P::Output> {
        match self.plan.start() {
            Step::Send(requests) => {
                let mut requests = requests.into_vec();
                requests.extend(self.extra.take());
                self.first = true;
                Step::Send(requests.into())
            }
            other => other,
        }
    }

    fn resume(&mut self, mut replies: Vec<Reply>) -> Step<P::Output> {
        if std::mem::take(&mut self.first) {
            replies.pop();
        }
        self.plan.resume(replies)
    }
}

/// The grant runs and its reply is lost with the connection: the plan gives it back (the
/// owner's release, on a new connection) and reports `ReplyLost`, so the lock is free at once
/// for the next owner, with the next fence. Before, it stayed held for its TTL by an owner
/// nobody would release.
async fn a_lock_grant_whose_reply_was_lost_is_given_back<R: Runtime>() {
    let (_node, client, _table, ks) = node_and_client::<R>().await;
    let ttl = Duration::from_secs(60);
    // Loads the grant's script, so that the grant runs in the write that loses its reply.
    let warm_up = coord::lock_acquire(&ks, "warm-up", "r0#1", ttl).unwrap();
    assert_eq!(client.run(warm_up).await.unwrap(), Some(1));
    let grant = coord::lock_acquire(&ks, "orders", "r1#1", ttl).unwrap();
    let error = client
        .run(WithFirst {
            plan: grant,
            extra: Some(big_reply("200000")),
            first: false,
        })
        .await
        .unwrap_err();
    assert!(matches!(error, Error::ReplyLost { .. }), "{error:?}");
    let next = coord::lock_acquire(&ks, "orders", "r2#1", ttl).unwrap();
    assert_eq!(client.run(next).await.unwrap(), Some(2));
    client.close().await;
}

/// The same retries on every target, as calls made twice (what a retry after a lost reply is,
/// seen from the server), with the window's pruning: once the window passed, the id is new.
async fn retries_on_every_target<R: Runtime>(target: Target) {
    let client = target.client::<R>().await;
    let table = Durability::new(client.clone(), target.keyspace("coord-retry"), TABLE).unwrap();

    assert_eq!(table.begin("m", "a", WINDOW).await.unwrap(), Begun::First);
    assert_eq!(
        table.begin("m", "a", WINDOW).await.unwrap(),
        Begun::ByThisInstance
    );
    assert_eq!(
        table.begin("m", "b", WINDOW).await.unwrap(),
        Begun::Duplicate
    );
    // A forgotten id is anyone's again, and the earlier instance is forgotten with it.
    assert!(table.forget("m", "a").await.unwrap());
    assert_eq!(table.begin("m", "b", WINDOW).await.unwrap(), Begun::First);
    assert_eq!(
        table.begin("m", "a", WINDOW).await.unwrap(),
        Begun::Duplicate
    );
    // a's forget again (its first reply lost, say) leaves b's begin: a third delivery is a
    // duplicate, not processed a third time.
    assert!(!table.forget("m", "a").await.unwrap());
    assert_eq!(
        table.begin("m", "c", WINDOW).await.unwrap(),
        Begun::Duplicate
    );
    // A zero window is refused before anything is sent: it would expire the begin at once.
    assert_eq!(
        table.begin("m", "a", Duration::ZERO).await.unwrap_err(),
        Error::Config(ConfigError::DurationBelowOneMs {
            argument: "window",
            given: Duration::ZERO
        })
    );
    // Past the window (the shortest, 1 ms of server time) the earlier begin is pruned, with
    // its instance: the id is new for anyone. Until then the call changes nothing.
    eventually(Duration::from_secs(5), "the 1 ms window to pass", || {
        let table = table.clone();
        async move {
            match table
                .begin("m", "a", Duration::from_millis(1))
                .await
                .unwrap()
            {
                Begun::First => Some(()),
                Begun::Duplicate => None,
                Begun::ByThisInstance => panic!("b's begin was taken for a's"),
            }
        }
    })
    .await;

    assert!(table
        .enqueue("k", Bytes::from_static(b"p"), WINDOW)
        .await
        .unwrap());
    assert_eq!(
        table
            .claim("a", Limit::ONE, Duration::from_secs(60))
            .await
            .unwrap()
            .len(),
        1
    );
    assert!(matches!(
        table.ack("k", "b").await,
        Err(Error::NotHolder { .. })
    ));
    assert_eq!(table.ack("k", "a").await.unwrap(), Acked::Now);
    assert_eq!(table.ack("k", "a").await.unwrap(), Acked::Already);
    assert!(matches!(
        table.ack("k", "b").await,
        Err(Error::NotHolder { .. })
    ));
    // An enqueue past the window prunes the done key (and who acked it): queued again, and
    // the earlier ack no longer counts for the new send. Until then the call changes nothing.
    eventually(Duration::from_secs(5), "the 1 ms window to pass", || {
        let table = table.clone();
        async move {
            table
                .enqueue("k", Bytes::from_static(b"p2"), Duration::from_millis(1))
                .await
                .unwrap()
                .then_some(())
        }
    })
    .await;
    assert!(matches!(
        table.ack("k", "a").await,
        Err(Error::NotHolder { .. })
    ));
    client.close().await;
}

both_drivers!(
    begin_retried_after_reply_lost_is_still_mine,
    ack_retried_after_reply_lost_says_already_acked,
    a_lock_grant_whose_reply_was_lost_is_given_back,
);

both_drivers!(retries_on_every_target {
    retries_on_every_target_single_legacy => Target::SingleLegacy,
    retries_on_every_target_single_cluster => Target::SingleCluster,
    retries_on_every_target_cluster => Target::Cluster,
});
