//! `ASK` during a live slot migration: `ASKING` and the command go out back to back on the
//! importing node's connection, however busy it is; the slot map does not change; once the
//! migration ends, `MOVED` takes over.

use std::time::Duration;

use crate::support::cluster;
use botmesh_redis_core::driver::Reply;
use botmesh_redis_core::keys::slot;
use botmesh_redis_core::testing::sim::Rule;
use botmesh_redis_core::testing::{get, set, Sequence};
use botmesh_redis_core::Value;

#[test]
fn a_moved_key_is_fetched_with_asking_and_the_map_stays() {
    let mut h = cluster();
    let (a, b) = (h.sim.master(0), h.sim.master(1));
    let tag = h.sim.keys_on(&a, 1).remove(0);
    let (k1, k2) = (format!("{{{tag}}}:1"), format!("{{{tag}}}:2"));
    let s = slot(k1.as_bytes());
    h.run_batch(vec![set(&k1, "one"), set(&k2, "two")]);

    h.sim.begin_migration(s, &b);
    h.sim.migrate_key(k1.as_bytes());
    assert_eq!(h.run_one(get(&k1)), Ok(Value::from("one")));
    assert_eq!(h.run_one(get(&k2)), Ok(Value::from("two")));
    assert_eq!(h.session.slot_owner(s), Some(&a), "ASK changes no map");

    assert_eq!(
        h.data_written_to(&b),
        vec!["ASKING".to_owned(), format!("GET {k1}")],
        "b saw nothing but the asked command"
    );
    let on_a = h.written_to(&a);
    assert_eq!(
        on_a[on_a.len() - 2..],
        [format!("GET {k1}"), format!("GET {k2}")]
    );

    // The migration ends: the old owner now says MOVED, and the map follows.
    h.sim.finish_migration(s);
    assert_eq!(h.run_one(get(&k2)), Ok(Value::from("two")));
    assert_eq!(h.session.slot_owner(s), Some(&b));
}

#[test]
fn asking_and_its_command_are_never_separated_on_a_busy_connection() {
    let mut h = cluster();
    let (a, b) = (h.sim.master(0), h.sim.master(1));
    let tag = h.sim.keys_on(&a, 1).remove(0);
    let asked = format!("{{{tag}}}:asked");
    let s = slot(asked.as_bytes());
    let on_b = h.sim.keys_on(&b, 8);
    let plain_a = h.sim.keys_on(&a, 2).remove(1);
    let mut setup = vec![set(&asked, "x"), set(&plain_a, "a")];
    setup.extend(on_b.iter().map(|k| set(k, "b")));
    h.run_batch(setup);
    h.sim.begin_migration(s, &b);
    h.sim.migrate_key(asked.as_bytes());
    // a answers a little late, so ASK redirects land while b's own traffic is being written.
    // Two-step plans read from a, then from b: when a's replies arrive together, their second
    // step and a redirect leave in the same write to b.
    h.sim.set_latency(&a, Duration::from_micros(700));

    let mut singles = Vec::new();
    let mut sequences = Vec::new();
    for round in 0..40 {
        singles.push((true, h.submit_batch(vec![get(&asked)])));
        singles.push((false, h.submit_batch(vec![get(&on_b[round % on_b.len()])])));
        sequences.push(h.submit(Sequence::new(vec![
            vec![get(&plain_a)],
            vec![get(&on_b[round % on_b.len()])],
        ])));
        if round % 3 == 0 {
            singles.push((true, h.submit_batch(vec![get(&asked), get(&on_b[0])])));
        }
        h.run_for(Duration::from_micros(300));
    }
    for (asks, token) in singles {
        let replies = h.wait_for::<Vec<Reply>>(&token).unwrap();
        let want = if asks { "x" } else { "b" };
        assert_eq!(replies[0], Ok(Value::from(want)));
    }
    for token in sequences {
        let replies = h.wait_for::<Vec<Vec<Reply>>>(&token).unwrap();
        assert_eq!(
            replies,
            vec![vec![Ok(Value::from("a"))], vec![Ok(Value::from("b"))]]
        );
    }

    let commands = h.data_written_to(&b);
    let askings = commands.iter().filter(|c| *c == "ASKING").count();
    assert_eq!(askings, 40 + 14, "one ASKING per redirected GET");
    for (i, c) in commands.iter().enumerate() {
        if c == "ASKING" {
            assert_eq!(
                commands[i + 1],
                format!("GET {asked}"),
                "at {i}: {commands:?}"
            );
        }
    }
    // The node saw the same pairs, in the same order.
    assert_eq!(h.sim.data_commands_on(&b), commands);
    // Several writes to b carried ASKING pairs among b's own traffic: the test exercised
    // interleaving, not one redirect per write.
    let mixed_writes = h.wires_to(&b)[0]
        .writes
        .iter()
        .filter(|w| {
            let text = w.escape_ascii().to_string();
            text.contains("ASKING") && text.matches("GET").count() > 1
        })
        .count();
    assert!(mixed_writes > 0);
}

#[test]
fn the_importing_node_without_asking_answers_moved() {
    let mut h = cluster();
    let (a, b) = (h.sim.master(0), h.sim.master(1));
    let tag = h.sim.keys_on(&a, 1).remove(0);
    let key = format!("{{{tag}}}:k");
    let s = slot(key.as_bytes());
    h.run_one(set(&key, "v")).unwrap();
    h.sim.begin_migration(s, &b);
    h.sim.migrate_key(key.as_bytes());
    // A stale client map points at b already (as after a MOVED for a neighbouring key):
    // b, importing, refuses it without ASKING and sends it back to a, which answers ASK.
    h.sim.add_rule(
        Rule::error(format!("MOVED {s} {b}"))
            .on(&a)
            .commands(&["GET"])
            .times(1),
    );
    assert_eq!(h.run_one(get(&key)), Ok(Value::from("v")));
    assert_eq!(
        h.data_written_to(&b),
        vec![
            format!("GET {key}"),
            "ASKING".to_owned(),
            format!("GET {key}")
        ]
    );
    assert_eq!(h.sim.count(&format!("GET {key}")), 4);
}
