//! Every store plan, in both layouts, as snapshots: the exact requests of each step (command or
//! script, slot, keys, arguments), the scripted replies, and the result. Ids are hostile on
//! purpose: `:`, `{`, `}`, `*`, `%`, spaces, emoji and the empty string.

use std::fmt::Debug;
use std::time::Duration;

use bytes::Bytes;

use botmesh_redis_core::driver::plan::scripted;
use botmesh_redis_core::driver::store::{
    conv, cursor, delete_chat, guard, messages, records, user,
};
use botmesh_redis_core::driver::{Plan, Reply, Step};
use botmesh_redis_core::keys::bucket;
use botmesh_redis_core::keys::RecordKind;
use botmesh_redis_core::KeyError;
use botmesh_redis_core::{Error, Keyspace, Layout, Request, ServerError, Value};
use botmesh_redis_core::{Limit, MessageCursor, RecordCursor};

use crate::support::*;

fn not_a_cluster() -> Reply {
    Err(Error::Server(ServerError::new(
        "ERR This instance has cluster support disabled",
    )))
}

fn scan_page(cursor: &str, keys: &[String]) -> Reply {
    Ok(arr(vec![
        bulk(cursor),
        arr(keys.iter().map(|k| bulk(k)).collect()),
    ]))
}

/// Runs a plan with scripted replies and returns its transcript.
fn run<P: Plan>(plan: P, answer: impl FnMut(&Request) -> Reply) -> String
where
    P::Output: Debug,
{
    scripted::run(plan, 100, answer).transcript
}

/// One snapshot per layout.
fn snap(op: &str, layout: Layout, transcript: String) {
    insta::assert_snapshot!(format!("{op}__{layout}"), transcript);
}

// --- messages -----------------------------------------------------------------------------------

#[test]
fn save_message() {
    for (layout, ks) in both() {
        let mut out = String::new();
        for (i, id) in NASTY.iter().enumerate() {
            let chat = NASTY[NASTY.len() - 1 - i];
            let plan =
                messages::save_message(&ks, chat, id, 1_700_000_000_000, "p".into()).unwrap();
            out.push_str(&run(plan, |_| Ok(Value::Int(1))));
        }
        snap("save_message", layout, out);
    }
}

#[test]
fn get_and_delete_message() {
    for (layout, ks) in both() {
        let found = messages::get_message(&ks, "a:b", "{x}").unwrap();
        let mut out = run(found, |_| {
            Ok(arr(vec![arr(vec![
                bulk("{x}"),
                Value::Int(1_700_000_000_000),
                bulk("payload"),
            ])]))
        });
        let missing = messages::get_message(&ks, "😀", "").unwrap();
        out.push_str(&run(missing, |_| Ok(arr(vec![]))));
        let delete = messages::delete_message(&ks, "a:b", "*?[").unwrap();
        out.push_str(&run(delete, |_| Ok(Value::Int(1))));
        snap("get_and_delete_message", layout, out);
    }
}

#[test]
fn list_messages_pages() {
    for (layout, ks) in both() {
        let answer = |req: &Request| match req.name().as_str() {
            "message_page" => Ok(arr(vec![
                Value::Int(1),
                bulk("m 1"),
                Value::Int(1000),
                bulk("{m2}"),
                Value::Int(1000),
            ])),
            // The second message was deleted between the two calls.
            "message_items" => Ok(arr(vec![arr(vec![
                bulk("m 1"),
                Value::Int(1000),
                bulk("one"),
            ])])),
            other => panic!("unexpected {other}"),
        };
        let two = Limit::new(2).unwrap();
        let first = messages::list_messages(&ks, "a:b", 1000..=2000, None, two);
        let mut out = run(first, answer);

        let next = MessageCursor {
            time_ms: 1000,
            id: "{m2}".into(),
        };
        out.push_str(&run(
            messages::list_messages(&ks, "a:b", 1000..=2000, Some(&next), two),
            |req| match req.name().as_str() {
                "message_page" => Ok(arr(vec![Value::Int(0), bulk("😀"), Value::Int(1500)])),
                "message_items" => Ok(arr(vec![arr(vec![
                    bulk("😀"),
                    Value::Int(1500),
                    bulk("two"),
                ])])),
                other => panic!("unexpected {other}"),
            },
        ));

        out.push_str(&run(
            messages::list_messages(&ks, "", .., None, Limit::ONE),
            |_| Ok(arr(vec![Value::Int(0)])),
        ));
        snap("list_messages", layout, out);
    }
}

/// A range that holds no time lists nothing and sends nothing; an exclusive end is the time
/// before it.
#[test]
fn list_messages_of_an_empty_range_sends_nothing() {
    for (_, ks) in both() {
        for empty in [
            messages::list_messages(&ks, "c", 5..5, None, Limit::DEFAULT),
            messages::list_messages(&ks, "c", ..i64::MIN, None, Limit::DEFAULT),
        ] {
            let mut plan = empty;
            match plan.start() {
                Step::Done(Ok(page)) => assert_eq!((page.items.len(), page.next), (0, None)),
                other => panic!("an empty range sent {other:?}"),
            }
        }
        let mut plan = messages::list_messages(&ks, "c", 1000..2000, None, Limit::DEFAULT);
        let Step::Send(batch) = plan.start() else {
            panic!("a range of times sends its page script")
        };
        let args = batch[0].wire_args(false);
        let args: Vec<_> = args.iter().map(|a| String::from_utf8_lossy(a)).collect();
        assert!(
            args.ends_with(&[
                "1000".into(),
                "1999".into(),
                "".into(),
                "".into(),
                "100".into()
            ]),
            "{args:?}"
        );
    }
}

#[test]
fn delete_chat_in_two_chunks() {
    for (layout, ks) in both() {
        let plan = delete_chat::delete_chat(&ks, "a:b").with_chunk_size(2);
        let out = run(plan, |req| match req.name().as_str() {
            "delete_chat_begin" => Ok(arr(vec![bulk("m1"), bulk("{m2}")])),
            "delete_chat_chunk" if req.arguments()[1] == "m1" => {
                Ok(arr(vec![Value::Int(2), arr(vec![bulk("😀")])]))
            }
            "delete_chat_chunk" => Ok(arr(vec![Value::Int(1), arr(vec![])])),
            "delete_indexed" | "DEL" => Ok(Value::Int(1)),
            other => panic!("unexpected {other}"),
        });
        snap("delete_chat", layout, out);
    }
}

#[test]
fn delete_chat_of_an_empty_chat() {
    for (layout, ks) in both() {
        let plan = delete_chat::delete_chat(&ks, "");
        let out = run(plan, |req| match req.name().as_str() {
            "delete_chat_begin" => Ok(arr(vec![])),
            _ => Ok(Value::Int(0)),
        });
        snap("delete_chat_empty", layout, out);
    }
}

/// A time is a score, which Redis keeps as a double: outside ±2^53 ms it would be rounded, and
/// near the ends of `i64` read back as another number (a listing's cursor then looped). Such a
/// time is refused before anything is built; the ends of the exact range are taken.
#[test]
fn save_message_refuses_a_time_a_score_cannot_keep() {
    let ks = keyspace(Layout::Cluster);
    for time_ms in [(1 << 53) + 1, -(1 << 53) - 1, i64::MAX, i64::MIN] {
        let err = messages::save_message(&ks, "c", "m", time_ms, Bytes::new()).unwrap_err();
        assert_eq!(
            err,
            Error::Config(botmesh_redis_core::ConfigError::MessageTimeOutOfRange { time_ms })
        );
    }
    for time_ms in [1 << 53, -(1 << 53), 0] {
        assert!(messages::save_message(&ks, "c", "m", time_ms, Bytes::new()).is_ok());
    }
}

/// A log another program wrote (and a migration copied as it was) may hold an id that is not
/// UTF-8: its item goes with it, under the name built from the id's bytes. Decoded as text, the
/// id failed the chunk after the log had moved to the drain, on every call: the chat's
/// history stayed in Redis, invisible, for good.
#[test]
fn delete_chat_deletes_an_id_that_is_not_utf8() {
    let raw = Bytes::from_static(b"m\xff");
    for (_, ks) in both() {
        let mut chunks = Vec::new();
        let run = scripted::run(delete_chat::delete_chat(&ks, "c"), 10, |req| {
            match req.name().as_str() {
                "delete_chat_begin" => Ok(arr(vec![Value::Bulk(raw.clone())])),
                "delete_chat_chunk" => {
                    chunks.push(req.keys()[2].clone());
                    Ok(arr(vec![Value::Int(1), arr(vec![])]))
                }
                _ => Ok(Value::Int(1)),
            }
        });
        let done = run.output.expect("the chat is deleted");
        assert_eq!((done.messages, done.chunks, done.record), (1, 1, true));
        assert_eq!(chunks, vec![ks.message_item_raw("c", &raw)]);
    }
}

#[test]
fn delete_chat_stops_when_a_chunk_makes_no_progress() {
    let ks = keyspace(Layout::Cluster);
    let run = scripted::run(delete_chat::delete_chat(&ks, "c"), 10, |req| {
        match req.name().as_str() {
            "delete_chat_begin" => Ok(arr(vec![bulk("m1")])),
            _ => Ok(arr(vec![Value::Int(0), arr(vec![bulk("m1")])])),
        }
    });
    let err = run.output.unwrap_err();
    assert!(err.to_string().contains("removed nothing"), "{err}");
}

// --- records ------------------------------------------------------------------------------------

#[test]
fn chat_and_contact_records() {
    for (layout, ks) in both() {
        let mut out = String::new();
        for id in NASTY {
            let plan = records::upsert_record(&ks, RecordKind::Chat, id, "v".into()).unwrap();
            out.push_str(&run(plan, |req| match req.name().as_str() {
                "SET" => status_ok(),
                _ => Ok(Value::Int(1)),
            }));
        }
        let get = records::get_record(&ks, RecordKind::Contact, "a:b").unwrap();
        out.push_str(&run(get, |_| Ok(bulk("contact"))));
        let delete = records::delete_record(&ks, RecordKind::Contact, "{x}").unwrap();
        out.push_str(&run(delete, |_| Ok(Value::Int(1))));
        snap("records", layout, out);
    }
}

#[test]
fn records_refuse_the_wrong_kind() {
    let ks = keyspace(Layout::Cluster);
    for kind in [RecordKind::Checkpoint, RecordKind::Schedule] {
        let err = records::upsert_record(&ks, kind, "x", "v".into()).unwrap_err();
        assert!(matches!(err, Error::Config(_)), "{err:?}");
    }
    assert!(records::list_records(&ks, RecordKind::Schedule, None, Limit::DEFAULT).is_err());
    assert!(records::get_record(&ks, RecordKind::Schedule, "x").is_err());
    assert!(records::delete_record(&ks, RecordKind::Schedule, "x").is_err());
}

/// Ids spread over several buckets, for the listing snapshots.
fn listed_ids() -> Vec<&'static str> {
    let mut ids = vec!["a:b", "{x}", "}{", "a b", "😀", "", "chat-1", "chat-2"];
    ids.sort();
    ids
}

/// Answers a cluster listing from `ids`: the index reads of each bucket, then the `MGET`s.
fn answer_listing(ks: &Keyspace, kind: RecordKind, req: &Request) -> Reply {
    let ids = listed_ids();
    let key = req.keys()[0].to_string();
    match req.name().as_str() {
        "ZRANGE" | "list_expiring_index" => {
            let b = (0..32u8)
                .find(|&b| ks.record_index(kind, b).unwrap().to_string() == key)
                .unwrap();
            // ZRANGE key min max BYLEX ...: the min is `(after` on later pages.
            let after = req
                .arguments()
                .get(1)
                .and_then(|min| min.strip_prefix('('))
                .map(str::to_owned);
            Ok(arr(ids
                .iter()
                .filter(|id| bucket(id) == b)
                .filter(|id| after.as_deref().is_none_or(|a| **id > a))
                .map(|id| bulk(id))
                .collect()))
        }
        "MGET" => Ok(arr(req
            .keys()
            .iter()
            .map(|k| {
                let id = ids.iter().find(|id| ks.record(kind, id) == *k).unwrap();
                // One record vanished between the two steps.
                if *id == "}{" {
                    Value::Nil
                } else {
                    bulk(&format!("value of {id}"))
                }
            })
            .collect())),
        other => panic!("unexpected {other}"),
    }
}

/// Answers a legacy listing: not a cluster, one SCAN page of every record key, then the GETs.
fn answer_legacy_listing(ks: &Keyspace, kind: RecordKind, req: &Request) -> Reply {
    let ids = listed_ids();
    match req.name().as_str() {
        "CLUSTER" => not_a_cluster(),
        "SCAN" => {
            let keys: Vec<String> = ids
                .iter()
                .map(|id| ks.record(kind, id).to_string())
                .collect();
            scan_page("0", &keys)
        }
        "MGET" => {
            let id = ids
                .iter()
                .find(|id| ks.record(kind, id) == req.keys()[0])
                .unwrap();
            Ok(arr(vec![bulk(&format!("value of {id}"))]))
        }
        other => panic!("unexpected {other}"),
    }
}

#[test]
fn list_chats_merges_the_buckets() {
    for (layout, ks) in both() {
        let mut out = String::new();
        for after in [None, Some(RecordCursor::after("a b"))] {
            let three = Limit::new(3).unwrap();
            let plan = records::list_records(&ks, RecordKind::Chat, after.as_ref(), three).unwrap();
            out.push_str(&run(plan, |req| match layout {
                Layout::Cluster => answer_listing(&ks, RecordKind::Chat, req),
                Layout::Legacy => answer_legacy_listing(&ks, RecordKind::Chat, req),
            }));
        }
        snap("list_chats", layout, out);
    }
}

#[test]
fn checkpoints() {
    for (layout, ks) in both() {
        let mut out = String::new();
        for ttl in [Some(Duration::from_millis(300)), None] {
            let plan = records::set_checkpoint(&ks, "a:b", "v".into(), ttl).unwrap();
            out.push_str(&run(plan, |req| match req.name().as_str() {
                "SET" => status_ok(),
                _ => Ok(Value::Int(1_700_000_000_300)),
            }));
        }
        let get = records::get_record(&ks, RecordKind::Checkpoint, "a:b").unwrap();
        out.push_str(&run(get, |_| Ok(Value::Nil)));
        let clear = records::delete_record(&ks, RecordKind::Checkpoint, "a:b").unwrap();
        out.push_str(&run(clear, |_| Ok(Value::Int(0))));
        let list = records::list_records(
            &ks,
            RecordKind::Checkpoint,
            Some(&RecordCursor::after("a:b")),
            Limit::new(10).unwrap(),
        )
        .unwrap();
        out.push_str(&run(list, |req| match layout {
            Layout::Cluster => answer_listing(&ks, RecordKind::Checkpoint, req),
            Layout::Legacy => answer_legacy_listing(&ks, RecordKind::Checkpoint, req),
        }));
        snap("checkpoints", layout, out);
    }
}

// --- user data ----------------------------------------------------------------------------------

#[test]
fn user_data() {
    for (layout, ks) in both() {
        // The legacy layout refuses a `:` in a user id or namespace (its names would read back
        // ambiguously); the cluster layout encodes every segment.
        let uid = match layout {
            Layout::Legacy => "u1",
            Layout::Cluster => "u:1",
        };
        let mut out = String::new();
        for ttl in [Some(Duration::from_millis(300)), None] {
            let plan = user::set_user_data(&ks, uid, "n{s}", "k*", "v".into(), ttl).unwrap();
            out.push_str(&run(plan, |req| match req.name().as_str() {
                "SET" => status_ok(),
                _ => Ok(Value::Int(-1)),
            }));
        }
        let get = user::get_user_data(&ks, uid, "n{s}", "k*").unwrap();
        out.push_str(&run(get, |_| Ok(bulk("v"))));
        let delete = user::delete_user_data(&ks, uid, "", "😀").unwrap();
        out.push_str(&run(delete, |_| Ok(Value::Int(1))));

        // Entries of the user; for the legacy layout, as the scan would return their keys.
        let entries = [("n{s}", "k*"), ("n{s}", "a b"), ("other", "x:y")];
        let members: Vec<Value> = entries
            .iter()
            .map(|(ns, key)| {
                bulk(&format!(
                    "{}:{}",
                    botmesh_redis_core::keys::enc(ns),
                    botmesh_redis_core::keys::enc(key)
                ))
            })
            .collect();
        let keys: Vec<String> = entries
            .iter()
            .map(|(ns, key)| ks.user_entry(uid, ns, key).to_string())
            .collect();
        let answer = |req: &Request| match req.name().as_str() {
            "list_expiring_index" | "ZRANGE" => Ok(arr(members.clone())),
            "CLUSTER" => not_a_cluster(),
            "SCAN" => scan_page("0", &keys),
            "MGET" => Ok(arr(req.keys().iter().map(|_| bulk("v")).collect())),
            "delete_indexed_chunk" => Ok(Value::Int(2)),
            "DEL" => Ok(Value::Int(1)),
            other => panic!("unexpected {other}"),
        };
        out.push_str(&run(
            user::list_user_data(&ks, uid, Some("n{s}"), None, Limit::MAX),
            answer,
        ));
        out.push_str(&run(
            user::list_user_data(&ks, uid, None, None, Limit::MAX),
            answer,
        ));
        out.push_str(&run(user::clear_user_data(&ks, uid, Some("n{s}")), answer));
        snap("user_data", layout, out);
    }
}

#[test]
fn legacy_user_data_refuses_ambiguous_ids() {
    let ks = Keyspace::new(Layout::Legacy, "bot").unwrap();
    let refused = |result: Result<(), Error>| match result {
        Err(Error::Key(KeyError::LegacyColon { field, value })) => format!("{field}={value}"),
        other => panic!("expected LegacyColon, got {other:?}"),
    };
    assert_eq!(
        refused(user::set_user_data(&ks, "u:1", "n", "k", "v".into(), None).map(drop)),
        "user id=u:1"
    );
    assert_eq!(
        refused(user::get_user_data(&ks, "u", "n:s", "k").map(drop)),
        "namespace=n:s"
    );
    assert_eq!(
        refused(user::delete_user_data(&ks, "u", "n:s", "k").map(drop)),
        "namespace=n:s"
    );
    // A `:` in the entry's own key is fine: it is the last segment.
    assert!(user::set_user_data(&ks, "u", "n", "k:1", "v".into(), None).is_ok());
    let cluster = Keyspace::new(Layout::Cluster, "bot").unwrap();
    assert!(user::set_user_data(&cluster, "u:1", "n:s", "k", "v".into(), None).is_ok());
}

// --- conversations and cursors ------------------------------------------------------------------

#[test]
fn conversations_and_cursors() {
    for (layout, ks) in both() {
        let mut out = String::new();
        out.push_str(&run(conv::get_conversation(&ks, "a:b").unwrap(), |_| {
            Ok(bulk("state"))
        }));
        let ttl = Some(Duration::from_secs(60));
        out.push_str(&run(
            conv::set_conversation(&ks, "{x}", "s".into(), ttl).unwrap(),
            |_| status_ok(),
        ));
        out.push_str(&run(
            conv::set_conversation(&ks, "{x}", "s".into(), None).unwrap(),
            |_| status_ok(),
        ));
        out.push_str(&run(
            conv::delete_conversation(&ks, "😀").unwrap(),
            |_| Ok(Value::Int(0)),
        ));
        out.push_str(&run(cursor::get_cursor(&ks, "*").unwrap(), |_| {
            Ok(bulk("9223372036854775807"))
        }));
        out.push_str(&run(cursor::set_cursor(&ks, "*", -5).unwrap(), |_| {
            status_ok()
        }));
        out.push_str(&run(
            cursor::set_cursor_if_greater(&ks, "50%", i64::MIN).unwrap(),
            |_| Ok(Value::Int(0)),
        ));
        snap("conversations_and_cursors", layout, out);
    }
}

// --- start guard --------------------------------------------------------------------------------

/// The lifecycle stamp's answer: an outcome, then the record's fields.
fn stamped(outcome: &str, record: &[(&str, &str)]) -> Reply {
    let mut out = vec![bulk(outcome)];
    for (field, value) in record {
        out.push(bulk(field));
        out.push(bulk(value));
    }
    Ok(Value::Array(out))
}

/// Answers a start guard: the marker, then (single node) the scan of `keys`, then `SET NX`,
/// then the lifecycle stamp (no record: a cluster side gets an origin record).
fn answer_start<'a>(
    marker: Option<&'a str>,
    keys: &'a [String],
    set_nx: Reply,
) -> impl FnMut(&Request) -> Reply + 'a {
    move |req: &Request| match req.name().as_str() {
        "GET" => Ok(marker.map(bulk).unwrap_or(Value::Nil)),
        "CLUSTER" => not_a_cluster(),
        "SCAN" => scan_page("0", keys),
        "SET" => set_nx.clone(),
        "lifecycle" if req.keys()[0].to_string().ends_with("cluster") => stamped("created", &[]),
        "lifecycle" => stamped("none", &[]),
        other => panic!("unexpected {other}"),
    }
}

#[test]
fn start_guard() {
    let cluster = keyspace(Layout::Cluster);
    let legacy = keyspace(Layout::Legacy);
    let shared = vec![
        "bot:{m:c}:z".to_owned(),
        "bot:conv:c".to_owned(),
        "bot:cursor:n".to_owned(),
        "bot:co:rep:r1".to_owned(),
    ];
    let with_legacy = vec!["bot:chat:1".to_owned(), "bot:conv:c".to_owned()];
    // (snapshot, keyspace, allow_legacy_data, marker, keys under the prefix)
    type Case<'a> = (&'a str, &'a Keyspace, bool, Option<&'a str>, &'a [String]);
    let cases: Vec<Case> = vec![
        (
            "cluster_marker_found",
            &cluster,
            false,
            Some("cluster:v1"),
            &[],
        ),
        (
            "cluster_marker_unknown",
            &cluster,
            false,
            Some("cluster:v9"),
            &[],
        ),
        ("cluster_marker_written", &cluster, false, None, &shared),
        (
            "cluster_legacy_refused",
            &cluster,
            false,
            None,
            &with_legacy,
        ),
        ("cluster_legacy_allowed", &cluster, true, None, &with_legacy),
        ("legacy_plain", &legacy, false, None, &[]),
        (
            "legacy_with_marker",
            &legacy,
            false,
            Some("cluster:v1"),
            &[],
        ),
    ];
    for (label, ks, allow, marker, keys) in cases {
        let transcript = run(
            guard::start(ks, allow),
            answer_start(marker, keys, status_ok()),
        );
        insta::assert_snapshot!(format!("start__{label}"), transcript);
    }

    // Another replica writes the marker between our scan and our SET NX.
    let mut gets = 0;
    let race = run(guard::start(&cluster, false), |req| {
        match req.name().as_str() {
            "GET" => {
                gets += 1;
                Ok(if gets == 1 {
                    Value::Nil
                } else {
                    bulk("cluster:v1")
                })
            }
            "CLUSTER" => not_a_cluster(),
            "SCAN" => scan_page("0", &[]),
            "SET" => Ok(Value::Nil),
            "lifecycle" => stamped("created", &[]),
            other => panic!("unexpected {other}"),
        }
    });
    insta::assert_snapshot!("start__cluster_marker_race", race);

    // The lifecycle record refuses a copy that is not complete, and a deleted side; it is
    // stamped on a complete copy (the bots start there).
    let record = |role: &'static str, phase: &'static str| {
        vec![
            ("copy", "1700000000000"),
            ("role", role),
            ("phase", phase),
            ("exact", "1"),
            ("peer", "the legacy keyspace \"bot\" on a single node"),
            ("at", "1700000000000"),
        ]
    };
    let outcomes = [
        (
            "cluster_incomplete_copy_refused",
            &cluster,
            "refused",
            record("target", "copying"),
        ),
        (
            "legacy_deleted_refused",
            &legacy,
            "refused",
            record("source", "deleted"),
        ),
        (
            "cluster_copy_stamped",
            &cluster,
            "stamped",
            record("target", "complete"),
        ),
    ];
    for (label, ks, outcome, fields) in outcomes {
        let transcript = run(guard::start(ks, false), |req| match req.name().as_str() {
            "GET" => Ok(bulk("cluster:v1")),
            "lifecycle" => stamped(outcome, &fields),
            other => panic!("unexpected {other}"),
        });
        insta::assert_snapshot!(format!("start__{label}"), transcript);
    }
}

#[test]
fn start_guard_scans_every_master_of_a_cluster() {
    let ks = keyspace(Layout::Cluster);
    let master = |port: i64| arr(vec![bulk("127.0.0.1"), Value::Int(port), bulk("id")]);
    let slots = arr(vec![
        arr(vec![Value::Int(0), Value::Int(8191), master(7000)]),
        arr(vec![Value::Int(8192), Value::Int(16383), master(7001)]),
    ]);
    let transcript = run(guard::start(&ks, false), |req| {
        let text = req.to_string();
        match req.name().as_str() {
            "GET" => Ok(Value::Nil),
            "CLUSTER" => Ok(slots.clone()),
            "SCAN" if text.contains("7000") => scan_page("0", &["bot:{ch:1}:idx".to_owned()]),
            "SCAN" => scan_page("0", &["bot:msgs:legacy-chat".to_owned()]),
            other => panic!("unexpected {other}"),
        }
    });
    insta::assert_snapshot!("start__cluster_scans_every_master", transcript);
}

#[test]
fn eviction_policy_reads_config() {
    let run = scripted::run(guard::eviction_policy().unwrap(), 4, |_| {
        Ok(Value::Array(vec![
            Value::from("maxmemory-policy"),
            Value::from("allkeys-lru"),
        ]))
    });
    assert_eq!(run.output, Ok(Some("allkeys-lru".to_owned())));
    assert!(run
        .transcript
        .contains("CONFIG any-master read keys=[] args=[GET maxmemory-policy]"));
}
