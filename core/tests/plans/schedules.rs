//! Schedules and the durable journal and outbox, in both layouts; the first request of every
//! coordination primitive for hostile ids, and the route each layout gives it.

use std::time::Duration;

use bytes::Bytes;

use botmesh_redis_core::driver::coord;
use botmesh_redis_core::driver::{Plan, Step};
use botmesh_redis_core::{Error, Layout, Limit, Request, Route, ServerError, Value};

use crate::coord::*;
use crate::support::*;

// --- schedules ----------------------------------------------------------------------------------

#[test]
fn schedule_put_stale_delete_get() {
    snapshot_both!("schedule", |_, ks| {
        let mut out = String::new();
        let plan = coord::schedule_put(
            ks,
            "daily:{x}",
            5,
            "leader-a",
            Bytes::from_static(b"0 9 * * *"),
        );
        let (got, t) = run(plan.unwrap(), |_| Ok(arr(vec![bulk("ok"), bulk("5")])));
        got.unwrap();
        out += &t;
        let plan = coord::schedule_put(ks, "daily:{x}", 4, "leader-a", Bytes::from_static(b"old"));
        let (got, t) = run(plan.unwrap(), |_| Ok(arr(vec![bulk("stale"), bulk("5")])));
        assert_eq!(
            got.unwrap_err(),
            Error::Stale {
                what: "schedule \"daily:{x}\"".into(),
                token: 4,
                stored: 5
            }
        );
        out += &t;
        out += "# the same token from another holder is refused\n";
        let plan = coord::schedule_put(ks, "daily:{x}", 5, "leader-b", Bytes::from_static(b"b"));
        let (got, t) = run(plan.unwrap(), |_| Ok(arr(vec![bulk("taken"), bulk("5")])));
        assert_eq!(
            got.unwrap_err(),
            Error::NotHolder {
                what: "schedule \"daily:{x}\" fencing token 5".into(),
            }
        );
        out += &t;
        let (got, t) = run(
            coord::schedule_delete(ks, "daily:{x}", 6, "leader-c").unwrap(),
            |_| Ok(arr(vec![bulk("ok"), bulk("6")])),
        );
        got.unwrap();
        out += &t;
        let (got, t) = run(coord::schedule_get(ks, "daily:{x}").unwrap(), |_| {
            Ok(arr(vec![
                bulk("5"),
                bulk("0 9 * * *"),
                bulk("0"),
                bulk("leader-a"),
            ]))
        });
        assert_eq!(
            got.unwrap(),
            Some(botmesh_redis_core::Schedule {
                token: 5,
                data: Bytes::from_static(b"0 9 * * *"),
                holder: Some("leader-a".into()),
            })
        );
        out += &t;
        out += "# a record written before holders were stored reads without one\n";
        let (got, t) = run(coord::schedule_get(ks, "daily:{x}").unwrap(), |_| {
            Ok(arr(vec![bulk("5"), bulk("old"), Value::Nil, Value::Nil]))
        });
        assert_eq!(
            got.unwrap(),
            Some(botmesh_redis_core::Schedule {
                token: 5,
                data: Bytes::from_static(b"old"),
                holder: None,
            })
        );
        out += &t;
        out += "# a deleted marker and a missing record both read as None\n";
        let (got, t) = run(coord::schedule_get(ks, "daily:{x}").unwrap(), |_| {
            Ok(arr(vec![
                bulk("6"),
                Value::Nil,
                bulk("1"),
                bulk("leader-c"),
            ]))
        });
        assert_eq!(got.unwrap(), None);
        out += &t;
        let (got, t) = run(coord::schedule_get(ks, "nope").unwrap(), |_| {
            Ok(arr(vec![Value::Nil, Value::Nil, Value::Nil, Value::Nil]))
        });
        assert_eq!(got.unwrap(), None);
        out += &t;
        out
    });
}

/// Listing hides deleted markers: cluster layout, the 32 bucket indexes then the records;
/// legacy layout, `SCAN` then the records.
#[test]
fn schedule_list_hides_markers() {
    snapshot_both!("schedule_list", |layout, ks| {
        let record = |id: &str| {
            String::from_utf8_lossy(
                ks.record(botmesh_redis_core::keys::RecordKind::Schedule, id)
                    .as_bytes(),
            )
            .into_owned()
        };
        let index = |id: &str| {
            ks.record_index_of(botmesh_redis_core::keys::RecordKind::Schedule, id)
                .map(|k| String::from_utf8_lossy(k.as_bytes()).into_owned())
                .unwrap_or_default()
        };
        let (live, marker) = ("a:1", "b{2}");
        let (live_key, marker_key) = (record(live), record(marker));
        let (got, t) = run(
            coord::schedule_list(ks, None, Limit::DEFAULT).unwrap(),
            |req| {
                let keys: Vec<String> = req
                    .keys()
                    .iter()
                    .map(|k| String::from_utf8_lossy(k.as_bytes()).into_owned())
                    .collect();
                match req.name().as_str() {
                    "CLUSTER" => Err(Error::Server(ServerError::new(
                        "ERR This instance has cluster support disabled",
                    ))),
                    "SCAN" => Ok(arr(vec![
                        bulk("0"),
                        arr(vec![bulk(&marker_key), bulk(&live_key)]),
                    ])),
                    // The bucket index of each id lists it.
                    "ZRANGE" if keys[0] == index(live) => Ok(arr(vec![bulk(live)])),
                    // A delete removes the index member; this one raced with the listing.
                    "ZRANGE" if keys[0] == index(marker) => Ok(arr(vec![bulk(marker)])),
                    "ZRANGE" => Ok(arr(vec![])),
                    "HMGET" if keys[0] == live_key => Ok(arr(vec![
                        bulk("3"),
                        bulk("every day"),
                        bulk("0"),
                        bulk("r1"),
                    ])),
                    "HMGET" => Ok(arr(vec![bulk("4"), Value::Nil, bulk("1"), bulk("r2")])),
                    other => panic!("unexpected {other}"),
                }
            },
        );
        assert_eq!(
            got.unwrap(),
            botmesh_redis_core::SchedulePage {
                items: vec![(
                    live.to_owned(),
                    botmesh_redis_core::Schedule {
                        token: 3,
                        data: Bytes::from_static(b"every day"),
                        holder: Some("r1".into()),
                    }
                )],
                next: None,
            }
        );
        if layout == Layout::Cluster {
            assert_eq!(t.matches("ZRANGE").count(), 32);
        }
        t
    });
}

/// Tokens go out as their exact decimal text over the whole `u64` range: the script compares
/// them as text, so nothing is refused for being past 2^53.
#[test]
fn schedule_tokens_keep_every_u64_digit() {
    let ks = keyspace(Layout::Cluster);
    for token in [u64::MAX, i64::MAX as u64 + 1, (1 << 53) + 1, 0] {
        let request =
            first_request(coord::schedule_put(&ks, "s", token, "h", Bytes::new()).unwrap());
        assert!(
            request.to_string().contains(&format!(" {token} h ")),
            "{request}"
        );
    }
}

// --- durability ---------------------------------------------------------------------------------

#[test]
fn durable_journal_and_outbox() {
    snapshot_both!("durable", |_, ks| {
        let window = Duration::from_secs(60);
        let mut out = String::new();
        let (got, t) = run(
            coord::journal_begin(ks, "in", "m:1", "i1", window).unwrap(),
            |_| int(1),
        );
        assert_eq!(got.unwrap(), botmesh_redis_core::Begun::First);
        out += &t;
        out += "# the same instance again (its first reply was lost): still its own\n";
        let (got, t) = run(
            coord::journal_begin(ks, "in", "m:1", "i1", window).unwrap(),
            |_| int(2),
        );
        assert_eq!(got.unwrap(), botmesh_redis_core::Begun::ByThisInstance);
        out += &t;
        let (got, t) = run(
            coord::journal_begin(ks, "in", "m:1", "i2", window).unwrap(),
            |_| int(0),
        );
        assert_eq!(got.unwrap(), botmesh_redis_core::Begun::Duplicate);
        out += &t;
        let (got, t) = run(coord::journal_forget(ks, "in", "m:1", "a").unwrap(), |_| {
            int(1)
        });
        assert!(got.unwrap());
        out += &t;
        let plan =
            coord::outbox_enqueue(ks, "out", "send:1", Bytes::from_static(b"hi"), window).unwrap();
        let (got, t) = run(plan, |_| int(1));
        assert!(got.unwrap());
        out += &t;
        let plan = coord::outbox_claim(
            ks,
            "out",
            "i1",
            Limit::new(10).unwrap(),
            Duration::from_millis(500),
        )
        .unwrap();
        let (got, t) = run(plan, |_| {
            Ok(arr(vec![
                bulk("send:1"),
                bulk("hi"),
                bulk("send:2"),
                bulk(""),
            ]))
        });
        assert_eq!(
            got.unwrap(),
            vec![
                botmesh_redis_core::Claimed {
                    key: "send:1".into(),
                    payload: Bytes::from_static(b"hi")
                },
                botmesh_redis_core::Claimed {
                    key: "send:2".into(),
                    payload: Bytes::new()
                },
            ]
        );
        out += &t;
        let (got, t) = run(
            coord::outbox_ack(ks, "out", "send:1", "i1").unwrap(),
            |_| int(1),
        );
        assert_eq!(got.unwrap(), botmesh_redis_core::Acked::Now);
        out += &t;
        out += "# the same ack again (its first reply was lost): already done\n";
        let (got, t) = run(
            coord::outbox_ack(ks, "out", "send:1", "i1").unwrap(),
            |_| int(2),
        );
        assert_eq!(got.unwrap(), botmesh_redis_core::Acked::Already);
        out += &t;
        let (got, t) = run(
            coord::outbox_ack(ks, "out", "send:2", "i9").unwrap(),
            |_| int(0),
        );
        assert!(matches!(got, Err(Error::NotHolder { .. })), "{got:?}");
        out += &t;
        let (got, t) = run(coord::outbox_recover(ks, "out", "i1").unwrap(), |_| int(1));
        assert_eq!(got.unwrap(), 1);
        out += &t;
        out
    });
}

#[test]
fn durable_table_names_are_checked_before_sending() {
    let ks = keyspace(Layout::Cluster);
    assert!(coord::journal_begin(&ks, "a{b", "m", "i", Duration::from_secs(1)).is_err());
    assert!(coord::outbox_recover(&ks, "", "i").is_err());
}

// --- hostile ids --------------------------------------------------------------------------------

/// The first request of each primitive for ids that break naive key building.
#[test]
fn hostile_ids() {
    let ttl = Duration::from_secs(1);
    for (layout, ks) in both() {
        let mut out = String::new();
        for id in NASTY {
            out += &format!("id {id:?}\n");
            let requests = [
                first_request(coord::lock_acquire(&ks, id, id, ttl).unwrap()),
                first_request(coord::leader_campaign(&ks, id, id, ttl).unwrap()),
                first_request(coord::acquire_turn(&ks, id, id, id, turn_options()).unwrap()),
                first_request(coord::replica_alive(&ks, id).unwrap()),
                first_request(coord::lease_acquire(&ks, id, id, ttl).unwrap()),
                first_request(coord::schedule_put(&ks, id, 1, id, Bytes::new()).unwrap()),
            ];
            for request in requests {
                out += &format!("  {request}\n");
            }
        }
        insta::assert_snapshot!(format!("hostile_ids__{}", layout.name()), out);
    }
}

fn first_request<P: Plan>(mut plan: P) -> Request {
    match plan.start() {
        Step::Send(batch) => batch.into_vec().remove(0),
        Step::Wait(d) => panic!("a plan that starts by waiting {d:?}"),
        Step::Done(_) => panic!("a plan that is done before it sends"),
    }
}

/// Every multi-key call of the cluster layout stays in one slot; in the legacy layout, the calls
/// whose keys span slots go to the single node.
#[test]
fn routes_per_layout() {
    let ttl = Duration::from_secs(1);
    let cluster = keyspace(Layout::Cluster);
    let legacy = keyspace(Layout::Legacy);
    for ks in [&cluster, &legacy] {
        let lock = first_request(coord::lock_acquire(ks, "k", "o", ttl).unwrap());
        let turn = first_request(coord::acquire_turn(ks, "c", "r", "1", turn_options()).unwrap());
        match ks.layout() {
            Layout::Cluster => {
                assert_eq!(lock.slot(), Some(lock.keys()[1].slot()));
                assert!(turn.keys().iter().all(|k| Some(k.slot()) == turn.slot()));
            }
            Layout::Legacy => {
                assert_eq!(lock.route(), Route::AnyMaster);
                assert_eq!(turn.route(), Route::AnyMaster);
            }
        }
    }
}
