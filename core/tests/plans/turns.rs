//! Per-chat turns, in both layouts: a ticket taken, waited on, granted past a dead predecessor,
//! timed out on the server clock, cancelled, extended and released.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use botmesh_redis_core::driver::coord;
use botmesh_redis_core::{ConfigError, Error, Layout, ServerError};
use botmesh_redis_core::{SkipReason, TurnEvent, TurnGrant, TurnGuard, TurnOptions};

use crate::coord::*;
use crate::support::*;

// --- turns --------------------------------------------------------------------------------------

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
    snapshot_both!("turn_acquire", |layout, ks| {
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
        ttl: Duration::from_millis(1),
        poll_interval: Duration::from_millis(1),
        claim_timeout: Duration::from_millis(1),
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
    snapshot_both!("turn_holder_alive", |layout, ks| {
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
    snapshot_both!("turn_skips_and_retake", |_, ks| {
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
    snapshot_both!("turn_timeout", |_, ks| {
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
        let error = got.unwrap_err();
        assert_eq!(
            error,
            Error::TurnWaitTimedOut {
                chat: "chat:1".into(),
                ticket: 3,
                waited_ms: 5_001,
                withdrawn: true,
            }
        );
        assert_eq!(
            error.to_string(),
            "waited 5001 ms for the turn on chat \"chat:1\" without being served; ticket 3 \
             was withdrawn; nothing is held"
        );
        t
    });
}

/// A timed-out wait whose withdrawal got no reply does not claim the ticket was withdrawn.
#[test]
fn turn_wait_timeout_whose_withdrawal_is_lost_says_so() {
    for (_, ks) in both() {
        let plan = coord::acquire_turn(&ks, "chat:1", "r2", "1", turn_options()).unwrap();
        let script = vec![
            ("turn take", int(3)),
            ("turn poll", poll("wait", 10_000, "r1|1", 2, None)),
            ("turn poll", poll("wait", 15_001, "r1|1", 2, None)),
            ("turn release", reply_lost()),
        ];
        let (got, _) = run(plan, replies(script));
        let error = got.unwrap_err();
        assert_eq!(
            error,
            Error::TurnWaitTimedOut {
                chat: "chat:1".into(),
                ticket: 3,
                waited_ms: 5_001,
                withdrawn: false,
            }
        );
        assert!(
            error.to_string().contains("could not be withdrawn"),
            "{error}"
        );
        assert!(!error.outcome_unknown());
    }
}

#[test]
fn turn_rides_out_lost_replies() {
    snapshot_both!("turn_lost_replies", |_, ks| {
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
    snapshot_both!("turn_extend_release", |_, ks| {
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
        assert!(got.unwrap(), "held until released");
        out += &t;
        // 2: the ticket was withdrawn, but it no longer held the turn (its owner key ran out).
        let (got, t) = run(coord::turn_release(ks, &held, &options).unwrap(), |_| {
            int(2)
        });
        assert!(!got.unwrap(), "a lost turn's release finds it gone");
        out += &t;
        out
    });
}
