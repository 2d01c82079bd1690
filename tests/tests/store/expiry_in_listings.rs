//! Expired checkpoints and user-data entries leave listings when their keys expire, with no
//! write in between: the cluster layout's indexes are scored by server-side expiry and pruned by
//! the listing itself; the legacy layout lists by `SCAN`, which never sees an expired key.

use std::time::Duration;

use botmesh_redis_core::keys::RecordKind;
use botmesh_redis_core::Store;
use botmesh_redis_core::{Executor, Layout, Limit};
use botmesh_redis_tests::both_drivers;
use botmesh_redis_tests::conformance::Runtime;
use botmesh_redis_tests::coord::server_ms;
use botmesh_redis_tests::eventually;
use botmesh_redis_tests::store::{zmembers, Setup};

const SHORT: Duration = Duration::from_millis(300);
/// How long an expiry may take to show: the TTL plus generous slack for a loaded machine.
const BOUND: Duration = Duration::from_secs(10);

async fn checkpoints_expire<E: Executor>(store: &Store<E>) {
    store
        .set_checkpoint("short:{1}", "s".into(), Some(SHORT))
        .await
        .unwrap();
    store
        .set_checkpoint("long", "l".into(), Some(Duration::from_secs(600)))
        .await
        .unwrap();
    store
        .set_checkpoint("forever", "f".into(), None)
        .await
        .unwrap();
    let ids = |page: botmesh_redis_core::RecordPage| -> Vec<String> {
        page.items.into_iter().map(|r| r.id).collect()
    };
    assert_eq!(
        ids(store.list_checkpoints(None, Limit::DEFAULT).await.unwrap()),
        ["forever", "long", "short:{1}"]
    );
    // The listing leaves the checkpoint out as soon as its key expired; the index member goes
    // with the first listing whose server time has passed the member's score (the two can be
    // a step apart), so both are awaited.
    let index = store
        .keyspace()
        .record_index_of(RecordKind::Checkpoint, "short:{1}");
    eventually(
        BOUND,
        "the expired checkpoint leaves the listing and its index",
        || async {
            let listed = ids(store.list_checkpoints(None, Limit::DEFAULT).await.unwrap());
            let pruned = match &index {
                Some(index) => !zmembers(store.executor(), index)
                    .await
                    .contains(&"short:{1}".to_owned()),
                None => true,
            };
            (listed == ["forever", "long"] && pruned).then_some(())
        },
    )
    .await;
    assert_eq!(store.get_checkpoint("short:{1}").await.unwrap(), None);
    assert_eq!(
        ids(store.list_checkpoints(None, Limit::DEFAULT).await.unwrap()),
        ["forever", "long"]
    );
}

async fn user_entries_expire<E: Executor>(store: &Store<E>) {
    // The legacy layout refuses a `:` in a user id (its entry names would read back
    // ambiguously); the cluster layout encodes it.
    let user = match store.layout() {
        Layout::Legacy => "user-{7}",
        Layout::Cluster => "user:{7}",
    };
    store
        .set_user_data(user, "ns", "short", "s".into(), Some(SHORT))
        .await
        .unwrap();
    store
        .set_user_data(user, "ns", "kept", "k".into(), None)
        .await
        .unwrap();
    store
        .set_user_data(user, "other", "short", "s".into(), Some(SHORT))
        .await
        .unwrap();
    let keys = |entries: Vec<botmesh_redis_core::UserEntry>| -> Vec<(String, String)> {
        entries.into_iter().map(|e| (e.ns, e.key)).collect()
    };
    assert_eq!(
        store
            .list_user_data(user, None, None, Limit::MAX)
            .await
            .unwrap()
            .items
            .len(),
        3
    );
    // As for checkpoints: the listing and the index are awaited together.
    let index = store.keyspace().user_index(user);
    eventually(
        BOUND,
        "the expired entries leave the listing and the index",
        || async {
            let listed = keys(
                store
                    .list_user_data(user, None, None, Limit::MAX)
                    .await
                    .unwrap()
                    .items,
            );
            let pruned = match &index {
                Some(index) => zmembers(store.executor(), index).await == ["ns:kept"],
                None => true,
            };
            (listed == [("ns".to_owned(), "kept".to_owned())] && pruned).then_some(())
        },
    )
    .await;
    assert!(store
        .list_user_data(user, Some("other"), None, Limit::MAX)
        .await
        .unwrap()
        .items
        .is_empty());
}

/// Every write drops up to 10 expired members of its index: a bot that writes expiring
/// entries under new ids and never lists them kept every member for good before (the keys
/// expired, their members stayed).
async fn writes_prune_what_expired<E: Executor>(store: &Store<E>) {
    let user = "u";
    let Some(index) = store.keyspace().user_index(user) else {
        panic!("the cluster layout indexes user data");
    };
    for i in 0..200 {
        store
            .set_user_data(
                user,
                "seen",
                &format!("m{i}"),
                "1".into(),
                Some(Duration::from_millis(1)),
            )
            .await
            .unwrap();
    }
    let from = server_ms(store.executor()).await;
    eventually(BOUND, "2 ms of server time", || async {
        (server_ms(store.executor()).await > from + 2).then_some(())
    })
    .await;
    let expired = zmembers(store.executor(), &index).await.len();
    for k in 1..=25 {
        store
            .set_user_data(user, "kept", &format!("k{k}"), "1".into(), None)
            .await
            .unwrap();
        assert_eq!(
            zmembers(store.executor(), &index).await.len(),
            expired.saturating_sub(10 * k) + k,
            "after {k} writes, of {expired} expired members"
        );
    }
}

async fn run_all<R: Runtime>(setup: Setup) {
    checkpoints_expire(&setup.store::<R>("st-exp-cp").await).await;
    user_entries_expire(&setup.store::<R>("st-exp-ud").await).await;
    if setup.layout() == Layout::Cluster {
        writes_prune_what_expired(&setup.store::<R>("st-exp-prune").await).await;
    }
}

both_drivers!(run_all {
    single_node_legacy_layout => Setup::SingleLegacy,
    single_node_cluster_layout => Setup::SingleCluster,
    cluster => Setup::Cluster,
});
