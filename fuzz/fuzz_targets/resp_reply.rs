//! Fuzzes RESP decoding into the core's reply type, and a session reading arbitrary bytes.
//!
//! The input is decoded frame by frame as the session does (`decode_bytes_mut`), each frame is
//! turned into a [`Value`] and read with every typed accessor; none may panic. Then the same
//! bytes, cut at an arbitrary point, are the replies a single-node session receives to a
//! handshake and three pipelined requests: the session must not panic, must not busy-loop, and
//! must complete every plan once it is closed.
#![no_main]

use std::time::{Duration, Instant};

use botmesh_redis_core::session::{Config, Output, Session, Token};
use botmesh_redis_core::testing::{get, incr, Batch};
use botmesh_redis_core::topology::{parse_cluster_shards, parse_cluster_slots, NodeAddr};
use botmesh_redis_core::value::from_frame;
use botmesh_redis_core::{Reply, Value};
use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;

fn read_every_way(value: &Value) {
    let _ = value.as_i64();
    let _ = value.clone().into_opt_bytes();
    let _ = value.clone().into_string();
    let _ = value.expect_ok();
    let _ = parse_cluster_slots(value, "h");
    let _ = parse_cluster_shards(value, "h");
    if let Ok(items) = value.clone().into_array() {
        items.iter().for_each(read_every_way);
    }
}

fn drain(session: &mut Session, done: &mut usize) -> Option<Instant> {
    for _ in 0..10_000 {
        match session.poll() {
            Output::Complete { result, .. } => {
                *done += 1;
                let _ = result.into_result::<Vec<Reply>>();
            }
            Output::Wait { until, .. } => return until,
            _ => {}
        }
    }
    panic!("no Wait after 10000 outputs");
}

fuzz_target!(|data: &[u8]| {
    let mut buf = BytesMut::from(data);
    while let Ok(Some((frame, _, _))) = redis_protocol::resp2::decode::decode_bytes_mut(&mut buf) {
        if let Ok(value) = from_frame(frame) {
            read_every_way(&value);
        }
    }

    let now = Instant::now();
    let mut config = Config::single(NodeAddr::new("127.0.0.1", 7000));
    config.max_read_buffer = 4096;
    let mut session = Session::new(config, now);
    let mut done = 0;
    session.submit(now, Token(1), Batch::new(vec![get("a"), incr("b"), get("c")]));
    let mut conn = None;
    for _ in 0..100 {
        match session.poll() {
            Output::Connect { conn: c, .. } => conn = Some(c),
            Output::Wait { .. } => break,
            _ => {}
        }
    }
    let Some(conn) = conn else { return };
    session.handle_connected(now, conn);
    drain(&mut session, &mut done);
    let cut = data.first().map_or(0, |&b| usize::from(b)) % (data.len() + 1);
    session.handle_read(now, conn, &data[..cut]);
    drain(&mut session, &mut done);
    session.handle_read(now, conn, &data[cut..]);
    drain(&mut session, &mut done);
    let later = now + Duration::from_secs(30);
    session.handle_timeout(later);
    let next = drain(&mut session, &mut done);
    assert!(next.is_none_or(|n| n > later), "busy loop");
    session.close(later);
    drain(&mut session, &mut done);
    assert_eq!(done, 1, "the plan completes exactly once");
});
