//! A bot replica loop: receive an update, drop it if another replica already has it, take the
//! chat's turn, save the message, queue the reply in the outbox, release the turn. A sender
//! drains the outbox. Three replicas run as tasks of this process, sharing one store, as three
//! processes would share it; the updates are made up here (no messaging platform), and some are
//! delivered twice, as platforms with at-least-once delivery do.
//!
//! ```text
//! cargo run -p botmesh-redis-tokio --example bot_loop
//! BOTMESH_URL=redis://127.0.0.1:6379  or  BOTMESH_CLUSTER=127.0.0.1:7000,127.0.0.1:7001
//! BOTMESH_PREFIX=mybot   (default botmesh-example-bot)
//! ```
mod common;

use std::collections::{BTreeMap, HashSet, VecDeque};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use botmesh_redis_tokio::{Begun, TurnOptions};
use botmesh_redis_tokio::{Client, Error};
use botmesh_redis_tokio::{Limit, Store, StoreOptions};
use tokio::sync::Mutex;

const REPLICAS: usize = 3;
const CHATS: u64 = 4;
const PER_CHAT: u64 = 10;
/// How long the inbox remembers an update id, and the outbox an acked reply.
const DEDUP_WINDOW: Duration = Duration::from_secs(600);
/// Turns skip the turns of a replica whose heartbeat expired: beat well within this.
const HEARTBEAT_TTL: Duration = Duration::from_secs(5);

#[derive(Clone, Debug)]
struct Update {
    id: String,
    chat: String,
    seq: i64,
    text: String,
}

/// The platform's queue of updates; every replica takes from it.
type Source = Arc<Mutex<VecDeque<Update>>>;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let client = common::connect().await?;
    let prefix = std::env::var("BOTMESH_PREFIX").unwrap_or_else(|_| "botmesh-example-bot".into());
    // A cluster client gives the cluster:v1 layout, a single node the legacy one.
    let store = Store::new(client.clone(), StoreOptions::new(&prefix))?;
    store.start().await?;
    println!("prefix {prefix}, layout {:?}", store.layout());

    // Chats of this run only, so that running the example again starts afresh.
    let run = SystemTime::now().duration_since(UNIX_EPOCH)?.as_millis();
    let mut updates = VecDeque::new();
    for seq in 1..=PER_CHAT as i64 {
        for chat in 1..=CHATS {
            let chat = format!("run{run}-chat{chat}");
            let id = format!("{chat}-m{seq}");
            let text = format!("message {seq}");
            updates.push_back(Update {
                id,
                chat,
                seq,
                text,
            });
        }
    }
    // Every fourth update is delivered a second time, a little later.
    let redelivered: Vec<Update> = updates.iter().step_by(4).cloned().collect();
    for (n, update) in redelivered.iter().enumerate() {
        updates.insert((n * 4 + 6).min(updates.len()), update.clone());
    }
    println!(
        "{} deliveries of {} updates to {REPLICAS} replicas",
        updates.len(),
        CHATS * PER_CHAT
    );
    let source: Source = Arc::new(Mutex::new(updates));

    let sender = format!("sender-{}", std::process::id());
    let sender = tokio::spawn(send_replies(store.clone(), sender, format!("run{run}-")));
    let mut replicas = Vec::new();
    for n in 0..REPLICAS {
        let name = format!("replica{n}-{}", std::process::id());
        replicas.push(tokio::spawn(replica(store.clone(), name, source.clone())));
    }
    let (mut handled, mut dropped) = (Vec::new(), 0);
    for task in replicas {
        let (h, d) = task.await??;
        handled.extend(h);
        dropped += d;
    }
    let sent = tokio::time::timeout(Duration::from_secs(30), sender).await???;

    // Check what a bot must guarantee: one save and one reply per update, in each chat's order.
    let total = (CHATS * PER_CHAT) as usize;
    let ids: HashSet<&String> = handled.iter().map(|(id, _)| id).collect();
    let new = handled.iter().filter(|(_, new)| *new).count();
    if (handled.len(), ids.len(), new, dropped) != (total, total, total, redelivered.len()) {
        return Err(format!("handled {handled:?}, dropped {dropped}").into());
    }
    let expected: Vec<i64> = (1..=PER_CHAT as i64).collect();
    for chat in (1..=CHATS).map(|c| format!("run{run}-chat{c}")) {
        let page = store.list_messages(&chat, .., None, Limit::DEFAULT).await?;
        let saved: Vec<i64> = page.items.iter().map(|m| m.time_ms).collect();
        if saved != expected || sent.get(&chat) != Some(&expected) {
            return Err(format!(
                "{chat}: saved {saved:?}, replies sent {:?}",
                sent.get(&chat)
            )
            .into());
        }
    }
    println!(
        "summary: {total} updates, {dropped} duplicate deliveries dropped, {total} messages saved \
         once and {total} replies sent once, in order in each of {CHATS} chats"
    );
    client.close().await;
    Ok(())
}

/// One replica: takes deliveries until there are none; yields (update id, saved as new) for
/// each update it handled, and how many duplicate deliveries it dropped.
async fn replica(
    store: Store<Client>,
    name: String,
    source: Source,
) -> Result<(Vec<(String, bool)>, usize), Error> {
    let coord = store
        .coordinator(name.clone())?
        .with_turn_options(TurnOptions {
            poll_interval: Duration::from_millis(10),
            ..TurnOptions::default()
        });
    let (inbox, outbox) = (store.durability("inbox")?, store.durability("outbox")?);
    // A replica without a live heartbeat counts as dead and its turns are skipped (a turn is
    // refused without one): the keeper writes it now, then every TTL / 5 in the background.
    coord.keep_alive(HEARTBEAT_TTL).await?;
    let (mut handled, mut mine, mut dropped) = (Vec::new(), HashSet::new(), 0);
    loop {
        let Some(update) = source.lock().await.pop_front() else {
            break;
        };
        // The journal answers `Duplicate` when another replica began this id. `ByThisInstance`
        // is this replica's own id again: new only if it never finished it (a lost reply).
        let begun = inbox.begin(&update.id, &name, DEDUP_WINDOW).await?;
        if begun == Begun::Duplicate || mine.contains(&update.id) {
            dropped += 1;
            continue;
        }
        loop {
            // A `Turn` guard: every early `?` below gives the turn back as it drops.
            let turn = coord.turn(&update.chat).await?;
            // The fenced check before acting on the chat: `NotHolder` if the turn was lost.
            turn.renew().await?;
            // The turn excludes the other replicas; the chat's cursor orders the updates: an
            // earlier one still in another replica's hands goes first.
            let cursor = format!("order:{}", update.chat);
            if store.get_cursor(&cursor).await?.unwrap_or(0) != update.seq - 1 {
                turn.release().await?;
                tokio::time::sleep(Duration::from_millis(5)).await;
                continue;
            }
            let new = store
                .save_message(
                    &update.chat,
                    &update.id,
                    update.seq,
                    update.text.clone().into(),
                )
                .await?;
            let reply = format!("{} (you said: {})", update.seq, update.text);
            outbox
                .enqueue(&format!("reply:{}", update.id), reply.into(), DEDUP_WINDOW)
                .await?;
            store.set_cursor(&cursor, update.seq).await?;
            turn.release().await?;
            handled.push((update.id.clone(), new));
            mine.insert(update.id);
            break;
        }
    }
    coord.stop_heartbeat().await?;
    println!(
        "{name}: handled {} updates, dropped {dropped} duplicates",
        handled.len()
    );
    Ok((handled, dropped))
}

/// Drains the outbox until every reply of this run was sent; yields the seqs of the replies
/// sent per chat of this run, in the order sent. (Replies an earlier run left are sent too.)
async fn send_replies(
    store: Store<Client>,
    name: String,
    run: String,
) -> Result<BTreeMap<String, Vec<i64>>, Error> {
    let outbox = store.durability("outbox")?;
    let (mut sent, mut count) = (BTreeMap::<String, Vec<i64>>::new(), 0);
    while count < CHATS * PER_CHAT {
        let claimed = outbox
            .claim(&name, Limit::of::<16>(), Duration::from_secs(30))
            .await?;
        if claimed.is_empty() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        for send in claimed {
            // Send first (here: note it), then ack: a sender that dies in between has its claim
            // handed out again, and the receiver deduplicates by the key.
            let key = send.key.strip_prefix("reply:").unwrap_or_default();
            if let Some((chat, seq)) = key.rsplit_once("-m").filter(|_| key.starts_with(&run)) {
                sent.entry(chat.to_owned())
                    .or_default()
                    .push(seq.parse().unwrap_or(-1));
                count += 1;
            }
            outbox.ack(&send.key, &name).await?;
        }
    }
    Ok(sent)
}
