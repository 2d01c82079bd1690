//! The core's slot function (`keys::slot`, and so `Key::slot`) agrees with the server's
//! `CLUSTER KEYSLOT` on 10,000 random keys rich in hash-tag corner cases: `{tag}`, empty `{}`,
//! nested and unbalanced braces, multi-byte UTF-8 and bytes that are not UTF-8 at all.

use botmesh_redis_core::keys;
use botmesh_redis_tests::counters::Rng;
use botmesh_redis_tests::{shared_cluster, Value};
use botmesh_redis_tokio::Key;

/// Fixed, so that a failure names a reproducible key.
const SEED: u64 = 0x5107_0fce;
const RANDOM_KEYS: usize = 10_000;

/// Pieces a random key is glued from: braces are frequent on purpose.
const PIECES: &[&[u8]] = &[
    b"{",
    b"}",
    b"{}",
    b"{{",
    b"}}",
    b"a",
    b"user1000",
    b":",
    b"m:",
    b"%7B",
    b" ",
    b"\0",
    b"\xff",
    b"\xc3\xa9",         // é
    b"\xe4\xb8\xad",     // 中
    b"\xf0\x9f\x98\x80", // 😀
    b"\xf0\x9f",         // a cut 4-byte sequence
    b"*?[]\\",
];

fn random_piece(rng: &mut Rng, key: &mut Vec<u8>) {
    if rng.below(4) == 0 {
        // A random byte, any value.
        key.push(rng.next_u64() as u8);
    } else {
        key.extend_from_slice(PIECES[rng.below(PIECES.len())]);
    }
}

fn random_pieces(rng: &mut Rng, max: usize, key: &mut Vec<u8>) {
    for _ in 0..rng.below(max + 1) {
        random_piece(rng, key);
    }
}

/// Half the keys are free-form; the other half have the shape `prefix{tag}suffix`, where each
/// part (the tag too) may be empty or hold more braces.
fn random_key(rng: &mut Rng) -> Vec<u8> {
    let mut key = Vec::new();
    if rng.below(2) == 0 {
        random_pieces(rng, 8, &mut key);
    } else {
        random_pieces(rng, 3, &mut key);
        key.push(b'{');
        random_pieces(rng, 3, &mut key);
        key.push(b'}');
        random_pieces(rng, 3, &mut key);
    }
    key
}

/// Keys whose slot is easy to get wrong, besides the random ones.
fn corner_cases() -> Vec<Vec<u8>> {
    [
        &b""[..],
        b"{",
        b"}",
        b"{}",
        b"{}{}",
        b"{}a",
        b"a{}",
        b"foo{}{bar}",
        b"foo{{bar}}zap",
        b"foo{bar}{zap}",
        b"{user1000}.following",
        b"}{user1000}",
        b"{{}}",
        b"{a{b}c}",
        b"{\xf0\x9f\x98\x80}x",
        b"{\xff\xfe}",
        b"bot:{m:chat-1}:z",
        b"bot:{m:chat-1}:i:m1",
        b"123456789",
    ]
    .iter()
    .map(|k| k.to_vec())
    .collect()
}

#[test]
fn core_slot_equals_cluster_keyslot_for_random_keys() {
    // Beside the other tests, not beside the binary's exclusive ones (see `conformance`).
    let _turn = botmesh_redis_tests::conformance::shared_turn_blocking();
    let cluster = shared_cluster();
    let mut rng = Rng::new(SEED);
    let mut all = corner_cases();
    all.extend((0..RANDOM_KEYS).map(|_| random_key(&mut rng)));
    let with_tags = all.iter().filter(|k| keys::hash_tag(k).is_some()).count();
    let empty_tags = all
        .iter()
        .filter(|k| k.windows(2).any(|w| w == b"{}"))
        .count();
    // The generator must really exercise both kinds of braces.
    assert!(with_tags > 2_000, "only {with_tags} keys have a hash tag");
    assert!(
        empty_tags > 1_000,
        "only {empty_tags} keys have an empty {{}}"
    );

    let mut conn = cluster.conn(cluster.nodes()[0]).unwrap();
    let mut mismatches = Vec::new();
    for chunk in all.chunks(1_000) {
        let commands: Vec<[&[u8]; 3]> = chunk
            .iter()
            .map(|k| [&b"CLUSTER"[..], b"KEYSLOT", k.as_slice()])
            .collect();
        let replies = conn.pipeline(&commands).unwrap();
        assert_eq!(replies.len(), chunk.len());
        for (key, reply) in chunk.iter().zip(replies) {
            let Value::Int(server) = reply else {
                panic!(
                    "CLUSTER KEYSLOT {:?}: {reply:?}",
                    key.escape_ascii().to_string()
                );
            };
            let core = keys::slot(key);
            let wrapped = Key::new(key.clone()).slot();
            if i64::from(core) != server || wrapped != core {
                mismatches.push(format!(
                    "{:?}: server {server}, keys::slot {core}, Key::slot {wrapped}",
                    key.escape_ascii().to_string()
                ));
            }
        }
    }
    assert!(
        mismatches.is_empty(),
        "seed {SEED:#x}: {} of {} keys disagree, e.g. {:?}",
        mismatches.len(),
        all.len(),
        &mismatches[..mismatches.len().min(10)]
    );
}
