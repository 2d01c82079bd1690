//! A chat log another program wrote (copied as it is by a migration, or read in place in the
//! legacy layout) may score a message with a fraction of a millisecond. Such a message is
//! listed at its score's floor, and its cursor leads past it: compared with the score itself,
//! the cursor never matched, and every next page started again at the same message.

use botmesh_redis_core::{Executor, Limit, MessageCursor, Store};
use botmesh_redis_tests::both_drivers;
use botmesh_redis_tests::conformance::Runtime;
use botmesh_redis_tests::coord::key_cmd;
use botmesh_redis_tests::store::Setup;

/// Writes message `id` of `chat` at `score`, as another program would.
async fn foreign_message<E: Executor>(store: &Store<E>, chat: &str, id: &str, score: &str) {
    let (ks, exec) = (store.keyspace(), store.executor());
    key_cmd(exec, "ZADD", &ks.message_log(chat), &[score, id]).await;
    let item = format!("{id}@{score}");
    key_cmd(exec, "SET", &ks.message_item(chat, id), &[item.as_str()]).await;
}

/// Every page of `chat`, `limit` at a time, as (id, time): at most 20 pages.
async fn pages<E: Executor>(store: &Store<E>, chat: &str, limit: Limit) -> Vec<(String, i64)> {
    let mut listed = Vec::new();
    let mut after: Option<MessageCursor> = None;
    for _ in 0..20 {
        let page = store
            .list_messages(chat, .., after.as_ref(), limit)
            .await
            .unwrap();
        listed.extend(page.items.into_iter().map(|m| (m.id, m.time_ms)));
        match page.next {
            Some(next) => after = Some(next),
            None => return listed,
        }
    }
    panic!("the listing of {chat} did not end in 20 pages: {listed:?}");
}

async fn fractional_scores_list_once_each<R: Runtime>(setup: Setup) {
    let store = setup.store::<R>("foreign-scores").await;
    for (id, score) in [("a", "1000"), ("f", "1000.5"), ("z", "1001")] {
        foreign_message(&store, "c", id, score).await;
    }
    let want = |pairs: &[(&str, i64)]| -> Vec<(String, i64)> {
        pairs.iter().map(|&(id, t)| (id.to_owned(), t)).collect()
    };
    assert_eq!(
        pages(&store, "c", Limit::ONE).await,
        want(&[("a", 1000), ("f", 1000), ("z", 1001)])
    );
    // Two in one millisecond, and below zero (the floor, not the integer part).
    for (id, score) in [("p", "2000.3"), ("q", "2000.6"), ("n", "-5.5")] {
        foreign_message(&store, "d", id, score).await;
    }
    let limit = Limit::new(2).unwrap();
    assert_eq!(
        pages(&store, "d", limit).await,
        want(&[("n", -6), ("p", 2000), ("q", 2000)])
    );
    assert_eq!(
        pages(&store, "d", Limit::ONE).await,
        want(&[("n", -6), ("p", 2000), ("q", 2000)])
    );
}

both_drivers!(fractional_scores_list_once_each {
    single_node_legacy_layout => Setup::SingleLegacy,
    single_node_cluster_layout => Setup::SingleCluster,
    cluster => Setup::Cluster,
});
