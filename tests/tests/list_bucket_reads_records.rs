//! `list_bucket`, the one script that derives key names (a listing of chats or contacts in one
//! call per bucket), reads every record itself: its Lua `enc` matches the layout's, byte for
//! byte, on ids that need encoding. A mismatch would not show in a listing (the plan reads a
//! record the script missed again, with declared keys), only in its cost; so this calls the
//! script directly and asserts that no record came back missing.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;

use botmesh_redis_core::driver::scripts::LIST_BUCKET;
use botmesh_redis_core::keys::{bucket, RecordKind, BUCKET_COUNT};
use botmesh_redis_core::{Access, Bytes, ClientOptions, Executor, Request, Store, StoreOptions};
use botmesh_redis_tests::conformance::{Client, Runtime};
use botmesh_redis_tests::{both_drivers, shared_cluster, unique_prefix};

/// Ids that need every kind of encoding, with ids that need none.
fn ids() -> Vec<String> {
    let mut ids: Vec<String> = [
        "a:b", "a", "{x}", "}{", "{", "*", "?[]\\", "%", "%25", "a b", "😀", "", "-._~", "A-Z",
        "\u{7f}", "\t\n", "ü", "€100", "+", "=/&",
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect();
    ids.extend((0..64).map(|i| format!("chat-{i}")));
    ids
}

async fn the_script_reads_every_record<R: Runtime>(kind: RecordKind) {
    let client = Client::<R>::connect(ClientOptions::cluster(shared_cluster().seeds()))
        .await
        .unwrap();
    let store = Store::open(
        client.clone(),
        StoreOptions::new(unique_prefix("list-bucket")),
    )
    .await
    .unwrap();
    let mut per_bucket: BTreeMap<u8, BTreeMap<String, Bytes>> = BTreeMap::new();
    for id in ids() {
        let value = Bytes::from(format!("record of {id}"));
        match kind {
            RecordKind::Chat => store.upsert_chat(&id, value.clone()).await.unwrap(),
            _ => store.upsert_contact(&id, value.clone()).await.unwrap(),
        }
        per_bucket.entry(bucket(&id)).or_default().insert(id, value);
    }
    let ks = store.keyspace();
    for b in 0..BUCKET_COUNT {
        let request = Request::script(
            &LIST_BUCKET,
            Access::Read,
            vec![ks.record_index(kind, b).unwrap()],
            vec![
                Bytes::from("-"),
                Bytes::from("1000"),
                Bytes::from("1000"),
                Bytes::from(ks.record_key_head(kind, b).unwrap()),
            ],
        )
        .unwrap();
        let reply = client.call(request).await.unwrap().into_array().unwrap();
        let mut got = BTreeMap::new();
        for pair in reply.chunks(2) {
            let id = pair[0].clone().into_string().unwrap();
            let value = pair[1].clone().into_opt_bytes().unwrap();
            assert!(
                value.is_some(),
                "bucket {b}: the script missed the record of {id:?}"
            );
            got.insert(id, value.unwrap());
        }
        assert_eq!(got, per_bucket.remove(&b).unwrap_or_default(), "bucket {b}");
    }
    client.close().await;
}

async fn chats<R: Runtime>() {
    the_script_reads_every_record::<R>(RecordKind::Chat).await;
}

async fn contacts<R: Runtime>() {
    the_script_reads_every_record::<R>(RecordKind::Contact).await;
}

both_drivers!(chats, contacts);
