//! Locks, leaderships, heartbeats and leases, in both layouts: each step's requests and replies
//! as snapshots, and fences, terms and lease tokens decoded exactly from their decimal text.

use std::time::Duration;

use bytes::Bytes;

use botmesh_redis_core::driver::coord;
use botmesh_redis_core::driver::Reply;
use botmesh_redis_core::{ConfigError, Error, Layout, ServerError, Value};

use crate::coord::*;
use crate::support::*;

// --- locks ------------------------------------------------------------------------------------

#[test]
fn lock_acquire_extend_release() {
    snapshot_both!("lock", |_, ks| {
        let ttl = Duration::from_millis(1500);
        let mut out = String::new();
        let (got, t) = run(
            coord::lock_acquire(ks, "orders", "r1#1", ttl).unwrap(),
            |_| int(7),
        );
        assert_eq!(got.unwrap(), Some(7));
        out += &t;
        let (got, t) = run(
            coord::lock_acquire(ks, "orders", "r2#1", ttl).unwrap(),
            |_| Ok(Value::Nil),
        );
        assert_eq!(got.unwrap(), None);
        out += &t;
        let (got, t) = run(
            coord::lock_extend(ks, "orders", "r1#1", ttl).unwrap(),
            |_| int(1),
        );
        got.unwrap();
        out += &t;
        let (got, t) = run(
            coord::lock_extend(ks, "orders", "r2#1", ttl).unwrap(),
            |_| int(0),
        );
        assert!(matches!(got, Err(Error::NotHolder { .. })), "{got:?}");
        out += &t;
        let (got, t) = run(coord::lock_release(ks, "orders", "r1#1").unwrap(), |_| {
            int(1)
        });
        assert!(got.unwrap());
        out += &t;
        let (got, t) = run(coord::lock_release(ks, "orders", "r1#1").unwrap(), |_| {
            int(0)
        });
        assert!(!got.unwrap());
        out += &t;
        // A TTL of 1.5 ms is rounded up to 2 ms; a sub-millisecond one is refused before
        // anything is built (it would grant a fence for a lock nobody could use).
        let (_, t) = run(
            coord::lock_acquire(ks, "orders", "r3#1", Duration::from_micros(1500)).unwrap(),
            |_| int(8),
        );
        out += &t;
        for ttl in [Duration::ZERO, Duration::from_micros(10)] {
            assert_eq!(
                coord::lock_acquire(ks, "orders", "r3#1", ttl).map(drop),
                Err(Error::Config(ConfigError::DurationBelowOneMs {
                    argument: "ttl",
                    given: ttl
                }))
            );
        }
        out
    });
}

#[test]
fn lock_acquire_replicated() {
    snapshot_both!("lock_replicated", |_, ks| {
        let ttl = Duration::from_secs(2);
        let wait = Duration::from_millis(100);
        let mut out = String::new();
        out += "# WAIT reaches the replica: granted\n";
        let plan = coord::lock_acquire_replicated(ks, "orders", "r1#1", ttl, 1, wait).unwrap();
        let (got, t) = run(
            plan,
            replies(vec![("acquire_fenced", with_wait(9, Value::Int(1)))]),
        );
        assert_eq!(got.unwrap(), Some(9));
        out += &t;
        out += "# WAIT short: the grant is given back\n";
        let plan = coord::lock_acquire_replicated(ks, "orders", "r1#2", ttl, 1, wait).unwrap();
        let (got, t) = run(
            plan,
            replies(vec![
                ("acquire_fenced", with_wait(10, Value::Int(0))),
                ("release_if_holder", int(1)),
            ]),
        );
        assert_eq!(
            got.unwrap_err(),
            Error::NotReplicated {
                what: "lock \"orders\"".into(),
                wanted: 1,
                acked: 0
            }
        );
        out += &t;
        out += "# WAIT's reply lost: the grant is given back, its replication unknown\n";
        let plan = coord::lock_acquire_replicated(ks, "orders", "r1#3", ttl, 1, wait).unwrap();
        let (got, t) = run(
            plan,
            replies(vec![
                ("acquire_fenced", with_wait(11, Value::Nil)),
                ("release_if_holder", int(1)),
            ]),
        );
        assert!(
            matches!(got, Err(Error::ReplicationUnknown { .. })),
            "{got:?}"
        );
        out += &t;
        out += "# busy: no WAIT\n";
        let plan = coord::lock_acquire_replicated(ks, "orders", "r1#4", ttl, 1, wait).unwrap();
        let busy = Ok(Value::Array(vec![Value::Nil, Value::Int(0)]));
        let (got, t) = run(plan, replies(vec![("acquire_fenced", busy)]));
        assert_eq!(got.unwrap(), None);
        out += &t;
        out
    });
}

/// A grant whose outcome is unknown may stand on the server for an owner nobody will release:
/// it is given back (the owner's release) before the error is reported; a grant refused is not.
#[test]
fn a_lock_grant_of_unknown_outcome_is_given_back() {
    let ks = keyspace(Layout::Cluster);
    let ttl = Duration::from_secs(2);
    let lost = || {
        Err(Error::ReplyLost {
            addr: botmesh_redis_core::NodeAddr::new("127.0.0.1", 7000),
            reason: "the connection closed".into(),
        })
    };
    for plain in [true, false] {
        let mut sent = Vec::new();
        let mut answer = |req: &botmesh_redis_core::Request| {
            sent.push((req.name(), req.arguments()));
            match req.name().as_str() {
                "acquire_fenced" => lost(),
                "release_if_holder" => int(0),
                other => panic!("unexpected {other}"),
            }
        };
        let got = if plain {
            run(
                coord::lock_acquire(&ks, "orders", "r1#9", ttl).unwrap(),
                &mut answer,
            )
            .0
        } else {
            let wait = Duration::from_millis(100);
            let plan = coord::lock_acquire_replicated(&ks, "orders", "r1#9", ttl, 1, wait).unwrap();
            run(plan, &mut answer).0
        };
        assert!(matches!(got, Err(Error::ReplyLost { .. })), "{got:?}");
        assert_eq!(sent.len(), 2, "{sent:?}");
        assert_eq!(sent[1].0, "release_if_holder");
        assert_eq!(sent[1].1, ["r1#9"]);
    }
    // An error that says the grant did not run is the answer as it is.
    let mut sent = 0;
    let (got, _) = run(
        coord::lock_acquire(&ks, "orders", "r1#9", ttl).unwrap(),
        |_| {
            sent += 1;
            Err(Error::NotSent {
                reason: "the node is down".into(),
            })
        },
    );
    assert!(matches!(got, Err(Error::NotSent { .. })), "{got:?}");
    assert_eq!(sent, 1);
}

// --- leaderships --------------------------------------------------------------------------------

#[test]
fn leadership_campaign_renew_resign() {
    snapshot_both!("leadership", |_, ks| {
        let ttl = Duration::from_secs(5);
        let mut out = String::new();
        let (got, t) = run(
            coord::leader_campaign(ks, "scheduler", "r1", ttl).unwrap(),
            |_| int(3),
        );
        assert_eq!(got.unwrap(), Some(3));
        out += &t;
        let (got, t) = run(
            coord::leader_campaign(ks, "scheduler", "r2", ttl).unwrap(),
            |_| Ok(Value::Nil),
        );
        assert_eq!(got.unwrap(), None);
        out += &t;
        let (got, t) = run(
            coord::leader_renew(ks, "scheduler", "r1", ttl).unwrap(),
            |_| int(1),
        );
        got.unwrap();
        out += &t;
        let (got, t) = run(
            coord::leader_renew(ks, "scheduler", "r2", ttl).unwrap(),
            |_| int(0),
        );
        assert_eq!(
            got.unwrap_err(),
            Error::NotHolder {
                what: "leadership \"scheduler\"".into()
            }
        );
        out += &t;
        let (got, t) = run(coord::leader_resign(ks, "scheduler", "r1").unwrap(), |_| {
            int(1)
        });
        assert!(got.unwrap());
        out += &t;
        out += "# replicated campaign, WAIT short: resigned\n";
        let plan = coord::leader_campaign_replicated(
            ks,
            "scheduler",
            "r1",
            ttl,
            2,
            Duration::from_millis(50),
        )
        .unwrap();
        let (got, t) = run(
            plan,
            replies(vec![
                ("acquire_fenced", with_wait(4, Value::Int(1))),
                ("release_if_holder", int(1)),
            ]),
        );
        assert!(
            matches!(got, Err(Error::NotReplicated { acked: 1, .. })),
            "{got:?}"
        );
        out += &t;
        out
    });
}

// --- heartbeats ---------------------------------------------------------------------------------

fn scan_page(cursor: &str, keys: &[&str]) -> Reply {
    Ok(arr(vec![
        bulk(cursor),
        arr(keys.iter().map(|k| bulk(k)).collect()),
    ]))
}

fn two_masters() -> Value {
    let node = |port: i64| arr(vec![bulk("127.0.0.1"), Value::Int(port), bulk("id")]);
    arr(vec![
        arr(vec![Value::Int(0), Value::Int(8191), node(7000)]),
        arr(vec![Value::Int(8192), Value::Int(16383), node(7001)]),
    ])
}

#[test]
fn heartbeats_probe_and_live_replicas() {
    snapshot_both!("heartbeats", |_, ks| {
        let mut out = String::new();
        let plan =
            coord::heartbeat(ks, "r:1", Duration::from_secs(2), Bytes::from_static(b"1")).unwrap();
        let (got, t) = run(plan, |_| status_ok());
        got.unwrap();
        out += &t;
        let (got, t) = run(coord::replica_alive(ks, "r:1").unwrap(), |_| int(1));
        assert!(got.unwrap());
        out += &t;
        let (got, t) = run(coord::replica_alive(ks, "gone").unwrap(), |_| int(0));
        assert!(!got.unwrap());
        out += &t;
        let (got, t) = run(coord::heartbeat_stop(ks, "r:1").unwrap(), |_| int(1));
        got.unwrap();
        out += &t;

        out += "# live replicas on a single node: one SCAN cursor loop\n";
        let mut pages = vec![
            scan_page("0", &["bot:co:rep:r3"]),
            scan_page("17", &["bot:co:rep:r:1", "bot:co:rep:r2"]),
        ];
        let (got, t) = run(coord::live_replicas(ks, 100), |req| {
            if req.name() == "CLUSTER" {
                Err(Error::Server(ServerError::new(
                    "ERR This instance has cluster support disabled",
                )))
            } else {
                pages.pop().unwrap()
            }
        });
        assert_eq!(got.unwrap(), vec!["r2", "r3", "r:1"]);
        out += &t;

        out += "# live replicas on two masters: every master is scanned\n";
        let (got, t) = run(coord::live_replicas(ks, 100), |req| {
            let text = req.to_string();
            if req.name() == "CLUSTER" {
                Ok(two_masters())
            } else if text.contains("node=127.0.0.1:7000") {
                scan_page("0", &["bot:co:rep:r1", "bot:co:rep:r3"])
            } else {
                scan_page("0", &["bot:co:rep:r2"])
            }
        });
        assert_eq!(got.unwrap(), vec!["r1", "r2", "r3"]);
        out += &t;
        out
    });
}

// --- exact tokens -------------------------------------------------------------------------------

/// Fences, terms and lease tokens come back as the counter's decimal text (a Lua number would
/// round them past 2^53); every digit survives decoding, up to the `i64` maximum. An overflow
/// at the maximum is the server's error, passed on as it came.
#[test]
fn fences_terms_and_lease_tokens_decode_exactly_from_decimal_text() {
    let ks = keyspace(Layout::Cluster);
    let ttl = Duration::from_secs(3);
    let text = |n: u64| -> Reply { Ok(bulk(&n.to_string())) };
    let max = i64::MAX as u64;
    let past_2_53 = (1_u64 << 53) + 3;
    for (what, n) in [("past 2^53", past_2_53), ("i64::MAX", max)] {
        let (got, _) = run(coord::lock_acquire(&ks, "k", "o#1", ttl).unwrap(), |_| {
            text(n)
        });
        assert_eq!(got.unwrap(), Some(n), "lock, {what}");
        let (got, _) = run(coord::leader_campaign(&ks, "l", "r1", ttl).unwrap(), |_| {
            text(n)
        });
        assert_eq!(got.unwrap(), Some(n), "leadership, {what}");
        let (got, _) = run(
            coord::lease_acquire(&ks, "tick", "r1", ttl).unwrap(),
            |_| text(n),
        );
        assert_eq!(got.unwrap(), Some(n), "lease, {what}");
        let plan =
            coord::lock_acquire_replicated(&ks, "k", "o#1", ttl, 1, Duration::from_millis(50))
                .unwrap();
        let (got, _) = run(plan, |_| Ok(arr(vec![bulk(&n.to_string()), Value::Int(1)])));
        assert_eq!(got.unwrap(), Some(n), "replicated lock, {what}");
    }
    // A re-entrant campaign whose term counter is missing: 0, an integer reply.
    let (got, _) = run(coord::leader_campaign(&ks, "l", "r1", ttl).unwrap(), |_| {
        int(0)
    });
    assert_eq!(got.unwrap(), Some(0));
    // Text that is not a fence is refused, never taken for one.
    for bad in ["-1", "9223372036854775808", "1.5e+15", ""] {
        let (got, _) = run(coord::lock_acquire(&ks, "k", "o#1", ttl).unwrap(), |_| {
            Ok(bulk(bad))
        });
        assert!(
            matches!(got, Err(Error::UnexpectedReply { .. })),
            "{bad:?}: {got:?}"
        );
    }
    let overflow = ServerError::new("ERR increment or decrement would overflow");
    let (got, _) = run(coord::lock_acquire(&ks, "k", "o#1", ttl).unwrap(), |_| {
        Err(Error::Server(overflow.clone()))
    });
    assert_eq!(got.unwrap_err(), Error::Server(overflow));
}

// --- leases -------------------------------------------------------------------------------------

#[test]
fn lease_acquire_renew_release() {
    snapshot_both!("lease", |_, ks| {
        let ttl = Duration::from_secs(3);
        let mut out = String::new();
        let (got, t) = run(coord::lease_acquire(ks, "tick", "r1", ttl).unwrap(), |_| {
            int(12)
        });
        assert_eq!(got.unwrap(), Some(12));
        out += &t;
        let (got, t) = run(coord::lease_acquire(ks, "tick", "r2", ttl).unwrap(), |_| {
            Ok(Value::Nil)
        });
        assert_eq!(got.unwrap(), None);
        out += &t;
        let (got, t) = run(
            coord::lease_renew(ks, "tick", "r1", 12, ttl).unwrap(),
            |_| int(1),
        );
        got.unwrap();
        out += &t;
        let (got, t) = run(
            coord::lease_renew(ks, "tick", "r1", 11, ttl).unwrap(),
            |_| int(0),
        );
        assert_eq!(
            got.unwrap_err(),
            Error::NotHolder {
                what: "lease \"tick\"".into()
            }
        );
        out += &t;
        let (got, t) = run(coord::lease_release(ks, "tick", "r1", 12).unwrap(), |_| {
            int(1)
        });
        assert!(got.unwrap());
        out += &t;
        out += "# replicated acquire, WAIT short: released with the granted token\n";
        let plan =
            coord::lease_acquire_replicated(ks, "tick", "r1", ttl, 1, Duration::from_millis(50))
                .unwrap();
        let (got, t) = run(
            plan,
            replies(vec![
                ("lease acquire", with_wait(13, Value::Int(0))),
                ("lease release", int(1)),
            ]),
        );
        assert!(matches!(got, Err(Error::NotReplicated { .. })), "{got:?}");
        assert!(t.contains("args=[release r1 1 13]"), "{t}");
        out += &t;
        out
    });
}
