//! The bodies of the fuzz targets in `fuzz/` (the `fuzzing` feature).
//!
//! Each target in `fuzz/fuzz_targets/` is one line that hands libFuzzer's bytes to a function
//! here, and `core/tests/fuzz_corpora.rs` hands every file of the committed corpora
//! (`fuzz/corpus/<target>/`) to the same function on `cargo test`. So the corpora are replayed
//! through exactly the code that was fuzzed, and the two cannot drift.
//!
//! A function takes the raw input and decodes it as libFuzzer's typed targets do
//! (`arbitrary_take_rest`, inputs shorter than the type's minimum size skipped), so a corpus
//! file keeps its meaning. The checks are assertions: a violation panics, which is what the
//! fuzzer reports and what fails the replay test.

use std::time::{Duration, Instant};

use arbitrary::{Arbitrary, Unstructured};
use bytes::BytesMut;

use crate::addr::{DialTarget, NodeAddr};
use crate::error::ServerError;
use crate::keys::{bucket, enc as encode, hash_tag, slot, BUCKET_COUNT, SLOT_COUNT};
use crate::options::parse_url;
use crate::retry::{classify, Decision};
use crate::session::{Config, Output, Session};
use crate::testing::chaos::{config, inject, BareSession, Fault, Input, Model};
use crate::testing::sim::{Harness, SimCluster};
use crate::testing::{get, incr, start, Batch};
use crate::testing::{Ticket, Tickets, Token};
use crate::topology::{parse_cluster_slots, parse_redirect, Redirect, Topology};
use crate::value::{from_frame, Value};

/// A fuzz target's body: it takes libFuzzer's raw input and panics on a violation.
pub type Body = fn(&[u8]);

/// The fuzz targets, by name (the names of `fuzz/fuzz_targets/*.rs` and `fuzz/corpus/*/`), with
/// their bodies.
pub const TARGETS: &[(&str, Body)] = &[
    ("enc", enc),
    ("redirect", redirect),
    ("resp_reply", resp_reply),
    ("session", session),
    ("session_model", session_model),
    ("slot_map", slot_map),
];

/// Decodes a typed input the way `libfuzzer_sys::fuzz_target!` does; `None` is an input the
/// fuzzer would skip.
fn decode<'a, T: Arbitrary<'a>>(data: &'a [u8]) -> Option<T> {
    if data.len() < T::size_hint(0).0 {
        return None;
    }
    T::arbitrary_take_rest(Unstructured::new(data)).ok()
}

// --- enc --------------------------------------------------------------------------------------

fn hex(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

/// Checks the alphabet of an encoded segment and decodes it; panics on any violation.
fn check_and_decode(encoded: &str) -> Vec<u8> {
    let bytes = encoded.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        if b == b'%' {
            let hi = bytes.get(i + 1).and_then(|&h| hex(h));
            let lo = bytes.get(i + 2).and_then(|&l| hex(l));
            match (hi, lo) {
                (Some(hi), Some(lo)) => out.push(hi << 4 | lo),
                _ => panic!("% not followed by two uppercase hex digits in {encoded:?}"),
            }
            i += 3;
        } else {
            assert!(
                b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~'),
                "forbidden byte {b:#04x} in {encoded:?}"
            );
            out.push(b);
            i += 1;
        }
    }
    out
}

fn check_hashing(raw: &str, encoded: &str) {
    assert!(bucket(raw) < BUCKET_COUNT);
    for key in [raw.as_bytes(), encoded.as_bytes()] {
        assert!(slot(key) < SLOT_COUNT);
        let _ = hash_tag(key);
    }
    let tagged = format!("bot:{{m:{encoded}}}:z");
    let tag = format!("m:{encoded}");
    assert_eq!(hash_tag(tagged.as_bytes()), Some(tag.as_bytes()));
    assert_eq!(slot(tagged.as_bytes()), slot(tag.as_bytes()));
}

/// `enc`: the input, split at its first 0xFF byte (never part of valid UTF-8) into two strings
/// (lossy UTF-8). For both, `enc` emits only `A-Za-z0-9-._~%` with every `%` followed by two
/// uppercase hex digits and round-trips through percent-decoding, `enc(a) == enc(b)` exactly
/// when `a == b`, `slot`/`hash_tag`/`bucket` do not panic, and a tagged key hashes to the slot
/// of its tag.
pub fn enc(data: &[u8]) {
    let (left, right) = match data.iter().position(|&b| b == 0xFF) {
        Some(at) => (&data[..at], &data[at + 1..]),
        None => (data, &[][..]),
    };
    let a = String::from_utf8_lossy(left);
    let b = String::from_utf8_lossy(right);
    let (ea, eb) = (encode(&a), encode(&b));
    assert_eq!(check_and_decode(&ea), a.as_bytes());
    assert_eq!(check_and_decode(&eb), b.as_bytes());
    assert_eq!(ea == eb, a == b, "enc not injective on {a:?} / {b:?}");
    check_hashing(&a, &ea);
    check_hashing(&b, &eb);
}

// --- redirect ---------------------------------------------------------------------------------

fn usable(addr: &NodeAddr) {
    assert!(!addr.host.is_empty() && addr.host != "?");
    assert_ne!(addr.port, 0);
    // The printed form parses back to the same address.
    assert_eq!(NodeAddr::parse(&addr.to_string(), "x").as_ref(), Some(addr));
}

/// `redirect`: `MOVED`/`ASK` texts, `host:port` endpoints and `redis://` URLs (input: a text,
/// the host of the answering node, a slot). Nothing panics; whatever is accepted is usable (a
/// slot below 16384, a non-empty host, a non-zero port).
pub fn redirect(data: &[u8]) {
    let Some((text, host, slot)) = decode::<(String, String, u16)>(data) else {
        return;
    };
    for candidate in [
        text.clone(),
        format!("MOVED {slot} {text}"),
        format!("ASK {} {text}", slot % SLOT_COUNT),
    ] {
        let error = ServerError::new(candidate);
        match parse_redirect(&error, &host) {
            Some(Redirect::Moved { slot, addr } | Redirect::Ask { slot, addr }) => {
                assert!(slot < SLOT_COUNT);
                if !host.is_empty() && host != "?" && !host.contains(['[', ']']) {
                    usable(&addr);
                }
            }
            None => {}
        }
        if let Decision::Moved { slot, .. } = classify(&error, &host) {
            assert!(slot < SLOT_COUNT);
        }
    }
    if let Some(addr) = NodeAddr::parse(&text, "fallback") {
        assert!(!addr.host.is_empty());
        assert_ne!(addr.port, 0);
    }
    match parse_url(&text).map(|url| url.target) {
        Ok(DialTarget::Tcp(addr)) => {
            assert!(!addr.host.is_empty());
            assert_ne!(addr.port, 0);
        }
        Ok(DialTarget::Unix(path)) => assert!(path.is_absolute()),
        Err(_) => {}
    }
}

// --- resp_reply -------------------------------------------------------------------------------

fn read_every_way(value: &Value) {
    let _ = value.as_i64();
    let _ = value.clone().into_opt_bytes();
    let _ = value.clone().into_string();
    let _ = value.expect_ok();
    let _ = parse_cluster_slots(value, "h");
    if let Ok(items) = value.clone().into_array() {
        items.iter().for_each(read_every_way);
    }
}

fn drain(session: &mut Session<Tickets>, done: &mut usize) -> Option<Instant> {
    for _ in 0..10_000 {
        match session.poll() {
            Output::Complete(completion) => {
                *done += 1;
                completion.deliver();
            }
            Output::Wait { until, .. } => return until,
            _ => {}
        }
    }
    panic!("no Wait after 10000 outputs");
}

/// `resp_reply`: the input decoded frame by frame as the session does, each frame read with
/// every accessor and as a topology answer; then the same bytes, cut at a point the first byte
/// picks, are the replies a single-node session gets to a handshake and three pipelined
/// requests. No panic, no busy loop, the plan completes exactly once.
pub fn resp_reply(data: &[u8]) {
    let mut buf = BytesMut::from(data);
    while let Ok(Some((frame, _, _))) = redis_protocol::resp2::decode::decode_bytes_mut(&mut buf) {
        if let Ok(value) = from_frame(frame) {
            read_every_way(&value);
        }
    }

    let now = start();
    let mut config = Config::single(NodeAddr::new("127.0.0.1", 7000));
    config.max_read_buffer = 4096;
    let mut session = Session::new(config, now);
    let mut done = 0;
    session.submit(
        now,
        Ticket::new(Token(1)),
        Batch::new(vec![get("a"), incr("b"), get("c")]),
    );
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
}

// --- session ----------------------------------------------------------------------------------

#[derive(Arbitrary, Debug)]
struct SessionCase {
    cluster: bool,
    short: bool,
    inputs: Vec<Input>,
}

/// `session`: the bare session under arbitrary driver inputs (the first 80), single node or
/// cluster, normal or degenerate durations, with the invariants of [`BareSession`]: no panic, no
/// busy loop, each plan completed at most once, every plan completed on `close()`.
pub fn session(data: &[u8]) {
    let Some(case) = decode::<SessionCase>(data) else {
        return;
    };
    let mut d = BareSession::new(config(case.cluster, case.short), start());
    for input in case.inputs.iter().take(80) {
        d.apply(input);
    }
    d.close_and_check();
}

// --- session_model ----------------------------------------------------------------------------

#[derive(Arbitrary, Debug)]
struct ModelCase {
    seed: u64,
    /// A pause, a fault, and the writes submitted after it: `n % 4 + 1` of them, given up by
    /// their caller ([`Model::abandon_last`]) when `n`'s top bit is set.
    steps: Vec<(u16, Fault, u8)>,
}

/// `session_model`: the session against a simulated 3-master cluster under arbitrary faults (the
/// first 10 steps), checked by [`Model`]: a success ran once, an unknown outcome at most once,
/// any other error not at all, a batch given up unwritten nowhere, a read is never reported
/// lost, and every master serves again once the faults heal.
pub fn session_model(data: &[u8]) {
    let Some(case) = decode::<ModelCase>(data) else {
        return;
    };
    if case.steps.is_empty() {
        return;
    }
    let sim = SimCluster::cluster(3, 2);
    let mut config = Config::cluster(sim.masters());
    config.seed = case.seed;
    let mut h = Harness::new(start(), sim, config);
    let mut model = Model::default();
    for (pause, fault, n) in case.steps.iter().take(10) {
        inject(&mut h, fault);
        model.submit(&mut h, *n);
        if n & 0x80 != 0 {
            model.abandon_last();
        }
        h.run_for(Duration::from_millis(u64::from(pause % 400)));
    }
    model.check(&mut h);
}

// --- slot_map ---------------------------------------------------------------------------------

/// A reply tree, biased toward the shapes topology replies have.
#[derive(Arbitrary, Debug)]
enum Tree {
    Nil,
    Int(i64),
    Slot(u16),
    Port(u16),
    Text(String),
    Word(Word),
    Array(Vec<Tree>),
}

#[derive(Arbitrary, Debug)]
enum Word {
    Slots,
    Nodes,
    Port,
    Ip,
    Endpoint,
    Role,
    Master,
    Replica,
    Health,
    Online,
    Question,
    Empty,
    Localhost,
}

fn tree_value(tree: &Tree) -> Value {
    match tree {
        Tree::Nil => Value::Nil,
        Tree::Int(i) => Value::Int(*i),
        Tree::Slot(s) => Value::Int(i64::from(*s % (SLOT_COUNT + 2))),
        Tree::Port(p) => Value::Int(i64::from(*p)),
        Tree::Text(t) => Value::from(t.as_str()),
        Tree::Word(w) => Value::from(match w {
            Word::Slots => "slots",
            Word::Nodes => "nodes",
            Word::Port => "port",
            Word::Ip => "ip",
            Word::Endpoint => "endpoint",
            Word::Role => "role",
            Word::Master => "master",
            Word::Replica => "replica",
            Word::Health => "health",
            Word::Online => "online",
            Word::Question => "?",
            Word::Empty => "",
            Word::Localhost => "127.0.0.1",
        }),
        Tree::Array(items) => Value::Array(items.iter().map(tree_value).collect()),
    }
}

fn check_topology(topo: &Topology) {
    assert!(topo.coverage() <= usize::from(SLOT_COUNT));
    for shard in &topo.shards {
        assert!(!shard.master.host.is_empty() && shard.master.host != "?");
        assert_ne!(shard.master.port, 0);
        for &(start, end) in &shard.ranges {
            assert!(start <= end && end < SLOT_COUNT);
        }
    }
}

/// `slot_map`: arbitrary reply trees (biased toward topology shapes) as `CLUSTER SLOTS`
/// answers. Parsing never panics, and an accepted answer names only valid
/// slots and usable addresses.
pub fn slot_map(data: &[u8]) {
    let Some(tree) = decode::<Tree>(data) else {
        return;
    };
    let reply = tree_value(&tree);
    if let Ok(topo) = parse_cluster_slots(&reply, "10.0.0.1") {
        check_topology(&topo);
    }
}
