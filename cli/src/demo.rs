//! `botmesh-redis demo`: three simulated bot replicas sharing 50 chats on a throwaway local
//! 3-master Redis Cluster (or an existing server), with a report. `scripts/demo` runs it; it is
//! the README's main job, so its flags and its report stay as they are.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use botmesh_redis_harness::{ClusterOptions, RedisCluster};
use botmesh_redis_tokio::driver::scan;
use botmesh_redis_tokio::{
    Access, Client, ClientOptions, Error, Executor, Key, Keyspace, Layout, Request, Value,
};
use botmesh_redis_tokio::{Coordinator, Durability, Schedules};
use botmesh_redis_tokio::{Limit, RecordCursor, RecordPage, Store, StoreOptions};
use bytes::Bytes;

use crate::connection::Connection;
use crate::output::{progress, set_total};
use crate::{DemoArgs, Failure};

/// Runs the demo: starts the throwaway cluster unless `--url` or `--cluster` names a server,
/// and fails when one of the report's checks failed.
pub(crate) async fn run(args: &DemoArgs, quiet: bool) -> Result<(), Failure> {
    // The throwaway cluster lives until the end of this function; dropping it stops its
    // servers.
    let (options, _cluster, place) = match args.connection.options() {
        None => {
            println!("starting a throwaway 3-master Redis Cluster on loopback...");
            let cluster =
                RedisCluster::try_start(ClusterOptions::new().masters(3).replicas_per_master(0))
                    .map_err(|e| {
                        Failure::Failed(format!("could not start a local cluster: {e}"))
                    })?;
            let seeds = cluster.seeds();
            let place = format!("throwaway cluster {}", seeds.join(" "));
            let connection = Connection {
                cluster: seeds,
                ..args.connection.clone()
            };
            let options = connection
                .options()
                .ok_or_else(|| Failure::Failed("the throwaway cluster has no node".into()))?;
            (options, Some(cluster), place)
        }
        Some(options) => {
            // Addresses only: a URL's credentials may be in its user-info or its query.
            let place = args.connection.describe();
            if !args.force {
                refuse_a_prefix_in_use(&options, &args.prefix).await?;
            }
            (options, None, place)
        }
    };
    match demo(options, &args.prefix, &place, quiet).await {
        Ok(true) => Ok(()),
        Ok(false) => Err(Failure::Failed(
            "demo: some check failed (see the report above)".into(),
        )),
        Err(e) => Err(Failure::Failed(format!("demo failed: {e}"))),
    }
}

/// The key a demo writes under its prefix once started, beside the layout marker, so that a
/// later demo knows the prefix for a demo's own.
fn demo_mark(prefix: &str) -> Key {
    Key::new(format!("{prefix}:{{meta}}:demo"))
}

/// Refuses to run the demo on a prefix that holds keys a demo did not write: the demo starts
/// the prefix (its lifecycle's record), drains the outbox without sending, campaigns for the
/// scheduler and deletes a chat, which on a bot's own prefix would take over its data.
async fn refuse_a_prefix_in_use(options: &ClientOptions, prefix: &str) -> Result<(), Failure> {
    let pattern = Keyspace::new(Layout::Legacy, prefix)
        .map_err(Error::from)?
        .prefix_pattern();
    let client = Client::connect(options.clone()).await?;
    let found = client.run(scan::scan(pattern, 1)).await;
    let marked = client
        .call(
            Request::cmd(Access::Read, "EXISTS")
                .key(demo_mark(prefix))
                .build()?,
        )
        .await;
    client.close().await;
    match (found?.is_empty(), marked?) {
        (true, _) | (false, Value::Int(1)) => Ok(()),
        _ => Err(Failure::Refused(format!(
            "prefix {prefix:?} holds keys a demo did not write (a bot's data?): the demo writes, \
             deletes and drains an outbox there. Give it a prefix of its own (--prefix \
             botmesh-demo-2), or --force to run it there anyway"
        ))),
    }
}

const REPLICAS: usize = 3;
const CHATS: usize = 50;
const MESSAGES_PER_CHAT: usize = 40;
const WORKERS_PER_REPLICA: usize = 8;
const DELETED_CHAT: usize = 7;
const OUTBOX: &str = "outbox";

/// One inbound message of the simulation.
#[derive(Clone)]
struct Inbound {
    chat: String,
    id: String,
    time_ms: i64,
    sender: String,
    text: String,
}

fn chat_id(n: usize) -> String {
    format!("chat-{n}")
}

fn sender_of(chat: usize, m: usize) -> String {
    format!("55119{:08}@s.whatsapp.net", (chat * 7 + m % 3) % 61)
}

/// Shared tallies of the run.
#[derive(Default)]
struct Tally {
    ops: AtomicU64,
    turns: AtomicU64,
    overlaps: AtomicU64,
    skips: AtomicU64,
    duplicates_in: AtomicU64,
    enqueued: AtomicU64,
    terms: Mutex<BTreeSet<u64>>,
    sent: Mutex<HashMap<String, u32>>,
    acked: AtomicU64,
}

struct Replica {
    store: Store<Client>,
    coord: Coordinator<Client>,
    outbox: Durability<Client>,
    schedules: Schedules<Client>,
    client: Client,
}

async fn replica(options: &ClientOptions, prefix: &str, n: usize) -> Result<Replica, Error> {
    let client = Client::connect(options.clone()).await?;
    let store = Store::new(
        client.clone(),
        StoreOptions::new(prefix).layout(Layout::Cluster),
    )?;
    let ks = store.keyspace().clone();
    let coord = Coordinator::new(
        client.clone(),
        ks.clone(),
        format!("replica-{n}-{}", std::process::id()),
    )?;
    Ok(Replica {
        outbox: Durability::new(client.clone(), ks.clone(), OUTBOX)?,
        schedules: Schedules::new(client.clone(), ks)?,
        store,
        coord,
        client,
    })
}

async fn demo(
    options: ClientOptions,
    prefix: &str,
    place: &str,
    quiet: bool,
) -> Result<bool, Error> {
    let started = Instant::now();
    let mut replicas = Vec::new();
    for n in 0..REPLICAS {
        replicas.push(Arc::new(replica(&options, prefix, n).await?));
    }
    let first = replicas[0].clone();
    println!(
        "{REPLICAS} replicas, {CHATS} chats, {MESSAGES_PER_CHAT} messages each, on {place}, \
         prefix {prefix:?}, layout {}",
        first.store.layout()
    );
    println!("start(): {:?}", first.store.start().await?);
    let mark = Request::cmd(Access::Write, "SET")
        .key(demo_mark(prefix))
        .arg("botmesh-redis demo")
        .build()?;
    first.client.call(mark).await?;

    let tally = Arc::new(Tally::default());
    let holders: Arc<Vec<AtomicU32>> = Arc::new((0..CHATS).map(|_| AtomicU32::new(0)).collect());

    // Every replica heartbeats, campaigns for the scheduler and drains the outbox meanwhile.
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut background = Vec::new();
    for r in &replicas {
        let (r, stop, tally) = (r.clone(), stop.clone(), tally.clone());
        r.coord.keep_alive(Duration::from_secs(3)).await?;
        background.push(tokio::spawn(async move {
            housekeeping(&r, &stop, &tally).await
        }));
    }

    // Deliver every message to a replica; replicas handle chats concurrently.
    let mut queues: Vec<Vec<Inbound>> = vec![Vec::new(); REPLICAS];
    for m in 0..MESSAGES_PER_CHAT {
        for c in 0..CHATS {
            queues[(c + m) % REPLICAS].push(Inbound {
                chat: chat_id(c),
                id: format!("m{m:03}"),
                time_ms: 1_700_000_000_000 + (m * 1000 + c) as i64,
                sender: sender_of(c, m),
                text: format!("hello {m} in chat {c}"),
            });
        }
    }
    // The bar lives only while the workers run, so that it never interleaves with the
    // report's lines.
    let bar = progress(quiet, "replicas at work");
    set_total(&bar, (CHATS * MESSAGES_PER_CHAT) as u64, "messages handled");
    let mut workers = Vec::new();
    for (n, queue) in queues.into_iter().enumerate() {
        let queue = Arc::new(Mutex::new(queue.into_iter().rev().collect::<Vec<_>>()));
        for _ in 0..WORKERS_PER_REPLICA {
            let (r, queue, tally, holders, bar) = (
                replicas[n].clone(),
                queue.clone(),
                tally.clone(),
                holders.clone(),
                bar.clone(),
            );
            workers.push(tokio::spawn(async move {
                loop {
                    let next = queue.lock().ok().and_then(|mut q| q.pop());
                    let Some(msg) = next else {
                        return Ok::<(), Error>(());
                    };
                    handle(&r, &msg, &tally, &holders).await?;
                    bar.inc(1);
                }
            }));
        }
    }
    for w in workers {
        w.await.map_err(|e| Error::NotSent {
            reason: e.to_string(),
        })??;
    }
    bar.finish_and_clear();
    let handled = Instant::now();

    // Delete a chat while messages keep arriving for it.
    let deleted = delete_while_saving(&first.store).await?;

    // Let the outbox drain, then stop the background work.
    wait_outbox_drained(&tally).await;
    stop.store(true, Ordering::SeqCst);
    for b in background {
        let _ = b.await;
    }

    let listings = check_listings(&first.store, &deleted).await?;
    let keys = count_keys(&first.client, first.store.keyspace()).await?;
    let spread = keys_per_master(&first.client).await?;

    // The report.
    let elapsed = started.elapsed();
    let sent = tally.sent.lock().map(|s| s.clone()).unwrap_or_default();
    let duplicated = sent.values().filter(|&&n| n > 1).count();
    let terms = tally.terms.lock().map(|t| t.len()).unwrap_or(0);
    println!();
    println!("== report ==");
    println!(
        "operations: {} in {:.2} s ({} messages handled in {:.2} s)",
        tally.ops.load(Ordering::Relaxed),
        elapsed.as_secs_f64(),
        CHATS * MESSAGES_PER_CHAT,
        (handled - started).as_secs_f64()
    );
    println!(
        "turns: {} served, {} overlapping holders, {} tickets skipped, {} duplicate deliveries",
        tally.turns.load(Ordering::Relaxed),
        tally.overlaps.load(Ordering::Relaxed),
        tally.skips.load(Ordering::Relaxed),
        tally.duplicates_in.load(Ordering::Relaxed),
    );
    println!(
        "scheduler leadership: {terms} term(s) won; outbox: {} enqueued, {} acked, {} sends \
         duplicated",
        tally.enqueued.load(Ordering::Relaxed),
        tally.acked.load(Ordering::Relaxed),
        duplicated
    );
    println!(
        "delete_chat {}: {} old messages gone, {} of {} concurrent saves survived, {} of {} \
         later saves present, {} dangling",
        deleted.chat,
        deleted.old_gone,
        deleted.concurrent_survived,
        deleted.concurrent,
        deleted.after_present,
        deleted.after,
        deleted.dangling
    );
    println!("keys per kind:");
    for (kind, n) in &keys {
        println!("  {kind:<12} {n}");
    }
    println!("keys per master:");
    for (node, n) in &spread {
        println!("  {node:<22} {n}");
    }
    println!("listings exact:");
    let mut ok = true;
    for (what, exact, detail) in &listings {
        println!(
            "  {what:<12} {} {detail}",
            if *exact { "yes" } else { "NO" }
        );
        ok &= exact;
    }
    ok &= tally.overlaps.load(Ordering::Relaxed) == 0;
    ok &= duplicated == 0;
    ok &= deleted.old_gone == deleted.old && deleted.after_present == deleted.after;
    ok &= deleted.dangling == 0;
    for r in &replicas {
        r.client.close().await;
    }
    Ok(ok)
}

/// One replica's handling of one inbound message, inside the chat's turn.
async fn handle(
    r: &Replica,
    msg: &Inbound,
    tally: &Tally,
    holders: &[AtomicU32],
) -> Result<(), Error> {
    let grant = r.coord.acquire_turn(&msg.chat).await?;
    tally.turns.fetch_add(1, Ordering::Relaxed);
    tally.skips.fetch_add(
        grant
            .events
            .iter()
            .filter(|e| matches!(e, botmesh_redis_tokio::TurnEvent::Skipped { .. }))
            .count() as u64,
        Ordering::Relaxed,
    );
    let slot = chat_index(&msg.chat).and_then(|i| holders.get(i));
    if let Some(h) = slot {
        if h.fetch_add(1, Ordering::SeqCst) != 0 {
            tally.overlaps.fetch_add(1, Ordering::Relaxed);
        }
    }
    let result = handle_in_turn(r, msg, tally).await;
    if let Some(h) = slot {
        h.fetch_sub(1, Ordering::SeqCst);
    }
    // The release says whether the turn was still held: a holder that lost it learns it here.
    if r.coord.release_turn(&grant.guard).await? == botmesh_redis_tokio::Released::Lost {
        return Err(Error::NotHolder {
            what: format!("turn {} of chat {:?}", grant.guard.ticket, msg.chat),
        });
    }
    tally.ops.fetch_add(2, Ordering::Relaxed);
    result
}

async fn handle_in_turn(r: &Replica, msg: &Inbound, tally: &Tally) -> Result<(), Error> {
    let delivery = format!("{}/{}", msg.chat, msg.id);
    let begun = r
        .outbox
        .begin(&delivery, r.coord.replica(), Duration::from_secs(600))
        .await?;
    if !begun.is_mine() {
        tally.duplicates_in.fetch_add(1, Ordering::Relaxed);
        return Ok(());
    }
    let s = &r.store;
    s.save_message(
        &msg.chat,
        &msg.id,
        msg.time_ms,
        Bytes::from(msg.text.clone()),
    )
    .await?;
    s.upsert_chat(&msg.chat, Bytes::from(format!("last={}", msg.id)))
        .await?;
    s.upsert_contact(&msg.sender, Bytes::from(format!("seen in {}", msg.chat)))
        .await?;
    s.set_checkpoint(
        &msg.chat,
        Bytes::from(msg.id.clone()),
        Some(Duration::from_secs(3600)),
    )
    .await?;
    s.set_user_data(
        &msg.sender,
        "profile",
        "last_chat",
        Bytes::from(msg.chat.clone()),
        None,
    )
    .await?;
    let reply = format!("reply:{delivery}");
    if r.outbox
        .enqueue(&reply, Bytes::from("thanks!"), Duration::from_secs(600))
        .await?
    {
        tally.enqueued.fetch_add(1, Ordering::Relaxed);
    }
    tally.ops.fetch_add(7, Ordering::Relaxed);
    Ok(())
}

fn chat_index(chat: &str) -> Option<usize> {
    chat.strip_prefix("chat-")?.parse().ok()
}

/// The scheduler leadership and the outbox sender of one replica (its heartbeat has a keeper).
async fn housekeeping(r: &Replica, stop: &std::sync::atomic::AtomicBool, tally: &Tally) {
    let name = r.coord.replica().to_owned();
    while !stop.load(Ordering::SeqCst) {
        if let Ok(Some(term)) = r.coord.campaign("scheduler", Duration::from_secs(2)).await {
            if let Ok(mut terms) = tally.terms.lock() {
                terms.insert(term);
            }
            // The leader's scheduler tick, fenced by its term.
            let _ = r
                .schedules
                .put("tick", term, &name, Bytes::from(name.clone()))
                .await;
        }
        let claimed = r
            .outbox
            .claim(&name, Limit::of::<64>(), Duration::from_secs(10))
            .await
            .unwrap_or_default();
        if claimed.is_empty() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        for send in claimed {
            if let Ok(mut sent) = tally.sent.lock() {
                *sent.entry(send.key.clone()).or_default() += 1;
            }
            if r.outbox.ack(&send.key, &name).await.is_ok() {
                tally.acked.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
    let _ = r.coord.resign("scheduler").await;
    let _ = r.coord.stop_heartbeat().await;
}

async fn wait_outbox_drained(tally: &Tally) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while tally.acked.load(Ordering::Relaxed) < tally.enqueued.load(Ordering::Relaxed)
        && Instant::now() < deadline
    {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// What happened to the chat deleted under load.
struct Deleted {
    chat: String,
    old: usize,
    old_gone: usize,
    concurrent: usize,
    concurrent_survived: usize,
    after: usize,
    after_present: usize,
    dangling: usize,
}

async fn delete_while_saving(store: &Store<Client>) -> Result<Deleted, Error> {
    let chat = chat_id(DELETED_CHAT);
    let old: BTreeSet<String> = (0..MESSAGES_PER_CHAT).map(|m| format!("m{m:03}")).collect();
    let saver_store = store.clone();
    let saver_chat = chat.clone();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let saver_stop = stop.clone();
    let saver = tokio::spawn(async move {
        let mut saved = Vec::new();
        let mut n = 0;
        while !saver_stop.load(Ordering::SeqCst) {
            let id = format!("late-{n:04}");
            saver_store
                .save_message(&saver_chat, &id, 1_800_000_000_000 + n, Bytes::from("late"))
                .await?;
            saved.push(id);
            n += 1;
        }
        Ok::<_, Error>(saved)
    });
    store.delete_chat(&chat).await?;
    stop.store(true, Ordering::SeqCst);
    let concurrent = saver.await.map_err(|e| Error::NotSent {
        reason: e.to_string(),
    })??;
    let after: Vec<String> = (0..10).map(|n| format!("after-{n}")).collect();
    for (n, id) in after.iter().enumerate() {
        store
            .save_message(
                &chat,
                id,
                1_900_000_000_000 + n as i64,
                Bytes::from("after"),
            )
            .await?;
    }
    let listed = all_messages(store, &chat).await?;
    let mut dangling = 0;
    for id in old.iter().chain(&concurrent).chain(&after) {
        let item = store.get_message(&chat, id).await?;
        if item.is_some() != listed.contains(id) {
            dangling += 1;
        }
    }
    Ok(Deleted {
        old_gone: old.iter().filter(|id| !listed.contains(*id)).count(),
        old: old.len(),
        concurrent: concurrent.len(),
        concurrent_survived: concurrent.iter().filter(|id| listed.contains(*id)).count(),
        after: after.len(),
        after_present: after.iter().filter(|id| listed.contains(*id)).count(),
        dangling,
        chat,
    })
}

async fn all_messages(store: &Store<Client>, chat: &str) -> Result<BTreeSet<String>, Error> {
    let mut ids = BTreeSet::new();
    let mut after = None;
    loop {
        let page = store
            .list_messages(chat, .., after.as_ref(), Limit::DEFAULT)
            .await?;
        ids.extend(page.items.into_iter().map(|m| m.id));
        match page.next {
            Some(next) => after = Some(next),
            None => return Ok(ids),
        }
    }
}

type Listing = (&'static str, bool, String);

/// Every id of a paged record listing, page after page (16 at a time, to exercise paging).
async fn all_ids<F, Fut>(mut page: F) -> Result<BTreeSet<String>, Error>
where
    F: FnMut(Option<RecordCursor>) -> Fut,
    Fut: std::future::Future<Output = Result<RecordPage, Error>>,
{
    let mut ids = BTreeSet::new();
    let mut after = None;
    loop {
        let listed = page(after).await?;
        ids.extend(listed.items.into_iter().map(|r| r.id));
        match listed.next {
            Some(next) => after = Some(next),
            None => return Ok(ids),
        }
    }
}

/// Lists everything back and compares with what the replicas wrote.
async fn check_listings(store: &Store<Client>, deleted: &Deleted) -> Result<Vec<Listing>, Error> {
    let compare = |what, got: BTreeSet<String>, want: BTreeSet<String>| -> Listing {
        (
            what,
            got == want,
            format!("({} listed, {} expected)", got.len(), want.len()),
        )
    };
    let all_chats: BTreeSet<String> = (0..CHATS).map(chat_id).collect();
    let mut chats = all_chats.clone();
    chats.remove(&deleted.chat);
    let senders: BTreeSet<String> = (0..CHATS)
        .flat_map(|c| (0..MESSAGES_PER_CHAT).map(move |m| sender_of(c, m)))
        .collect();

    let mut out = Vec::new();
    let got =
        all_ids(|after| async move { store.list_chats(after.as_ref(), Limit::of::<16>()).await })
            .await?;
    out.push(compare("chats", got, chats));

    let got =
        all_ids(
            |after| async move { store.list_contacts(after.as_ref(), Limit::of::<16>()).await },
        )
        .await?;
    out.push(compare("contacts", got, senders.clone()));

    let got = all_ids(|after| async move {
        store
            .list_checkpoints(after.as_ref(), Limit::of::<16>())
            .await
    })
    .await?;
    out.push(compare("checkpoints", got, all_chats));

    let mut exact = true;
    for sender in &senders {
        let entries = store
            .list_user_data(sender, None, None, Limit::MAX)
            .await?
            .items;
        exact &= entries.len() == 1 && entries[0].ns == "profile" && entries[0].key == "last_chat";
    }
    out.push((
        "user data",
        exact,
        format!("({} users, one entry each)", senders.len()),
    ));

    let mut exact = true;
    for c in (0..CHATS).filter(|&c| c != DELETED_CHAT) {
        exact &= all_messages(store, &chat_id(c)).await?.len() == MESSAGES_PER_CHAT;
    }
    out.push((
        "messages",
        exact,
        format!("({} chats of {MESSAGES_PER_CHAT})", CHATS - 1),
    ));
    Ok(out)
}

/// Counts the keys under the prefix by kind, scanning every master.
async fn count_keys(
    client: &Client,
    ks: &Keyspace,
) -> Result<BTreeMap<&'static str, usize>, Error> {
    let keys = client
        .run(botmesh_redis_tokio::driver::scan::scan(
            ks.prefix_pattern(),
            1_000_000,
        ))
        .await?;
    let start = ks.prefix().len() + 1;
    let mut counts = BTreeMap::new();
    for key in keys {
        let rest = String::from_utf8_lossy(key.get(start..).unwrap_or_default()).into_owned();
        let kind = [
            ("{m:", "messages"),
            ("{ch:", "chats"),
            ("{ct:", "contacts"),
            ("{cp:", "checkpoints"),
            ("{sc:", "schedules"),
            ("{ud:", "user data"),
            ("{lk:", "locks"),
            ("co:{t:", "turns"),
            ("co:{ld:", "leaderships"),
            ("co:rep:", "heartbeats"),
            ("{durable:", "durability"),
            ("{meta}", "marker"),
        ]
        .iter()
        .find(|(start, _)| rest.starts_with(start))
        .map_or("other", |&(_, kind)| kind);
        *counts.entry(kind).or_insert(0) += 1;
    }
    Ok(counts)
}

/// `DBSIZE` of every master.
async fn keys_per_master(client: &Client) -> Result<Vec<(String, i64)>, Error> {
    let masters = scan::masters_of(client.call(scan::masters_request()?).await)?;
    let mut out = Vec::new();
    for node in masters {
        let mut dbsize = Request::cmd(Access::Read, "DBSIZE");
        if let Some(node) = &node {
            dbsize = dbsize.to_node(node.clone());
        }
        let n = match client.call(dbsize.build()?).await? {
            Value::Int(n) => n,
            other => other.as_i64()?,
        };
        out.push((node.unwrap_or_else(|| "single node".into()), n));
    }
    Ok(out)
}
