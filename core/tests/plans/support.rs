//! What every plan family shares: the hostile ids, a keyspace per layout, reply builders.

use bytes::Bytes;

use botmesh_redis_core::driver::Reply;
use botmesh_redis_core::testing::{both_layouts, NASTY_IDS};
use botmesh_redis_core::{Keyspace, Layout, Value};

pub(crate) const NASTY: &[&str] = NASTY_IDS;

/// A keyspace with the prefix `bot` in each layout.
pub(crate) fn both() -> [(Layout, Keyspace); 2] {
    both_layouts("bot").unwrap()
}

pub(crate) fn keyspace(layout: Layout) -> Keyspace {
    Keyspace::new(layout, "bot").unwrap()
}

pub(crate) fn bulk(s: &str) -> Value {
    Value::from(s)
}

pub(crate) fn arr(items: Vec<Value>) -> Value {
    Value::Array(items)
}

pub(crate) fn status_ok() -> Reply {
    Ok(Value::Status(Bytes::from_static(b"OK")))
}
