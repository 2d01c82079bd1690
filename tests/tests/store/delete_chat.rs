//! `delete_chat` keeps its invariants against real servers, in every setup:
//!
//! - a 10,000-message chat is deleted while another task keeps saving new messages (and saves
//!   one old id again): exactly the messages saved after the delete began survive, item and log
//!   entry, and no item is left without its entry;
//! - a delete that stops between two steps (a crash) leaves every item with its log entry, the
//!   chat record in place, and a second call finishes the job;
//! - a log that another program wrote, holding an id that is not UTF-8, is deleted whole, that
//!   id's item with it.

use std::collections::BTreeSet;
use std::sync::Arc;

use botmesh_redis_core::{Access, Error, Executor, Request};
use botmesh_redis_core::{Limit, Store, StoreOptions};
use botmesh_redis_tests::both_drivers;
use botmesh_redis_tests::conformance::{driver_name, Client, Runtime};
use botmesh_redis_tests::store::{exists, item_keys, zmembers, Setup, SignalFirstStep, StopAfter};
use bytes::Bytes;

/// Saves `ids` (time = position) with up to 100 saves in flight.
async fn save_many<R: Runtime>(store: &Store<Client<R>>, chat: &str, ids: Vec<String>) {
    let mut tasks = tokio::task::JoinSet::new();
    for (i, id) in ids.into_iter().enumerate() {
        if tasks.len() >= 100 {
            tasks.join_next().await.unwrap().unwrap();
        }
        let store = store.clone();
        let chat = chat.to_owned();
        tasks.spawn(async move {
            let payload = Bytes::from(format!("payload {id}"));
            store
                .save_message(&chat, &id, i as i64, payload)
                .await
                .unwrap();
        });
    }
    while let Some(done) = tasks.join_next().await {
        done.unwrap();
    }
}

/// Every message id of the chat, by listing.
async fn listed_ids<E: Executor>(store: &Store<E>, chat: &str) -> BTreeSet<String> {
    let mut after = None;
    let mut ids = BTreeSet::new();
    loop {
        let page = store
            .list_messages(chat, .., after.as_ref(), Limit::MAX)
            .await
            .unwrap();
        ids.extend(page.items.into_iter().map(|m| m.id));
        match page.next {
            Some(next) => after = Some(next),
            None => return ids,
        }
    }
}

/// The item keys of `ids`.
fn items_of<'a, R: Runtime>(
    store: &Store<Client<R>>,
    chat: &str,
    ids: impl IntoIterator<Item = &'a String>,
) -> BTreeSet<Vec<u8>> {
    ids.into_iter()
        .map(|id| store.keyspace().message_item(chat, id).as_bytes().to_vec())
        .collect()
}

/// No item without its entry in the log or the drain, and no entry without its item.
async fn assert_no_dangling<R: Runtime>(
    setup: Setup,
    store: &Store<Client<R>>,
    chat: &str,
) -> BTreeSet<String> {
    let ks = store.keyspace();
    let mut members: BTreeSet<String> = zmembers(store.executor(), &ks.message_log(chat))
        .await
        .into_iter()
        .collect();
    members.extend(zmembers(store.executor(), &ks.message_drain(chat)).await);
    assert_eq!(
        item_keys(setup, ks, chat),
        items_of(store, chat, &members),
        "items and log entries disagree"
    );
    members
}

async fn delete_with_concurrent_saves<R: Runtime>(setup: Setup) {
    let store = setup.store::<R>("st-del-big").await;
    let chat = "big:{chat} 😀";
    let old: Vec<String> = (0..10_000).map(|i| format!("m{i}")).collect();
    save_many(&store, chat, old.clone()).await;
    store.upsert_chat(chat, "record".into()).await.unwrap();
    assert_eq!(listed_ids(&store, chat).await.len(), 10_000);

    // The same store, through an executor that says when the delete has begun.
    let began = Arc::new(tokio::sync::Notify::new());
    let signalling = Store::new(
        SignalFirstStep {
            inner: store.executor().clone(),
            first_step: began.clone(),
        },
        StoreOptions::new(store.keyspace().prefix()).layout(store.layout()),
    )
    .unwrap();
    let deleting = {
        let chat = chat.to_owned();
        tokio::spawn(async move { signalling.delete_chat(&chat).await.unwrap() })
    };

    began.notified().await;
    let mut saved = BTreeSet::new();
    // An old id saved again after the delete began is a new message: it survives.
    let again = "m9999".to_owned();
    store
        .save_message(chat, &again, 50_000, "saved again".into())
        .await
        .unwrap();
    saved.insert(again.clone());
    let mut n = 0;
    let mut during = 0;
    while !deleting.is_finished() || n < 50 {
        during += usize::from(!deleting.is_finished());
        let id = format!("n{n}");
        store
            .save_message(chat, &id, 20_000 + n, Bytes::from(format!("payload {id}")))
            .await
            .unwrap();
        saved.insert(id);
        n += 1;
    }
    eprintln!(
        "{setup:?} on {}: {during} of {n} saves began while the delete ran",
        driver_name::<R>()
    );
    let deleted = deleting.await.unwrap();
    assert_eq!(deleted.messages, 10_000, "{deleted:?}");
    assert_eq!(deleted.chunks, 10, "{deleted:?}");
    assert!(deleted.record);
    assert_eq!(store.get_chat(chat).await.unwrap(), None);

    assert_eq!(listed_ids(&store, chat).await, saved);
    assert_eq!(assert_no_dangling(setup, &store, chat).await, saved);
    assert!(!exists(store.executor(), &store.keyspace().message_drain(chat)).await);
    let message = store.get_message(chat, &again).await.unwrap().unwrap();
    assert_eq!(
        (message.time_ms, message.payload),
        (50_000, Bytes::from("saved again"))
    );
    assert!(store.get_message(chat, "m0").await.unwrap().is_none());
}

async fn interrupted_delete_finishes_on_the_second_call<R: Runtime>(setup: Setup, steps: usize) {
    let store = setup.store::<R>("st-del-crash").await;
    let chat = "crash:{1}";
    let old: Vec<String> = (0..2_500).map(|i| format!("m{i:04}")).collect();
    save_many(&store, chat, old.clone()).await;
    store.upsert_chat(chat, "record".into()).await.unwrap();

    let crashing = Store::new(
        StopAfter {
            inner: store.executor().clone(),
            sends: steps,
        },
        StoreOptions::new(store.keyspace().prefix()).layout(store.layout()),
    )
    .unwrap();
    let err = crashing.delete_chat(chat).await.unwrap_err();
    assert!(matches!(err, Error::NotSent { .. }), "{err:?}");

    // Mid-way: every remaining message has its item, the record is still there.
    let left = assert_no_dangling(setup, &store, chat).await;
    let deleted_by_first = (steps - 1) * 1000;
    assert_eq!(left.len(), 2_500 - deleted_by_first, "after {steps} steps");
    assert!(store.get_chat(chat).await.unwrap().is_some());
    // The log was moved away: listings no longer show the messages being deleted.
    assert!(listed_ids(&store, chat).await.is_empty());

    // A message saved after the crash, before the second call: that call deletes it too, since
    // it began later.
    store
        .save_message(chat, "between", 99_999, "b".into())
        .await
        .unwrap();
    let deleted = store.delete_chat(chat).await.unwrap();
    assert_eq!(deleted.messages as usize, left.len() + 1, "{deleted:?}");
    assert!(deleted.record);
    assert!(assert_no_dangling(setup, &store, chat).await.is_empty());
    assert!(item_keys(setup, store.keyspace(), chat).is_empty());
    assert_eq!(store.get_chat(chat).await.unwrap(), None);

    // And a third call on the empty chat is a no-op.
    let again = store.delete_chat(chat).await.unwrap();
    assert_eq!((again.messages, again.record), (0, false));
}

/// Writes, as another program would (a migration copies such a log as it is), a message whose
/// id is not UTF-8 beside an ordinary one, then deletes the chat.
async fn an_id_that_is_not_utf8_goes_with_its_item<R: Runtime>(setup: Setup) {
    let store = setup.store::<R>("st-del-raw").await;
    let chat = "raw:{1}";
    let raw: &[u8] = b"m\xff";
    let ks = store.keyspace();
    store
        .save_message(chat, "m1", 1, "one".into())
        .await
        .unwrap();
    let write = |request: Request| async { store.executor().call(request).await.unwrap() };
    write(
        Request::cmd(Access::Write, "ZADD")
            .key(ks.message_log(chat))
            .arg(2_i64)
            .arg(raw)
            .build()
            .unwrap(),
    )
    .await;
    let item = ks.message_item_raw(chat, raw);
    write(
        Request::cmd(Access::Write, "SET")
            .key(item.clone())
            .arg(&b"two"[..])
            .build()
            .unwrap(),
    )
    .await;
    store.upsert_chat(chat, "record".into()).await.unwrap();

    let deleted = store.delete_chat(chat).await.unwrap();
    assert_eq!((deleted.messages, deleted.record), (2, true), "{deleted:?}");
    assert!(!exists(store.executor(), &item).await);
    assert!(assert_no_dangling(setup, &store, chat).await.is_empty());
    assert!(item_keys(setup, ks, chat).is_empty());
}

async fn run_all<R: Runtime>(setup: Setup) {
    delete_with_concurrent_saves::<R>(setup).await;
    an_id_that_is_not_utf8_goes_with_its_item::<R>(setup).await;
    for steps in [1, 2] {
        interrupted_delete_finishes_on_the_second_call::<R>(setup, steps).await;
    }
}

both_drivers!(run_all {
    single_node_legacy_layout => Setup::SingleLegacy,
    single_node_cluster_layout => Setup::SingleCluster,
    cluster => Setup::Cluster,
});
