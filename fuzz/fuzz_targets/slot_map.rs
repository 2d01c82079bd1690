//! Fuzzes topology parsing: arbitrary reply trees as `CLUSTER SLOTS` and `CLUSTER SHARDS`
//! answers. Parsing never panics, and an accepted answer only names valid slots and usable
//! addresses.
//!
//! The body is `botmesh_redis_core::testing::fuzz::slot_map`, shared with the replay of the
//! committed corpus in `core/tests/fuzz_corpora.rs`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| botmesh_redis_core::testing::fuzz::slot_map(data));
