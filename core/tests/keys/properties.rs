//! Properties of the `cluster:v1` key contract: `enc` is injective, reversible and emits only
//! the unreserved alphabet; tagged keys hash to their tag's slot; `bucket` is 32-bit FNV-1a mod
//! 32; script calls stay in one slot; keys of different data never collide; bad prefixes are
//! refused.

use std::collections::BTreeMap;

use botmesh_redis_core::driver::{store::messages, Plan, Step};
use botmesh_redis_core::keys::{bucket, enc, hash_tag, slot};
use botmesh_redis_core::keys::{RecordKind, TurnPart};
use botmesh_redis_core::KeyError;
use botmesh_redis_core::{Key, Keyspace, Layout, Route};
use bytes::Bytes;
use proptest::prelude::*;

// --- references written from the contract, independent of the core --------------------------

/// 32-bit FNV-1a.
fn fnv1a_32(bytes: &[u8]) -> u32 {
    let mut hash: u32 = 0x811c_9dc5;
    for &b in bytes {
        hash ^= u32::from(b);
        hash = hash.wrapping_mul(0x0100_0193);
    }
    hash
}

fn upper_hex(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

/// Strict percent-decoding of an `enc` output: `None` on any byte outside the alphabet, a `%`
/// not followed by two uppercase hex digits, or an encoded byte that needed no encoding.
fn strict_decode(encoded: &str) -> Option<Vec<u8>> {
    let bytes = encoded.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' => {
                let hi = upper_hex(*bytes.get(i + 1)?)?;
                let lo = upper_hex(*bytes.get(i + 2)?)?;
                let byte = hi << 4 | lo;
                if unreserved(byte) {
                    return None;
                }
                out.push(byte);
                i += 3;
            }
            b if unreserved(b) => {
                out.push(b);
                i += 1;
            }
            _ => return None,
        }
    }
    Some(out)
}

fn unreserved(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~')
}

// --- strategies ------------------------------------------------------------------------------

/// Ids: arbitrary Unicode, or short strings dense in the characters that matter (`:`, braces,
/// `%`, glob characters, space, a multi-byte character), so that near-collisions are common.
fn id() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<String>(),
        "[ab:{}%*?\\[\\]\\\\ é😀]{0,6}",
        Just(String::new()),
    ]
}

fn cluster() -> Keyspace {
    Keyspace::new(Layout::Cluster, "bot").unwrap()
}

/// Every key of every namespace the cluster layout builds from the ids `a` and `b`, labelled by
/// the namespace and its inputs.
fn labelled_cluster_keys(ks: &Keyspace, a: &str, b: &str) -> Vec<(String, Key)> {
    let mut keys = Vec::new();
    for (x, y) in [(a, b), (b, a), (a, a), (b, b)] {
        keys.push((format!("log({x:?})"), ks.message_log(x)));
        keys.push((format!("drain({x:?})"), ks.message_drain(x)));
        keys.push((format!("item({x:?},{y:?})"), ks.message_item(x, y)));
        for kind in RecordKind::ALL {
            keys.push((format!("record({kind:?},{x:?})"), ks.record(kind, x)));
            let index = ks.record_index_of(kind, x).unwrap();
            keys.push((format!("index({kind:?},{})", bucket(x)), index));
        }
        for z in [a, b] {
            let entry = ks.user_entry(x, y, z);
            keys.push((format!("entry({x:?},{y:?},{z:?})"), entry));
        }
        keys.push((format!("uindex({x:?})"), ks.user_index(x).unwrap()));
        keys.push((format!("lock({x:?})"), ks.lock(x)));
        keys.push((format!("fence({x:?})"), ks.lock_fence(x)));
        for part in TurnPart::ALL {
            keys.push((format!("turn({x:?},{part:?})"), ks.turn(x, part)));
        }
        keys.push((format!("leader({x:?})"), ks.leader(x)));
        keys.push((format!("term({x:?})"), ks.leader_term(x)));
        keys.push((format!("heartbeat({x:?})"), ks.heartbeat(x)));
        keys.push((format!("conv({x:?})"), ks.conversation(x)));
        keys.push((format!("cursor({x:?})"), ks.cursor(x)));
        keys.push((format!("lease({x:?})"), ks.lease(x)));
        let inbox = ks.durable("inbox", x).unwrap();
        keys.push((format!("durable({:?},{x:?})", "inbox"), inbox));
        if let Ok(key) = ks.durable(x, y) {
            keys.push((format!("durable({x:?},{y:?})"), key));
        }
    }
    keys.push(("marker".to_owned(), ks.marker()));
    keys
}

/// The tagged keys of the cluster layout for `id`, each with the exact tag it must carry.
fn tagged_cluster_keys(ks: &Keyspace, id: &str) -> Vec<(Key, String)> {
    let e = enc(id);
    let mut keys = vec![
        (ks.message_log(id), format!("m:{e}")),
        (ks.message_drain(id), format!("m:{e}")),
        (ks.message_item(id, id), format!("m:{e}")),
        (ks.message_item("c", id), "m:c".to_owned()),
        (ks.user_entry(id, id, id), format!("ud:{e}")),
        (ks.user_index(id).unwrap(), format!("ud:{e}")),
        (ks.lock(id), format!("lk:{e}")),
        (ks.lock_fence(id), format!("lk:{e}")),
        (ks.leader(id), format!("ld:{e}")),
        (ks.leader_term(id), format!("ld:{e}")),
        (ks.durable("inbox", id).unwrap(), "durable:inbox".to_owned()),
        (ks.marker(), "meta".to_owned()),
    ];
    for kind in RecordKind::ALL {
        let tag = format!("{}:{}", kind.tag(), bucket(id));
        keys.push((ks.record(kind, id), tag.clone()));
        keys.push((ks.record_index_of(kind, id).unwrap(), tag));
    }
    for part in TurnPart::ALL {
        keys.push((ks.turn(id, part), format!("t:{e}")));
    }
    keys
}

/// The one request of the `save_message` plan.
fn save_message_request(ks: &Keyspace, chat: &str, id: &str) -> botmesh_redis_core::Request {
    let mut plan =
        messages::save_message(ks, chat, id, 1_700_000_000_000, Bytes::from_static(b"p"))
            .expect("cluster keys of one chat share a slot");
    match plan.start() {
        Step::Send(batch) => {
            assert_eq!(batch.len(), 1);
            batch.into_vec().remove(0)
        }
        other => panic!("save_message did not start with a send: {other:?}"),
    }
}

// --- fixed cases -------------------------------------------------------------------------------

#[test]
fn references_match_the_documented_vectors() {
    let vectors = [
        ("", 5),
        ("a", 12),
        ("chat-1", 25),
        ("5511999999999@s.whatsapp.net", 14),
    ];
    for (id, b) in vectors {
        assert_eq!(fnv1a_32(id.as_bytes()) % 32, b, "{id:?}");
        assert_eq!(u32::from(bucket(id)), b, "{id:?}");
    }
    // The published FNV-1a 32 vectors.
    assert_eq!(fnv1a_32(b""), 0x811c_9dc5);
    assert_eq!(fnv1a_32(b"a"), 0xe40c_292c);
    assert_eq!(fnv1a_32(b"foobar"), 0xbf9c_f968);
    assert_eq!(strict_decode("a%3Ab"), Some(b"a:b".to_vec()));
    assert_eq!(strict_decode("a%3ab"), None, "lowercase hex");
    assert_eq!(strict_decode("a%2"), None, "truncated");
    assert_eq!(strict_decode("a:b"), None, "forbidden byte");
    assert_eq!(strict_decode("%41"), None, "needless escape");
}

#[test]
fn message_keys_of_split_ids_do_not_collide_in_cluster() {
    let ks = cluster();
    let one = ks.message_item("a:b", "c");
    let two = ks.message_item("a", "b:c");
    assert_eq!(one.to_string(), "bot:{m:a%3Ab}:i:c");
    assert_eq!(two.to_string(), "bot:{m:a}:i:b%3Ac");
    assert_ne!(one, two);
    let legacy = Keyspace::new(Layout::Legacy, "bot").unwrap();
    // The legacy layout keeps its historical aliasing.
    assert_eq!(
        legacy.message_item("a:b", "c"),
        legacy.message_item("a", "b:c")
    );
    assert_eq!(
        legacy.user_entry("u:n", "k", "x"),
        legacy.user_entry("u", "n:k", "x")
    );
    assert_ne!(
        ks.user_entry("u:n", "k", "x"),
        ks.user_entry("u", "n:k", "x")
    );
}

#[test]
fn cluster_prefix_rules() {
    for prefix in ["", "{", "}", "{}", "a{b", "a}b", "{bot}"] {
        let refused = Keyspace::new(Layout::Cluster, prefix).unwrap_err();
        let expected = if prefix.is_empty() {
            KeyError::EmptyPrefix
        } else {
            KeyError::BraceInClusterPrefix {
                prefix: prefix.to_owned(),
            }
        };
        assert_eq!(refused, expected);
    }
    assert_eq!(
        Keyspace::new(Layout::Legacy, ""),
        Err(KeyError::EmptyPrefix)
    );
}

#[test]
fn save_message_request_is_routed_to_the_chat_slot() {
    let request = save_message_request(&cluster(), "a:b", "{x}");
    let rendered: Vec<String> = request.keys().iter().map(Key::to_string).collect();
    assert_eq!(rendered, ["bot:{m:a%3Ab}:z", "bot:{m:a%3Ab}:i:%7Bx%7D"]);
    assert_eq!(request.route(), Route::Slot(9972));
    assert_eq!(slot(b"m:a%3Ab"), 9972);
}

// --- properties --------------------------------------------------------------------------------

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn enc_is_injective(a in id(), b in id()) {
        prop_assert_eq!(enc(&a) == enc(&b), a == b);
    }

    #[test]
    fn enc_is_injective_on_near_collisions(a in "[a:%3A]{0,5}", b in "[a:%3A]{0,5}") {
        prop_assert_eq!(enc(&a) == enc(&b), a == b);
    }

    #[test]
    fn enc_emits_only_the_unreserved_alphabet_and_uppercase_escapes(x in id()) {
        let e = enc(&x);
        let bytes = e.as_bytes();
        for (i, &b) in bytes.iter().enumerate() {
            prop_assert!(unreserved(b) || b == b'%', "byte {b:#04x} in {e:?}");
            if b == b'%' {
                prop_assert!(i + 2 < bytes.len(), "truncated escape in {e:?}");
                prop_assert!(upper_hex(bytes[i + 1]).is_some() && upper_hex(bytes[i + 2]).is_some(), "bad escape in {e:?}");
            }
        }
        for forbidden in [b':', b'{', b'}', b'*', b'?', b'[', b']', b'\\', b' '] {
            prop_assert!(!bytes.contains(&forbidden));
        }
    }

    #[test]
    fn enc_decodes_back(x in id()) {
        prop_assert_eq!(strict_decode(&enc(&x)), Some(x.into_bytes()));
    }

    #[test]
    fn bucket_is_fnv1a_32_mod_32(x in id()) {
        prop_assert_eq!(u32::from(bucket(&x)), fnv1a_32(x.as_bytes()) % 32);
    }

    #[test]
    fn bucket_of_raw_bytes_is_fnv1a_32_mod_32(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
        let x = String::from_utf8_lossy(&bytes).into_owned();
        prop_assert_eq!(u32::from(bucket(&x)), fnv1a_32(x.as_bytes()) % 32);
    }

    #[test]
    fn tagged_keys_hash_to_their_tag(x in id()) {
        for (key, tag) in tagged_cluster_keys(&cluster(), &x) {
            let found = hash_tag(key.as_bytes());
            prop_assert_eq!(found, Some(tag.as_bytes()), "key {}", key);
            prop_assert_eq!(key.slot(), slot(tag.as_bytes()));
            prop_assert_eq!(slot(key.as_bytes()), slot(found.unwrap()));
        }
    }

    #[test]
    fn save_message_keys_share_one_slot(chat in id(), msg in id()) {
        let request = save_message_request(&cluster(), &chat, &msg);
        let keys = request.keys();
        prop_assert_eq!(keys.len(), 2);
        let chat_slot = slot(format!("m:{}", enc(&chat)).as_bytes());
        for key in keys {
            prop_assert_eq!(key.slot(), chat_slot);
            prop_assert_eq!(slot(key.as_bytes()), chat_slot);
        }
        prop_assert_eq!(request.route(), Route::Slot(chat_slot));
    }

    #[test]
    fn item_keys_are_distinct(c1 in id(), m1 in id(), c2 in id(), m2 in id()) {
        let ks = cluster();
        let same = (&c1, &m1) == (&c2, &m2);
        prop_assert_eq!(ks.message_item(&c1, &m1) == ks.message_item(&c2, &m2), same);
        // The same ids, re-split at a `:`.
        let joined = format!("{c1}:{m1}");
        if let Some((c, m)) = joined.split_once(':') {
            let re_split = (c, m) == (c1.as_str(), m1.as_str());
            prop_assert_eq!(ks.message_item(&c1, &m1) == ks.message_item(c, m), re_split);
        }
    }

    #[test]
    fn record_keys_are_distinct(a in id(), b in id()) {
        let ks = cluster();
        for k1 in RecordKind::ALL {
            for k2 in RecordKind::ALL {
                let same = k1 == k2 && a == b;
                prop_assert_eq!(ks.record(k1, &a) == ks.record(k2, &b), same);
            }
        }
    }

    #[test]
    fn user_entry_keys_are_distinct(
        u1 in id(), n1 in id(), k1 in id(),
        u2 in id(), n2 in id(), k2 in id(),
    ) {
        let ks = cluster();
        let same = (&u1, &n1, &k1) == (&u2, &n2, &k2);
        prop_assert_eq!(ks.user_entry(&u1, &n1, &k1) == ks.user_entry(&u2, &n2, &k2), same);
    }

    #[test]
    fn user_entry_keys_of_shuffled_segments_are_distinct(a in "[a:]{0,3}", b in "[a:]{0,3}", c in "[a:]{0,3}") {
        let ks = cluster();
        let key = ks.user_entry(&a, &b, &c);
        for (x, y, z) in [(&a, &c, &b), (&b, &a, &c), (&c, &b, &a)] {
            let same = (x, y, z) == (&a, &b, &c);
            prop_assert_eq!(ks.user_entry(x, y, z) == key, same);
        }
    }

    #[test]
    fn no_two_cluster_data_share_a_key(a in id(), b in id()) {
        let ks = cluster();
        let mut seen: BTreeMap<Key, String> = BTreeMap::new();
        for (label, key) in labelled_cluster_keys(&ks, &a, &b) {
            if let Some(previous) = seen.get(&key) {
                prop_assert_eq!(previous, &label, "two data share key {}", key);
            }
            seen.insert(key, label);
        }
    }

    #[test]
    fn cluster_prefixes_with_braces_are_refused(p in "[a-z{}:]{1,8}") {
        let result = Keyspace::new(Layout::Cluster, p.clone());
        if p.contains(['{', '}']) {
            prop_assert_eq!(result, Err(KeyError::BraceInClusterPrefix { prefix: p }));
        } else {
            let ks = result.unwrap();
            prop_assert_eq!(ks.prefix(), p.as_str());
        }
    }

    #[test]
    fn durable_tables_with_braces_are_refused(t in "[a-z{}]{0,6}") {
        for layout in [Layout::Legacy, Layout::Cluster] {
            let result = Keyspace::new(layout, "bot").unwrap().durable(&t, "journal");
            if t.is_empty() || t.contains(['{', '}']) {
                prop_assert_eq!(result, Err(KeyError::BadTableName { table: t.clone() }));
            } else {
                let key = result.unwrap();
                prop_assert_eq!(key.to_string(), format!("bot:{{durable:{t}}}:journal"));
                prop_assert_eq!(key.slot(), slot(format!("durable:{t}").as_bytes()));
            }
        }
    }
}
