//! Every TTL, lease, window and timeout argument of the store and coordination plans refuses
//! zero and sub-millisecond durations with a typed error naming the argument, before a request
//! is built: `lock(.., Duration::ZERO)` must not grant a fence for a 1 ms lock.

use std::time::Duration;

use botmesh_redis_core::driver::coord;
use botmesh_redis_core::driver::store::{conv, records, user};
use botmesh_redis_core::{Bytes, ConfigError, Error, Layout, TurnOptions};

use crate::coord::turn_options;
use crate::support::*;

/// The durations no TTL accepts: zero, and what rounds to zero whole milliseconds.
const BELOW_ONE_MS: [Duration; 3] = [
    Duration::ZERO,
    Duration::from_nanos(1),
    Duration::from_micros(999),
];

fn refused<T: std::fmt::Debug>(got: Result<T, Error>, argument: &'static str, given: Duration) {
    match got {
        Err(Error::Config(ConfigError::DurationBelowOneMs {
            argument: a,
            given: g,
        })) => assert_eq!((a, g), (argument, given)),
        other => panic!("{argument} = {given:?}: wanted DurationBelowOneMs, got {other:?}"),
    }
}

#[test]
fn every_primitive_refuses_a_ttl_below_one_millisecond() {
    for (layout, ks) in both() {
        let ks = &ks;
        for d in BELOW_ONE_MS {
            let v = || Bytes::from_static(b"v");
            let second = Duration::from_secs(1);
            // Locks and leaderships, plain and replicated.
            refused(coord::lock_acquire(ks, "k", "o", d), "ttl", d);
            refused(coord::lock_extend(ks, "k", "o", d), "ttl", d);
            refused(coord::leader_campaign(ks, "n", "r", d), "ttl", d);
            refused(coord::leader_renew(ks, "n", "r", d), "ttl", d);
            refused(
                coord::lock_acquire_replicated(ks, "k", "o", d, 1, second),
                "ttl",
                d,
            );
            refused(
                coord::lock_acquire_replicated(ks, "k", "o", second, 1, d),
                "wait_replicas timeout",
                d,
            );
            refused(
                coord::leader_campaign_replicated(ks, "n", "r", d, 1, second),
                "ttl",
                d,
            );
            // Heartbeats and leases.
            refused(coord::heartbeat(ks, "r", d, v()), "ttl", d);
            refused(coord::lease_acquire(ks, "l", "h", d), "ttl", d);
            refused(coord::lease_renew(ks, "l", "h", 1, d), "ttl", d);
            refused(
                coord::lease_acquire_replicated(ks, "l", "h", second, 1, d),
                "wait_replicas timeout",
                d,
            );
            // Durability windows and visibility.
            refused(coord::journal_begin(ks, "t", "id", "i", d), "window", d);
            refused(coord::outbox_enqueue(ks, "t", "k", v(), d), "window", d);
            refused(
                coord::outbox_claim(ks, "t", "i", Default::default(), d),
                "visibility",
                d,
            );
            // Turns: every timer but the wait timeout (zero there is "one poll") and the idle
            // lifetime (refused as shorter than twice the timers, `TurnIdleLifetimeTooShort`).
            let options = |f: fn(&mut TurnOptions, Duration)| {
                let mut o = turn_options();
                f(&mut o, d);
                o
            };
            for (name, set) in [
                (
                    "TurnOptions::ttl",
                    (|o, d| o.ttl = d) as fn(&mut TurnOptions, Duration),
                ),
                ("TurnOptions::claim_timeout", |o, d| o.claim_timeout = d),
                ("TurnOptions::poll_interval", |o, d| o.poll_interval = d),
            ] {
                refused(
                    coord::acquire_turn(ks, "c", "r", "1", options(set)).map(|_| ()),
                    name,
                    d,
                );
                refused(options(set).check(), name, d);
            }
            // Store TTLs.
            refused(records::set_checkpoint(ks, "c", v(), Some(d)), "ttl", d);
            refused(
                user::set_user_data(ks, "u", "ns", "k", v(), Some(d)),
                "ttl",
                d,
            );
            refused(conv::set_conversation(ks, "c", v(), Some(d)), "ttl", d);
        }
        // One millisecond is the least accepted, in every plan; a zero wait timeout is one poll.
        let ms = Duration::from_millis(1);
        coord::lock_acquire(ks, "k", "o", ms).unwrap();
        records::set_checkpoint(ks, "c", Bytes::new(), Some(ms)).unwrap();
        let one_poll = TurnOptions {
            wait_timeout: Duration::ZERO,
            ..turn_options()
        };
        assert_eq!(one_poll.check(), Ok(()), "{layout:?}");
    }
}

#[test]
fn a_refused_ttl_names_its_argument() {
    let ks = keyspace(Layout::Cluster);
    let error = coord::lock_acquire(&ks, "k", "o", Duration::ZERO).unwrap_err();
    assert_eq!(
        error.to_string(),
        "configuration error: `ttl` is 0ns: it must be at least 1 ms"
    );
}
