//! Three replicas of one teloxide bot share their dialogues on a Redis Cluster.
//!
//! No Telegram token is needed. Each replica is a real teloxide `Dispatcher` with a dialogue
//! schema; its updates come from a custom update listener fed by this program (the "load
//! balancer", which spreads each chat's updates over the replicas), and its Bot API calls
//! (`getMe` at start, `sendMessage` for every reply) go to a tiny fake Bot API server on
//! loopback, which records every reply. Faking the server rather than the bot keeps the bot's
//! code exactly what it would be in production (`bot.send_message(..)`), and makes the replies
//! the users would see the thing the check reads.
//!
//! What it does, on the cluster of `BOTMESH_CLUSTER` (comma-separated seeds) or else on a
//! throwaway 3-master x 1-replica cluster it starts:
//!
//! 1. every chat says hello and gives a name (the dialogue goes `Start` → `ReceiveName` →
//!    `Counting`), each update to another replica;
//! 2. then `+1` updates arrive on all chats at once, spread over the replicas, each a
//!    read-modify-write of the chat's dialogue under the chat's turn; meanwhile replica 1 is
//!    stopped (it finishes what it was given) and started again as a new process would be;
//! 3. more `+1` updates while the master holding chat 1's dialogue fails over (skipped on a
//!    cluster this program did not start).
//!
//! Then a fresh client reads every dialogue back and checks it against what was sent and what
//! was answered: exit status 1 when a dialogue lost an update it had answered.
//!
//! ```sh
//! cargo run -p botmesh-redis-teloxide --example replicas
//! ```
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use botmesh_redis_harness::{ClusterOptions, RedisCluster};
use botmesh_redis_teloxide::{ChatTurns, DialogueStorage, StorageOptions};
use botmesh_redis_tokio::{ClientOptions, TurnOptions};
use serde::{Deserialize, Serialize};
use teloxide::dispatching::dialogue::serializer::Json;
use teloxide::dispatching::dialogue::{Dialogue, Storage};
use teloxide::dispatching::{Dispatcher, HandlerExt, UpdateFilterExt, UpdateHandler};
use teloxide::prelude::Requester;
use teloxide::types::{ChatId, Message, Update};
use teloxide::update_listeners::StatefulListener;
use teloxide::{dptree, Bot};
use tokio::sync::{mpsc, watch};
use tokio_stream::wrappers::UnboundedReceiverStream;
use tokio_stream::StreamExt;

const CHATS: i64 = 24;
const INCREMENTS_DURING_RESTART: u64 = 360;
const INCREMENTS_DURING_FAILOVER: u64 = 360;
/// One `+1` arrives every this long (open loop: whatever the replicas' pace).
const ARRIVAL: Duration = Duration::from_millis(3);

// ---------------------------------------------------------------------------------------------
// The bot: what a teloxide user writes. The only lines that are about replicas are the storage
// constructor and `turns.handler()` at the top of the schema.
// ---------------------------------------------------------------------------------------------

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
enum State {
    #[default]
    Start,
    ReceiveName,
    Counting {
        name: String,
        count: u64,
    },
}

type BotDialogue = Dialogue<State, DialogueStorage<Json>>;
type HandlerError = Box<dyn std::error::Error + Send + Sync>;
type HandlerResult = Result<(), HandlerError>;

fn schema(turns: ChatTurns) -> UpdateHandler<HandlerError> {
    // The chat's turn is taken before the dialogue is read, and given back after it is written:
    // no other replica handles this chat in between.
    dptree::entry().chain(turns.handler()).branch(
        Update::filter_message()
            .enter_dialogue::<Message, DialogueStorage<Json>, State>()
            .branch(dptree::case![State::Start].endpoint(start))
            .branch(dptree::case![State::ReceiveName].endpoint(receive_name))
            .branch(dptree::case![State::Counting { name, count }].endpoint(counting)),
    )
}

async fn start(bot: Bot, dialogue: BotDialogue, msg: Message) -> HandlerResult {
    dialogue.update(State::ReceiveName).await?;
    bot.send_message(msg.chat.id, "hello! what is your name?")
        .await?;
    Ok(())
}

async fn receive_name(bot: Bot, dialogue: BotDialogue, msg: Message) -> HandlerResult {
    let name = msg.text().unwrap_or("stranger").to_owned();
    bot.send_message(msg.chat.id, format!("counting for {name}; send +1"))
        .await?;
    dialogue.update(State::Counting { name, count: 0 }).await?;
    Ok(())
}

async fn counting(
    bot: Bot,
    dialogue: BotDialogue,
    (name, count): (String, u64),
    msg: Message,
) -> HandlerResult {
    if msg.text() == Some("+1") {
        // Written before the reply: a reply means the new count is stored.
        dialogue
            .update(State::Counting {
                name: name.clone(),
                count: count + 1,
            })
            .await?;
        bot.send_message(msg.chat.id, format!("{name}: {}", count + 1))
            .await?;
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// A replica: its own client, storage, turns and dispatcher, fed through a channel.
// ---------------------------------------------------------------------------------------------

struct Replica {
    name: String,
    updates: mpsc::UnboundedSender<Update>,
    dispatcher: tokio::task::JoinHandle<()>,
    storage: Arc<DialogueStorage<Json>>,
    turns: ChatTurns,
}

fn turn_options() -> TurnOptions {
    TurnOptions {
        poll_interval: Duration::from_millis(5),
        ..TurnOptions::default()
    }
}

async fn start_replica(
    name: &str,
    seeds: &[String],
    prefix: &str,
    api: &str,
    progress: watch::Sender<Progress>,
) -> Replica {
    // The one-line swap: was `RedisStorage::open("redis://...", Json).await?`.
    let storage = DialogueStorage::open_with(
        ClientOptions::cluster(seeds.iter().cloned()),
        StorageOptions::new(prefix),
        Json,
    )
    .await
    .unwrap();
    let turns = ChatTurns::start_with(
        storage.store(),
        name,
        turn_options(),
        Duration::from_secs(2),
    )
    .await
    .unwrap();
    let bot = Bot::new("12345:fake-token").set_api_url(api.parse().unwrap());
    let (updates, feed) = mpsc::unbounded_channel::<Update>();
    let (stop, _flag) = teloxide::stop::mk_stop_token();
    let listener = StatefulListener::new(
        Some(feed),
        |feed: &mut Option<mpsc::UnboundedReceiver<Update>>| {
            let feed = feed.take().unwrap_or_else(|| mpsc::unbounded_channel().1);
            UnboundedReceiverStream::new(feed).map(Ok::<Update, Infallible>)
        },
        move |_: &mut Option<mpsc::UnboundedReceiver<Update>>| stop.clone(),
    );
    let replica = name.to_owned();
    let on_error = Arc::new(move |e: HandlerError| {
        eprintln!("{replica}: handler error (Telegram would redeliver): {e}");
        progress.send_modify(|p| p.errors += 1);
        async {}
    });
    let mut dispatcher = Dispatcher::builder(bot, schema(turns.clone()))
        .dependencies(dptree::deps![Arc::clone(&storage)])
        .error_handler(on_error)
        .build();
    let listener_errors = teloxide::error_handlers::LoggingErrorHandler::new();
    let dispatcher = tokio::spawn(async move {
        dispatcher
            .dispatch_with_listener(listener, listener_errors)
            .await;
    });
    Replica {
        name: name.to_owned(),
        updates,
        dispatcher,
        storage,
        turns,
    }
}

impl Replica {
    /// A clean stop: no more updates; the dispatcher finishes those it was given.
    async fn stop(self) {
        drop(self.updates);
        self.dispatcher.await.unwrap();
        self.turns.stop().await.ok();
        self.storage.close().await;
    }
}

// ---------------------------------------------------------------------------------------------
// The fake Bot API server: getMe and sendMessage, on loopback, replies recorded.
// ---------------------------------------------------------------------------------------------

#[derive(Clone, Debug, Default)]
struct Progress {
    replies: u64,
    errors: u64,
}

#[derive(Default)]
struct Replies {
    by_chat: BTreeMap<i64, Vec<String>>,
}

fn serve_bot_api(replies: Arc<Mutex<Replies>>, progress: watch::Sender<Progress>) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let (replies, progress) = (Arc::clone(&replies), progress.clone());
            std::thread::spawn(move || serve_connection(stream, &replies, &progress));
        }
    });
    url
}

/// HTTP/1.1 with keep-alive: one request after another until the client hangs up.
fn serve_connection(
    stream: TcpStream,
    replies: &Mutex<Replies>,
    progress: &watch::Sender<Progress>,
) {
    let mut writer = stream.try_clone().unwrap();
    let mut reader = BufReader::new(stream);
    loop {
        let mut request_line = String::new();
        if reader.read_line(&mut request_line).unwrap_or(0) == 0 {
            return;
        }
        let mut length = 0;
        loop {
            let mut header = String::new();
            if reader.read_line(&mut header).unwrap_or(0) == 0 {
                return;
            }
            if header == "\r\n" {
                break;
            }
            if let Some((name, value)) = header.split_once(':') {
                if name.eq_ignore_ascii_case("content-length") {
                    length = value.trim().parse().unwrap_or(0);
                }
            }
        }
        let mut body = vec![0; length];
        if reader.read_exact(&mut body).is_err() {
            return;
        }
        let method = request_line
            .split_whitespace()
            .nth(1)
            .and_then(|path| path.rsplit('/').next())
            .unwrap_or("");
        // teloxide names methods as `GetMe`, Telegram's documentation as `getMe`.
        let result = match method.to_ascii_lowercase().as_str() {
            "getme" => serde_json::json!({
                "id": 1, "is_bot": true, "first_name": "mesh", "username": "mesh_bot",
                "can_join_groups": false, "can_read_all_group_messages": false,
                "supports_inline_queries": false, "has_main_web_app": false
            }),
            "sendmessage" => {
                let call: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
                let chat = call["chat_id"].as_i64().unwrap_or_default();
                let text = call["text"].as_str().unwrap_or_default().to_owned();
                replies
                    .lock()
                    .unwrap()
                    .by_chat
                    .entry(chat)
                    .or_default()
                    .push(text.clone());
                progress.send_modify(|p| p.replies += 1);
                message_json(0, chat, &text, true)
            }
            other => {
                let body =
                    format!("{{\"ok\":false,\"error_code\":404,\"description\":\"no {other}\"}}");
                let _ = write!(
                    writer,
                    "HTTP/1.1 404 Not Found\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
                    body.len()
                );
                continue;
            }
        };
        let body = serde_json::json!({ "ok": true, "result": result }).to_string();
        let written = write!(
            writer,
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        if written.is_err() {
            return;
        }
    }
}

/// A private-chat text message, as Telegram sends it (`from_bot`: the bot's own reply).
fn message_json(id: u64, chat: i64, text: &str, from_bot: bool) -> serde_json::Value {
    let from = match from_bot {
        true => serde_json::json!({ "id": 1, "is_bot": true, "first_name": "mesh" }),
        false => {
            serde_json::json!({ "id": chat, "is_bot": false, "first_name": format!("user{chat}") })
        }
    };
    serde_json::json!({
        "message_id": id,
        "date": 1_700_000_000,
        "chat": { "id": chat, "type": "private", "first_name": format!("user{chat}") },
        "from": from,
        "text": text,
    })
}

// ---------------------------------------------------------------------------------------------
// The load balancer and the run.
// ---------------------------------------------------------------------------------------------

struct Traffic {
    next_update: u64,
    next_replica: usize,
    sent_increments: BTreeMap<i64, u64>,
    routed: BTreeMap<String, u64>,
}

impl Traffic {
    fn update(&mut self, chat: i64, text: &str) -> Update {
        self.next_update += 1;
        let json = serde_json::json!({
            "update_id": self.next_update,
            "message": message_json(self.next_update, chat, text, false),
        });
        // From text, as an update arrives: teloxide's `Update` does not read back from a
        // `serde_json::Value` (its message then becomes `UpdateKind::Error`).
        serde_json::from_str(&json.to_string()).unwrap()
    }

    /// Sends to the next live replica in turn (so one chat's updates land on every replica).
    fn send(&mut self, replicas: &[Option<Replica>], chat: i64, text: &str) {
        let update = self.update(chat, text);
        let live: Vec<&Replica> = replicas.iter().flatten().collect();
        let replica = live[self.next_replica % live.len()];
        self.next_replica += 1;
        if text == "+1" {
            *self.sent_increments.entry(chat).or_default() += 1;
        }
        *self.routed.entry(replica.name.clone()).or_default() += 1;
        replica.updates.send(update).unwrap();
    }
}

async fn wait_for(progress: &mut watch::Receiver<Progress>, sent: u64, what: &str) {
    let done = tokio::time::timeout(
        Duration::from_secs(120),
        progress.wait_for(|p| p.replies + p.errors >= sent),
    )
    .await
    .is_ok();
    assert!(
        done,
        "timed out waiting for {what}: {:?}",
        *progress.borrow()
    );
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let prefix = std::env::var("BOTMESH_PREFIX").unwrap_or_else(|_| "teloxide-example".into());
    let (seeds, cluster) = match std::env::var("BOTMESH_CLUSTER") {
        Ok(seeds) => {
            println!("cluster: BOTMESH_CLUSTER={seeds} (not ours: the failover step is skipped)");
            (
                seeds.split(',').map(str::to_owned).collect::<Vec<_>>(),
                None,
            )
        }
        Err(_) => {
            let cluster =
                tokio::task::spawn_blocking(|| RedisCluster::start(ClusterOptions::default()))
                    .await
                    .unwrap();
            println!(
                "cluster: a throwaway 3 masters x 1 replica at {:?}",
                cluster.seeds()
            );
            (cluster.seeds(), Some(Arc::new(cluster)))
        }
    };

    let replies = Arc::new(Mutex::new(Replies::default()));
    let (progress_tx, mut progress) = watch::channel(Progress::default());
    let api = serve_bot_api(Arc::clone(&replies), progress_tx.clone());
    println!("fake Bot API at {api}");

    // A clean slate for the chats of this run.
    let checker = DialogueStorage::open_with(
        ClientOptions::cluster(seeds.iter().cloned()),
        StorageOptions::new(prefix.clone()),
        Json,
    )
    .await
    .unwrap();
    for chat in 1..=CHATS {
        let _ = <DialogueStorage<Json> as Storage<State>>::remove_dialogue(
            Arc::clone(&checker),
            ChatId(chat),
        )
        .await;
    }

    let mut replicas = Vec::new();
    for r in 0..3 {
        let name = format!("replica-{r}");
        replicas.push(Some(
            start_replica(&name, &seeds, &prefix, &api, progress_tx.clone()).await,
        ));
    }
    let mut traffic = Traffic {
        next_update: 0,
        next_replica: 0,
        sent_increments: BTreeMap::new(),
        routed: BTreeMap::new(),
    };

    // 1. Hello and a name, one update after the other per chat (a user waits for the answer).
    let mut sent = 0;
    for step in ["hello", "name"] {
        for chat in 1..=CHATS {
            let text = match step {
                "hello" => "/start".to_owned(),
                _ => format!("Ana{chat}"),
            };
            traffic.send(&replicas, chat, &text);
            sent += 1;
        }
        wait_for(&mut progress, sent, step).await;
    }
    println!("1. {CHATS} chats said hello and gave a name");

    // 2. +1 on every chat at once; replica 1 stops and comes back meanwhile.
    let mut arrivals = tokio::time::interval(ARRIVAL);
    arrivals.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    for i in 0..INCREMENTS_DURING_RESTART {
        arrivals.tick().await;
        if i == INCREMENTS_DURING_RESTART / 3 {
            let stopped = replicas[1].take().unwrap();
            let name = stopped.name.clone();
            stopped.stop().await;
            println!("2. {name} stopped (it finished the updates it had been given)");
        }
        if i == 2 * INCREMENTS_DURING_RESTART / 3 {
            let replica = start_replica(
                "replica-1-restarted",
                &seeds,
                &prefix,
                &api,
                progress_tx.clone(),
            )
            .await;
            println!("2. replica-1 started again as {}", replica.name);
            replicas[1] = Some(replica);
        }
        traffic.send(&replicas, (i as i64 % CHATS) + 1, "+1");
        sent += 1;
    }
    wait_for(&mut progress, sent, "the increments around the restart").await;

    // 3. +1 on every chat while the master of chat 1's dialogue fails over.
    let failover = cluster.as_ref().map(|cluster| {
        let cluster = Arc::clone(cluster);
        let victim = cluster.master_for_key(format!("{prefix}:conv:1")).unwrap();
        (
            victim,
            tokio::task::spawn_blocking(move || cluster.failover(victim)),
        )
    });
    // Traffic runs on until the failover is over, and as long again after it.
    let mut i = 0;
    let mut over_at = None;
    loop {
        arrivals.tick().await;
        let over = failover.as_ref().is_none_or(|(_, done)| done.is_finished());
        if over && over_at.is_none() {
            over_at = Some(i);
        }
        if over_at.is_some_and(|at| i >= (2 * at).max(INCREMENTS_DURING_FAILOVER)) {
            break;
        }
        traffic.send(&replicas, (i as i64 % CHATS) + 1, "+1");
        sent += 1;
        i += 1;
    }
    match failover {
        Some((victim, done)) => {
            let promoted = done.await.unwrap().unwrap();
            println!(
                "3. failover: master {victim} (chat 1's dialogue) handed over to {promoted}, \
                 {} increments sent while it ran, {} after",
                over_at.unwrap_or_default(),
                i - over_at.unwrap_or_default()
            );
        }
        None => println!("3. failover skipped (the cluster is not this program's)"),
    }
    wait_for(&mut progress, sent, "the increments around the failover").await;
    for replica in replicas.into_iter().flatten() {
        replica.stop().await;
    }

    // The check, by a client that took no part.
    let replies = replies.lock().unwrap().by_chat.clone();
    let errors = progress.borrow().errors;
    let mut lost = Vec::new();
    let mut exact = 0;
    for chat in 1..=CHATS {
        let dialogue: Option<State> = Arc::clone(&checker)
            .get_dialogue(ChatId(chat))
            .await
            .unwrap();
        let sent = traffic.sent_increments.get(&chat).copied().unwrap_or(0);
        // Replies to +1 carry the count: the answered increments of this chat.
        let answered = replies
            .get(&chat)
            .map_or(0, |r| r.iter().filter(|t| t.starts_with("Ana")).count())
            as u64;
        match dialogue {
            Some(State::Counting { count, .. }) if count == sent && answered == sent => exact += 1,
            Some(State::Counting { count, .. }) if answered <= count && count <= sent => {
                println!("chat {chat}: {count} counted, {answered} answered, {sent} sent (handler errors)");
            }
            other => lost.push(format!(
                "chat {chat}: {other:?}, {answered} answered, {sent} sent"
            )),
        }
    }
    checker.close().await;
    println!("updates routed per replica: {:?}", traffic.routed);
    println!(
        "summary: {CHATS} chats, {sent} updates over 3 replicas, a restart, {}; {exact} dialogues \
         exact, {errors} handler errors, {} dialogues lost",
        if cluster.is_some() {
            "a failover"
        } else {
            "no failover"
        },
        lost.len()
    );
    for line in &lost {
        println!("LOST {line}");
    }
    if !lost.is_empty() {
        std::process::exit(1);
    }
}
