//! The full key table of both layouts, as snapshots: every key the `Keyspace` produces, for ids
//! that are plain, hostile to hash tags (`{x}`, `}{`), glob characters, `%`, spaces, emoji, a
//! 1 KiB id and the empty string, with the slot of each key.
//!
//! The snapshots are the reviewed form of the layout contract (`docs/key-layout.md`); the
//! explicit tests below pin the keys of both layouts to that document's tables by hand.

use std::fmt::Write as _;

use botmesh_redis_core::keys::{bucket, enc, hash_tag, slot};
use botmesh_redis_core::keys::{RecordKind, TurnPart, CLUSTER_V1};
use botmesh_redis_core::KeyError;
use botmesh_redis_core::{Key, Keyspace, Layout};

/// The fixed message id used when the id under test is the chat.
const MSG: &str = "m1";
/// The fixed chat used when the id under test is the message id.
const CHAT: &str = "chat-1";
/// A valid durability table name.
const TABLE: &str = "inbox";

fn long_id() -> String {
    "x".repeat(1024)
}

/// The ids of the table, each with the label it is shown under.
fn ids() -> Vec<(String, String)> {
    let mut ids: Vec<(String, String)> = [
        "chat-1", "a:b", "{x}", "}{", "*", "?", "[", "%", "a b", "😀",
    ]
    .iter()
    .map(|id| (format!("{id:?}"), (*id).to_owned()))
    .collect();
    ids.push(("\"x\" x 1024".to_owned(), long_id()));
    ids.push(("\"\" (empty)".to_owned(), String::new()));
    ids
}

/// Shows a key with the 1 KiB id shortened; the slot and length are of the real key.
fn show(key: &Key) -> String {
    let long = long_id();
    let text = key.to_string().replace(&long, "<x*1024>");
    let tag = match hash_tag(key.as_bytes()) {
        Some(_) => "",
        None => " untagged",
    };
    if key.as_bytes().len() > 200 {
        format!(
            "{text}  slot={} len={}{tag}",
            key.slot(),
            key.as_bytes().len()
        )
    } else {
        format!("{text}  slot={}{tag}", key.slot())
    }
}

fn line(out: &mut String, what: &str, key: &Key) {
    writeln!(out, "  {what:<32} {}", show(key)).unwrap();
}

fn opt_line(out: &mut String, what: &str, key: Option<Key>) {
    match key {
        Some(key) => line(out, what, &key),
        None => writeln!(out, "  {what:<32} (none in this layout)").unwrap(),
    }
}

/// Every key of every namespace for one id.
fn render_id(ks: &Keyspace, id: &str) -> String {
    let mut out = String::new();
    line(&mut out, "message_log(id)", &ks.message_log(id));
    line(&mut out, "message_drain(id)", &ks.message_drain(id));
    line(&mut out, "message_item(id, m1)", &ks.message_item(id, MSG));
    line(
        &mut out,
        "message_item(chat-1, id)",
        &ks.message_item(CHAT, id),
    );
    writeln!(out, "  bucket(id) = {}", bucket(id)).unwrap();
    for kind in RecordKind::ALL {
        line(
            &mut out,
            &format!("record({kind:?}, id)"),
            &ks.record(kind, id),
        );
        opt_line(
            &mut out,
            &format!("record_index_of({kind:?}, id)"),
            ks.record_index_of(kind, id),
        );
    }
    line(
        &mut out,
        "user_entry(id, ns, k)",
        &ks.user_entry(id, "ns", "k"),
    );
    line(
        &mut out,
        "user_entry(u1, id, k)",
        &ks.user_entry("u1", id, "k"),
    );
    line(
        &mut out,
        "user_entry(u1, ns, id)",
        &ks.user_entry("u1", "ns", id),
    );
    opt_line(&mut out, "user_index(id)", ks.user_index(id));
    line(&mut out, "lock(id)", &ks.lock(id));
    line(&mut out, "lock_fence(id)", &ks.lock_fence(id));
    for part in TurnPart::ALL {
        line(&mut out, &format!("turn(id, {part:?})"), &ks.turn(id, part));
    }
    line(&mut out, "leader(id)", &ks.leader(id));
    line(&mut out, "leader_term(id)", &ks.leader_term(id));
    line(&mut out, "heartbeat(id)", &ks.heartbeat(id));
    line(&mut out, "conversation(id)", &ks.conversation(id));
    line(&mut out, "cursor(id)", &ks.cursor(id));
    line(&mut out, "lease(id)", &ks.lease(id));
    line(
        &mut out,
        "durable(inbox, id)",
        &ks.durable(TABLE, id).expect("a valid table name"),
    );
    match ks.durable(id, "journal") {
        Ok(key) => line(&mut out, "durable(id, journal)", &key),
        Err(e) => writeln!(out, "  {:<32} refused: {e}", "durable(id, journal)").unwrap(),
    }
    out
}

/// The whole table of one layout with prefix `bot`.
fn render_layout(layout: Layout) -> String {
    let ks = Keyspace::new(layout, "bot").unwrap();
    let mut out = String::new();
    writeln!(out, "layout {layout}, prefix bot").unwrap();
    line(&mut out, "marker()", &ks.marker());
    for (label, id) in ids() {
        writeln!(out, "\nid {label}").unwrap();
        out.push_str(&render_id(&ks, &id));
    }
    out
}

#[test]
fn legacy_key_table() {
    insta::assert_snapshot!("legacy", render_layout(Layout::Legacy));
}

#[test]
fn cluster_key_table() {
    insta::assert_snapshot!("cluster", render_layout(Layout::Cluster));
}

/// The 32 bucket indexes of each kind, and the `SCAN MATCH` patterns of the legacy layout.
#[test]
fn cluster_bucket_indexes_and_legacy_patterns() {
    let cluster = Keyspace::new(Layout::Cluster, "bot").unwrap();
    let legacy = Keyspace::new(Layout::Legacy, "bot").unwrap();
    let mut out = String::new();
    for kind in RecordKind::ALL {
        writeln!(out, "cluster record_indexes({kind:?})").unwrap();
        let indexes = cluster.record_indexes(kind);
        assert_eq!(indexes.len(), 32);
        for key in &indexes {
            writeln!(out, "  {}", show(key)).unwrap();
        }
        assert!(legacy.record_indexes(kind).is_empty());
        assert_eq!(cluster.record_index(kind, 32), None);
        assert_eq!(cluster.record_pattern(kind), None);
    }
    writeln!(out, "legacy patterns").unwrap();
    for kind in RecordKind::ALL {
        let pattern = legacy.record_pattern(kind).unwrap();
        writeln!(out, "  record_pattern({kind:?}) {pattern}").unwrap();
    }
    for user in ["u1", "a*b", "{x}"] {
        let all = legacy.user_pattern(user, None).unwrap();
        let ns = legacy.user_pattern(user, Some("n?s")).unwrap();
        writeln!(out, "  user_pattern({user:?}, None) {all}").unwrap();
        writeln!(out, "  user_pattern({user:?}, \"n?s\") {ns}").unwrap();
        assert_eq!(cluster.user_pattern(user, None), None);
    }
    writeln!(out, "  heartbeat_pattern() {}", legacy.heartbeat_pattern()).unwrap();
    writeln!(out, "  prefix_pattern() {}", legacy.prefix_pattern()).unwrap();
    let globby = Keyspace::new(Layout::Legacy, "b*t[1]").unwrap();
    writeln!(out, "prefix \"b*t[1]\"").unwrap();
    writeln!(out, "  prefix_pattern() {}", globby.prefix_pattern()).unwrap();
    writeln!(
        out,
        "  record_pattern(Chat) {}",
        globby.record_pattern(RecordKind::Chat).unwrap()
    )
    .unwrap();
    insta::assert_snapshot!("bucket_indexes_and_patterns", out);
}

/// The cluster keys of `docs/key-layout.md`, written out by hand for a plain and a hostile id.
#[test]
fn cluster_keys_match_the_documented_table() {
    let ks = Keyspace::new(Layout::Cluster, "bot").unwrap();
    let s = |k: Key| k.to_string();
    // Messages: p:{m:<chat>}:z and p:{m:<chat>}:i:<member>.
    assert_eq!(s(ks.message_log("a:b")), "bot:{m:a%3Ab}:z");
    assert_eq!(s(ks.message_item("a:b", "{x}")), "bot:{m:a%3Ab}:i:%7Bx%7D");
    // Records: p:{<kind>:<b>}:r:<id> and p:{<kind>:<b>}:idx, b = bucket(id), no prefix in tag.
    assert_eq!(bucket("a:b"), 0);
    for (kind, word) in [
        (RecordKind::Chat, "ch"),
        (RecordKind::Contact, "ct"),
        (RecordKind::Checkpoint, "cp"),
        (RecordKind::Schedule, "sc"),
    ] {
        assert_eq!(
            s(ks.record(kind, "a:b")),
            format!("bot:{{{word}:0}}:r:a%3Ab")
        );
        assert_eq!(
            s(ks.record_index_of(kind, "a:b").unwrap()),
            format!("bot:{{{word}:0}}:idx")
        );
        // The tag carries no prefix: every bot sharing a cluster uses the same 32 slots.
        let other = Keyspace::new(Layout::Cluster, "other").unwrap();
        assert_eq!(
            other.record(kind, "a:b").slot(),
            ks.record(kind, "a:b").slot()
        );
    }
    // User data: p:{ud:<user>}:e:<ns>:<key> and p:{ud:<user>}:idx.
    assert_eq!(
        s(ks.user_entry("u:1", "n s", "k%")),
        "bot:{ud:u%3A1}:e:n%20s:k%25"
    );
    assert_eq!(s(ks.user_index("u:1").unwrap()), "bot:{ud:u%3A1}:idx");
    // Locks: p:{lk:<key>}:l and p:{lk:<key>}:f.
    assert_eq!(s(ks.lock("*")), "bot:{lk:%2A}:l");
    assert_eq!(s(ks.lock_fence("*")), "bot:{lk:%2A}:f");
    // Turns: p:co:{t:<chat>}:seq|tix|serving|owner|last.
    let turns: Vec<String> = TurnPart::ALL.iter().map(|&p| s(ks.turn("}{", p))).collect();
    assert_eq!(
        turns,
        [
            "bot:co:{t:%7D%7B}:seq",
            "bot:co:{t:%7D%7B}:tix",
            "bot:co:{t:%7D%7B}:serving",
            "bot:co:{t:%7D%7B}:owner",
            "bot:co:{t:%7D%7B}:last",
        ]
    );
    // Leaderships: p:co:{ld:<name>} and ...:term.
    assert_eq!(s(ks.leader("😀")), "bot:co:{ld:%F0%9F%98%80}");
    assert_eq!(s(ks.leader_term("😀")), "bot:co:{ld:%F0%9F%98%80}:term");
    // Unchanged: raw segments, the same in both layouts.
    let legacy = Keyspace::new(Layout::Legacy, "bot").unwrap();
    for (cluster_key, legacy_key, expected) in [
        (
            ks.conversation("a:b"),
            legacy.conversation("a:b"),
            "bot:conv:a:b",
        ),
        (ks.cursor("{x}"), legacy.cursor("{x}"), "bot:cursor:{x}"),
        (ks.lease("*"), legacy.lease("*"), "bot:lease:*"),
        (
            ks.heartbeat("r 1"),
            legacy.heartbeat("r 1"),
            "bot:co:rep:r 1",
        ),
        (
            ks.durable("inbox", "journal").unwrap(),
            legacy.durable("inbox", "journal").unwrap(),
            "bot:{durable:inbox}:journal",
        ),
        (ks.marker(), legacy.marker(), "bot:{meta}:layout"),
    ] {
        assert_eq!(s(cluster_key.clone()), expected);
        assert_eq!(cluster_key, legacy_key);
    }
    assert_eq!(CLUSTER_V1, "cluster:v1");
}

/// The legacy keys of `docs/key-layout.md`, by hand.
#[test]
fn legacy_keys_match_the_documented_table() {
    let ks = Keyspace::new(Layout::Legacy, "bot").unwrap();
    let s = |k: Key| k.to_string();
    assert_eq!(s(ks.message_log("c:1")), "bot:msgs:c:1");
    assert_eq!(s(ks.message_item("c:1", "m")), "bot:msg:c:1:m");
    assert_eq!(s(ks.record(RecordKind::Chat, "{x}")), "bot:chat:{x}");
    assert_eq!(s(ks.record(RecordKind::Contact, "x")), "bot:contact:x");
    assert_eq!(
        s(ks.record(RecordKind::Checkpoint, "x")),
        "bot:checkpoint:x"
    );
    assert_eq!(s(ks.record(RecordKind::Schedule, "x")), "bot:schedule:x");
    assert_eq!(s(ks.user_entry("u", "n", "k")), "bot:user:u:n:k");
    assert_eq!(s(ks.lock("k")), "bot:lock:k");
    assert_eq!(s(ks.lock_fence("k")), "bot:fence:k");
    assert_eq!(s(ks.turn("c", TurnPart::Serving)), "bot:co:turn:c:serving");
    assert_eq!(s(ks.leader("n")), "bot:co:leader:n");
    assert_eq!(s(ks.leader_term("n")), "bot:co:term:n");
    // Raw segments: an id's braces become the key's hash tag (harmless on one node).
    assert_eq!(ks.record(RecordKind::Chat, "{x}").slot(), slot(b"x"));
    // Historical behaviour: ids with `:` can alias another chat's message.
    assert_eq!(ks.message_item("a:b", "c"), ks.message_item("a", "b:c"));
}

#[test]
fn refusals() {
    assert_eq!(
        Keyspace::new(Layout::Legacy, ""),
        Err(KeyError::EmptyPrefix)
    );
    assert_eq!(
        Keyspace::new(Layout::Cluster, ""),
        Err(KeyError::EmptyPrefix)
    );
    for prefix in ["{", "}", "b{o}t", "bot}", "{bot"] {
        assert_eq!(
            Keyspace::new(Layout::Cluster, prefix),
            Err(KeyError::BraceInClusterPrefix {
                prefix: prefix.to_owned()
            })
        );
        assert_eq!(
            Keyspace::new(Layout::Legacy, prefix).unwrap().prefix(),
            prefix
        );
    }
    for layout in [Layout::Legacy, Layout::Cluster] {
        let ks = Keyspace::new(layout, "bot").unwrap();
        for table in ["", "{x}", "}{", "a{", "b}"] {
            assert_eq!(
                ks.durable(table, "journal"),
                Err(KeyError::BadTableName {
                    table: table.to_owned()
                })
            );
        }
    }
    // Every refusal in the table above, as users read it.
    let errors = [
        Keyspace::new(Layout::Cluster, "").unwrap_err().to_string(),
        Keyspace::new(Layout::Cluster, "a{b")
            .unwrap_err()
            .to_string(),
        Keyspace::new(Layout::Cluster, "bot")
            .unwrap()
            .durable("a}", "journal")
            .unwrap_err()
            .to_string(),
    ];
    assert_eq!(
        errors,
        [
            "the key prefix is empty",
            "the prefix \"a{b\" contains { or }, which the cluster layout reserves for hash tags",
            "the durability table name \"a}\" is empty or contains { or }",
        ]
    );
    // The encoded segment of the table's hostile ids, for the reader of the snapshot.
    assert_eq!(enc("}{"), "%7D%7B");
}
