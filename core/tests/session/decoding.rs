//! Replies are decoded incrementally whatever the cuts; bytes that are not RESP, a reply
//! with no request and a reply past the buffer cap close the connection (a write on it is
//! then outcome unknown, a read is asked again).

use botmesh_redis_core::driver::session::Config;
use botmesh_redis_core::driver::Reply;
use botmesh_redis_core::testing::sim::{Chunking, Harness, Rule, SimCluster};
use botmesh_redis_core::testing::{get, incr, mget, set, start};
use botmesh_redis_core::Error;
use botmesh_redis_core::Value;

/// A three-master cluster whose replies the session decodes from bytes, or, `at_reader`,
/// whose replies are decoded where they are read (as the client's readers do) and handed
/// over decoded: every test here runs both ways.
fn cluster(at_reader: bool) -> Harness {
    let mut h = Harness::cluster(3, 0);
    if at_reader {
        h.decode_at_readers();
    }
    h
}

fn harness(sim: SimCluster, config: Config, at_reader: bool) -> Harness {
    let mut h = Harness::new(start(), sim, config);
    if at_reader {
        h.decode_at_readers();
    }
    h
}

fn workload(h: &mut Harness) -> Vec<Reply> {
    let a = h.sim.master(0);
    let tag = h.sim.keys_on(&a, 1).remove(0);
    let (k1, k2) = (format!("{{{tag}}}:1"), format!("{{{tag}}}:2"));
    let big = "x".repeat(5_000);
    h.run_batch(vec![set(&k1, &big), set(&k2, "\r\n$3\r\n*-:+")]);
    let mut replies = h.run_batch(vec![get(&k1), get(&k2), mget(&[&k1, &k2]), get("missing")]);
    replies.push(h.run_one(incr(&k2)));
    replies
}

#[test]
fn replies_cut_anywhere_decode_the_same() {
    replies_cut_anywhere_decode_the_same_in(false);
    replies_cut_anywhere_decode_the_same_in(true);
}

fn replies_cut_anywhere_decode_the_same_in(at_reader: bool) {
    let mut whole = cluster(at_reader);
    let expected = workload(&mut whole);
    let big = Value::from("x".repeat(5_000).as_str());
    let tricky = Value::from("\r\n$3\r\n*-:+");
    assert_eq!(
        expected[..3],
        [
            Ok(big.clone()),
            Ok(tricky.clone()),
            Ok(Value::Array(vec![big, tricky]))
        ]
    );
    assert_eq!(expected[3], Ok(Value::Nil));
    assert!(expected[4].as_ref().unwrap_err().server().is_some());

    let mut bytewise = cluster(at_reader);
    bytewise.set_chunking(Chunking::Bytewise);
    assert_eq!(workload(&mut bytewise), expected);
    for seed in 1..20 {
        let mut random = cluster(at_reader);
        random.set_chunking(Chunking::Random(seed));
        assert_eq!(workload(&mut random), expected, "seed {seed}");
    }
}

#[test]
fn malformed_bytes_close_the_connection() {
    malformed_bytes_close_the_connection_in(false);
    malformed_bytes_close_the_connection_in(true);
}

fn malformed_bytes_close_the_connection_in(at_reader: bool) {
    let mut h = cluster(at_reader);
    let a = h.sim.master(0);
    let keys = h.sim.keys_on(&a, 2);
    h.run_one(set(&keys[1], "v")).unwrap();
    h.sim
        .add_rule(Rule::raw(&b"?what\r\n"[..]).commands(&["INCR"]).times(1));
    let replies = h.run_batch(vec![incr(&keys[0]), get(&keys[1])]);
    match &replies[0] {
        Err(Error::ReplyLost { addr, reason }) => {
            assert_eq!(addr, &a);
            assert!(reason.starts_with("protocol error: "), "{reason}");
        }
        other => panic!("{other:?}"),
    }
    assert!(replies[0].as_ref().unwrap_err().outcome_unknown());
    assert_eq!(replies[1], Ok(Value::from("v")));
    let wires = h.wires_to(&a);
    assert_eq!(wires.len(), 2);
    assert!(wires[0].closed);
    assert_eq!(h.sim.count(&format!("INCR {}", keys[0])), 1);
}

#[test]
fn a_reply_with_no_request_closes_the_connection() {
    a_reply_with_no_request_closes_the_connection_in(false);
    a_reply_with_no_request_closes_the_connection_in(true);
}

fn a_reply_with_no_request_closes_the_connection_in(at_reader: bool) {
    let mut h = cluster(at_reader);
    let a = h.sim.master(0);
    let key = h.sim.keys_on(&a, 1).remove(0);
    h.run_one(set(&key, "v")).unwrap();
    // Two replies to one command: the second has no request to belong to.
    h.sim.add_rule(
        Rule::raw(&b"$1\r\nv\r\n+OK\r\n"[..])
            .commands(&["GET"])
            .times(1),
    );
    assert_eq!(h.run_one(get(&key)), Ok(Value::from("v")));
    assert!(h.wires_to(&a)[0].closed);
    assert_eq!(h.run_one(get(&key)), Ok(Value::from("v")));
    assert_eq!(h.connects_to(&a), 2);
}

#[test]
fn a_reply_past_the_read_buffer_cap_closes_the_connection() {
    a_reply_past_the_read_buffer_cap_closes_the_connection_in(false);
    a_reply_past_the_read_buffer_cap_closes_the_connection_in(true);
}

fn a_reply_past_the_read_buffer_cap_closes_the_connection_in(at_reader: bool) {
    let sim = SimCluster::cluster(3, 0);
    let mut config = Config::cluster(sim.masters());
    config.max_read_buffer = 1024;
    let mut h = harness(sim, config, at_reader);
    let a = h.sim.master(0);
    let key = h.sim.keys_on(&a, 1).remove(0);
    h.run_one(set(&key, &"y".repeat(4096))).unwrap();
    for chunking in [Chunking::Whole, Chunking::Bytewise] {
        h.set_chunking(chunking);
        let before = h.sim.count(&format!("GET {key}"));
        let reply = h.run_one(get(&key));
        // The read is retried and hits the cap each time, until the attempts run out.
        match reply {
            Err(Error::ReplyLost { reason, .. }) => {
                assert!(reason.contains("read buffer cap"), "{reason}")
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(h.sim.count(&format!("GET {key}")) - before, 11);
    }
    // Smaller replies still pass.
    assert_eq!(
        h.run_one(set(&key, "small")),
        Ok(Value::Status("OK".into()))
    );
}

#[test]
fn a_reply_nested_without_end_closes_the_connection_instead_of_the_stack() {
    a_reply_nested_without_end_closes_the_connection_instead_of_the_stack_in(false);
    a_reply_nested_without_end_closes_the_connection_instead_of_the_stack_in(true);
}

fn a_reply_nested_without_end_closes_the_connection_instead_of_the_stack_in(at_reader: bool) {
    let mut h = cluster(at_reader);
    let a = h.sim.master(0);
    let key = h.sim.keys_on(&a, 1).remove(0);
    h.run_one(set(&key, "v")).unwrap();
    // `*1\r\n` a hundred thousand times: a recursive decoder overflows its stack on it.
    let hostile = b"*1\r\n".repeat(100_000);
    h.sim
        .add_rule(Rule::raw(hostile).commands(&["INCR"]).times(1));
    // A write, so that the lost reply is reported rather than asked again.
    match h.run_one(incr(&format!("{key}-n"))) {
        Err(Error::ReplyLost { reason, .. }) => assert_eq!(
            reason,
            "protocol error: a reply nested deeper than 64 arrays"
        ),
        other => panic!("{other:?}"),
    }
    assert!(h.wires_to(&a)[0].closed);
    assert_eq!(h.run_one(get(&key)), Ok(Value::from("v")));
}

#[test]
fn a_large_reply_read_in_small_pieces_is_decoded_once() {
    a_large_reply_read_in_small_pieces_is_decoded_once_in(false);
    a_large_reply_read_in_small_pieces_is_decoded_once_in(true);
}

fn a_large_reply_read_in_small_pieces_is_decoded_once_in(at_reader: bool) {
    // 20,000 elements read a byte at a time: decoding from the start after every read walks
    // the reply 80,000 times, about 3 GB of parsing; the scan resumes, the decoder runs once.
    let mut h = cluster(at_reader);
    let a = h.sim.master(0);
    let key = h.sim.keys_on(&a, 1).remove(0);
    let mut reply = b"*20000\r\n".to_vec();
    for _ in 0..20_000 {
        reply.extend_from_slice(b":1\r\n");
    }
    h.sim.add_rule(Rule::raw(reply).commands(&["GET"]).times(1));
    h.set_chunking(Chunking::Bytewise);
    match h.run_one(get(&key)) {
        Ok(Value::Array(items)) => assert_eq!(items.len(), 20_000),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_reply_of_more_elements_than_allowed_closes_the_connection_before_it_is_decoded() {
    a_reply_of_more_elements_than_allowed_closes_the_connection_before_it_is_decoded_in(false);
    a_reply_of_more_elements_than_allowed_closes_the_connection_before_it_is_decoded_in(true);
}

fn a_reply_of_more_elements_than_allowed_closes_the_connection_before_it_is_decoded_in(
    at_reader: bool,
) {
    let sim = SimCluster::cluster(3, 0);
    let mut config = Config::cluster(sim.masters());
    config.max_reply_elements = 1_000;
    let mut h = harness(sim, config, at_reader);
    let a = h.sim.master(0);
    let key = h.sim.keys_on(&a, 1).remove(0);
    h.run_one(set(&key, "v")).unwrap();
    // A header announcing 100 million elements, 4 wire bytes each once they come, and a few
    // of them: refused on the header, nothing buffered for the rest, nothing decoded.
    let mut hostile = b"*100000000\r\n".to_vec();
    hostile.extend(b":0\r\n".repeat(64));
    h.sim
        .add_rule(Rule::raw(hostile).commands(&["INCR"]).times(1));
    match h.run_one(incr(&format!("{key}-n"))) {
        Err(Error::ReplyLost { reason, .. }) => {
            assert_eq!(reason, "protocol error: a reply of more than 1000 elements")
        }
        other => panic!("{other:?}"),
    }
    assert!(h.wires_to(&a)[0].closed);
    // Within the bound, at every depth: 1 + 999 elements.
    let mut fits = b"*999\r\n".to_vec();
    fits.extend(b":0\r\n".repeat(999));
    h.sim.add_rule(Rule::raw(fits).commands(&["GET"]).times(1));
    match h.run_one(get(&key)) {
        Ok(Value::Array(items)) => assert_eq!(items.len(), 999),
        other => panic!("{other:?}"),
    }
    assert_eq!(h.run_one(get(&key)), Ok(Value::from("v")));
}
