//! Properties of the migration's name reader (`migrate::names`): every key a `Keyspace` builds
//! reads back as the datum it was built for, in both layouts, for any id the layout holds; a
//! key of one layout is never read as data of the other; and arbitrary keys never panic.

use botmesh_redis_core::keys::{RecordKind, TurnPart};
use botmesh_redis_core::migrate::names::{self, item_readings, Name};
use botmesh_redis_core::{Keyspace, Layout};
use proptest::prelude::*;

/// Ids with the characters that break naive parsers.
fn id() -> impl Strategy<Value = String> {
    prop::string::string_regex("[a-z:{}%*?\\[\\] \u{e9}\u{1F600}]{0,8}").unwrap()
}

/// An id the legacy layout holds in a user id or namespace (no `:`).
fn colon_free() -> impl Strategy<Value = String> {
    prop::string::string_regex("[a-z{}%*?\\[\\] \u{e9}]{0,8}").unwrap()
}

fn read(ks: &Keyspace, key: &[u8]) -> Name {
    match ks.layout() {
        Layout::Legacy => names::legacy(ks, key),
        Layout::Cluster => names::cluster(ks, key),
    }
}

fn layouts(prefix: &str) -> Vec<Keyspace> {
    let mut out = vec![Keyspace::new(Layout::Legacy, prefix).unwrap()];
    if let Ok(cluster) = Keyspace::new(Layout::Cluster, prefix) {
        out.push(cluster);
    }
    out
}

proptest! {
    #[test]
    fn every_built_key_reads_back(
        prefix in "[a-z:{}]{1,6}",
        a in id(),
        b in id(),
        user in colon_free(),
        ns in colon_free(),
    ) {
        for ks in layouts(&prefix) {
            let cases = vec![
                (ks.message_log(&a), Name::Log { chat: a.clone() }),
                (ks.message_drain(&a), Name::Drain { chat: a.clone() }),
                (ks.lock(&a), Name::LockHolder { key: a.clone() }),
                (ks.lock_fence(&a), Name::Fence { key: a.clone() }),
                (ks.leader(&a), Name::LeaderHolder { name: a.clone() }),
                (ks.leader_term(&a), Name::Term { name: a.clone() }),
                (
                    ks.turn(&a, TurnPart::Tix),
                    Name::Turn { chat: a.clone(), part: TurnPart::Tix },
                ),
                (
                    ks.user_entry(&user, &ns, &b),
                    Name::UserEntry { user: user.clone(), ns: ns.clone(), key: b.clone() },
                ),
            ];
            for (key, name) in cases {
                prop_assert_eq!(read(&ks, key.as_bytes()), name, "{}", key);
            }
            for kind in RecordKind::ALL {
                let key = ks.record(kind, &a);
                prop_assert_eq!(
                    read(&ks, key.as_bytes()),
                    Name::Record { kind, id: a.clone() },
                    "{}", key
                );
            }
            let item = ks.message_item(&a, &b);
            match ks.layout() {
                Layout::Cluster => prop_assert_eq!(
                    read(&ks, item.as_bytes()),
                    Name::Item { chat: a.clone(), id: b.clone().into() }
                ),
                Layout::Legacy => {
                    let rest = format!("{a}:{b}");
                    prop_assert_eq!(
                        read(&ks, item.as_bytes()),
                        Name::LegacyItem { rest: rest.clone().into() }
                    );
                    // One of the readings is the message that was written.
                    prop_assert!(item_readings(rest.as_bytes()).any(|r| r == (a.as_str(), b.as_bytes())));
                }
            }
        }
    }

    /// The cluster layout's data keys are never legacy data under the same prefix, and the
    /// reverse: an in-place run never copies what it wrote.
    #[test]
    fn layouts_do_not_read_each_other(prefix in "[a-z:]{1,6}", a in id(), b in id()) {
        let legacy = Keyspace::new(Layout::Legacy, prefix.as_str()).unwrap();
        let cluster = Keyspace::new(Layout::Cluster, prefix.as_str()).unwrap();
        let cluster_keys = [
            cluster.message_log(&a),
            cluster.message_item(&a, &b),
            cluster.record(RecordKind::Chat, &a),
            cluster.user_entry(&a, &b, &a),
            cluster.lock_fence(&a),
            cluster.leader_term(&a),
            cluster.turn(&a, TurnPart::Seq),
        ];
        for key in cluster_keys {
            prop_assert_eq!(names::legacy(&legacy, key.as_bytes()), Name::Unknown, "{}", key);
        }
        let legacy_keys = [
            legacy.message_log(&a),
            legacy.record(RecordKind::Chat, &a),
            legacy.lock_fence(&a),
            legacy.leader_term(&a),
        ];
        for key in legacy_keys {
            prop_assert_eq!(names::cluster(&cluster, key.as_bytes()), Name::Unknown, "{}", key);
        }
    }

    #[test]
    fn arbitrary_keys_never_panic(prefix in "[a-z]{1,3}", key in prop::collection::vec(any::<u8>(), 0..40)) {
        for ks in layouts(&prefix) {
            let _ = read(&ks, &key);
            let mut under = format!("{prefix}:").into_bytes();
            under.extend_from_slice(&key);
            let _ = read(&ks, &under);
        }
    }
}
