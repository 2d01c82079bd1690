//! Every coordination plan, in both layouts, as snapshots: the exact requests of each step
//! (command or script, slot or route, keys, arguments), the scripted replies, and the result.
//! One snapshot also renders the first request of each primitive for hostile ids (`:`, `{`,
//! `}`, glob characters, `%`, spaces, emoji, the empty string).
//!
//! Regenerate with `INSTA_UPDATE=always cargo test -p botmesh-redis-core --features testing
//! --test coord_plans`, then review the `.snap` files by eye.
//!
//! Needs the `testing` feature, for [`plan::scripted`] (the workspace's test command enables
//! every feature).
#![cfg(feature = "testing")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::fmt::Debug;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

use botmesh_redis_core::driver::coord;

use botmesh_redis_core::driver::plan::scripted;
use botmesh_redis_core::driver::{Plan, Reply, Step};
use botmesh_redis_core::testing::{both_layouts, NASTY_IDS};
use botmesh_redis_core::{
    ConfigError, Error, Keyspace, Layout, Request, Route, ServerError, Value,
};
use botmesh_redis_core::{SkipReason, TurnEvent, TurnGrant, TurnGuard, TurnOptions};

// --- helpers ------------------------------------------------------------------------------------

const NASTY: &[&str] = NASTY_IDS;

fn both() -> [(Layout, Keyspace); 2] {
    both_layouts("bot").unwrap()
}

fn keyspace(layout: Layout) -> Keyspace {
    Keyspace::new(layout, "bot").unwrap()
}

/// The operation of a multi-operation script (`turn`, `lease`, `schedule`, `durable`), or the
/// script or command name.
fn op(req: &Request) -> String {
    match req.name().as_str() {
        "turn" | "lease" | "schedule" | "durable" => {
            format!("{} {}", req.name(), req.arguments()[0])
        }
        other => other.to_owned(),
    }
}

fn bulk(s: &str) -> Value {
    Value::from(s)
}

fn int(i: i64) -> Reply {
    Ok(Value::Int(i))
}

fn arr(items: Vec<Value>) -> Value {
    Value::Array(items)
}

fn status_ok() -> Reply {
    Ok(Value::Status(Bytes::from_static(b"OK")))
}

/// The reply to a grant written with its `WAIT`: the grant's value and `WAIT`'s.
fn with_wait(grant: i64, wait: Value) -> Reply {
    Ok(Value::Array(vec![Value::Int(grant), wait]))
}

fn reply_lost() -> Reply {
    Err(Error::ReplyLost {
        addr: botmesh_redis_core::NodeAddr::new("127.0.0.1", 7000),
        reason: "connection reset".into(),
    })
}

/// A turn poll reply `{status, now, member, ticket[, reason]}`.
fn poll(status: &str, now: i64, member: &str, ticket: i64, reason: Option<&str>) -> Reply {
    let mut items = vec![
        bulk(status),
        Value::Int(now),
        bulk(member),
        Value::Int(ticket),
    ];
    items.extend(reason.map(bulk));
    Ok(arr(items))
}

fn run<P: Plan>(
    plan: P,
    answer: impl FnMut(&Request) -> Reply,
) -> (Result<P::Output, Error>, String)
where
    P::Output: Debug,
{
    let run = scripted::run(plan, 64, answer);
    (run.output, run.transcript)
}

/// Runs `body` for both layouts and snapshots each transcript as `<name>__<layout>`.
fn snapshot_both(name: &str, mut body: impl FnMut(Layout, &Keyspace) -> String) {
    for (layout, ks) in both() {
        let transcript = body(layout, &ks);
        insta::assert_snapshot!(format!("{name}__{}", layout.name()), transcript);
    }
}

/// Answers requests in order from a list of `(expected operation, reply)`, failing the test on a
/// request it did not expect.
fn replies(expected: Vec<(&'static str, Reply)>) -> impl FnMut(&Request) -> Reply {
    let mut expected = expected.into_iter();
    move |req| {
        let (want, reply) = expected
            .next()
            .unwrap_or_else(|| panic!("unexpected request {req}"));
        assert_eq!(op(req), want, "request {req}");
        reply
    }
}

// --- locks ------------------------------------------------------------------------------------

#[test]
fn lock_acquire_extend_release() {
    snapshot_both("lock", |_, ks| {
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
        // A sub-millisecond TTL is rounded up to 1 ms (Redis refuses 0).
        let (_, t) = run(
            coord::lock_acquire(ks, "orders", "r3#1", Duration::from_micros(10)).unwrap(),
            |_| int(8),
        );
        out += &t;
        out
    });
}

#[test]
fn lock_acquire_replicated() {
    snapshot_both("lock_replicated", |_, ks| {
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

// --- leaderships --------------------------------------------------------------------------------

#[test]
fn leadership_campaign_renew_resign() {
    snapshot_both("leadership", |_, ks| {
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
    snapshot_both("heartbeats", |_, ks| {
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

// --- turns --------------------------------------------------------------------------------------

fn turn_options() -> TurnOptions {
    TurnOptions {
        ttl: Duration::from_secs(10),
        poll_interval: Duration::from_millis(20),
        claim_timeout: Duration::from_secs(1),
        wait_timeout: Duration::from_secs(5),
        idle_lifetime: Duration::from_secs(60),
    }
}

fn guard(member: &str, ticket: u64) -> TurnGuard {
    TurnGuard {
        chat: "chat:1".into(),
        ticket,
        member: member.into(),
    }
}

/// A ticket as a restarted counter hands them out: the server's time in ms x 1000, past 2^50.
const T0: u64 = 1_767_225_600_000_000;

#[test]
fn turn_takes_waits_probes_a_dead_predecessor_skips_and_is_granted() {
    snapshot_both("turn_acquire", |layout, ks| {
        let plan = coord::acquire_turn(ks, "chat:1", "r:2", "7", turn_options()).unwrap();
        let (mine, before) = ((T0 + 5) as i64, (T0 + 4) as i64);
        let mut script = vec![
            ("turn take", int(mine)),
            // r:1 holds the ticket before and its replica lives.
            ("turn poll", poll("wait", 1_000, "r%3A1|3", before, None)),
            // r:1's holder is probed by the next in line.
            ("turn poll", poll("probe", 1_020, "r%3A1|3", before, None)),
        ];
        match layout {
            Layout::Cluster => {
                script.push(("EXISTS", int(0)));
                script.push(("turn skip", int(1)));
            }
            // Legacy: the skip reads the heartbeat itself (one more key), atomically.
            Layout::Legacy => script.push(("turn skip", int(1))),
        }
        script.push(("turn poll", poll("granted", 1_045, "r%3A2|7", mine, None)));
        let (got, t) = run(plan, replies(script));
        assert_eq!(
            got.unwrap(),
            TurnGrant {
                guard: guard("r%3A2|7", T0 + 5),
                events: vec![
                    TurnEvent::Took(T0 + 5),
                    TurnEvent::Skipped {
                        ticket: T0 + 4,
                        member: "r%3A1|3".into(),
                        reason: SkipReason::HeartbeatExpired,
                    },
                ],
            }
        );
        // Every digit of the ticket goes out, in the owner value's decimal text.
        assert!(t.contains("args=[poll 1767225600000005 r%3A2|7 "), "{t}");
        assert!(t.contains("args=[skip 1767225600000004 r%3A1|3 "), "{t}");
        t
    });
}

/// An idle lifetime shorter than twice the longest turn timer is refused before anything is
/// built, by every turn plan: the queue could expire under a live waiter or holder.
#[test]
fn turn_idle_lifetime_shorter_than_twice_the_longest_timer_is_refused() {
    let ks = keyspace(Layout::Cluster);
    let ok = turn_options();
    assert_eq!(ok.check(), Ok(()));
    assert_eq!(TurnOptions::default().check(), Ok(()));
    // The TTL (10 s) is the longest: 20 s is the least accepted.
    let least = TurnOptions {
        idle_lifetime: Duration::from_secs(20),
        ..ok
    };
    assert_eq!(least.check(), Ok(()));
    let cases = [
        ("below twice the TTL", Duration::from_millis(19_999), ok),
        (
            "below twice the wait timeout",
            Duration::from_secs(59),
            TurnOptions {
                wait_timeout: Duration::from_secs(30),
                ..ok
            },
        ),
        (
            "below twice the claim timeout",
            Duration::from_secs(29),
            TurnOptions {
                claim_timeout: Duration::from_secs(15),
                ..ok
            },
        ),
        (
            "below twice the poll interval",
            Duration::from_secs(29),
            TurnOptions {
                poll_interval: Duration::from_secs(15),
                ..ok
            },
        ),
        ("zero", Duration::ZERO, ok),
        (
            "below the floor, with timers that would allow it",
            Duration::from_millis(9),
            TurnOptions {
                ttl: Duration::from_millis(1),
                poll_interval: Duration::from_millis(1),
                claim_timeout: Duration::from_millis(1),
                wait_timeout: Duration::from_millis(1),
                idle_lifetime: Duration::ZERO,
            },
        ),
    ];
    for (why, idle_lifetime, base) in cases {
        let bad = TurnOptions {
            idle_lifetime,
            ..base
        };
        let refused = |got: Result<(), Error>| {
            assert!(
                matches!(
                    &got,
                    Err(Error::Config(ConfigError::TurnIdleLifetimeTooShort { .. }))
                ),
                "{why}: {got:?}"
            )
        };
        refused(bad.check());
        refused(coord::acquire_turn(&ks, "chat:1", "r2", "1", bad).map(drop));
        refused(coord::turn_extend(&ks, &guard("r2|1", 3), &bad).map(drop));
        refused(coord::turn_release(&ks, &guard("r2|1", 3), &bad).map(drop));
    }
    let floor = TurnOptions {
        ttl: Duration::ZERO,
        poll_interval: Duration::ZERO,
        claim_timeout: Duration::ZERO,
        wait_timeout: Duration::ZERO,
        idle_lifetime: botmesh_redis_core::MIN_IDLE_LIFETIME,
    };
    assert_eq!(floor.check(), Ok(()));
    // Durations too long for a script's arithmetic are refused as for every TTL.
    let huge = TurnOptions {
        idle_lifetime: Duration::MAX,
        ..ok
    };
    assert!(matches!(
        coord::acquire_turn(&ks, "chat:1", "r2", "1", huge),
        Err(Error::Config(ConfigError::TtlTooLong { .. }))
    ));
}

#[test]
fn turn_waits_while_the_holder_lives() {
    snapshot_both("turn_holder_alive", |layout, ks| {
        let plan = coord::acquire_turn(ks, "chat:1", "r2", "1", turn_options()).unwrap();
        let mut script = vec![
            ("turn take", int(2)),
            ("turn poll", poll("probe", 1_000, "r1|1", 1, None)),
        ];
        match layout {
            Layout::Cluster => script.push(("EXISTS", int(1))),
            Layout::Legacy => script.push(("turn skip", int(0))),
        }
        script.push(("turn poll", poll("granted", 1_030, "r2|1", 2, None)));
        let (got, t) = run(plan, replies(script));
        assert_eq!(got.unwrap().events, vec![TurnEvent::Took(2)]);
        t
    });
}

#[test]
fn turn_skips_unclaimed_and_expired_tickets_and_retakes_a_lost_one() {
    snapshot_both("turn_skips_and_retake", |_, ks| {
        let plan = coord::acquire_turn(ks, "chat:1", "r2", "1", turn_options()).unwrap();
        let script = vec![
            ("turn take", int(6)),
            // The poll itself skipped ticket 4: it was served over a second ago, never claimed.
            (
                "turn poll",
                poll("retry", 1_000, "r1|9", 4, Some("unclaimed")),
            ),
            // Then ticket 5, whose holder's owner key ran out.
            (
                "turn poll",
                poll("retry", 1_001, "r3|2", 5, Some("expired")),
            ),
            // This waiter was too slow itself: its ticket was skipped by another.
            ("turn poll", poll("skipped", 1_002, "", 6, None)),
            ("turn take", int(8)),
            ("turn poll", poll("retry", 1_003, "", 7, Some("gone"))),
            ("turn poll", poll("granted", 1_004, "r2|1#1", 8, None)),
        ];
        let (got, t) = run(plan, replies(script));
        assert_eq!(
            got.unwrap(),
            TurnGrant {
                guard: guard("r2|1#1", 8),
                events: vec![
                    TurnEvent::Took(6),
                    TurnEvent::Skipped {
                        ticket: 4,
                        member: "r1|9".into(),
                        reason: SkipReason::Unclaimed,
                    },
                    TurnEvent::Skipped {
                        ticket: 5,
                        member: "r3|2".into(),
                        reason: SkipReason::OwnerExpired,
                    },
                    TurnEvent::Retook { lost: 6 },
                    TurnEvent::Took(8),
                ],
            }
        );
        t
    });
}

#[test]
fn turn_wait_times_out_on_the_server_clock_and_withdraws() {
    snapshot_both("turn_timeout", |_, ks| {
        let plan = coord::acquire_turn(ks, "chat:1", "r2", "1", turn_options()).unwrap();
        let script = vec![
            ("turn take", int(3)),
            ("turn poll", poll("wait", 10_000, "r1|1", 2, None)),
            ("turn poll", poll("wait", 14_000, "r1|1", 2, None)),
            // 5,001 ms after the first poll, on the server's clock.
            ("turn poll", poll("wait", 15_001, "r1|1", 2, None)),
            ("turn release", int(2)),
        ];
        let (got, t) = run(plan, replies(script));
        assert_eq!(
            got.unwrap_err(),
            Error::Timeout {
                outcome_unknown: false
            }
        );
        t
    });
}

#[test]
fn turn_rides_out_lost_replies() {
    snapshot_both("turn_lost_replies", |_, ks| {
        let plan = coord::acquire_turn(ks, "chat:1", "r2", "1", turn_options()).unwrap();
        let script = vec![
            // The take ran but its reply was lost: the same member takes again, same ticket.
            ("turn take", reply_lost()),
            ("turn take", int(3)),
            // A poll that granted, reply lost: polling again grants again to the same owner.
            ("turn poll", reply_lost()),
            ("turn poll", poll("granted", 1_000, "r2|1", 3, None)),
        ];
        let (got, t) = run(plan, replies(script));
        assert_eq!(got.unwrap().guard, guard("r2|1", 3));
        t
    });
}

#[test]
fn turn_gives_up_after_repeated_failures_and_on_server_errors() {
    let ks = keyspace(Layout::Cluster);
    let plan = coord::acquire_turn(&ks, "chat:1", "r2", "1", turn_options()).unwrap();
    let mut script = vec![("turn take", int(3))];
    for _ in 0..6 {
        script.push(("turn poll", reply_lost()));
    }
    script.push(("turn release", int(2)));
    let (got, t) = run(plan, replies(script));
    assert!(matches!(got, Err(Error::ReplyLost { .. })), "{got:?}");
    assert_eq!(t.matches("wait 20ms").count(), 5, "{t}");

    let plan = coord::acquire_turn(&ks, "chat:1", "r2", "1", turn_options()).unwrap();
    let script_error = Err(Error::Server(ServerError::new("ERR boom")));
    let script = vec![
        ("turn take", int(3)),
        ("turn poll", script_error),
        ("turn release", int(2)),
    ];
    let (got, _) = run(plan, replies(script));
    assert_eq!(
        got.unwrap_err(),
        Error::Server(ServerError::new("ERR boom"))
    );
}

#[test]
fn turn_cancelled_by_its_caller_withdraws_its_ticket() {
    let ks = keyspace(Layout::Cluster);
    let flag = Arc::new(AtomicBool::new(false));
    let plan = coord::acquire_turn(&ks, "chat:1", "r2", "1", turn_options())
        .unwrap()
        .cancel_on(flag.clone());
    let mut polls = 0;
    let (got, t) = run(plan, |req| match op(req).as_str() {
        "turn take" => int(3),
        "turn poll" => {
            polls += 1;
            // The caller goes away while the plan waits.
            flag.store(true, Ordering::Release);
            poll("wait", 1_000, "r1|1", 2, None)
        }
        "turn release" => int(2),
        other => panic!("unexpected {other}"),
    });
    assert_eq!(polls, 1);
    assert_eq!(got.unwrap_err(), Error::Closed);
    insta::assert_snapshot!("turn_cancelled", t);

    // Cancelled just as it was granted: the grant is released, not kept by nobody.
    let flag = Arc::new(AtomicBool::new(false));
    let plan = coord::acquire_turn(&ks, "chat:1", "r2", "1", turn_options())
        .unwrap()
        .cancel_on(flag.clone());
    let (got, t) = run(plan, |req| match op(req).as_str() {
        "turn take" => int(3),
        "turn poll" => {
            flag.store(true, Ordering::Release);
            poll("granted", 1_000, "r2|1", 3, None)
        }
        "turn release" => int(1),
        other => panic!("unexpected {other}"),
    });
    assert_eq!(got.unwrap_err(), Error::Closed);
    assert!(t.contains("args=[release 3 r2|1 "), "{t}");
}

#[test]
fn turn_extend_and_release() {
    snapshot_both("turn_extend_release", |_, ks| {
        let options = turn_options();
        let held = guard("r2|7", 5);
        let mut out = String::new();
        let (got, t) = run(coord::turn_extend(ks, &held, &options).unwrap(), |_| int(1));
        got.unwrap();
        out += &t;
        let (got, t) = run(coord::turn_extend(ks, &held, &options).unwrap(), |_| int(0));
        assert_eq!(
            got.unwrap_err(),
            Error::NotHolder {
                what: "turn 5 of chat \"chat:1\"".into()
            }
        );
        out += &t;
        let (got, t) = run(coord::turn_release(ks, &held, &options).unwrap(), |_| {
            int(1)
        });
        got.unwrap();
        out += &t;
        // 2: the ticket was withdrawn, but it no longer held the turn (its owner key ran out).
        let (got, t) = run(coord::turn_release(ks, &held, &options).unwrap(), |_| {
            int(2)
        });
        assert!(matches!(got, Err(Error::NotHolder { .. })), "{got:?}");
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
    snapshot_both("lease", |_, ks| {
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

// --- schedules ----------------------------------------------------------------------------------

#[test]
fn schedule_put_stale_delete_get() {
    snapshot_both("schedule", |_, ks| {
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
            Ok(arr(vec![bulk("5"), bulk("0 9 * * *"), bulk("0")]))
        });
        assert_eq!(
            got.unwrap(),
            Some(botmesh_redis_core::Schedule {
                token: 5,
                data: Bytes::from_static(b"0 9 * * *")
            })
        );
        out += &t;
        out += "# a deleted marker and a missing record both read as None\n";
        let (got, t) = run(coord::schedule_get(ks, "daily:{x}").unwrap(), |_| {
            Ok(arr(vec![bulk("6"), Value::Nil, bulk("1")]))
        });
        assert_eq!(got.unwrap(), None);
        out += &t;
        let (got, t) = run(coord::schedule_get(ks, "nope").unwrap(), |_| {
            Ok(arr(vec![Value::Nil, Value::Nil, Value::Nil]))
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
    snapshot_both("schedule_list", |layout, ks| {
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
        let (got, t) = run(coord::schedule_list(ks, None, 100).unwrap(), |req| {
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
                "HMGET" if keys[0] == live_key => {
                    Ok(arr(vec![bulk("3"), bulk("every day"), bulk("0")]))
                }
                "HMGET" => Ok(arr(vec![bulk("4"), Value::Nil, bulk("1")])),
                other => panic!("unexpected {other}"),
            }
        });
        assert_eq!(
            got.unwrap(),
            botmesh_redis_core::SchedulePage {
                items: vec![(
                    live.to_owned(),
                    botmesh_redis_core::Schedule {
                        token: 3,
                        data: Bytes::from_static(b"every day")
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
    snapshot_both("durable", |_, ks| {
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
        let (got, t) = run(coord::journal_forget(ks, "in", "m:1").unwrap(), |_| int(1));
        assert!(got.unwrap());
        out += &t;
        let plan =
            coord::outbox_enqueue(ks, "out", "send:1", Bytes::from_static(b"hi"), window).unwrap();
        let (got, t) = run(plan, |_| int(1));
        assert!(got.unwrap());
        out += &t;
        let plan = coord::outbox_claim(ks, "out", "i1", 10, Duration::from_millis(500)).unwrap();
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
        Step::Send(mut batch) => batch.remove(0),
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
                assert_eq!(lock.route(), &Route::AnyMaster);
                assert_eq!(turn.route(), &Route::AnyMaster);
            }
        }
    }
}
