//! Listings stay exact while the slot of a bucket index is being moved between masters: first
//! with only the index moved (records still on the source), then with every key of the slot
//! moved but the slot not yet handed over, then after the move. Checkpoints, whose listing is a
//! script on the index, go through the same three stages.
//!
//! Slot moves change the topology: this file owns its cluster. The two drivers' runs share it
//! and take turns; each moves the index slots away from whichever master owns them by then.

use std::net::SocketAddr;
use std::sync::OnceLock;

use botmesh_redis_core::keys::bucket;
use botmesh_redis_core::keys::RecordKind;
use botmesh_redis_core::Store;
use botmesh_redis_core::{ClientOptions, Layout, Limit};
use botmesh_redis_tests::conformance::{Client, Runtime};
use botmesh_redis_tests::store::{store_on, NASTY};
use botmesh_redis_tests::{both_drivers, parse_info, unique_prefix, ClusterOptions, RedisCluster};

/// Every id of a listing, page by page.
async fn listed<R: Runtime>(store: &Store<Client<R>>, kind: RecordKind) -> Vec<String> {
    let mut after = None;
    let seven = Limit::of::<7>();
    let mut ids = Vec::new();
    loop {
        let page = match kind {
            RecordKind::Chat => store.list_chats(after.as_ref(), seven).await,
            _ => store.list_checkpoints(after.as_ref(), seven).await,
        }
        .unwrap();
        ids.extend(page.items.into_iter().map(|r| r.id));
        match page.next {
            Some(next) => after = Some(next),
            None => return ids,
        }
    }
}

fn other_master(cluster: &RedisCluster, than: SocketAddr) -> SocketAddr {
    cluster
        .masters()
        .unwrap()
        .into_iter()
        .find(|m| *m != than)
        .unwrap()
}

/// How many `ASK` replies `node` has sent (`INFO errorstats`).
fn ask_count(cluster: &RedisCluster, node: SocketAddr) -> u64 {
    let info = cluster
        .conn(node)
        .unwrap()
        .cmd(&["INFO", "errorstats"])
        .unwrap();
    parse_info(info.as_str().unwrap())
        .get("errorstat_ASK")
        .and_then(|v| v.strip_prefix("count="))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

fn cluster() -> &'static RedisCluster {
    static CLUSTER: OnceLock<RedisCluster> = OnceLock::new();
    CLUSTER.get_or_init(|| RedisCluster::start(ClusterOptions::new()))
}
static TURN: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

async fn listings_are_exact_while_an_index_slot_moves<R: Runtime>() {
    let _turn = TURN.lock().await;
    let cluster = tokio::task::spawn_blocking(cluster).await.unwrap();
    let client = Client::<R>::connect(ClientOptions::cluster(cluster.seeds()))
        .await
        .unwrap();
    let store = store_on(client, Layout::Cluster, &unique_prefix("st-move"));
    store.start().await.unwrap();

    let mut expected: Vec<String> = (0..300).map(|i| format!("chat-{i}")).collect();
    expected.extend(NASTY.iter().map(|s| (*s).to_owned()));
    expected.sort();
    for id in &expected {
        store.upsert_chat(id, id.clone().into()).await.unwrap();
        store
            .set_checkpoint(id, id.clone().into(), None)
            .await
            .unwrap();
    }

    for kind in [RecordKind::Chat, RecordKind::Checkpoint] {
        let ks = store.keyspace();
        let b = bucket("chat-1");
        let index = ks.record_index(kind, b).unwrap();
        // Several records share the bucket, so its MGET is a multi-key read in the moving slot.
        assert!(expected.iter().filter(|id| bucket(id) == b).count() > 1);
        let slot = index.slot();
        let source = cluster.master_for_slot(slot).unwrap();
        let migration = cluster
            .begin_migration(slot, other_master(cluster, source))
            .unwrap();

        // Only the index has moved: its read follows ASK, the records are read on the source.
        migration.migrate_keys(&[index.as_bytes()]).unwrap();
        let asks = ask_count(cluster, source);
        assert_eq!(
            listed(&store, kind).await,
            expected,
            "{kind:?}: index moved"
        );
        assert!(
            ask_count(cluster, source) > asks,
            "the listing followed ASK"
        );

        // Every key of the slot has moved, the slot is not handed over yet.
        migration.migrate_all_keys().unwrap();
        assert_eq!(listed(&store, kind).await, expected, "{kind:?}: keys moved");

        migration.finish().unwrap();
        assert_eq!(listed(&store, kind).await, expected, "{kind:?}: slot moved");
    }
    store.executor().close().await;
}

both_drivers!(listings_are_exact_while_an_index_slot_moves);
