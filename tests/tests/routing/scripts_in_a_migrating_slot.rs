//! Store and coordination scripts that delete or empty a key, run at the source of a slot
//! migration. While a slot is `MIGRATING`, the source runs a script only when every declared
//! key is there, and then checks every command the script calls: a command on a key of the
//! slot that does not exist (any more) is refused mid-script ("non local key"), after the
//! script's earlier writes. A script that deleted a key (or emptied a collection, which Redis
//! deletes) and then touched it again ran half-way. Each case here puts every key of the
//! script in place, sets the slot `MIGRATING` at its owner (`IMPORTING` at another master),
//! runs the operation through the public API, checks that the source answered it itself (no
//! `ASK`, no `TRYAGAIN`: the script ran on the migrating slot) and its exact result, then
//! finishes the migration.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::Notify;

use botmesh_redis_core::driver::store::delete_chat::delete_chat;
use botmesh_redis_core::driver::store::messages::save_message;
use botmesh_redis_core::driver::{Batch, Plan, Reply, Step};
use botmesh_redis_core::keys::{RecordKind, TurnPart};
use botmesh_redis_core::{
    Acked, Begun, ClientOptions, Coordinator, DeletedChat, Durability, Executor, Key, Keyspace,
    Layout, Leases, Limit, Released, Schedules, Store, StoreOptions,
};
use botmesh_redis_tests::conformance::{Client, Runtime};
use botmesh_redis_tests::coord::server_ms;
use botmesh_redis_tests::counters::errorstat;
use botmesh_redis_tests::store::StopAfter;
use botmesh_redis_tests::{both_drivers, unique_prefix, ClusterOptions, RedisCluster};

/// Slot migrations change the topology: this file owns its cluster. Its tests, on both
/// drivers, take turns, so that the redirect counters each one reads are its own.
fn cluster() -> &'static RedisCluster {
    static CLUSTER: OnceLock<RedisCluster> = OnceLock::new();
    CLUSTER.get_or_init(|| RedisCluster::start(ClusterOptions::new()))
}
static TURN: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

async fn client<R: Runtime>() -> Client<R> {
    Client::<R>::connect(ClientOptions::cluster(cluster().seeds()))
        .await
        .unwrap()
}

fn keyspace(name: &str) -> Keyspace {
    Keyspace::new(Layout::Cluster, unique_prefix(name)).unwrap()
}

/// Runs `op` while the slot of `key` is `MIGRATING` at its owner, none of its keys moved yet;
/// checks that the source answered every call itself (no `ASK`, no `TRYAGAIN`), then moves the
/// slot to the other master and returns what `op` returned.
async fn while_migrating<T>(key: &Key, op: impl Future<Output = T>) -> T {
    let cluster = cluster();
    let slot = key.slot();
    let source = cluster.master_for_slot(slot).unwrap();
    let target = cluster
        .masters()
        .unwrap()
        .into_iter()
        .find(|&m| m != source)
        .unwrap();
    let mut on_source = cluster.conn(source).unwrap();
    let redirects = |conn: &mut _| (errorstat(conn, "ASK"), errorstat(conn, "TRYAGAIN"));
    let before = redirects(&mut on_source);
    let migration = cluster.begin_migration(slot, target).unwrap();
    let result = op.await;

    assert_eq!(
        redirects(&mut on_source),
        before,
        "the source redirected a call: a key of the script was missing, so it did not run on \
         the migrating slot (ASK and TRYAGAIN counts)"
    );
    tokio::task::spawn_blocking(move || migration.finish())
        .await
        .unwrap()
        .unwrap();
    result
}

/// Waits until the server's clock has passed `ms` (windows and visibility timeouts of 1 ms
/// end by the server's clock).
async fn server_clock_past<R: Runtime>(client: &Client<R>, ms: u64) {
    while server_ms(client).await <= ms {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

async fn releasing_the_only_ticket_of_a_turn_queue<R: Runtime>() {
    let _turn = TURN.lock().await;
    let ks = keyspace("mig-turn");
    let coord = Coordinator::new(client::<R>().await, ks.clone(), "replica-a").unwrap();
    coord.heartbeat(Duration::from_secs(30)).await.unwrap();
    let grant = coord.acquire_turn("chat").await.unwrap();
    // seq, tix, serving, owner and last all exist; the release empties tix (Redis deletes
    // it), then serves the next ticket and refreshes the queue's lifetime.
    let released = while_migrating(
        &ks.turn("chat", TurnPart::Owner),
        coord.release_turn(&grant.guard),
    )
    .await;
    assert_eq!(released, Ok(Released::Held));
    // The queue still works on the slot's new owner, and served the counter's next ticket.
    let again = coord.acquire_turn("chat").await.unwrap();
    assert_eq!(again.guard.ticket, grant.guard.ticket + 1);
    assert_eq!(coord.release_turn(&again.guard).await, Ok(Released::Held));
}

/// A durability table whose nine keys all exist, with a short window: `in-0` begun, `k1`
/// acked, `k2` claimed by `i1` with a visibility of 1 ms, `k3` ready. Returns the server time
/// after the last write.
async fn full_table<R: Runtime>(client: &Client<R>, table: &Durability<Client<R>>) -> u64 {
    let short = Duration::from_millis(1);
    let long = Duration::from_secs(600);
    assert_eq!(table.begin("in-0", "i1", short).await, Ok(Begun::First));
    for key in ["k1", "k2", "k3"] {
        let payload = Bytes::from(format!("payload {key}"));
        assert_eq!(table.enqueue(key, payload, long).await, Ok(true));
    }
    let claimed = table.claim("i1", Limit::of::<2>(), short).await.unwrap();
    let keys: Vec<&str> = claimed.iter().map(|c| c.key.as_str()).collect();
    assert_eq!(keys, ["k1", "k2"]);
    // An ack past the deadline still counts while no claim has requeued the key.
    assert_eq!(table.ack("k1", "i1").await, Ok(Acked::Now));
    server_ms(client).await
}

async fn durable_calls_that_prune_or_requeue<R: Runtime>() {
    let _turn = TURN.lock().await;
    let client = client::<R>().await;
    let ks = keyspace("mig-durable");
    let short = Duration::from_millis(1);

    // begin: in-0 has left the window, so begun and the journal are emptied before in-1 is
    // written into them.
    let table = Durability::new(client.clone(), ks.clone(), "begin").unwrap();
    let written = full_table(&client, &table).await;
    server_clock_past(&client, written + 2).await;
    let journal = ks.durable("begin", "journal").unwrap();
    let begun = while_migrating(&journal, table.begin("in-1", "i1", short)).await;
    assert_eq!(begun, Ok(Begun::First));
    assert_eq!(
        table.begin("in-1", "i2", Duration::from_secs(60)).await,
        Ok(Begun::Duplicate)
    );

    // enqueue: k1's ack has left the window, so done and acked are emptied, then read.
    let table = Durability::new(client.clone(), ks.clone(), "enqueue").unwrap();
    let written = full_table(&client, &table).await;
    server_clock_past(&client, written + 2).await;
    let done = ks.durable("enqueue", "done").unwrap();
    let enqueued = while_migrating(
        &done,
        table.enqueue("k1", Bytes::from_static(b"again"), short),
    )
    .await;
    assert_eq!(
        enqueued,
        Ok(true),
        "k1 left the dedup window: enqueued again"
    );

    // claim: k2's claim lapsed; requeueing it empties claims and owners, and the claim then
    // writes both again.
    let table = Durability::new(client.clone(), ks.clone(), "claim").unwrap();
    let written = full_table(&client, &table).await;
    server_clock_past(&client, written + 2).await;
    let claims = ks.durable("claim", "claims").unwrap();
    let claimed = while_migrating(
        &claims,
        table.claim("i2", Limit::of::<5>(), Duration::from_secs(60)),
    )
    .await
    .unwrap();
    let got: Vec<(&str, &[u8])> = claimed
        .iter()
        .map(|c| (c.key.as_str(), c.payload.as_ref()))
        .collect();
    assert_eq!(
        got,
        [("k2", &b"payload k2"[..]), ("k3", &b"payload k3"[..])]
    );
    // i2 holds both claims now: i1's late ack is refused, i2's counts.
    assert!(table.ack("k2", "i1").await.is_err());
    assert_eq!(table.ack("k2", "i2").await, Ok(Acked::Now));
    assert_eq!(table.recover("i2").await, Ok(1));

    // ack and recover delete each key at most once, after reading it: they always held.
    let table = Durability::new(client.clone(), ks.clone(), "ack").unwrap();
    full_table(&client, &table).await;
    let owners = ks.durable("ack", "owners").unwrap();
    let acked = while_migrating(&owners, table.ack("k2", "i1")).await;
    assert_eq!(acked, Ok(Acked::Now));
    client.close().await;
}

async fn listing_checkpoints_that_all_expired<R: Runtime>() {
    let _turn = TURN.lock().await;
    let client = client::<R>().await;
    let prefix = unique_prefix("mig-records");
    let store = Store::new(
        client.clone(),
        StoreOptions::new(prefix.as_str()).layout(Layout::Cluster),
    )
    .unwrap();
    store.start().await.unwrap();
    let ks = Keyspace::new(Layout::Cluster, prefix.as_str()).unwrap();
    store
        .set_checkpoint(
            "cp",
            Bytes::from_static(b"v"),
            Some(Duration::from_millis(1)),
        )
        .await
        .unwrap();
    let written = server_ms(&client).await;
    server_clock_past(&client, written + 2).await;
    // The checkpoint's index holds one expired member: the listing prunes it (emptying the
    // index), then lists what is left.
    let index = ks.record_index_of(RecordKind::Checkpoint, "cp").unwrap();
    let page = while_migrating(&index, store.list_checkpoints(None, Limit::DEFAULT))
        .await
        .unwrap();
    assert!(
        page.items.is_empty(),
        "{} live checkpoints",
        page.items.len()
    );
    assert!(page.next.is_none());

    // Deleting records: each key deleted once, last.
    store
        .upsert_contact("c1", Bytes::from_static(b"contact"))
        .await
        .unwrap();
    let contact = ks.record(RecordKind::Contact, "c1");
    assert_eq!(
        while_migrating(&contact, store.delete_contact("c1")).await,
        Ok(true)
    );
    for key in ["a", "b"] {
        store
            .set_user_data("u1", "ns", key, Bytes::from_static(b"x"), None)
            .await
            .unwrap();
    }
    let user_index = ks.user_index("u1").unwrap();
    assert_eq!(
        while_migrating(&user_index, store.clear_user_data("u1", Some("ns"))).await,
        Ok(2)
    );
    assert_eq!(store.get_user_data("u1", "ns", "a").await, Ok(None));
    client.close().await;
}

async fn releasing_locks_leases_and_schedules<R: Runtime>() {
    let _turn = TURN.lock().await;
    let client = client::<R>().await;
    let ks = keyspace("mig-coord");
    let ttl = Duration::from_secs(30);
    let coord = Coordinator::new(client.clone(), ks.clone(), "replica-a").unwrap();
    assert_eq!(coord.lock("l", "o1", ttl).await, Ok(Some(1)));
    let unlocked = while_migrating(&ks.lock("l"), coord.unlock("l", "o1")).await;
    assert_eq!(unlocked, Ok(Released::Held));

    let leases = Leases::new(client.clone(), ks.clone()).unwrap();
    assert_eq!(leases.acquire("n", "h1", ttl).await, Ok(Some(1)));
    let released = while_migrating(&ks.lease("n"), leases.release("n", "h1", 1)).await;
    assert_eq!(released, Ok(Released::Held));

    let schedules = Schedules::new(client.clone(), ks.clone()).unwrap();
    schedules
        .put("s", 5, "h1", Bytes::from_static(b"data"))
        .await
        .unwrap();
    let record = ks.record(RecordKind::Schedule, "s");
    assert_eq!(
        while_migrating(&record, schedules.delete("s", 5, "h1")).await,
        Ok(())
    );
    assert_eq!(schedules.get("s").await, Ok(None));
    client.close().await;
}

/// Runs a plan, and sends `extra` right after its first batch was answered; then holds the
/// plan until `go` is set, polling it each millisecond: a message saved while a `delete_chat`
/// runs, between its begin and its first chunk, and a slot migration begun there.
struct PauseAfterFirstStep<P> {
    plan: P,
    extra: Option<Batch>,
    held: Option<Vec<Reply>>,
    paused: Arc<Notify>,
    go: Arc<AtomicBool>,
}

impl<P: Plan> Plan for PauseAfterFirstStep<P> {
    type Output = P::Output;

    fn operation(&self) -> &'static str {
        self.plan.operation()
    }

    fn start(&mut self) -> Step<P::Output> {
        self.plan.start()
    }

    fn resume(&mut self, replies: Vec<Reply>) -> Step<P::Output> {
        if let Some(extra) = self.extra.take() {
            self.held = Some(replies);
            return Step::Send(extra);
        }
        if self.held.is_some() {
            if let Some(Err(e)) = replies.into_iter().find(Result::is_err) {
                return Step::Done(Err(e));
            }
            if !self.go.load(Ordering::SeqCst) {
                self.paused.notify_one();
                return Step::Wait(Duration::from_millis(1));
            }
            let held = self.held.take().unwrap_or_default();
            return self.plan.resume(held);
        }
        self.plan.resume(replies)
    }
}

async fn deleting_messages_and_a_chat<R: Runtime>() {
    let _turn = TURN.lock().await;
    let client = client::<R>().await;
    let prefix = unique_prefix("mig-chat");
    let ks = Keyspace::new(Layout::Cluster, prefix.as_str()).unwrap();
    let store = Store::new(
        client.clone(),
        StoreOptions::new(prefix.as_str()).layout(Layout::Cluster),
    )
    .unwrap();
    store.start().await.unwrap();
    let payload = |id: &str| Bytes::from(format!("payload {id}"));
    let save = |id: &'static str, time: i64| store.save_message("chat", id, time, payload(id));
    assert_eq!(save("m1", 1).await, Ok(true));
    assert_eq!(save("m2", 2).await, Ok(true));
    // An interrupted delete (its begin ran, no chunk): m1 and m2 are in the drain.
    let interrupted = StopAfter {
        inner: client.clone(),
        sends: 1,
    };
    assert!(interrupted.run(delete_chat(&ks, "chat")).await.is_err());
    assert_eq!(save("m3", 3).await, Ok(true));
    assert_eq!(save("m5", 5).await, Ok(true));

    // Log, drain and item exist: each loses one member or goes, once.
    let log = ks.message_log("chat");

    let deleted = while_migrating(&log, store.delete_message("chat", "m5")).await;
    assert_eq!(deleted, Ok(true));

    // The delete merges the log (m3) into the drain; m4 is saved into a fresh log before the
    // first chunk, and the migration begins there. The chunk removes m1, m2 and m3, which
    // empties the drain, then asks it for the next chunk.
    let m4 = match save_message(&ks, "chat", "m4", 4, payload("m4"))
        .unwrap()
        .start()
    {
        Step::Send(requests) => requests,
        other => panic!("save_message starts with {other:?}"),
    };
    let (paused, go) = (Arc::new(Notify::new()), Arc::new(AtomicBool::new(false)));
    let plan = PauseAfterFirstStep {
        plan: delete_chat(&ks, "chat"),
        extra: Some(m4),
        held: None,
        paused: paused.clone(),
        go: go.clone(),
    };
    let deleting = tokio::spawn({
        let client = client.clone();
        async move { client.run(plan).await }
    });
    paused.notified().await;
    let done = while_migrating(&log, async {
        go.store(true, Ordering::SeqCst);
        deleting.await.unwrap()
    })
    .await;
    assert_eq!(
        done,
        Ok(DeletedChat {
            messages: 3,
            chunks: 1,
            record: false
        })
    );
    let left = store
        .list_messages("chat", .., None, Limit::DEFAULT)
        .await
        .unwrap();
    let ids: Vec<&str> = left.items.iter().map(|m| m.id.as_str()).collect();
    assert_eq!(
        ids,
        ["m4"],
        "the message saved after the delete began survives"
    );
    client.close().await;
}

both_drivers!(
    releasing_the_only_ticket_of_a_turn_queue,
    deleting_messages_and_a_chat,
    durable_calls_that_prune_or_requeue,
    listing_checkpoints_that_all_expired,
    releasing_locks_leases_and_schedules,
);
