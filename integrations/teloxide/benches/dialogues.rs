//! The dialogue workload of a busy bot, on our storage and on teloxide's own `RedisStorage`:
//! 64 chats at once, each a loop of `get_dialogue` then `update_dialogue` (one update = both),
//! for a fixed time, on a single node the harness starts (and ours also on a 3-master x 1-replica
//! cluster, and ours again with each update inside the chat's turn, as a multi-replica bot runs
//! it). Prints updates per second and the p50 / p99 / max latency of one update.
//!
//! ```sh
//! cargo bench -p botmesh-redis-teloxide --bench dialogues -- --seconds 10 --rounds 3
//! ```
//!
//! Rounds alternate the storages (teloxide, ours, teloxide, ...) so that drift of the machine
//! hits both; the summary gives each one's median round and the ratio of the medians.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::fmt::{Debug, Display};
use std::sync::Arc;
use std::time::{Duration, Instant};

use botmesh_redis_harness::{ClusterOptions, RedisCluster, ServerOptions, SingleNode};
use botmesh_redis_teloxide::{ChatTurns, DialogueStorage, StorageOptions};
use botmesh_redis_tokio::ClientOptions;
use serde::{Deserialize, Serialize};
use teloxide::dispatching::dialogue::serializer::Json;
use teloxide::dispatching::dialogue::{RedisStorage, Storage};
use teloxide::types::ChatId;

const CHATS: i64 = 64;

/// A dialogue of the size bots keep: a step, a bit of text, a counter.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
struct Dialogue {
    step: u32,
    name: String,
    count: u64,
}

/// One run's figures.
struct Run {
    updates: u64,
    elapsed: Duration,
    latencies: Vec<Duration>,
}

impl Run {
    fn rate(&self) -> f64 {
        self.updates as f64 / self.elapsed.as_secs_f64()
    }

    fn quantile(&self, q: f64) -> Duration {
        let i = ((self.latencies.len() as f64 - 1.0) * q).round() as usize;
        self.latencies.get(i).copied().unwrap_or_default()
    }

    fn line(&self, name: &str) -> String {
        format!(
            "{name:<38} {:>9.0} updates/s   p50 {:>7.3} ms   p99 {:>7.3} ms   max {:>7.3} ms",
            self.rate(),
            self.quantile(0.5).as_secs_f64() * 1e3,
            self.quantile(0.99).as_secs_f64() * 1e3,
            self.latencies
                .last()
                .copied()
                .unwrap_or_default()
                .as_secs_f64()
                * 1e3,
        )
    }
}

/// 64 chats, each updating its dialogue in a loop for `seconds`; chat ids start at `base` and
/// must have no dialogue yet.
async fn workload<St>(
    storage: Arc<St>,
    turns: Option<ChatTurns>,
    base: i64,
    seconds: Duration,
) -> Run
where
    St: Storage<Dialogue> + Send + Sync + 'static,
    St::Error: Debug + Display + Send,
{
    let start = Instant::now();
    let end = start + seconds;
    let mut tasks = Vec::new();
    for chat in 0..CHATS {
        let storage = Arc::clone(&storage);
        let turns = turns.clone();
        let chat = ChatId(base + chat);
        tasks.push(tokio::spawn(async move {
            let mut latencies = Vec::with_capacity(64 * 1024);
            while Instant::now() < end {
                let began = Instant::now();
                let update = {
                    let storage = Arc::clone(&storage);
                    async move {
                        let mut dialogue = Arc::clone(&storage)
                            .get_dialogue(chat)
                            .await
                            .unwrap()
                            .unwrap_or_default();
                        dialogue.count += 1;
                        dialogue.step = (dialogue.step + 1) % 4;
                        dialogue.name = format!("user-{}", chat.0);
                        // Inside a turn, the write renews the turn first.
                        storage.update_dialogue(chat, dialogue).await.unwrap();
                    }
                };
                match &turns {
                    // Take, read, renew, write, release: as `ChatTurns::handler` runs an update.
                    Some(turns) => turns.run(chat, |_guard| update).await.unwrap(),
                    None => update.await,
                }
                latencies.push(began.elapsed());
            }
            latencies
        }));
    }
    let mut latencies = Vec::new();
    for task in tasks {
        latencies.extend(task.await.unwrap());
    }
    let elapsed = start.elapsed();
    // Every update landed: the chats' counts add up to the updates made.
    let mut counted = 0;
    for chat in 0..CHATS {
        let dialogue = Arc::clone(&storage)
            .get_dialogue(ChatId(base + chat))
            .await
            .unwrap();
        counted += dialogue.map_or(0, |d| d.count);
    }
    assert_eq!(
        counted,
        latencies.len() as u64,
        "updates lost by the storage"
    );
    latencies.sort_unstable();
    Run {
        updates: latencies.len() as u64,
        elapsed,
        latencies,
    }
}

fn arg(name: &str, default: u64) -> u64 {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .map(|v| {
            v.parse()
                .unwrap_or_else(|_| panic!("{name} wants a number, got {v}"))
        })
        .unwrap_or(default)
}

fn median(mut rates: Vec<f64>) -> f64 {
    rates.sort_by(f64::total_cmp);
    rates[rates.len() / 2]
}

fn main() {
    // `cargo bench` passes `--bench`; a plain `cargo test` of the bench target passes nothing
    // and should not spend a minute: one short round then.
    let benching = std::env::args().any(|a| a == "--bench");
    let seconds = Duration::from_secs(arg("--seconds", if benching { 10 } else { 1 }));
    let rounds = arg("--rounds", if benching { 3 } else { 1 }).max(1);
    let workers = arg("--workers", 2) as usize;

    let node = SingleNode::start(ServerOptions::new());
    let cluster = RedisCluster::start(ClusterOptions::default());
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .enable_all()
        .build()
        .unwrap();
    println!(
        "dialogue workload: {CHATS} chats, get + update per step, {seconds:?} per run, {rounds} \
         round(s), tokio multi-thread with {workers} workers, {} CPUs",
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    runtime.block_on(async {
        let theirs_storage = RedisStorage::open(&node.url(), Json).await.unwrap();
        let ours_storage = DialogueStorage::open_with(
            ClientOptions::url(node.url()),
            StorageOptions::new("bench"),
            Json,
        )
        .await
        .unwrap();
        let cluster_storage = DialogueStorage::open_with(
            ClientOptions::cluster(cluster.seeds()),
            StorageOptions::new("bench"),
            Json,
        )
        .await
        .unwrap();
        let turns = ChatTurns::start(ours_storage.store(), "bench-single").await.unwrap();
        let cluster_turns = ChatTurns::start(cluster_storage.store(), "bench-cluster")
            .await
            .unwrap();
        let (mut theirs, mut ours, mut on_cluster) = (Vec::new(), Vec::new(), Vec::new());
        // Fresh chats every run, so that each run's counts start at zero.
        for round in 1..=rounds {
            let base = round as i64 * 10_000;
            let run = workload(Arc::clone(&theirs_storage), None, base + 1_000, seconds).await;
            println!("round {round}: {}", run.line("teloxide RedisStorage (1 node)"));
            theirs.push(run.rate());
            let run = workload(Arc::clone(&ours_storage), None, base + 2_000, seconds).await;
            println!("round {round}: {}", run.line("botmesh DialogueStorage (1 node)"));
            ours.push(run.rate());
            let run = workload(Arc::clone(&cluster_storage), None, base + 3_000, seconds).await;
            println!("round {round}: {}", run.line("botmesh DialogueStorage (3x1 cluster)"));
            on_cluster.push(run.rate());
            let run =
                workload(Arc::clone(&ours_storage), Some(turns.clone()), base + 4_000, seconds).await;
            println!("round {round}: {}", run.line("botmesh + turns (1 node)"));
            let run = workload(
                Arc::clone(&cluster_storage),
                Some(cluster_turns.clone()),
                base + 5_000,
                seconds,
            )
            .await;
            println!("round {round}: {}", run.line("botmesh + turns (3x1 cluster)"));
        }
        let (theirs, ours, on_cluster) = (median(theirs), median(ours), median(on_cluster));
        println!(
            "summary: median updates/s: teloxide RedisStorage {theirs:.0}, botmesh {ours:.0} \
             ({:.2}x), botmesh on the cluster {on_cluster:.0} (teloxide's storage cannot run there)",
            ours / theirs
        );
        ours_storage.close().await;
        cluster_storage.close().await;
    });
}
