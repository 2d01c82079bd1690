//! Every store operation against real servers, written once as generic suites and run on three
//! setups: a single node in the legacy layout, a single node in the cluster layout, and the
//! shared 3-master cluster, each on both drivers. Ids are hostile on purpose (`:`, braces, glob
//! characters, `%`, spaces, emoji, the empty string) and must round-trip.

use std::ops::RangeBounds;
use std::time::Duration;

use botmesh_redis_core::{Access, Error, Executor, Layout, Request};
use botmesh_redis_core::{Limit, Message, MessageCursor, RecordCursor, Store};
use botmesh_redis_tests::both_drivers;
use botmesh_redis_tests::conformance::Runtime;
use botmesh_redis_tests::store::{Setup, NASTY};
use bytes::Bytes;

async fn run_all<R: Runtime>(setup: Setup) {
    messages_round_trip(&setup.store::<R>("st-msg").await, setup).await;
    message_listing(&setup.store::<R>("st-list").await).await;
    chats_and_contacts(&setup.store::<R>("st-rec").await).await;
    checkpoints(&setup.store::<R>("st-cp").await).await;
    user_data(&setup.store::<R>("st-ud").await, setup).await;
    conversations_and_cursors(&setup.store::<R>("st-conv").await).await;
    if setup.layout() == Layout::Cluster {
        split_ids_never_collide(&setup.store::<R>("st-split").await).await;
    }
}

fn payload(chat: &str, id: &str) -> Bytes {
    Bytes::from(format!("{chat}|{id}"))
}

// --- messages ----------------------------------------------------------------------------------

async fn messages_round_trip<E: Executor>(store: &Store<E>, setup: Setup) {
    // The legacy layout keeps its historical aliasing (chat `a` + id `b:c` is chat `a:b` +
    // id `c`), so there every chat gets plain message ids.
    let pairs: Vec<(&str, &str)> = NASTY
        .iter()
        .flat_map(|chat| {
            NASTY
                .iter()
                .filter(move |id| setup.layout() == Layout::Cluster || !id.contains(':'))
                .filter(move |_| setup.layout() == Layout::Cluster || !chat.contains(':'))
                .map(move |id| (*chat, *id))
        })
        .collect();
    for (i, (chat, id)) in pairs.iter().enumerate() {
        let time = 1_700_000_000_000 + i as i64;
        assert!(store
            .save_message(chat, id, time, payload(chat, id))
            .await
            .unwrap());
    }
    for (i, (chat, id)) in pairs.iter().enumerate() {
        let got = store.get_message(chat, id).await.unwrap();
        assert_eq!(
            got,
            Some(Message {
                id: (*id).to_owned(),
                time_ms: 1_700_000_000_000 + i as i64,
                payload: payload(chat, id),
            }),
            "{chat:?} {id:?}"
        );
    }
    // Saving again replaces payload and time, and is not new.
    let (chat, id) = pairs[3];
    assert!(!store
        .save_message(chat, id, -5, "again".into())
        .await
        .unwrap());
    let got = store.get_message(chat, id).await.unwrap().unwrap();
    assert_eq!((got.time_ms, got.payload), (-5, Bytes::from("again")));

    assert!(store.delete_message(chat, id).await.unwrap());
    assert_eq!(store.get_message(chat, id).await.unwrap(), None);
    assert!(!store.delete_message(chat, id).await.unwrap());
    assert_eq!(store.get_message("never", "saved").await.unwrap(), None);
}

/// Lists every page of `chat` and returns the messages.
async fn list_all<E: Executor>(
    store: &Store<E>,
    chat: &str,
    range: impl RangeBounds<i64> + Clone,
    mut after: Option<MessageCursor>,
    limit: u32,
) -> Vec<Message> {
    let limit = Limit::new(limit).unwrap();
    let mut out = Vec::new();
    for _ in 0..1000 {
        let page = store
            .list_messages(chat, range.clone(), after.as_ref(), limit)
            .await
            .unwrap();
        assert!(page.items.len() <= limit.get() as usize);
        out.extend(page.items);
        match page.next {
            Some(next) => after = Some(next),
            None => return out,
        }
    }
    panic!("listing never ended");
}

async fn message_listing<E: Executor>(store: &Store<E>) {
    let chat = "list:{1} 😀";
    // 5 times, several ids per time: ties are ordered by id, bytewise.
    let mut expected: Vec<(i64, String)> = Vec::new();
    for (i, id) in NASTY
        .iter()
        .chain(["m1", "m2", "M3", "~"].iter())
        .enumerate()
    {
        let time = 1000 + (i as i64 % 5) * 10;
        store
            .save_message(chat, id, time, payload(chat, id))
            .await
            .unwrap();
        expected.push((time, (*id).to_owned()));
    }
    expected.sort();
    let ids = |messages: &[Message]| -> Vec<(i64, String)> {
        messages.iter().map(|m| (m.time_ms, m.id.clone())).collect()
    };

    for limit in [1, 3, 4, 100] {
        let all = list_all(store, chat, .., None, limit).await;
        assert_eq!(ids(&all), expected, "limit {limit}");
        assert!(all.iter().all(|m| m.payload == payload(chat, &m.id)));
    }

    // A time range, inclusive at both ends.
    let ranged = list_all(store, chat, 1010..=1030, None, 2).await;
    let want: Vec<_> = expected
        .iter()
        .filter(|(t, _)| (1010..=1030).contains(t))
        .cloned()
        .collect();
    assert_eq!(ids(&ranged), want);
    let empty = store
        .list_messages(chat, 2000.., None, Limit::DEFAULT)
        .await
        .unwrap();
    assert!(empty.items.is_empty() && empty.next.is_none());
    // An exclusive end is the millisecond before it.
    let before = list_all(store, chat, 1010..1030, None, 2).await;
    let want_before: Vec<_> = want.iter().filter(|(t, _)| *t < 1030).cloned().collect();
    assert_eq!(ids(&before), want_before);

    // The cursor is a position: deleting its message, or moving it to another time, neither
    // skips nor repeats anything.
    let first = store
        .list_messages(chat, .., None, Limit::of::<5>())
        .await
        .unwrap();
    let cursor = first.next.clone().unwrap();
    assert_eq!(
        cursor,
        MessageCursor {
            time_ms: expected[4].0,
            id: expected[4].1.clone()
        }
    );
    store.delete_message(chat, &cursor.id).await.unwrap();
    let rest = list_all(store, chat, .., Some(cursor.clone()), 3).await;
    assert_eq!(ids(&rest), expected[5..].to_vec());

    store
        .save_message(chat, &cursor.id, 999_999, "moved".into())
        .await
        .unwrap();
    let rest = list_all(store, chat, .., Some(cursor), 3).await;
    let mut want = expected[5..].to_vec();
    want.push((999_999, expected[4].1.clone()));
    assert_eq!(ids(&rest), want);

    assert!(list_all(store, "no such chat", .., None, 100)
        .await
        .is_empty());
}

// --- records -----------------------------------------------------------------------------------

/// Lists every page of a kind of record, `limit` at a time.
async fn pages<F, Fut>(limit: u32, mut list: F) -> Vec<(String, Bytes)>
where
    F: FnMut(Option<RecordCursor>, Limit) -> Fut,
    Fut: std::future::Future<Output = Result<botmesh_redis_core::RecordPage, Error>>,
{
    let mut after = None;
    let mut out = Vec::new();
    for _ in 0..1000 {
        let page = list(after.clone(), Limit::new(limit).unwrap())
            .await
            .unwrap();
        assert!(page.items.len() <= limit as usize);
        out.extend(page.items.into_iter().map(|r| (r.id, r.value)));
        match page.next {
            Some(next) => after = Some(next),
            None => return out,
        }
    }
    panic!("listing never ended");
}

fn sorted_ids() -> Vec<String> {
    let mut ids: Vec<String> = NASTY.iter().map(|s| (*s).to_owned()).collect();
    ids.sort();
    ids
}

async fn chats_and_contacts<E: Executor>(store: &Store<E>) {
    for id in NASTY {
        store
            .upsert_chat(id, Bytes::from(format!("chat {id}")))
            .await
            .unwrap();
        store
            .upsert_contact(id, Bytes::from(format!("contact {id}")))
            .await
            .unwrap();
    }
    store
        .upsert_chat("a:b", "chat a:b v2".into())
        .await
        .unwrap();
    assert_eq!(
        store.get_chat("a:b").await.unwrap(),
        Some(Bytes::from("chat a:b v2"))
    );
    assert_eq!(
        store.get_contact("{x}").await.unwrap(),
        Some(Bytes::from("contact {x}"))
    );
    assert_eq!(store.get_chat("nope").await.unwrap(), None);

    for limit in [1, 2, 5, 1000] {
        let chats = pages(limit, |after, n| async move {
            store.list_chats(after.as_ref(), n).await
        })
        .await;
        let ids: Vec<String> = chats.iter().map(|(id, _)| id.clone()).collect();
        assert_eq!(ids, sorted_ids(), "limit {limit}");
        for (id, value) in &chats {
            let want = if id == "a:b" {
                "chat a:b v2".to_owned()
            } else {
                format!("chat {id}")
            };
            assert_eq!(value, &Bytes::from(want));
        }
    }

    assert!(store.delete_contact("😀").await.unwrap());
    assert!(!store.delete_contact("😀").await.unwrap());
    assert_eq!(store.get_contact("😀").await.unwrap(), None);
    let contacts = pages(3, |after, n| async move {
        store.list_contacts(after.as_ref(), n).await
    })
    .await;
    let want: Vec<String> = sorted_ids().into_iter().filter(|id| id != "😀").collect();
    assert_eq!(
        contacts
            .iter()
            .map(|(id, _)| id.clone())
            .collect::<Vec<_>>(),
        want
    );

    // delete_chat removes the chat record (and no contact).
    let deleted = store.delete_chat("}{").await.unwrap();
    assert!(deleted.record);
    assert_eq!(store.get_chat("}{").await.unwrap(), None);
    assert!(store.get_contact("}{").await.unwrap().is_some());
    let chats = store.list_chats(None, Limit::MAX).await.unwrap();
    assert!(chats.items.iter().all(|r| r.id != "}{"));
    assert_eq!(chats.items.len(), NASTY.len() - 1);
}

async fn checkpoints<E: Executor>(store: &Store<E>) {
    let long = Some(Duration::from_secs(600));
    for (i, id) in NASTY.iter().enumerate() {
        let ttl = if i % 2 == 0 { long } else { None };
        store
            .set_checkpoint(id, Bytes::from(format!("cp {id}")), ttl)
            .await
            .unwrap();
    }
    assert_eq!(
        store.get_checkpoint("%").await.unwrap(),
        Some(Bytes::from("cp %"))
    );
    let listed = pages(4, |after, n| async move {
        store.list_checkpoints(after.as_ref(), n).await
    })
    .await;
    assert_eq!(
        listed.iter().map(|(id, _)| id.clone()).collect::<Vec<_>>(),
        sorted_ids()
    );
    assert!(store.clear_checkpoint("").await.unwrap());
    assert!(!store.clear_checkpoint("").await.unwrap());
    assert_eq!(store.get_checkpoint("").await.unwrap(), None);
    let listed = store.list_checkpoints(None, Limit::MAX).await.unwrap();
    assert_eq!(listed.items.len(), NASTY.len() - 1);
    assert!(listed.items.iter().all(|r| !r.id.is_empty()));
    // Setting again without a TTL keeps it for good (and in the listing).
    store
        .set_checkpoint("a:b", "again".into(), None)
        .await
        .unwrap();
    assert_eq!(
        store.get_checkpoint("a:b").await.unwrap(),
        Some(Bytes::from("again"))
    );
}

// --- user data ---------------------------------------------------------------------------------

async fn user_data<E: Executor>(store: &Store<E>, setup: Setup) {
    // The legacy layout aliases `:` in user ids and namespaces (its key names are raw), so the
    // user and namespaces there are plain; keys may hold anything.
    let user = match setup.layout() {
        Layout::Cluster => "u:{1} 😀",
        Layout::Legacy => "u1",
    };
    let namespaces: &[&str] = match setup.layout() {
        Layout::Cluster => &["a:b", "a", "%", "", "{x}"],
        Layout::Legacy => &["prefs", "state", "n{x}*"],
    };
    let mut expected = Vec::new();
    for ns in namespaces {
        for key in NASTY {
            let value = Bytes::from(format!("{ns}/{key}"));
            let ttl = (key.len() % 2 == 0).then_some(Duration::from_secs(600));
            store
                .set_user_data(user, ns, key, value.clone(), ttl)
                .await
                .unwrap();
            expected.push(((*ns).to_owned(), (*key).to_owned(), value));
        }
    }
    expected.sort();
    let listed: Vec<_> = store
        .list_user_data(user, None, None, Limit::MAX)
        .await
        .unwrap()
        .into_iter()
        .map(|e| (e.ns, e.key, e.value))
        .collect();
    assert_eq!(listed, expected);

    // The same listing in pages of 4: each cursor continues exactly where its page ended.
    let mut paged = Vec::new();
    let mut after = None;
    let mut pages = 0;
    loop {
        let page = store
            .list_user_data(user, None, after.as_ref(), Limit::of::<4>())
            .await
            .unwrap();
        assert!(page.items.len() <= 4, "{page:?}");
        pages += 1;
        paged.extend(page.items.into_iter().map(|e| (e.ns, e.key, e.value)));
        match page.next {
            Some(next) => after = Some(next),
            None => break,
        }
    }
    assert_eq!(paged, expected);
    assert_eq!(pages, expected.len().div_ceil(4));

    let ns = namespaces[0];
    let in_ns: Vec<_> = store
        .list_user_data(user, Some(ns), None, Limit::MAX)
        .await
        .unwrap()
        .into_iter()
        .map(|e| (e.ns, e.key, e.value))
        .collect();
    let want: Vec<_> = expected.iter().filter(|e| e.0 == ns).cloned().collect();
    assert_eq!(in_ns, want);

    assert_eq!(
        store.get_user_data(user, ns, "*").await.unwrap(),
        Some(Bytes::from(format!("{ns}/*")))
    );
    assert!(store.delete_user_data(user, ns, "*").await.unwrap());
    assert!(!store.delete_user_data(user, ns, "*").await.unwrap());
    assert_eq!(store.get_user_data(user, ns, "*").await.unwrap(), None);

    // Clearing one namespace leaves the others.
    let cleared = store.clear_user_data(user, Some(ns)).await.unwrap();
    assert_eq!(cleared, (NASTY.len() - 1) as u64);
    assert!(store
        .list_user_data(user, Some(ns), None, Limit::MAX)
        .await
        .unwrap()
        .items
        .is_empty());
    let left = store
        .list_user_data(user, None, None, Limit::MAX)
        .await
        .unwrap()
        .items;
    assert_eq!(left.len(), expected.len() - NASTY.len());

    // Another user's data is another user's.
    store
        .set_user_data("other", ns, "k", "v".into(), None)
        .await
        .unwrap();
    let cleared = store.clear_user_data(user, None).await.unwrap();
    assert_eq!(cleared, left.len() as u64);
    assert!(store
        .list_user_data(user, None, None, Limit::MAX)
        .await
        .unwrap()
        .items
        .is_empty());
    assert_eq!(
        store
            .list_user_data("other", None, None, Limit::MAX)
            .await
            .unwrap()
            .items
            .len(),
        1
    );
    assert_eq!(store.clear_user_data("nobody", None).await.unwrap(), 0);
}

// --- conversations and cursors -----------------------------------------------------------------

async fn conversations_and_cursors<E: Executor>(store: &Store<E>) {
    for chat in NASTY {
        assert_eq!(store.get_conversation(chat).await.unwrap(), None);
        store
            .set_conversation(chat, Bytes::from(format!("conv {chat}")), None)
            .await
            .unwrap();
    }
    for chat in NASTY {
        assert_eq!(
            store.get_conversation(chat).await.unwrap(),
            Some(Bytes::from(format!("conv {chat}")))
        );
    }
    store
        .set_conversation("a:b", "short".into(), Some(Duration::from_secs(60)))
        .await
        .unwrap();
    assert_eq!(
        store.get_conversation("a:b").await.unwrap(),
        Some(Bytes::from("short"))
    );
    assert!(store.delete_conversation("a:b").await.unwrap());
    assert!(!store.delete_conversation("a:b").await.unwrap());
    assert_eq!(store.get_conversation("a:b").await.unwrap(), None);

    for name in NASTY {
        assert_eq!(store.get_cursor(name).await.unwrap(), None);
    }
    let name = "cur:{1}";
    assert!(store.set_cursor_if_greater(name, i64::MIN).await.unwrap());
    assert!(!store.set_cursor_if_greater(name, i64::MIN).await.unwrap());
    assert!(store.set_cursor_if_greater(name, -10).await.unwrap());
    assert!(!store.set_cursor_if_greater(name, -11).await.unwrap());
    assert!(store.set_cursor_if_greater(name, 0).await.unwrap());
    assert!(store.set_cursor_if_greater(name, 9).await.unwrap());
    assert!(store.set_cursor_if_greater(name, 10).await.unwrap());
    assert!(!store.set_cursor_if_greater(name, 9).await.unwrap());
    // Beyond 2^53, where a Lua number would round: the comparison stays exact.
    assert!(store
        .set_cursor_if_greater(name, 9_007_199_254_740_992)
        .await
        .unwrap());
    assert!(store
        .set_cursor_if_greater(name, 9_007_199_254_740_993)
        .await
        .unwrap());
    assert!(!store
        .set_cursor_if_greater(name, 9_007_199_254_740_993)
        .await
        .unwrap());
    assert!(store.set_cursor_if_greater(name, i64::MAX).await.unwrap());
    assert_eq!(store.get_cursor(name).await.unwrap(), Some(i64::MAX));
    // set always stores.
    store.set_cursor(name, -3).await.unwrap();
    assert_eq!(store.get_cursor(name).await.unwrap(), Some(-3));
    // A cursor holding something else is an error, and is left alone.
    let ks = store.keyspace();
    let foreign = ks.cursor("foreign");
    let write = Request::cmd(Access::Write, "SET")
        .key(&foreign)
        .arg("12abc")
        .build()
        .unwrap();
    store.executor().call(write).await.unwrap();
    let err = store.set_cursor_if_greater("foreign", 1).await.unwrap_err();
    assert!(err.to_string().contains("not hold an integer"), "{err}");
    assert!(store.get_cursor("foreign").await.is_err());
}

// --- split ids (cluster layout) ----------------------------------------------------------------

async fn split_ids_never_collide<E: Executor>(store: &Store<E>) {
    store
        .save_message("a:b", "c", 1, "chat a:b, message c".into())
        .await
        .unwrap();
    store
        .save_message("a", "b:c", 2, "chat a, message b:c".into())
        .await
        .unwrap();
    assert_eq!(
        store
            .get_message("a:b", "c")
            .await
            .unwrap()
            .unwrap()
            .payload,
        Bytes::from("chat a:b, message c")
    );
    assert_eq!(
        store
            .get_message("a", "b:c")
            .await
            .unwrap()
            .unwrap()
            .payload,
        Bytes::from("chat a, message b:c")
    );
    assert_eq!(store.get_message("a:b", "b:c").await.unwrap(), None);
    assert_eq!(store.get_message("a", "c").await.unwrap(), None);
    for chat in ["a:b", "a"] {
        let page = store
            .list_messages(chat, .., None, Limit::DEFAULT)
            .await
            .unwrap();
        assert_eq!(page.items.len(), 1, "{chat}");
    }
    // Users and namespaces split the same way.
    store
        .set_user_data("a:b", "c", "k", "1".into(), None)
        .await
        .unwrap();
    store
        .set_user_data("a", "b:c", "k", "2".into(), None)
        .await
        .unwrap();
    let a_b = store
        .list_user_data("a:b", None, None, Limit::MAX)
        .await
        .unwrap()
        .items;
    let a = store
        .list_user_data("a", None, None, Limit::MAX)
        .await
        .unwrap()
        .items;
    assert_eq!(
        (a_b.len(), a.len(), &a_b[0].ns, &a[0].ns),
        (1, 1, &"c".to_owned(), &"b:c".to_owned())
    );
    // delete_chat of one chat leaves the other.
    store.delete_chat("a").await.unwrap();
    assert!(store.get_message("a:b", "c").await.unwrap().is_some());
}

both_drivers!(run_all {
    single_node_legacy_layout => Setup::SingleLegacy,
    single_node_cluster_layout => Setup::SingleCluster,
    cluster => Setup::Cluster,
});
