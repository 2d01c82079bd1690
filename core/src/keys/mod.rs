//! The key layout contract: the `cluster:v1` primitives (segment encoding, hash tags, CRC16
//! slots, FNV-1a buckets) and the names of the record kinds and turn parts.
//!
//! Every key of every namespace, in both layouts, is a method of
//! [`Keyspace`] (`layout.rs`), built on the primitives of `encoding.rs`;
//! `docs/key-layout.md` states the contract with test vectors. Nothing outside this module
//! formats a key name. The module depends on nothing else of the crate, so everything may
//! import it.

pub(crate) mod encoding;
pub(crate) mod layout;
pub(crate) mod lifecycle;

pub use encoding::{bucket, enc, glob_escape, hash_tag, slot, BUCKET_COUNT, SLOT_COUNT};
// `Key` is at the crate root, with the requests that carry it.
pub(crate) use encoding::{enc_bytes, Key};
pub use layout::{RecordKind, TurnPart, CLUSTER_V1};
// `Keyspace`, `Layout` and the errors of a prefix or a layout name are at the crate root.
pub(crate) use layout::{KeyError, Keyspace, Layout};
