//! Fuzzes topology parsing: arbitrary reply trees as `CLUSTER SLOTS` and `CLUSTER SHARDS`
//! answers. Parsing never panics, and an accepted answer only names valid slots and usable
//! addresses.
#![no_main]

use botmesh_redis_core::keys::SLOT_COUNT;
use botmesh_redis_core::topology::{parse_cluster_shards, parse_cluster_slots, Topology};
use botmesh_redis_core::Value;
use libfuzzer_sys::arbitrary::{self, Arbitrary};
use libfuzzer_sys::fuzz_target;

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

fn value(tree: &Tree) -> Value {
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
        Tree::Array(items) => Value::Array(items.iter().map(value).collect()),
    }
}

fn check(topo: &Topology) {
    assert!(topo.coverage() <= usize::from(SLOT_COUNT));
    for shard in &topo.shards {
        assert!(!shard.master.host.is_empty() && shard.master.host != "?");
        assert_ne!(shard.master.port, 0);
        for &(start, end) in &shard.ranges {
            assert!(start <= end && end < SLOT_COUNT);
        }
    }
}

fuzz_target!(|tree: Tree| {
    let reply = value(&tree);
    if let Ok(topo) = parse_cluster_slots(&reply, "10.0.0.1") {
        check(&topo);
    }
    if let Ok(topo) = parse_cluster_shards(&reply, "10.0.0.1") {
        check(&topo);
    }
});
