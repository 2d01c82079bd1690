//! `TRYAGAIN`: a multi-key call whose keys are split between the two sides of a migrating
//! slot is retried with short, jittered backoff until the migration finishes.

use std::time::Duration;

use botmesh_redis_core::driver::Reply;
use botmesh_redis_core::keys::slot;
use botmesh_redis_core::testing::sim::Harness;
use botmesh_redis_core::testing::{mget, set};
use botmesh_redis_core::Value;

#[test]
fn tryagain_is_retried_until_the_migration_finishes() {
    let mut h = Harness::cluster(3, 0);
    let (a, b) = (h.sim.master(0), h.sim.master(1));
    let tag = h.sim.keys_on(&a, 1).remove(0);
    let (k1, k2) = (format!("{{{tag}}}:1"), format!("{{{tag}}}:2"));
    let s = slot(k1.as_bytes());
    h.run_batch(vec![set(&k1, "one"), set(&k2, "two")]);
    h.sim.begin_migration(s, &b);
    h.sim.migrate_key(k1.as_bytes());
    h.schedule(Duration::from_millis(60), move |sim, _| {
        sim.finish_migration(s)
    });

    let token = h.submit_batch(vec![mget(&[&k1, &k2])]);
    let replies = h.wait_for::<Vec<Reply>>(&token).unwrap();
    assert_eq!(
        replies,
        vec![Ok(Value::Array(vec![
            Value::from("one"),
            Value::from("two")
        ]))]
    );
    let mget_cmd = format!("MGET {k1} {k2}");
    let on_a = h
        .sim
        .data_commands_on(&a)
        .iter()
        .filter(|c| **c == mget_cmd)
        .count();
    // Backoff 10, 20, 40 ms (jittered ±25%): 3 or 4 sends fit before 60 ms, and one more
    // meets the MOVED.
    assert!((3..=5).contains(&on_a), "{on_a} sends to a\n{}", h.trace());
    assert_eq!(h.sim.data_commands_on(&b), vec![mget_cmd]);
    assert!(h.elapsed() >= Duration::from_millis(60));
    assert!(
        h.elapsed() < Duration::from_millis(120),
        "{:?}",
        h.elapsed()
    );
    assert_eq!(h.session.slot_owner(s), Some(&b));
}

#[test]
fn the_importing_side_also_says_tryagain_for_split_keys() {
    let mut h = Harness::cluster(3, 0);
    let (a, b) = (h.sim.master(0), h.sim.master(1));
    let tag = h.sim.keys_on(&a, 1).remove(0);
    let (k1, k2) = (format!("{{{tag}}}:1"), format!("{{{tag}}}:2"));
    let s = slot(k1.as_bytes());
    h.run_one(set(&k1, "one")).unwrap();
    h.sim.begin_migration(s, &b);
    h.sim.migrate_key(k1.as_bytes());
    h.schedule(Duration::from_millis(30), move |sim, _| {
        sim.finish_migration(s)
    });
    // k2 exists nowhere: a has neither key and answers ASK; b has only k1 and, asked for
    // both, says TRYAGAIN. The retry starts from the map again (a), not from the ASK.
    let replies = h.run_batch(vec![mget(&[&k1, &k2])]);
    assert_eq!(
        replies,
        vec![Ok(Value::Array(vec![Value::from("one"), Value::Nil]))]
    );
    let on_b = h.sim.data_commands_on(&b);
    let mget_cmd = format!("MGET {k1} {k2}");
    assert_eq!(on_b[0..2], ["ASKING".to_owned(), mget_cmd.clone()]);
    assert_eq!(on_b.last(), Some(&mget_cmd));
    assert!(
        h.sim
            .data_commands_on(&a)
            .iter()
            .filter(|c| **c == mget_cmd)
            .count()
            >= 2
    );
}
